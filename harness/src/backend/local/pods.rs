//! A running Pod's containers as the engine has them: waiting until one runs, their states,
//! logs, the Pod read back (its labels are the infra container's), what it shares with the
//! host or publishes, its address; and deleting everything of the Pod by its UID.

use super::backend::LocalBackend;
use super::engine::other;
use super::plan::{LABEL_CONTAINER, LABEL_POD, LABEL_POD_UID, LABEL_ROLE};
use crate::backend::{ContainerState, HostSharing, PodRef, Result};
use crate::wait;
use anyhow::anyhow;
use bollard::models::ContainerInspectResponse;
use bollard::query_parameters::{InspectContainerOptions, LogsOptionsBuilder};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;
use std::time::Duration;

/// How much of a container's log is read.
const MAX_LOG_BYTES: usize = 1 << 20;

pub(super) async fn wait_running(
    backend: &LocalBackend,
    pod: &PodRef,
    container: &str,
    timeout: Duration,
) -> Result<()> {
    let name = backend.verified_name(pod, container).await?;
    let what = format!("container {container} of {} to run", pod.name);
    wait::until(&what, timeout, Duration::from_millis(25), || async {
        let inspect = backend
            .objects
            .docker
            .inspect_container(&name, None::<InspectContainerOptions>)
            .await
            .map_err(|e| other(format!("inspect {name}"), e))?;
        Ok((inspect.state.as_ref().and_then(|s| s.running) == Some(true)).then_some(()))
    })
    .await
}

pub(super) async fn container_states(
    backend: &LocalBackend,
    pod: &PodRef,
) -> Result<Vec<ContainerState>> {
    let containers = inspected(
        backend,
        &[(LABEL_POD_UID, &pod.uid), (LABEL_ROLE, "container")],
    )
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
                // What the engine created the container from: its image id, and the reference
                // as the Pod named it.
                image: inspect.config.and_then(|c| c.image).unwrap_or_default(),
                image_id: inspect.image.filter(|id| !id.is_empty()),
            }
        })
        .collect())
}

pub(super) async fn logs(backend: &LocalBackend, pod: &PodRef, container: &str) -> Result<String> {
    let name = backend.verified_name(pod, container).await?;
    let options = LogsOptionsBuilder::default()
        .stdout(true)
        .stderr(true)
        .tail("2000")
        .build();
    let mut stream = backend.objects.docker.logs(&name, Some(options));
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

/// Forgets the Pod's tunnel and record, then removes its containers, volumes and cgroup.
pub(super) async fn delete(backend: &LocalBackend, pod: &PodRef) -> Result<()> {
    backend.tunnels.forget(pod).await;
    backend
        .given
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&pod.uid);
    backend
        .objects
        .remove_pod_objects(&pod.uid)
        .await
        .map(|_| ())
}

/// The UID of the Pod of that name: its infra container's.
pub(super) async fn uid(backend: &LocalBackend, name: &str) -> Result<Option<String>> {
    let infra = backend
        .objects
        .containers_with(&[(LABEL_POD, name), (LABEL_ROLE, "infra")])
        .await?;
    Ok(infra
        .first()
        .and_then(|c| c.labels.as_ref()?.get(LABEL_POD_UID).cloned()))
}

/// The labels of the Pod of that name (None when absent).
pub(super) async fn labels(
    backend: &LocalBackend,
    name: &str,
) -> Result<Option<BTreeMap<String, String>>> {
    let infra = backend
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

pub(super) async fn host_sharing(backend: &LocalBackend, pod: &PodRef) -> Result<HostSharing> {
    let mut sharing = HostSharing::default();
    // Every container of the Pod, the infra container (which holds its namespaces)
    // included, as the engine runs it.
    for (name, inspect) in inspected(backend, &[(LABEL_POD_UID, &pod.uid)]).await? {
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

pub(super) async fn object(backend: &LocalBackend, pod: &PodRef) -> Result<Option<Pod>> {
    // The Pod exists while its infra container (with this UID) does; its labels are what
    // the engine carries, the rest is the Pod as it was given (the engine keeps no Pod).
    if uid(backend, &pod.name).await?.as_deref() != Some(pod.uid.as_str()) {
        return Ok(None);
    }
    let given = backend
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
    found.metadata.labels = labels(backend, &pod.name).await?;
    Ok(Some(found))
}

pub(super) async fn exposures(backend: &LocalBackend, pod: &PodRef) -> Result<Vec<String>> {
    let mut exposed = Vec::new();
    for (name, inspect) in inspected(backend, &[(LABEL_POD_UID, &pod.uid)]).await? {
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

pub(super) async fn ip(backend: &LocalBackend, pod: &PodRef) -> Result<Option<String>> {
    let name = backend.verified_name(pod, "infra").await?;
    let inspect = backend
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

/// The engine's inspection of every container `selector` matches, with its Pod container
/// name (empty for the infra container, which has none).
async fn inspected(
    backend: &LocalBackend,
    selector: &[(&str, &str)],
) -> Result<Vec<(String, ContainerInspectResponse)>> {
    let mut found = Vec::new();
    for c in backend.objects.containers_with(selector).await? {
        let Some(id) = c.id.as_deref() else { continue };
        let inspect = backend
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
