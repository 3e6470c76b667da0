//! The executor identity: the Role mirroring Kandev's executor permissions (or the operator's
//! own, `--executor-role FILE`), what the identity must be allowed and must not need, and
//! asking the API server what it may do.

use crate::backend::kube::errors::{ClusterError, setup};
use crate::pod::template::WorkspaceMode;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role};
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

/// The service account, Role and RoleBinding the sessions run as.
pub const EXECUTOR: &str = "kandev-acceptance-executor";

/// The Role mirroring Kandev's executor permissions (kandev-contract.md §7): pods get,
/// create, delete, watch; exec and port-forward; claims as the workspace mode needs them.
/// Deliberately not: list, patch, logs, events, secrets, configmaps, namespaces.
pub fn executor_role(
    namespace: &str,
    mode: WorkspaceMode,
    labels: &BTreeMap<String, String>,
) -> Role {
    let rule = |resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..Default::default()
    };
    let mut rules = vec![
        rule(&["pods"], &["get", "create", "delete", "watch"]),
        rule(&["pods/exec", "pods/portforward"], &["get", "create"]),
    ];
    match mode {
        WorkspaceMode::ManagedPvc => rules.push(rule(
            &["persistentvolumeclaims"],
            &["get", "create", "delete"],
        )),
        WorkspaceMode::ExistingClaim => rules.push(rule(&["persistentvolumeclaims"], &["get"])),
        WorkspaceMode::EmptyDir => {}
    }
    Role {
        metadata: ObjectMeta {
            name: Some(EXECUTOR.into()),
            namespace: Some(namespace.into()),
            labels: Some(labels.clone()),
            ..Default::default()
        },
        rules: Some(rules),
    }
}

/// The operator's Role (`--executor-role FILE`) in place of [`executor_role`]: one
/// `rbac.authorization.k8s.io/v1` Role whose rules are the executor's permissions, used as
/// they are; its name, namespace and labels are the harness's, since the run creates, binds
/// and removes it as its own. Read before anything is created: a file that is no such Role is
/// refused naming the file and what is wrong.
pub fn executor_role_file(
    path: &Path,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Result<Role, ClusterError> {
    let refused = |problem: String| ClusterError::ExecutorRole {
        path: path.display().to_string(),
        problem,
    };
    let text =
        std::fs::read_to_string(path).map_err(|e| refused(format!("cannot be read: {e}")))?;
    let rules = role_rules(&text).map_err(refused)?;
    Ok(Role {
        metadata: ObjectMeta {
            name: Some(EXECUTOR.into()),
            namespace: Some(namespace.into()),
            labels: Some(labels.clone()),
            ..Default::default()
        },
        rules: Some(rules),
    })
}

/// The rules of the one Role document in `text`, or what keeps it from being one (a
/// ClusterRole, several documents, no rules, a rule the API server would refuse: without
/// verbs, with nonResourceURLs, without apiGroups or resources).
fn role_rules(text: &str) -> Result<Vec<PolicyRule>, String> {
    let mut documents = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let value =
            serde_yaml::Value::deserialize(document).map_err(|e| format!("is not YAML: {e}"))?;
        if !value.is_null() {
            documents.push(value);
        }
    }
    let [document] = documents.as_slice() else {
        return Err(format!("holds {} documents, not one Role", documents.len()));
    };
    let field = |name: &str| document.get(name).and_then(serde_yaml::Value::as_str);
    match (field("apiVersion"), field("kind")) {
        (Some("rbac.authorization.k8s.io/v1"), Some("Role")) => {}
        (_, Some("ClusterRole")) => {
            return Err("is a ClusterRole: Kandev's executor permissions are a namespaced Role (kandev-contract.md §7)".into());
        }
        (api_version, kind) => {
            return Err(format!(
                "is {} {}, not an rbac.authorization.k8s.io/v1 Role",
                api_version.unwrap_or("no apiVersion"),
                kind.unwrap_or("no kind")
            ));
        }
    }
    let role: Role = serde_yaml::from_value(document.clone())
        .map_err(|e| format!("is not a valid Role: {e}"))?;
    let rules = role.rules.unwrap_or_default();
    if rules.is_empty() {
        return Err("has no rules: the executor would be allowed nothing".into());
    }
    for (i, rule) in rules.iter().enumerate() {
        if rule.verbs.is_empty() {
            return Err(format!("rules[{i}] has no verbs"));
        }
        if rule
            .non_resource_urls
            .as_ref()
            .is_some_and(|u| !u.is_empty())
        {
            return Err(format!(
                "rules[{i}] names nonResourceURLs, which a namespaced Role cannot grant"
            ));
        }
        // As the API server's `ValidatePolicyRule` (kubernetes `pkg/apis/rbac/validation`)
        // refuses them, before anything is created.
        if rule.api_groups.as_ref().is_none_or(Vec::is_empty) {
            return Err(format!(
                "rules[{i}] names no apiGroups (the core group, of pods and claims, is \"\")"
            ));
        }
        if rule.resources.as_ref().is_none_or(Vec::is_empty) {
            return Err(format!("rules[{i}] names no resources"));
        }
    }
    Ok(rules)
}

/// What the executor identity must be allowed (`verb resource[/subresource]`).
pub fn required_access(mode: WorkspaceMode) -> Vec<(&'static str, &'static str)> {
    let mut needed = vec![
        ("get", "pods"),
        ("create", "pods"),
        ("delete", "pods"),
        ("watch", "pods"),
        ("create", "pods/exec"),
        ("get", "pods/exec"),
        ("create", "pods/portforward"),
        ("get", "pods/portforward"),
    ];
    match mode {
        WorkspaceMode::ManagedPvc => needed.extend([
            ("get", "persistentvolumeclaims"),
            ("create", "persistentvolumeclaims"),
            ("delete", "persistentvolumeclaims"),
        ]),
        WorkspaceMode::ExistingClaim => needed.push(("get", "persistentvolumeclaims")),
        WorkspaceMode::EmptyDir => {}
    }
    needed
}

/// What Kandev's executor must NOT need (recorded: a broader grant is a finding, not an error).
pub const NOT_NEEDED: [(&str, &str); 6] = [
    ("list", "pods"),
    ("patch", "pods"),
    ("get", "pods/log"),
    ("list", "events"),
    ("get", "secrets"),
    ("list", "namespaces"),
];

/// Whether `client` may `verb` `resource` in `namespace` (a SelfSubjectAccessReview).
pub(in crate::backend::kube) async fn can_i(
    client: &Client,
    namespace: &str,
    verb: &str,
    resource: &str,
) -> Result<bool, ClusterError> {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_owned())),
        None => (resource, None),
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.into()),
                verb: Some(verb.into()),
                resource: Some(resource.into()),
                subresource,
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(setup(format!("SelfSubjectAccessReview {verb} {resource}")))?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// The username the API server knows `client` by (a SelfSubjectReview); None when the
/// server does not serve the review (before v1.28) or refuses it.
pub(super) async fn who_am_i(client: &Client) -> Option<String> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let review = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .ok()?;
    review.status?.user_info?.username
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::kube::cluster::run_labels;

    fn role_file(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
        let path = dir.path().join("role.yaml");
        std::fs::write(&path, text).unwrap_or_else(|e| unreachable!("{e}"));
        (dir, path)
    }

    #[test]
    fn a_role_file_keeps_its_rules_and_takes_the_harness_name_namespace_and_labels() {
        let (_dir, path) = role_file(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: mine\n  namespace: elsewhere\n  resourceVersion: \"7\"\nrules:\n- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: [get, list]\n  resourceNames: [a]\n",
        );
        let labels = run_labels("r");
        let role = executor_role_file(&path, "ns", &labels).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(role.metadata.name.as_deref(), Some(EXECUTOR));
        assert_eq!(role.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(role.metadata.labels.as_ref(), Some(&labels));
        assert_eq!(role.metadata.resource_version, None);
        let rules = role.rules.unwrap_or_default();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].verbs, ["get", "list"]);
        assert_eq!(
            rules[0].resource_names.as_deref(),
            Some(&["a".to_owned()][..])
        );
    }

    #[test]
    fn a_file_that_is_no_role_with_rules_is_refused_naming_the_file_and_the_problem() {
        let role = "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n";
        for (text, problem) in [
            (
                "kind: PodTemplate\napiVersion: v1\n",
                "is v1 PodTemplate, not an",
            ),
            (
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nrules: []\n",
                "is a ClusterRole",
            ),
            (role, "has no rules"),
            (&format!("{role}rules: []\n"), "has no rules"),
            (
                &format!("{role}rules:\n- apiGroups: [\"\"]\n  resources: [pods]\n  verbs: []\n"),
                "rules[0] has no verbs",
            ),
            (
                &format!("{role}rules:\n- nonResourceURLs: [/metrics]\n  verbs: [get]\n"),
                "rules[0] names nonResourceURLs",
            ),
            (
                &format!("{role}rules:\n- apiGroups: [\"\"]\n  verbs: [get]\n"),
                "rules[0] names no resources",
            ),
            (
                &format!("{role}rules:\n- resources: [pods]\n  verbs: [get]\n"),
                "rules[0] names no apiGroups",
            ),
            (
                &format!("{role}rules:\n- apiGroups: []\n  resources: [pods]\n  verbs: [get]\n"),
                "rules[0] names no apiGroups",
            ),
            (&format!("{role}---\n{role}"), "holds 2 documents"),
            ("", "holds 0 documents"),
            ("kind: [", "is not YAML"),
        ] {
            let (_dir, path) = role_file(text);
            let refused = executor_role_file(&path, "ns", &BTreeMap::new())
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                refused.contains(problem)
                    && refused.contains(&path.display().to_string())
                    && refused.contains("fix:"),
                "{problem}: {refused}"
            );
        }
        let missing =
            executor_role_file(Path::new("/nonexistent/role.yaml"), "ns", &BTreeMap::new());
        assert!(missing.is_err_and(|e| {
            e.to_string()
                .contains("/nonexistent/role.yaml cannot be read")
        }),);
    }

    #[test]
    fn the_role_mirrors_kandevs_executor_permissions_per_workspace_mode() {
        let labels = run_labels("r");
        let rules = |mode| {
            executor_role("ns", mode, &labels)
                .rules
                .unwrap_or_default()
                .into_iter()
                .flat_map(|r| {
                    let verbs = r.verbs.clone();
                    r.resources
                        .unwrap_or_default()
                        .into_iter()
                        .flat_map(move |res| {
                            verbs
                                .iter()
                                .map(move |v| format!("{v} {res}"))
                                .collect::<Vec<_>>()
                        })
                })
                .collect::<std::collections::BTreeSet<String>>()
        };
        let managed = rules(WorkspaceMode::ManagedPvc);
        for needed in required_access(WorkspaceMode::ManagedPvc) {
            assert!(
                managed.contains(&format!("{} {}", needed.0, needed.1)),
                "{needed:?}"
            );
        }
        for not in NOT_NEEDED {
            assert!(
                !managed.contains(&format!("{} {}", not.0, not.1)),
                "{not:?}"
            );
        }
        assert!(
            !rules(WorkspaceMode::EmptyDir)
                .iter()
                .any(|r| r.contains("persistentvolumeclaims"))
        );
        let existing = rules(WorkspaceMode::ExistingClaim);
        assert!(existing.contains("get persistentvolumeclaims"));
        assert!(
            !existing.contains("delete persistentvolumeclaims"),
            "existing claims are never deleted"
        );
    }
}
