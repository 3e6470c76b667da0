//! Issue 32: the cluster double as strict as the API server and the scheduler it stands in
//! for, wherever the harness depends on them, and the harness meeting those rules. Object
//! names and label syntax (422 `Invalid` in the API server's words), defaulting as the API
//! server does it, node capacity against requests (the scheduler's `Unschedulable`, then the
//! Pod placed once capacity frees), claims bound `Immediate` or `WaitForFirstConsumer`, and a
//! ResourceQuota that requires limits (403 `must specify`).
//!
//! Tests without a runtime need no engine; those with Pods on the local engine are
//! `#[ignore]`d (`bash harness/scripts/ensure-engine.sh`, then `--include-ignored`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kandev_harness::pod::identity::{SessionIdentity, new_run_id};
use kandev_test_support::cluster_double::{self, KubeDouble};
use kandev_test_support::pod::{TaskPod, task_pod};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// The double's admin client (its kubeconfig), as the harness opens it.
async fn admin_client(double: &KubeDouble) -> kube::Client {
    kandev_harness::backend::kube::cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap()
        .admin
}

fn typed<K: serde::de::DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).unwrap()
}

/// The API status of a failed call.
fn refusal<T: std::fmt::Debug>(result: kube::Result<T>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("not an API error: {other:?}"),
    }
}

/// Defect 1: a name or a label the API server's validation refuses is a 422 `Invalid` with
/// its message (apimachinery's `IsValidLabelValue`, `IsQualifiedName`, `IsDNS1123Subdomain`,
/// `IsDNS1123Label`), and nothing is stored; the identity of the scenario whose environment
/// id was 68 bytes, with the longest run id, composes a Pod the double admits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_and_labels_are_refused_as_the_api_server_refuses_them() {
    let double = cluster_double::start(None).await.unwrap();
    let admin = admin_client(&double).await;
    let pp = PostParams::default();
    let pods = Api::<Pod>::namespaced(admin.clone(), "default");
    let long = "x".repeat(64);
    let bad_value: Pod = typed(
        json!({"metadata": {"name": "p", "labels": {"kandev.ai/instance-id": long}},
        "spec": {"containers": [{"name": "c", "image": "i:1"}]}}),
    );
    let status = refusal(pods.create(&pp, &bad_value).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        format!(
            "Pod \"p\" is invalid: metadata.labels: Invalid value: \"{long}\": must be no more than 63 bytes"
        )
    );
    assert!(double.state.object("pods", "default", "p").is_none());

    let bad_key: Pod = typed(json!({"metadata": {"name": "p", "labels": {"-a/b": "v"}},
        "spec": {"containers": [{"name": "c", "image": "i:1"}]}}));
    let status = refusal(pods.create(&pp, &bad_key).await);
    assert_eq!(status.code, 422);
    assert!(
        status
            .message
            .starts_with("Pod \"p\" is invalid: metadata.labels: Invalid value: \"-a/b\": prefix part a lowercase RFC 1123 subdomain"),
        "{}",
        status.message
    );

    let bad_name: Pod = typed(json!({"metadata": {"name": "Bad_Name"},
        "spec": {"containers": [{"name": "c", "image": "i:1"}]}}));
    let status = refusal(pods.create(&pp, &bad_name).await);
    assert_eq!(status.code, 422);
    assert!(
        status.message.starts_with(
            "Pod \"Bad_Name\" is invalid: metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain"
        ),
        "{}",
        status.message
    );
    let dotted: Namespace = typed(json!({"metadata": {"name": "a.b"}}));
    let status = refusal(
        Api::<Namespace>::all(admin.clone())
            .create(&pp, &dotted)
            .await,
    );
    assert_eq!(
        status.message,
        "Namespace \"a.b\" is invalid: metadata.name: Invalid value: \"a.b\": must not contain dots"
    );

    // An update is held to the same rules.
    let fine: Pod = typed(json!({"metadata": {"name": "fine"},
        "spec": {"containers": [{"name": "c", "image": "i:1"}]}}));
    let mut stored = pods.create(&pp, &fine).await.unwrap();
    stored
        .metadata
        .labels
        .get_or_insert_default()
        .insert("k".into(), "x".repeat(64));
    let status = refusal(pods.replace("fine", &pp, &stored).await);
    assert_eq!(status.code, 422);

    // The scenario whose identity broke the rule, with a 40-byte run id, at ordinal 99.
    let run_id = format!("{}-{}", new_run_id(), "x".repeat(17));
    let identity = SessionIdentity::new(&run_id, "lifecycle::replacement_snapshot", 99);
    let pod = task_pod(TaskPod::new("default", &identity)).unwrap();
    pods.create(&pp, &pod).await.unwrap();
}
