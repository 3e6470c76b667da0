//! Finalizers, as far as the cluster twins need them (a stuck node agent's on every Pod:
//! `controllers`): a DELETE of an object whose `metadata.finalizers` is not empty marks it
//! (`deletionTimestamp`, `deletionGracePeriodSeconds` 0 once no kubelet has containers to
//! stop) and keeps it until an update removes the last one; a namespace being deleted waits
//! `Terminating` while content with finalizers remains. The rest (grace periods, generation,
//! the namespace's conditions, a new finalizer's 422) is the real API server's: the corpus
//! and `tests/real_api_server/finalizers.rs`.
//!
//! Kubernetes' rules, followed here: `Store.Delete`, `updateForGracefulDeletionAndFinalizers`
//! and `ShouldDeleteDuringUpdate` (staging/src/k8s.io/apiserver/pkg/registry/generic/
//! registry/store.go); `rest.BeforeDelete` (a DELETE of an object being deleted changes
//! nothing); the namespace controller's wait (pkg/controller/namespace/deletion/
//! namespaced_resources_deleter.go).

use super::store::{DoubleState, Key, Store, now};
use serde_json::{Value, json};
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

/// Marked as deleted with its grace period over (`markAsDeleting`), and stored.
fn hold(store: &mut Store, key: &Key, mut object: Value) -> Value {
    if !deleting(&object) {
        object["metadata"]["deletionTimestamp"] = json!(now());
    }
    object["metadata"]["deletionGracePeriodSeconds"] = json!(0);
    store.put(key.clone(), object)
}

/// A DELETE's part that finalizers decide: an object already being deleted is answered as
/// stored; one with finalizers that no kubelet has to stop is marked and kept (the caller
/// removes nothing). Else None: the caller goes on removing it.
pub(crate) fn on_delete(
    store: &mut Store,
    key: &Key,
    object: &Value,
    kubelet_stops_it: bool,
) -> Option<Value> {
    if deleting(object) {
        return Some(object.clone());
    }
    if of(object).is_empty() || kubelet_stops_it || key.0 == "/namespaces" {
        return None;
    }
    Some(hold(store, key, object.clone()))
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
        hold(store, key, pod);
    }
}

/// After an update is stored: an object being deleted whose grace period is over (0 or
/// unset) and which has no finalizer left is deleted (`ShouldDeleteDuringUpdate`).
pub(crate) fn delete_if_finalized(store: &mut Store, key: &Key) {
    let Some(object) = store.objects.get(key) else {
        return;
    };
    let grace_over = object["metadata"]["deletionGracePeriodSeconds"]
        .as_i64()
        .is_none_or(|g| g == 0);
    if !(deleting(object) && grace_over && of(object).is_empty()) {
        return;
    }
    let uid = object["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    store.delete(key);
    store.running.remove(&uid);
    store.forget_bound_tokens(&uid);
}

/// The namespace controller's wait: until no object in namespace `name` carries a finalizer
/// (a real one waits for ever). Whether the namespace is still there to remove.
pub(crate) async fn content_finalized(state: &Arc<DoubleState>, name: &str) -> bool {
    let namespace: Key = ("/namespaces".into(), String::new(), name.to_owned());
    loop {
        {
            let store = state.store();
            if !store.objects.contains_key(&namespace) {
                return false;
            }
            let held = store
                .objects
                .iter()
                .any(|((_, ns, _), object)| ns == name && !of(object).is_empty());
            if !held {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
