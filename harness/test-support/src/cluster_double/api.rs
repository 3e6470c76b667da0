//! The double's REST API: routing, authentication, RBAC, the stored objects.

use super::{DoubleState, Identity, Key, Refusal, Running, Store, streams};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use kandev_harness::backend::Backend;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

pub(crate) type Reply = Response<Full<Bytes>>;

/// A parsed API path.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub group: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

impl Route {
    fn key(&self) -> String {
        format!("{}/{}", self.group, self.resource)
    }
    fn resource_with_sub(&self) -> String {
        match &self.sub {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.clone(),
        }
    }
}

/// (apiVersion, kind, namespaced) of the resources the double serves.
fn kind_of(group: &str, resource: &str) -> Option<(&'static str, &'static str, bool)> {
    Some(match (group, resource) {
        ("", "namespaces") => ("v1", "Namespace", false),
        ("", "pods") => ("v1", "Pod", true),
        ("", "persistentvolumeclaims") => ("v1", "PersistentVolumeClaim", true),
        ("", "serviceaccounts") => ("v1", "ServiceAccount", true),
        ("", "services") => ("v1", "Service", true),
        ("", "events") => ("v1", "Event", true),
        ("events.k8s.io", "events") => ("events.k8s.io/v1", "Event", true),
        ("rbac.authorization.k8s.io", "roles") => ("rbac.authorization.k8s.io/v1", "Role", true),
        ("rbac.authorization.k8s.io", "rolebindings") => {
            ("rbac.authorization.k8s.io/v1", "RoleBinding", true)
        }
        ("authorization.k8s.io", "selfsubjectaccessreviews") => {
            ("authorization.k8s.io/v1", "SelfSubjectAccessReview", false)
        }
        _ => return None,
    })
}

pub(crate) fn status(code: StatusCode, reason: &str, message: &str, details: Value) -> Reply {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason,
        "details": details, "code": code.as_u16(),
    });
    json_reply(code, &body)
}

pub(crate) fn json_reply(code: StatusCode, body: &Value) -> Reply {
    let mut reply = Response::new(Full::new(Bytes::from(body.to_string())));
    *reply.status_mut() = code;
    reply.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    reply
}

fn not_found(route: &Route, name: &str) -> Reply {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("{} \"{name}\" not found", route.resource),
        json!({"name": name, "kind": route.resource}),
    )
}

/// `a=b&c=d` decoded (`%XX`, `+`).
pub(crate) fn query_pairs(query: Option<&str>) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let bytes = s.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                    match u8::from_str_radix(hex, 16) {
                        Ok(b) => {
                            out.push(b);
                            i += 2;
                        }
                        Err(_) => out.push(b'%'),
                    }
                }
                b => out.push(b),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

fn param<'a>(query: &'a [(String, String)], name: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn parse_route(path: &str) -> Option<Route> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match segments.as_slice() {
        ["api", "v1", rest @ ..] => (String::new(), rest),
        ["apis", group, _version, rest @ ..] => ((*group).to_owned(), rest),
        _ => return None,
    };
    let owned = |s: Option<&&str>| s.map(|s| (*s).to_owned());
    Some(match rest {
        ["namespaces", ns, resource, more @ ..] => Route {
            group,
            resource: (*resource).to_owned(),
            namespace: Some((*ns).to_owned()),
            name: owned(more.first()),
            sub: owned(more.get(1)),
        },
        [resource, more @ ..] => Route {
            group,
            resource: (*resource).to_owned(),
            namespace: None,
            name: owned(more.first()),
            sub: owned(more.get(1)),
        },
        [] => return None,
    })
}

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

fn now() -> String {
    // RFC 3339 from the system clock (seconds are enough for the double).
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = secs / 86_400;
    let (h, m, s) = ((secs / 3600) % 24, (secs / 60) % 60, secs % 60);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{d:02}T{h:02}:{m:02}:{s:02}Z")
}

/// Stores a namespace and its `default` service account (what the controller would create).
pub(crate) fn create_namespace_objects(store: &mut Store, name: &str) {
    let rv = store.next_version();
    store.objects.insert(
        ("/namespaces".into(), String::new(), name.into()),
        json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": uuid::Uuid::new_v4().to_string(),
                "resourceVersion": rv, "creationTimestamp": now()},
            "status": {"phase": "Active"}}),
    );
    add_default_account(store, name);
}

fn add_default_account(store: &mut Store, ns: &str) {
    let rv = store.next_version();
    store.objects.insert(
        ("/serviceaccounts".into(), ns.into(), "default".into()),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": ns,
                "uid": uuid::Uuid::new_v4().to_string(), "resourceVersion": rv,
                "creationTimestamp": now()}}),
    );
}

/// `k=v,k!=v,k` (the equality-based selector forms).
fn matches_selector(labels: &Value, selector: &str) -> bool {
    selector
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .all(|term| {
            if let Some((k, v)) = term.split_once("!=") {
                labels[k.trim()].as_str() != Some(v.trim())
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                labels[k.trim()].as_str() == Some(v.trim())
            } else if let Some(k) = term.strip_prefix('!') {
                labels.get(k.trim()).is_none()
            } else {
                labels.get(term).is_some()
            }
        })
}

pub(crate) async fn handle(state: Arc<DoubleState>, req: Request<Incoming>) -> Reply {
    let token = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::to_owned);
    let identity = token.and_then(|t| state.store().tokens.get(&t).cloned());
    let Some(identity) = identity else {
        return status(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "Unauthorized",
            json!({}),
        );
    };
    let path = req.uri().path().to_owned();
    if path == "/version" {
        return json_reply(
            StatusCode::OK,
            &json!({"major": "1", "minor": "36", "gitVersion": "v1.36.0-kube-double",
                "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z", "goVersion": "none (a test double)",
                "compiler": "rustc", "platform": "linux/amd64"}),
        );
    }
    let query = query_pairs(req.uri().query());
    let Some(route) = parse_route(&path) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("the server could not find the requested resource ({path})"),
            json!({}),
        );
    };
    let Some((api_version, kind, namespaced)) = kind_of(&route.group, &route.resource) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("the server could not find the requested resource ({path})"),
            json!({}),
        );
    };
    let upgrade = req
        .headers()
        .get(hyper::header::UPGRADE)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
    let verb = match (req.method().clone(), &route.name, &route.sub) {
        (Method::GET, _, Some(sub)) if upgrade && (sub == "exec" || sub == "portforward") => {
            // A websocket upgrade is a GET; the API server also asks for `create` since 1.30.
            "create"
        }
        (Method::GET, Some(_), _) => "get",
        (Method::GET, None, _) if param(&query, "watch") == Some("true") => "watch",
        (Method::GET, None, _) => "list",
        (Method::POST, _, _) => "create",
        (Method::DELETE, _, _) => "delete",
        (Method::PUT, _, _) => "update",
        (Method::PATCH, _, _) => "patch",
        _ => {
            return status(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "method not allowed",
                json!({}),
            );
        }
    };
    if route.resource != "selfsubjectaccessreviews" {
        let mut store = state.store();
        let resource = route.resource_with_sub();
        let ns = route
            .namespace
            .clone()
            .or_else(|| (route.resource == "namespaces").then(|| route.name.clone())?);
        if !allowed(
            &store,
            &identity,
            verb,
            &route.group,
            &resource,
            ns.as_deref(),
        ) {
            store.refusals.push(Refusal {
                user: identity.user_name(),
                verb: verb.into(),
                resource: resource.clone(),
                namespace: ns.clone(),
            });
            let scope = match &ns {
                Some(ns) => format!(" in the namespace \"{ns}\""),
                None => " at the cluster scope".into(),
            };
            return status(
                StatusCode::FORBIDDEN,
                "Forbidden",
                &format!(
                    "{resource} is forbidden: User \"{}\" cannot {verb} resource \"{resource}\" in API group \"{}\"{scope}",
                    identity.user_name(),
                    route.group
                ),
                // A real API server leaves `name` out when the request has none (a create):
                // `"name": null` is no Status a client can parse.
                match &route.name {
                    Some(name) => json!({"kind": route.resource, "name": name}),
                    None => json!({"kind": route.resource}),
                },
            );
        }
    }
    if namespaced != route.namespace.is_some() && route.resource != "namespaces" {
        // A namespaced resource listed across namespaces is fine; anything else is not served.
        if !(namespaced && route.name.is_none() && verb == "list") {
            return status(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("the server could not find the requested resource ({path})"),
                json!({}),
            );
        }
    }
    if upgrade {
        return match route.sub.as_deref() {
            Some("exec") => streams::exec(state, req, route, query).await,
            Some("portforward") => streams::portforward(state, req, route, query).await,
            _ => status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "upgrade only for exec and portforward",
                json!({}),
            ),
        };
    }
    let method = req.method().clone();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &e.to_string(),
                json!({}),
            );
        }
    };
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    &format!("the body is not JSON: {e}"),
                    json!({}),
                );
            }
        }
    };
    let ctx = Ctx {
        state: &state,
        identity: &identity,
        route: &route,
        query: &query,
        api_version,
        kind,
    };
    match (method, route.name.as_deref(), route.sub.as_deref()) {
        (Method::POST, None, None) if route.resource == "selfsubjectaccessreviews" => {
            ctx.access_review(body)
        }
        (Method::POST, None, None) => ctx.create(body).await,
        (Method::POST, Some(name), Some("token")) if route.resource == "serviceaccounts" => {
            ctx.token(name, body)
        }
        (Method::GET, None, None) => ctx.list().await,
        (Method::GET, Some(name), None) => ctx.get(name).await,
        (Method::GET, Some(name), Some("log")) if route.resource == "pods" => ctx.log(name).await,
        (Method::DELETE, Some(name), None) => ctx.delete(name, body),
        _ => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            &format!(
                "the double does not serve {verb} on {}",
                route.resource_with_sub()
            ),
            json!({}),
        ),
    }
}

struct Ctx<'a> {
    state: &'a Arc<DoubleState>,
    identity: &'a Identity,
    route: &'a Route,
    query: &'a [(String, String)],
    api_version: &'static str,
    kind: &'static str,
}

impl Ctx<'_> {
    fn key(&self, name: &str) -> Key {
        (
            self.route.key(),
            self.route.namespace.clone().unwrap_or_default(),
            name.to_owned(),
        )
    }

    /// Removes a volume provisioned for a claim that was then refused.
    fn discard(&self, volume: Option<kandev_harness::backend::WorkspaceRef>) {
        if let (Some(runtime), Some(volume)) = (self.state.runtime.clone(), volume) {
            tokio::spawn(async move {
                let _ = runtime.delete_workspace(&volume).await;
            });
        }
    }

    fn access_review(&self, mut body: Value) -> Reply {
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

    fn token(&self, name: &str, body: Value) -> Reply {
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

    async fn create(&self, mut object: Value) -> Reply {
        if !object.is_object() {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "the body is not an object",
                json!({}),
            );
        }
        let dry_run = param(self.query, "dryRun") == Some("All");
        let name = match object["metadata"]["name"].as_str() {
            Some(n) if !n.is_empty() => n.to_owned(),
            _ => match object["metadata"]["generateName"].as_str() {
                Some(prefix) => format!(
                    "{prefix}{}",
                    &uuid::Uuid::new_v4().simple().to_string()[..5]
                ),
                None => {
                    return status(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "Invalid",
                        &format!("{} is invalid: metadata.name: Required value", self.kind),
                        json!({"kind": self.route.resource}),
                    );
                }
            },
        };
        let ns = self.route.namespace.clone();
        if self.route.resource == "pods" {
            let mutator = self.state.mutator.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(mutate) = mutator.as_ref() {
                mutate(&mut object);
            }
        }
        // What the runtime is asked to run: the Pod as admitted, before defaulting.
        let for_runtime = object.clone();
        // A claim is a volume on the runtime (provisioned at once, reported Bound).
        let mut volume = None;
        if self.route.resource == "persistentvolumeclaims"
            && !dry_run
            && let Some(runtime) = self.state.runtime.clone()
        {
            let map = |field: &str| -> std::collections::BTreeMap<String, String> {
                serde_json::from_value(object["metadata"][field].clone()).unwrap_or_default()
            };
            let exists = self.state.store().objects.contains_key(&self.key(&name));
            if !exists {
                match runtime
                    .create_workspace(&name, &map("labels"), &map("annotations"))
                    .await
                {
                    Ok(created) => volume = Some(created),
                    Err(e) => {
                        return status(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "InternalError",
                            &format!("provisioning claim {name}: {e}"),
                            json!({}),
                        );
                    }
                }
            }
        }
        let key = self.key(&name);
        let reply = {
            let mut store = self.state.store();
            if let Some(ns) = &ns
                && !store
                    .objects
                    .contains_key(&("/namespaces".into(), String::new(), ns.clone()))
            {
                self.discard(volume.take());
                return status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("namespaces \"{ns}\" not found"),
                    json!({"name": ns, "kind": "namespaces"}),
                );
            }
            if store.objects.contains_key(&key) {
                self.discard(volume.take());
                return status(
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    &format!("{} \"{name}\" already exists", self.route.resource),
                    json!({"name": name, "kind": self.route.resource}),
                );
            }
            if self.route.resource == "pods" {
                let account = object["spec"]["serviceAccountName"]
                    .as_str()
                    .unwrap_or("default")
                    .to_owned();
                let ns = ns.clone().unwrap_or_default();
                if !store.objects.contains_key(&(
                    "/serviceaccounts".into(),
                    ns.clone(),
                    account.clone(),
                )) {
                    return status(
                        StatusCode::FORBIDDEN,
                        "Forbidden",
                        &format!(
                            "pods \"{name}\" is forbidden: error looking up service account {ns}/{account}: serviceaccount \"{account}\" not found"
                        ),
                        json!({"name": name, "kind": "pods"}),
                    );
                }
                object["spec"]["serviceAccountName"] = json!(account);
                super::defaults::default_pod(&mut object);
            }
            if self.route.resource == "persistentvolumeclaims" {
                object["status"] = json!({"phase": "Bound"});
            }
            if self.route.resource == "namespaces" {
                object["status"] = json!({"phase": "Active"});
            }
            let uid = uuid::Uuid::new_v4().to_string();
            object["apiVersion"] = json!(self.api_version);
            object["kind"] = json!(self.kind);
            object["metadata"]["name"] = json!(name);
            if let Some(ns) = &ns {
                object["metadata"]["namespace"] = json!(ns);
            }
            object["metadata"]["uid"] = json!(uid);
            object["metadata"]["creationTimestamp"] = json!(now());
            if dry_run {
                return json_reply(StatusCode::CREATED, &object);
            }
            object["metadata"]["resourceVersion"] = json!(store.next_version());
            store.objects.insert(key, object.clone());
            if self.route.resource == "namespaces" {
                add_default_account(&mut store, &name);
            }
            if self.route.resource == "pods" && self.state.runtime.is_some() {
                store.running.insert(uid.clone(), Running::Creating);
            }
            if let Some(volume) = volume {
                store.volumes.insert(uid.clone(), volume);
            }
            json_reply(StatusCode::CREATED, &object)
        };
        if self.route.resource == "pods"
            && let Some(runtime) = self.state.runtime.clone()
        {
            let uid = object["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            // The runtime's Pod carries the double's UID (its cgroup is `pod<uid>`, as a
            // kubelet names it); scheduling is the double's business, not the runtime's.
            let mut for_runtime = for_runtime;
            for_runtime["metadata"]["uid"] = json!(uid);
            if let Some(spec) = for_runtime["spec"].as_object_mut() {
                spec.remove("nodeName");
            }
            let state = self.state.clone();
            tokio::spawn(run_pod(state, runtime, uid, for_runtime));
        }
        reply
    }

    async fn get(&self, name: &str) -> Reply {
        let found = self.state.store().objects.get(&self.key(name)).cloned();
        match found {
            Some(object) => json_reply(StatusCode::OK, &with_status(self.state, object).await),
            None => not_found(self.route, name),
        }
    }

    async fn list(&self) -> Reply {
        let selector = param(self.query, "labelSelector").unwrap_or("");
        let (items, rv): (Vec<Value>, u64) = {
            let store = self.state.store();
            let items = store
                .objects
                .iter()
                .filter(|((r, ns, _), _)| {
                    *r == self.route.key()
                        && self.route.namespace.as_ref().is_none_or(|want| want == ns)
                })
                .filter(|(_, o)| matches_selector(&o["metadata"]["labels"], selector))
                .map(|(_, o)| o.clone())
                .collect();
            (items, store.resource_version)
        };
        let mut shown = Vec::with_capacity(items.len());
        for item in items {
            shown.push(with_status(self.state, item).await);
        }
        json_reply(
            StatusCode::OK,
            &json!({"apiVersion": self.api_version, "kind": format!("{}List", self.kind),
                "metadata": {"resourceVersion": rv.to_string()}, "items": shown}),
        )
    }

    async fn log(&self, name: &str) -> Reply {
        let found = self.state.store().objects.get(&self.key(name)).cloned();
        let Some(pod) = found else {
            return not_found(self.route, name);
        };
        let container = param(self.query, "container")
            .map(str::to_owned)
            .or_else(|| {
                pod["spec"]["containers"][0]["name"]
                    .as_str()
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        let text = match (self.state.runtime.clone(), self.state.runtime_pod(uid)) {
            (Some(runtime), Some(pod)) => match runtime.logs(&pod, &container).await {
                Ok(text) => text,
                Err(e) => {
                    return status(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        &format!("container \"{container}\": {e}"),
                        json!({}),
                    );
                }
            },
            _ => String::new(),
        };
        let mut reply = Response::new(Full::new(Bytes::from(text)));
        reply.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("text/plain"),
        );
        reply
    }

    fn delete(&self, name: &str, options: Value) -> Reply {
        let key = self.key(name);
        let mut store = self.state.store();
        let Some(object) = store.objects.get(&key).cloned() else {
            return not_found(self.route, name);
        };
        let uid = object["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let rv = object["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let want_uid = options["preconditions"]["uid"].as_str().map(str::to_owned);
        let want_rv = options["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_owned);
        let conflict = |field: &str, wanted: &str, actual: &str| {
            status(
                StatusCode::CONFLICT,
                "Conflict",
                &format!(
                    "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: {field} in precondition: {wanted}, {field} in object meta: {actual}",
                    self.route.resource
                ),
                json!({"name": name, "kind": self.route.resource}),
            )
        };
        if let Some(want) = &want_uid
            && *want != uid
        {
            return conflict("UID", want, &uid);
        }
        if let Some(want) = &want_rv
            && *want != rv
        {
            return conflict("ResourceVersion", want, &rv);
        }
        store.deletions.push(super::Deletion {
            resource: self.route.resource.clone(),
            namespace: key.1.clone(),
            name: name.into(),
            uid: uid.clone(),
            precondition_uid: want_uid,
            precondition_resource_version: want_rv,
        });
        let mut shown = object.clone();
        shown["metadata"]["deletionTimestamp"] = json!(now());
        match self.route.resource.as_str() {
            "pods" if self.state.runtime.is_some() => {
                // Terminating until the runtime removed its containers.
                shown["metadata"]["resourceVersion"] = json!(store.next_version());
                store.objects.insert(key.clone(), shown.clone());
                drop(store);
                tokio::spawn(remove_pod(self.state.clone(), key, uid));
            }
            "namespaces" => {
                shown["status"]["phase"] = json!("Terminating");
                shown["metadata"]["resourceVersion"] = json!(store.next_version());
                store.objects.insert(key.clone(), shown.clone());
                drop(store);
                tokio::spawn(remove_namespace(self.state.clone(), name.to_owned()));
            }
            "persistentvolumeclaims" => {
                store.objects.remove(&key);
                let volume = store.volumes.remove(&uid);
                drop(store);
                if let (Some(runtime), Some(volume)) = (self.state.runtime.clone(), volume) {
                    // In use by a Pod still terminating: retried until it is free.
                    tokio::spawn(async move {
                        for _ in 0..120 {
                            if runtime.delete_workspace(&volume).await.is_ok() {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    });
                }
            }
            _ => {
                store.objects.remove(&key);
            }
        }
        json_reply(StatusCode::OK, &shown)
    }
}

/// Why the double's scheduler cannot bind `pod` to its one node, in a v1.36 scheduler's
/// words: a `nodeSelector` the node's labels do not satisfy, or a claim the Pod mounts that
/// does not exist in its namespace. None: it schedules.
pub(crate) fn unschedulable(store: &super::Store, pod: &Value) -> Option<String> {
    const PREEMPTION: &str =
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.";
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    for volume in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        if let Some(claim) = volume["persistentVolumeClaim"]["claimName"].as_str()
            && !store.objects.contains_key(&(
                "/persistentvolumeclaims".into(),
                namespace.to_owned(),
                claim.to_owned(),
            ))
        {
            return Some(format!(
                "0/1 nodes are available: persistentvolumeclaim \"{claim}\" not found. {PREEMPTION}"
            ));
        }
    }
    let node = super::node_labels();
    let selector = pod["spec"]["nodeSelector"].as_object();
    if selector
        .into_iter()
        .flatten()
        .any(|(k, v)| node.get(k).map(String::as_str) != v.as_str())
    {
        return Some(format!(
            "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector. {PREEMPTION}"
        ));
    }
    None
}

/// Creates the Pod on the runtime; a Pod deleted meanwhile is removed there again. A Pod the
/// scheduler cannot place never reaches the runtime; an image the node cannot pull is the
/// kubelet's `ErrImagePull`, not a runtime failure.
async fn run_pod(state: Arc<DoubleState>, runtime: Arc<dyn Backend>, uid: String, pod: Value) {
    let refused = {
        let store = state.store();
        let stored = store
            .objects
            .values()
            .find(|o| o["kind"] == "Pod" && o["metadata"]["uid"].as_str() == Some(&uid))
            .cloned()
            .unwrap_or_else(|| pod.clone());
        unschedulable(&store, &stored)
    };
    if let Some(message) = refused {
        state
            .store()
            .running
            .insert(uid, Running::Unschedulable(message));
        return;
    }
    let created = match serde_json::from_value::<Pod>(pod.clone()) {
        Ok(parsed) => match runtime.create_pod(&parsed).await {
            Err(kandev_harness::backend::BackendError::ImageMissing { image }) => {
                let container = ["initContainers", "containers"]
                    .iter()
                    .flat_map(|f| pod["spec"][*f].as_array().cloned().unwrap_or_default())
                    .find(|c| c["image"].as_str() == Some(image.as_str()))
                    .and_then(|c| c["name"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                state
                    .store()
                    .running
                    .insert(uid, Running::PullFailed { container, image });
                return;
            }
            other => other.map_err(|e| e.to_string()),
        },
        Err(e) => Err(format!("the Pod does not parse: {e}")),
    };
    let mut store = state.store();
    match created {
        Ok(pod) => {
            // Scheduled (after the create, as a scheduler binds it) onto the one node.
            let rv = store.next_version();
            if let Some(object) = store
                .objects
                .values_mut()
                .find(|o| o["kind"] == "Pod" && o["metadata"]["uid"].as_str() == Some(&uid))
                && object["spec"]["nodeName"]
                    .as_str()
                    .is_none_or(str::is_empty)
            {
                object["spec"]["nodeName"] = json!(super::NODE);
                object["metadata"]["resourceVersion"] = json!(rv);
            }
            store.running.insert(uid, Running::Ready(pod));
        }
        Err(e) => {
            store.running.insert(uid, Running::Failed(e));
        }
    }
}

/// Removes a deleted Pod's containers (waiting for a create still under way), then the object.
async fn remove_pod(state: Arc<DoubleState>, key: Key, uid: String) {
    let runtime = state.runtime.clone();
    for _ in 0..600 {
        let running = state.store().running.get(&uid).cloned();
        match running {
            Some(Running::Creating) => tokio::time::sleep(Duration::from_millis(200)).await,
            Some(Running::Ready(pod)) => {
                if let Some(runtime) = &runtime
                    && let Err(e) = runtime.delete_pod(&pod).await
                {
                    eprintln!("kube double: removing pod {} failed: {e}", pod.name);
                }
                break;
            }
            _ => break,
        }
    }
    let mut store = state.store();
    store.running.remove(&uid);
    if store
        .objects
        .get(&key)
        .and_then(|o| o["metadata"]["uid"].as_str())
        == Some(uid.as_str())
    {
        store.objects.remove(&key);
    }
}

/// Removes everything in the namespace (Pods through the runtime), then the namespace.
async fn remove_namespace(state: Arc<DoubleState>, name: String) {
    let mut volumes: Vec<kandev_harness::backend::WorkspaceRef> = Vec::new();
    let pods: Vec<(Key, String)> = {
        let mut store = state.store();
        let pods: Vec<(Key, String)> = store
            .objects
            .iter()
            .filter(|((r, ns, _), _)| r == "/pods" && *ns == name)
            .map(|(k, o)| {
                (
                    k.clone(),
                    o["metadata"]["uid"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        // The claims' volumes are taken before their objects go, and removed after the Pods.
        let claims: Vec<String> = store
            .objects
            .iter()
            .filter(|((r, ns, _), _)| r == "/persistentvolumeclaims" && *ns == name)
            .filter_map(|(_, o)| o["metadata"]["uid"].as_str().map(str::to_owned))
            .collect();
        let taken: Vec<kandev_harness::backend::WorkspaceRef> = claims
            .iter()
            .filter_map(|uid| store.volumes.remove(uid))
            .collect();
        volumes.extend(taken);
        store
            .objects
            .retain(|(r, ns, _), _| *ns != name || r == "/pods");
        pods
    };
    for (key, uid) in pods {
        remove_pod(state.clone(), key, uid).await;
    }
    if let Some(runtime) = state.runtime.clone() {
        for volume in volumes {
            // In use until the runtime has removed its Pod's containers: retried until free.
            for _ in 0..120 {
                if runtime.delete_workspace(&volume).await.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    let mut store = state.store();
    store.objects.retain(|(_, ns, _), _| *ns != name);
    store
        .objects
        .remove(&("/namespaces".into(), String::new(), name));
}

/// A Pod with its status from the runtime (phase, container states, IP).
async fn with_status(state: &Arc<DoubleState>, mut object: Value) -> Value {
    if object["kind"] != "Pod" {
        return object;
    }
    let Some(runtime) = state.runtime.clone() else {
        return object;
    };
    let uid = object["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let running = state.store().running.get(&uid).cloned();
    let names = |field: &str| -> Vec<(String, String)> {
        object["spec"][field]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .map(|c| {
                        (
                            c["name"].as_str().unwrap_or_default().to_owned(),
                            c["image"].as_str().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (init, main) = (names("initContainers"), names("containers"));
    let waiting =
        |reason: &str, message: &str| json!({"waiting": {"reason": reason, "message": message}});
    let states: Vec<kandev_harness::backend::ContainerState> = match &running {
        Some(Running::Ready(pod)) => runtime.container_states(pod).await.unwrap_or_default(),
        _ => Vec::new(),
    };
    if let Some(Running::Unschedulable(message)) = &running {
        // Never bound: no container statuses, the scheduler's condition only.
        object["status"] = json!({
            "phase": "Pending",
            "qosClass": super::defaults::qos_class(&object["spec"]),
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": message, "lastProbeTime": null, "lastTransitionTime": now()}],
        });
        return object;
    }
    let status_of = |(name, image): &(String, String)| {
        let found = states.iter().find(|s| &s.name == name);
        let state = match (&running, found) {
            (
                Some(Running::PullFailed {
                    container,
                    image: missing,
                }),
                _,
            ) if container == name => {
                // containerd's answer for a reference no registry resolves, as the kubelet
                // relays it.
                waiting(
                    "ErrImagePull",
                    &format!(
                        "failed to pull and unpack image \"{missing}\": failed to resolve reference \"{missing}\": {missing}: not found"
                    ),
                )
            }
            (Some(Running::PullFailed { .. }), _) => waiting("ContainerCreating", ""),
            (Some(Running::Failed(e)), _) => waiting("CreateContainerError", e),
            (_, Some(s)) if s.running => json!({"running": {"startedAt": now()}}),
            (_, Some(s)) if s.exit_code.is_some() => json!({"terminated": {
                "exitCode": s.exit_code.unwrap_or_default(),
                "reason": if s.exit_code == Some(0) { "Completed" } else { "Error" }}}),
            _ => waiting("ContainerCreating", ""),
        };
        json!({"name": name, "image": image, "imageID": "", "ready": found.is_some_and(|s| s.running),
            "restartCount": found.map(|s| s.restarts).unwrap_or(0), "started": found.is_some_and(|s| s.running),
            "state": state})
    };
    let main_statuses: Vec<Value> = main.iter().map(status_of).collect();
    let init_statuses: Vec<Value> = init.iter().map(status_of).collect();
    let all_running = !main_statuses.is_empty()
        && main_statuses
            .iter()
            .all(|s| s["state"].get("running").is_some());
    let phase = match &running {
        Some(Running::Failed(_) | Running::PullFailed { .. }) => "Pending",
        _ if all_running => "Running",
        _ => "Pending",
    };
    let ip = match &running {
        Some(Running::Ready(pod)) => runtime.pod_ip(pod).await.ok().flatten(),
        _ => None,
    };
    object["status"] = json!({
        "phase": phase,
        "qosClass": super::defaults::qos_class(&object["spec"]),
        "containerStatuses": main_statuses,
        "initContainerStatuses": init_statuses,
        "conditions": [{"type": "Ready", "status": if all_running { "True" } else { "False" }}],
    });
    if let Some(ip) = ip {
        object["status"]["podIP"] = json!(ip);
        object["status"]["podIPs"] = json!([{"ip": ip}]);
    }
    object
}

#[cfg(test)]
mod tests {
    use super::unschedulable;
    use serde_json::json;

    #[test]
    fn the_scheduler_refuses_an_unmatched_selector_and_a_missing_claim() {
        let mut store = super::super::Store::default();
        let arch = kandev_harness::pod::compose::Arch::of_this_machine().as_str();
        let fits = json!({"metadata": {"namespace": "ns"},
            "spec": {"nodeSelector": {"kubernetes.io/os": "linux", "kubernetes.io/arch": arch}}});
        assert_eq!(unschedulable(&store, &fits), None);
        let never = json!({"metadata": {"namespace": "ns"},
            "spec": {"nodeSelector": {"kandev.ai/e2e-never": "true"}}});
        assert!(
            unschedulable(&store, &never)
                .unwrap()
                .contains("didn't match Pod's node affinity/selector")
        );
        let claim = json!({"metadata": {"namespace": "ns"}, "spec": {"volumes": [
            {"name": "kandev-workspace", "persistentVolumeClaim": {"claimName": "gone"}}]}});
        assert!(
            unschedulable(&store, &claim)
                .unwrap()
                .contains("persistentvolumeclaim \"gone\" not found")
        );
        store.objects.insert(
            ("/persistentvolumeclaims".into(), "ns".into(), "gone".into()),
            json!({}),
        );
        assert_eq!(unschedulable(&store, &claim), None);
    }
}
