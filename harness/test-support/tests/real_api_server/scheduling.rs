//! The real kube-scheduler's words for a Pod it cannot place, read by the harness as a launch
//! reads them (`KubeBackend::scheduling`): a node selector no node matches is fatal at once,
//! capacity is waited on, a missing claim is named. The scheduler's sentence changed in 1.34
//! (the DRA plugin's "no new claims to deallocate," before the preemption clause), which the
//! harness once read as "waiting" and so waited out its bound: here the words are the real
//! scheduler's of the pinned release, never a copy; the double's scheduler, which words the
//! selector and the missing claim for its own Pods, is held to them here.

use crate::namespace;
use k8s_openapi::api::core::v1::{Node, Pod};
use kandev_harness::backend::kube::{KubeBackend, Scheduling};
use kandev_harness::pod::identity::random_hex;
use kandev_test_support::{cluster_double, real_api_server};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use std::time::{Duration, Instant};

/// A Node with no kubelet behind it: Ready, room for ordinary Pods. The scheduler places
/// Pods on it; nothing runs them.
pub(crate) async fn register_node(client: &kube::Client, name: &str) {
    let nodes = Api::<Node>::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": kandev_harness::pod::compose::Arch::of_this_machine().as_str(),
        }},
    }))
    .unwrap();
    let mut node = nodes.create(&PostParams::default(), &node).await.unwrap();
    node.status = Some(
        serde_json::from_value(json!({
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "no kubelet: registered by the test"}],
        }))
        .unwrap(),
    );
    let mut node = nodes
        .replace_status(name, &PostParams::default(), &node)
        .await
        .unwrap();
    // The TaintNodesByCondition admission plugin taints every new Node not-ready; the node
    // lifecycle controller (not run here: no kubelet sends heartbeats) would lift it.
    node.spec.get_or_insert_default().taints = None;
    nodes
        .replace(name, &PostParams::default(), &node)
        .await
        .unwrap();
}

/// Creates `pod` and waits until the scheduler has said why it cannot place it.
async fn unschedulable(client: &kube::Client, ns: &str, pod: serde_json::Value) -> Pod {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(pod).unwrap();
    let name = pod.metadata.name.clone().unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let start = Instant::now();
    loop {
        let pod = pods.get(&name).await.unwrap();
        if KubeBackend::scheduling(&pod).is_some() {
            return pod;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the scheduler said nothing of {name} in 60 s: {:?}",
            pod.status
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn pod(name: &str, spec: serde_json::Value) -> serde_json::Value {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "main", "image": "kandev-acceptance/none:0",
        "resources": spec.get("cpu").map(|cpu| json!({"requests": {"cpu": cpu}}))}]);
    spec.as_object_mut().unwrap().remove("cpu");
    json!({"metadata": {"name": name}, "spec": spec})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedulers_own_words_are_judged_on_a_real_api_server() {
    let real = real_api_server::shared();
    let client = real.admin_client().await;
    let _nodes = crate::NODES.lock().await;
    let ns = format!("scheduling-{}", random_hex(4));
    namespace(&client, &ns, json!({})).await;
    let node = format!("no-kubelet-{}", random_hex(4));
    register_node(&client, &node).await;

    let selector_pod = pod(
        "selector",
        json!({"nodeSelector": {"kandev.ai/e2e-never": "true"}}),
    );
    let selector = unschedulable(&client, &ns, selector_pod.clone()).await;
    let cpu = unschedulable(&client, &ns, pod("cpu", json!({"cpu": "64"}))).await;
    let claim_pod = pod(
        "claim",
        json!({"volumes": [{"name": "w", "persistentVolumeClaim": {"claimName": "kandev-e2e-missing-claim"}}]}),
    );
    let claim = unschedulable(&client, &ns, claim_pod.clone()).await;
    let _ = Api::<Node>::all(client.clone())
        .delete(&node, &DeleteParams::default())
        .await;

    // The double's scheduler (one node, as here) says what the real one says, word for word.
    for (sent, answered) in [(&selector_pod, &selector), (&claim_pod, &claim)] {
        let real_words = KubeBackend::scheduling(answered).map(|s| s.message().to_owned());
        assert_eq!(cluster_double::scheduler_says(sent), real_words);
    }

    let judged = KubeBackend::scheduling(&selector).unwrap();
    println!("{} selector: {}", real.version, judged.message());
    assert!(
        matches!(judged, Scheduling::NoNodeMatches(_)),
        "a selector no node matches must be fatal at once: {judged:?}"
    );
    let cause = KubeBackend::cannot_start(&selector).unwrap();
    assert!(cause.contains("kandev.ai/e2e-never=true"), "{cause}");

    let judged = KubeBackend::scheduling(&cpu).unwrap();
    println!("{} cpu: {}", real.version, judged.message());
    assert!(
        matches!(&judged, Scheduling::Waiting(m) if m.contains("Insufficient cpu")),
        "{judged:?}"
    );
    assert_eq!(KubeBackend::cannot_start(&cpu), None);

    let judged = KubeBackend::scheduling(&claim).unwrap();
    println!("{} claim: {}", real.version, judged.message());
    assert!(
        matches!(&judged, Scheduling::MissingClaim { claim, .. } if claim == "kandev-e2e-missing-claim"),
        "{judged:?}"
    );
}
