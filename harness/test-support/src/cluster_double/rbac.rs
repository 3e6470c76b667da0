//! Who may do what: RBAC from the Roles bound to a service account, the reviews that ask
//! it (SelfSubjectAccessReview, SelfSubjectReview), and TokenRequests.

use super::request::Ctx;
use super::status::{Reply, json_reply, not_found};
use super::store::{Identity, Store};
use hyper::StatusCode;
use serde_json::{Value, json};

/// Whether `identity` may `verb` the `resource` (`pods`, `pods/exec`) of `group` in `namespace`.
pub(crate) fn allowed(
    store: &Store,
    identity: &Identity,
    verb: &str,
    group: &str,
    resource: &str,
    namespace: Option<&str>,
) -> bool {
    let Identity::ServiceAccount {
        namespace: sa_ns,
        name: sa_name,
    } = identity
    else {
        return true;
    };
    // No ClusterRoles here: a service account gets only what namespaced Roles grant.
    let Some(ns) = namespace else {
        return false;
    };
    let contains = |list: Option<&Value>, wanted: &str| {
        list.and_then(Value::as_array).is_some_and(|items| {
            items
                .iter()
                .any(|i| i.as_str() == Some(wanted) || i.as_str() == Some("*"))
        })
    };
    store
        .objects
        .iter()
        .filter(|((r, n, _), _)| r == "rbac.authorization.k8s.io/rolebindings" && n == ns)
        .filter(|(_, binding)| {
            binding["subjects"].as_array().is_some_and(|subjects| {
                subjects.iter().any(|s| {
                    s["kind"] == "ServiceAccount"
                        && s["name"].as_str() == Some(sa_name)
                        && s["namespace"].as_str().unwrap_or(ns) == sa_ns
                })
            })
        })
        .filter(|(_, binding)| binding["roleRef"]["kind"] == "Role")
        .filter_map(|(_, binding)| {
            let role = binding["roleRef"]["name"].as_str()?;
            store.objects.get(&(
                "rbac.authorization.k8s.io/roles".to_owned(),
                ns.to_owned(),
                role.to_owned(),
            ))
        })
        .flat_map(|role| role["rules"].as_array().cloned().unwrap_or_default())
        .any(|rule| {
            contains(rule.get("apiGroups"), group)
                && contains(rule.get("resources"), resource)
                && contains(rule.get("verbs"), verb)
        })
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
            attrs["verb"].as_str().unwrap_or(""),
            attrs["group"].as_str().unwrap_or(""),
            &resource,
            attrs["namespace"].as_str().filter(|n| !n.is_empty()),
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

    pub(crate) fn token(&self, name: &str, body: Value) -> Reply {
        let ns = self.route.namespace.clone().unwrap_or_default();
        let mut store = self.state.store();
        if !store
            .objects
            .contains_key(&("/serviceaccounts".into(), ns.clone(), name.into()))
        {
            return not_found(self.route, name);
        }
        let token = format!("double-sa-{}", uuid::Uuid::new_v4().simple());
        store.tokens.insert(
            token.clone(),
            Identity::ServiceAccount {
                namespace: ns.clone(),
                name: name.into(),
            },
        );
        json_reply(
            StatusCode::CREATED,
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "metadata": {"name": name, "namespace": ns, "creationTimestamp": null},
                "spec": body.get("spec").cloned().unwrap_or(json!({})),
                "status": {"token": token, "expirationTimestamp": "2099-01-01T00:00:00Z"}}),
        )
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
        json_reply(
            StatusCode::CREATED,
            &json!({"apiVersion": self.api_version, "kind": self.kind,
                "metadata": {"creationTimestamp": null},
                "status": {"userInfo": {"username": self.identity.user_name(), "groups": groups}}}),
        )
    }
}
