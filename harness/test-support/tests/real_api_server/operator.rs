//! An operator's identity bound to one namespace, as a shared cluster grants it: the run's
//! preflight asks the real API server's RBAC for every grant the run will use and refuses,
//! naming exactly the missing one, before it creates anything; with the grant, the same
//! identity sets the run up and tears it down. The grants are what the harness says it needs
//! (`operator_needs`), written as one Role, so a need the list forgets fails the positive half.

use crate::namespace;
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding};
use kandev_harness::backend::kube::cluster::{
    self, Cluster, ClusterError, EXECUTOR, executor_role, operator_needs, run_labels,
};
use kandev_harness::backend::kube::pull_secrets;
use kandev_harness::pod::identity::random_hex;
use kandev_harness::pod::template::WorkspaceMode;
use kandev_test_support::on_double::can_i;
use kandev_test_support::real_api_server;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use std::time::{Duration, Instant};

/// The Role granting the harness's own list of needs in `ns`, less `without` (a need's
/// `describe()`), with `escalate` and `bind` on roles (so the executor's rules need not be held).
fn operator_role(ns: &str, without: &str) -> Role {
    let executor = executor_role(ns, WorkspaceMode::EmptyDir, &run_labels("r"));
    let mut rules: Vec<PolicyRule> = operator_needs(ns, true, false, &executor, true, &[])
        .into_iter()
        .filter(|need| need.describe() != without)
        .map(|need| PolicyRule {
            api_groups: Some(vec![need.group.clone()]),
            resources: Some(vec![need.resource.clone()]),
            verbs: vec![need.verb.clone()],
            resource_names: need.name.clone().map(|n| vec![n]),
            ..Default::default()
        })
        .collect();
    rules.push(PolicyRule {
        api_groups: Some(vec!["rbac.authorization.k8s.io".into()]),
        resources: Some(vec!["roles".into()]),
        verbs: vec!["escalate".into(), "bind".into()],
        ..Default::default()
    });
    serde_json::from_value(json!({"metadata": {"name": "operator", "namespace": ns}}))
        .map(|mut role: Role| {
            role.rules = Some(rules);
            role
        })
        .unwrap()
}

/// A kubeconfig whose one context authenticates as `ns`'s `operator` ServiceAccount.
async fn operator_kubeconfig(
    admin: &kube::Client,
    ns: &str,
    dir: &std::path::Path,
) -> std::path::PathBuf {
    let server = real_api_server::shared();
    let accounts = Api::<ServiceAccount>::namespaced(admin.clone(), ns);
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "operator"}})).unwrap(),
        )
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "operator"},
        "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": ns}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
    let token = accounts
        .create_token_request("operator", &PostParams::default(), &TokenRequest::default())
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .unwrap();
    let mut config = kube::config::Kubeconfig::read_from(&server.kubeconfig).unwrap();
    for auth in &mut config.auth_infos {
        if let Some(info) = auth.auth_info.as_mut() {
            *info = kube::config::AuthInfo {
                token: Some(token.clone().into()),
                ..Default::default()
            };
        }
    }
    let path = dir.join("operator.kubeconfig");
    std::fs::write(&path, serde_yaml::to_string(&config).unwrap()).unwrap();
    // The authorizer sees a new binding a moment later: wait until the operator's Role
    // grants it what every operator Role here grants (the set-up's ServiceAccount).
    let operator = cluster::open(Some(&path), Some(&server.context))
        .await
        .unwrap()
        .admin;
    let started = Instant::now();
    while can_i(&operator, ns, "create", "serviceaccounts").await != Ok(true) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the operator's binding in {ns} not seen in 20 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    path
}

async fn set_up_as_operator(
    kubeconfig: &std::path::Path,
    ns: &str,
    run: &str,
) -> Result<Cluster, ClusterError> {
    set_up_with(kubeconfig, ns, run, false, &[]).await
}

/// The cluster `set_up` makes once the authorizer sees a grant just made (a refusal for want of
/// grants is tried again for 20 s; any other error fails the test).
async fn once_granted<F, Fut>(mut set_up: F) -> Cluster
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Cluster, ClusterError>>,
{
    let started = Instant::now();
    loop {
        match set_up().await {
            Ok(cluster) => return cluster,
            Err(ClusterError::OperatorForbidden { .. })
                if started.elapsed() < Duration::from_secs(20) =>
            {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => panic!(
                "the granted operator was refused: {}",
                kandev_harness::error_chain(&e)
            ),
        }
    }
}

/// A run's set-up in `ns` as the operator of `kubeconfig`, with the node inspector or not and
/// the image pull secrets `wanted`.
async fn set_up_with(
    kubeconfig: &std::path::Path,
    ns: &str,
    run: &str,
    node_inspector: bool,
    wanted: &[pull_secrets::Wanted],
) -> Result<Cluster, ClusterError> {
    let reached = cluster::open(Some(kubeconfig), Some(&real_api_server::shared().context))
        .await
        .unwrap();
    Cluster::set_up_with_role(
        reached,
        None,
        Some(ns),
        WorkspaceMode::EmptyDir,
        None,
        node_inspector,
        run,
        wanted,
    )
    .await
}

/// What a set-up left in `ns` beside the operator's own account, Role and binding (and the
/// namespace's `default` account).
async fn left_in(admin: &kube::Client, ns: &str) -> Vec<String> {
    let mut left = Vec::new();
    for (group, version, kind) in [
        ("", "v1", "ServiceAccount"),
        ("", "v1", "Secret"),
        ("rbac.authorization.k8s.io", "v1", "Role"),
        ("rbac.authorization.k8s.io", "v1", "RoleBinding"),
        ("coordination.k8s.io", "v1", "Lease"),
    ] {
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        let resource = kube::api::ApiResource::from_gvk(&gvk);
        let api = Api::<kube::api::DynamicObject>::namespaced_with(admin.clone(), ns, &resource);
        let items = api.list(&ListParams::default()).await.unwrap().items;
        left.extend(
            items
                .into_iter()
                .filter_map(|o| o.metadata.name)
                .filter(|n| n != "operator" && n != "default"),
        );
    }
    left
}

/// Issue 40: the operator preflight asks for what copying the image pull secrets takes. An
/// identity bound to its own namespace only, whose `--image-pull-secret ops/regcred` is in
/// another, is refused before the run creates anything, naming the grant it lacks; once
/// granted it, the same set-up passes the preflight, saying what it goes without (the
/// cluster-wide node and Pod reads), unless `--node-inspector` needs the nodes. (Moved from
/// the double's tests.)
#[tokio::test]
async fn the_operator_preflight_asks_for_the_pull_secrets_grants_on_a_real_api_server() {
    let admin = real_api_server::shared().admin_client().await;
    let suffix = random_hex(4);
    let (team, ops) = (format!("team-{suffix}"), format!("ops-{suffix}"));
    for ns in [&team, &ops] {
        namespace(&admin, ns, json!({})).await;
    }
    // Everything in its own namespace, nothing in ops, where the registry's Secret is.
    let everything: Role = serde_json::from_value(json!({"metadata": {"name": "operator"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), &team)
        .create(&PostParams::default(), &everything)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = operator_kubeconfig(&admin, &team, dir.path()).await;
    let wanted = pull_secrets::wanted(&[format!("{ops}/regcred")], &Default::default(), true)
        .unwrap_or_default();

    let refused = set_up_with(&kubeconfig, &team, "denied", false, &wanted)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(
        refused.contains(&format!("get secrets regcred -n {ops}"))
            && refused.contains("image pull secret: read to be copied")
            && refused.contains("fix: "),
        "{refused}"
    );
    // Only that: the run's own namespace grants the copy's create, read and delete.
    assert!(!refused.contains("create secrets"), "{refused}");
    assert_eq!(left_in(&admin, &team).await, Vec::<String>::new());

    // Granted the read in ops, the same set-up passes the preflight (the authorizer may take
    // a moment to see the new binding).
    let pp = PostParams::default();
    let read: Role = serde_json::from_value(json!({"metadata": {"name": "read-regcred"},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                   "resourceNames": ["regcred"]}]}))
    .unwrap();
    Api::<Role>::namespaced(admin.clone(), &ops)
        .create(&pp, &read)
        .await
        .unwrap();
    let binding: RoleBinding = serde_json::from_value(json!({"metadata": {"name": "read-regcred"},
        "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": team}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-regcred"}}))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), &ops)
        .create(&pp, &binding)
        .await
        .unwrap();
    let cluster = once_granted(|| set_up_with(&kubeconfig, &team, "granted", false, &wanted)).await;
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
    // The positive control of what the teardown leaves: the set-up's executor is seen.
    let made = left_in(&admin, &team).await;
    assert!(made.iter().any(|n| n == EXECUTOR), "{made:?}");
    cluster.teardown().await;
    assert_eq!(left_in(&admin, &team).await, Vec::<String>::new());
    // The node inspector cannot go without the nodes: refused before anything is made.
    let refused = set_up_with(&kubeconfig, &team, "inspected", true, &wanted)
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(refused.contains("list nodes (cluster-wide)"), "{refused}");
    assert_eq!(left_in(&admin, &team).await, Vec::<String>::new());
}

#[tokio::test]
async fn an_operator_missing_one_grant_is_refused_naming_it_before_anything_is_created_on_real_api_server()
 {
    let admin = real_api_server::shared().admin_client().await;
    let ns = format!("operator-{}", random_hex(4));
    namespace(
        &admin,
        &ns,
        json!({"pod-security.kubernetes.io/enforce": "privileged"}),
    )
    .await;
    let roles = Api::<Role>::namespaced(admin.clone(), &ns);
    roles
        .create(&PostParams::default(), &operator_role(&ns, "delete pods"))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = operator_kubeconfig(&admin, &ns, dir.path()).await;

    let refused = set_up_as_operator(&kubeconfig, &ns, "r-missing")
        .await
        .err()
        .unwrap();
    match &refused {
        ClusterError::OperatorForbidden {
            missing, identity, ..
        } => {
            assert_eq!(missing.len(), 1, "{refused}");
            assert!(missing[0].starts_with("delete pods ("), "{refused}");
            assert_eq!(identity, &format!("system:serviceaccount:{ns}:operator"));
        }
        other => panic!(
            "not OperatorForbidden: {}",
            kandev_harness::error_chain(other)
        ),
    }
    let text = refused.to_string();
    assert!(
        text.contains("nothing was created") && text.contains("fix: grant these"),
        "{text}"
    );
    let accounts = Api::<ServiceAccount>::namespaced(admin.clone(), &ns);
    assert!(
        accounts.get_opt(EXECUTOR).await.unwrap().is_none(),
        "nothing was created"
    );
    let leases = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(admin.clone(), &ns);
    assert!(
        leases
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // The positive control: the whole list granted, the same identity sets a run up and
    // removes it (the authorizer may take a moment to see the Role's new rule).
    roles
        .replace("operator", &PostParams::default(), &operator_role(&ns, ""))
        .await
        .unwrap();
    let cluster = once_granted(|| set_up_as_operator(&kubeconfig, &ns, "r-granted")).await;
    assert_eq!(
        cluster.operator_access["checked"],
        json!(true),
        "{}",
        cluster.operator_access
    );
    assert!(accounts.get_opt(EXECUTOR).await.unwrap().is_some());
    let records = cluster.teardown().await;
    assert!(
        records
            .iter()
            .all(|r| r.outcome == kandev_report::CleanupOutcome::Removed),
        "{records:?}"
    );
    assert!(
        accounts.get_opt(EXECUTOR).await.unwrap().is_none(),
        "teardown removed it"
    );
}
