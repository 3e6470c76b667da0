//! What a kubelet prepares before a Pod's containers start, turned into what the runtime (the
//! local backend) runs: the Pod's `secret` and `projected` volumes (the ServiceAccount
//! plugin's `kube-api-access-*` among them) become read-only `hostPath` folders on this host
//! holding what the kubelet would write there (a fresh token bound to the Pod, the double's
//! CA, the namespace, a Secret's decoded data), and every container gets the `kubernetes`
//! Service's environment (`KUBERNETES_SERVICE_HOST`, ...) pointing at the address the Pods
//! reach the double at. Only the runtime's copy changes; the stored Pod is as admitted.
//!
//! File modes follow the kubelet's volume plugins as far as the harness's Pods need them:
//! `defaultMode`, and with an `fsGroup` every file group-owned by it and group-readable
//! (`SetVolumeOwnership`: the launch Job's `0440` inputs). The folders are traversable by
//! anyone (0755), so a non-root container reads what its modes allow. What the node does not
//! run (init containers, env `valueFrom`, other volume sources) is refused naming it
//! ([`unsupported`]): none of the harness's Pods has one.

use super::store::{Bound, DoubleState, Store};
use base64::Engine;
use serde_json::{Value, json};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// One file a volume shows.
struct File {
    path: String,
    data: Vec<u8>,
    mode: u32,
    /// The projected ServiceAccount token (its data the token issued for the Pod).
    token: bool,
}

/// What one volume shows, or why the kubelet cannot set it up (its `FailedMount` message).
fn volume_files(
    store: &Store,
    state: &DoubleState,
    pod: &Value,
    volume: &Value,
) -> Result<Option<Vec<File>>, String> {
    let name = volume["name"].as_str().unwrap_or_default();
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let failed = |why: String| format!("MountVolume.SetUp failed for volume \"{name}\" : {why}");
    if volume["secret"].is_object() {
        let source = &volume["secret"];
        let mode = mode_of(&source["defaultMode"]);
        return secret_files(store, ns, source, mode)
            .map(Some)
            .map_err(failed);
    }
    if !volume["projected"].is_object() {
        return Ok(None);
    }
    let mode = mode_of(&volume["projected"]["defaultMode"]);
    let mut files = Vec::new();
    for source in volume["projected"]["sources"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(token) = source.get("serviceAccountToken") {
            files.push(File {
                path: token["path"].as_str().unwrap_or("token").to_owned(),
                data: Vec::new(),
                mode,
                token: true,
            });
        } else if source.get("configMap").is_some() {
            // The root CA publisher's ConfigMap, the one [`unsupported`] lets through.
            files.push(File {
                path: "ca.crt".into(),
                data: state.ca_pem.clone().into_bytes(),
                mode,
                token: false,
            });
        } else {
            for item in source["downwardAPI"]["items"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let field = item["fieldRef"]["fieldPath"].as_str().unwrap_or_default();
                files.push(File {
                    path: item["path"].as_str().unwrap_or_default().to_owned(),
                    data: field_value(pod, field).unwrap_or_default().into_bytes(),
                    mode,
                    token: false,
                });
            }
        }
    }
    Ok(Some(files))
}

/// A `defaultMode` (420, 0644, when absent).
fn mode_of(mode: &Value) -> u32 {
    mode.as_u64()
        .and_then(|m| u32::try_from(m).ok())
        .unwrap_or(0o644)
        & 0o777
}

/// The files of a `secret` volume's Secret: one per key.
fn secret_files(store: &Store, ns: &str, source: &Value, mode: u32) -> Result<Vec<File>, String> {
    let name = source["secretName"].as_str().unwrap_or_default();
    let secret = store
        .objects
        .get(&("/secrets".into(), ns.to_owned(), name.to_owned()))
        .ok_or_else(|| format!("secret \"{name}\" not found"))?;
    let data = secret["data"].as_object().into_iter().flatten();
    Ok(data
        .map(|(key, text)| File {
            path: key.clone(),
            data: text
                .as_str()
                .and_then(|t| base64::engine::general_purpose::STANDARD.decode(t).ok())
                .unwrap_or_default(),
            mode,
            token: false,
        })
        .collect())
}

/// The downward API's value of `field` for `pod` (None: not one the double projects).
fn field_value(pod: &Value, field: &str) -> Option<String> {
    let key = field.strip_prefix("metadata.")?;
    matches!(key, "name" | "namespace" | "uid")
        .then(|| pod["metadata"][key].as_str().unwrap_or_default().to_owned())
}

/// The Pod's `fsGroup`: with one, every volume file is group-owned by it and group-readable
/// (`SetVolumeOwnership`). A kubelet also gives a projected token (`0600`) to the Pod's one
/// `runAsUser` (`FsUserFrom`); the double leaves the token at its mode, readable as before.
fn fs_group(spec: &Value) -> Option<u32> {
    spec["securityContext"]["fsGroup"]
        .as_u64()
        .and_then(|g| u32::try_from(g).ok())
}

/// Writes one volume's files below `folder`.
fn write_files(folder: &Path, files: &[File], group: Option<u32>) -> std::io::Result<()> {
    std::fs::create_dir_all(folder)?;
    std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o755))?;
    for file in files {
        let path = folder.join(&file.path);
        if let Some(parent) = path.parent()
            && parent != folder
        {
            std::fs::create_dir_all(parent)?;
            std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755))?;
        }
        std::fs::write(&path, &file.data)?;
        // `SetVolumeOwnership` on a read-only volume: group-owned, group-readable.
        let mode = file.mode | if group.is_some() { 0o440 } else { 0 };
        std::os::unix::fs::chown(&path, None, group)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

/// The folder of the Pod of `uid`'s volumes.
pub(crate) fn pod_folder(state: &DoubleState, uid: &str) -> PathBuf {
    state.pod_files.join(uid)
}

/// Removes the Pod's volume folders (the kubelet's cleanup of a removed Pod).
pub(crate) fn remove_pod_folder(state: &DoubleState, uid: &str) {
    let folder = pod_folder(state, uid);
    if let Err(e) = std::fs::remove_dir_all(&folder)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        eprintln!("kube double: removing {}: {e}", folder.display());
    }
}

/// What the double's node does not run, named (as the kubelet's `CreateContainerConfigError`):
/// init containers, env `valueFrom`, a Secret volume's `items` or `optional`, and projected
/// sources beyond what the ServiceAccount admission adds. No Pod the harness makes has one.
fn unsupported(pod: &Value) -> Option<String> {
    let spec = &pod["spec"];
    if spec["initContainers"]
        .as_array()
        .is_some_and(|i| !i.is_empty())
    {
        return Some("the kube double runs no init containers".into());
    }
    let containers = spec["containers"].as_array().into_iter().flatten();
    let mut env = containers.flat_map(|c| c["env"].as_array().into_iter().flatten());
    if let Some(var) = env.find(|v| v.get("valueFrom").is_some()) {
        return Some(format!(
            "the kube double resolves no env valueFrom (env {})",
            var["name"]
        ));
    }
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        let name = &volume["name"];
        let secret = &volume["secret"];
        if secret.get("items").is_some() || secret.get("optional").is_some() {
            return Some(format!(
                "the kube double mounts a whole Secret only, not its items or an optional one (volume {name})"
            ));
        }
        let projected = volume["projected"]["sources"].as_array();
        let served = |source: &Value| {
            let fields = source["downwardAPI"]["items"].as_array();
            source.get("serviceAccountToken").is_some()
                || source["configMap"]["name"] == "kube-root-ca.crt"
                || fields.is_some_and(|items| {
                    items.iter().all(|item| {
                        let field = item["fieldRef"]["fieldPath"].as_str().unwrap_or_default();
                        field_value(pod, field).is_some()
                    })
                })
        };
        if projected.is_some_and(|sources| !sources.iter().all(served)) {
            return Some(format!(
                "the kube double projects only a serviceAccountToken, the root CA's ConfigMap and the downward API's metadata.name, namespace and uid (volume {name})"
            ));
        }
    }
    None
}

/// The runtime's copy of `pod` (as admitted; its UID `uid`), once its
/// volumes are set up on this host: secret and projected volumes become read-only hostPath
/// folders, `automountServiceAccountToken` goes (the token is one of those folders), each
/// container gets the `kubernetes` Service's environment. Err: the
/// kubelet's `FailedMount` (or `CreateContainerConfigError`) message; nothing is written then.
pub(crate) fn runtime_copy(state: &DoubleState, uid: &str, pod: &Value) -> Result<Value, String> {
    if let Some(why) = unsupported(pod) {
        return Err(why);
    }
    let mut store = state.store();
    let mut shown: Vec<(String, Vec<File>)> = Vec::new();
    for volume in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        if let Some(files) = volume_files(&store, state, pod, volume)? {
            shown.push((
                volume["name"].as_str().unwrap_or_default().to_owned(),
                files,
            ));
        }
    }
    let mut copy = pod.clone();
    // The kubelet reads a Pod's pull secrets (`getPullSecretsForPod`) only to hand them to the
    // image manager (`EnsureImageExists`), never into what the runtime runs (kubernetes
    // v1.37.2 pkg/kubelet/kubelet_pods.go, images/image_manager.go): the node's runtime gets
    // the Pod without them, and without `automountServiceAccountToken` (its token is a folder).
    if let Some(spec) = copy["spec"].as_object_mut() {
        spec.remove("imagePullSecrets");
        spec.remove("automountServiceAccountToken");
    }
    // Each container's environment, and its mounts of the folders read-only, as the kubelet
    // mounts secret and projected volumes whatever the Pod says.
    for container in copy
        .pointer_mut("/spec/containers")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        resolve_env(state, container);
        for mount in container
            .get_mut("volumeMounts")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if shown.iter().any(|(v, _)| mount["name"].as_str() == Some(v)) {
                mount["readOnly"] = json!(true);
            }
        }
    }
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    if shown.iter().any(|(_, files)| files.iter().any(|f| f.token)) {
        // A token bound to this Pod, as the kubelet requests one for the projection: it
        // authenticates as the Pod's ServiceAccount until the Pod is gone.
        let account = pod["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or("default");
        let token = store.issue_token(
            ns,
            account,
            Some(Bound {
                key: ("/pods".into(), ns.to_owned(), name.to_owned()),
                uid: uid.to_owned(),
            }),
        );
        for (_, files) in &mut shown {
            for file in files.iter_mut().filter(|f| f.token) {
                file.data = token.clone().into_bytes();
            }
        }
    }
    drop(store);
    let folder = pod_folder(state, uid);
    for (volume, files) in &shown {
        write_files(&folder.join(volume), files, fs_group(&pod["spec"]))
            .map_err(|e| format!("MountVolume.SetUp failed for volume \"{volume}\" : {e}"))?;
    }
    // The folders, as hostPath volumes.
    for volume in copy
        .pointer_mut("/spec/volumes")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        let name = volume["name"].as_str().unwrap_or_default().to_owned();
        if shown.iter().any(|(v, _)| *v == name) {
            let path = folder.join(&name).display().to_string();
            *volume = json!({"name": name, "hostPath": {"path": path, "type": "Directory"}});
        }
    }
    Ok(copy)
}

/// The container's environment as the kubelet makes it: the `kubernetes` Service's
/// variables first (the container's own win), then its own (values: [`unsupported`] let no
/// `valueFrom` through).
fn resolve_env(state: &DoubleState, container: &mut Value) {
    let mut env: Vec<Value> = Vec::new();
    for var in container["env"].as_array().into_iter().flatten() {
        let name = var["name"].as_str().unwrap_or_default();
        env.push(json!({"name": name, "value": var["value"].as_str().unwrap_or_default()}));
    }
    if let Some(address) = state.pod_address {
        let (host, port) = (address.ip().to_string(), address.port().to_string());
        let url = format!("tcp://{host}:{port}");
        let service = [
            ("KUBERNETES_SERVICE_HOST".to_owned(), host.clone()),
            ("KUBERNETES_SERVICE_PORT".to_owned(), port.clone()),
            ("KUBERNETES_SERVICE_PORT_HTTPS".to_owned(), port.clone()),
            ("KUBERNETES_PORT".to_owned(), url.clone()),
            (format!("KUBERNETES_PORT_{port}_TCP"), url),
            (
                format!("KUBERNETES_PORT_{port}_TCP_PROTO"),
                "tcp".to_owned(),
            ),
            (format!("KUBERNETES_PORT_{port}_TCP_PORT"), port.clone()),
            (format!("KUBERNETES_PORT_{port}_TCP_ADDR"), host),
        ];
        let own: Vec<String> = env
            .iter()
            .filter_map(|v| v["name"].as_str().map(str::to_owned))
            .collect();
        let mut all: Vec<Value> = service
            .into_iter()
            .filter(|(k, _)| !own.contains(k))
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect();
        all.append(&mut env);
        env = all;
    }
    if !env.is_empty() {
        container["env"] = json!(env);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_the_fs_group_are_the_pods() {
        let spec = json!({"securityContext": {"runAsUser": 65532, "fsGroup": 2000}});
        assert_eq!(fs_group(&spec), Some(2000));
        assert_eq!(fs_group(&json!({})), None);
        assert_eq!(mode_of(&json!(420)), 0o644);
        assert_eq!(mode_of(&json!(256)), 0o400);
        assert_eq!(mode_of(&Value::Null), 0o644);
    }

    #[test]
    fn what_the_node_does_not_run_is_named() {
        let pod = |spec: Value| json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec});
        let main = json!([{"name": "main", "image": "i"}]);
        // What the ServiceAccount admission adds, and a whole Secret: run.
        let admitted = pod(json!({"containers": main, "volumes": [
            {"name": "kube-api-access-x", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt"}},
                {"downwardAPI": {"items": [{"path": "namespace",
                    "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
            {"name": "inputs", "secret": {"secretName": "s", "defaultMode": 288}}]}));
        assert_eq!(unsupported(&admitted), None);
        for (spec, named) in [
            (
                json!({"initContainers": main, "containers": main}),
                "init containers",
            ),
            (
                json!({"containers": [{"name": "main", "env": [{"name": "E",
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}]}),
                "valueFrom (env \"E\")",
            ),
            (
                json!({"containers": main, "volumes": [{"name": "v",
                    "secret": {"secretName": "s", "items": [{"key": "k", "path": "p"}]}}]}),
                "items or an optional one",
            ),
            (
                json!({"containers": main, "volumes": [{"name": "v", "projected": {"sources": [
                    {"downwardAPI": {"items": [{"path": "l",
                        "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}}]}),
                "(volume \"v\")",
            ),
            (
                json!({"containers": main, "volumes": [{"name": "v", "projected": {"sources": [
                    {"configMap": {"name": "settings"}}]}}]}),
                "root CA's ConfigMap",
            ),
        ] {
            let why = unsupported(&pod(spec.clone())).unwrap_or_default();
            assert!(why.contains(named), "{spec}: {why}");
        }
    }

    #[test]
    fn the_downward_api_projects_what_the_pod_says() {
        let pod = json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}});
        assert_eq!(field_value(&pod, "metadata.namespace").unwrap(), "ns");
        assert_eq!(field_value(&pod, "metadata.uid").unwrap(), "u");
        assert_eq!(field_value(&pod, "metadata.labels"), None);
        assert_eq!(field_value(&pod, "status.podIP"), None);
    }
}
