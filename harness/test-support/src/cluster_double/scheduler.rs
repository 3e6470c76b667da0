//! The double's one node as the API server shows it (a `Node` object: its labels, capacity
//! and allocatable) and the scheduler that binds Pods to it, as a v1.36 scheduler's default
//! filters would judge them, in its words.
//!
//! What the scheduler checks, in its filters' order (`getDefaultPlugins` in
//! `pkg/scheduler/apis/config/v1/default_plugins.go`), and the reasons it gives:
//! - `NodeAffinity` (`pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go`,
//!   `ErrReasonPod`): `node(s) didn't match Pod's node affinity/selector` for a
//!   `nodeSelector` the node's labels do not satisfy;
//! - `NodeResourcesFit` (`pkg/scheduler/framework/plugins/noderesources/fit.go`,
//!   `fitsRequest`): `Too many pods` past `allocatable.pods`, `Insufficient cpu` /
//!   `Insufficient memory` when the Pod's requests exceed the node's allocatable less what
//!   the Pods bound there (and not ended) request;
//! - `VolumeBinding` (`pkg/scheduler/framework/plugins/volumebinding/volume_binding.go`,
//!   `PreFilter`): a claim the Pod mounts that does not exist (`persistentvolumeclaim "<name>"
//!   not found`), and a claim of an `Immediate` class still unbound (`pod has unbound
//!   immediate PersistentVolumeClaims`), both before any node is looked at.
//!
//! The message is `FitError.Error()` (`pkg/scheduler/framework/types.go`): `0/<nodes> nodes
//! are available: <count> <reason>, ...` (sorted) and `.`, then the PostFilter's
//! (`DefaultPreemption`): `preemption: 0/1 nodes are available: 1 No preemption victims found
//! for incoming pod.` when evicting could help but no Pod of lower priority exists (the
//! double's Pods all have priority 0), `1 Preemption is not helpful for scheduling.` when it
//! could not. An unschedulable Pod is retried (the scheduler re-queues it on cluster events:
//! a Pod ended or gone, a claim created, the node changed), so it is placed once it fits.

use super::store::{DoubleState, Key, Store};
use kandev_harness::pod::requests::{Amounts, requests};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The double's one node: every Pod's `spec.nodeName` (its Pods run on this host's engine).
pub const NODE: &str = "kube-double-node";

/// What the node declares unless a test changes it ([`DoubleState::set_node_allocatable`]):
/// generous, so that the catalogue's concurrency is never the double's limit, and a
/// kubelet's default `maxPods`.
///
/// [`DoubleState::set_node_allocatable`]: super::DoubleState::set_node_allocatable
pub const DEFAULT_ALLOCATABLE: (&str, &str, &str) = ("64", "256Gi", "110");

/// The labels the double's node carries (what its scheduler matches `nodeSelector` against),
/// as a kubelet registers them.
pub fn node_labels() -> BTreeMap<String, String> {
    let arch = kandev_harness::pod::compose::Arch::of_this_machine().as_str();
    BTreeMap::from([
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), arch.to_owned()),
        ("kubernetes.io/hostname".to_owned(), NODE.to_owned()),
        ("beta.kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("beta.kubernetes.io/arch".to_owned(), arch.to_owned()),
    ])
}

impl DoubleState {
    /// Sets what the node declares allocatable (`cpu`, `memory`, `pods`: quantities), as a
    /// kubelet's status update would (a change of its own version); Pods waiting for room
    /// are placed at the scheduler's next look.
    pub fn set_node_allocatable(&self, cpu: &str, memory: &str, pods: &str) {
        let mut store = self.store();
        if let Some(mut node) = store.objects.get(&node_key()).cloned() {
            let resources = json!({"cpu": cpu, "memory": memory, "pods": pods});
            node["status"]["capacity"] = resources.clone();
            node["status"]["allocatable"] = resources;
            store.put(node_key(), node);
        }
    }
}

pub(crate) fn node_key() -> Key {
    ("/nodes".into(), String::new(), NODE.into())
}

/// Stores the node as its kubelet registers it: labels, capacity and allocatable (equal: the
/// double reserves nothing for system daemons), Ready.
pub(crate) fn register_node(store: &mut Store) {
    let arch = kandev_harness::pod::compose::Arch::of_this_machine().as_str();
    let (cpu, memory, pods) = DEFAULT_ALLOCATABLE;
    let resources = json!({"cpu": cpu, "memory": memory, "pods": pods});
    store.create(
        node_key(),
        json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NODE, "labels": node_labels()},
            "spec": {},
            "status": {
                "capacity": resources, "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "message": "kubelet is posting ready status"}],
                "nodeInfo": {"architecture": arch, "operatingSystem": "linux",
                    "kubeletVersion": "v1.36.0", "containerRuntimeVersion": "docker://local"}}}),
    );
}

/// The node's allocatable CPU and memory, and how many Pods it takes.
fn allocatable(store: &Store) -> (Amounts, i64) {
    let node = store.objects.get(&node_key());
    let list = node
        .map(|n| n["status"]["allocatable"].clone())
        .and_then(|a| serde_json::from_value(a).ok())
        .unwrap_or_default();
    let pods = node
        .and_then(|n| n["status"]["allocatable"]["pods"].as_str())
        .and_then(|p| p.parse().ok())
        .unwrap_or(110);
    (Amounts::of(&list), pods)
}

/// What a stored Pod requests (a limit without a request counts as its request, as
/// `pod::requests` sums it).
pub(crate) fn pod_requests(pod: &Value) -> Amounts {
    serde_json::from_value(pod["spec"].clone())
        .map(|spec| requests(&spec))
        .unwrap_or_default()
}

/// The Pods bound to the node that still hold what they requested: not ended (the
/// scheduler's cache drops a Pod once it is terminal or gone), other than `uid`.
fn bound_elsewhere<'a>(store: &'a Store, uid: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    store.of_resource("pods").filter(move |p| {
        let this = p["metadata"]["uid"].as_str().unwrap_or_default();
        p["spec"]["nodeName"] == NODE && this != uid && !store.ended.contains(this)
    })
}

/// The PostFilter's part of the message: whether evicting Pods could have made room.
fn preemption(helps: bool) -> &'static str {
    if helps {
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    } else {
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    }
}

/// Why the scheduler cannot bind `pod` to the node now, in its words. None: it fits.
pub(crate) fn unschedulable(store: &Store, pod: &Value) -> Option<String> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    // VolumeBinding's PreFilter: before any node is filtered, so the reason stands alone.
    let mut unbound_immediate = false;
    for volume in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str() else {
            continue;
        };
        let key = (
            "/persistentvolumeclaims".to_owned(),
            namespace.to_owned(),
            claim.to_owned(),
        );
        match store.objects.get(&key) {
            None => {
                return Some(format!(
                    "0/1 nodes are available: persistentvolumeclaim \"{claim}\" not found. {}",
                    preemption(false)
                ));
            }
            Some(found) => {
                unbound_immediate |= found["status"]["phase"] != "Bound"
                    && super::storage::binding_mode(store, found)
                        == super::storage::Mode::Immediate;
            }
        }
    }
    if unbound_immediate {
        return Some(format!(
            "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. {}",
            preemption(false)
        ));
    }
    // NodeAffinity: the node's labels as stored (a test may relabel the node).
    let labels: BTreeMap<String, String> = store
        .objects
        .get(&node_key())
        .and_then(|n| serde_json::from_value(n["metadata"]["labels"].clone()).ok())
        .unwrap_or_else(node_labels);
    let selector = pod["spec"]["nodeSelector"].as_object();
    if selector
        .into_iter()
        .flatten()
        .any(|(k, v)| labels.get(k).map(String::as_str) != v.as_str())
    {
        return Some(format!(
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. {}",
            preemption(false)
        ));
    }
    // NodeResourcesFit.
    let (allocatable, max_pods) = allocatable(store);
    let mut used = Amounts::default();
    let mut count = 0i64;
    for other in bound_elsewhere(store, uid) {
        let r = pod_requests(other);
        used.cpu_millis += r.cpu_millis;
        used.memory_bytes += r.memory_bytes;
        count += 1;
    }
    let wanted = pod_requests(pod);
    let mut reasons = Vec::new();
    if count + 1 > max_pods {
        reasons.push("Too many pods");
    }
    if wanted.cpu_millis > 0 && wanted.cpu_millis > allocatable.cpu_millis - used.cpu_millis {
        reasons.push("Insufficient cpu");
    }
    if wanted.memory_bytes > 0 && wanted.memory_bytes > allocatable.memory_bytes - used.memory_bytes
    {
        reasons.push("Insufficient memory");
    }
    if reasons.is_empty() {
        return None;
    }
    let mut counted: Vec<String> = reasons.iter().map(|r| format!("1 {r}")).collect();
    counted.sort();
    Some(format!(
        "0/1 nodes are available: {}. {}",
        counted.join(", "),
        preemption(true)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, cpu: &str, node: Option<&str>) -> Value {
        let mut pod = json!({"kind": "Pod", "metadata": {"namespace": "ns", "uid": uid, "name": uid},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}});
        if let Some(node) = node {
            pod["spec"]["nodeName"] = json!(node);
        }
        pod
    }

    fn store_with(cpu: &str) -> Store {
        let mut store = Store::default();
        register_node(&mut store);
        let key = node_key();
        let mut node = store.objects.get(&key).cloned().unwrap_or_default();
        node["status"]["allocatable"]["cpu"] = json!(cpu);
        store.put(key, node);
        store
    }

    #[test]
    fn requests_beyond_what_is_left_are_insufficient_in_the_schedulers_words() {
        let mut store = store_with("1");
        assert_eq!(unschedulable(&store, &pod("a", "600m", None)), None);
        store.put(
            ("/pods".into(), "ns".into(), "a".into()),
            pod("a", "600m", Some(NODE)),
        );
        assert_eq!(
            unschedulable(&store, &pod("b", "600m", None)).as_deref(),
            Some(
                "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
            )
        );
        // Once the first has ended, the second fits.
        store.ended.insert("a".into());
        assert_eq!(unschedulable(&store, &pod("b", "600m", None)), None);
    }

    #[test]
    fn the_scheduler_refuses_an_unmatched_selector_and_a_missing_claim() {
        let mut store = store_with("64");
        let arch = kandev_harness::pod::compose::Arch::of_this_machine().as_str();
        let fits = json!({"metadata": {"namespace": "ns"},
            "spec": {"nodeSelector": {"kubernetes.io/os": "linux", "kubernetes.io/arch": arch}}});
        assert_eq!(unschedulable(&store, &fits), None);
        let never = json!({"metadata": {"namespace": "ns"},
            "spec": {"nodeSelector": {"kandev.ai/e2e-never": "true"}}});
        assert!(
            unschedulable(&store, &never)
                .unwrap()
                .contains("didn't match Pod's node affinity/selector")
        );
        let claim = json!({"metadata": {"namespace": "ns"}, "spec": {"volumes": [
            {"name": "kandev-workspace", "persistentVolumeClaim": {"claimName": "gone"}}]}});
        assert!(
            unschedulable(&store, &claim)
                .unwrap()
                .contains("persistentvolumeclaim \"gone\" not found")
        );
        store.put(
            ("/persistentvolumeclaims".into(), "ns".into(), "gone".into()),
            json!({"status": {"phase": "Bound"}}),
        );
        assert_eq!(unschedulable(&store, &claim), None);
    }
}
