//! The executor identity: the Role mirroring Kandev's executor permissions, what the
//! identity must be allowed and must not need, and asking the API server what it may do.

use crate::backend::kube::errors::{ClusterError, setup};
use crate::pod::template::WorkspaceMode;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role};
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use std::collections::BTreeMap;

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
pub(super) async fn can_i(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::kube::cluster::run_labels;

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
