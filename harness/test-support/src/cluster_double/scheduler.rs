//! The double's one node as the API server shows it (a `Node` object: its labels and
//! allocatable, what the harness reads of a node) and a minimal scheduler that binds every Pod to it, unless the Pod
//! mounts a claim that does not exist or its `nodeSelector` does not match the node's
//! labels: then the Pod stays `Unschedulable` with the words of the real scheduler (v1.37)
//! for that case, retried until it fits. Its wording is the real scheduler's, held to it
//! word for word in `tests/real_api_server/scheduling.rs` ([`scheduler_says`]), where the
//! harness's reading of it is judged too. Capacity, claim binding modes and preemption are
//! the real scheduler's alone (`real_api_server/claims.rs`): the node's allocatable is only
//! read (`--jobs`), never enforced.

use super::store::{DoubleState, Key, Store};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The double's one node: every Pod's `spec.nodeName` (its Pods run on this host's engine).
pub const NODE: &str = "kube-double-node";

/// The labels the double's node carries (what its scheduler matches `nodeSelector` against),
/// as a kubelet registers them (its deprecated `beta.` twins no Pod here selects).
fn node_labels() -> BTreeMap<String, String> {
    let arch = kandev_harness::pod::compose::Arch::of_this_machine().as_str();
    BTreeMap::from([
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), arch.to_owned()),
        ("kubernetes.io/hostname".to_owned(), NODE.to_owned()),
    ])
}

impl DoubleState {
    /// Sets what the node declares allocatable (`cpu`, `memory`, `pods`: quantities), as a
    /// kubelet's status update would (a change of its own version), for what reads it.
    pub fn set_node_allocatable(&self, cpu: &str, memory: &str, pods: &str) {
        let mut store = self.store();
        if let Some(mut node) = store.objects.get(&node_key()).cloned() {
            node["status"]["allocatable"] = json!({"cpu": cpu, "memory": memory, "pods": pods});
            store.put(node_key(), node);
        }
    }
}

pub(crate) fn node_key() -> Key {
    ("/nodes".into(), String::new(), NODE.into())
}

/// Stores the node as its kubelet registers it, in what the harness reads (`placement`,
/// `capacity`): its labels, no taints, and a generous allocatable (a kubelet's default
/// `maxPods`). Its capacity, conditions and `nodeInfo` nothing reads.
pub(crate) fn register_node(store: &mut Store) {
    store.create(
        node_key(),
        json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": NODE, "labels": node_labels()}, "spec": {},
            "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}}}),
    );
}

/// Why the scheduler cannot bind `pod` to the node now, in the real scheduler's words (as
/// `real_api_server/scheduling.rs` prints them). None: it fits.
pub(crate) fn unschedulable(store: &Store, pod: &Value) -> Option<String> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let volumes = pod["spec"]["volumes"].as_array().into_iter().flatten();
    for claim in volumes.filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str()) {
        let key = (
            "/persistentvolumeclaims".into(),
            namespace.into(),
            claim.into(),
        );
        if !store.objects.contains_key(&key) {
            return Some(format!(
                "0/1 nodes are available: persistentvolumeclaim \"{claim}\" not found. not found"
            ));
        }
    }
    // The node's labels as stored (a test may relabel the node).
    let labels: BTreeMap<String, String> = store
        .objects
        .get(&node_key())
        .and_then(|n| serde_json::from_value(n["metadata"]["labels"].clone()).ok())
        .unwrap_or_else(node_labels);
    let mut selector = pod["spec"]["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten();
    selector
        .any(|(k, v)| labels.get(k).map(String::as_str) != v.as_str())
        .then(|| NO_MATCH.to_owned())
}

/// What the double's scheduler says of `pod` on a fresh double (its node alone, no claims):
/// `real_api_server/scheduling.rs` holds it to the real scheduler's words for the same Pod.
pub fn scheduler_says(pod: &Value) -> Option<String> {
    let mut store = Store::default();
    register_node(&mut store);
    unschedulable(&store, pod)
}

/// The real scheduler's message for a `nodeSelector` its one node does not match.
const NO_MATCH: &str = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheduler_refuses_an_unmatched_selector_and_a_missing_claim() {
        let mut store = Store::default();
        register_node(&mut store);
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
            json!({"status": {"phase": "Pending"}}),
        );
        assert_eq!(unschedulable(&store, &claim), None);
    }
}
