//! PATCH bodies applied as the API server applies them: JSON merge patch (RFC 7386), the one
//! patch format the harness (its Leases) and its tests send. JSON Patch, strategic merge patch
//! and server-side apply are refused before they get here (`negotiation`: 415). The corpus
//! (`merge_patches_as_on_a_real_api_server...`) referees the merging.

use serde_json::{Value, json};

/// RFC 7386: `patch` merged into `target`.
pub(crate) fn merge(target: &mut Value, patch: &Value) {
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    for (key, value) in patch {
        if !value.is_null() {
            merge(&mut target[key.as_str()], value);
        } else if let Some(object) = target.as_object_mut() {
            object.remove(key);
        }
    }
}
