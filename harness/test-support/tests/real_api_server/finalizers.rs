//! Finalizers as the harness meets them (a node agent's that is never removed: the cluster
//! twin of `launch::causal_failures/nothing_left`), on the real API server: a Pod with one is
//! only marked by its DELETE, a second DELETE changes nothing, its namespace's deletion waits
//! `Terminating`, and the update removing the last finalizer deletes it (and then the
//! namespace). The harness's exact delete of such a Pod does not hang: once only the
//! finalizer holds it, it waits `finalizer_patience` and fails naming it. The Pod names a
//! scheduler that does not exist, so no node takes it, and a grace period of 0: as a Pod whose
//! kubelet has stopped its containers (the namespace controller waits out a live Pod's
//! `terminationGracePeriodSeconds` before it counts finalizers: `estimateGracefulTermination`
//! in pkg/controller/namespace/deletion/namespaced_resources_deleter.go).

use crate::namespace;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kandev_harness::backend::kube::KubeBackend;
use kandev_harness::backend::{Backend, BackendError, PodRef};
use kandev_harness::pod::identity::random_hex;
use kandev_test_support::on_double::eventually;
use kandev_test_support::real_api_server;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::time::Duration;

const FINALIZER: &str = "node-agent.example.com/cleanup";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_hold_deletes_and_the_harness_names_them_on_a_real_api_server() {
    let client = real_api_server::shared().admin_client().await;
    let ns = format!("finalizers-{}", random_hex(4));
    namespace(&client, &ns, json!({})).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "held", "finalizers": [FINALIZER]},
        "spec": {"schedulerName": "kandev-no-scheduler", "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox"}]},
    }))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();

    let mut backend = KubeBackend::new(client.clone(), &ns, "kube", "c", Default::default());
    backend.delete_finalizer_patience = Duration::from_secs(1);
    let held = backend
        .delete_pod(&PodRef {
            namespace: ns.clone(),
            name: "held".into(),
            uid: uid.clone(),
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&held, BackendError::DeleteHeld { finalizers, uid: u, .. }
            if finalizers == &[FINALIZER.to_owned()] && *u == uid),
        "{held}"
    );
    assert!(held.to_string().contains("fix: "), "{held}");
    let marked = pods.get("held").await.unwrap();
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(0));
    // Deleted again: answered with the object, nothing changes.
    let again = pods.delete("held", &DeleteParams::default()).await.unwrap();
    assert!(again.is_left(), "still there");
    assert_eq!(
        pods.get("held").await.unwrap().metadata.resource_version,
        marked.metadata.resource_version
    );

    // The namespace's deletion: the namespace controller deletes what it can and, Pods
    // remaining, waits `Terminating` while the finalized Pod stays. (Its conditions, which
    // the harness does not read, then say nothing of the finalizer: with Pods remaining, v1.37
    // writes them before counting finalizers, `deleteAllContent` in
    // pkg/controller/namespace/deletion/namespaced_resources_deleter.go.)
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the namespace controller has gone through the namespace",
        Duration::from_secs(60),
        || async {
            let namespace = namespaces.get(&ns).await.unwrap();
            let conditions = namespace.status.and_then(|s| s.conditions);
            conditions.is_some_and(|c| !c.is_empty()).then_some(())
        },
    )
    .await;
    let namespace = namespaces.get(&ns).await.unwrap();
    assert_eq!(
        namespace.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    assert_eq!(pods.get("held").await.unwrap().metadata.uid, Some(uid));

    // The update that removes the last finalizer deletes the Pod; then the namespace goes.
    pods.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(pods.get_opt("held").await.unwrap().is_none());
    eventually("the namespace is gone", Duration::from_secs(60), || async {
        namespaces
            .get_opt(&ns)
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
}
