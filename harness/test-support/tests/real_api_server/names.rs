//! Issue 32, defect 1, on a real API server: the names and labels the harness gives what it
//! creates are ones the API server admits. Moved here from the cluster double (issue 39: the
//! double no longer validates names and labels, `ValidateObjectMeta` on the real server
//! decides). Every registered scenario (and the preflight's probe) at ordinal 99, with a run
//! id as long as `--run-id` allows (40 bytes): the run's namespace is created, and each task
//! Pod and workspace claim dry-run created in it. Before the fix
//! `lifecycle::replacement_snapshot`'s environment id was 68 bytes with a 22-byte run id. The
//! controls, so that the test can fail: one byte more in a label value, and a run id six
//! bytes longer, are refused 422 `Invalid` in the API server's words.

use crate::namespace;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod};
use kandev_harness::pod::identity::{SessionIdentity, new_run_id};
use kandev_test_support::pod::{TaskPod, task_pod};
use kandev_test_support::real_api_server;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

fn dry() -> PostParams {
    PostParams {
        dry_run: true,
        field_manager: None,
    }
}

/// The refusal `result` must be: its `Status`.
fn refused<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scenarios_pod_and_claim_at_ordinal_99_are_admitted_by_a_real_api_server() {
    let client = real_api_server::shared().admin_client().await;
    let run_id = format!("{}-{}", new_run_id(), "x".repeat(17));
    assert_eq!(run_id.len(), 40, "{run_id}");
    let ns = format!("kandev-acceptance-{run_id}");
    namespace(&client, &ns, json!({})).await;

    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns);
    let mut names: Vec<&str> = kandev_scenarios::registry()
        .iter()
        .map(|s| s.name)
        .collect();
    names.push("preflight");
    for name in &names {
        let identity = SessionIdentity::new(&run_id, name, 99);
        let pod = task_pod(TaskPod::new(&ns, &identity)).unwrap();
        if let Err(e) = pods.create(&dry(), &pod).await {
            panic!("{name}'s task Pod {}: {e}", identity.pod_name());
        }
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": identity.workspace_claim_name(), "labels": identity.all_labels()},
            "spec": {"accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}))
        .unwrap();
        if let Err(e) = claims.create(&dry(), &claim).await {
            panic!("{name}'s claim {}: {e}", identity.workspace_claim_name());
        }
    }

    // The controls: a label value of 64 bytes, and the namespace of a 46-byte run id.
    let identity = SessionIdentity::new(&run_id, "lifecycle::replacement_snapshot", 99);
    let mut pod = task_pod(TaskPod::new(&ns, &identity)).unwrap();
    let long = "x".repeat(64);
    pod.metadata
        .labels
        .get_or_insert_default()
        .insert("kandev.ai/instance-id".into(), long.clone());
    let status = refused(pods.create(&dry(), &pod).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status.message.contains(&format!(
            "metadata.labels: Invalid value: \"{long}\": must be no more than 63 bytes"
        )),
        "{}",
        status.message
    );
    let too_long: Namespace = serde_json::from_value(
        json!({"metadata": {"name": format!("kandev-acceptance-{run_id}-xxxxx")}}),
    )
    .unwrap();
    let namespaces = Api::<Namespace>::all(client.clone());
    let status = refused(namespaces.create(&dry(), &too_long).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status.message.contains("must be no more than 63 bytes"),
        "{}",
        status.message
    );
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}
