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
use kandev_harness::pod::identity::random_hex;
use kandev_harness::pod::template::WorkspaceMode;
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
    path
}

async fn set_up_as_operator(
    kubeconfig: &std::path::Path,
    ns: &str,
    run: &str,
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
        false,
        run,
        &[],
    )
    .await
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
    let started = Instant::now();
    let cluster = loop {
        match set_up_as_operator(&kubeconfig, &ns, "r-granted").await {
            Ok(cluster) => break cluster,
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
    };
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
