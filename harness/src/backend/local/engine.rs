//! How the local backend reaches a Pod's containers in the engine: their engine names, label
//! filters, and the check that a container carries the Pod's UID before anything acts on it;
//! and the error an engine call becomes.

use super::plan::LABEL_POD_UID;
use crate::backend::{BackendError, PodRef, Result};
use crate::host::is_not_found;
use anyhow::anyhow;
use bollard::Docker;
use bollard::query_parameters::InspectContainerOptions;
use std::collections::HashMap;

/// An engine call's failure, named by the operation.
pub(super) fn other(
    operation: impl Into<String>,
    source: impl Into<anyhow::Error>,
) -> BackendError {
    BackendError::Other {
        operation: operation.into(),
        source: source.into(),
    }
}

/// The engine's list filter for containers or volumes carrying every `pairs` label.
pub(super) fn label_filter(pairs: &[(&str, &str)]) -> HashMap<String, Vec<String>> {
    HashMap::from([(
        "label".to_owned(),
        pairs.iter().map(|(k, v)| format!("{k}={v}")).collect(),
    )])
}

/// The engine name of `container` of `pod`.
pub(super) fn engine_name(pod: &PodRef, container: &str) -> String {
    format!("{}-{container}", pod.name)
}

/// The engine name of `container` of `pod`, once it is verified to carry the Pod's UID
/// (never act on a look-alike).
pub(super) async fn verified_container(
    docker: &Docker,
    pod: &PodRef,
    container: &str,
) -> Result<String> {
    let name = engine_name(pod, container);
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
