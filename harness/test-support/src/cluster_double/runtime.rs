//! The double's Pods on its runtime, as a scheduler, a kubelet and the namespace controller
//! would handle them: bound to the one node ([`NODE`]), created and removed there, and their
//! status read back from it (what the harness reads of it: [`with_status`]).

use super::containers::{Observed, observe};
use super::scheduler::{NODE, unschedulable};
use super::store::{DoubleState, Key, Running, Store};
use super::{controllers, finalizers, mounts};
use k8s_openapi::api::core::v1::Pod;
use kandev_harness::backend::Backend;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// The stored Pod of `uid`, unless it is gone or being deleted.
fn live_pod(store: &Store, uid: &str) -> Option<(Key, Value)> {
    store
        .objects
        .iter()
        .find(|(_, o)| o["kind"] == "Pod" && o["metadata"]["uid"].as_str() == Some(uid))
        .filter(|(_, o)| o["metadata"]["deletionTimestamp"].is_null())
        .map(|(k, o)| (k.clone(), o.clone()))
}

/// Whether a message of `mounts::runtime_copy` is a volume's (a kubelet's `FailedMount`)
/// rather than a container environment's (`CreateContainerConfigError`).
fn mount_problem(message: &str) -> bool {
    message.starts_with("MountVolume.")
}

/// One look of the scheduler at the Pod of `uid`: Some(true) bound to the node, Some(false)
/// not yet (each new reason, `last`, is a `FailedScheduling` Event and a status update),
/// None gone.
fn schedule(state: &DoubleState, uid: &str, last: &mut String) -> Option<bool> {
    let mut store = state.store();
    let Some((key, mut stored)) = live_pod(&store, uid) else {
        store.running.remove(uid);
        return None;
    };
    // A Pod created with `nodeName` set is bound already: no scheduler looks at it.
    let preset = stored["spec"]["nodeName"].as_str() == Some(NODE) && last.is_empty();
    let judged = if preset {
        None
    } else {
        unschedulable(&store, &stored)
    };
    match judged {
        Some(message) => {
            if message != *last {
                store.event(
                    &stored,
                    ("Warning", "FailedScheduling"),
                    &message,
                    "default-scheduler",
                );
                store
                    .running
                    .insert(uid.to_owned(), Running::Unschedulable(message.clone()));
                store.put(key, stored);
                *last = message;
            }
            Some(false)
        }
        None if preset => {
            store.running.insert(uid.to_owned(), Running::Creating);
            Some(true)
        }
        None => {
            // Bound (the scheduler's Binding).
            stored["spec"]["nodeName"] = json!(NODE);
            let namespace = stored["metadata"]["namespace"].as_str().unwrap_or_default();
            let name = stored["metadata"]["name"].as_str().unwrap_or_default();
            let message = format!("Successfully assigned {namespace}/{name} to {NODE}");
            store.event(
                &stored,
                ("Normal", "Scheduled"),
                &message,
                "default-scheduler",
            );
            store.put(key, stored);
            store.running.insert(uid.to_owned(), Running::Creating);
            Some(true)
        }
    }
}

/// Creates the Pod on the runtime once its volumes are set up (`mounts`: retried every
/// second while a Secret it needs is missing, as a kubelet retries a `FailedMount`); a Pod
/// deleted meanwhile is removed there again. A Pod the scheduler cannot place never reaches
/// the runtime; an image the node cannot pull is the kubelet's `ErrImagePull`, not a runtime
/// failure.
pub(crate) async fn run_pod(
    state: Arc<DoubleState>,
    runtime: Arc<dyn Backend>,
    uid: String,
    pod: Value,
) {
    // The scheduler: the Pod is bound to the node once it fits, retried every half second
    // (a claim created later, a node relabelled); each new reason is a
    // `FailedScheduling` Event and the Pod's `PodScheduled` condition (`with_status`).
    let mut last = String::new();
    loop {
        let placed = schedule(&state, &uid, &mut last);
        match placed {
            None => return,
            Some(true) => break,
            Some(false) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    let mut reported = false;
    let copy = loop {
        if live_pod(&state.store(), &uid).is_none() {
            return;
        }
        match mounts::runtime_copy(&state, &uid, &pod) {
            Ok(copy) => {
                state.store().running.insert(uid.clone(), Running::Creating);
                break copy;
            }
            Err(message) => {
                let mut store = state.store();
                if !reported && let Some((_, stored)) = live_pod(&store, &uid) {
                    // Once: a kubelet counts its repeats in the same Event. A volume's problem
                    // is a `FailedMount`, an env's the container's `Failed`.
                    let (reason, shown) = if mount_problem(&message) {
                        ("FailedMount", message.clone())
                    } else {
                        ("Failed", format!("Error: {message}"))
                    };
                    store.event(&stored, ("Warning", reason), &shown, "kubelet");
                    reported = true;
                }
                store
                    .running
                    .insert(uid.clone(), Running::MountFailed(message));
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    if !controllers::reaches_node(&state, &uid, &pod).await {
        return;
    }
    let created = match serde_json::from_value::<Pod>(copy) {
        Ok(parsed) => match runtime.create_pod(&parsed).await {
            Err(kandev_harness::backend::BackendError::ImageMissing { image }) => {
                let container = pod["spec"]["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["image"].as_str() == Some(image.as_str()))
                    .and_then(|c| c["name"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                let mut store = state.store();
                store
                    .running
                    .insert(uid.clone(), Running::PullFailed { container, image });
                controllers::pull_failed(&state, &mut store, &uid);
                return;
            }
            // The whole chain, as a kubelet relays the runtime's own words.
            other => other.map_err(|e| kandev_harness::error_chain(&e)),
        },
        Err(e) => Err(format!("the Pod does not parse: {e}")),
    };
    let created = match created {
        Ok(created) => created,
        Err(e) => {
            state.store().running.insert(uid, Running::Failed(e));
            return;
        }
    };
    let stored = {
        let mut store = state.store();
        let key = store
            .objects
            .iter()
            .find(|(_, o)| o["kind"] == "Pod" && o["metadata"]["uid"].as_str() == Some(&uid))
            .map(|(k, _)| k.clone());
        if let Some(key) = &key {
            store
                .running
                .insert(uid.clone(), Running::Ready(created.clone()));
            controllers::started(&state, &mut store, key);
        } else {
            store.running.remove(&uid);
            store.forget_bound_tokens(&uid);
        }
        key.is_some()
    };
    if stored {
        tokio::spawn(kubelet(state, uid));
    } else {
        // Removed while it was being created (its namespace went): removed here too.
        let _ = runtime.delete_pod(&created).await;
        mounts::remove_pod_folder(&state, &uid);
    }
}

/// The kubelet's status updates: while the Pod is stored, its status (read from the
/// runtime) is compared every half second, and a change stores the Pod again with a new
/// `resourceVersion`, as a kubelet's status update does.
async fn kubelet(state: Arc<DoubleState>, uid: String) {
    let mut last = Value::Null;
    loop {
        let stored = state
            .store()
            .objects
            .iter()
            .find(|(_, o)| o["kind"] == "Pod" && o["metadata"]["uid"].as_str() == Some(&uid))
            .map(|(k, o)| (k.clone(), o.clone()));
        let Some((key, object)) = stored else {
            return;
        };
        // Its times are the engine's: a status read twice unchanged is the same.
        let shown = with_status(&state, object).await["status"].take();
        if shown != last {
            // The first look too: the scheduler's binding was stored before the
            // containers existed.
            let mut store = state.store();
            match store.objects.get(&key).cloned() {
                Some(current) if current["metadata"]["uid"].as_str() == Some(&uid) => {
                    store.put(key, current);
                }
                _ => return,
            }
            last = shown;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Removes a deleted Pod's containers (waiting for a create still under way), then the object.
pub(crate) async fn remove_pod(state: Arc<DoubleState>, key: Key, uid: String) {
    let runtime = state.runtime.clone();
    for _ in 0..600 {
        let running = state.store().running.get(&uid).cloned();
        match running {
            Some(Running::Creating) => tokio::time::sleep(Duration::from_millis(200)).await,
            Some(Running::Ready(pod)) => {
                if let Some(runtime) = &runtime
                    && let Err(e) = runtime.delete_pod(&pod).await
                {
                    eprintln!("kube double: removing pod {} failed: {e}", pod.name);
                }
                break;
            }
            _ => break,
        }
    }
    mounts::remove_pod_folder(&state, &uid);
    let mut store = state.store();
    store.running.remove(&uid);
    store.forget_bound_tokens(&uid);
    finalizers::kubelet_done(&mut store, &key, &uid);
}

/// Removes a claim's volume, retried for a minute: it is in use until the runtime has
/// removed the containers of a Pod still terminating.
pub(crate) async fn remove_volume(
    runtime: Arc<dyn Backend>,
    volume: kandev_harness::backend::WorkspaceRef,
) {
    for _ in 0..120 {
        if runtime.delete_workspace(&volume).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Removes everything in the namespace (Pods through the runtime), then the namespace.
pub(crate) async fn remove_namespace(state: Arc<DoubleState>, name: String) {
    let mut volumes: Vec<kandev_harness::backend::WorkspaceRef> = Vec::new();
    let pods: Vec<(Key, String)> = {
        let mut store = state.store();
        let pods: Vec<(Key, String)> = store
            .objects
            .iter()
            .filter(|((r, ns, _), _)| r == "/pods" && *ns == name)
            .map(|(k, o)| {
                (
                    k.clone(),
                    o["metadata"]["uid"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        // The claims' volumes are taken before their objects go, and removed after the Pods.
        let claims: Vec<String> = store
            .objects
            .iter()
            .filter(|((r, ns, _), _)| r == "/persistentvolumeclaims" && *ns == name)
            .filter_map(|(_, o)| o["metadata"]["uid"].as_str().map(str::to_owned))
            .collect();
        let taken: Vec<kandev_harness::backend::WorkspaceRef> = claims
            .iter()
            .filter_map(|uid| store.volumes.remove(uid))
            .collect();
        volumes.extend(taken);
        store.delete_where(|(r, ns, _)| *ns == name && r != "/pods");
        pods
    };
    for (key, uid) in pods {
        remove_pod(state.clone(), key, uid).await;
    }
    if let Some(runtime) = state.runtime.clone() {
        for volume in volumes {
            remove_volume(runtime.clone(), volume).await;
        }
    }
    if !finalizers::content_finalized(&state, &name).await {
        return;
    }
    let mut store = state.store();
    store.delete_where(|(_, ns, _)| *ns == name);
    store.delete(&("/namespaces".into(), String::new(), name));
}

/// A Pod with its status from the runtime, as a kubelet writes it (`generateAPIPodStatus`,
/// `convertToAPIContainerStatuses`: kubernetes v1.37.2 pkg/kubelet/kubelet_pods.go) in what
/// the harness reads: the phase, each container's state, image ID and restarts, the
/// scheduler's `PodScheduled` condition and the Pod's IP. The kubelet's other conditions
/// (`Initialized`, `Ready`, ...) nothing reads; init containers no Pod here has (`mounts`
/// refuses them).
pub(crate) async fn with_status(state: &Arc<DoubleState>, mut object: Value) -> Value {
    if object["kind"] != "Pod" {
        return object;
    }
    let Some(runtime) = state.runtime.clone() else {
        return object;
    };
    let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
    let running = state.store().running.get(uid).cloned();
    if let Some(Running::Unschedulable(message)) = &running {
        // Never bound: no container statuses, the scheduler's condition only.
        object["status"] = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
            "status": "False", "reason": "Unschedulable", "message": message}]});
        return object;
    }
    let observed: Vec<Observed> = match (&running, &state.docker) {
        (Some(Running::Ready(_)), Some(docker)) => observe(docker, uid).await,
        _ => Vec::new(),
    };
    let waiting =
        |reason: &str, message: &str| json!({"waiting": {"reason": reason, "message": message}});
    let containers = object["spec"]["containers"].as_array().cloned();
    let statuses: Vec<Value> = containers.into_iter().flatten().map(|c| {
        let name = c["name"].as_str().unwrap_or_default();
        let found = observed.iter().find(|s| s.name == name);
        let state = match (&running, found) {
            (Some(Running::PullFailed { container, image }), _) if container == name => {
                // containerd's answer for a reference no registry resolves, as the kubelet
                // relays it.
                waiting(
                    "ErrImagePull",
                    &format!(
                        "failed to pull and unpack image \"{image}\": failed to resolve reference \"{image}\": {image}: not found"
                    ),
                )
            }
            (Some(Running::Failed(e)), _) => waiting("CreateContainerError", e),
            // The kubelet's reason is `ContainerCreating` (the cause is in its FailedMount
            // Event); the double also names it here, where a client reading the Pod sees it.
            (Some(Running::MountFailed(message)), _) if mount_problem(message) => {
                waiting("ContainerCreating", message)
            }
            (Some(Running::MountFailed(message)), _) => {
                waiting("CreateContainerConfigError", message)
            }
            (_, Some(s)) if s.running => json!({"running": {"startedAt": s.started_at}}),
            (_, Some(s)) if s.exit_code.is_some() => {
                let reason = match s.exit_code {
                    _ if s.oom_killed => "OOMKilled",
                    Some(0) => "Completed",
                    _ => "Error",
                };
                json!({"terminated": {"exitCode": s.exit_code, "reason": reason,
                    "startedAt": s.started_at, "finishedAt": s.finished_at}})
            }
            _ => waiting("ContainerCreating", ""),
        };
        // The kubelet's imageID is the runtime's image ref for a container it has
        // (kubernetes pkg/kubelet/kuberuntime/helpers.go, toKubeContainerStatus: `ImageID:
        // status.ImageRef`); containerd's for an image without a registry digest (a loaded
        // one, as here) is the image id, `sha256:<hex>`. Empty until the container exists.
        json!({"name": name, "image": c["image"],
            "imageID": found.map(|s| s.image_id.as_str()).unwrap_or_default(),
            "ready": found.is_some_and(|s| s.running),
            "restartCount": found.map(|s| s.restarts).unwrap_or(0), "state": state})
    }).collect();
    let phase = match &running {
        Some(Running::Ready(_)) => {
            let restart = object["spec"]["restartPolicy"].as_str().unwrap_or("Always");
            phase(restart, &statuses)
        }
        _ => "Pending",
    };
    object["status"] = json!({"phase": phase, "containerStatuses": statuses});
    // Only once the scheduler has bound it (before its first look a Pod has no conditions).
    if object["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty())
    {
        object["status"]["conditions"] = json!([{"type": "PodScheduled", "status": "True"}]);
    }
    if let Some(Running::Ready(pod)) = &running
        && let Ok(Some(ip)) = runtime.pod_ip(pod).await
    {
        object["status"]["podIP"] = json!(ip);
    }
    object
}

/// The phase of a bound Pod's containers, as the kubelet's `getPhase` computes it for a Pod
/// without init containers: `Pending` while one has not started; `Running` while one runs
/// or, under `Always`, restarts; once all have ended, `Succeeded` if every one exited 0,
/// else `Failed` under `Never` (`OnFailure` restarts the failed ones: `Running`).
pub(crate) fn phase(restart: &str, containers: &[Value]) -> &'static str {
    let is = |s: &Value, state: &str| s["state"].get(state).is_some();
    let started = |s: &Value| is(s, "running") || is(s, "terminated");
    if containers.is_empty() || !containers.iter().all(started) {
        "Pending"
    } else if restart == "Always" || containers.iter().any(|s| is(s, "running")) {
        "Running"
    } else if containers
        .iter()
        .all(|s| s["state"]["terminated"]["exitCode"] == 0)
    {
        "Succeeded"
    } else if restart == "Never" {
        "Failed"
    } else {
        "Running"
    }
}

#[cfg(test)]
mod tests {
    use super::phase;
    use serde_json::json;

    #[test]
    fn the_phase_follows_the_containers_and_the_restart_policy() {
        let running = json!({"state": {"running": {}}});
        let exited = |code: i64| json!({"state": {"terminated": {"exitCode": code}}});
        let waiting = json!({"state": {"waiting": {"reason": "ContainerCreating"}}});
        assert_eq!(phase("Never", &[exited(0)]), "Succeeded");
        assert_eq!(phase("Never", &[exited(0), exited(1)]), "Failed");
        assert_eq!(phase("Never", &[exited(3), running.clone()]), "Running");
        assert_eq!(phase("OnFailure", &[exited(1)]), "Running");
        assert_eq!(phase("Always", &[exited(0)]), "Running");
        assert_eq!(phase("Never", &[waiting, exited(0)]), "Pending");
        assert_eq!(phase("Never", &[]), "Pending");
    }
}
