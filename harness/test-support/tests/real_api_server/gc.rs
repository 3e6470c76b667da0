//! `gc` against live Leases on the real API server: a run set up as `--backend kube` sets it
//! up holds a Lease (created with its namespace, renewed, released at teardown), and `gc`
//! spares the runs whose Lease is live and removes the rest. Before issue 34, `gc --backend
//! kube` deleted every harness namespace, those of runs still going included. (It ran on the
//! cluster double until the double stopped validating Leases: here the API server's own
//! validation, namespace deletion and clock judge what the harness writes.)

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kandev_harness::backend::kube::cluster::{self, Cluster};
use kandev_harness::pod::identity::random_hex;
use kandev_harness::pod::template::WorkspaceMode;
use kandev_test_support::on_double::{eventually, typed};
use kandev_test_support::real_api_server;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::time::Duration;

fn scope(run: Option<&str>, force: bool) -> cluster::GcScope<'_> {
    cluster::GcScope {
        namespace: None,
        run,
        dry_run: false,
        force,
    }
}

/// A namespace labelled as a run's (as a run creates it) holding that run's Lease, last
/// renewed `renewed_ago` seconds ago.
async fn run_with_lease(admin: &kube::Client, run: &str, renewed_ago: Option<i64>) -> String {
    let ns = cluster::run_namespace(run);
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": ns, "labels": {
                "acceptance.kandev.ai/managed": "true", "acceptance.kandev.ai/run": run}}})),
        )
        .await
        .unwrap();
    if let Some(ago) = renewed_ago {
        let renewed =
            k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(ago);
        Api::<Lease>::namespaced(admin.clone(), &ns)
            .create(
                &PostParams::default(),
                &typed(json!({"metadata": {"name": cluster::lease_name(run, cluster::Holder::Run),
                    "labels": {"acceptance.kandev.ai/managed": "true", "acceptance.kandev.ai/run": run}},
                    "spec": {"holderIdentity": "a test", "leaseDurationSeconds": cluster::LEASE_SECONDS,
                        "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(renewed)}})),
            )
            .await
            .unwrap();
    }
    ns
}

/// Whether namespace `ns` is gone or going (`Terminating`: the namespace controller empties
/// it first).
async fn gone(admin: &kube::Client, ns: &str) -> bool {
    Api::<Namespace>::all(admin.clone())
        .get_opt(ns)
        .await
        .unwrap()
        .is_none_or(|n| n.status.and_then(|s| s.phase).as_deref() == Some("Terminating"))
}

/// `gc --all` spares the run set up here, a run whose Lease expired is removed, a namespace
/// too young to have its run's Lease yet is spared as being set up; `gc --run` of the live
/// run removes nothing and says why; the run's Lease is renewed (its `renewTime` moves on)
/// and released last at teardown; `--force` removes a spared run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_spares_runs_whose_lease_is_live_and_removes_the_rest_on_a_real_api_server() {
    let real = real_api_server::shared();
    let reached = cluster::open(Some(&real.kubeconfig), Some(&real.context))
        .await
        .unwrap();
    let admin = reached.admin.clone();
    let run = format!("gc-{}", random_hex(4));
    let cluster = Cluster::set_up(reached, None, None, WorkspaceMode::EmptyDir, &run)
        .await
        .unwrap_or_else(|e| panic!("set up: {}", kandev_harness::error_chain(&e)));
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &cluster.namespace);
    let name = cluster::lease_name(&run, cluster::Holder::Run);
    let first = leases.get(&name).await.unwrap();
    let spec = first.spec.clone().unwrap();
    assert_eq!(spec.lease_duration_seconds, Some(cluster::LEASE_SECONDS));
    assert_eq!(
        first.metadata.labels.as_ref().unwrap()["acceptance.kandev.ai/run"],
        run
    );

    // Fixed run names: this binary's server is its own, started fresh.
    let expired = run_with_lease(&admin, "expired-run", Some(600)).await;
    let young = run_with_lease(&admin, "young-run", None).await;
    let all = cluster::gc(&admin, &scope(None, false)).await.unwrap();
    // What the binary's other tests leave for a moment may go with it.
    assert!(
        all.removed.contains(&format!("namespace/{expired}"))
            && !all
                .removed
                .iter()
                .any(|r| r.contains(&run) || r.contains("young")),
        "{:?}",
        all.removed
    );
    let spared: Vec<&str> = all.spared.iter().map(|s| s.run.as_str()).collect();
    assert!(spared.contains(&run.as_str()), "{:?}", all.spared);
    assert!(spared.contains(&"young-run"), "{:?}", all.spared);
    let live = all.spared.iter().find(|s| s.run == run).unwrap();
    assert!(live.evidence.contains(&name), "{}", live.evidence);
    assert!(
        all.spared
            .iter()
            .any(|s| s.run == "young-run" && s.evidence.contains("being set up")),
        "{:?}",
        all.spared
    );
    assert!(
        gone(&admin, &expired).await,
        "the expired run's namespace is left"
    );
    assert!(!gone(&admin, &cluster.namespace).await && !gone(&admin, &young).await);

    // One run by id: a live one is spared, nothing of it removed.
    let one = cluster::gc(&admin, &scope(Some(&run), false))
        .await
        .unwrap();
    assert!(one.removed.is_empty(), "{:?}", one.removed);
    assert_eq!(one.spared.len(), 1);
    assert!(!gone(&admin, &cluster.namespace).await);

    // Renewed: renewTime moves on (every RENEW_EVERY; bounded by twice that).
    let renewed_first = spec.renew_time.unwrap().0;
    eventually(
        "the run's lease renewed",
        cluster::RENEW_EVERY * 2 + Duration::from_secs(5),
        || async {
            let now = leases.get(&name).await.ok()?;
            let renewed = now.spec?.renew_time?.0;
            (renewed > renewed_first).then_some(())
        },
    )
    .await;

    // Teardown releases it last; the young run's namespace goes with --force.
    let records = cluster.teardown().await;
    assert!(
        records.iter().any(|r| r.object == format!("lease/{name}")),
        "{records:?}"
    );
    assert!(leases.get_opt(&name).await.unwrap().is_none());
    let forced = cluster::gc(&admin, &scope(Some("young-run"), true))
        .await
        .unwrap();
    assert_eq!(forced.removed, vec![format!("namespace/{young}")]);
    assert!(forced.spared.is_empty());
}

/// `launch --node-inspector`'s cluster-scoped grant to read nodes (a ClusterRole and its
/// binding, as `launch` writes them, admitted by the real API server): `gc --run` of a run
/// that is over removes them with its namespace, the same of a live run removes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_removes_a_launchs_node_grant_only_when_its_run_is_over_on_a_real_api_server() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    use kandev_harness::backend::kube::launch::LaunchPlan;
    let real = real_api_server::shared();
    let admin = cluster::open(Some(&real.kubeconfig), Some(&real.context))
        .await
        .unwrap()
        .admin;
    let grant_in = |run: &str, namespace: Option<&str>| LaunchPlan {
        run_id: run.to_owned(),
        namespace: namespace.map(str::to_owned),
        harness_image: "h:1".into(),
        harness_arch: None,
        executor_role: Default::default(),
        node_inspector: true,
        job_timeout: Duration::from_secs(60),
        start_timeout: Duration::from_secs(60),
        hold: Duration::from_secs(60),
        inputs: Vec::new(),
        gc_where: String::new(),
        run_args: Vec::new(),
        pull_secrets: Vec::new(),
    };
    let grant = |run: &str| grant_in(run, None);
    let pp = PostParams::default();
    let (over, live) = (
        format!("grant-over-{}", random_hex(4)),
        format!("grant-live-{}", random_hex(4)),
    );
    run_with_lease(&admin, &over, Some(600)).await;
    run_with_lease(&admin, &live, Some(0)).await;
    let (roles, bindings) = (
        Api::<ClusterRole>::all(admin.clone()),
        Api::<ClusterRoleBinding>::all(admin.clone()),
    );
    for run in [&over, &live] {
        let plan = grant(run);
        roles.create(&pp, &plan.nodes_cluster_role()).await.unwrap();
        bindings
            .create(&pp, &plan.nodes_cluster_binding())
            .await
            .unwrap();
    }
    // A launch killed between its two creates: the role alone, its annotation naming the
    // namespace whose Lease judges it.
    let orphan = format!("grant-orphan-{}", random_hex(4));
    run_with_lease(&admin, &orphan, Some(600)).await;
    roles
        .create(&pp, &grant(&orphan).nodes_cluster_role())
        .await
        .unwrap();
    // A launch in an operator's namespace (no run label on it): its run's Lease is read
    // where the binding points, and a live one spares the grant.
    let (team, in_team) = (
        format!("team-{}", random_hex(4)),
        format!("grant-team-{}", random_hex(4)),
    );
    Api::<Namespace>::all(admin.clone())
        .create(&pp, &typed(json!({"metadata": {"name": team}})))
        .await
        .unwrap();
    let renewed = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    );
    Api::<Lease>::namespaced(admin.clone(), &team)
        .create(
            &pp,
            &typed(json!({"metadata": {"name": cluster::lease_name(&in_team, cluster::Holder::Run),
                "labels": {"acceptance.kandev.ai/managed": "true", "acceptance.kandev.ai/run": in_team}},
                "spec": {"holderIdentity": "a test", "leaseDurationSeconds": cluster::LEASE_SECONDS,
                    "renewTime": renewed}})),
        )
        .await
        .unwrap();
    let team_plan = grant_in(&in_team, Some(&team));
    roles
        .create(&pp, &team_plan.nodes_cluster_role())
        .await
        .unwrap();
    bindings
        .create(&pp, &team_plan.nodes_cluster_binding())
        .await
        .unwrap();
    let in_team_gc = cluster::gc(&admin, &scope(Some(&in_team), false))
        .await
        .unwrap();
    assert!(in_team_gc.removed.is_empty(), "{:?}", in_team_gc.removed);
    assert_eq!(in_team_gc.spared.len(), 1, "{:?}", in_team_gc.spared);
    let orphan_gc = cluster::gc(&admin, &scope(Some(&orphan), false))
        .await
        .unwrap();
    assert!(orphan_gc.spared.is_empty(), "{:?}", orphan_gc.spared);
    let orphan_name = grant(&orphan).nodes_grant_name();
    assert!(roles.get_opt(&orphan_name).await.unwrap().is_none());
    cluster::gc(&admin, &scope(Some(&in_team), true))
        .await
        .unwrap();
    assert!(
        bindings
            .get_opt(&team_plan.nodes_grant_name())
            .await
            .unwrap()
            .is_none()
    );
    let spared = cluster::gc(&admin, &scope(Some(&live), false))
        .await
        .unwrap();
    assert!(spared.removed.is_empty(), "{:?}", spared.removed);
    assert_eq!(spared.spared.len(), 1, "{:?}", spared.spared);
    let removed = cluster::gc(&admin, &scope(Some(&over), false))
        .await
        .unwrap();
    // Gone (by this gc, or by the --all of the binary's other test, which may run between).
    let name = grant(&over).nodes_grant_name();
    assert!(removed.spared.is_empty(), "{:?}", removed.spared);
    assert!(roles.get_opt(&name).await.unwrap().is_none());
    assert!(bindings.get_opt(&name).await.unwrap().is_none());
    let kept = grant(&live).nodes_grant_name();
    assert!(roles.get_opt(&kept).await.unwrap().is_some());
    assert!(bindings.get_opt(&kept).await.unwrap().is_some());
    cluster::gc(&admin, &scope(Some(&live), true))
        .await
        .unwrap();
    assert!(roles.get_opt(&kept).await.unwrap().is_none());
}
