//! Claims provisioned and bound at once, whatever their StorageClass (a volume on the
//! runtime, as a provisioner makes one, bound as the PV controller binds it). Binding modes
//! (`Immediate` waiting for a provisioner, `WaitForFirstConsumer` and the scheduler's
//! `volume.kubernetes.io/selected-node`), the default class's admission and the scheduler's
//! wait for unbound claims are the real control plane's alone, judged with the harness in
//! `tests/real_api_server/claims.rs`: no test on the double needs them.

use super::store::{DoubleState, Key};
use serde_json::json;
use std::sync::Arc;

/// Provisions the volume of the stored claim `key` on the runtime and binds the claim to
/// it, as the PV controller updates a claim (a version of its own). A claim already bound,
/// gone or replaced meanwhile is left as it is.
pub(crate) async fn provision(state: &Arc<DoubleState>, key: Key) -> Result<(), String> {
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
