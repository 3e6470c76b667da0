//! What a Pod's status says about a container that does not run yet: still progressing (and
//! why, for a timeout's message), or unable to start as it is. Pure, unit-tested on recorded
//! statuses (`fixtures/kube/pod-status-*.json`).

use super::backend::KubeBackend;
use k8s_openapi::api::core::v1::Pod;

/// What keeps a Pod from starting ([`KubeBackend::why_cannot_start`]), by how it is fixed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CannotStart {
    /// The registry refused the pull for want of credentials: the fix is a pull secret
    /// ([`super::pull_secrets::AUTH_FIX`]).
    PullRefusedCredentials(String),
    /// An image the node cannot pull (absent, a name no resolver knows, never pulled).
    Image(String),
    /// A configuration the kubelet cannot create (`CreateContainerConfigError`: a Secret or
    /// variable the Pod names is missing).
    Config(String),
    /// No node matches the Pod's node selector or affinity.
    NoNodeMatches(String),
}

impl CannotStart {
    /// The cause, without a fix.
    pub fn cause(&self) -> &str {
        match self {
            Self::PullRefusedCredentials(cause)
            | Self::Image(cause)
            | Self::Config(cause)
            | Self::NoNodeMatches(cause) => cause,
        }
    }
}

/// The cause; a refused credential with its fix on the next line.
impl std::fmt::Display for CannotStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::PullRefusedCredentials(cause) => {
                write!(f, "{cause}\n  fix: {}", super::pull_secrets::AUTH_FIX)
            }
            other => f.write_str(other.cause()),
        }
    }
}

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
    /// (`CreateContainerConfigError`), or a Pod whose `nodeSelector` or affinity no node
    /// matches ([`Scheduling::NoNodeMatches`]). Other waiting reasons (`ContainerCreating`,
    /// `PodInitializing`) are progress, and so is every other `Unschedulable`: a scheduler
    /// places the Pod once capacity frees (see [`KubeBackend::scheduling`]).
    pub fn cannot_start(pod: &Pod) -> Option<String> {
        Self::why_cannot_start(pod).map(|cause| cause.to_string())
    }

    /// [`KubeBackend::cannot_start`]'s cause, by kind: each is fixed differently.
    pub fn why_cannot_start(pod: &Pod) -> Option<CannotStart> {
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
            let message = waiting.message.clone().unwrap_or_default();
            // A pull the registry refused for now is retried by the kubelet (image back-off
            // from 10 s, doubling: kubernetes v1.37.2 pkg/kubelet/kubelet.go imageBackOffPeriod,
            // pkg/kubelet/images/image_manager.go): progress, up to the pod_ready bound, whose
            // timeout names it. An absent image, a refused credential or a name no resolver
            // knows stays fatal at once.
            // A back-off that does not repeat the pull's error (kubelets before the error was
            // appended write only `Back-off pulling image "X"`) says nothing new: the
            // ErrImagePull before it decided, and this wait is the kubelet's retry.
            let bare_back_off = reason == "ImagePullBackOff"
                && message.starts_with("Back-off pulling image")
                && message.trim_end().ends_with('"');
            let retried = bare_back_off
                || (matches!(reason.as_str(), "ErrImagePull" | "ImagePullBackOff")
                    && pull_error_is_transient(&message));
            if FATAL.contains(&reason.as_str()) && !retried {
                // A registry that wants credentials the node was not given: named as such,
                // with the fix (the kubelet's message is the registry's answer, passed on).
                let unauthorized = matches!(reason.as_str(), "ErrImagePull" | "ImagePullBackOff")
                    && pull_refused_for_authentication(&message);
                if unauthorized {
                    return Some(CannotStart::PullRefusedCredentials(format!(
                        "container {} (image {}) is waiting: {reason}: {message}: the registry refused the pull for want of credentials (authentication; many registries answer so for a repository they do not have, too)",
                        c.name, c.image,
                    )));
                }
                let cause = format!(
                    "container {} (image {}) is waiting: {reason}: {message}",
                    c.name, c.image,
                );
                return Some(if reason == "CreateContainerConfigError" {
                    CannotStart::Config(cause)
                } else {
                    CannotStart::Image(cause)
                });
            }
        }
        match Self::scheduling(pod)? {
            Scheduling::NoNodeMatches(message) => {
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
                Some(CannotStart::NoNodeMatches(format!(
                    "no node matches the Pod's node selector or affinity (Unschedulable): {message}{selector}"
                )))
            }
            Scheduling::MissingClaim { .. } | Scheduling::Waiting(_) => None,
        }
    }

    /// How the scheduler judged a Pod it has not placed (`PodScheduled` False, reason
    /// `Unschedulable`), from its message alone: the executor's Role reads Pods, not Nodes
    /// (cluster-scoped: Kandev's Role cannot grant them), and the message is what a real
    /// cluster shows every client. Its shape is `FitError.Error()`
    /// (`pkg/scheduler/framework/types.go`): `0/<nodes> nodes are available: <count>
    /// <reason>, ...` per filter that turned a node down (each node counted under the first
    /// filter that refused it), or one PreFilter reason alone, then the preemption
    /// PostFilter's own sentence. None: the scheduler has placed it or not looked yet.
    pub fn scheduling(pod: &Pod) -> Option<Scheduling> {
        let message = pod
            .status
            .as_ref()?
            .conditions
            .iter()
            .flatten()
            .find(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })?
            .message
            .clone()
            .unwrap_or_default();
        Some(judge_scheduling(message))
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

/// The scheduler's judgement of a Pod it has not placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scheduling {
    /// Every node the scheduler counted was turned down by `NodeAffinity`
    /// (`node(s) didn't match Pod's node affinity/selector`, or the profile's
    /// `scheduler-enforced node affinity`): no capacity freed changes that. Fatal at once.
    /// (A node turned down for an untolerated taint is counted under the taint, which comes
    /// first, even if its labels would match: such a mix is waited on.)
    NoNodeMatches(String),
    /// `persistentvolumeclaim "<claim>" not found`: fatal once the claim is still missing
    /// after a grace period (the scheduler may not have seen a claim created a moment ago).
    MissingClaim { claim: String, message: String },
    /// Anything else (`Insufficient cpu`, `Too many pods`, an immediate claim still being
    /// provisioned, taints, no nodes yet): a scheduler places the Pod once it fits.
    Waiting(String),
}

impl Scheduling {
    /// The scheduler's message.
    pub fn message(&self) -> &str {
        match self {
            Scheduling::NoNodeMatches(m) | Scheduling::Waiting(m) => m,
            Scheduling::MissingClaim { message, .. } => message,
        }
    }
}

/// `nodeaffinity.ErrReasonPod` and `ErrReasonEnforced`
/// (`pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go`).
const NO_MATCH: [&str; 2] = [
    "node(s) didn't match Pod's node affinity/selector",
    "node(s) didn't match scheduler-enforced node affinity",
];

/// Reads a scheduler's `Unschedulable` message (see [`KubeBackend::scheduling`]).
fn judge_scheduling(message: String) -> Scheduling {
    let missing_claim = message
        .split_once("persistentvolumeclaim \"")
        .and_then(|(_, rest)| rest.split_once("\" not found"))
        .map(|(claim, _)| claim.to_owned());
    if let Some(claim) = missing_claim {
        return Scheduling::MissingClaim { claim, message };
    }
    // `0/<nodes> nodes are available: <count> <reason>, ....` is the first sentence; what
    // follows is the PostFilter plugins' own, whose words change between releases (1.33:
    // ` preemption: ...`; 1.34+, with the DRA plugin: ` no new claims to deallocate,
    // preemption: ...`). Only the counted reasons are read: the first sentence, each entry a
    // count and a reason, and every node counted once (FitError.Error() counts each node under
    // the first filter that turned it down).
    let counted = message.strip_prefix("0/").and_then(|rest| {
        let (nodes, rest) = rest.split_once(" nodes are available: ")?;
        let nodes: u64 = nodes.parse().ok()?;
        let histogram = rest.split(". ").next()?.trim_end_matches('.');
        let mut total = 0;
        let mut unmatched = 0;
        for entry in histogram.split(", ") {
            let (count, reason) = entry.split_once(' ')?;
            let count: u64 = count.parse().ok()?;
            total += count;
            if NO_MATCH.contains(&reason) {
                unmatched += count;
            }
        }
        (total == nodes).then_some((nodes, unmatched))
    });
    match counted {
        Some((nodes, unmatched)) if nodes > 0 && unmatched == nodes => {
            Scheduling::NoNodeMatches(message)
        }
        _ => Scheduling::Waiting(message),
    }
}

/// Whether a failed pull's message says the registry refused it for want of credentials.
/// The kubelet's message carries the runtime's pull error, which carries the registry's
/// answer: a `401 Unauthorized` or `403 Forbidden` status (containerd's resolver), a token
/// server's refusal (`failed to fetch anonymous token: ... 401 Unauthorized`), a registry's
/// error code (`unauthorized: authentication required`, `insufficient_scope: authorization
/// failed`: the distribution spec's UNAUTHORIZED and DENIED), or the Docker engine's `no
/// basic auth credentials` (a node on dockerd through cri-dockerd).
fn pull_refused_for_authentication(message: &str) -> bool {
    const UNAUTHORIZED: [&str; 5] = [
        "401 unauthorized",
        "403 forbidden",
        "unauthorized",
        "authorization failed",
        "no basic auth credentials",
    ];
    let message = message.to_ascii_lowercase();
    UNAUTHORIZED.iter().any(|t| message.contains(t))
}

/// Whether a failed pull's message is one a registry or network gives for now: a rate limit,
/// a timeout, a reset connection, a server error. The kubelet retries those; everything else
/// (not found, access denied, unauthorized, no such host) fails every retry the same way.
fn pull_error_is_transient(message: &str) -> bool {
    const TRANSIENT: [&str; 10] = [
        "429 Too Many Requests",
        "toomanyrequests",
        "i/o timeout",
        "TLS handshake timeout",
        "connection reset by peer",
        "context deadline exceeded",
        "500 Internal Server Error",
        "502 Bad Gateway",
        "503 Service Unavailable",
        "504 Gateway Timeout",
    ];
    TRANSIENT.iter().any(|t| message.contains(t))
}

#[cfg(test)]
mod tests {
    use super::{KubeBackend, Scheduling, judge_scheduling};
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
    fn a_pull_the_registry_refuses_for_now_is_waited_on_and_an_absent_image_is_not() {
        let pulling = |reason: &str, message: &str| {
            let status = serde_json::json!({"phase": "Pending", "containerStatuses": [{
                "name": "kandev-agent", "image": "r.example/w:1", "imageID": "", "ready": false,
                "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": message}}}]});
            Pod {
                status: Some(serde_json::from_value(status).unwrap()),
                ..Default::default()
            }
        };
        // Docker Hub's rate limit and a registry's timeout: the kubelet retries them.
        for message in [
            "failed to pull and unpack image \"docker.io/library/w:1\": failed to copy: httpReadSeeker: failed open: unexpected status code https://registry-1.docker.io/v2/library/w/manifests/sha256:0: 429 Too Many Requests - Server message: toomanyrequests: You have reached your pull rate limit",
            "failed to pull and unpack image \"r.example/w:1\": failed to resolve reference \"r.example/w:1\": failed to do request: Head \"https://r.example/v2/w/manifests/1\": dial tcp 10.0.0.1:443: i/o timeout",
        ] {
            for reason in ["ErrImagePull", "ImagePullBackOff"] {
                assert_eq!(
                    KubeBackend::cannot_start(&pulling(reason, message)),
                    None,
                    "{reason}: {message}"
                );
            }
        }
        // Not found, access denied, an unknown host: fatal at once, as before.
        for message in [
            "failed to pull and unpack image \"r.example/w:1\": failed to resolve reference \"r.example/w:1\": r.example/w:1: not found",
            "Back-off pulling image \"kandev-acceptance/daemon:0\": ErrImagePull: pull access denied",
        ] {
            assert!(
                KubeBackend::cannot_start(&pulling("ErrImagePull", message)).is_some(),
                "{message}"
            );
        }
        // A back-off without the pull's error (older kubelets): the kubelet's retry, waited on.
        assert_eq!(
            KubeBackend::cannot_start(&pulling(
                "ImagePullBackOff",
                "Back-off pulling image \"r.example/w:1\""
            )),
            None
        );
        // A name that is no reference never pulls, whatever its message says.
        assert!(KubeBackend::cannot_start(&pulling("InvalidImageName", "i/o timeout")).is_some());
    }

    /// Issue 40, item 7: a pull the registry refused for want of credentials is named as
    /// such, with the fix; an absent image is not.
    #[test]
    fn a_pull_refused_for_credentials_names_the_pull_secret_fix() {
        let pulling = |reason: &str, message: &str| {
            let status = serde_json::json!({"phase": "Pending", "containerStatuses": [{
                "name": "docker-engine", "image": "localhost:5000/d:1", "imageID": "",
                "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": reason, "message": message}}}]});
            Pod {
                status: Some(serde_json::from_value(status).unwrap()),
                ..Default::default()
            }
        };
        for message in [
            // containerd 1.7 against a registry with htpasswd (a Basic challenge).
            "failed to pull and unpack image \"localhost:5000/d:1\": failed to resolve reference \"localhost:5000/d:1\": unexpected status from HEAD request to http://localhost:5000/v2/d/manifests/1: 401 Unauthorized",
            // A token server's refusal.
            "failed to pull and unpack image \"r.example/d:1\": failed to resolve reference \"r.example/d:1\": failed to authorize: failed to fetch anonymous token: unexpected status from GET request to https://auth.r.example/token: 401 Unauthorized",
            "Back-off pulling image \"r.example/d:1\": ErrImagePull: pull access denied, repository does not exist or may require authorization: server message: insufficient_scope: authorization failed",
            "Error response from daemon: Get \"https://r.example/v2/d/manifests/1\": no basic auth credentials",
            "unexpected status from HEAD request to https://r.example/v2/d/manifests/1: 403 Forbidden",
        ] {
            for reason in ["ErrImagePull", "ImagePullBackOff"] {
                let cause = KubeBackend::cannot_start(&pulling(reason, message))
                    .unwrap_or_else(|| panic!("waited on: {reason}: {message}"));
                assert!(
                    cause.contains("refused the pull for want of credentials")
                        && cause
                            .contains(&format!("fix: {}", super::super::pull_secrets::AUTH_FIX))
                        && cause.contains("docker-engine (image localhost:5000/d:1)"),
                    "{cause}"
                );
            }
        }
        let absent = KubeBackend::cannot_start(&pulling(
            "ErrImagePull",
            "failed to pull and unpack image \"r.example/w:1\": failed to resolve reference \"r.example/w:1\": r.example/w:1: not found",
        ))
        .unwrap_or_default();
        assert!(
            absent.contains("not found") && !absent.contains("credentials"),
            "{absent}"
        );
    }

    #[test]
    fn a_selector_no_node_matches_is_fatal_and_names_the_selector() {
        let pod = pod_with_status(
            "pod-status-unschedulable-node-selector.json",
            &[("kandev.ai/e2e-never", "true")],
        );
        let cause = KubeBackend::cannot_start(&pod).unwrap();
        assert!(
            cause.contains("Unschedulable") && cause.contains("kandev.ai/e2e-never=true"),
            "{cause}"
        );
        assert!(matches!(
            KubeBackend::scheduling(&pod),
            Some(Scheduling::NoNodeMatches(_))
        ));
    }

    /// Issue 32, defect 2: a Pod the scheduler cannot place *yet* is not a failure.
    #[test]
    fn capacity_and_a_missing_claim_are_waited_on() {
        for file in [
            "pod-status-unschedulable-insufficient-cpu.json",
            "pod-status-unschedulable-mixed.json",
        ] {
            let pod = pod_with_status(file, &[]);
            assert_eq!(KubeBackend::cannot_start(&pod), None, "{file}");
            let judged = KubeBackend::scheduling(&pod).unwrap();
            assert!(
                matches!(&judged, Scheduling::Waiting(m) if m.contains("Insufficient cpu")),
                "{file}: {judged:?}"
            );
        }
        let pod = pod_with_status("pod-status-unschedulable-missing-claim.json", &[]);
        assert_eq!(KubeBackend::cannot_start(&pod), None);
        assert_eq!(
            KubeBackend::scheduling(&pod).map(|s| match s {
                Scheduling::MissingClaim { claim, .. } => claim,
                other => format!("{other:?}"),
            }),
            Some("kandev-e2e-missing-claim".to_owned())
        );
        assert_eq!(
            judge_scheduling("0/0 nodes are available: .".into()),
            Scheduling::Waiting("0/0 nodes are available: .".into())
        );
        assert!(matches!(
            judge_scheduling("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.".into()),
            Scheduling::NoNodeMatches(_)
        ));
    }

    /// Issue 40, defect 1: from 1.34 the DRA plugin's PostFilter words came before the
    /// preemption clause; the sentence was then read as "waiting", and a selector no node
    /// matches waited out the launch's bound. Only the first sentence's counts are read now,
    /// whatever follows (1.37's own words: real_api_server's scheduling test).
    #[test]
    fn the_first_sentences_counts_decide_whatever_the_postfilters_say() {
        let v1_34 = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. no new claims to deallocate, preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.";
        assert!(matches!(
            judge_scheduling(v1_34.into()),
            Scheduling::NoNodeMatches(_)
        ));
        let v1_37 = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.";
        assert!(matches!(
            judge_scheduling(v1_37.into()),
            Scheduling::NoNodeMatches(_)
        ));
        // Three nodes, one with too little CPU: capacity may free.
        let mixed = "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector. no new claims to deallocate, preemption: 0/3 nodes are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling.";
        assert!(matches!(
            judge_scheduling(mixed.into()),
            Scheduling::Waiting(_)
        ));
        // Counts that do not add up to the nodes are no judgement: waited on.
        let short = "0/3 nodes are available: 2 node(s) didn't match Pod's node affinity/selector.";
        assert!(matches!(
            judge_scheduling(short.into()),
            Scheduling::Waiting(_)
        ));
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
