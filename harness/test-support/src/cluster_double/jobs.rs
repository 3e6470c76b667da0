//! batch/v1 Jobs as the harness runs them: the API server's defaulting of a Job, a one-Pod
//! Job controller, the TTL-after-finished controller, and the garbage collector's part when a
//! Job is deleted. A Job's validation is the real API server's (`real_api_server/launch.rs`).
//!
//! - **Create** (`SetDefaults_Job`, the Job strategy's `PrepareForCreate`): the defaults, a
//!   selector on `batch.kubernetes.io/controller-uid`, the template's generated labels (the
//!   Job's own when it has none); the template's Pod spec is stored as sent.
//! - **The controller** runs one Pod at a time, named `<job>-<5 random>`, owned by the Job,
//!   through the same admission as any Pod create (retried when refused), whatever else the
//!   Job asks (the harness's is one Pod to one completion, under `restartPolicy: Never`).
//!   The Job's status follows its Pod: `Complete` once it succeeded; `Failed` with
//!   `BackoffLimitExceeded` once failed Pods exceed `backoffLimit` (a failed Pod is replaced
//!   at once, without the controller's backoff), or with `DeadlineExceeded` past
//!   `activeDeadlineSeconds` (the active Pod deleted). `Failed` and `Complete` come once no
//!   Pod of the Job is still terminating (as since v1.31). Only `Completed` and a failure's
//!   reason are Events of the Job.
//! - **TTL**: `ttlSecondsAfterFinished` after it finished, the Job is deleted in the
//!   foreground (its Pods, then the Job).
//! - **Delete**: `Background` deletes the Job, then its Pods; `Foreground` its Pods, then the
//!   Job; `Orphan`, and no policy at all (batch/v1's default), leaves the Pods, their
//!   ownerReference removed.

use super::request::Ctx;
use super::route::Route;
use super::runtime::with_status;
use super::status::Reply;
use super::store::{DoubleState, Identity, Key, now};
use hyper::StatusCode;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The labels the API server adds to a Job's template (and selects on).
const JOB_NAME: &str = "batch.kubernetes.io/job-name";
const LEGACY_JOB_NAME: &str = "job-name";
const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
const LEGACY_CONTROLLER_UID: &str = "controller-uid";

/// How often the controller looks at its Job and Pods.
const ROUND: Duration = Duration::from_millis(250);

/// The generated labels of the Job `name` of `uid`, added to `labels` where absent.
fn add_job_labels(labels: &mut Value, name: &str, uid: &str) {
    if !labels.is_object() {
        *labels = json!({});
    }
    for (key, value) in [
        (LEGACY_CONTROLLER_UID, uid),
        (CONTROLLER_UID, uid),
        (JOB_NAME, name),
        (LEGACY_JOB_NAME, name),
    ] {
        if labels.get(key).is_none() {
            labels[key] = json!(value);
        }
    }
}

/// Defaults a Job about to be stored (its name and UID set), as `SetDefaults_Job` and the
/// Job strategy's `PrepareForCreate` (`generateSelector`) do.
pub(crate) fn default_job(job: &mut Value) {
    let name = job["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let uid = job["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let spec = &mut job["spec"];
    if spec["completions"].is_null() && spec["parallelism"].is_null() {
        spec["completions"] = json!(1);
    }
    for (field, value) in [
        ("parallelism", json!(1)),
        ("backoffLimit", json!(6)),
        ("completionMode", json!("NonIndexed")),
        ("suspend", json!(false)),
        ("podReplacementPolicy", json!("TerminatingOrFailed")),
    ] {
        if spec[field].is_null() {
            spec[field] = value;
        }
    }
    add_job_labels(&mut spec["template"]["metadata"]["labels"], &name, &uid);
    if !spec["selector"]["matchLabels"].is_object() {
        spec["selector"]["matchLabels"] = json!({});
    }
    if spec["selector"]["matchLabels"]
        .get(CONTROLLER_UID)
        .is_none()
    {
        spec["selector"]["matchLabels"][CONTROLLER_UID] = json!(uid);
    }
    let template_labels = spec["template"]["metadata"]["labels"].clone();
    if job["metadata"]["labels"]
        .as_object()
        .is_none_or(serde_json::Map::is_empty)
    {
        job["metadata"]["labels"] = template_labels;
    }
    job["metadata"]["generation"] = json!(1);
    job["status"] = json!({});
}

/// What a DELETE asks to happen to a Job's Pods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Propagation {
    Orphan,
    Background,
    Foreground,
}

/// The DeleteOptions' policy (`Orphan` when none is given: batch/v1's default).
fn propagation(options: &Value) -> Propagation {
    match options["propagationPolicy"].as_str() {
        Some("Background") => Propagation::Background,
        Some("Foreground") => Propagation::Foreground,
        Some(_) => Propagation::Orphan,
        None if options["orphanDependents"] == false => Propagation::Background,
        None => Propagation::Orphan,
    }
}

/// A request context of the controllers (the admin's identity) on `resource` of `ns`.
fn controller_route(resource: &str, ns: &str, name: Option<&str>) -> Route {
    Route {
        group: String::new(),
        version: "v1".into(),
        resource: resource.into(),
        namespace: Some(ns.to_owned()),
        name: name.map(str::to_owned),
        sub: None,
    }
}

/// A request of the controllers (the admin) on Pods at `route`.
fn pods_as_controller<'a>(state: &'a Arc<DoubleState>, route: &'a Route) -> Ctx<'a> {
    Ctx {
        state,
        identity: &Identity::Admin,
        route,
        query: &[],
        api_version: "v1",
        kind: "Pod",
    }
}

/// Deletes the Pod `name` of `ns` as the controllers do (through the API's DELETE).
fn delete_pod(state: &Arc<DoubleState>, ns: &str, name: &str) {
    let route = controller_route("pods", ns, Some(name));
    let ctx = pods_as_controller(state, &route);
    let _ = ctx.delete(name, json!({}));
}

/// The stored Pods of `ns` whose ownerReferences name the object of `uid`.
fn owned_pods(state: &DoubleState, ns: &str, uid: &str) -> Vec<(Key, Value)> {
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
        .map(|(k, o)| (k.clone(), o.clone()))
        .collect()
}

/// The garbage collector's part: the Pods of the Job `uid` deleted, then (foreground) the
/// Job itself once they are gone.
async fn collect(state: Arc<DoubleState>, job_key: Key, uid: String, foreground: bool) {
    let ns = job_key.1.clone();
    for (key, _) in owned_pods(&state, &ns, &uid) {
        delete_pod(&state, &ns, &key.2);
    }
    if !foreground {
        return;
    }
    for _ in 0..1200 {
        if owned_pods(&state, &ns, &uid).is_empty() {
            break;
        }
        tokio::time::sleep(ROUND).await;
    }
    let mut store = state.store();
    if store
        .objects
        .get(&job_key)
        .and_then(|j| j["metadata"]["uid"].as_str())
        == Some(uid.as_str())
    {
        store.delete(&job_key);
    }
}

impl Ctx<'_> {
    /// A Job create: defaulted once it has its UID, stored; then its controller runs.
    pub(crate) async fn create_job(&self, job: Value) -> Reply {
        // The controller makes Pods from the template as sent.
        let template = job["spec"]["template"].clone();
        let mut created: Option<(String, String)> = None;
        let reply = self
            .create_with(job, |job| {
                default_job(job);
                let name = job["metadata"]["name"].as_str().unwrap_or_default();
                let uid = job["metadata"]["uid"].as_str().unwrap_or_default();
                created = Some((name.to_owned(), uid.to_owned()));
            })
            .await;
        let dry_run = self.dry_run(None);
        if reply.status() == StatusCode::CREATED
            && !dry_run
            && let Some((name, uid)) = created
        {
            let key = self.key(&name);
            tokio::spawn(control(self.state.clone(), key, uid, template));
        }
        reply
    }

    /// A Job DELETE, its Pods handled as its DeleteOptions' propagation policy says (see the
    /// module doc; kube-rs sends them in the body, never in the query).
    pub(crate) async fn delete_job(&self, name: &str, options: Value) -> Reply {
        let key = self.key(name);
        let uid = self
            .state
            .store()
            .objects
            .get(&key)
            .and_then(|j| j["metadata"]["uid"].as_str())
            .map(str::to_owned);
        let policy = propagation(&options);
        let dry_run = self.dry_run(Some(&options));
        let reply = self.delete_with(name, options, policy == Propagation::Foreground);
        if dry_run {
            return reply;
        }
        let Some(uid) = uid.filter(|_| reply.status() == StatusCode::OK) else {
            return reply;
        };
        match policy {
            Propagation::Orphan => {
                for (pod_key, mut pod) in owned_pods(self.state, &key.1, &uid) {
                    let meta = &mut pod["metadata"];
                    if let Some(owners) = meta["ownerReferences"].as_array_mut() {
                        owners.retain(|o| o["uid"].as_str() != Some(uid.as_str()));
                        if owners.is_empty()
                            && let Some(meta) = meta.as_object_mut()
                        {
                            meta.remove("ownerReferences");
                        }
                    }
                    self.state.store().put(pod_key, pod);
                }
            }
            Propagation::Background | Propagation::Foreground => {
                tokio::spawn(collect(
                    self.state.clone(),
                    key,
                    uid,
                    policy == Propagation::Foreground,
                ));
            }
        }
        reply
    }
}

/// A Job condition, true since now.
fn condition(kind: &str, reason: &str, message: &str) -> Value {
    let time = now();
    json!({"type": kind, "status": "True", "lastProbeTime": time, "lastTransitionTime": time,
        "reason": reason, "message": message})
}

/// The Job's status counts, with zero counts left out as the API server serializes them
/// (`ready` and `terminating` are always there).
fn counts(status: &mut Value, active: usize, ready: usize, terminating: usize) {
    let set = |status: &mut Value, field: &str, n: usize| match status.as_object_mut() {
        Some(fields) if n == 0 => {
            fields.remove(field);
        }
        _ => status[field] = json!(n),
    };
    set(status, "active", active);
    status["ready"] = json!(ready);
    status["terminating"] = json!(terminating);
    status["uncountedTerminatedPods"] = json!({});
}

/// A Pod the controller makes from `template` for the Job `job`.
fn pod_for(job: &Value, template: &Value) -> Value {
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    let uid = job["metadata"]["uid"].as_str().unwrap_or_default();
    let mut labels = template["metadata"]["labels"].clone();
    add_job_labels(&mut labels, name, uid);
    let mut metadata = json!({
        "generateName": format!("{name}-"),
        "labels": labels,
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid,
            "controller": true, "blockOwnerDeletion": true}],
    });
    if template["metadata"]["annotations"].is_object() {
        metadata["annotations"] = template["metadata"]["annotations"].clone();
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]})
}

/// Creates the Job's Pod through the API, its admission included (a Pod refused is tried
/// again the next round, as the controller retries; the Job's Events are not written: the
/// harness reads a Pod's).
async fn create_pod(state: &Arc<DoubleState>, ns: &str, pod: Value) {
    let route = controller_route("pods", ns, None);
    let _ = pods_as_controller(state, &route).create(pod).await;
}

/// What the controller remembers of its Job between rounds.
#[derive(Default)]
struct Progress {
    started: Option<Instant>,
    /// Pods counted as succeeded or failed (by UID): each counts once.
    counted: HashSet<String>,
    succeeded: u32,
    failed: u32,
    /// The failure the Job ends with once its Pods are gone: (reason, message).
    failure: Option<(&'static str, &'static str)>,
    finished: Option<Instant>,
}

/// Stores the Job's new status when it changed (a `MODIFIED` event, as the controller's
/// status update). None: the Job is gone or being deleted.
fn store_status(state: &DoubleState, key: &Key, uid: &str, status: &Value) -> Option<()> {
    let mut store = state.store();
    let job = store.objects.get(key)?;
    if job["metadata"]["uid"].as_str() != Some(uid)
        || !job["metadata"]["deletionTimestamp"].is_null()
    {
        return None;
    }
    if job["status"] != *status {
        let mut job = job.clone();
        job["status"] = status.clone();
        store.put(key.clone(), job);
    }
    Some(())
}

/// The Job controller and the TTL-after-finished controller of one Job, until the Job is
/// gone (see the module doc).
async fn control(state: Arc<DoubleState>, key: Key, uid: String, template: Value) {
    let ns = key.1.clone();
    let mut progress = Progress::default();
    loop {
        let job = {
            let store = state.store();
            store.objects.get(&key).cloned()
        };
        let Some(job) = job.filter(|j| j["metadata"]["uid"].as_str() == Some(uid.as_str())) else {
            return;
        };
        if !job["metadata"]["deletionTimestamp"].is_null() {
            return;
        }
        let mut status = job["status"].clone();
        if let Some(finished) = progress.finished {
            // The TTL-after-finished controller: a foreground delete, preconditioned on the
            // UID.
            if let Some(ttl) = job["spec"]["ttlSecondsAfterFinished"].as_u64()
                && finished.elapsed() >= Duration::from_secs(ttl)
            {
                let route = Route {
                    group: "batch".into(),
                    ..controller_route("jobs", &ns, Some(&key.2))
                };
                let ctx = Ctx {
                    state: &state,
                    identity: &Identity::Admin,
                    route: &route,
                    query: &[],
                    api_version: "batch/v1",
                    kind: "Job",
                };
                let options = json!({"propagationPolicy": "Foreground",
                    "preconditions": {"uid": uid}});
                let _ = ctx.delete_job(&key.2, options).await;
                return;
            }
            tokio::time::sleep(ROUND).await;
            continue;
        }
        let started = *progress.started.get_or_insert_with(Instant::now);
        if status["startTime"].is_null() {
            status["startTime"] = json!(now());
        }
        // The Job's Pods with their status from the runtime.
        let mut pods = Vec::new();
        for (_, pod) in owned_pods(&state, &ns, &uid) {
            pods.push(with_status(&state, pod).await);
        }
        let deleting = |p: &Value| !p["metadata"]["deletionTimestamp"].is_null();
        let phase = |p: &Value| {
            p["status"]["phase"]
                .as_str()
                .unwrap_or("Pending")
                .to_owned()
        };
        for pod in &pods {
            let pod_uid = pod["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            match phase(pod).as_str() {
                "Succeeded" if progress.counted.insert(pod_uid.clone()) => {
                    progress.succeeded += 1;
                }
                "Failed" if progress.counted.insert(pod_uid.clone()) => progress.failed += 1,
                _ => {}
            }
        }
        let active: Vec<&Value> = pods
            .iter()
            .filter(|p| !deleting(p) && !matches!(phase(p).as_str(), "Succeeded" | "Failed"))
            .collect();
        let terminating = pods.iter().filter(|p| deleting(p)).count();
        let ready = active
            .iter()
            .filter(|p| {
                p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
            .count();
        let backoff_limit = job["spec"]["backoffLimit"].as_u64().unwrap_or(6);
        let mut conditions = status["conditions"].as_array().cloned().unwrap_or_default();
        if progress.failure.is_none() && progress.succeeded == 0 {
            let deadline = job["spec"]["activeDeadlineSeconds"].as_u64();
            if deadline.is_some_and(|d| started.elapsed() >= Duration::from_secs(d)) {
                progress.failure = Some((
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                ));
            } else if u64::from(progress.failed) > backoff_limit {
                progress.failure = Some((
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                ));
            }
            if let Some((reason, message)) = progress.failure {
                // The active Pods go (each counts as failed), the Job's failure is its target.
                for pod in &active {
                    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
                    delete_pod(&state, &ns, name);
                    progress.counted.insert(
                        pod["metadata"]["uid"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                    );
                    progress.failed += 1;
                }
                conditions.push(condition("FailureTarget", reason, message));
                state
                    .store()
                    .event(&job, ("Warning", reason), message, "job-controller");
            }
        }
        let (active_n, ready_n) = if progress.failure.is_some() {
            (0, 0)
        } else {
            (active.len(), ready)
        };
        if progress.succeeded > 0 && progress.failure.is_none() {
            let message = "Reached expected number of succeeded pods";
            conditions.push(condition(
                "SuccessCriteriaMet",
                "CompletionsReached",
                message,
            ));
            conditions.push(condition("Complete", "CompletionsReached", message));
            status["completionTime"] = json!(now());
            progress.finished = Some(Instant::now());
            state.store().event(
                &job,
                ("Normal", "Completed"),
                "Job completed",
                "job-controller",
            );
        } else if let Some((reason, message)) = progress.failure
            && terminating == 0
            && owned_pods(&state, &ns, &uid)
                .iter()
                .all(|(_, p)| !deleting(p))
        {
            conditions.push(condition("Failed", reason, message));
            progress.finished = Some(Instant::now());
        } else if progress.failure.is_none() && active.is_empty() && terminating == 0 {
            create_pod(&state, &ns, pod_for(&job, &template)).await;
        }
        if !conditions.is_empty() {
            status["conditions"] = json!(conditions);
        }
        if progress.succeeded > 0 {
            status["succeeded"] = json!(progress.succeeded);
        }
        if progress.failed > 0 {
            status["failed"] = json!(progress.failed);
        }
        counts(&mut status, active_n, ready_n, terminating);
        if store_status(&state, &key, &uid, &status).is_none() {
            return;
        }
        tokio::time::sleep(ROUND).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_is_defaulted_as_the_api_server_defaults_it() {
        let mut job = json!({"metadata": {"name": "run", "uid": "u-1"}, "spec": {"template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i:1",
                "resources": {"limits": {"cpu": "1"}}}]}}}});
        default_job(&mut job);
        let spec = &job["spec"];
        assert_eq!(spec["completions"], 1);
        assert_eq!(spec["parallelism"], 1);
        assert_eq!(spec["backoffLimit"], 6);
        assert_eq!(spec["completionMode"], "NonIndexed");
        assert_eq!(spec["suspend"], false);
        assert_eq!(spec["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(
            spec["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
        );
        let labels = json!({"batch.kubernetes.io/controller-uid": "u-1",
            "batch.kubernetes.io/job-name": "run", "controller-uid": "u-1", "job-name": "run"});
        assert_eq!(spec["template"]["metadata"]["labels"], labels);
        assert_eq!(
            job["metadata"]["labels"], labels,
            "the Job takes its template's labels"
        );
        let pod = pod_for(&job, &spec["template"]);
        assert_eq!(pod["metadata"]["generateName"], "run-");
        assert_eq!(
            pod["metadata"]["ownerReferences"],
            json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "run", "uid": "u-1",
                "controller": true, "blockOwnerDeletion": true}])
        );
        assert_eq!(pod["metadata"]["labels"], labels);
    }

    #[test]
    fn the_delete_policy_defaults_to_orphan_for_batch_v1() {
        assert_eq!(propagation(&json!({})), Propagation::Orphan);
        assert_eq!(
            propagation(&json!({"propagationPolicy": "Background"})),
            Propagation::Background
        );
        assert_eq!(
            propagation(&json!({"orphanDependents": false})),
            Propagation::Background
        );
    }
}
