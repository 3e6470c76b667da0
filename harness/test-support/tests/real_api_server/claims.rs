//! What the harness's wait makes of the real scheduler and PV controller (no kubelet, no
//! volume provisioner: the test registers the Node and plays the provisioner by creating
//! the PersistentVolume), judged by the real components' words, never the double's:
//! - capacity: a Pod that does not fit beside another is `Unschedulable` (`Insufficient
//!   cpu`), which `wait_running` waits on and names when it runs out, and the scheduler
//!   places it once the other is gone;
//! - what stays fatal: a `nodeSelector` no node matches at once, a claim still missing after
//!   `CLAIM_GRACE`;
//! - claims: an `Immediate` class's claim waits for its provisioner (`ExternalProvisioning`)
//!   and its Pod is `Unschedulable` (`pod has unbound immediate PersistentVolumeClaims`)
//!   until the claim is bound; a `WaitForFirstConsumer` class's claim is left alone until a
//!   Pod mounts it, then the scheduler names the node (`volume.kubernetes.io/selected-node`)
//!   and holds the Pod until the claim is bound; a claim without a class gets the default
//!   class (the `DefaultStorageClass` admission plugin).

use crate::namespace;
use crate::scheduling::register_node;
use k8s_openapi::api::core::v1::{Event, Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kandev_harness::backend::kube::{KubeBackend, ManagedPvc, Scheduling};
use kandev_harness::backend::{Backend, PodRef};
use kandev_harness::pod::identity::random_hex;
use kandev_test_support::on_double::eventually;
use kandev_test_support::real_api_server;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use std::time::Duration;

const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";

/// A Pod pinned to `node` (should another test's Node be left behind) requesting `cpu`,
/// mounting `claim` if given.
fn pod(name: &str, node: &str, cpu: &str, claim: Option<&str>) -> Pod {
    let mut spec = json!({
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [{"name": "main", "image": "kandev-acceptance/none:0",
            "resources": {"requests": {"cpu": cpu}}}],
    });
    if let Some(claim) = claim {
        spec["volumes"] = json!([{"name": "w", "persistentVolumeClaim": {"claimName": claim}}]);
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

async fn create(pods: &Api<Pod>, pod: &Pod) -> PodRef {
    let created = pods.create(&PostParams::default(), pod).await.unwrap();
    PodRef {
        namespace: created.metadata.namespace.unwrap(),
        name: created.metadata.name.unwrap(),
        uid: created.metadata.uid.unwrap(),
    }
}

/// Polls `look` until it says Some (60 s at most).
async fn until<T, F, Fut>(what: &str, look: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually(what, Duration::from_secs(60), look).await
}

/// The node the scheduler bound `name` to, once it has.
async fn placed(pods: &Api<Pod>, name: &str) -> String {
    until(&format!("pod {name} placed"), || async {
        pods.get(name).await.unwrap().spec?.node_name
    })
    .await
}

/// The scheduler's `Unschedulable` judgement of `name`, once it has one.
async fn judged(pods: &Api<Pod>, name: &str) -> Scheduling {
    until(&format!("the scheduler's word on {name}"), || async {
        KubeBackend::scheduling(&pods.get(name).await.unwrap())
    })
    .await
}

/// The reasons of the Events about `name` in `ns`.
async fn reasons(client: &kube::Client, ns: &str, name: &str) -> Vec<String> {
    let events = Api::<Event>::namespaced(client.clone(), ns);
    let selector = format!("involvedObject.name={name}");
    events
        .list(&ListParams::default().fields(&selector))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect()
}

/// `wait_running` given `timeout`: the error it ends with, as a launch shows it.
async fn wait_error(backend: &KubeBackend, pod: &PodRef, timeout: Duration) -> String {
    let error = backend
        .wait_running(pod, "main", timeout)
        .await
        .unwrap_err();
    format!("{:#}", anyhow::Error::from(error))
}

/// What a provisioner does for `claim`: a volume of `class` bound to it (`claimRef`), whose
/// binding the PV controller completes.
async fn provision(client: &kube::Client, ns: &str, claim: &str, class: &str) -> String {
    let name = format!("pv-{ns}-{claim}");
    let volume: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": class, "persistentVolumeReclaimPolicy": "Delete",
            "hostPath": {"path": format!("/tmp/{name}")},
            "claimRef": {"namespace": ns, "name": claim}},
    }))
    .unwrap();
    Api::<PersistentVolume>::all(client.clone())
        .create(&PostParams::default(), &volume)
        .await
        .unwrap();
    name
}

fn class(name: &str, mode: &str) -> StorageClass {
    serde_json::from_value(json!({"metadata": {"name": name},
        "provisioner": "acceptance.kandev.ai/none", "volumeBindingMode": mode}))
    .unwrap()
}

fn claim(name: &str, class: Option<&str>) -> PersistentVolumeClaim {
    serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
            "resources": {"requests": {"storage": "1Gi"}}}}))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_is_waited_on_and_a_selector_or_a_missing_claim_is_fatal_on_a_real_api_server() {
    let real = real_api_server::shared();
    let client = real.admin_client().await;
    let _nodes = crate::NODES.lock().await;
    let ns = format!("capacity-{}", random_hex(4));
    namespace(&client, &ns, json!({})).await;
    let node = format!("no-kubelet-{}", random_hex(4));
    register_node(&client, &node).await;
    let backend = KubeBackend::new(client.clone(), &ns, "kube", "main", ManagedPvc::default());
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);

    // The node has 2 CPUs: the first Pod takes 1.2, the second does not fit beside it.
    let first = create(&pods, &pod("first", &node, "1200m", None)).await;
    assert_eq!(placed(&pods, "first").await, node);
    let second = create(&pods, &pod("second", &node, "1200m", None)).await;
    let word = judged(&pods, "second").await;
    assert!(
        matches!(&word, Scheduling::Waiting(m) if m.contains("Insufficient cpu")),
        "{word:?}"
    );
    // Waited on, not fatal: the wait runs out naming the scheduler's latest word.
    let message = wait_error(&backend, &second, Duration::from_secs(3)).await;
    assert!(
        message.contains("the scheduler has not placed it yet (Unschedulable)")
            && message.contains("Insufficient cpu"),
        "{message}"
    );
    // Once the first is gone (no kubelet to end it gracefully), the scheduler places it.
    pods.delete(&first.name, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert_eq!(placed(&pods, "second").await, node);
    let placed_pod = pods.get("second").await.unwrap();
    assert_eq!(KubeBackend::scheduling(&placed_pod), None);
    let seen = reasons(&client, &ns, "second").await;
    assert!(
        seen.iter().any(|r| r == "FailedScheduling") && seen.iter().any(|r| r == "Scheduled"),
        "{seen:?}"
    );

    // A selector no node matches: fatal, naming the selector.
    let mut never = pod("never", &node, "10m", None);
    never.spec.as_mut().unwrap().node_selector =
        Some([("kandev.ai/e2e-never".to_owned(), "true".to_owned())].into());
    let never = create(&pods, &never).await;
    let message = wait_error(&backend, &never, Duration::from_secs(120)).await;
    assert!(
        message.contains("kandev.ai/e2e-never=true") && message.contains("Unschedulable"),
        "{message}"
    );
    // A claim still missing after the grace: fatal then, naming it.
    let claimless = create(&pods, &pod("claimless", &node, "10m", Some("absent-claim"))).await;
    let message = wait_error(&backend, &claimless, Duration::from_secs(120)).await;
    assert!(
        message.contains("claim absent-claim is still missing after 15 s"),
        "{message}"
    );

    for pod in [second, never, claimless] {
        let _ = pods
            .delete(&pod.name, &DeleteParams::default().grace_period(0))
            .await;
    }
    let _ = Api::<Node>::all(client.clone())
        .delete(&node, &DeleteParams::default())
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_bind_immediately_or_for_their_first_consumer_on_a_real_api_server() {
    let real = real_api_server::shared();
    let client = real.admin_client().await;
    let _nodes = crate::NODES.lock().await;
    let suffix = random_hex(4);
    let ns = format!("claims-{suffix}");
    namespace(&client, &ns, json!({})).await;
    let node = format!("no-kubelet-{suffix}");
    register_node(&client, &node).await;
    let backend = KubeBackend::new(client.clone(), &ns, "kube", "main", ManagedPvc::default());
    let pp = PostParams::default();
    let classes = Api::<StorageClass>::all(client.clone());
    let (wffc, immediate) = (format!("wffc-{suffix}"), format!("immediate-{suffix}"));
    classes
        .create(&pp, &class(&wffc, "WaitForFirstConsumer"))
        .await
        .unwrap();
    classes
        .create(&pp, &class(&immediate, "Immediate"))
        .await
        .unwrap();
    let claims = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns);
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let annotations =
        |c: &PersistentVolumeClaim| c.metadata.annotations.clone().unwrap_or_default();
    let phase = |c: &PersistentVolumeClaim| c.status.as_ref().and_then(|s| s.phase.clone());

    // WaitForFirstConsumer: the PV controller leaves the claim until a Pod mounts it.
    claims
        .create(&pp, &claim("late", Some(&wffc)))
        .await
        .unwrap();
    until("the WaitForFirstConsumer event", || async {
        let seen = reasons(&client, &ns, "late").await;
        seen.iter()
            .any(|r| r == "WaitForFirstConsumer")
            .then_some(())
    })
    .await;
    let unconsumed = claims.get("late").await.unwrap();
    assert_eq!(phase(&unconsumed).as_deref(), Some("Pending"));
    assert!(!annotations(&unconsumed).contains_key(SELECTED_NODE));
    let consumer = create(&pods, &pod("consumer", &node, "10m", Some("late"))).await;
    // The scheduler names the node on the claim, then waits for the provisioner: the Pod is
    // neither placed nor judged unschedulable meanwhile, so the harness waits.
    let selected = until("selected-node on the claim", || async {
        annotations(&claims.get("late").await.unwrap())
            .get(SELECTED_NODE)
            .cloned()
    })
    .await;
    assert_eq!(selected, node);
    let held = pods.get("consumer").await.unwrap();
    assert_eq!(KubeBackend::cannot_start(&held), None);
    assert!(held.spec.unwrap().node_name.is_none());
    until(
        "the PV controller hands the claim to its provisioner",
        || async {
            let seen = reasons(&client, &ns, "late").await;
            seen.iter()
                .any(|r| r == "ExternalProvisioning")
                .then_some(())
        },
    )
    .await;
    let late_volume = provision(&client, &ns, "late", &wffc).await;
    assert_eq!(placed(&pods, "consumer").await, node);
    let bound = claims.get("late").await.unwrap();
    assert_eq!(phase(&bound).as_deref(), Some("Bound"));
    assert_eq!(annotations(&bound)[SELECTED_NODE], node);

    // Immediate: provisioned without a consumer; a Pod mounting it before it is bound is
    // Unschedulable, which the harness waits on, and placed once it is bound.
    claims
        .create(&pp, &claim("early", Some(&immediate)))
        .await
        .unwrap();
    let waiter = create(&pods, &pod("waiter", &node, "10m", Some("early"))).await;
    let word = judged(&pods, "waiter").await;
    assert!(
        matches!(&word, Scheduling::Waiting(m) if m.contains("unbound immediate PersistentVolumeClaims")),
        "{word:?}"
    );
    let message = wait_error(&backend, &waiter, Duration::from_secs(3)).await;
    assert!(
        message.contains("the scheduler has not placed it yet (Unschedulable)")
            && message.contains("unbound immediate"),
        "{message}"
    );
    until(
        "the PV controller hands the claim to its provisioner",
        || async {
            let seen = reasons(&client, &ns, "early").await;
            seen.iter()
                .any(|r| r == "ExternalProvisioning")
                .then_some(())
        },
    )
    .await;
    let early_volume = provision(&client, &ns, "early", &immediate).await;
    assert_eq!(placed(&pods, "waiter").await, node);
    let bound = claims.get("early").await.unwrap();
    assert_eq!(phase(&bound).as_deref(), Some("Bound"));
    assert!(!annotations(&bound).contains_key(SELECTED_NODE));

    // A claim without a class gets the default one (dry run: other tests' claims in the
    // moment the class is default get it too, harmlessly).
    let default = format!("default-{suffix}");
    let mut marked = class(&default, "Immediate");
    marked.metadata.annotations = Some(
        [(
            "storageclass.kubernetes.io/is-default-class".to_owned(),
            "true".to_owned(),
        )]
        .into(),
    );
    classes.create(&pp, &marked).await.unwrap();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    // The admission plugin reads classes through its informer: asked until it has seen it.
    let given = until("the default class given", || async {
        let admitted = claims.create(&dry, &claim("plain", None)).await.unwrap();
        admitted.spec.unwrap().storage_class_name
    })
    .await;
    let _ = classes.delete(&default, &DeleteParams::default()).await;
    assert_eq!(given, default);

    for pod in [consumer, waiter] {
        let _ = pods
            .delete(&pod.name, &DeleteParams::default().grace_period(0))
            .await;
    }
    let volumes = Api::<PersistentVolume>::all(client.clone());
    for volume in [late_volume, early_volume] {
        let _ = volumes.delete(&volume, &DeleteParams::default()).await;
    }
    for class in [wffc, immediate] {
        let _ = classes.delete(&class, &DeleteParams::default()).await;
    }
    let _ = Api::<Node>::all(client.clone())
        .delete(&node, &DeleteParams::default())
        .await;
}
