//! The `local` backend: a Docker engine (bollard) runs a composed Pod with Pod semantics.
//! See [`plan`] for the mapping; this module talks to the engine and the host cgroup tree.

pub mod attach;
pub mod objects;
pub mod plan;
pub mod setup;
mod tunnel;

use objects::LocalObjects;

use super::{
    Backend, BackendError, ContainerState, ExecOutput, ExecRequest, HostSharing, PodRef, Result,
    WorkspaceRef,
};
use crate::host::is_not_found;
use crate::node::{CgroupFs, CgroupLimits};
use crate::wait;
use anyhow::anyhow;
use async_trait::async_trait;
use bollard::Docker;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use bollard::models::{ContainerInspectResponse, VolumeCreateRequest};
use bollard::query_parameters::{
    InspectContainerOptions, LogsOptionsBuilder, StartContainerOptions,
};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use plan::{
    LABEL_CONTAINER, LABEL_POD, LABEL_POD_UID, LABEL_ROLE, PlanContext, PodPlan, VolumeKind,
};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

pub use setup::LOCAL_NAMESPACE;
const MAX_LOG_BYTES: usize = 1 << 20;

pub struct LocalBackend {
    objects: LocalObjects,
    infra_image: String,
    /// Port-forward tunnels into the Pods, one per Pod.
    tunnels: tunnel::Tunnels,
    pod_pids_limit: i64,
    /// The engine network Pods join (`bridge` unless [`LocalBackend::on_network`]).
    pod_network: String,
    /// Each Pod as it was given (by UID), for [`Backend::pod_object`].
    given: std::sync::Mutex<HashMap<String, Pod>>,
}

pub(super) fn other(
    operation: impl Into<String>,
    source: impl Into<anyhow::Error>,
) -> BackendError {
    BackendError::Other {
        operation: operation.into(),
        source: source.into(),
    }
}

pub(super) fn label_filter(pairs: &[(&str, &str)]) -> HashMap<String, Vec<String>> {
    HashMap::from([(
        "label".to_owned(),
        pairs.iter().map(|(k, v)| format!("{k}={v}")).collect(),
    )])
}

/// The engine name of `container` of `pod`, once it is verified to carry the Pod's UID
/// (never act on a look-alike).
pub(super) async fn verified_container(
    docker: &Docker,
    pod: &PodRef,
    container: &str,
) -> Result<String> {
    let name = LocalBackend::engine_name(pod, container);
    let inspect = docker
        .inspect_container(&name, None::<InspectContainerOptions>)
        .await
        .map_err(|e| {
            if is_not_found(&e) {
                other(
                    format!("find container {container} of Pod {}", pod.name),
                    anyhow!("no such container"),
                )
            } else {
                other(format!("inspect {name}"), e)
            }
        })?;
    let uid = inspect
        .config
        .and_then(|c| c.labels)
        .and_then(|l| l.get(LABEL_POD_UID).cloned())
        .unwrap_or_default();
    if uid != pod.uid {
        return Err(BackendError::UidMismatch {
            what: "pod",
            name: pod.name.clone(),
            expected: pod.uid.clone(),
            found: uid,
        });
    }
    Ok(name)
}

impl LocalBackend {
    /// `infra_image` runs `infra_command` (`pause`) and applies fsGroup (`fsgroup`).
    pub fn new(docker: Docker, infra_image: String, pod_pids_limit: i64) -> Self {
        Self {
            objects: LocalObjects::new(docker),
            infra_image,
            tunnels: tunnel::Tunnels::default(),
            pod_pids_limit,
            pod_network: "bridge".into(),
            given: std::sync::Mutex::default(),
        }
    }

    /// Pods join the engine network `name` (a run's network with the Pod MTU) instead of the
    /// engine's default bridge.
    pub fn on_network(mut self, name: &str) -> Self {
        name.clone_into(&mut self.pod_network);
        self
    }

    pub fn cgroups(&self) -> Option<&CgroupFs> {
        self.objects.cgroups.as_ref()
    }

    fn engine_name(pod: &PodRef, container: &str) -> String {
        format!("{}-{container}", pod.name)
    }

    async fn check_image(
        &self,
        image: &str,
        require_non_root: bool,
        container: &str,
    ) -> Result<()> {
        let inspect = match self.objects.docker.inspect_image(image).await {
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

    async fn create_and_start(&self, container: &plan::ContainerPlan) -> Result<()> {
        let options = bollard::query_parameters::CreateContainerOptionsBuilder::default()
            .name(&container.engine_name)
            .build();
        self.objects
            .docker
            .create_container(Some(options), container.body.clone())
            .await
            .map_err(|e| BackendError::Create {
                what: "container",
                name: container.engine_name.clone(),
                source: e.into(),
            })?;
        self.objects
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
        &self,
        container: &plan::ContainerPlan,
        line: &str,
        timeout: Duration,
    ) -> anyhow::Result<()> {
        let docker = &self.objects.docker;
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

    async fn exec_in(
        &self,
        engine_name: &str,
        argv: Vec<String>,
        stdin: Option<Vec<u8>>,
        timeout: Duration,
    ) -> anyhow::Result<ExecOutput> {
        let started = Instant::now();
        let created = self
            .objects
            .docker
            .create_exec(
                engine_name,
                CreateExecOptions {
                    cmd: Some(argv),
                    attach_stdin: Some(stdin.is_some()),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    ..Default::default()
                },
            )
            .await?;
        let run = async {
            let mut out = ExecOutput::default();
            let options = StartExecOptions {
                detach: false,
                tty: false,
                output_capacity: Some(1 << 20),
            };
            if let StartExecResults::Attached {
                mut output,
                mut input,
            } = self
                .objects
                .docker
                .start_exec(&created.id, Some(options))
                .await?
            {
                if let Some(bytes) = stdin {
                    input.write_all(&bytes).await?;
                    input.flush().await?;
                    input.shutdown().await?;
                }
                while let Some(chunk) = output.next().await {
                    match chunk? {
                        LogOutput::StdOut { message } | LogOutput::Console { message } => {
                            out.stdout.extend_from_slice(&message)
                        }
                        LogOutput::StdErr { message } => out.stderr.extend_from_slice(&message),
                        LogOutput::StdIn { .. } => {}
                    }
                }
            }
            anyhow::Ok(out)
        };
        let mut out = tokio::time::timeout(timeout, run)
            .await
            .map_err(|_| anyhow!("no exit within {timeout:?}"))??;
        // The stream can end a moment before the engine records the exit code.
        for _ in 0..50 {
            let inspect = self.objects.docker.inspect_exec(&created.id).await?;
            if inspect.running != Some(true) {
                out.exit_code = inspect.exit_code;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        out.duration = started.elapsed();
        Ok(out)
    }

    /// Verifies that `container` of `pod` carries the Pod's UID (never act on a look-alike).
    /// The engine's inspection of every container `selector` matches, with its Pod container
    /// name (empty for the infra container, which has none).
    async fn inspected(
        &self,
        selector: &[(&str, &str)],
    ) -> Result<Vec<(String, ContainerInspectResponse)>> {
        let mut found = Vec::new();
        for c in self.objects.containers_with(selector).await? {
            let Some(id) = c.id.as_deref() else { continue };
            let inspect = self
                .objects
                .docker
                .inspect_container(id, None::<InspectContainerOptions>)
                .await
                .map_err(|e| other("inspect container", e))?;
            let name = c
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_CONTAINER))
                .cloned()
                .unwrap_or_default();
            found.push((name, inspect));
        }
        Ok(found)
    }

    async fn verified_name(&self, pod: &PodRef, container: &str) -> Result<String> {
        verified_container(&self.objects.docker, pod, container).await
    }

    async fn materialize(&self, plan: &PodPlan) -> Result<()> {
        let cgroups = self.objects.cgroups.as_ref().ok_or_else(|| BackendError::UnsupportedField {
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
                    self.objects
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
                    if let Err(e) = self.objects.docker.inspect_volume(&volume.source).await {
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
                        Some(plan::HostPathCreate::File) if !path.exists() => {
                            std::fs::write(path, b"")
                        }
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
                self.create_start_and_await(&infra, "fsgroup applied", Duration::from_secs(120))
                    .await
                    .map_err(|e| other("apply fsGroup", e))?;
            }
            None => self.create_and_start(&plan.infra).await?,
        }
        for init in &plan.init_containers {
            self.create_and_start(init).await?;
            let code = self
                .wait_exit(&init.engine_name, Duration::from_secs(600))
                .await?;
            if code != 0 {
                return Err(other(
                    format!("init container {}", init.name),
                    anyhow!("exited with {code}"),
                ));
            }
        }
        for container in &plan.containers {
            self.create_and_start(container).await?;
        }
        Ok(())
    }

    async fn wait_exit(&self, name: &str, timeout: Duration) -> Result<i64> {
        let what = format!("{name} to exit");
        wait::until(&what, timeout, Duration::from_millis(200), || async {
            let inspect = self
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
}

#[async_trait]
impl Backend for LocalBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    fn keep_hint(&self, pod: &PodRef, container: &str) -> String {
        format!("docker exec -it {} sh", Self::engine_name(pod, container))
    }

    fn unenforced(&self, pod: &Pod) -> Vec<String> {
        plan::unenforced(pod)
    }

    fn plumbing_listeners(&self) -> Vec<(String, &'static str)> {
        if self.pod_network == "bridge" {
            return Vec::new();
        }
        // The engine's embedded DNS resolver serves every user-defined network from inside
        // the container's namespace; on a cluster, DNS is outside the Pod.
        vec![(
            "127.0.0.11".to_owned(),
            "the engine's embedded DNS resolver of the run's Pod network",
        )]
    }

    async fn create_workspace(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<WorkspaceRef> {
        let uid = uuid::Uuid::new_v4().to_string();
        let mut all = plan::engine_labels(labels);
        all.extend(plan::engine_labels(annotations));
        all.insert(plan::LABEL_WORKSPACE_UID.into(), uid.clone());
        all.insert(LABEL_ROLE.into(), "workspace".into());
        let request = VolumeCreateRequest {
            name: Some(name.into()),
            driver: Some("local".into()),
            labels: Some(all),
            ..Default::default()
        };
        if self.objects.docker.inspect_volume(name).await.is_ok() {
            return Err(BackendError::Create {
                what: "workspace volume",
                name: name.into(),
                source: anyhow!("a volume of that name already exists"),
            });
        }
        self.objects
            .docker
            .create_volume(request)
            .await
            .map_err(|e| BackendError::Create {
                what: "workspace volume",
                name: name.into(),
                source: e.into(),
            })?;
        Ok(WorkspaceRef {
            name: name.into(),
            uid,
            created_by_run: true,
        })
    }

    async fn delete_workspace(&self, workspace: &WorkspaceRef) -> Result<()> {
        if !workspace.created_by_run {
            return Ok(());
        }
        let found = match self.objects.docker.inspect_volume(&workspace.name).await {
            Ok(v) => v,
            Err(e) if is_not_found(&e) => return Ok(()),
            Err(e) => return Err(other(format!("inspect volume {}", workspace.name), e)),
        };
        let uid = found
            .labels
            .get(plan::LABEL_WORKSPACE_UID)
            .cloned()
            .unwrap_or_default();
        if uid != workspace.uid {
            return Err(BackendError::UidMismatch {
                what: "workspace",
                name: workspace.name.clone(),
                expected: workspace.uid.clone(),
                found: uid,
            });
        }
        self.objects.remove_volume(&workspace.name).await
    }

    async fn get_workspace(&self, name: &str) -> Result<Option<WorkspaceRef>> {
        match self.objects.docker.inspect_volume(name).await {
            Ok(found) => Ok(Some(WorkspaceRef {
                name: name.to_owned(),
                uid: found
                    .labels
                    .get(plan::LABEL_WORKSPACE_UID)
                    .cloned()
                    .unwrap_or_default(),
                created_by_run: false,
            })),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(other(format!("inspect volume {name}"), e)),
        }
    }

    async fn workspace_labels(&self, name: &str) -> Result<Option<BTreeMap<String, String>>> {
        match self.objects.docker.inspect_volume(name).await {
            // The claim's labels: the volume's, minus this backend's bookkeeping and the
            // annotations it keeps among them (the create nonce).
            Ok(found) => Ok(Some(
                found
                    .labels
                    .into_iter()
                    .filter(|(k, _)| {
                        ![
                            plan::LABEL_WORKSPACE_UID,
                            LABEL_ROLE,
                            crate::pod::identity::ANNOTATION_CREATE_NONCE,
                        ]
                        .contains(&k.as_str())
                    })
                    .collect(),
            )),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(other(format!("inspect volume {name}"), e)),
        }
    }

    /// A helper Pod runs like any other here: the local backend compares nothing.
    async fn create_helper_pod(&self, pod: &Pod) -> Result<PodRef> {
        super::check_helper_labels(pod)?;
        self.create_pod(pod).await
    }

    async fn create_pod(&self, pod: &Pod) -> Result<PodRef> {
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
        if self.pod_uid(LOCAL_NAMESPACE, &name).await?.is_some() {
            return Err(BackendError::Create {
                what: "pod",
                name,
                source: anyhow!("a Pod of that name already exists"),
            });
        }
        let ctx = PlanContext {
            uid: uid.clone(),
            infra_image: self.infra_image.clone(),
            infra_command: vec!["/kandev-mock-agent".into(), "pause".into()],
            pod_pids_limit: self.pod_pids_limit,
            pod_network: self.pod_network.clone(),
            node_hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_default(),
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
                && self.get_workspace(&volume.source).await?.is_none()
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
            self.check_image(&c.image, c.require_non_root_image_user, &c.name)
                .await?;
        }
        let pod_ref = PodRef {
            namespace: LOCAL_NAMESPACE.into(),
            name,
            uid: uid.clone(),
        };
        if let Err(e) = self.materialize(&plan).await {
            // Roll back exactly what this attempt created (by UID), then report the cause.
            if let Err(rollback) = self.objects.remove_pod_objects(&uid).await {
                tracing::warn!(error = %rollback, "rollback of a failed Pod create");
            }
            return Err(e);
        }
        let mut given = pod.clone();
        given.metadata.uid = Some(uid.clone());
        given.metadata.namespace = Some(LOCAL_NAMESPACE.into());
        self.given
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uid, given);
        Ok(pod_ref)
    }

    async fn wait_running(&self, pod: &PodRef, container: &str, timeout: Duration) -> Result<()> {
        let name = self.verified_name(pod, container).await?;
        let what = format!("container {container} of {} to run", pod.name);
        wait::until(&what, timeout, Duration::from_millis(25), || async {
            let inspect = self
                .objects
                .docker
                .inspect_container(&name, None::<InspectContainerOptions>)
                .await
                .map_err(|e| other(format!("inspect {name}"), e))?;
            Ok((inspect.state.as_ref().and_then(|s| s.running) == Some(true)).then_some(()))
        })
        .await
    }

    async fn container_states(&self, pod: &PodRef) -> Result<Vec<ContainerState>> {
        let containers = self
            .inspected(&[(LABEL_POD_UID, &pod.uid), (LABEL_ROLE, "container")])
            .await?;
        Ok(containers
            .into_iter()
            .map(|(name, inspect)| {
                let state = inspect.state.unwrap_or_default();
                ContainerState {
                    name,
                    running: state.running == Some(true),
                    restarts: inspect
                        .restart_count
                        .and_then(|r| u32::try_from(r).ok())
                        .unwrap_or(0),
                    exit_code: state.exit_code,
                }
            })
            .collect())
    }

    async fn exec(&self, pod: &PodRef, request: ExecRequest) -> Result<ExecOutput> {
        let name = self.verified_name(pod, &request.container).await?;
        let timeout = request.timeout.unwrap_or(Duration::from_secs(120));
        self.exec_in(&name, request.argv.clone(), request.stdin, timeout)
            .await
            .map_err(|source| BackendError::Exec {
                pod: pod.name.clone(),
                container: request.container,
                argv: request.argv,
                source,
            })
    }

    async fn port_exchange(
        &self,
        pod: &PodRef,
        container: &str,
        port: u16,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        // The tunnel runs in the infra container, which holds the network namespace every
        // container of the Pod shares: `container` names no different loopback.
        let _ = container;
        self.tunnels
            .exchange(&self.streams(), pod, port, request, timeout)
            .await
    }

    async fn logs(&self, pod: &PodRef, container: &str) -> Result<String> {
        let name = self.verified_name(pod, container).await?;
        let options = LogsOptionsBuilder::default()
            .stdout(true)
            .stderr(true)
            .tail("2000")
            .build();
        let mut stream = self.objects.docker.logs(&name, Some(options));
        let mut text = Vec::new();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| other(format!("logs of {name}"), e))?;
            text.extend_from_slice(&chunk.into_bytes());
            if text.len() > MAX_LOG_BYTES {
                break;
            }
        }
        Ok(String::from_utf8_lossy(&text).into_owned())
    }

    async fn delete_pod(&self, pod: &PodRef) -> Result<()> {
        self.tunnels.forget(pod).await;
        self.given
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&pod.uid);
        self.objects.remove_pod_objects(&pod.uid).await.map(|_| ())
    }

    async fn pod_uid(&self, _namespace: &str, name: &str) -> Result<Option<String>> {
        let infra = self
            .objects
            .containers_with(&[(LABEL_POD, name), (LABEL_ROLE, "infra")])
            .await?;
        Ok(infra
            .first()
            .and_then(|c| c.labels.as_ref()?.get(LABEL_POD_UID).cloned()))
    }

    async fn pod_labels(
        &self,
        _namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        let infra = self
            .objects
            .containers_with(&[(LABEL_POD, name), (LABEL_ROLE, "infra")])
            .await?;
        Ok(infra.first().and_then(|c| c.labels.clone()).map(|labels| {
            // The Pod's labels are the infra container's, minus the backend's bookkeeping.
            labels
                .into_iter()
                .filter(|(k, _)| {
                    ![LABEL_POD, LABEL_POD_UID, LABEL_ROLE, LABEL_CONTAINER].contains(&k.as_str())
                })
                .collect()
        }))
    }

    async fn host_sharing(&self, pod: &PodRef) -> Result<HostSharing> {
        let mut sharing = HostSharing::default();
        // Every container of the Pod, the infra container (which holds its namespaces)
        // included, as the engine runs it.
        for (name, inspect) in self.inspected(&[(LABEL_POD_UID, &pod.uid)]).await? {
            for m in inspect.mounts.iter().flatten() {
                if m.typ.as_deref() == Some("bind") {
                    let source = m.source.clone().unwrap_or_default();
                    sharing.host_paths.push(format!("{name}: {source}"));
                }
            }
            let host = inspect.host_config.unwrap_or_default();
            for (ns, mode) in [
                ("network", host.network_mode),
                ("pid", host.pid_mode),
                ("ipc", host.ipc_mode),
            ] {
                if mode.as_deref() == Some("host") {
                    sharing.host_namespaces.push(format!("{name}: {ns}"));
                }
            }
        }
        Ok(sharing)
    }

    async fn pod_object(&self, pod: &PodRef) -> Result<Option<Pod>> {
        // The Pod exists while its infra container (with this UID) does; its labels are what
        // the engine carries, the rest is the Pod as it was given (the engine keeps no Pod).
        if self.pod_uid(LOCAL_NAMESPACE, &pod.name).await?.as_deref() != Some(pod.uid.as_str()) {
            return Ok(None);
        }
        let given = self
            .given
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&pod.uid)
            .cloned();
        let Some(mut found) = given else {
            return Err(other(
                format!("read back pod {}", pod.name),
                anyhow!("this backend did not create it (no record of the Pod it was given)"),
            ));
        };
        found.metadata.labels = self.pod_labels(LOCAL_NAMESPACE, &pod.name).await?;
        Ok(Some(found))
    }

    async fn pod_exposures(&self, pod: &PodRef) -> Result<Vec<String>> {
        let mut exposed = Vec::new();
        for (name, inspect) in self.inspected(&[(LABEL_POD_UID, &pod.uid)]).await? {
            let host = inspect.host_config.unwrap_or_default();
            for (port, bindings) in host.port_bindings.unwrap_or_default() {
                for b in bindings.unwrap_or_default() {
                    exposed.push(format!(
                        "published/{name}: {port} -> {}:{}",
                        b.host_ip.unwrap_or_default(),
                        b.host_port.unwrap_or_default()
                    ));
                }
            }
            if host.publish_all_ports == Some(true) {
                exposed.push(format!("published/{name}: every exposed port"));
            }
        }
        Ok(exposed)
    }

    async fn pod_ip(&self, pod: &PodRef) -> Result<Option<String>> {
        let name = self.verified_name(pod, "infra").await?;
        let inspect = self
            .objects
            .docker
            .inspect_container(&name, None::<InspectContainerOptions>)
            .await
            .map_err(|e| other(format!("inspect {name}"), e))?;
        let networks = inspect
            .network_settings
            .and_then(|n| n.networks)
            .unwrap_or_default();
        Ok(networks
            .into_values()
            .filter_map(|n| n.ip_address)
            .find(|ip| !ip.is_empty()))
    }

    async fn list_labelled(&self, selector: &[(&str, &str)]) -> Result<Vec<String>> {
        self.objects.list_labelled(selector).await
    }

    async fn remove_labelled(
        &self,
        selector: &[(&str, &str)],
        dry_run: bool,
    ) -> Result<Vec<String>> {
        self.objects.remove_labelled(selector, dry_run).await
    }
}
