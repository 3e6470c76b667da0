//! The `ServiceAccount` admission plugin on a Pod create, as a v1.36 API server runs it
//! (`plugin/pkg/admission/serviceaccount/admission.go`): the Pod's account defaults to
//! `default` and must exist (403 otherwise), and a Pod whose token is automounted gets the
//! projected `kube-api-access-<5>` volume (a bound token, the cluster CA, the namespace)
//! mounted read-only at [`TOKEN_MOUNT`] in every container and init container. What the
//! volume shows inside the Pod is the kubelet's part (`mounts`).

use super::store::Store;
use serde_json::{Value, json};

/// Where the token, `ca.crt` and `namespace` are mounted (`DefaultAPITokenMountPath`).
pub(crate) const TOKEN_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The token volume's name before its random suffix (`ServiceAccountVolumeName-`).
pub(crate) const VOLUME_PREFIX: &str = "kube-api-access-";

/// The token's lifetime the plugin asks for: an hour and 7 s
/// (`serviceaccount.WarnOnlyBoundTokenExpirationSeconds`; the 7 s mark tokens a kubelet
/// refreshes).
const EXPIRATION_SECONDS: i64 = 3607;

/// Admits a Pod create in `namespace`: its ServiceAccount must exist (the 403 an API server
/// answers otherwise is the error); `serviceAccountName` is set, and the token volume added
/// when the token is automounted.
pub(crate) fn admit(
    store: &Store,
    namespace: &str,
    name: &str,
    pod: &mut Value,
) -> Result<(), String> {
    let account = pod["spec"]["serviceAccountName"]
        .as_str()
        .filter(|a| !a.is_empty())
        .unwrap_or("default")
        .to_owned();
    let Some(sa) = store.objects.get(&(
        "/serviceaccounts".into(),
        namespace.to_owned(),
        account.clone(),
    )) else {
        return Err(format!(
            "pods \"{name}\" is forbidden: error looking up service account {namespace}/{account}: serviceaccount \"{account}\" not found"
        ));
    };
    pod["spec"]["serviceAccountName"] = json!(account);
    if automounts(sa, pod) {
        mount_token(pod, &volume_name());
    }
    Ok(())
}

/// Whether the Pod gets a token (`shouldAutomount`): the Pod's field wins, then the
/// ServiceAccount's, and by default it does.
pub(crate) fn automounts(account: &Value, pod: &Value) -> bool {
    pod["spec"]["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| account["automountServiceAccountToken"].as_bool())
        .unwrap_or(true)
}

/// `kube-api-access-` and 5 characters of the API server's name generator
/// (`utilrand.String`: consonants and digits, no vowels, no 0, 1 or 3).
fn volume_name() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let random = uuid::Uuid::new_v4();
    let suffix: String = random
        .as_bytes()
        .iter()
        .take(5)
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect();
    format!("{VOLUME_PREFIX}{suffix}")
}

/// The projected volume the plugin adds (`createVolume`): the token, `ca.crt` from the
/// `kube-root-ca.crt` ConfigMap, and the namespace from the downward API, mode 0644.
pub(crate) fn token_volume(name: &str) -> Value {
    json!({"name": name, "projected": {
        "defaultMode": 420,
        "sources": [
            {"serviceAccountToken": {"expirationSeconds": EXPIRATION_SECONDS, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ],
    }})
}

/// Mounts the token volume (named `name` unless the Pod already has one) read-only at
/// [`TOKEN_MOUNT`] in every container and init container that mounts nothing there, and adds
/// the volume when one of them does, as `mountServiceAccountToken` does.
pub(crate) fn mount_token(pod: &mut Value, name: &str) {
    let existing = pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .find(|n| n.starts_with(VOLUME_PREFIX))
        .map(str::to_owned);
    let volume = existing.clone().unwrap_or_else(|| name.to_owned());
    let mount = json!({"name": volume, "readOnly": true, "mountPath": TOKEN_MOUNT});
    let mut needed = false;
    for list in ["initContainers", "containers"] {
        let Some(containers) = pod
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for container in containers {
            let mounted = container["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["mountPath"] == TOKEN_MOUNT);
            if mounted {
                continue;
            }
            match container
                .get_mut("volumeMounts")
                .and_then(Value::as_array_mut)
            {
                Some(mounts) => mounts.push(mount.clone()),
                None => container["volumeMounts"] = json!([mount]),
            }
            needed = true;
        }
    }
    if needed && existing.is_none() {
        match pod
            .pointer_mut("/spec/volumes")
            .and_then(Value::as_array_mut)
        {
            Some(volumes) => volumes.push(token_volume(&volume)),
            None => pod["spec"]["volumes"] = json!([token_volume(&volume)]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with(account: Value) -> Store {
        let mut store = Store::default();
        store.put(
            ("/serviceaccounts".into(), "ns".into(), "runner".into()),
            account,
        );
        store
    }

    #[test]
    fn an_automounted_pod_gets_the_token_volume_in_every_container() {
        let store = store_with(json!({"metadata": {"name": "runner"}}));
        let mut pod = json!({"spec": {"serviceAccountName": "runner",
            "initContainers": [{"name": "i", "image": "x"}],
            "containers": [
                {"name": "a", "image": "x", "volumeMounts": [{"name": "w", "mountPath": "/w"}]},
                {"name": "b", "image": "x", "volumeMounts": [{"name": "own", "mountPath": TOKEN_MOUNT}]},
            ],
            "volumes": [{"name": "w", "emptyDir": {}}]}});
        admit(&store, "ns", "p", &mut pod).unwrap();
        let volumes = pod["spec"]["volumes"].as_array().unwrap();
        assert_eq!(volumes.len(), 2);
        let name = volumes[1]["name"].as_str().unwrap().to_owned();
        assert!(name.starts_with(VOLUME_PREFIX) && name.len() == VOLUME_PREFIX.len() + 5);
        assert!(
            name[VOLUME_PREFIX.len()..]
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit()),
            "{name}"
        );
        assert_eq!(volumes[1], token_volume(&name));
        assert_eq!(
            volumes[1]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            3607
        );
        let mount = json!({"name": name, "readOnly": true, "mountPath": TOKEN_MOUNT});
        assert_eq!(
            pod["spec"]["initContainers"][0]["volumeMounts"],
            json!([mount])
        );
        assert_eq!(pod["spec"]["containers"][0]["volumeMounts"][1], mount);
        // A container mounting something there already keeps its own.
        assert_eq!(
            pod["spec"]["containers"][1]["volumeMounts"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn the_pods_field_wins_over_the_accounts_and_the_default_is_to_mount() {
        let off = store_with(json!({"metadata": {"name": "runner"},
            "automountServiceAccountToken": false}));
        let bare =
            || json!({"spec": {"serviceAccountName": "runner", "containers": [{"name": "a"}]}});
        let mut pod = bare();
        admit(&off, "ns", "p", &mut pod).unwrap();
        assert!(pod["spec"]["volumes"].is_null(), "{pod}");
        let mut pod = bare();
        pod["spec"]["automountServiceAccountToken"] = json!(true);
        admit(&off, "ns", "p", &mut pod).unwrap();
        assert_eq!(pod["spec"]["volumes"].as_array().unwrap().len(), 1);
        let on = store_with(json!({"metadata": {"name": "runner"}}));
        let mut pod = bare();
        pod["spec"]["automountServiceAccountToken"] = json!(false);
        admit(&on, "ns", "p", &mut pod).unwrap();
        assert!(pod["spec"]["volumes"].is_null(), "{pod}");
    }

    #[test]
    fn a_missing_account_is_refused_as_the_api_server_words_it() {
        let store = Store::default();
        let mut pod = json!({"spec": {"containers": [{"name": "a"}]}});
        assert_eq!(
            admit(&store, "ns", "p", &mut pod).unwrap_err(),
            "pods \"p\" is forbidden: error looking up service account ns/default: serviceaccount \"default\" not found"
        );
    }
}
