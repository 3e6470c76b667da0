//! The executor the harness sets up (`Cluster::set_up`: its namespace, ServiceAccount, Kandev's
//! Role, the binding and a TokenRequest), judged by the real API server's RBAC: refused what
//! Kandev's Role does not grant, its access reviews agreeing, and nothing of it left after the
//! teardown. (Moved from the double's tests: the double's RBAC is held to the real one by the
//! corpus.)

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kandev_harness::backend::kube::cluster::{self, Cluster};
use kandev_harness::pod::identity::random_hex;
use kandev_harness::pod::template::WorkspaceMode;
use kandev_test_support::on_double::can_i;
use kandev_test_support::real_api_server;
use kube::api::{Api, ListParams};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_is_refused_what_kandevs_role_does_not_grant_on_a_real_api_server() {
    let real = real_api_server::shared();
    let reached = cluster::open(Some(&real.kubeconfig), Some(&real.context))
        .await
        .unwrap();
    let run = format!("executor-{}", random_hex(4));
    let cluster = Cluster::set_up(reached, None, None, WorkspaceMode::EmptyDir, &run)
        .await
        .unwrap_or_else(|e| panic!("set up: {}", kandev_harness::error_chain(&e)));
    let ns = cluster.namespace.clone();
    // Kandev's Role grants get/create/delete/watch on pods, not list: refused with 403,
    // naming the executor.
    match Api::<Pod>::namespaced(cluster.session.clone(), &ns)
        .list(&ListParams::default())
        .await
    {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            let user = format!("system:serviceaccount:{ns}:{}", cluster::EXECUTOR);
            assert!(status.message.contains(&user), "{}", status.message);
        }
        other => panic!("the executor listed pods: {other:?}"),
    }
    // The operator's identity may.
    Api::<Pod>::namespaced(cluster.admin.clone(), &ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    // Its access reviews answer from the same Role.
    let session = &cluster.session;
    assert_eq!(can_i(session, &ns, "create", "pods").await, Ok(true));
    assert_eq!(can_i(session, &ns, "list", "pods").await, Ok(false));
    assert_eq!(can_i(session, &ns, "get", "secrets").await, Ok(false));
    assert_eq!(can_i(session, "default", "create", "pods").await, Ok(false));
    assert_eq!(can_i(&cluster.admin, &ns, "list", "pods").await, Ok(true));

    // The teardown removes the namespace it created (the namespace controller finishes it).
    let admin = cluster.admin.clone();
    cluster.teardown().await;
    let namespaces = Api::<Namespace>::all(admin);
    let start = Instant::now();
    while namespaces.get_opt(&ns).await.unwrap().is_some() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "namespace {ns} still there 60 s after the teardown"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
