//! Issue 40: the operator preflight asks for what copying the image pull secrets takes. An
//! identity bound to its own namespace only, whose `--image-pull-secret ops/regcred` is in
//! another, is refused before the run creates anything, naming the grant it lacks; once
//! granted it, the same set-up passes the preflight, saying what it goes without (the
//! cluster-wide node and Pod reads), unless `--node-inspector` needs the nodes.

use super::{account_with_rules, token_of};
use kandev_harness::backend::kube::cluster::{self, Cluster, EXECUTOR};
use kandev_harness::backend::kube::pull_secrets;
use kandev_harness::pod::template::WorkspaceMode;
use kandev_test_support::cluster_double::{self, CONTEXT, KubeDouble};
use kandev_test_support::on_double::admin_client;
use serde_json::{Value, json};
use std::path::PathBuf;

/// A kubeconfig for the double authenticating with `token` (the double's own, its user's
/// token replaced), in `folder`.
fn kubeconfig_with(double: &KubeDouble, token: &str, folder: &tempfile::TempDir) -> PathBuf {
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(&double.kubeconfig).unwrap()).unwrap();
    config["users"][0]["user"]["token"] = json!(token);
    let path = folder.path().join("operator.kubeconfig");
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    path
}

/// What the set-up left in `namespace` beside the operator's own account, Role and binding.
fn left_in(double: &KubeDouble, namespace: &str) -> Vec<String> {
    [
        "serviceaccounts",
        "roles",
        "rolebindings",
        "secrets",
        "leases",
    ]
    .iter()
    .flat_map(|resource| double.state.objects(resource))
    .filter(|o| o["metadata"]["namespace"] == namespace)
    .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_owned))
    .filter(|name| name != "operator" && name != "default")
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_preflight_asks_for_the_pull_secrets_grants_on_kube_double() {
    let double = cluster_double::start(None).await.unwrap();
    let admin = admin_client(&double).await;
    let (team, ops) = ("team-a", "ops");
    // Everything in its own namespace, nothing in ops, where the registry's Secret is.
    account_with_rules(
        &admin,
        team,
        "operator",
        json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]),
    )
    .await;
    double.state.create_namespace(ops, &[]);
    let folder = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig_with(&double, &token_of(&admin, team, "operator").await, &folder);
    let wanted = pull_secrets::wanted(&["ops/regcred".into()], &Default::default(), true)
        .unwrap_or_default();
    let set_up = |run: &'static str, node_inspector: bool| {
        let (kubeconfig, wanted) = (kubeconfig.clone(), wanted.clone());
        async move {
            let reached = cluster::open(Some(&kubeconfig), Some(CONTEXT))
                .await
                .unwrap();
            Cluster::set_up_with_role(
                reached,
                None,
                Some(team),
                WorkspaceMode::EmptyDir,
                None,
                node_inspector,
                run,
                &wanted,
            )
            .await
        }
    };

    let refused = set_up("denied", false).await.err().unwrap().to_string();
    assert!(
        refused.contains("get secrets regcred -n ops")
            && refused.contains("image pull secret: read to be copied")
            && refused.contains("fix: "),
        "{refused}"
    );
    // Only that: the run's own namespace grants the copy's create, read and delete.
    assert!(!refused.contains("create secrets"), "{refused}");
    assert_eq!(left_in(&double, team), Vec::<String>::new());
    assert!(
        double
            .state
            .object("serviceaccounts", team, EXECUTOR)
            .is_none()
    );

    // Granted the read in ops, the same set-up passes the preflight.
    let rbac = "rbac.authorization.k8s.io";
    let pp = kube::api::PostParams::default();
    kube::Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(admin.clone(), ops)
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "read-regcred"}, "rules": [
                {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                 "resourceNames": ["regcred"]}]}))
            .unwrap(),
        )
        .await
        .unwrap();
    kube::Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(admin.clone(), ops)
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "read-regcred"},
                "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": team}],
                "roleRef": {"apiGroup": rbac, "kind": "Role", "name": "read-regcred"}}))
            .unwrap(),
        )
        .await
        .unwrap();
    let cluster = set_up("granted", false).await.unwrap();
    assert_eq!(cluster.operator_access["checked"], true);
    // Bound to its namespace, it may read no node: asked, and said, not refused.
    let without = cluster.operator_access["without"].to_string();
    for said in [
        "list nodes (cluster-wide)",
        "the warm-up is skipped",
        "list pods (cluster-wide)",
    ] {
        assert!(without.contains(said), "{said} not in {without}");
    }
    cluster.teardown().await;
    assert_eq!(left_in(&double, team), Vec::<String>::new());
    // The node inspector cannot go without the nodes: refused before anything is made.
    let refused = set_up("inspected", true).await.err().unwrap().to_string();
    assert!(refused.contains("list nodes (cluster-wide)"), "{refused}");
    assert_eq!(left_in(&double, team), Vec::<String>::new());
}
