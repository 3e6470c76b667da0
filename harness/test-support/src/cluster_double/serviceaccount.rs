//! The `ServiceAccount` admission plugin on a Pod create, the part a Pod on the local engine
//! needs to reach the double in-cluster (`plugin/pkg/admission/serviceaccount/admission.go`):
//! the account defaults to `default`, and unless the Pod says
//! `automountServiceAccountToken: false` it gets the projected `kube-api-access-<5>` volume
//! (a bound token, the cluster CA, the namespace) mounted read-only at [`TOKEN_MOUNT`] in
//! every container and init container that mounts nothing there. What the volume shows inside
//! the Pod is the kubelet's part (`mounts`). The rest is the real API server's
//! (`real_api_server/jobs.rs`): a missing account's 403, the account's own
//! `automountServiceAccountToken` (the harness's Pods all say theirs), the suffix's alphabet.

use serde_json::{Value, json};

/// Where the token, `ca.crt` and `namespace` are mounted (`DefaultAPITokenMountPath`).
const TOKEN_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The token volume's name before its random suffix (`ServiceAccountVolumeName-`).
const VOLUME_PREFIX: &str = "kube-api-access-";

/// The token's lifetime the plugin asks for: an hour and 7 s
/// (`serviceaccount.WarnOnlyBoundTokenExpirationSeconds`).
const EXPIRATION_SECONDS: i64 = 3607;

/// Admits a Pod create: `serviceAccountName` set, the token volume added when automounted.
pub(crate) fn admit(pod: &mut Value) {
    let spec = &mut pod["spec"];
    if spec["serviceAccountName"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        spec["serviceAccountName"] = json!("default");
    }
    if spec["automountServiceAccountToken"] == false {
        return;
    }
    let name = format!(
        "{VOLUME_PREFIX}{}",
        &uuid::Uuid::new_v4().simple().to_string()[..5]
    );
    let mount = json!({"name": name, "readOnly": true, "mountPath": TOKEN_MOUNT});
    let mut needed = false;
    for list in ["initContainers", "containers"] {
        let containers = spec.get_mut(list).and_then(Value::as_array_mut);
        for container in containers.into_iter().flatten() {
            let mounts = &mut container["volumeMounts"];
            if mounts
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["mountPath"] == TOKEN_MOUNT)
            {
                continue;
            }
            match mounts.as_array_mut() {
                Some(mounts) => mounts.push(mount.clone()),
                None => *mounts = json!([mount]),
            }
            needed = true;
        }
    }
    if needed {
        let volume = token_volume(&name);
        match spec["volumes"].as_array_mut() {
            Some(volumes) => volumes.push(volume),
            None => spec["volumes"] = json!([volume]),
        }
    }
}

/// The projected volume the plugin adds (`createVolume`): the token, `ca.crt` from the
/// `kube-root-ca.crt` ConfigMap, and the namespace from the downward API, mode 0644.
fn token_volume(name: &str) -> Value {
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
