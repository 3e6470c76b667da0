//! Secrets as the API server stores them: `stringData` merged into the base64 `data` on
//! every write (`stringData` wins, and is never stored), `type` defaulting to `Opaque`,
//! `data` values that are not base64 refused as the JSON decoder refuses them; and the
//! token controller's part for a `kubernetes.io/service-account-token` Secret: its
//! ServiceAccount must be named (422 otherwise), and it is filled with a token bound to the
//! Secret (valid until the Secret is deleted), the CA and the namespace.

use super::store::{Bound, Key, Store};
use base64::Engine;
use serde_json::{Value, json};

/// The annotation naming a token Secret's ServiceAccount.
const ACCOUNT_NAME: &str = "kubernetes.io/service-account.name";
/// The annotation the token controller sets to the ServiceAccount's UID.
const ACCOUNT_UID: &str = "kubernetes.io/service-account.uid";
const TOKEN_TYPE: &str = "kubernetes.io/service-account-token";

/// Why a Secret cannot be stored: the HTTP status, reason and message, as the API server
/// words them.
pub(crate) struct Refused {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

/// Prepares a Secret for storing (create or update), as decoding, defaulting and
/// validation do.
pub(crate) fn prepare(secret: &mut Value) -> Result<(), Refused> {
    let name = secret["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
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
    if secret["type"] == TOKEN_TYPE
        && secret["metadata"]["annotations"][ACCOUNT_NAME]
            .as_str()
            .is_none_or(str::is_empty)
    {
        return Err(Refused {
            code: 422,
            reason: "Invalid",
            message: format!(
                "Secret \"{name}\" is invalid: metadata.annotations[{ACCOUNT_NAME}]: Required value"
            ),
        });
    }
    Ok(())
}

/// The token controller on a stored `kubernetes.io/service-account-token` Secret of an
/// existing ServiceAccount: the Secret filled (`token`, `ca.crt`, `namespace`) and annotated
/// with the account's UID. None: not such a Secret, or already filled.
pub(crate) fn fill_token(store: &mut Store, key: &Key, ca_pem: &str) -> Option<Value> {
    let mut secret = store.objects.get(key)?.clone();
    if secret["type"] != TOKEN_TYPE || secret["data"]["token"].is_string() {
        return None;
    }
    let ns = key.1.clone();
    let account = secret["metadata"]["annotations"][ACCOUNT_NAME]
        .as_str()?
        .to_owned();
    let account_uid =
        store
            .objects
            .get(&("/serviceaccounts".into(), ns.clone(), account.clone()))?["metadata"]["uid"]
            .clone();
    let uid = secret["metadata"]["uid"].as_str()?.to_owned();
    let token = store.issue_token(
        &ns,
        &account,
        Some(Bound {
            key: key.clone(),
            uid,
        }),
    );
    let encode = |text: &str| json!(base64::engine::general_purpose::STANDARD.encode(text));
    secret["data"]["token"] = encode(&token);
    secret["data"]["ca.crt"] = encode(ca_pem);
    secret["data"]["namespace"] = encode(&ns);
    secret["metadata"]["annotations"][ACCOUNT_UID] = account_uid;
    Some(store.put(key.clone(), secret))
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
        let mut token = json!({"metadata": {"name": "t"}, "type": TOKEN_TYPE});
        let refused = prepare(&mut token).err().unwrap();
        assert_eq!(refused.code, 422);
        assert_eq!(
            refused.message,
            "Secret \"t\" is invalid: metadata.annotations[kubernetes.io/service-account.name]: Required value"
        );
    }
}
