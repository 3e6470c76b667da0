//! What the operator's own identity does in a run from outside, and the preflight that asks
//! the API server whether it may, before the run creates anything. An identity bound to one
//! namespace (the usual grant on a shared cluster) would otherwise fail late: a sweep's or a
//! teardown's 403 in every scenario, and objects left behind.
//!
//! One place for this knowledge: [`bookkeeper_rules`] are what the run does with the operator's
//! identity besides setting up (evidence, sweeps, the Lease, the inspector); `launch` grants
//! exactly those to the bookkeeper inside the cluster, and [`operator_needs`] asks them of the
//! operator outside it, with what setting up and tearing down take.

use super::executor::EXECUTOR;
use crate::backend::kube::errors::{ClusterError, setup};
use crate::backend::kube::pull_secrets::{self, Planned};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

/// The bookkeeper's rules, each for what the run does with the operator's identity outside
/// the cluster.
pub fn bookkeeper_rules(node_inspector: bool) -> Vec<PolicyRule> {
    let rule = |resources: &[&str], verbs: &[&str], names: &[&str]| PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        resource_names: (!names.is_empty())
            .then(|| names.iter().map(|n| (*n).to_owned()).collect()),
        ..Default::default()
    };
    let mut pod_verbs = vec!["get", "list", "delete"];
    if node_inspector {
        pod_verbs.push("create");
    }
    let mut rules = vec![
        // The ledger lists the run's Pods; sweeps delete what a scenario left; evidence reads
        // the Pods' status.
        rule(&["pods"], &pod_verbs, &[]),
        // Evidence: the containers' logs and the namespace's events.
        rule(&["pods/log"], &["get"], &[]),
        rule(&["events"], &["list"], &[]),
        // `launch::contract`: no Service exposes a task Pod.
        rule(&["services"], &["list"], &[]),
        // The ledger and sweeps of workspace claims.
        rule(&["persistentvolumeclaims"], &["get", "list", "delete"], &[]),
        // The preflight waits for the task Pods' service account.
        rule(&["serviceaccounts"], &["get"], &[]),
        // `launch::causal_failures`' restricted identity: a token of `default` only.
        rule(&["serviceaccounts/token"], &["create"], &["default"]),
    ];
    if node_inspector {
        // The node view's inspector Pod: created, read through exec, deleted.
        rules.push(rule(&["pods/exec"], &["get", "create"], &[]));
    }
    // The run's Lease, which tells `gc` the run is alive: created, renewed, released. The
    // bookkeeper's, not the executor's (Kandev's Role needs nothing new for it).
    rules.push(PolicyRule {
        api_groups: Some(vec!["coordination.k8s.io".into()]),
        resources: Some(vec!["leases".into()]),
        verbs: ["create", "get", "patch", "delete"]
            .map(String::from)
            .to_vec(),
        ..Default::default()
    });
    rules
}

/// One thing the operator's identity must be allowed: a SelfSubjectAccessReview's attributes
/// and why the run needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Need {
    pub verb: String,
    /// The API group ("" for core).
    pub group: String,
    /// The resource, `pods/log` style for a subresource.
    pub resource: String,
    pub name: Option<String>,
    /// False for cluster-scoped resources (namespaces).
    pub namespaced: bool,
    /// Asked in this namespace, not the run's (an image pull secret's own).
    pub namespace: Option<String>,
    pub why: &'static str,
    /// Some: the run goes on without it, doing this instead (said, not refused).
    pub without: Option<&'static str>,
}

impl Need {
    pub(in crate::backend::kube) fn new(
        verb: &str,
        group: &str,
        resource: &str,
        why: &'static str,
    ) -> Self {
        Self {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            name: None,
            namespaced: true,
            namespace: None,
            why,
            without: None,
        }
    }

    /// Not refused when denied: the run does `instead`.
    fn optional(mut self, instead: &'static str) -> Self {
        self.without = Some(instead);
        self
    }

    pub(in crate::backend::kube) fn named(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Asked in `namespace` (nothing changes when it is the run's).
    pub(in crate::backend::kube) fn in_namespace(
        mut self,
        namespace: &str,
        run_namespace: &str,
    ) -> Self {
        self.namespace = (namespace != run_namespace).then(|| namespace.to_owned());
        self
    }

    fn cluster_wide(mut self) -> Self {
        self.namespaced = false;
        self
    }

    /// `delete pods`, `create leases.coordination.k8s.io`, `create serviceaccounts/token
    /// kandev-acceptance-executor`, `create namespaces (cluster-wide)`, `get secrets regcred
    /// -n ops`: what kubectl's `auth can-i` takes.
    pub fn describe(&self) -> String {
        let (resource, sub) = match self.resource.split_once('/') {
            Some((r, s)) => (r, format!("/{s}")),
            None => (self.resource.as_str(), String::new()),
        };
        let group = match self.group.as_str() {
            "" => String::new(),
            g => format!(".{g}"),
        };
        let mut text = format!("{} {resource}{group}{sub}", self.verb);
        if let Some(name) = &self.name {
            text.push_str(&format!(" {name}"));
        }
        if !self.namespaced {
            text.push_str(" (cluster-wide)");
        }
        if let Some(namespace) = &self.namespace {
            text.push_str(&format!(" -n {namespace}"));
        }
        text
    }
}

/// Everything a run from outside does with the operator's identity: the namespace (made and
/// removed, or read when `--namespace` names it), the executor's account, token, Role and
/// binding (and their removal from a named namespace), the bookkeeping ([`bookkeeper_rules`]),
/// the image pull secrets' reads and copies ([`pull_secrets::needs`]) and, RBAC letting an
/// identity grant only what it holds (or may `escalate` and `bind`), the executor's rules
/// themselves.
pub fn operator_needs(
    namespace: &str,
    namespace_given: bool,
    node_inspector: bool,
    executor: &Role,
    may_escalate: bool,
    pull_secrets: &[Planned],
) -> Vec<Need> {
    const RBAC: &str = "rbac.authorization.k8s.io";
    // A request on a namespace object is authorized in that namespace (`/namespaces/{name}`
    // sets the request's namespace: k8s.io/apiserver v0.37.2
    // `pkg/endpoints/request/requestinfo.go`), so a RoleBinding there may grant it; creating
    // one is cluster-wide.
    let mut needs = if namespace_given {
        vec![Need::new("get", "", "namespaces", "the named namespace must exist").named(namespace)]
    } else {
        vec![
            Need::new("create", "", "namespaces", "the run's own namespace").cluster_wide(),
            Need::new("delete", "", "namespaces", "teardown removes it").named(namespace),
        ]
    };
    needs.extend([
        Need::new("create", "", "serviceaccounts", "the executor's account"),
        Need::new(
            "create",
            "",
            "serviceaccounts/token",
            "the executor's token",
        )
        .named(EXECUTOR),
        Need::new("create", RBAC, "roles", "the executor's Role"),
        Need::new("create", RBAC, "rolebindings", "the executor's binding"),
    ]);
    if namespace_given {
        // In a namespace the run did not make, teardown removes each (read first: deleted by UID).
        for resource in ["serviceaccounts", "roles", "rolebindings"] {
            let group = if resource == "serviceaccounts" {
                ""
            } else {
                RBAC
            };
            for verb in ["get", "delete"] {
                needs.push(
                    Need::new(verb, group, resource, "teardown removes the executor's")
                        .named(EXECUTOR),
                );
            }
        }
    }
    let from_rules = |rules: Vec<PolicyRule>, why: &'static str, needs: &mut Vec<Need>| {
        for rule in rules {
            let groups = rule.api_groups.unwrap_or_default();
            let resources = rule.resources.unwrap_or_default();
            let names = rule.resource_names.unwrap_or_default();
            for group in &groups {
                for resource in &resources {
                    for verb in &rule.verbs {
                        let need = Need::new(verb, group, resource, why);
                        if names.is_empty() {
                            needs.push(need);
                        } else {
                            needs.extend(names.iter().map(|n| need.clone().named(n)));
                        }
                    }
                }
            }
        }
    };
    from_rules(
        bookkeeper_rules(node_inspector),
        "the run's bookkeeping (docs/operators.md, the bookkeeper's Role)",
        &mut needs,
    );
    needs.extend(pull_secrets::needs(
        pull_secrets,
        namespace,
        namespace_given,
    ));
    // The cluster-wide reads: the warm-up's nodes (`warm_up`), the platform's and `--jobs`'
    // room (`platform`, `capacity`), the inspector's nodes, which `--node-inspector` asked for.
    let nodes = Need::new(
        "list",
        "",
        "nodes",
        "which nodes to warm up and inspect, the platform, --jobs' room",
    )
    .cluster_wide();
    needs.push(if node_inspector {
        nodes
    } else {
        nodes.optional("the warm-up is skipped, --jobs falls back to the host's default, and the platform must be named with --platform")
    });
    needs.push(
        Need::new(
            "get",
            "",
            "nodes",
            "the warm-up tells a node that left from a stuck pull",
        )
        .cluster_wide()
        .optional("a node that leaves during the warm-up fails it"),
    );
    needs.push(
        Need::new(
            "list",
            "",
            "pods",
            "--jobs: the room the cluster's Pods leave",
        )
        .cluster_wide()
        .optional("--jobs falls back to the host's default"),
    );
    if !may_escalate {
        from_rules(
            executor.rules.clone().unwrap_or_default(),
            "granted to the executor: RBAC lets you grant only what you hold (or escalate and bind roles)",
            &mut needs,
        );
    }
    let mut seen = std::collections::BTreeSet::new();
    needs.retain(|n| seen.insert(n.describe()));
    needs
}

/// Whether the operator may `verb` what `need` names in `namespace`; Err with the API
/// server's refusal of the review itself.
async fn allowed(client: &Client, namespace: &str, need: &Need) -> Result<bool, kube::Error> {
    let (resource, subresource) = match need.resource.split_once('/') {
        Some((r, s)) => (r.to_owned(), Some(s.to_owned())),
        None => (need.resource.clone(), None),
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: need
                    .namespaced
                    .then(|| need.namespace.as_deref().unwrap_or(namespace).to_owned()),
                verb: Some(need.verb.clone()),
                group: Some(need.group.clone()),
                resource: Some(resource),
                subresource,
                name: need.name.clone(),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// Before the run creates anything: asks, as the operator, every [`operator_needs`] in
/// `namespace` (an image pull secret's read in its own), and refuses naming each one denied.
/// A cluster that answers no
/// SelfSubjectAccessReview leaves it unchecked, said so in the evidence (the run's own
/// requests then meet the API server's refusals).
pub async fn operator_preflight(
    client: &Client,
    namespace: &str,
    namespace_given: bool,
    node_inspector: bool,
    executor: &Role,
    pull_secrets: &[Planned],
) -> Result<Value, ClusterError> {
    const RBAC: &str = "rbac.authorization.k8s.io";
    let unchecked = |e: kube::Error| json!({"checked": false, "why": format!("SelfSubjectAccessReviews are not answered: {}", crate::error_chain(&e))});
    let mut escalate = true;
    // Creating a Role is judged unnamed; binding it, by the Role's name (the RBAC plugin's
    // escalation check asks `bind` on `roleRef.name`).
    for need in [
        Need::new("escalate", RBAC, "roles", ""),
        Need::new("bind", RBAC, "roles", "").named(EXECUTOR),
    ] {
        match allowed(client, namespace, &need).await {
            Ok(yes) => escalate &= yes,
            Err(e) if refused_review(&e) => return Ok(unchecked(e)),
            Err(e) => return Err(setup("SelfSubjectAccessReview of your identity")(e)),
        }
    }
    let needs = operator_needs(
        namespace,
        namespace_given,
        node_inspector,
        executor,
        escalate,
        pull_secrets,
    );
    let answers =
        futures_util::future::join_all(needs.iter().map(|n| allowed(client, namespace, n))).await;
    let mut missing = Vec::new();
    let mut without = Vec::new();
    for (need, answer) in needs.iter().zip(answers) {
        match answer {
            Ok(true) => {}
            Ok(false) if need.without.is_some() => without.push(format!(
                "{} ({}): {}",
                need.describe(),
                need.why,
                need.without.unwrap_or_default()
            )),
            Ok(false) => missing.push(format!("{} ({})", need.describe(), need.why)),
            Err(e) if refused_review(&e) => return Ok(unchecked(e)),
            Err(e) => return Err(setup("SelfSubjectAccessReview of your identity")(e)),
        }
    }
    if !missing.is_empty() {
        return Err(ClusterError::OperatorForbidden {
            identity: super::executor::who_am_i(client)
                .await
                .unwrap_or_else(|| "your identity".into()),
            namespace: namespace.to_owned(),
            missing,
        });
    }
    for line in &without {
        eprintln!("warning: your identity may not {line}");
    }
    Ok(json!({
        "checked": true,
        "allowed": needs.len() - without.len(),
        "without": without,
        "executor_rules": if escalate { "granted through escalate and bind on roles" } else { "each held by your identity" },
    }))
}

/// A refusal of the review itself (not served, or not granted), not of what it asked.
fn refused_review(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if (403..=405).contains(&s.code))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::kube::cluster::{executor_role, run_labels};
    use crate::pod::template::WorkspaceMode;

    fn needs(namespace: Option<&str>, inspector: bool, escalate: bool) -> Vec<String> {
        let role = executor_role("ns", WorkspaceMode::ManagedPvc, &run_labels("r"));
        let name = namespace.unwrap_or("kandev-acceptance-r");
        operator_needs(name, namespace.is_some(), inspector, &role, escalate, &[])
            .iter()
            .map(Need::describe)
            .collect()
    }

    #[test]
    fn node_reads_are_asked_and_needed_only_by_the_inspector() {
        let role = executor_role("ns", WorkspaceMode::EmptyDir, &run_labels("r"));
        let list_nodes = |inspector: bool| {
            operator_needs("ns", true, inspector, &role, true, &[])
                .into_iter()
                .find(|n| n.describe() == "list nodes (cluster-wide)")
        };
        let plain = list_nodes(false).map(|n| n.without.is_some());
        assert_eq!(plain, Some(true), "asked, the run going on without it");
        let inspected = list_nodes(true).map(|n| n.without.is_some());
        assert_eq!(
            inspected,
            Some(false),
            "--node-inspector refuses without it"
        );
        for asked in ["get nodes (cluster-wide)", "list pods (cluster-wide)"] {
            assert!(
                needs(Some("ns"), false, true).contains(&asked.to_owned()),
                "{asked}"
            );
        }
    }

    #[test]
    fn a_run_in_its_own_namespace_needs_to_make_and_remove_it() {
        let own = needs(None, false, true);
        for need in [
            "create namespaces (cluster-wide)",
            "delete namespaces kandev-acceptance-r",
            "create serviceaccounts/token kandev-acceptance-executor",
            "create roles.rbac.authorization.k8s.io",
            "delete pods",
            "create leases.coordination.k8s.io",
        ] {
            assert!(own.contains(&need.to_owned()), "{need} not in {own:?}");
        }
        assert!(
            !own.iter().any(|n| n.starts_with("delete roles")),
            "{own:?}"
        );
        assert!(!own.contains(&"create pods".to_owned()), "{own:?}");
    }

    #[test]
    fn a_named_namespace_is_read_and_the_executor_objects_removed_one_by_one() {
        let named = needs(Some("team-a"), true, true);
        for need in [
            "get namespaces team-a",
            "delete roles.rbac.authorization.k8s.io kandev-acceptance-executor",
            "get rolebindings.rbac.authorization.k8s.io kandev-acceptance-executor",
            "create pods",
            "create pods/exec",
        ] {
            assert!(named.contains(&need.to_owned()), "{need} not in {named:?}");
        }
        assert!(
            !named
                .iter()
                .any(|n| n.contains("namespaces (cluster-wide)") && n.starts_with("create"))
        );
    }

    #[test]
    fn a_pull_secret_is_read_where_it_is_and_its_copy_made_and_removed() {
        let role = executor_role("team-a", WorkspaceMode::EmptyDir, &run_labels("r"));
        let wanted = pull_secrets::wanted(
            &["ops/regcred".into(), "team-a/own".into()],
            &Default::default(),
            true,
        )
        .unwrap_or_default();
        let planned = pull_secrets::plan(&wanted, "default", "team-a", true, "r");
        let copy = pull_secrets::copy_name("regcred", "r");
        let named: Vec<String> = operator_needs("team-a", true, false, &role, true, &planned)
            .iter()
            .map(Need::describe)
            .collect();
        for need in [
            "get secrets regcred -n ops".to_owned(),
            "create secrets".to_owned(),
            format!("get secrets {copy}"),
            format!("delete secrets {copy}"),
            "get secrets own".to_owned(),
        ] {
            assert!(named.contains(&need), "{need} not in {named:?}");
        }
        assert!(
            !named.contains(&"delete secrets own".to_owned()),
            "{named:?}"
        );
        // In the run's own namespace the copy goes with it.
        let planned = pull_secrets::plan(&wanted, "default", "kandev-acceptance-r", false, "r");
        let own: Vec<String> =
            operator_needs("kandev-acceptance-r", false, false, &role, true, &planned)
                .iter()
                .map(Need::describe)
                .collect();
        assert!(
            !own.iter().any(|n| n.starts_with("delete secrets")),
            "{own:?}"
        );
    }

    #[test]
    fn without_escalate_the_executor_rules_are_needs_of_their_own() {
        let holding = needs(Some("team-a"), false, false);
        let escalating = needs(Some("team-a"), false, true);
        assert!(
            holding.contains(&"create pods/portforward".to_owned()),
            "{holding:?}"
        );
        assert!(!escalating.contains(&"create pods/portforward".to_owned()));
        let mut unique = holding.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), holding.len(), "each need once");
    }
}
