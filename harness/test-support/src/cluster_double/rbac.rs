//! Who may do what: RBAC from the Roles bound to a service account (their `resourceNames`
//! honoured) and the default ClusterRoleBindings every authenticated user has, the reviews
//! that ask it (SelfSubjectAccessReview, SelfSubjectRulesReview, SelfSubjectReview), and
//! TokenRequests. A Role's rules are stored as sent: their validation is the real API
//! server's (the corpus lists it), and `executor_role_file` refuses what it refuses.

use super::request::Ctx;
use super::status::{Reply, json_reply, not_found};
use super::store::{Identity, Store, timestamp};
use hyper::StatusCode;
use serde_json::{Value, json};

/// What every authenticated user may do with resources through the default
/// ClusterRoleBindings: `system:basic-user`'s rules (asking about itself).
fn basic_user_rules() -> Vec<Value> {
    vec![
        json!({"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
            "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]}),
        json!({"verbs": ["create"], "apiGroups": ["authentication.k8s.io"],
            "resources": ["selfsubjectreviews"]}),
    ]
}

/// What every service account holds besides: `system:cluster-trust-bundle-discovery`, bound
/// to `system:serviceaccounts` while ClusterTrustBundle is enabled, as in v1.37 (kubernetes
/// `plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`; found by the corpus).
fn service_account_rules() -> Vec<Value> {
    vec![
        json!({"verbs": ["get", "list", "watch"], "apiGroups": ["certificates.k8s.io"],
        "resources": ["clustertrustbundles"]}),
    ]
}

/// The non-resource paths every authenticated user may get: `system:discovery`'s and
/// `system:public-info-viewer`'s rules (in the order of their bindings' names).
fn discovery_rules() -> Vec<Value> {
    vec![
        json!({"verbs": ["get"], "nonResourceURLs":
            ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*",
             "/readyz", "/version", "/version/"]}),
        json!({"verbs": ["get"], "nonResourceURLs":
            ["/healthz", "/livez", "/readyz", "/version", "/version/"]}),
    ]
}

/// The rules of every Role bound in `namespace` to the service account `sa_ns`/`sa_name`
/// (no ClusterRoles here: a service account gets only what namespaced Roles grant).
fn bound_rules(store: &Store, sa_ns: &str, sa_name: &str, namespace: &str) -> Vec<Value> {
    store
        .objects
        .iter()
        .filter(|((r, n, _), _)| r == "rbac.authorization.k8s.io/rolebindings" && n == namespace)
        .filter(|(_, binding)| {
            binding["subjects"].as_array().is_some_and(|subjects| {
                subjects.iter().any(|s| {
                    s["kind"] == "ServiceAccount"
                        && s["name"].as_str() == Some(sa_name)
                        && s["namespace"].as_str().unwrap_or(namespace) == sa_ns
                })
            })
        })
        .filter(|(_, binding)| binding["roleRef"]["kind"] == "Role")
        .filter_map(|(_, binding)| {
            let role = binding["roleRef"]["name"].as_str()?;
            store.objects.get(&(
                "rbac.authorization.k8s.io/roles".to_owned(),
                namespace.to_owned(),
                role.to_owned(),
            ))
        })
        .flat_map(|role| role["rules"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// What a request asks RBAC: `verb` on `resource` (`pods`, `pods/exec`) of `group`, in
/// `namespace` (None: cluster-scoped), of the object `name` when it names one.
pub(crate) struct Attributes<'a> {
    pub verb: &'a str,
    pub group: &'a str,
    pub resource: &'a str,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
}

/// Whether `rule` grants the request, as RBAC's `RuleAllows` matches one: its verbs, API
/// groups and resources (each `*` or listed), and its `resourceNames` when it has any (then
/// only a request naming one of them: a create of a new object names none).
pub(crate) fn rule_allows(rule: &Value, asked: &Attributes) -> bool {
    let contains = |list: &Value, wanted: &str| {
        list.as_array().is_some_and(|items| {
            items
                .iter()
                .any(|i| i.as_str() == Some(wanted) || i.as_str() == Some("*"))
        })
    };
    let names = rule["resourceNames"].as_array().filter(|n| !n.is_empty());
    contains(&rule["apiGroups"], asked.group)
        && contains(&rule["resources"], asked.resource)
        && contains(&rule["verbs"], asked.verb)
        && names.is_none_or(|names| {
            asked
                .name
                .is_some_and(|name| names.iter().any(|n| n.as_str() == Some(name)))
        })
}

/// Whether `identity` may do what `asked` says.
pub(crate) fn allowed(store: &Store, identity: &Identity, asked: &Attributes) -> bool {
    let Identity::ServiceAccount {
        namespace: sa_ns,
        name: sa_name,
    } = identity
    else {
        return true;
    };
    let defaults = basic_user_rules()
        .into_iter()
        .chain(service_account_rules());
    if defaults.into_iter().any(|r| rule_allows(&r, asked)) {
        return true;
    }
    let Some(ns) = asked.namespace else {
        return false;
    };
    bound_rules(store, sa_ns, sa_name, ns)
        .iter()
        .any(|rule| rule_allows(rule, asked))
}

impl Ctx<'_> {
    pub(crate) fn access_review(&self, mut body: Value) -> Reply {
        let attrs = body["spec"]["resourceAttributes"].clone();
        let resource = match attrs["subresource"].as_str().filter(|s| !s.is_empty()) {
            Some(sub) => format!("{}/{sub}", attrs["resource"].as_str().unwrap_or("")),
            None => attrs["resource"].as_str().unwrap_or("").to_owned(),
        };
        let ok = allowed(
            &self.state.store(),
            self.identity,
            &Attributes {
                verb: attrs["verb"].as_str().unwrap_or(""),
                group: attrs["group"].as_str().unwrap_or(""),
                resource: &resource,
                namespace: attrs["namespace"].as_str().filter(|n| !n.is_empty()),
                name: attrs["name"].as_str().filter(|n| !n.is_empty()),
            },
        );
        body["apiVersion"] = json!(self.api_version);
        body["kind"] = json!(self.kind);
        body["status"] = if ok {
            json!({"allowed": true, "reason": "a Role bound to the caller grants it"})
        } else {
            json!({"allowed": false})
        };
        json_reply(StatusCode::CREATED, &body)
    }

    /// A TokenRequest: a token for the ServiceAccount. Its `boundObjectRef` (launch binds the
    /// bookkeeper's to its inputs Secret) is not kept: no test deletes that Secret and then
    /// uses the token, so the double's TokenRequest tokens end only with their lifetime (the
    /// kubelet's Pod-bound tokens do end with their Pod: `mounts`).
    pub(crate) fn token(&self, name: &str, body: Value) -> Reply {
        let ns = self.route.namespace.clone().unwrap_or_default();
        let mut store = self.state.store();
        if !store
            .objects
            .contains_key(&("/serviceaccounts".into(), ns.clone(), name.into()))
        {
            return not_found(self.route, name);
        }
        // Not validated (under 10 minutes, over 2^32 s: `ValidateTokenRequest`): the real API
        // server's to refuse (`real_api_server/jobs.rs`); the harness asks 10 minutes or more.
        let asked = body["spec"]["expirationSeconds"].as_i64().unwrap_or(3600);
        let token = store.issue_token(&ns, name, None);
        drop(store);
        // The lifetime asked (the API server's default is an hour: `SetDefaults_TokenRequestSpec`),
        // as granted (`Faults::grant`): what the answer's spec and `expirationTimestamp` say.
        let mut spec = body.get("spec").cloned().unwrap_or(json!({}));
        let granted = self.state.faults().grant(&token, asked.unsigned_abs());
        spec["expirationSeconds"] = json!(granted);
        let expires = k8s_openapi::jiff::Timestamp::now()
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(granted as i64))
            .map(timestamp)
            .unwrap_or_default();
        json_reply(
            StatusCode::CREATED,
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "metadata": {"name": name, "namespace": ns, "creationTimestamp": null},
                "spec": spec,
                "status": {"token": token, "expirationTimestamp": expires}}),
        )
    }

    /// A SelfSubjectRulesReview: what the caller may do in `spec.namespace`, as RBAC's rule
    /// resolver lists it (the default ClusterRoleBindings' rules first, then the rules of the
    /// Roles bound to it there), complete.
    pub(crate) fn rules_review(&self, mut body: Value) -> Reply {
        let ns = body["spec"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let (mut resource_rules, mut non_resource_rules) = (basic_user_rules(), discovery_rules());
        match self.identity {
            Identity::Admin => {
                // The admin's `cluster-admin` binding.
                resource_rules.insert(
                    0,
                    json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}),
                );
                non_resource_rules.insert(0, json!({"verbs": ["*"], "nonResourceURLs": ["*"]}));
            }
            Identity::ServiceAccount { namespace, name } => {
                // `system:service-account-issuer-discovery`, bound to every service account.
                non_resource_rules.push(json!({"verbs": ["get"], "nonResourceURLs": [
                    "/.well-known/openid-configuration", "/.well-known/openid-configuration/",
                    "/openid/v1/jwks", "/openid/v1/jwks/"]}));
                resource_rules.extend(service_account_rules());
                let store = self.state.store();
                resource_rules.extend(bound_rules(&store, namespace, name, &ns).into_iter().map(
                    |rule| {
                        // As `PolicyRule` serializes: empty lists left out.
                        let mut shown = serde_json::Map::new();
                        for field in ["verbs", "apiGroups", "resources", "resourceNames"] {
                            if rule[field].as_array().is_some_and(|l| !l.is_empty()) {
                                shown.insert(field.into(), rule[field].clone());
                            }
                        }
                        Value::Object(shown)
                    },
                ));
            }
        }
        body["apiVersion"] = json!(self.api_version);
        body["kind"] = json!(self.kind);
        body["metadata"] = json!({"creationTimestamp": null});
        body["status"] = json!({"resourceRules": resource_rules,
            "nonResourceRules": non_resource_rules, "incomplete": false});
        json_reply(StatusCode::CREATED, &body)
    }

    pub(crate) fn self_review(&self) -> Reply {
        let groups: Vec<String> = match self.identity {
            Identity::Admin => vec!["system:masters".into(), "system:authenticated".into()],
            Identity::ServiceAccount { namespace, .. } => vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        };
        let mut user = json!({"username": self.identity.user_name(), "groups": groups});
        if let Identity::ServiceAccount { namespace, name } = self.identity
            && let Some(account) = self.state.store().objects.get(&(
                "/serviceaccounts".into(),
                namespace.clone(),
                name.clone(),
            ))
        {
            user["uid"] = account["metadata"]["uid"].clone();
        }
        json_reply(
            StatusCode::CREATED,
            &json!({"apiVersion": self.api_version, "kind": self.kind,
                "metadata": {"creationTimestamp": null}, "status": {"userInfo": user}}),
        )
    }
}
