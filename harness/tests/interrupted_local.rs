//! A Pod create on the local engine interrupted at any stage (its future dropped, as Ctrl-C
//! or a scenario's timeout drops it) leaves nothing once the run's sweep has run: not the
//! Pod's cgroup (`kandev-acceptance/pod<uid>` in every hierarchy, which carries no labels),
//! not a container or volume. Before, a create dropped after its cgroup was made left an empty
//! Pod cgroup on the host that no sweep found. A killed run (SIGKILL: no sweep, nothing it
//! remembered) leaves what its creates made to `gc`, which removes it too. Needs a reachable
//! engine, so it is
//! `#[ignore]`d: run it with `bash harness/scripts/ensure-engine.sh`, then
//! `cargo test --workspace -- --include-ignored`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::api::core::v1::Pod;
use kandev_harness::backend::Backend;
use kandev_harness::backend::local::plan::CGROUP_ROOT;
use kandev_harness::node::CgroupFs;
use kandev_harness::pod::identity::{LABEL_MANAGED, LABEL_RUN, random_hex};
use kandev_test_support::engine::FixtureEngine;
use serde_json::json;
use std::time::Duration;

/// One test at a time: `gc` removes every orphan Pod cgroup older than its bound, whichever
/// run made it, and so could remove the other test's cgroup before its first container.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A Pod with a volume and an init container: every stage of the local create (cgroup,
/// volumes, infra container, init container, containers) has something to make.
fn pod(name: &str, image: &str, run: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "local",
            "labels": {LABEL_MANAGED: "true", LABEL_RUN: run}},
        "spec": {
            "initContainers": [{"name": "init", "image": image, "command": ["true"]}],
            "containers": [{"name": "work", "image": image,
                "command": ["sh", "-c", "while :; do sleep 3600; done"],
                "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                "resources": {"limits": {"memory": "128Mi", "cpu": "500m"}}}],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
    }))
    .unwrap()
}

/// A Pod of `run` created and cut after `cut` (its future dropped): its UID, given as an API
/// server gives it (the Pod's cgroup is known by it), and whether the create completed (it
/// must then have succeeded).
/// The backend is the test's own: what an interrupted create recorded lives in it.
async fn cut_create(
    backend: &dyn Backend,
    image: &str,
    run: &str,
    cut: Duration,
) -> (String, bool) {
    let uid = uuid::Uuid::new_v4().to_string();
    let mut pod = pod(&format!("cut-{}", random_hex(4)), image, run);
    pod.metadata.uid = Some(uid.clone());
    let completed = tokio::time::timeout(cut, backend.create_pod(&pod))
        .await
        .map(|created| created.unwrap())
        .is_ok();
    (uid, completed)
}

/// The Pod cgroup of `uid`, below the hierarchies' roots.
fn pod_cgroup_of(uid: &str) -> String {
    format!("{CGROUP_ROOT}/pod{uid}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_pod_create_interrupted_at_any_stage_leaves_nothing_after_the_sweep() {
    let _one = ONE_AT_A_TIME.lock().await;
    let engine = FixtureEngine::start().await;
    let backend = engine.local_backend();
    let cgroups = CgroupFs::host().unwrap();
    let run = format!("interrupted-{}", random_hex(4));
    let selector = [(LABEL_RUN, run.as_str())];
    // Cut after 0 ms, 10 ms, ... until a create completes: each a later stage.
    let mut cut = Duration::ZERO;
    let mut left_something = 0;
    let mut interrupted = 0;
    loop {
        let (uid, completed) = cut_create(backend.as_ref(), &engine.images.daemon, &run, cut).await;
        let pod_cgroup = || cgroups.exists(&pod_cgroup_of(&uid));
        // What the create left before the sweep: the positive control (an interrupted
        // create that made something must be seen making it).
        let labelled = backend.list_labelled(&selector).await.unwrap();
        if !completed && (pod_cgroup() || !labelled.is_empty()) {
            left_something += 1;
        }
        let swept = backend.remove_labelled(&selector, false).await.unwrap();
        let labelled = backend.list_labelled(&selector).await.unwrap();
        assert!(
            !pod_cgroup() && labelled.is_empty(),
            "cut after {cut:?} (completed: {completed}): left the Pod cgroup: {}, objects {labelled:?}, after the sweep removed {swept:?}",
            pod_cgroup()
        );
        if completed {
            break;
        }
        interrupted += 1;
        assert!(cut < Duration::from_secs(60), "no create completed");
        cut += Duration::from_millis(if cut < Duration::from_millis(200) {
            10
        } else {
            100
        });
    }
    assert!(
        left_something >= 3,
        "of {interrupted} interrupted creates only {left_something} had made something: the cuts missed the stages"
    );
}

/// A run killed (SIGKILL) in the middle of a Pod create runs no sweep and keeps no record:
/// `gc --run ID` removes what the create made, at any stage, once the Pod cgroup is older
/// than `--older-than` (a Pod being created has its cgroup a moment before its first
/// container, and a cgroup carries no labels: an empty Pod cgroup with no container of its
/// UID in the engine is an orphan). Each cut create here is left as a killed run leaves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_killed_runs_pod_create_cut_at_any_stage_is_removed_by_gc() {
    let _one = ONE_AT_A_TIME.lock().await;
    use kandev_harness::backend::{BackendKind, GcRequest, provider};
    let engine = FixtureEngine::start().await;
    let backend = engine.local_backend();
    let cgroups = CgroupFs::host().unwrap();
    let run = format!("killed-{}", random_hex(4));
    let selector = [(LABEL_RUN, run.as_str())];
    let mut uids = Vec::new();
    let mut cut = Duration::ZERO;
    let mut made_something = 0;
    loop {
        let (uid, completed) = cut_create(backend.as_ref(), &engine.images.daemon, &run, cut).await;
        if cgroups.exists(&pod_cgroup_of(&uid))
            || !backend.list_labelled(&selector).await.unwrap().is_empty()
        {
            made_something += 1;
        }
        uids.push(uid);
        if completed || cut >= Duration::from_secs(60) {
            break;
        }
        cut += Duration::from_millis(if cut < Duration::from_millis(200) {
            20
        } else {
            150
        });
    }
    assert!(made_something >= 3, "the cuts missed the stages");
    // The engine finishes what was sent (what it holds of the run reads the same twice, a
    // second apart); by then the cgroups have passed `--older-than`.
    let read = || async {
        let cgroups: Vec<bool> = uids
            .iter()
            .map(|uid| cgroups.exists(&pod_cgroup_of(uid)))
            .collect();
        (
            cgroups,
            format!("{:?}", backend.list_labelled(&selector).await.unwrap()),
        )
    };
    let mut last = read().await;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = read().await;
        if now == last {
            break;
        }
        last = now;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let request = GcRequest {
        run: Some(run.clone()),
        dry_run: false,
        force: false,
        older_than: Duration::from_secs(3),
        cluster: Default::default(),
    };
    let outcome = provider(BackendKind::Local).gc(&request).await.unwrap();
    let left: Vec<&String> = uids
        .iter()
        .filter(|uid| cgroups.exists(&pod_cgroup_of(uid)))
        .collect();
    let labelled = backend.list_labelled(&selector).await.unwrap();
    assert!(
        left.is_empty() && labelled.is_empty(),
        "gc left Pod cgroups {left:?} and objects {labelled:?}; it removed {:?}",
        outcome.removed
    );
}
