//! Secrets as the API server stores them: `stringData` merged into the base64 `data` on
//! every write (`stringData` wins, and is never stored), `type` defaulting to `Opaque` (the
//! harness's run inputs are a Secret its Job's Pod mounts). Not the token controller's part for a
//! `kubernetes.io/service-account-token` Secret, nor that type's validation: the harness
//! makes no such Secret (its tokens are TokenRequests), the corpus lists the difference.

use base64::Engine;
use serde_json::{Value, json};

/// Prepares a Secret for storing (create or update), as decoding and defaulting do. `data`
/// is stored as sent: whether it is base64 is the real API server's to judge (its JSON
/// decoder refuses it 400, the corpus shows it); the harness's inputs Secret's `data` is
/// encoded by k8s-openapi's `ByteString`.
pub(crate) fn prepare(secret: &mut Value) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_data_is_merged_into_data_and_the_type_defaults() {
        let mut secret = json!({"metadata": {"name": "s"},
            "data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "over", "c": "new"}});
        prepare(&mut secret);
        assert_eq!(
            secret,
            json!({"metadata": {"name": "s"}, "type": "Opaque",
                "data": {"a": "eA==", "b": "b3Zlcg==", "c": "bmV3"}})
        );
    }
}
