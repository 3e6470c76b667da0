//! The run's warm-up on a cluster: before the first scenario, every node the task Pod can be
//! placed on (`placement`) pulls the images the task Pod references, so that a cold node's
//! multi-GB pull is spent here, recorded as its own set-up step (`warm_up`), and not inside
//! a scenario's `pod_ready` bound.
//!
//! One short-lived Pod per node, pinned by `nodeSelector` `kubernetes.io/hostname` (through
//! the scheduler, so quota, admission and taints judge it as they judge the task Pod), with
//! the task Pod's tolerations and `imagePullSecrets`, one container per image with the task
//! Pod's `imagePullPolicy`, each running `sh -c 'exit 0'` as nobody, without privileges or a
//! service-account token. An image is pulled once the kubelet reports the container's
//! `imageID` or the container ran (an image without `sh` still counts: its pull is done
//! before the start fails). The Pods carry the run's labels (`gc` finds what a killed run
//! left) and are deleted afterwards, on success and on error.
//!
//! At most [`AT_ONCE`] nodes pull at a time, so that a large cluster's warm-up is not a burst
//! of Pods on the API server and the registry. On an autoscaled cluster the nodes change while
//! it runs: the nodes are listed again after each round, and one that joined (or became
//! placeable) is warmed in the next (until the timeout); one that left (its Node object gone)
//! is recorded, not failed.

use super::backend::KubeBackend;
use super::placement;
use crate::backend::{Backend, PodRef};
use crate::pod::compose::Arch;
use crate::pod::identity::{LABEL_ROLE, short_digest};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ContainerStatus, Node, Pod, PodSpec};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The role label of the warm-up Pods.
pub const ROLE: &str = "warm-up";

/// How often a warm-up Pod is read while its images are pulled.
const POLL: Duration = Duration::from_millis(500);

/// How many nodes pull at a time.
pub const AT_ONCE: usize = 8;

/// Every how many polls a Pod still unscheduled asks whether its node is still there.
const NODE_CHECK_POLLS: u32 = 10;

/// How long the warm-up may take: its `--warm-up-timeout`, and the run's stop flag (set by
/// Ctrl-C, SIGTERM or `--deadline`), on which it ends early.
pub struct Until<'a> {
    pub timeout: Duration,
    pub stopped: &'a std::sync::atomic::AtomicBool,
}

/// The fix a refused warm-up Pod names: the create, not a pull, failed.
const CREATE_FIX: &str = "the namespace must admit a small unprivileged Pod of the run's images (quota, LimitRange, admission) and your identity create, get and delete Pods there; or skip the warm-up with --no-warm-up";

/// The fix a failed warm-up names.
const FIX: &str = "make the image pullable from that node (its reference, the registry's reachability, an imagePullSecret in the template), raise --warm-up-timeout for a slow registry, or skip the warm-up with --no-warm-up";

/// One image the task Pod pulls: the first of its containers naming it.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    pub container: String,
    pub image: String,
    pub pull_policy: Option<String>,
}

/// The images of the composed task Pod (init containers first), each once.
pub fn images_of(task: &PodSpec) -> Vec<Image> {
    let mut images: Vec<Image> = Vec::new();
    for c in task
        .init_containers
        .iter()
        .flatten()
        .chain(task.containers.iter())
    {
        let image = c.image.clone().unwrap_or_default();
        if image.is_empty() || images.iter().any(|i| i.image == image) {
            continue;
        }
        images.push(Image {
            container: c.name.clone(),
            image,
            pull_policy: c.image_pull_policy.clone(),
        });
    }
    images
}

/// A node the task Pod can be placed on: its name and the `kubernetes.io/hostname` value
/// that pins a Pod to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub node: String,
    pub hostname: String,
}

/// The nodes the task Pod of `template` can be placed on, and (as evidence) why each other
/// one was left out.
pub fn targets(nodes: &[Node], template: &PodSpec, arch: Arch) -> (Vec<Target>, Vec<Value>) {
    let mut chosen = Vec::new();
    let mut left_out = Vec::new();
    for node in nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        if let Some(why) = placement::excluded(node, template, Some(arch)) {
            left_out.push(json!({"node": name, "why": why}));
            continue;
        }
        let hostname = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/hostname").cloned())
            .unwrap_or_else(|| name.clone());
        chosen.push(Target {
            node: name,
            hostname,
        });
    }
    (chosen, left_out)
}

/// The warm-up Pod of run `run_id` on `target`, pulling `images` as the task Pod `task`
/// would (its tolerations and pull secrets).
pub fn warm_up_pod(
    run_id: &str,
    namespace: &str,
    target: &Target,
    task: &PodSpec,
    images: &[Image],
) -> Pod {
    let name = format!(
        "kandev-acceptance-warm-up-{}",
        short_digest(&format!("{run_id}/{}", target.node))
    );
    let mut labels = super::cluster::run_labels(run_id);
    labels.insert(LABEL_ROLE.into(), ROLE.into());
    let containers: Vec<Value> = images
        .iter()
        .map(|i| {
            let mut c = json!({
                "name": i.container,
                "image": i.image,
                "command": ["sh", "-c", "exit 0"],
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]},
                },
                // Declared, so that a namespace whose ResourceQuota constrains CPU and memory
                // admits it; small, since it only exits.
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                    "limits": {"cpu": "100m", "memory": "64Mi"}},
            });
            if let Some(policy) = &i.pull_policy {
                c["imagePullPolicy"] = json!(policy);
            }
            c
        })
        .collect();
    let mut spec = json!({
        "nodeSelector": {"kubernetes.io/hostname": target.hostname},
        "restartPolicy": "Never",
        "automountServiceAccountToken": false,
        "enableServiceLinks": false,
        "terminationGracePeriodSeconds": 0,
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": 65534,
            "runAsGroup": 65534,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": containers,
    });
    if let Some(tolerations) = task.tolerations.as_ref().filter(|t| !t.is_empty()) {
        spec["tolerations"] = json!(tolerations);
    }
    if let Some(secrets) = task.image_pull_secrets.as_ref().filter(|s| !s.is_empty()) {
        spec["imagePullSecrets"] = json!(secrets);
    }
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }))
    .unwrap_or_default()
}

/// The reason a kubelet gives a container whose state it lost (its node gone or restarted
/// before the container was recorded): it says nothing of an image (kubernetes v1.37.2
/// pkg/kubelet/kubelet_pods.go, `convertToAPIContainerStatuses`).
const STATUS_UNKNOWN: &str = "ContainerStatusUnknown";

/// Whether the kubelet has the container's image: it reports the image's ID, or the
/// container ran (or failed to start, which it does only with the image pulled). A
/// termination the kubelet only presumed ([`STATUS_UNKNOWN`]) is not one.
fn pulled(status: &ContainerStatus) -> bool {
    let ended = |s: Option<&k8s_openapi::api::core::v1::ContainerState>| {
        s.and_then(|s| s.terminated.as_ref())
            .is_some_and(|t| t.reason.as_deref() != Some(STATUS_UNKNOWN))
    };
    !status.image_id.is_empty()
        || status.state.as_ref().is_some_and(|s| s.running.is_some())
        || ended(status.state.as_ref())
        || ended(status.last_state.as_ref())
}

/// What a warm-up Pod's container waits on, in the kubelet's words (or the scheduler's,
/// before the Pod is bound).
fn waiting_on(pod: Option<&Pod>, container: &str) -> String {
    let Some(pod) = pod else {
        return "not read yet".into();
    };
    let status = pod.status.clone().unwrap_or_default();
    if let Some(c) = status
        .container_statuses
        .iter()
        .flatten()
        .find(|c| c.name == container)
        && let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref())
    {
        return format!(
            "waiting: {}: {}",
            w.reason.as_deref().unwrap_or_default(),
            w.message.as_deref().unwrap_or_default()
        );
    }
    if let Some(s) = KubeBackend::scheduling(pod) {
        return format!("not scheduled: {}", s.message());
    }
    format!("phase {}", status.phase.unwrap_or_default())
}

/// The warm-up of one node: its Pod, waited on until every image is pulled, a pull fails
/// for good, or `deadline`.
async fn on_node(
    backend: &KubeBackend,
    target: &Target,
    pod: &Pod,
    images: &[Image],
    bounds: &Bounds<'_>,
    created: &std::sync::Mutex<Vec<PodRef>>,
) -> anyhow::Result<Value> {
    let Bounds {
        deadline,
        stopped,
        failed,
        late,
    } = *bounds;
    let started = Instant::now();
    let name = pod.metadata.name.clone().unwrap_or_default();
    // Nothing is created once the run stopped, the bound passed or another node failed.
    if stopped.load(std::sync::atomic::Ordering::SeqCst) {
        anyhow::bail!(
            "warm-up on node {}: the run was stopped (Ctrl-C, SIGTERM or --deadline) before its images were pulled",
            target.node
        );
    }
    if failed.load(std::sync::atomic::Ordering::SeqCst) {
        return Ok(
            json!({"node": target.node, "not_tried": "another node's warm-up failed first"}),
        );
    }
    if Instant::now() >= deadline {
        if late {
            return Ok(cold(target, None));
        }
        anyhow::bail!(
            "warm-up on node {}: not started within --warm-up-timeout (the other nodes took it); {FIX}",
            target.node
        );
    }
    let made = match backend.create_helper_pod(pod).await {
        Ok(made) => made,
        Err(e) => {
            // An answer lost after the write (a timeout, a 504 retried into a 409) may
            // still have made it: the name is this run's and node's, so one found is ours
            // to delete with the rest.
            if let Ok(Some(uid)) = backend.pod_uid(&backend.namespace, &name).await
                && let Ok(mut all) = created.lock()
            {
                all.push(PodRef {
                    namespace: backend.namespace.clone(),
                    name: name.clone(),
                    uid,
                });
            }
            anyhow::bail!(
                "warm-up on node {}: its Pod was not created: {}; {CREATE_FIX}",
                target.node,
                crate::error_chain(&e)
            );
        }
    };
    if let Ok(mut all) = created.lock() {
        all.push(made.clone());
    }
    let mut seen: Vec<Option<(f64, String)>> = vec![None; images.len()];
    let mut last: Option<Pod> = None;
    let mut polls = 0u32;
    loop {
        polls += 1;
        // A read that fails is retried until the deadline: the pulls go on meanwhile.
        if let Ok(read) = backend.pod_object(&made).await {
            let Some(read) = read else {
                // The node's removal deletes its Pods (the Pod garbage collector).
                if node_gone(backend, &target.node).await {
                    return Ok(left_cluster(target, &made.name));
                }
                anyhow::bail!(
                    "warm-up on node {}: its Pod {} was deleted before its images were pulled; {FIX}",
                    target.node,
                    made.name
                );
            };
            let statuses = read
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.clone())
                .unwrap_or_default();
            for (i, image) in images.iter().enumerate() {
                if seen[i].is_some() {
                    continue;
                }
                if let Some(s) = statuses
                    .iter()
                    .find(|s| s.name == image.container)
                    .filter(|s| pulled(s))
                {
                    seen[i] = Some((started.elapsed().as_secs_f64(), s.image_id.clone()));
                }
            }
            // A pull no retry mends (an absent image, a refused credential, an invalid
            // name, `Never` without the image) fails now; one the registry refuses for now
            // is the kubelet's to retry, up to the deadline.
            let cannot = KubeBackend::cannot_start(&read);
            // A node the autoscaler removed leaves its Pod unscheduled for good, its selector
            // then matching no node: asked before that is taken for the template's fault.
            if KubeBackend::scheduling(&read).is_some()
                && (cannot.is_some() || polls.is_multiple_of(NODE_CHECK_POLLS))
                && node_gone(backend, &target.node).await
            {
                return Ok(left_cluster(target, &made.name));
            }
            if let Some(why) = cannot {
                anyhow::bail!("warm-up on node {}: {why}; {FIX}", target.node);
            }
            last = Some(read);
        }
        if seen.iter().all(Option::is_some) {
            break;
        }
        // Ctrl-C, SIGTERM (launch's Job deadline) or --deadline: the Pods are deleted on the
        // way out, and the set-up's failure tears the rest down.
        if stopped.load(std::sync::atomic::Ordering::SeqCst) {
            anyhow::bail!(
                "warm-up on node {}: the run was stopped (Ctrl-C, SIGTERM or --deadline) before its images were pulled",
                target.node
            );
        }
        if Instant::now() >= deadline {
            if late {
                return Ok(cold(target, Some(&made.name)));
            }
            let waiting: Vec<String> = images
                .iter()
                .zip(&seen)
                .filter(|(_, s)| s.is_none())
                .map(|(i, _)| {
                    format!(
                        "image {} (container {}): {}",
                        i.image,
                        i.container,
                        waiting_on(last.as_ref(), &i.container)
                    )
                })
                .collect();
            anyhow::bail!(
                "warm-up on node {}: not pulled within --warm-up-timeout: {}; {FIX}",
                target.node,
                waiting.join("; ")
            );
        }
        tokio::time::sleep(POLL).await;
    }
    let pulled: Vec<Value> = images
        .iter()
        .zip(&seen)
        .map(|(i, s)| {
            let (seconds, id) = s.clone().unwrap_or_default();
            json!({"container": i.container, "image": i.image,
                "pull_policy": i.pull_policy, "image_id": id,
                "seconds": (seconds * 10.0).round() / 10.0})
        })
        .collect();
    Ok(json!({"node": target.node, "pod": made.name,
        "seconds": (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        "images": pulled}))
}

/// The nodes of `now` not warmed yet: one that joined, and one left out before that may be
/// placeable now (an autoscaler's node loses its `not-ready` taint once its kubelet is up).
fn unwarmed(warmed: &[String], now: Vec<Node>) -> Vec<Node> {
    now.into_iter()
        .filter(|n| {
            n.metadata
                .name
                .as_ref()
                .is_some_and(|name| !warmed.contains(name))
        })
        .collect()
}

/// How a node's warm-up is bounded: the deadline, the run's stop, a failure of another node
/// (no Pod is created after one), and whether the node came after the first round (one that
/// joined late and is not done by the deadline is cold, not a failure).
#[derive(Clone, Copy)]
struct Bounds<'a> {
    deadline: Instant,
    stopped: &'a std::sync::atomic::AtomicBool,
    failed: &'a std::sync::atomic::AtomicBool,
    late: bool,
}

/// The evidence of a node that joined during the warm-up and was not done by its bound.
fn cold(target: &Target, pod: Option<&str>) -> Value {
    json!({"node": target.node, "pod": pod,
        "cold": "joined during the warm-up and not pulled within --warm-up-timeout: its first session's pull counts against pod_ready"})
}

/// Whether node `name` is known to be gone (a read that fails says nothing).
async fn node_gone(backend: &KubeBackend, name: &str) -> bool {
    matches!(
        Api::<Node>::all(backend.client.clone()).get_opt(name).await,
        Ok(None)
    )
}

/// The evidence of a node that left the cluster during its warm-up.
fn left_cluster(target: &Target, pod: &str) -> Value {
    json!({"node": target.node, "pod": pod,
        "left": "the node left the cluster during the warm-up (its Node object is gone): nothing to warm"})
}

/// The warm-up of run `run_id`: the nodes `admin` lists that the task Pod (`task`, as
/// composed; `template`, the template's spec, decides placement) can be placed on each
/// pull its images, concurrently, within `timeout`; every warm-up Pod is deleted before
/// this returns. Ok: the evidence (per node, each image and the seconds until the kubelet
/// had it, from the Pod's create; or why it was skipped: the nodes could not be listed).
pub async fn run(
    admin: &kube::Client,
    namespace: &str,
    run_id: &str,
    task: &PodSpec,
    template: &PodSpec,
    arch: Arch,
    until: Until<'_>,
) -> anyhow::Result<Value> {
    let Until { timeout, stopped } = until;
    // An identity that cannot list nodes (inside the cluster, the bookkeeper may not):
    // skipped, saying why, as `--jobs` falls back.
    let nodes = match Api::<Node>::all(admin.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        Err(e) => {
            return Ok(skipped(&format!(
                "the nodes could not be listed ({e}): grant your identity list on nodes to warm them up"
            )));
        }
    };
    let (mut chosen, mut left_out) = targets(&nodes, template, arch);
    let images = images_of(task);
    let backend = KubeBackend::new(
        admin.clone(),
        namespace,
        "kube",
        "warm-up",
        Default::default(),
    );
    let deadline = Instant::now() + timeout;
    let created = std::sync::Mutex::new(Vec::new());
    let mut warmed = Vec::new();
    let mut warmed_nodes: Vec<String> = Vec::new();
    let mut rounds = 0;
    let failed = std::sync::atomic::AtomicBool::new(false);
    let mut relisted = None;
    while !chosen.is_empty() {
        rounds += 1;
        let bounds = Bounds {
            deadline,
            stopped,
            failed: &failed,
            late: rounds > 1,
        };
        warmed_nodes.extend(chosen.iter().map(|t| t.node.clone()));
        // Made before they are streamed: a closure inside the stream would not be `Send`
        // for every lifetime the backend's `prepare` needs.
        let mut pulls = Vec::new();
        for target in &chosen {
            let pod = warm_up_pod(run_id, namespace, target, task, &images);
            let (backend, images, created, bounds) = (&backend, &images, &created, &bounds);
            pulls.push(async move {
                let pulled = on_node(backend, target, &pod, images, bounds, created).await;
                if pulled.is_err() {
                    bounds
                        .failed
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                }
                pulled
            });
        }
        // Unordered: a slow node holds its own slot, not the next node's start.
        let round: Vec<_> = futures_util::stream::iter(pulls)
            .buffer_unordered(AT_ONCE)
            .collect()
            .await;
        let failed = round.iter().any(Result::is_err);
        warmed.extend(round);
        if failed || Instant::now() >= deadline {
            break;
        }
        // Nodes that joined meanwhile (an autoscaler's), or became placeable: the next round.
        // What is left out is the latest listing's word. A failed listing ends the warm-up
        // with what it warmed.
        let now = match Api::<Node>::all(admin.clone())
            .list(&ListParams::default())
            .await
        {
            Ok(now) => now,
            Err(e) => {
                relisted = Some(format!(
                    "the nodes could not be listed again after round {rounds} ({e}): a node that joined since is not warmed"
                ));
                break;
            }
        };
        (chosen, left_out) = targets(&unwarmed(&warmed_nodes, now.items), template, arch);
    }
    let made: Vec<PodRef> = created.lock().map(|all| all.clone()).unwrap_or_default();
    let removed = futures_util::future::join_all(made.iter().map(|p| backend.delete_pod(p))).await;
    let mut per_node = Vec::new();
    let mut failures = Vec::new();
    for result in warmed {
        match result {
            Ok(evidence) => per_node.push(evidence),
            Err(e) => failures.push(format!("{e:#}")),
        }
    }
    for (pod, result) in made.iter().zip(removed) {
        if let Err(e) = result {
            failures.push(format!(
                "warm-up Pod {} was not removed: {}; remove it later with gc",
                pod.name,
                crate::error_chain(&e)
            ));
        }
    }
    if !failures.is_empty() {
        anyhow::bail!(failures.join("\n"));
    }
    Ok(json!({
        "timeout_seconds": timeout.as_secs(),
        "at_once": AT_ONCE,
        "rounds": rounds,
        "relisted": relisted,
        "nodes": per_node,
        "left_out": left_out,
        "how": "one Pod per node the task Pod can be placed on, pinned by kubernetes.io/hostname; an image's seconds run from the Pod's create until the kubelet reported its imageID or the container ran (read every 0.5 s)",
    }))
}

/// Why the warm-up was skipped, as the step's evidence.
pub fn skipped(why: &str) -> Value {
    json!({"skipped": true, "why": why})
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Container;

    fn container(name: &str, image: &str, policy: Option<&str>) -> Container {
        Container {
            name: name.into(),
            image: Some(image.into()),
            image_pull_policy: policy.map(Into::into),
            ..Default::default()
        }
    }

    fn task() -> PodSpec {
        serde_json::from_value(json!({
            "containers": [
                {"name": "kandev-agent", "image": "reg.example/worker:1", "imagePullPolicy": "IfNotPresent",
                 "securityContext": {"runAsUser": 0}},
                {"name": "docker-engine", "image": "reg.example/daemon:1", "imagePullPolicy": "Always",
                 "securityContext": {"privileged": true}},
                {"name": "sidecar", "image": "reg.example/worker:1"},
            ],
            "tolerations": [{"key": "pool", "operator": "Equal", "value": "agents", "effect": "NoSchedule"}],
            "imagePullSecrets": [{"name": "regcred"}],
            "serviceAccountName": "kandev-executor",
            "nodeSelector": {"pool": "agents"},
        }))
        .unwrap_or_default()
    }

    #[test]
    fn a_node_is_warmed_once_in_the_round_after_it_joined_or_became_placeable() {
        let node = |name: &str, taint: Option<&str>| -> Node {
            let mut v = json!({"metadata": {"name": name, "labels": {
                "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name, "pool": "agents"}}, "spec": {}});
            if let Some(key) = taint {
                v["spec"]["taints"] = json!([{"key": key, "effect": "NoSchedule"}]);
            }
            serde_json::from_value(v).unwrap_or_default()
        };
        let next = |warmed: &[String], now: Vec<Node>| {
            let (chosen, left_out) = targets(&unwarmed(warmed, now), &task(), Arch::Amd64);
            let chosen: Vec<String> = chosen.into_iter().map(|t| t.node).collect();
            (chosen, left_out.len())
        };
        let warmed = vec!["a".to_owned()];
        // `b` joined still not ready, `c` ready: `c` now, `b` left out.
        let not_ready = Some("node.kubernetes.io/not-ready");
        let now = vec![node("a", None), node("b", not_ready), node("c", None)];
        assert_eq!(next(&warmed, now), (vec!["c".to_owned()], 1));
        // Then `b`'s kubelet is up: warmed in the round after; `a` and `c` never again.
        let warmed = vec!["a".to_owned(), "c".to_owned()];
        let now = vec![node("a", None), node("b", None), node("c", None)];
        assert_eq!(next(&warmed, now), (vec!["b".to_owned()], 0));
    }

    #[test]
    fn a_termination_the_kubelet_only_presumed_is_no_pull() {
        let status = |state: Value, last: Value| -> ContainerStatus {
            serde_json::from_value(json!({"name": "c", "image": "i", "imageID": "",
                "ready": false, "restartCount": 0, "state": state, "lastState": last}))
            .unwrap_or_default()
        };
        let unknown = json!({"terminated": {"exitCode": 137, "reason": STATUS_UNKNOWN}});
        let exited = json!({"terminated": {"exitCode": 0, "reason": "Completed"}});
        let waiting = json!({"waiting": {"reason": "ContainerCreating"}});
        assert!(!pulled(&status(unknown.clone(), json!({}))));
        assert!(!pulled(&status(waiting.clone(), unknown)));
        assert!(pulled(&status(exited.clone(), json!({}))));
        assert!(pulled(&status(waiting, exited)));
        assert!(pulled(&status(json!({"running": {}}), json!({}))));
    }

    #[test]
    fn each_image_once_with_the_task_pods_pull_policy() {
        let images = images_of(&task());
        assert_eq!(
            images,
            vec![
                Image {
                    container: "kandev-agent".into(),
                    image: "reg.example/worker:1".into(),
                    pull_policy: Some("IfNotPresent".into())
                },
                Image {
                    container: "docker-engine".into(),
                    image: "reg.example/daemon:1".into(),
                    pull_policy: Some("Always".into())
                },
            ]
        );
        let with_init = PodSpec {
            init_containers: Some(vec![container("init", "reg.example/init:1", None)]),
            ..task()
        };
        assert_eq!(images_of(&with_init)[0].image, "reg.example/init:1");
    }

    #[test]
    fn the_pod_is_pinned_tolerant_tokenless_unprivileged_and_labelled() {
        let task = task();
        let target = Target {
            node: "node-a".into(),
            hostname: "node-a.internal".into(),
        };
        let pod = warm_up_pod("r1", "ns", &target, &task, &images_of(&task));
        let v = serde_json::to_value(&pod).unwrap_or_default();
        let spec = &v["spec"];
        // Pinned through the scheduler, to the node's hostname label, nothing else selected.
        assert_eq!(
            spec["nodeSelector"],
            json!({"kubernetes.io/hostname": "node-a.internal"})
        );
        assert!(spec.get("nodeName").is_none());
        assert_eq!(spec["tolerations"], json!(task.tolerations));
        assert_eq!(spec["imagePullSecrets"], json!([{"name": "regcred"}]));
        assert_eq!(spec["automountServiceAccountToken"], json!(false));
        assert!(spec.get("serviceAccountName").is_none());
        assert_eq!(spec["restartPolicy"], json!("Never"));
        assert_eq!(spec["securityContext"]["runAsNonRoot"], json!(true));
        let containers = spec["containers"].as_array().cloned().unwrap_or_default();
        assert_eq!(containers.len(), 2);
        for c in &containers {
            assert_eq!(c["command"], json!(["sh", "-c", "exit 0"]));
            assert_eq!(
                c["securityContext"]["allowPrivilegeEscalation"],
                json!(false)
            );
            assert!(c["securityContext"].get("privileged").is_none());
            assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
            assert!(c["resources"]["requests"].is_object());
        }
        assert_eq!(containers[0]["imagePullPolicy"], json!("IfNotPresent"));
        assert_eq!(containers[1]["imagePullPolicy"], json!("Always"));
        let labels = &v["metadata"]["labels"];
        assert_eq!(labels["acceptance.kandev.ai/managed"], json!("true"));
        assert_eq!(labels["acceptance.kandev.ai/run"], json!("r1"));
        assert_eq!(labels[LABEL_ROLE], json!(ROLE));
        assert_eq!(v["metadata"]["namespace"], json!("ns"));
        // Named for the run and the node: another node, another name.
        let other = warm_up_pod(
            "r1",
            "ns",
            &Target {
                node: "node-b".into(),
                hostname: "node-b".into(),
            },
            &task,
            &images_of(&task),
        );
        assert_ne!(pod.metadata.name, other.metadata.name);
        // A task Pod without tolerations or pull secrets: none set.
        let bare = PodSpec {
            tolerations: None,
            image_pull_secrets: None,
            ..task.clone()
        };
        let v = serde_json::to_value(warm_up_pod("r1", "ns", &target, &bare, &images_of(&bare)))
            .unwrap_or_default();
        assert!(v["spec"].get("tolerations").is_none());
        assert!(v["spec"].get("imagePullSecrets").is_none());
    }

    #[test]
    fn only_nodes_the_task_pod_can_be_placed_on_are_warmed() {
        let node = |name: &str, pool: &str, taint: Option<&str>| -> Node {
            let mut v = json!({"metadata": {"name": name, "labels": {
                "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": format!("{name}-host"), "pool": pool}}, "spec": {}});
            if let Some(key) = taint {
                v["spec"]["taints"] = json!([{"key": key, "effect": "NoSchedule"}]);
            }
            serde_json::from_value(v).unwrap_or_default()
        };
        let nodes = [
            node("a", "agents", None),
            node("b", "batch", None),
            node("c", "agents", Some("gpu")),
        ];
        let (chosen, left_out) = targets(&nodes, &task(), Arch::Amd64);
        assert_eq!(
            chosen,
            vec![Target {
                node: "a".into(),
                hostname: "a-host".into()
            }]
        );
        assert_eq!(left_out.len(), 2, "{left_out:?}");
        assert!(targets(&nodes, &task(), Arch::Arm64).0.is_empty());
    }

    #[test]
    fn an_image_counts_pulled_once_its_id_is_reported_or_its_container_ran() {
        let status = |v: Value| -> ContainerStatus {
            serde_json::from_value(v).unwrap_or_else(|_| ContainerStatus::default())
        };
        let base =
            json!({"name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0});
        let with = |extra: Value| {
            let mut v = base.clone();
            if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            status(v)
        };
        assert!(!pulled(&with(
            json!({"state": {"waiting": {"reason": "ContainerCreating"}}})
        )));
        assert!(pulled(&with(json!({"imageID": "sha256:ab"}))));
        assert!(pulled(&with(
            json!({"state": {"terminated": {"exitCode": 128, "reason": "StartError"}}})
        )));
        assert!(pulled(&with(json!({"state": {"running": {}}}))));
    }
}
