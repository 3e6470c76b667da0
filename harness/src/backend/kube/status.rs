//! What a Pod's status says about a container that does not run yet: still progressing (and
//! why, for a timeout's message), or unable to start as it is. Pure, unit-tested on recorded
//! statuses (`fixtures/kube/pod-status-*.json`).

use super::backend::KubeBackend;
use k8s_openapi::api::core::v1::Pod;

impl KubeBackend {
    /// Why `container` is not running yet (waiting reason and message), for timeouts.
    pub(super) fn waiting_reason(pod: &Pod, container: &str) -> String {
        let statuses = pod
            .status
            .as_ref()
            .map(|s| {
                s.init_container_statuses
                    .iter()
                    .flatten()
                    .chain(s.container_statuses.iter().flatten())
                    .map(|c| {
                        let state = c.state.as_ref();
                        let detail = state
                            .and_then(|s| s.waiting.as_ref())
                            .map(|w| {
                                format!(
                                    "waiting: {} {}",
                                    w.reason.clone().unwrap_or_default(),
                                    w.message.clone().unwrap_or_default()
                                )
                            })
                            .or_else(|| {
                                state.and_then(|s| s.terminated.as_ref()).map(|t| {
                                    format!(
                                        "terminated: exit {} {}",
                                        t.exit_code,
                                        t.reason.clone().unwrap_or_default()
                                    )
                                })
                            })
                            .unwrap_or_else(|| "running".into());
                        // The image too: a pull that makes no progress shows only
                        // `ContainerCreating`, and the image is what it waits on.
                        format!("{} (image {}): {}", c.name, c.image, detail.trim())
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Unknown".into());
        let conditions: Vec<String> = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.status != "True")
            .map(|c| format!("{} ({})", c.type_, c.message.unwrap_or_default()))
            .collect();
        format!(
            "phase {phase}; {container} not running; containers: [{}]; conditions: [{}]",
            statuses.join(", "),
            conditions.join(", ")
        )
    }

    /// Why the Pod will not start as it is, when the API server's status already says so: a
    /// container waiting on an image it cannot pull (`ErrImagePull`, `ImagePullBackOff`,
    /// `InvalidImageName`, `ErrImageNeverPull`) or on a configuration it cannot create
    /// (`CreateContainerConfigError`), or a Pod the scheduler cannot place (`PodScheduled`
    /// False with reason `Unschedulable`: a node selector no node carries, a claim that does
    /// not exist). Other waiting reasons (`ContainerCreating`, `PodInitializing`) are progress.
    pub fn cannot_start(pod: &Pod) -> Option<String> {
        const FATAL: [&str; 5] = [
            "ErrImagePull",
            "ImagePullBackOff",
            "InvalidImageName",
            "ErrImageNeverPull",
            "CreateContainerConfigError",
        ];
        let status = pod.status.as_ref()?;
        for c in status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten())
        {
            let Some(waiting) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
                continue;
            };
            let reason = waiting.reason.clone().unwrap_or_default();
            if FATAL.contains(&reason.as_str()) {
                return Some(format!(
                    "container {} (image {}) is waiting: {reason}: {}",
                    c.name,
                    c.image,
                    waiting.message.clone().unwrap_or_default()
                ));
            }
        }
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
            .map(|c| {
                // The scheduler's message counts nodes, never naming the selector: name it.
                let selector = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_selector.clone())
                    .unwrap_or_default();
                let selector = if selector.is_empty() {
                    String::new()
                } else {
                    let pairs: Vec<String> =
                        selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    format!(" (the Pod's nodeSelector: {})", pairs.join(", "))
                };
                format!(
                    "the scheduler cannot place it (Unschedulable): {}{selector}",
                    c.message.clone().unwrap_or_default()
                )
            })
    }

    pub(super) fn container_running(pod: &Pod, uid: &str, container: &str) -> bool {
        pod.metadata.uid.as_deref() == Some(uid)
            && pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|statuses| {
                    statuses.iter().any(|c| {
                        c.name == container
                            && c.state.as_ref().and_then(|s| s.running.as_ref()).is_some()
                    })
                })
    }
}

#[cfg(test)]
mod tests {
    use super::KubeBackend;
    use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
    use std::collections::BTreeMap;

    fn pod_with_status(file: &str, selector: &[(&str, &str)]) -> Pod {
        let path = crate::paths::workspace_root()
            .join("fixtures/kube")
            .join(file);
        let status: PodStatus =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        Pod {
            spec: Some(PodSpec {
                node_selector: (!selector.is_empty()).then(|| {
                    selector
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect::<BTreeMap<_, _>>()
                }),
                ..Default::default()
            }),
            status: Some(status),
            ..Default::default()
        }
    }

    #[test]
    fn a_failed_pull_names_the_image_and_the_reason() {
        for file in [
            "pod-status-err-image-pull.json",
            "pod-status-image-pull-backoff.json",
        ] {
            let cause = KubeBackend::cannot_start(&pod_with_status(file, &[])).unwrap();
            assert!(cause.contains("ImagePull"), "{cause}");
        }
        let cause =
            KubeBackend::cannot_start(&pod_with_status("pod-status-err-image-pull.json", &[]))
                .unwrap();
        assert!(
            cause.contains("registry.invalid/kandev-acceptance/absent:never")
                && cause.contains("kandev-agent"),
            "{cause}"
        );
    }

    #[test]
    fn an_unschedulable_pod_names_the_selector_or_the_claim() {
        let cause = KubeBackend::cannot_start(&pod_with_status(
            "pod-status-unschedulable-node-selector.json",
            &[("kandev.ai/e2e-never", "true")],
        ))
        .unwrap();
        assert!(
            cause.contains("Unschedulable") && cause.contains("kandev.ai/e2e-never=true"),
            "{cause}"
        );
        let cause = KubeBackend::cannot_start(&pod_with_status(
            "pod-status-unschedulable-missing-claim.json",
            &[],
        ))
        .unwrap();
        assert!(
            cause.contains("persistentvolumeclaim \"kandev-e2e-missing-claim\" not found"),
            "{cause}"
        );
    }

    #[test]
    fn a_wait_that_runs_out_names_each_waiting_container_and_its_image() {
        // A pull under way (or hanging) is `ContainerCreating` with no message: the image is
        // what the container waits on.
        let pod: Pod = serde_json::from_value(serde_json::json!({"status": {"phase": "Pending",
            "containerStatuses": [{"name": "kandev-agent", "image": "registry.invalid/x:never",
                "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ContainerCreating"}}}]}}))
        .unwrap();
        assert_eq!(KubeBackend::cannot_start(&pod), None);
        let why = KubeBackend::waiting_reason(&pod, "kandev-agent");
        assert!(
            why.contains(
                "kandev-agent (image registry.invalid/x:never): waiting: ContainerCreating"
            ),
            "{why}"
        );
    }

    #[test]
    fn progress_is_not_a_failure() {
        assert_eq!(
            KubeBackend::cannot_start(&pod_with_status("pod-status-running.json", &[])),
            None
        );
        let mut creating = pod_with_status("pod-status-image-pull-backoff.json", &[]);
        if let Some(statuses) = creating
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
        {
            statuses.retain(|c| c.name == "kandev-agent");
        }
        assert_eq!(KubeBackend::cannot_start(&creating), None);
    }
}
