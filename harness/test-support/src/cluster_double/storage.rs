//! Claims bound as a cluster binds them, by their StorageClass: `Immediate` classes are
//! provisioned when the claim is created (at once, or after a delay a test gives the class,
//! as a slow provisioner takes), `WaitForFirstConsumer` classes once the scheduler has placed
//! the first Pod that mounts the claim (`volume.kubernetes.io/selected-node` then names the
//! node), as the PV controller and the scheduler's `VolumeBinding` plugin do
//! (`pkg/controller/volume/persistentvolume/pv_controller.go`, `syncUnboundClaim`: a claim
//! of a delayed-binding class waits for `selected-node`; `pkg/scheduler/framework/plugins/
//! volumebinding/binder.go`, `AssumePodVolumes`/`BindPodVolumes`). A claim without a class
//! gets the default class (the `DefaultStorageClass` admission plugin,
//! `plugin/pkg/admission/storage/storageclass/setdefault/admission.go`: the class annotated
//! `storageclass.kubernetes.io/is-default-class: "true"`). Where no StorageClass applies at
//! all, the double keeps its older leniency: the claim is provisioned and bound at once (a
//! real cluster without a provisioner would leave it `Pending`).

use super::store::{DoubleState, Key, Store};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// A StorageClass's `volumeBindingMode` (`Immediate` when unset: `SetDefaults_StorageClass`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Immediate,
    WaitForFirstConsumer,
}

/// A class parameter the double's provisioner reads: how many seconds provisioning takes.
pub const PROVISIONING_SECONDS: &str = "kube-double.kandev.ai/provisioning-seconds";

const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// The default StorageClass's name, if one is annotated so.
pub(crate) fn default_class(store: &Store) -> Option<String> {
    store
        .of_resource("storageclasses")
        .find(|c| c["metadata"]["annotations"][DEFAULT_CLASS] == "true")
        .and_then(|c| c["metadata"]["name"].as_str().map(str::to_owned))
}

/// The StorageClass a claim names, if it exists.
fn class_of<'a>(store: &'a Store, claim: &Value) -> Option<&'a Value> {
    let name = claim["spec"]["storageClassName"].as_str()?;
    store
        .find("storageclasses", None, name)
        .map(|(_, class)| class)
}

/// How `claim` binds: its class's mode (Immediate without a class).
pub(crate) fn binding_mode(store: &Store, claim: &Value) -> Mode {
    match class_of(store, claim).map(|c| &c["volumeBindingMode"]) {
        Some(mode) if mode == "WaitForFirstConsumer" => Mode::WaitForFirstConsumer,
        _ => Mode::Immediate,
    }
}

/// How long the claim's provisioner takes (its class's [`PROVISIONING_SECONDS`]).
pub(crate) fn provisioning_delay(store: &Store, claim: &Value) -> Option<Duration> {
    class_of(store, claim)?["parameters"][PROVISIONING_SECONDS]
        .as_str()?
        .parse()
        .ok()
        .map(Duration::from_secs)
}

/// Provisions the volume of the stored claim `key` on the runtime and binds the claim to
/// it, as the PV controller updates a claim (a version of its own); `node` is the scheduler's
/// selected node of a `WaitForFirstConsumer` claim. A claim already bound, gone or replaced
/// meanwhile is left as it is.
pub(crate) async fn provision(
    state: &Arc<DoubleState>,
    key: Key,
    node: Option<&str>,
) -> Result<(), String> {
    let Some(runtime) = state.runtime.clone() else {
        return Ok(());
    };
    let claim = state.store().objects.get(&key).cloned();
    let Some(claim) = claim.filter(|c| c["status"]["phase"] != "Bound") else {
        return Ok(());
    };
    let uid = claim["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let map = |field: &str| -> std::collections::BTreeMap<String, String> {
        serde_json::from_value(claim["metadata"][field].clone()).unwrap_or_default()
    };
    let volume = runtime
        .create_workspace(&key.2, &map("labels"), &map("annotations"))
        .await
        .map_err(|e| format!("provisioning claim {}: {e}", key.2))?;
    // Bound in one go under the store's lock; a claim gone or replaced meanwhile gives the
    // volume back.
    let unused = {
        let mut store = state.store();
        let current = store
            .objects
            .get(&key)
            .cloned()
            .filter(|c| c["metadata"]["uid"].as_str() == Some(uid.as_str()));
        match current {
            None => Some(volume),
            Some(mut bound) => {
                store.volumes.insert(uid.clone(), volume);
                if let Some(node) = node {
                    bound["metadata"]["annotations"]["volume.kubernetes.io/selected-node"] =
                        json!(node);
                }
                bound["spec"]["volumeName"] = json!(format!("pvc-{uid}"));
                bound["status"] = json!({
                    "phase": "Bound",
                    "accessModes": bound["spec"]["accessModes"],
                    "capacity": {"storage": bound["spec"]["resources"]["requests"]["storage"]},
                });
                store.put(key, bound);
                None
            }
        }
    };
    if let Some(volume) = unused {
        let _ = runtime.delete_workspace(&volume).await;
    }
    Ok(())
}

/// A claim of an `Immediate` class, once stored: provisioned after its class's delay (none:
/// at once).
pub(crate) async fn provision_after(state: Arc<DoubleState>, key: Key, delay: Duration) {
    tokio::time::sleep(delay).await;
    if let Err(e) = provision(&state, key, None).await {
        eprintln!("kube double: {e}");
    }
}

/// The `WaitForFirstConsumer` claims `pod` mounts that are not bound yet (their keys).
pub(crate) fn waiting_for(store: &Store, pod: &Value) -> Vec<Key> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
        .map(|claim| {
            (
                "/persistentvolumeclaims".to_owned(),
                namespace.to_owned(),
                claim.to_owned(),
            )
        })
        .filter(|key| {
            store.objects.get(key).is_some_and(|c| {
                c["status"]["phase"] != "Bound"
                    && binding_mode(store, c) == Mode::WaitForFirstConsumer
            })
        })
        .collect()
}
