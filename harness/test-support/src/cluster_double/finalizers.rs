//! Finalizers, as the API server and the namespace controller keep them: a DELETE of an
//! object whose `metadata.finalizers` is not empty marks it (`deletionTimestamp`,
//! `deletionGracePeriodSeconds`) and keeps it until an update removes the last one (that an
//! object being deleted may not gain one is the real API server's to refuse: the corpus); a
//! namespace being deleted waits for the finalized content it holds. Whoever put a finalizer
//! there (a Pod's creator, a controller, a node agent: `controllers`) is the only one
//! expected to remove it.
//!
//! Kubernetes' rules, followed here:
//! - `Store.Delete` and `Store.updateForGracefulDeletionAndFinalizers`
//!   (staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go): an object with
//!   pending finalizers is never deleted at once; a kind without graceful deletion is marked
//!   by `markAsDeleting` (`deletionTimestamp` now, `deletionGracePeriodSeconds` 0); a Pod
//!   gets the grace period `podStrategy.CheckGracefulDelete` computes
//!   (pkg/registry/core/pod/strategy.go: the request's, else the Pod's
//!   `terminationGracePeriodSeconds`, 0 for a Pod no node took), and its kubelet's last,
//!   grace-0 delete after the containers stopped leaves it marked with grace 0 while
//!   finalizers remain. `rest.BeforeDelete` (staging/src/k8s.io/apiserver/pkg/registry/rest/
//!   delete.go): a DELETE of an object already being deleted changes nothing (the double
//!   takes no shorter grace period).
//! - `Store.Update` with `ShouldDeleteDuringUpdate` (store.go): the update that leaves no
//!   finalizer on an object being deleted, its grace period 0 or unset, deletes it.
//! - The namespace controller (pkg/controller/namespace/deletion/
//!   namespaced_resources_deleter.go and status_condition_utils.go): the namespace stays
//!   `Terminating` while content with finalizers remains, with the condition
//!   `NamespaceFinalizersRemaining` ("Some content in the namespace has finalizers
//!   remaining: `<finalizer>` in `<n>` resource instances").

use super::store::{DoubleState, Key, Store, now};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// An object's finalizers (none: empty).
pub(crate) fn of(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_owned))
        .collect()
}

fn deleting(object: &Value) -> bool {
    !object["metadata"]["deletionTimestamp"].is_null()
}

/// `markAsDeleting`: the deletion time (kept when already set) and grace period 0; the
/// first mark advances a generation the object has.
fn mark(object: &mut Value) {
    if !deleting(object) {
        object["metadata"]["deletionTimestamp"] = json!(now());
        advance_generation(object);
    }
    object["metadata"]["deletionGracePeriodSeconds"] = json!(0);
}

/// `generation + 1` when the object has one (`markAsDeleting` in apiserver
/// `pkg/registry/generic/registry/store.go`, `BeforeDelete` for graceful deletions).
fn advance_generation(object: &mut Value) {
    if let Some(generation) = object["metadata"]["generation"].as_i64().filter(|g| *g > 0) {
        object["metadata"]["generation"] = json!(generation + 1);
    }
}

/// The grace period of a Pod's delete (`podStrategy.CheckGracefulDelete`); a Pod without
/// `terminationGracePeriodSeconds` has the API server's default, 30 (`SetDefaults_PodSpec`).
fn pod_grace(pod: &Value, options: &Value) -> i64 {
    let asked = options["gracePeriodSeconds"]
        .as_i64()
        .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(30);
    if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
        0
    } else {
        asked.max(0)
    }
}

/// A DELETE's part that finalizers decide, before the resource's own removal: an object
/// already being deleted is answered as stored; an object with finalizers that no kubelet
/// has to stop is marked and kept (answered as stored, the caller removes nothing). Else
/// None, and the caller goes on removing it (`shown` is what it answers and stores: for a
/// Pod, its deletion grace period is set there).
pub(crate) fn on_delete(
    store: &mut Store,
    key: &Key,
    object: &Value,
    shown: &mut Value,
    options: &Value,
    kubelet_stops_it: bool,
) -> Option<Value> {
    if deleting(object) {
        return Some(object.clone());
    }
    if key.0 == "/pods" {
        shown["metadata"]["deletionGracePeriodSeconds"] = json!(pod_grace(object, options));
        // A Pod's first graceful deletion advances its generation (`BeforeDelete` in
        // apiserver `pkg/registry/rest/delete.go`).
        advance_generation(shown);
    }
    if of(object).is_empty() || kubelet_stops_it || key.0 == "/namespaces" {
        return None;
    }
    let mut held = object.clone();
    mark(&mut held);
    Some(store.put(key.clone(), held))
}

/// The kubelet's last delete of a Pod whose containers are gone (grace period 0): removed,
/// unless finalizers hold it (then kept, marked with grace 0, until they are removed).
pub(crate) fn kubelet_done(store: &mut Store, key: &Key, uid: &str) {
    let Some(pod) = store
        .objects
        .get(key)
        .filter(|p| p["metadata"]["uid"].as_str() == Some(uid))
        .cloned()
    else {
        return;
    };
    if of(&pod).is_empty() {
        store.delete(key);
    } else if pod["metadata"]["deletionGracePeriodSeconds"] != 0 {
        let mut held = pod;
        mark(&mut held);
        store.put(key.clone(), held);
    }
}

/// After an update is stored: an object being deleted whose grace period is over (0 or
/// unset) and which has no finalizer left is deleted (`ShouldDeleteDuringUpdate`). Whether
/// it was.
pub(crate) fn delete_if_finalized(store: &mut Store, key: &Key) -> bool {
    let Some(object) = store.objects.get(key) else {
        return false;
    };
    let grace_over = object["metadata"]["deletionGracePeriodSeconds"]
        .as_i64()
        .is_none_or(|g| g == 0);
    if !(deleting(object) && grace_over && of(object).is_empty()) {
        return false;
    }
    let uid = object["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    store.delete(key);
    store.running.remove(&uid);
    store.forget_bound_tokens(&uid);
    true
}

/// Deletes every object `gone` selects as a DELETE would: one with finalizers is marked and
/// kept.
pub(crate) fn delete_where(store: &mut Store, gone: impl Fn(&Key) -> bool) {
    let keys: Vec<Key> = store.objects.keys().filter(|k| gone(k)).cloned().collect();
    for key in keys {
        let Some(object) = store.objects.get(&key).cloned() else {
            continue;
        };
        if of(&object).is_empty() {
            store.delete(&key);
        } else if !deleting(&object) || object["metadata"]["deletionGracePeriodSeconds"] != 0 {
            let mut held = object;
            mark(&mut held);
            store.put(key, held);
        }
    }
}

/// How long the namespace controller keeps waiting for finalized content (a real one waits
/// for ever; the double's task ends some time).
const NAMESPACE_PATIENCE: Duration = Duration::from_secs(3600);

/// The namespace controller's wait: until no object in namespace `name` carries a
/// finalizer, the namespace meanwhile saying which finalizers remain. Whether they went
/// (false: still held after [`NAMESPACE_PATIENCE`], or the namespace went another way).
pub(crate) async fn content_finalized(state: &Arc<DoubleState>, name: &str) -> bool {
    let started = std::time::Instant::now();
    let mut shown = String::new();
    loop {
        let remaining = {
            let mut store = state.store();
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            for ((_, ns, _), object) in &store.objects {
                if ns == name {
                    for finalizer in of(object) {
                        *counts.entry(finalizer).or_default() += 1;
                    }
                }
            }
            let namespace_key: Key = ("/namespaces".into(), String::new(), name.to_owned());
            let Some(mut namespace) = store.objects.get(&namespace_key).cloned() else {
                return false;
            };
            let message = counts
                .iter()
                .map(|(f, n)| format!("{f} in {n} resource instances"))
                .collect::<Vec<_>>()
                .join(", ");
            if !counts.is_empty() && message != shown {
                namespace["status"]["conditions"] = json!([{
                    "type": "NamespaceFinalizersRemaining", "status": "True",
                    "reason": "SomeFinalizersRemain", "lastTransitionTime": now(),
                    "message": format!("Some content in the namespace has finalizers remaining: {message}"),
                }]);
                store.put(namespace_key, namespace);
                shown = message;
            }
            counts.len()
        };
        if remaining == 0 {
            return true;
        }
        if started.elapsed() > NAMESPACE_PATIENCE {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(store: &mut Store, name: &str, finalizers: &[&str]) -> Key {
        let key: Key = ("/pods".into(), "ns".into(), name.into());
        store.create(
            key.clone(),
            json!({"kind": "Pod", "metadata": {"name": name, "namespace": "ns",
                "finalizers": finalizers}, "spec": {"nodeName": "n", "terminationGracePeriodSeconds": 30}}),
        );
        key
    }

    #[test]
    fn a_delete_of_an_object_with_finalizers_marks_and_keeps_it() {
        let mut store = Store::default();
        let key = stored(&mut store, "held", &["example.com/hold"]);
        let object = store.objects[&key].clone();
        let mut shown = object.clone();
        let held = on_delete(
            &mut store,
            &key,
            &object,
            &mut shown,
            &json!({"gracePeriodSeconds": 2}),
            false,
        )
        .unwrap();
        assert!(held["metadata"]["deletionTimestamp"].is_string());
        assert_eq!(held["metadata"]["deletionGracePeriodSeconds"], 0);
        assert_eq!(store.objects[&key], held);
        // Deleted again: answered as stored, nothing changes.
        let mut again = held.clone();
        assert_eq!(
            on_delete(&mut store, &key, &held, &mut again, &json!({}), false),
            Some(held.clone())
        );
        // Without finalizers the caller removes it; a Pod's grace period is the request's.
        let free = stored(&mut store, "free", &[]);
        let object = store.objects[&free].clone();
        let mut shown = object.clone();
        let options = json!({"gracePeriodSeconds": 2});
        assert_eq!(
            on_delete(&mut store, &free, &object, &mut shown, &options, true),
            None
        );
        assert_eq!(shown["metadata"]["deletionGracePeriodSeconds"], 2);
    }

    #[test]
    fn the_kubelet_leaves_a_held_pod_with_grace_zero_and_the_update_removing_the_last_finalizer_deletes_it()
     {
        let mut store = Store::default();
        let key = stored(&mut store, "held", &["a/x", "b/y"]);
        let uid = store.objects[&key]["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_owned();
        let mut marked = store.objects[&key].clone();
        marked["metadata"]["deletionTimestamp"] = json!(now());
        marked["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        store.put(key.clone(), marked);
        kubelet_done(&mut store, &key, &uid);
        assert_eq!(
            store.objects[&key]["metadata"]["deletionGracePeriodSeconds"],
            0
        );
        // Removing one keeps it; the last deletes it.
        let mut one = store.objects[&key].clone();
        one["metadata"]["finalizers"] = json!(["a/x"]);
        store.put(key.clone(), one);
        assert!(!delete_if_finalized(&mut store, &key));
        let mut none = store.objects[&key].clone();
        none["metadata"]["finalizers"] = json!([]);
        store.put(key.clone(), none);
        assert!(delete_if_finalized(&mut store, &key));
        assert!(!store.objects.contains_key(&key));
    }

    #[test]
    fn a_pod_no_node_took_has_no_grace_period() {
        let pod = json!({"spec": {"terminationGracePeriodSeconds": 30}});
        assert_eq!(pod_grace(&pod, &json!({"gracePeriodSeconds": 5})), 0);
        let bound = json!({"spec": {"nodeName": "n", "terminationGracePeriodSeconds": 30}});
        assert_eq!(pod_grace(&bound, &json!({})), 30);
        assert_eq!(pod_grace(&bound, &json!({"gracePeriodSeconds": 5})), 5);
    }

    #[test]
    fn a_namespace_sweep_keeps_what_finalizers_hold() {
        let mut store = Store::default();
        let held = stored(&mut store, "held", &["example.com/hold"]);
        let free = stored(&mut store, "free", &[]);
        delete_where(&mut store, |(_, ns, _)| ns == "ns");
        assert!(!store.objects.contains_key(&free));
        assert!(store.objects[&held]["metadata"]["deletionTimestamp"].is_string());
    }
}
