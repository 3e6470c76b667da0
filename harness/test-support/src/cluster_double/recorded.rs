//! The double's Pod defaulting against a real API server's: recordings of a Pod create (the
//! request a harness-composed task Pod makes, and the object the API server answered with)
//! are replayed against a fresh double, and the two answers compared field by field, less
//! what varies from one create to the next ([`normalized`]).
//!
//! Recordings live in `fixtures/kube/recorded/<case>.json` (see that folder's README): the
//! `real_api_server` tests make them against kube-apiserver v1.37 built here
//! (`KANDEV_RECORD=1`) and compare the double with the live server on every run; the script
//! `harness/scripts/record-kube-fixtures.sh` makes them against any cluster.

use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// One recorded Pod create.
#[derive(Debug, Clone, Deserialize)]
pub struct Recording {
    /// The file it was read from.
    #[serde(skip)]
    pub file: PathBuf,
    /// The API server's `gitVersion`.
    #[serde(default)]
    pub server_version: String,
    /// Whether the create was a server-side dry run (`dryRun=All`).
    #[serde(default)]
    pub dry_run: bool,
    /// The Pod as sent.
    pub request: Value,
    /// The Pod the API server answered with (volatile fields already removed by the recorder).
    pub response: Value,
}

/// The recordings in `folder` (every `*.json`, by name); none when the folder is missing.
pub fn load(folder: &Path) -> anyhow::Result<Vec<Recording>> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Ok(Vec::new());
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|file| {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("read {}", file.display()))?;
            let mut recording: Recording = serde_json::from_str(&text)
                .with_context(|| format!("{} is not a recording", file.display()))?;
            recording.file = file;
            Ok(recording)
        })
        .collect()
}

/// The folder of checked-in recordings: `fixtures/kube/recorded/`.
pub fn folder() -> PathBuf {
    kandev_harness::paths::workspace_root().join("fixtures/kube/recorded")
}

/// Metadata fields that differ on every create, removed before comparing.
pub const VOLATILE_METADATA: &[&str] = &[
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "managedFields",
    "selfLink",
];

/// `object` without what differs from one create to the next: [`VOLATILE_METADATA`], the
/// times in status conditions, and the random suffix of the ServiceAccount token volume's
/// name (`kube-api-access-<5>`, wherever it is named).
pub fn normalized(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in VOLATILE_METADATA {
            metadata.remove(*field);
        }
    }
    if let Some(status) = object.get_mut("status").and_then(Value::as_object_mut) {
        status.remove("startTime");
        if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
            for condition in conditions.iter_mut().filter_map(Value::as_object_mut) {
                condition.remove("lastTransitionTime");
                condition.remove("lastProbeTime");
            }
        }
    }
    rename_token_volumes(&mut object);
    object
}

fn rename_token_volumes(value: &mut Value) {
    match value {
        Value::String(s) => {
            if let Some(suffix) = s.strip_prefix("kube-api-access-")
                && suffix.len() == 5
                && suffix.chars().all(|c| c.is_ascii_alphanumeric())
            {
                *s = "kube-api-access-RANDOM".into();
            }
        }
        Value::Array(items) => items.iter_mut().for_each(rename_token_volumes),
        Value::Object(fields) => fields.values_mut().for_each(rename_token_volumes),
        _ => {}
    }
}

/// Where two JSON values differ: `path: recorded <a>, double <b>` per differing leaf (a
/// missing field shows as `absent`). Paths are dotted, with `[i]` for array items.
pub fn differences(recorded: &Value, double: &Value) -> Vec<String> {
    let mut found = Vec::new();
    diff("", recorded, double, &mut found);
    found
}

fn diff(path: &str, a: &Value, b: &Value, found: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let inner = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => diff(&inner, x, y, found),
                    (Some(x), None) => found.push(format!("{inner}: recorded {x}, double absent")),
                    (None, Some(y)) => found.push(format!("{inner}: recorded absent, double {y}")),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (x, y)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}[{i}]"), x, y, found);
            }
        }
        _ if a == b => {}
        _ => found.push(format!("{path}: recorded {a}, double {b}")),
    }
}

/// Replays `recording` against a fresh double (no runtime): its namespace and the Pod's
/// ServiceAccount are created first, then the request is POSTed over HTTPS as recorded
/// (with `dryRun=All` for a dry run); returns the double's answer.
pub async fn replay(recording: &Recording) -> anyhow::Result<Value> {
    let namespace = recording.request["metadata"]["namespace"]
        .as_str()
        .or_else(|| recording.response["metadata"]["namespace"].as_str())
        .context("the recorded request names no namespace")?
        .to_owned();
    let double = super::start(None).await?;
    double.state.create_namespace(&namespace, &[]);
    let account = recording.request["spec"]["serviceAccountName"]
        .as_str()
        .unwrap_or("default");
    if account != "default" {
        double.state.create_object(
            "serviceaccounts",
            &namespace,
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}}),
        );
    }
    let kubeconfig = kube::config::Kubeconfig::read_from(&double.kubeconfig)?;
    let options = kube::config::KubeConfigOptions {
        context: Some(double.context.clone()),
        ..Default::default()
    };
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?;
    let client = kube::Client::try_from(config)?;
    let mut uri = format!("/api/v1/namespaces/{namespace}/pods");
    if recording.dry_run {
        uri.push_str("?dryRun=All");
    }
    let request = http::Request::post(uri)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(serde_json::to_vec(&recording.request)?)?;
    let answer = client.request_text(request).await;
    let answer = match answer {
        Ok(text) => text,
        Err(kube::Error::Api(status)) => {
            bail!("the double refused the recorded request: {status:?}")
        }
        Err(e) => return Err(e.into()),
    };
    Ok(serde_json::from_str(&answer)?)
}

/// A task Pod as the harness composes it for a session (the default full-worker template
/// rendered with `worker_image` and `daemon_image`, Kandev's identity and the harness's
/// labels), in `namespace`, its workspace an emptyDir or the claim `claim`: what
/// `kandev-acceptance run --backend kube` asks an API server to create.
pub fn composed_task_pod(
    namespace: &str,
    claim: Option<&str>,
    worker_image: &str,
    daemon_image: &str,
) -> anyhow::Result<Value> {
    use crate::pod::{TaskPod, task_pod};
    use kandev_harness::pod::compose::{Arch, WorkspaceSource};
    use kandev_harness::pod::identity::SessionIdentity;
    let identity = SessionIdentity::new("20260101t000000-record", "record::task_pod", 1);
    let pod = task_pod(TaskPod {
        arch: Arch::of_this_machine(),
        workspace: match claim {
            Some(claim) => WorkspaceSource::Claim(claim.to_owned()),
            None => WorkspaceSource::EmptyDir,
        },
        worker_image,
        daemon_image,
        harness_labels: false,
        ..TaskPod::new(namespace, &identity)
    })?;
    let mut pod = serde_json::to_value(pod)?;
    pod["apiVersion"] = json!("v1");
    pod["kind"] = json!("Pod");
    Ok(pod)
}
