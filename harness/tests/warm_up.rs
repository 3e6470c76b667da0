//! The cluster warm-up (`backend::kube::warm_up`) against the wire-level cluster double, its
//! Pods run on this host's engine: one warm-up Pod per node the task Pod can be placed on
//! (a tainted node the template does not tolerate gets none), each image pulled and timed,
//! nothing left in the cluster or on the engine; an image the node cannot pull fails the
//! warm-up naming the node and the image, and leaves nothing either; on an autoscaled cluster
//! a node that joins during the warm-up is warmed in its next round and one that leaves is
//! recorded, not failed. Needs a reachable
//! engine, so `#[ignore]`d (`bash harness/scripts/ensure-engine.sh`, then
//! `cargo test --workspace -- --include-ignored`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::api::core::v1::{Node, Pod};
use kandev_harness::backend::kube::cluster::Cluster;
use kandev_harness::backend::kube::warm_up;
use kandev_harness::pod::compose::Arch;
use kandev_harness::pod::identity::SessionIdentity;
use kandev_test_support::cluster_double::Behaviour;
use kandev_test_support::cluster_double::KubeDouble;
use kandev_test_support::engine::engine_double;
use kandev_test_support::on_double::set_up_sessions;
use kandev_test_support::pod::{TaskPod, task_pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The containers and volumes the engine still holds for `run_id`'s Pods.
async fn left_on_engine(run_id: &str) -> Vec<String> {
    let label = format!("label=acceptance.kandev.ai/run={run_id}");
    let mut left = Vec::new();
    for _ in 0..60 {
        left = [["ps", "-aq"], ["volume", "ls"]]
            .iter()
            .flat_map(|command| {
                let out = std::process::Command::new("docker")
                    .args(command)
                    .args(["-q", "--filter", &label])
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect();
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    left
}

/// The warm-up Pods the run's namespace still holds.
async fn warm_up_pods(cluster: &Cluster) -> Vec<String> {
    Api::<Pod>::namespaced(cluster.admin.clone(), &cluster.namespace)
        .list(&ListParams::default().labels("acceptance.kandev.ai/role=warm-up"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// The Pods the harness POSTed to the run's namespace.
fn pod_creates(double: &KubeDouble, namespace: &str) -> usize {
    let path = format!("/api/v1/namespaces/{namespace}/pods");
    double
        .state
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.uri.split('?').next() == Some(path.as_str()))
        .count()
}

async fn warm_up(
    cluster: &Cluster,
    worker: &str,
    daemon: &str,
    timeout: Duration,
) -> anyhow::Result<serde_json::Value> {
    warm_up_until(cluster, worker, daemon, timeout, &AtomicBool::new(false)).await
}

async fn warm_up_until(
    cluster: &Cluster,
    worker: &str,
    daemon: &str,
    timeout: Duration,
    stopped: &AtomicBool,
) -> anyhow::Result<serde_json::Value> {
    let identity = SessionIdentity::new(&cluster.run_id, "warm-up", 0);
    let arch = Arch::of_this_machine();
    let task = task_pod(TaskPod {
        arch,
        worker_image: worker,
        daemon_image: daemon,
        ..TaskPod::new(&cluster.namespace, &identity)
    })
    .unwrap();
    let spec = task.spec.unwrap_or_default();
    warm_up::run(
        &cluster.admin,
        &cluster.namespace,
        &cluster.run_id,
        &spec,
        &spec,
        arch,
        warm_up::Until { timeout, stopped },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn the_warm_up_pulls_both_images_once_per_placeable_node_and_leaves_nothing() {
    let (double, images) = engine_double().await;
    let (cluster, _) = set_up_sessions(&double, "warm").await;
    // A second node the template does not tolerate: no warm-up Pod for it.
    let arch = Arch::of_this_machine().as_str();
    let tainted: Node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "gpu-node", "labels": {"kubernetes.io/os": "linux",
            "kubernetes.io/arch": arch, "kubernetes.io/hostname": "gpu-node"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]},
    }))
    .unwrap();
    let nodes = Api::<Node>::all(cluster.admin.clone());
    nodes
        .create(&PostParams::default(), &tainted)
        .await
        .unwrap();
    let before = pod_creates(&double, &cluster.namespace);
    let evidence = warm_up(
        &cluster,
        &images.worker,
        &images.daemon,
        Duration::from_secs(120),
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!("{}", serde_json::to_string_pretty(&evidence).unwrap());
    let warmed = evidence["nodes"].as_array().unwrap();
    assert_eq!(warmed.len(), 1, "{evidence}");
    assert_eq!(pod_creates(&double, &cluster.namespace) - before, 1);
    assert_eq!(warmed[0]["node"], json!("kube-double-node"));
    let pulled: Vec<&str> = warmed[0]["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["image"].as_str().unwrap())
        .collect();
    assert_eq!(pulled, [images.worker.as_str(), images.daemon.as_str()]);
    for image in warmed[0]["images"].as_array().unwrap() {
        assert!(image["seconds"].as_f64().is_some(), "{image}");
    }
    assert_eq!(evidence["left_out"][0]["node"], json!("gpu-node"));
    assert!(warm_up_pods(&cluster).await.is_empty());
    assert_eq!(left_on_engine(&cluster.run_id).await, Vec::<String>::new());
    nodes
        .delete("gpu-node", &DeleteParams::default())
        .await
        .unwrap();
    cluster.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn an_image_the_node_cannot_pull_fails_the_warm_up_naming_node_and_image() {
    let (double, images) = engine_double().await;
    let (cluster, _) = set_up_sessions(&double, "warm").await;
    const ABSENT: &str = "registry.invalid/kandev-acceptance/absent:never";
    let error = warm_up(&cluster, &images.worker, ABSENT, Duration::from_secs(60))
        .await
        .unwrap_err();
    let text = format!("{error:#}");
    eprintln!("{text}");
    for named in [
        "kube-double-node",
        ABSENT,
        "ErrImagePull",
        "not found",
        "--no-warm-up",
    ] {
        assert!(text.contains(named), "{named} not in: {text}");
    }
    assert!(warm_up_pods(&cluster).await.is_empty());
    assert_eq!(left_on_engine(&cluster.run_id).await, Vec::<String>::new());
    cluster.teardown().await;
}

/// A run stopped (Ctrl-C, SIGTERM, `--deadline`) while a node still pulls (a registry that
/// never answers): the warm-up ends within a poll or two, not at its timeout, names the
/// stop, and its Pods are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_stopped_run_ends_the_warm_up_and_leaves_no_warm_up_pod() {
    let (double, images) = engine_double().await;
    let (cluster, _) = set_up_sessions(&double, "warm").await;
    double.state.enable(Behaviour::UnreachableRegistry {
        host: "registry.invalid".into(),
    });
    const HANGING: &str = "registry.invalid/kandev-acceptance/slow:1";
    let stopped = AtomicBool::new(false);
    let started = Instant::now();
    let (result, ()) = tokio::join!(
        warm_up_until(
            &cluster,
            &images.worker,
            HANGING,
            Duration::from_secs(300),
            &stopped
        ),
        async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            stopped.store(true, Ordering::SeqCst);
        }
    );
    let text = format!("{:#}", result.unwrap_err());
    assert!(text.contains("the run was stopped"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "ended {:?} after the start, not at the 300-s timeout",
        started.elapsed()
    );
    assert!(warm_up_pods(&cluster).await.is_empty());
    assert_eq!(left_on_engine(&cluster.run_id).await, Vec::<String>::new());
    cluster.teardown().await;
}

/// An autoscaled cluster's scale-down: the node leaves while its images are pulled (a registry
/// that never answers) and, as the Pod garbage collector does for a deleted node, its Pod
/// goes with it. The warm-up records the node as gone and passes, leaving nothing. (The
/// double has one node: a joining node's round is a unit test of `warm_up`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_node_leaving_during_the_warm_up_is_recorded_not_failed() {
    let (double, images) = engine_double().await;
    let (cluster, _) = set_up_sessions(&double, "warm").await;
    double.state.enable(Behaviour::UnreachableRegistry {
        host: "registry.invalid".into(),
    });
    const HANGING: &str = "registry.invalid/kandev-acceptance/slow:1";
    let nodes = Api::<Node>::all(cluster.admin.clone());
    let node = nodes.get("kube-double-node").await.unwrap();
    let pods = Api::<Pod>::namespaced(cluster.admin.clone(), &cluster.namespace);
    let (result, ()) = tokio::join!(
        warm_up(&cluster, &images.worker, HANGING, Duration::from_secs(120)),
        async {
            let mut pod = None;
            for _ in 0..240 {
                pod = warm_up_pods(&cluster).await.into_iter().next();
                if pod.is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            let pod = pod.expect("no warm-up Pod");
            tokio::time::sleep(Duration::from_secs(1)).await;
            nodes
                .delete("kube-double-node", &DeleteParams::default())
                .await
                .unwrap();
            pods.delete(&pod, &DeleteParams::default()).await.unwrap();
        }
    );
    let evidence = result.unwrap_or_else(|e| panic!("{e:#}"));
    eprintln!("{}", serde_json::to_string_pretty(&evidence).unwrap());
    let left = &evidence["nodes"][0];
    assert_eq!(left["node"], json!("kube-double-node"), "{evidence}");
    assert!(
        left["left"]
            .as_str()
            .unwrap_or_default()
            .contains("left the cluster"),
        "{evidence}"
    );
    assert!(warm_up_pods(&cluster).await.is_empty());
    assert_eq!(left_on_engine(&cluster.run_id).await, Vec::<String>::new());
    let mut back = node;
    back.metadata.resource_version = None;
    back.metadata.uid = None;
    nodes.create(&PostParams::default(), &back).await.unwrap();
    cluster.teardown().await;
}
