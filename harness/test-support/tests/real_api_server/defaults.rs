//! The double's Pod defaulting refereed by the real API server: the task Pod the harness
//! composes (a dry run, a create with an emptyDir workspace, a create with a claim) sent to
//! both, the answers compared field by field less what varies on every create
//! (`recorded::normalized`). `KANDEV_RECORD=1` also writes the real answers to
//! `fixtures/kube/recorded/` (checked in), where `recorded_pod_defaults.rs` replays them
//! against the double without a real API server, and the nightly compares Kind's.

use crate::namespace;
use kandev_test_support::cluster_double::recorded::{
    Recording, composed_task_pod, differences, normalized, replay,
};
use kandev_test_support::real_api_server;
use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doubles_pod_defaulting_is_the_real_api_servers_on_a_real_api_server() {
    let real = real_api_server::shared();
    let client = real.admin_client().await;
    // A fixed name (this binary's API server is its own): the recordings name it.
    let ns = "kandev-record";
    namespace(
        &client,
        ns,
        json!({"pod-security.kubernetes.io/enforce": "privileged"}),
    )
    .await;
    let pods: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
    );
    let record = std::env::var("KANDEV_RECORD").is_ok_and(|v| v == "1");
    let mut found = Vec::new();
    for (case, claim, dry_run) in [
        ("task-pod-emptydir-dry-run", None, true),
        ("task-pod-emptydir", None, false),
        ("task-pod-claim", Some("kandev-record-workspace"), false),
    ] {
        let request = composed_task_pod(
            ns,
            claim,
            "kandev-acceptance/worker:recorded",
            "kandev-acceptance/daemon:recorded",
        )
        .unwrap();
        let params = PostParams {
            dry_run,
            ..Default::default()
        };
        let answered = pods
            .create(&params, &serde_json::from_value(request.clone()).unwrap())
            .await
            .unwrap_or_else(|e| panic!("{case}: the real API server refused: {e}"));
        let response = normalized(&serde_json::to_value(answered).unwrap());
        let recording = Recording {
            file: format!("{case}.json").into(),
            server_version: real.version.clone(),
            dry_run,
            request: request.clone(),
            response: response.clone(),
        };
        let on_double = replay(&recording)
            .await
            .unwrap_or_else(|e| panic!("{case}: the double refused: {e:#}"));
        for difference in differences(&response, &normalized(&on_double)) {
            found.push(format!("{case}: {difference}"));
        }
        if record {
            let file = kandev_test_support::cluster_double::recorded::folder()
                .join(format!("{case}.json"));
            let text = serde_json::to_string_pretty(&json!({
                "server_version": real.version,
                "dry_run": dry_run,
                "request": request,
                "response": response,
            }))
            .unwrap();
            std::fs::write(&file, text + "\n").unwrap();
        }
    }
    assert!(
        found.is_empty(),
        "the double defaults the task Pod otherwise than kube-apiserver {}:\n  {}",
        real.version,
        found.join("\n  ")
    );
}
