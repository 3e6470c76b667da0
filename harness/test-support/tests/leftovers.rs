//! What a test leaves on the engine when it panics, or is killed, before its clean-up: a Pod it
//! posted through the cluster double itself keeps its containers on the engine once the double
//! is gone. A test that panics has them
//! removed as its runtime ends (the double's labelled runtime is dropped with its tasks); for a
//! killed one, the engine's copy of such a Pod carries the harness's `managed` label and the
//! test process's run id (`kandev_test_support::labelled`), so that the local backend's
//! `gc --run <id>`, the code `kandev-acceptance gc` runs, removes them.

// A test file: failing loudly with unwrap/panic is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use bollard::query_parameters::ListContainersOptionsBuilder;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kandev_harness::backend::kube::cluster;
use kandev_harness::backend::{BackendKind, GcRequest, provider};
use kandev_harness::pod::identity::{LABEL_CONTAINER, LABEL_MANAGED, LABEL_POD, LABEL_RUN};
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

/// Posts a Pod of the test's own (labelled as a client labels it: no harness label) through
/// `double` and waits until its container `web` is on the engine; the Pod's containers' labels.
async fn post_a_pod(
    double: &kandev_test_support::cluster_double::KubeDouble,
    worker: &str,
    name: &str,
) -> Vec<HashMap<String, String>> {
    let admin = cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap()
        .admin;
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "left"}})).unwrap(),
        )
        .await
        .unwrap();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "left", "labels": {"app": "left"}},
        "spec": {"containers": [{"name": "web", "image": worker,
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
    loop {
        let found = containers_of(name).await;
        if found
            .iter()
            .any(|labels| labels.get(LABEL_CONTAINER).map(String::as_str) == Some("web"))
        {
            return found;
        }
        assert!(Instant::now() < deadline, "the Pod never ran on the engine");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The tests of this file one at a time: the first removes every Pod of this process's run id,
/// the second's among them.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn pod_name() -> String {
    format!("left-{}", &uuid::Uuid::new_v4().simple().to_string()[..8])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn gc_removes_the_containers_of_a_pod_a_killed_test_posted_through_the_double() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let (double, images) = engine_double().await;
    let name = pod_name();
    let running = post_a_pod(&double, &images.worker, &name).await;
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
            force: false,
            older_than: Duration::from_secs(3600),
            cluster: Default::default(),
        })
        .await
        .unwrap();
    assert!(
        removed.removed.iter().any(|r| r.starts_with("container/")),
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

/// A test that panics while its own Pod runs: once its runtime has ended, the Pod's containers
/// are gone (what a killed test leaves is the case above).
#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn the_containers_of_a_pod_a_panicking_test_posted_are_removed_when_its_runtime_ends() {
    let _alone = ONE_AT_A_TIME.blocking_lock();
    let name = pod_name();
    let panicked = std::thread::spawn({
        let name = name.clone();
        move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let (double, images) = engine_double().await;
                post_a_pod(&double, &images.worker, &name).await;
                panic!("the test fails before it deletes its Pod");
            })
        }
    })
    .join();
    assert!(panicked.is_err(), "the test did not panic");
    let check = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    assert_eq!(
        check.block_on(containers_of(&name)),
        Vec::<HashMap<String, String>>::new(),
        "the panicking test's Pod is still on the engine"
    );
}
