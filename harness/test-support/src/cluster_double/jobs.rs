//! batch/v1 Jobs as `launch` runs them on the double, its Pod on the local engine: a one-Pod
//! Job controller and a DELETE that takes the Job's Pods with it. The rest is the real API
//! server's and controller manager's (`real_api_server/jobs.rs`, `launch.rs`): validation,
//! `SetDefaults_Job` and the generated selector (the Job is stored as sent), the Orphan and
//! Foreground policies, TTL after finished, the status counts and the Job's Events.
//!
//! - **The controller** makes one Pod at a time, `<job>-<5 random>`, owned by the Job and
//!   labelled as `generateSelector` labels the template (launch finds it by `job-name`),
//!   through the same admission as any Pod create (made again the next round when refused).
//!   Launch's Job is never retried (`backoffLimit: 0`): the first Pod that fails fails the
//!   Job (`BackoffLimitExceeded`), and past `activeDeadlineSeconds` its Pod is deleted
//!   (`DeadlineExceeded`). A failure is `FailureTarget` first, then `Failed` once no Pod is
//!   left running or terminating (as since v1.31); these conditions are what launch reads.
//!   A Job whose Pod succeeded is left as it is: launch reads no success off the Job.
//! - **Delete**: `Background`, as launch and `gc` delete: the Job, then its Pods.
//!
//! A Job asking for more than launch's (another `backoffLimit`, more completions or Pods at
//! once, a failure or success policy) and a DELETE asking another policy are refused, naming
//! the field, not run otherwise (the corpus lists both: `JOB_BEYOND_LAUNCH`).

use super::request::Ctx;
use super::route::Route;
use super::runtime::with_status;
use super::status::{Reply, status};
use super::store::{DoubleState, Identity, Key, now};
use hyper::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the controller looks at its Job and Pods.
const ROUND: Duration = Duration::from_millis(250);

/// A request of the controllers (the admin) on the Pods of `ns`.
fn pods_route(ns: &str, name: Option<&str>) -> Route {
    Route {
        group: String::new(),
        version: "v1".into(),
        resource: "pods".into(),
        namespace: Some(ns.to_owned()),
        name: name.map(str::to_owned),
        sub: None,
    }
}

fn as_controller<'a>(state: &'a Arc<DoubleState>, route: &'a Route) -> Ctx<'a> {
    Ctx {
        state,
        identity: &Identity::Admin,
        route,
        query: &[],
        api_version: "v1",
        kind: "Pod",
    }
}

/// Deletes the Pod `name` of `ns` through the API's DELETE.
fn delete_pod(state: &Arc<DoubleState>, ns: &str, name: &str) {
    let route = pods_route(ns, Some(name));
    let _ = as_controller(state, &route).delete(name, json!({}));
}

/// The stored Pods of `ns` whose ownerReferences name the object of `uid`.
fn owned_pods(state: &DoubleState, ns: &str, uid: &str) -> Vec<Value> {
    state
        .store()
        .objects
        .iter()
        .filter(|((r, n, _), _)| r == "/pods" && n == ns)
        .filter(|(_, pod)| {
            pod["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o["uid"].as_str() == Some(uid))
        })
        .map(|(_, o)| o.clone())
        .collect()
}

impl Ctx<'_> {
    /// A Job create: stored as sent, if it is launch's; then its controller runs.
    pub(crate) async fn create_job(&self, job: Value) -> Reply {
        if let Some(field) = beyond_launch(&job["spec"]) {
            let name = job["metadata"]["name"].as_str().unwrap_or_default();
            return status(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                &format!(
                    "Job.batch \"{name}\" is invalid: spec.{field}: Unsupported value: the kube double runs launch's Job only (one Pod, never retried: backoffLimit 0)"
                ),
                json!({"name": name, "group": "batch", "kind": "Job",
                    "causes": [{"reason": "FieldValueNotSupported", "field": format!("spec.{field}")}]}),
            );
        }
        let name = job["metadata"]["name"].as_str().map(str::to_owned);
        let reply = self.create(job).await;
        if reply.status() == StatusCode::CREATED
            && !self.dry_run(None)
            && let Some(name) = name
        {
            let key = self.key(&name);
            let uid = self
                .state
                .store()
                .objects
                .get(&key)
                .and_then(|j| j["metadata"]["uid"].as_str().map(str::to_owned));
            if let Some(uid) = uid {
                tokio::spawn(control(self.state.clone(), key, uid));
            }
        }
        reply
    }

    /// A Job DELETE in the background: the Job, then its Pods.
    pub(crate) fn delete_job(&self, name: &str, options: Value) -> Reply {
        if options["propagationPolicy"] != "Background" {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!(
                    "the kube double deletes a Job in the background only (propagationPolicy Background, as launch and gc ask), not {}",
                    options["propagationPolicy"]
                ),
                json!({"name": name, "group": "batch", "kind": "jobs"}),
            );
        }
        let uid = self
            .state
            .store()
            .objects
            .get(&self.key(name))
            .and_then(|j| j["metadata"]["uid"].as_str())
            .map(str::to_owned);
        let dry_run = self.dry_run(Some(&options));
        let reply = self.delete(name, options);
        if let Some(uid) = uid.filter(|_| reply.status() == StatusCode::OK && !dry_run) {
            let ns = self.route.namespace.clone().unwrap_or_default();
            for pod in owned_pods(self.state, &ns, &uid) {
                delete_pod(
                    self.state,
                    &ns,
                    pod["metadata"]["name"].as_str().unwrap_or_default(),
                );
            }
        }
        reply
    }
}

/// The field of a Job's spec asking for more than launch's Job, if one does.
fn beyond_launch(spec: &Value) -> Option<&'static str> {
    if spec["backoffLimit"] != 0 {
        return Some("backoffLimit");
    }
    let more_than_one = |field: &str| spec[field].as_i64().is_some_and(|n| n != 1);
    let policies = ["podFailurePolicy", "successPolicy", "backoffLimitPerIndex"];
    ["completions", "parallelism"]
        .into_iter()
        .find(|field| more_than_one(field))
        .or_else(|| policies.into_iter().find(|field| !spec[*field].is_null()))
}

/// A Pod the controller makes from the template of the Job `job`.
fn pod_for(job: &Value) -> Value {
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    let uid = job["metadata"]["uid"].as_str().unwrap_or_default();
    let template = &job["spec"]["template"];
    let mut metadata = json!({
        "generateName": format!("{name}-"),
        "labels": template["metadata"]["labels"],
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
            "controller": true, "blockOwnerDeletion": true}],
    });
    if !metadata["labels"].is_object() {
        metadata["labels"] = json!({});
    }
    for (key, value) in [
        ("controller-uid", uid),
        ("batch.kubernetes.io/controller-uid", uid),
        ("batch.kubernetes.io/job-name", name),
        ("job-name", name),
    ] {
        if metadata["labels"].get(key).is_none() {
            metadata["labels"][key] = json!(value);
        }
    }
    if template["metadata"]["annotations"].is_object() {
        metadata["annotations"] = template["metadata"]["annotations"].clone();
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]})
}

/// Adds the condition `kind` (true since now) to the Job's stored status. None: the Job is
/// gone or being deleted.
fn add_condition(
    state: &DoubleState,
    key: &Key,
    uid: &str,
    kind: &str,
    reason: &str,
) -> Option<()> {
    let mut store = state.store();
    let job = store.objects.get(key)?;
    if job["metadata"]["uid"].as_str() != Some(uid)
        || !job["metadata"]["deletionTimestamp"].is_null()
    {
        return None;
    }
    let mut job = job.clone();
    let time = now();
    let message = if reason == "DeadlineExceeded" {
        "Job was active longer than specified deadline"
    } else {
        "Job has reached the specified backoff limit"
    };
    let condition = json!({"type": kind, "status": "True", "lastProbeTime": time,
        "lastTransitionTime": time, "reason": reason, "message": message});
    match job["status"]["conditions"].as_array_mut() {
        Some(conditions) => conditions.push(condition),
        None => job["status"]["conditions"] = json!([condition]),
    }
    store.put(key.clone(), job);
    Some(())
}

/// The Job controller of one Job, until the Job is gone or has ended (see the module doc).
async fn control(state: Arc<DoubleState>, key: Key, uid: String) {
    let ns = key.1.clone();
    let started = Instant::now();
    let mut failure: Option<&str> = None;
    loop {
        let job = state.store().objects.get(&key).cloned();
        let Some(job) = job.filter(|j| {
            j["metadata"]["uid"].as_str() == Some(uid.as_str())
                && j["metadata"]["deletionTimestamp"].is_null()
        }) else {
            return;
        };
        let mut pods = Vec::new();
        for pod in owned_pods(&state, &ns, &uid) {
            pods.push(with_status(&state, pod).await);
        }
        let phase = |p: &Value| {
            p["status"]["phase"]
                .as_str()
                .unwrap_or("Pending")
                .to_owned()
        };
        let running = |p: &&Value| {
            !p["metadata"]["deletionTimestamp"].is_null()
                || !matches!(phase(p).as_str(), "Succeeded" | "Failed")
        };
        if let Some(reason) = failure {
            if !pods.iter().any(|p| running(&p)) {
                let _ = add_condition(&state, &key, &uid, "Failed", reason);
                return;
            }
        } else if pods.iter().any(|p| phase(p) == "Succeeded") {
            return;
        } else {
            let deadline = job["spec"]["activeDeadlineSeconds"].as_u64();
            if deadline.is_some_and(|d| started.elapsed() >= Duration::from_secs(d)) {
                failure = Some("DeadlineExceeded");
                for pod in pods.iter().filter(running) {
                    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
                    delete_pod(&state, &ns, name);
                }
            } else if pods.iter().any(|p| phase(p) == "Failed") {
                failure = Some("BackoffLimitExceeded");
            } else if pods.is_empty() {
                let route = pods_route(&ns, None);
                let _ = as_controller(&state, &route).create(pod_for(&job)).await;
            }
            if let Some(reason) = failure
                && add_condition(&state, &key, &uid, "FailureTarget", reason).is_none()
            {
                return;
            }
        }
        tokio::time::sleep(ROUND).await;
    }
}
