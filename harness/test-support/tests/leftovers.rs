//! What a test leaves on the engine when it is killed, or panics before its clean-up: a Pod it
//! posted through the cluster double itself (as `real_clients` posts kubectl's `pf-*` Pod)
//! keeps its containers on the engine once the double is gone. The engine's copy of such a Pod
//! carries the harness's `managed` label and the test process's run id
//! (`kandev_test_support::labelled`), so that the local backend's `gc --run <id>`, the code
//! `kandev-acceptance gc` runs, removes them, and nothing of another run.

// A test file: failing loudly with unwrap/panic is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bollard::query_parameters::ListContainersOptionsBuilder;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kandev_harness::backend::kube::cluster;
use kandev_harness::backend::{BackendKind, GcRequest, provider};
use kandev_harness::pod::identity::{LABEL_MANAGED, LABEL_POD, LABEL_RUN};
use kandev_test_support::engine::engine_double;
use kandev_test_support::labelled::test_run_id;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The engine's containers of the Pod `name` (by the label the local backend gives them), with
/// their labels.
async fn containers_of(name: &str) -> Vec<HashMap<String, String>> {
    let docker = kandev_harness::host::connect_engine().await.unwrap();
    let filters = HashMap::from([("label".to_owned(), vec![format!("{LABEL_POD}={name}")])]);
    docker
        .list_containers(Some(
            ListContainersOptionsBuilder::default()
                .all(true)
                .filters(&filters)
                .build(),
        ))
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.labels.unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn gc_removes_the_containers_of_a_pod_a_killed_test_posted_through_the_double() {
    let (double, images) = engine_double().await;
    let admin = cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap()
        .admin;
    let name = format!("left-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "left"}})).unwrap(),
        )
        .await
        .unwrap();
    // A Pod of the test's own, labelled as a client labels it (no harness label).
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "left", "labels": {"app": "left"}},
        "spec": {"containers": [{"name": "web", "image": images.worker,
            "command": ["sleep", "3600"]}]}}))
    .unwrap();
    let created = Api::<Pod>::namespaced(admin, "left")
        .create(&PostParams::default(), &pod)
        .await
        .unwrap();
    // The API object stays the client's: the labels go on the engine's copy only.
    assert_eq!(
        created.metadata.labels,
        Some([("app".to_owned(), "left".to_owned())].into())
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    let running = loop {
        let found = containers_of(&name).await;
        if !found.is_empty() {
            break found;
        }
        assert!(Instant::now() < deadline, "the Pod never ran on the engine");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    for labels in &running {
        assert_eq!(labels.get(LABEL_MANAGED).map(String::as_str), Some("true"));
        assert_eq!(
            labels.get(LABEL_RUN).map(String::as_str),
            Some(test_run_id())
        );
        assert_eq!(labels.get("app").map(String::as_str), Some("left"));
    }

    // The test ends as a killed one does: the double goes, the Pod is never deleted.
    drop(double);
    assert!(
        !containers_of(&name).await.is_empty(),
        "the leftover this test is about is gone before gc ran"
    );

    let removed = provider(BackendKind::Local)
        .gc(&GcRequest {
            run: Some(test_run_id().to_owned()),
            dry_run: false,
            older_than: Duration::from_secs(3600),
            cluster: Default::default(),
        })
        .await
        .unwrap();
    assert!(
        removed.iter().any(|r| r.starts_with("container/")),
        "gc --run {} removed no container: {removed:?}",
        test_run_id()
    );
    assert_eq!(
        containers_of(&name).await,
        Vec::<HashMap<String, String>>::new(),
        "gc --run {} left the Pod's containers",
        test_run_id()
    );
}
