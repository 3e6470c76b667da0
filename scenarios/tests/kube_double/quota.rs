//! Issue 32, defect 8: the Pods the harness creates beside its sessions (the node inspector's
//! and `network::mtu`'s peer) declare requests and limits, so that a namespace whose
//! ResourceQuota constrains CPU and memory admits and runs them, as it admits the task Pod.
//! The cluster double enforces the quota as the API server's `ResourceQuota` admission plugin
//! does (403 `must specify ...` for a container that does not set a constrained resource):
//! the same Pods without their resources are the positive control. Needs a reachable engine,
//! so it is `#[ignore]`d.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::api::core::v1::{Namespace, Pod, ResourceQuota};
use kandev_harness::backend::kube::cluster;
use kandev_harness::backend::kube::inspector::ClusterInspector;
use kandev_harness::backend::kube::{KubeBackend, ManagedPvc};
use kandev_harness::backend::{Backend, PodRef};
use kandev_harness::pod::identity::{SessionIdentity, random_hex};
use kandev_scenarios::network::mtu::peer_pod_for;
use kandev_test_support::cluster_double;
use kandev_test_support::engine::engine_double;
use kandev_test_support::pod::{TaskPod, task_pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use std::time::Duration;

fn without_resources(mut pod: Pod) -> Pod {
    if let Some(spec) = pod.spec.as_mut() {
        for c in &mut spec.containers {
            c.resources = None;
        }
    }
    pod
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_namespace_whose_quota_requires_limits_runs_the_inspector_and_the_peer() {
    let (double, images) = engine_double().await;
    let admin = cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap()
        .admin;
    let pp = PostParams::default();
    let ns = format!("quota-{}", random_hex(4));
    Api::<Namespace>::all(admin.clone())
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap(),
        )
        .await
        .unwrap();
    Api::<ResourceQuota>::namespaced(admin.clone(), &ns)
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "compute"},
                "spec": {"hard": {"requests.cpu": "8", "requests.memory": "16Gi",
                    "limits.cpu": "16", "limits.memory": "32Gi", "pods": "10"}}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let pods = Api::<Pod>::namespaced(admin.clone(), &ns);
    let run_id = format!("quota-{}", random_hex(3));
    let peer = peer_pod_for(&run_id, "network::mtu", &images.daemon);
    let inspector = ClusterInspector::new(admin.clone(), &ns, &images.daemon, &run_id)
        .inspector_pod(cluster_double::NODE);

    // The control: without their resources, the quota refuses both, naming what is missing.
    for (pod, container) in [(&peer, "peer"), (&inspector, "inspector")] {
        let refused = pods.create(&pp, &without_resources(pod.clone())).await;
        let status = match refused {
            Err(kube::Error::Api(status)) => status,
            other => panic!("admitted without resources: {other:?}"),
        };
        assert_eq!(status.code, 403);
        assert_eq!(
            status.message,
            format!(
                "pods \"{}\" is forbidden: failed quota: compute: must specify limits.cpu for: {container}; limits.memory for: {container}; requests.cpu for: {container}; requests.memory for: {container}",
                pod.metadata.name.as_deref().unwrap()
            )
        );
    }

    // As the harness makes them: admitted and running.
    let backend = KubeBackend::new(admin.clone(), &ns, "kube", "peer", ManagedPvc::default());
    let mut created = Vec::new();
    for (pod, container) in [(&peer, "peer"), (&inspector, "inspector")] {
        let stored = pods.create(&pp, pod).await.unwrap();
        let running = PodRef {
            namespace: ns.clone(),
            name: stored.metadata.name.clone().unwrap(),
            uid: stored.metadata.uid.clone().unwrap(),
        };
        backend
            .wait_running(&running, container, Duration::from_secs(120))
            .await
            .unwrap();
        created.push(running);
    }
    // And the task Pod the default template composes (a server-side dry run).
    let identity = SessionIdentity::new(&run_id, "network::mtu", 1);
    let dry_run = PostParams {
        dry_run: true,
        field_manager: None,
    };
    pods.create(&dry_run, &task_pod(TaskPod::new(&ns, &identity)).unwrap())
        .await
        .unwrap();

    for pod in &created {
        backend.delete_pod(pod).await.unwrap();
    }
    Api::<Namespace>::all(admin.clone())
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}
