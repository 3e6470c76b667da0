//! Secrets as the API server stores them: `stringData` merged into the base64 `data` on
//! every write (`stringData` wins, and is never stored), `type` defaulting to `Opaque`,
//! `data` values that are not base64 refused as the JSON decoder refuses them (the harness's
//! run inputs are a Secret its Job's Pod mounts). Not the token controller's part for a
//! `kubernetes.io/service-account-token` Secret, nor that type's validation: the harness
//! makes no such Secret (its tokens are TokenRequests), the corpus lists the difference.

use base64::Engine;
use serde_json::{Value, json};

/// Why a Secret cannot be stored: the HTTP status, reason and message, as the API server
/// words them.
pub(crate) struct Refused {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

/// Prepares a Secret for storing (create or update), as decoding and defaulting do.
pub(crate) fn prepare(secret: &mut Value) -> Result<(), Refused> {
    for (key, value) in secret["data"].as_object().into_iter().flatten() {
        let text = value.as_str().unwrap_or_default();
        if let Err(e) = base64::engine::general_purpose::STANDARD.decode(text) {
            return Err(Refused {
                code: 400,
                reason: "BadRequest",
                message: format!(
                    "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data in data[{key}]: {e}"
                ),
            });
        }
    }
    if let Some(fields) = secret.as_object_mut()
        && let Some(Value::Object(strings)) = fields.remove("stringData")
    {
        for (key, value) in strings {
            let encoded = base64::engine::general_purpose::STANDARD
                .encode(value.as_str().unwrap_or_default());
            secret["data"][key.as_str()] = json!(encoded);
        }
    }
    if secret["type"].as_str().is_none_or(str::is_empty) {
        secret["type"] = json!("Opaque");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_data_is_merged_into_data_and_the_type_defaults() {
        let mut secret = json!({"metadata": {"name": "s"},
            "data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "over", "c": "new"}});
        prepare(&mut secret).ok().unwrap();
        assert_eq!(
            secret,
            json!({"metadata": {"name": "s"}, "type": "Opaque",
                "data": {"a": "eA==", "b": "b3Zlcg==", "c": "bmV3"}})
        );
        let mut bad = json!({"metadata": {"name": "s"}, "data": {"a": "not base64!"}});
        assert_eq!(prepare(&mut bad).err().unwrap().code, 400);
    }
}
