//! Creating a Pod as a kubelet's node would run it: the plan (every field it cannot honour
//! named), the checks made before anything exists (claims, images), then the engine objects
//! in the kubelet's order (Pod cgroup, volumes, the infra container applying fsGroup, init
//! containers, containers), rolled back by the Pod's UID when a step fails.

use super::backend::{LOCAL_NAMESPACE, LocalBackend};
use super::engine::other;
use super::plan::{self, LABEL_ROLE, PlanContext, PodPlan, VolumeKind};
use super::{pods, workspaces};
use crate::backend::{BackendError, PodRef, Result};
use crate::host::is_not_found;
use crate::node::CgroupLimits;
use crate::wait;
use anyhow::anyhow;
use bollard::models::VolumeCreateRequest;
use bollard::query_parameters::{InspectContainerOptions, StartContainerOptions};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;
use std::time::Duration;

/// A helper Pod runs like any other here: the local backend compares nothing.
pub(super) async fn create_helper(backend: &LocalBackend, pod: &Pod) -> Result<PodRef> {
    crate::backend::check_helper_labels(pod)?;
    create(backend, pod).await
}

/// Creates and starts a Kandev task Pod.
pub(super) async fn create(backend: &LocalBackend, pod: &Pod) -> Result<PodRef> {
    // A composed Pod has no UID (an API server assigns it): a fresh one. A test's API
    // server double that runs its Pods here passes the UID it assigned, so that the Pod's
    // cgroup (`pod<uid>`) is the one its clients know.
    let uid = pod
        .metadata
        .uid
        .clone()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let name = pod.metadata.name.clone().unwrap_or_default();
    if pods::uid(backend, &name).await?.is_some() {
        return Err(BackendError::Create {
            what: "pod",
            name,
            source: anyhow!("a Pod of that name already exists"),
        });
    }
    let ctx = PlanContext {
        uid: uid.clone(),
        infra_image: backend.infra_image.clone(),
        infra_command: vec!["/kandev-mock-agent".into(), "pause".into()],
        pod_pids_limit: backend.pod_pids_limit,
        pod_network: backend.pod_network.clone(),
        node_hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default(),
        // The engine's node memory (a kubelet's OOM scores are shares of it); unknown: none.
        node_memory_bytes: backend
            .objects
            .docker
            .info()
            .await
            .ok()
            .and_then(|info| info.mem_total)
            .unwrap_or(0),
    };
    let plan = plan::plan(pod, &ctx).map_err(|problems| {
        let fields: Vec<String> = problems
            .iter()
            .map(|p| format!("{} ({})", p.field, p.reason))
            .collect();
        BackendError::UnsupportedField {
            field: fields.join("; "),
            reason: "remove or change these fields for the local backend".into(),
        }
    })?;
    // A claim the Pod names must exist (a kubelet's node never gets a Pod whose claim is
    // missing: the scheduler keeps it Pending, naming the claim); the engine would
    // otherwise create an empty volume of that name.
    for volume in &plan.volumes {
        if matches!(volume.kind, VolumeKind::Claim { .. })
            && workspaces::get(backend, &volume.source).await?.is_none()
        {
            return Err(BackendError::CannotStart {
                pod: name,
                cause: format!(
                    "persistentvolumeclaim \"{}\" not found (volume {})",
                    volume.source, volume.name
                ),
            });
        }
    }
    for c in plan
        .init_containers
        .iter()
        .chain(&plan.containers)
        .chain(std::iter::once(&plan.infra))
    {
        check_image(backend, &c.image, c.require_non_root_image_user, &c.name).await?;
    }
    let pod_ref = PodRef {
        namespace: LOCAL_NAMESPACE.into(),
        name,
        uid: uid.clone(),
    };
    // Recorded before anything of the Pod is made: dropped half way, the create leaves its
    // UID for the next sweep.
    let unfinished = Unfinished {
        backend,
        uid: Some(uid.clone()),
        labels: pod.metadata.labels.clone().unwrap_or_default(),
    };
    if let Err(e) = materialize(backend, &plan).await {
        // Roll back exactly what this attempt created (by UID), then report the cause.
        if let Err(rollback) = backend.objects.remove_pod_objects(&uid).await {
            tracing::warn!(error = %rollback, "rollback of a failed Pod create");
        }
        unfinished.finished();
        return Err(e);
    }
    unfinished.finished();
    let mut given = pod.clone();
    given.metadata.uid = Some(uid.clone());
    given.metadata.namespace = Some(LOCAL_NAMESPACE.into());
    backend
        .given
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(uid, given);
    Ok(pod_ref)
}

/// A Pod create under way: dropped before [`Unfinished::finished`] (its future cancelled),
/// it records the Pod's UID as abandoned, for the next sweep to remove what was made of it.
struct Unfinished<'a> {
    backend: &'a LocalBackend,
    uid: Option<String>,
    /// The Pod's labels: the sweep that selects them removes what was made.
    labels: std::collections::BTreeMap<String, String>,
}

impl Unfinished<'_> {
    /// The create ended (made, or failed and rolled back): nothing to record.
    fn finished(mut self) {
        self.uid = None;
    }
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if let Some(uid) = self.uid.take() {
            self.backend
                .abandoned
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(uid, std::mem::take(&mut self.labels));
        }
    }
}

/// The image is in the engine (nothing is pulled) and, where the container must not run as
/// root and names no user, its own user is not root (the kubelet refuses it otherwise).
async fn check_image(
    backend: &LocalBackend,
    image: &str,
    require_non_root: bool,
    container: &str,
) -> Result<()> {
    let inspect = match backend.objects.docker.inspect_image(image).await {
        Ok(i) => i,
        Err(e) if is_not_found(&e) => {
            return Err(BackendError::ImageMissing {
                image: image.into(),
            });
        }
        Err(e) => return Err(other(format!("inspect image {image}"), e)),
    };
    if require_non_root {
        let user = inspect.config.and_then(|c| c.user).unwrap_or_default();
        let uid = user.split(':').next().unwrap_or("");
        if uid.is_empty() || uid == "0" || uid == "root" {
            return Err(BackendError::UnsupportedField {
                field: format!("container {container} securityContext.runAsNonRoot"),
                reason: format!(
                    "image {image} runs as root ({user:?}) and no runAsUser is set; the kubelet refuses to start it"
                ),
            });
        }
    }
    Ok(())
}

/// Creates and starts one planned container.
async fn create_and_start(backend: &LocalBackend, container: &plan::ContainerPlan) -> Result<()> {
    let options = bollard::query_parameters::CreateContainerOptionsBuilder::default()
        .name(&container.engine_name)
        .build();
    backend
        .objects
        .docker
        .create_container(Some(options), container.body.clone())
        .await
        .map_err(|e| BackendError::Create {
            what: "container",
            name: container.engine_name.clone(),
            source: e.into(),
        })?;
    backend
        .objects
        .docker
        .start_container(&container.engine_name, None::<StartContainerOptions>)
        .await
        .map_err(|e| BackendError::Create {
            what: "container (start)",
            name: container.engine_name.clone(),
            source: e.into(),
        })
}

/// Creates and starts `container`, then waits until it prints `line` on stdout (attached
/// before the start, so nothing is missed); fails with its output if it ends first.
async fn create_start_and_await(
    backend: &LocalBackend,
    container: &plan::ContainerPlan,
    line: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    let docker = &backend.objects.docker;
    let options = bollard::query_parameters::CreateContainerOptionsBuilder::default()
        .name(&container.engine_name)
        .build();
    docker
        .create_container(Some(options), container.body.clone())
        .await?;
    let attach = bollard::query_parameters::AttachContainerOptionsBuilder::default()
        .stream(true)
        .stdout(true)
        .stderr(true)
        .build();
    let mut attached = docker
        .attach_container(&container.engine_name, Some(attach))
        .await?;
    docker
        .start_container(&container.engine_name, None::<StartContainerOptions>)
        .await?;
    let mut seen = Vec::new();
    let wait = async {
        while let Some(chunk) = attached.output.next().await {
            seen.extend_from_slice(&chunk?.into_bytes());
            if String::from_utf8_lossy(&seen).lines().any(|l| l == line) {
                return anyhow::Ok(true);
            }
        }
        Ok(false)
    };
    match tokio::time::timeout(timeout, wait).await {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err(anyhow!(
            "{} ended before saying {line:?}: {}",
            container.engine_name,
            String::from_utf8_lossy(&seen).trim()
        )),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(anyhow!(
            "{} did not say {line:?} within {timeout:?}",
            container.engine_name
        )),
    }
}

/// The plan's engine objects, in the kubelet's order.
async fn materialize(backend: &LocalBackend, plan: &PodPlan) -> Result<()> {
    let cgroups = backend.objects.cgroups.as_ref().ok_or_else(|| BackendError::UnsupportedField {
        field: "the Pod-level cgroup".into(),
        reason: "no cgroup filesystem at /sys/fs/cgroup; run the local backend as root on the engine's host".into(),
    })?;
    cgroups
        .create_pod(
            &plan.cgroup.relative_path,
            &CgroupLimits {
                memory_bytes: plan.cgroup.memory_bytes,
                cpu_millis: plan.cgroup.cpu_millis,
                pids: plan.cgroup.pids,
            },
        )
        .map_err(|e| BackendError::Create {
            what: "pod cgroup",
            name: plan.cgroup.relative_path.clone(),
            source: e.into(),
        })?;

    for volume in &plan.volumes {
        match &volume.kind {
            VolumeKind::EmptyDir { memory, size_limit } => {
                let mut labels = plan.labels.clone();
                labels.insert(LABEL_ROLE.into(), "empty-dir".into());
                let driver_opts = memory.then(|| {
                    let mut o = HashMap::from([
                        ("type".to_owned(), "tmpfs".to_owned()),
                        ("device".to_owned(), "tmpfs".to_owned()),
                    ]);
                    if let Some(size) = size_limit {
                        o.insert("o".into(), format!("size={size}"));
                    }
                    o
                });
                let request = VolumeCreateRequest {
                    name: Some(volume.source.clone()),
                    driver: Some("local".into()),
                    driver_opts,
                    labels: Some(labels),
                    ..Default::default()
                };
                backend
                    .objects
                    .docker
                    .create_volume(request)
                    .await
                    .map_err(|e| BackendError::Create {
                        what: "emptyDir volume",
                        name: volume.source.clone(),
                        source: e.into(),
                    })?;
            }
            VolumeKind::Claim { .. } => {
                if let Err(e) = backend.objects.docker.inspect_volume(&volume.source).await {
                    return Err(BackendError::Create {
                        what: "pod (claim lookup)",
                        name: volume.source.clone(),
                        source: anyhow!(
                            "persistentVolumeClaim {} does not exist: {e}",
                            volume.source
                        ),
                    });
                }
            }
            VolumeKind::HostPath { path, create } => {
                // As the kubelet: create what the type asks for, on the engine's host.
                let path = std::path::Path::new(path);
                let created = match create {
                    Some(plan::HostPathCreate::Directory) => std::fs::create_dir_all(path),
                    Some(plan::HostPathCreate::File) if !path.exists() => std::fs::write(path, b""),
                    _ => Ok(()),
                };
                created.map_err(|e| BackendError::Create {
                    what: "hostPath",
                    name: path.display().to_string(),
                    source: e.into(),
                })?;
            }
        }
    }

    match plan.fs_group {
        // The infra container applies fsGroup to the volumes before it pauses (one
        // process instead of an exec); the Pod's other containers start once it has.
        Some(gid) => {
            let mut infra = plan.infra.clone();
            let cmd = infra.body.cmd.get_or_insert_default();
            cmd.extend(["--fsgroup".to_owned(), gid.to_string()]);
            cmd.extend(
                plan.volumes
                    .iter()
                    .filter(|v| !matches!(v.kind, VolumeKind::HostPath { .. }))
                    .map(|v| format!("{}/{}", plan::INFRA_VOLUME_ROOT, v.name)),
            );
            create_start_and_await(backend, &infra, "fsgroup applied", Duration::from_secs(120))
                .await
                .map_err(|e| other("apply fsGroup", e))?;
        }
        None => create_and_start(backend, &plan.infra).await?,
    }
    for init in &plan.init_containers {
        create_and_start(backend, init).await?;
        let code = wait_exit(backend, &init.engine_name, Duration::from_secs(600)).await?;
        if code != 0 {
            return Err(other(
                format!("init container {}", init.name),
                anyhow!("exited with {code}"),
            ));
        }
    }
    for container in &plan.containers {
        create_and_start(backend, container).await?;
    }
    Ok(())
}

/// Waits until the engine container `name` has exited; its exit code.
async fn wait_exit(backend: &LocalBackend, name: &str, timeout: Duration) -> Result<i64> {
    let what = format!("{name} to exit");
    wait::until(&what, timeout, Duration::from_millis(200), || async {
        let inspect = backend
            .objects
            .docker
            .inspect_container(name, None::<InspectContainerOptions>)
            .await
            .map_err(|e| other(format!("inspect {name}"), e))?;
        let state = inspect.state.unwrap_or_default();
        Ok((state.running != Some(true)).then(|| state.exit_code.unwrap_or(-1)))
    })
    .await
}
