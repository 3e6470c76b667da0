//! Kandev's connection test (foundation 14) of the identity a backend's sessions run as, as
//! the backend answers it ([`ConnectionTest`], shaped as Kandev's `steps[]`), and the
//! arithmetic that says what a SelfSubjectRulesReview grants beyond what Kandev needs
//! ([`classify`]).

use k8s_openapi::api::authorization::v1::{ResourceRule, SubjectRulesReviewStatus};
use serde::Serialize;
use std::collections::BTreeSet;

/// How the sessions' client authenticates, as Kandev's `auth_mode` names it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AuthMode {
    /// Inside the cluster, the Pod's own service account (`rest.InClusterConfig`).
    InCluster,
    /// A kubeconfig's credentials (out of the cluster: a token of the executor account).
    #[default]
    Kubeconfig,
}

/// One step of the test, as Kandev's `steps[]` holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConnectionStep {
    pub key: String,
    pub success: bool,
    pub duration_ms: u64,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One SelfSubjectAccessReview and the API server's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AccessAnswer {
    pub verb: String,
    /// `resource[/subresource]` of the core group.
    pub resource: String,
    pub allowed: bool,
}

impl AccessAnswer {
    /// `verb resource`, as `kubectl auth can-i` takes it.
    pub fn permission(&self) -> String {
        format!("{} {}", self.verb, self.resource)
    }
}

/// What the sessions' identity is and may do, asked with the sessions' own client.
#[derive(Debug, Clone, Serialize)]
pub struct ConnectionTest {
    /// Every step succeeded (Kandev's `success`).
    pub success: bool,
    pub auth_mode: AuthMode,
    /// `/version`'s `gitVersion`, when it answered.
    pub server_version: Option<String>,
    pub namespace: String,
    /// Who the run set the sessions up to run as; None when only the API server can say (the
    /// Pod's own account, named by a SelfSubjectReview).
    pub executor: Option<String>,
    /// Who a SelfSubjectReview says the sessions' client is; None when the API server does
    /// not serve the review (before Kubernetes 1.28).
    pub identity: Option<String>,
    /// configuration, discovery, identity, rbac (SelfSubjectAccessReviews of every
    /// permission Kandev needs).
    pub steps: Vec<ConnectionStep>,
    /// The rbac step's answers: every permission Kandev needs.
    pub required: Vec<AccessAnswer>,
    /// SelfSubjectAccessReviews of what Kandev's executor must not need.
    pub not_needed: Vec<AccessAnswer>,
    /// The SelfSubjectRulesReview of the namespace, as the API server answered it.
    pub rules: Option<SubjectRulesReviewStatus>,
    /// Why there is no rules review (not served, refused), when there is none.
    pub rules_unavailable: Option<String>,
}

/// What every authenticated user holds (`system:basic-user`: asking about itself), and what
/// every service account holds from Kubernetes 1.37 (ClusterTrustBundle GA: bootstrap
/// policy's `system:cluster-trust-bundle-discovery`, bound to `system:serviceaccounts`;
/// `plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`; found by the first run on
/// real Kind, whose executor review listed them). Every such identity has these, so they say
/// nothing about the executor's Role. (Non-resource rules, discovery and `/version`, are
/// every user's too and never judged.)
pub const EVERY_USER: [(&str, &str, &str); 6] = [
    ("create", "authorization.k8s.io", "selfsubjectaccessreviews"),
    ("create", "authorization.k8s.io", "selfsubjectrulesreviews"),
    ("create", "authentication.k8s.io", "selfsubjectreviews"),
    ("get", "certificates.k8s.io", "clustertrustbundles"),
    ("list", "certificates.k8s.io", "clustertrustbundles"),
    ("watch", "certificates.k8s.io", "clustertrustbundles"),
];

/// What a rules review grants, one `verb resource[.group]` (with its `resourceNames`, where a
/// rule restricts them) each, split three ways.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Grants {
    /// Within what Kandev needs (restricted to some names: narrower still).
    pub within: Vec<String>,
    /// What every authenticated user holds ([`EVERY_USER`]).
    pub every_user: Vec<String>,
    /// Everything else: broader than Kandev's executor. A wildcard (`*` as, or in, a verb,
    /// group or resource) is always here, whatever it might be meant to cover; a grant
    /// restricted to some names is still a grant.
    pub beyond: Vec<String>,
}

/// Splits the grants of `rules` (a SelfSubjectRulesReview's `resourceRules`) by `required`
/// (`verb resource[/subresource]` of the core group, as `required_access` lists them).
pub fn classify(rules: &[ResourceRule], required: &[(&str, &str)]) -> Grants {
    let (mut within, mut every_user, mut beyond) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for rule in rules {
        let names = rule.resource_names.clone().unwrap_or_default();
        // A rule without groups or resources matches no request (RBAC's own matching).
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                for verb in &rule.verbs {
                    let shown = shown(verb, group, resource, &names);
                    let wildcard = [verb, group, resource].iter().any(|p| p.contains('*'));
                    if wildcard {
                        beyond.insert(shown);
                    } else if group.is_empty()
                        && required.iter().any(|(v, r)| v == verb && r == resource)
                    {
                        within.insert(shown);
                    } else if EVERY_USER
                        .iter()
                        .any(|(v, g, r)| v == verb && g == group && r == resource)
                    {
                        every_user.insert(shown);
                    } else {
                        beyond.insert(shown);
                    }
                }
            }
        }
    }
    Grants {
        within: within.into_iter().collect(),
        every_user: every_user.into_iter().collect(),
        beyond: beyond.into_iter().collect(),
    }
}

/// `verb resource[.group]`, as kubectl names them, and the names a rule restricts it to.
fn shown(verb: &str, group: &str, resource: &str, names: &[String]) -> String {
    let resource = if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    };
    if names.is_empty() {
        format!("{verb} {resource}")
    } else {
        format!("{verb} {resource} (resourceNames: {})", names.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str], names: &[&str]) -> ResourceRule {
        let owned = |items: &[&str]| items.iter().map(|i| (*i).to_owned()).collect::<Vec<_>>();
        ResourceRule {
            api_groups: Some(owned(groups)),
            resources: Some(owned(resources)),
            verbs: owned(verbs),
            resource_names: (!names.is_empty()).then(|| owned(names)),
        }
    }

    const REQUIRED: [(&str, &str); 4] = [
        ("get", "pods"),
        ("create", "pods"),
        ("create", "pods/exec"),
        ("get", "persistentvolumeclaims"),
    ];

    /// What a SelfSubjectRulesReview of Kandev's executor answers on a cluster: its Role's
    /// rules and `system:basic-user`'s.
    fn kandevs_and_every_users() -> Vec<ResourceRule> {
        vec![
            rule(&[""], &["pods"], &["get", "create"], &[]),
            rule(&[""], &["pods/exec"], &["create"], &[]),
            rule(&[""], &["persistentvolumeclaims"], &["get"], &[]),
            rule(
                &["authorization.k8s.io"],
                &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                &["create"],
                &[],
            ),
            rule(
                &["authentication.k8s.io"],
                &["selfsubjectreviews"],
                &["create"],
                &[],
            ),
        ]
    }

    #[test]
    fn kandevs_rules_and_every_users_grant_nothing_beyond() {
        let grants = classify(&kandevs_and_every_users(), &REQUIRED);
        assert_eq!(grants.beyond, Vec::<String>::new());
        assert_eq!(
            grants.within,
            [
                "create pods",
                "create pods/exec",
                "get persistentvolumeclaims",
                "get pods"
            ]
        );
        assert_eq!(
            grants.every_user,
            [
                "create selfsubjectaccessreviews.authorization.k8s.io",
                "create selfsubjectreviews.authentication.k8s.io",
                "create selfsubjectrulesreviews.authorization.k8s.io"
            ]
        );
    }

    #[test]
    fn a_permission_kandev_does_not_need_is_beyond() {
        let mut rules = kandevs_and_every_users();
        rules.push(rule(&[""], &["pods"], &["list"], &[]));
        // Every user's review, but of another group: not every user's.
        rules.push(rule(
            &["example.com"],
            &["selfsubjectreviews"],
            &["create"],
            &[],
        ));
        // Kandev's resource in another group is another resource.
        rules.push(rule(&["apps"], &["pods"], &["get"], &[]));
        assert_eq!(
            classify(&rules, &REQUIRED).beyond,
            [
                "create selfsubjectreviews.example.com",
                "get pods.apps",
                "list pods"
            ]
        );
    }

    #[test]
    fn every_wildcard_is_beyond_even_where_it_would_cover_only_what_is_needed() {
        for (groups, resources, verbs, expected) in [
            (&[""][..], &["pods"][..], &["*"][..], "* pods"),
            (&[""], &["*"], &["get"], "get *"),
            (&["*"], &["pods"], &["get"], "get pods.*"),
            (&[""], &["pods/*"], &["create"], "create pods/*"),
            (
                &["*"],
                &["selfsubjectreviews"],
                &["create"],
                "create selfsubjectreviews.*",
            ),
        ] {
            let grants = classify(&[rule(groups, resources, verbs, &[])], &REQUIRED);
            assert_eq!(grants.beyond, [expected]);
            assert!(grants.within.is_empty() && grants.every_user.is_empty());
        }
    }

    #[test]
    fn a_rule_restricted_to_names_is_granted_but_narrow() {
        let rules = [
            rule(&[""], &["pods"], &["get"], &["kandev-0123"]),
            rule(&[""], &["secrets"], &["get"], &["token", "ca"]),
        ];
        let grants = classify(&rules, &REQUIRED);
        // Within what Kandev needs, only narrower.
        assert_eq!(grants.within, ["get pods (resourceNames: kandev-0123)"]);
        // Beyond it, a grant all the same.
        assert_eq!(grants.beyond, ["get secrets (resourceNames: token, ca)"]);
    }

    #[test]
    fn a_rule_without_groups_or_resources_grants_nothing() {
        let mut no_groups = rule(&[""], &["secrets"], &["get"], &[]);
        no_groups.api_groups = None;
        let mut no_resources = rule(&[""], &["secrets"], &["get"], &[]);
        no_resources.resources = Some(Vec::new());
        assert_eq!(
            classify(&[no_groups, no_resources], &REQUIRED),
            Grants::default()
        );
    }

    #[test]
    fn the_test_serializes_as_kandev_names_its_fields() {
        let test = ConnectionTest {
            success: true,
            auth_mode: AuthMode::InCluster,
            server_version: Some("v1.36.0".into()),
            namespace: "ns".into(),
            executor: None,
            identity: Some("system:serviceaccount:ns:e".into()),
            steps: vec![ConnectionStep {
                key: "discovery".into(),
                success: true,
                duration_ms: 3,
                detail: "v1.36.0".into(),
                error: None,
            }],
            required: Vec::new(),
            not_needed: Vec::new(),
            rules: Some(SubjectRulesReviewStatus {
                incomplete: true,
                ..Default::default()
            }),
            rules_unavailable: None,
        };
        let value = serde_json::to_value(&test).unwrap_or_default();
        assert_eq!(value["auth_mode"], "in_cluster");
        assert_eq!(value["steps"][0]["key"], "discovery");
        assert!(value["steps"][0].get("error").is_none());
        assert_eq!(value["rules"]["incomplete"], true);
    }
}
