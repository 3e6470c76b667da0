//! Jobs, the ServiceAccount admission and TokenRequests on the real API server and its
//! controller manager (the Job controller, the garbage collector, the TTL-after-finished
//! controller), what the cluster double no longer imitates (issue 39): a Job's defaulting and
//! generated selector, the delete propagation policies, TTL after finished, the Pod's
//! `kube-api-access-*` volume, a missing account's 403, the account's own
//! `automountServiceAccountToken`, and a TokenRequest under 10 minutes. No kubelet runs here:
//! a Job's Pods stay unscheduled (a scheduler of no one's), and a test writes their phase as a
//! kubelet would.

use crate::namespace;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::{Event, Pod, ServiceAccount};
use kandev_harness::pod::identity::random_hex;
use kandev_test_support::on_double::{eventually, refusal, typed};
use kandev_test_support::real_api_server;
use kube::api::{Api, DeleteParams, ListParams, PostParams, PropagationPolicy};
use serde_json::{Value, json};
use std::time::Duration;

/// A scheduler no one runs: the Pods stay unbound, so a delete is immediate.
const NO_SCHEDULER: &str = "kandev-jobs-none";

const LIMIT: Duration = Duration::from_secs(60);

const TOKEN_MOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A Job of one Pod as launch makes one (template labels, `restartPolicy: Never`), `spec`
/// merged over it.
fn job(name: &str, spec: Value) -> Job {
    let mut job = json!({"metadata": {"name": name}, "spec": {"template": {
        "metadata": {"labels": {"app.kubernetes.io/name": "kandev-acceptance"}},
        "spec": {"schedulerName": NO_SCHEDULER, "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox:1.36"}]}}}});
    for (k, v) in spec.as_object().unwrap() {
        job["spec"][k.as_str()] = v.clone();
    }
    typed(job)
}

/// The Pod of Job `name`, found as launch finds it (`job-name=<name>`).
async fn pod_of(pods: &Api<Pod>, name: &str) -> Pod {
    eventually(&format!("the Pod of {name}"), LIMIT, || async {
        pods.list(&ListParams::default().labels(&format!("job-name={name}")))
            .await
            .unwrap()
            .items
            .into_iter()
            .next()
    })
    .await
}

/// No Pod of Job `name` is left.
async fn no_pod_of(pods: &Api<Pod>, name: &str) {
    eventually(&format!("no Pod of {name}"), LIMIT, || async {
        let list = pods
            .list(&ListParams::default().labels(&format!("job-name={name}")))
            .await
            .unwrap();
        list.items.is_empty().then_some(())
    })
    .await;
}

/// Writes `phase` into the Pod's status, as the kubelet would once its container ended.
async fn end_pod(pods: &Api<Pod>, pod: &Pod, phase: &str) {
    let name = pod.metadata.name.clone().unwrap();
    let mut pod = pods.get(&name).await.unwrap();
    pod.status.get_or_insert_default().phase = Some(phase.into());
    pods.replace_status(&name, &PostParams::default(), &pod)
        .await
        .unwrap();
}

/// The Job's true conditions, (type, reason), once `until` is among them.
async fn conditions(jobs: &Api<Job>, name: &str, until: &str) -> Vec<(String, String)> {
    eventually(&format!("{name}: {until}"), LIMIT, || async {
        let conditions: Vec<JobCondition> = jobs.get(name).await.unwrap().status?.conditions?;
        let found: Vec<(String, String)> = conditions
            .into_iter()
            .filter(|c| c.status == "True")
            .map(|c| (c.type_, c.reason.unwrap_or_default()))
            .collect();
        found.iter().any(|(t, _)| t == until).then_some(found)
    })
    .await
}

async fn gone(jobs: &Api<Job>, name: &str) {
    eventually(&format!("{name} gone"), LIMIT, || async {
        jobs.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
}

fn policy(policy: PropagationPolicy) -> DeleteParams {
    DeleteParams {
        propagation_policy: Some(policy),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_is_defaulted_and_its_pods_go_by_the_delete_policy_on_a_real_api_server() {
    let client = real_api_server::shared().admin_client().await;
    let ns = format!("jobs-{}", random_hex(4));
    namespace(&client, &ns, json!({})).await;
    let jobs = Api::<Job>::namespaced(client.clone(), &ns);
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let pp = PostParams::default();

    // Defaulted (`SetDefaults_Job`), the selector and the template's labels generated
    // (`generateSelector`).
    let created = jobs.create(&pp, &job("run", json!({}))).await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let created = serde_json::to_value(&created).unwrap();
    let spec = &created["spec"];
    for (field, value) in [
        ("completions", json!(1)),
        ("parallelism", json!(1)),
        ("backoffLimit", json!(6)),
        ("completionMode", json!("NonIndexed")),
        ("suspend", json!(false)),
        ("podReplacementPolicy", json!("TerminatingOrFailed")),
        ("manualSelector", json!(false)),
    ] {
        assert_eq!(spec[field], value, "{field}: {spec}");
    }
    assert_eq!(
        spec["selector"],
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
    );
    let labels = json!({"app.kubernetes.io/name": "kandev-acceptance",
        "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": "run",
        "controller-uid": uid, "job-name": "run"});
    assert_eq!(spec["template"]["metadata"]["labels"], labels);
    assert_eq!(
        created["metadata"]["labels"], labels,
        "the Job takes its template's labels"
    );

    // The controller's Pod: `<job>-<5>`, the template's labels, owned by the Job.
    let pod = pod_of(&pods, "run").await;
    let name = pod.metadata.name.clone().unwrap();
    assert!(name.starts_with("run-") && name.len() == 9, "{name}");
    let pod_json = serde_json::to_value(&pod).unwrap();
    assert_eq!(pod_json["metadata"]["labels"], labels);
    assert_eq!(
        pod_json["metadata"]["ownerReferences"],
        json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "run", "uid": uid,
            "controller": true, "blockOwnerDeletion": true}])
    );
    let status = eventually("the Job active", LIMIT, || async {
        jobs.get("run")
            .await
            .unwrap()
            .status
            .filter(|s| s.active == Some(1))
    })
    .await;
    assert!(status.start_time.is_some(), "{status:?}");

    // No policy: batch/v1 orphans (`DefaultGarbageCollectionPolicy`), the Pod stays, its
    // ownerReference removed by the garbage collector.
    jobs.delete("run", &DeleteParams::default()).await.unwrap();
    gone(&jobs, "run").await;
    eventually("the Pod orphaned", LIMIT, || async {
        let pod = pods.get(&name).await.unwrap();
        pod.metadata.owner_references.is_none().then_some(())
    })
    .await;

    // Background: the Job goes at once, its Pod after it. Foreground: the Job waits for its
    // Pod, marked with the `foregroundDeletion` finalizer meanwhile.
    jobs.create(&pp, &job("back", json!({}))).await.unwrap();
    jobs.create(&pp, &job("fore", json!({}))).await.unwrap();
    pod_of(&pods, "back").await;
    pod_of(&pods, "fore").await;
    jobs.delete("back", &policy(PropagationPolicy::Background))
        .await
        .unwrap();
    assert!(jobs.get_opt("back").await.unwrap().is_none());
    no_pod_of(&pods, "back").await;
    let marked = jobs
        .delete("fore", &policy(PropagationPolicy::Foreground))
        .await
        .unwrap()
        .left()
        .expect("a foreground delete answers the marked Job");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert!(
        marked
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"foregroundDeletion".to_owned())
    );
    no_pod_of(&pods, "fore").await;
    gone(&jobs, "fore").await;

    Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_end_is_its_pods_or_its_deadline_and_its_ttl_removes_it_on_a_real_api_server() {
    let client = real_api_server::shared().admin_client().await;
    let ns = format!("jobs-end-{}", random_hex(4));
    namespace(&client, &ns, json!({})).await;
    let jobs = Api::<Job>::namespaced(client.clone(), &ns);
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let pp = PostParams::default();
    // As launch's: never retried, a deadline.
    let once = json!({"backoffLimit": 0});
    jobs.create(&pp, &job("done", once.clone())).await.unwrap();
    jobs.create(&pp, &job("failing", once.clone()))
        .await
        .unwrap();
    jobs.create(
        &pp,
        &job(
            "deadline",
            json!({"backoffLimit": 0, "activeDeadlineSeconds": 1}),
        ),
    )
    .await
    .unwrap();
    jobs.create(
        &pp,
        &job(
            "brief",
            json!({"backoffLimit": 0, "ttlSecondsAfterFinished": 1}),
        ),
    )
    .await
    .unwrap();

    // Past its deadline: `FailureTarget`, which launch reads first, then `Failed`, both
    // `DeadlineExceeded`, and the Pod deleted.
    let failed = conditions(&jobs, "deadline", "Failed").await;
    assert_eq!(
        failed,
        [
            ("FailureTarget".into(), "DeadlineExceeded".into()),
            ("Failed".into(), "DeadlineExceeded".into())
        ]
    );
    no_pod_of(&pods, "deadline").await;

    // A failed Pod fails a Job of `backoffLimit: 0`.
    end_pod(&pods, &pod_of(&pods, "failing").await, "Failed").await;
    let failed = conditions(&jobs, "failing", "Failed").await;
    assert_eq!(
        failed,
        [
            ("FailureTarget".into(), "BackoffLimitExceeded".into()),
            ("Failed".into(), "BackoffLimitExceeded".into())
        ]
    );

    // A succeeded Pod completes it.
    end_pod(&pods, &pod_of(&pods, "done").await, "Succeeded").await;
    let complete = conditions(&jobs, "done", "Complete").await;
    assert_eq!(
        complete,
        [
            ("SuccessCriteriaMet".into(), "CompletionsReached".into()),
            ("Complete".into(), "CompletionsReached".into())
        ]
    );
    let status = jobs.get("done").await.unwrap().status.unwrap();
    assert_eq!(status.succeeded, Some(1));
    assert!(status.completion_time.is_some());

    // `ttlSecondsAfterFinished`: a second after it completed, the Job goes, its Pod with it.
    end_pod(&pods, &pod_of(&pods, "brief").await, "Succeeded").await;
    gone(&jobs, "brief").await;
    no_pod_of(&pods, "brief").await;
    let events = Api::<Event>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().fields("involvedObject.name=brief"))
        .await
        .unwrap();
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Completed")),
        "the brief Job completed before it went: {:?}",
        events.items
    );

    Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}

/// A Pod of `spec` (no scheduler runs it).
fn pod(name: &str, spec: Value) -> Pod {
    let mut spec = spec;
    spec["schedulerName"] = json!(NO_SCHEDULER);
    typed(json!({"metadata": {"name": name}, "spec": spec}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serviceaccount_admission_and_token_requests_on_a_real_api_server() {
    let client = real_api_server::shared().admin_client().await;
    let ns = format!("accounts-{}", random_hex(4));
    namespace(&client, &ns, json!({})).await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), &ns);
    let pp = PostParams::default();
    accounts
        .create(&pp, &typed(json!({"metadata": {"name": "runner"}})))
        .await
        .unwrap();
    accounts
        .create(
            &pp,
            &typed(json!({"metadata": {"name": "off"}, "automountServiceAccountToken": false})),
        )
        .await
        .unwrap();

    // The projected volume in every container that mounts nothing at the token's path.
    let created = pods
        .create(
            &pp,
            &pod(
                "all",
                json!({"serviceAccountName": "runner",
                "initContainers": [{"name": "i", "image": "x"}],
                "containers": [
                    {"name": "a", "image": "x", "volumeMounts": [{"name": "w", "mountPath": "/w"}]},
                    {"name": "b", "image": "x", "volumeMounts": [{"name": "own", "mountPath": TOKEN_MOUNT}]},
                ],
                "volumes": [{"name": "w", "emptyDir": {}}, {"name": "own", "emptyDir": {}}]}),
            ),
        )
        .await
        .unwrap();
    let spec = serde_json::to_value(created.spec.unwrap()).unwrap();
    let volumes = spec["volumes"].as_array().unwrap();
    assert_eq!(volumes.len(), 3, "{spec}");
    let name = volumes[2]["name"].as_str().unwrap().to_owned();
    let suffix = name.strip_prefix("kube-api-access-").unwrap();
    // `utilrand.String`: consonants and digits but 0, 1 and 3.
    assert!(
        suffix.len() == 5
            && suffix
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
        "{name}"
    );
    assert_eq!(
        volumes[2],
        json!({"name": name, "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace",
                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
        ]}})
    );
    let mount = json!({"name": name, "readOnly": true, "mountPath": TOKEN_MOUNT});
    assert_eq!(spec["initContainers"][0]["volumeMounts"], json!([mount]));
    assert_eq!(spec["containers"][0]["volumeMounts"][1], mount);
    assert_eq!(
        spec["containers"][1]["volumeMounts"],
        json!([{"name": "own", "mountPath": TOKEN_MOUNT}]),
        "a container mounting something there keeps its own"
    );

    // The Pod's field wins over the account's; by default the token is mounted; the account
    // defaults to `default`.
    for (name, account, field, mounted) in [
        ("off-bare", "off", None, false),
        ("off-asked", "off", Some(true), true),
        ("on-refused", "runner", Some(false), false),
        ("default", "", None, true),
    ] {
        let mut spec = json!({"containers": [{"name": "a", "image": "x"}]});
        if !account.is_empty() {
            spec["serviceAccountName"] = json!(account);
        }
        if let Some(field) = field {
            spec["automountServiceAccountToken"] = json!(field);
        }
        let created = pods.create(&pp, &pod(name, spec)).await.unwrap();
        let spec = created.spec.unwrap();
        assert_eq!(spec.volumes.is_some(), mounted, "{name}: {spec:?}");
        let expected = if account.is_empty() {
            "default"
        } else {
            account
        };
        assert_eq!(spec.service_account_name.as_deref(), Some(expected));
    }

    // A missing account: 403, as the plugin words it.
    let refused = refusal(
        pods.create(
            &pp,
            &pod(
                "p",
                json!({"serviceAccountName": "missing", "containers": [{"name": "a", "image": "x"}]}),
            ),
        )
        .await,
    );
    assert_eq!(refused.code, 403);
    assert_eq!(
        refused.message,
        format!(
            "pods \"p\" is forbidden: error looking up service account {ns}/missing: serviceaccount \"missing\" not found"
        )
    );

    // A TokenRequest for less than 10 minutes is refused 422 (`ValidateTokenRequest`).
    let asked: TokenRequest = typed(json!({"spec": {"expirationSeconds": 60}}));
    let refused = refusal(accounts.create_token_request("runner", &pp, &asked).await);
    assert_eq!((refused.code, refused.reason.as_str()), (422, "Invalid"));
    assert!(
        refused.message.contains(
            "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"
        ),
        "{}",
        refused.message
    );
    // The control: ten minutes are granted.
    let asked: TokenRequest = typed(json!({"spec": {"expirationSeconds": 600}}));
    let granted = accounts
        .create_token_request("runner", &pp, &asked)
        .await
        .unwrap();
    assert!(granted.status.unwrap().token.is_some_and(|t| !t.is_empty()));

    Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}
