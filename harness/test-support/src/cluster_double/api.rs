//! The double's REST API: routing, authentication, RBAC, the stored objects.

use super::{DoubleState, Identity, Key, Refusal, Running, Store, discovery, streams};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Pod;
use kandev_harness::backend::Backend;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// Every answer's body: whole (`Full`) or streamed (a watch).
pub(crate) type Body = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;
pub(crate) type Reply = Response<Body>;

/// A whole body.
pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// A parsed API path.
#[derive(Debug, Clone)]
pub(crate) struct Route {
    pub group: String,
    pub version: String,
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

pub(crate) fn status(code: StatusCode, reason: &str, message: &str, details: Value) -> Reply {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason,
        "details": details, "code": code.as_u16(),
    });
    json_reply(code, &body)
}

pub(crate) fn json_reply(code: StatusCode, body: &Value) -> Reply {
    let mut reply = Response::new(full(body.to_string()));
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
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => (String::new(), (*version).to_owned(), rest),
        ["apis", group, version, rest @ ..] => ((*group).to_owned(), (*version).to_owned(), rest),
        _ => return None,
    };
    let owned = |s: Option<&&str>| s.map(|s| (*s).to_owned());
    Some(match rest {
        ["namespaces", ns, resource, more @ ..] => Route {
            group,
            version,
            resource: (*resource).to_owned(),
            namespace: Some((*ns).to_owned()),
            name: owned(more.first()),
            sub: owned(more.get(1)),
        },
        [resource, more @ ..] => Route {
            group,
            version,
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

pub(crate) fn now() -> String {
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
    store.put(
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
    store.put(
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

/// `type/subtype` of a media type, without its parameters.
fn media_type(value: &str) -> &str {
    value.split(';').next().unwrap_or("").trim()
}

/// Whether the client accepts the one representation the double answers with: JSON, as
/// the object itself (no `as=Table`/`as=PartialObjectMetadata` conversion). As the API
/// server's negotiation does it (apiserver `endpoints/handlers/negotiation/negotiate.go`,
/// `NegotiateOutputMediaType`): the `Accept` clauses are tried in order, a clause asking for a
/// conversion (`as`, `g`, `v`) the endpoint does not do is skipped, no `Accept` means JSON,
/// and nothing acceptable is 406 `NotAcceptable` (`negotiation/errors.go`,
/// `errNotAcceptable`). A real API server also serves YAML and protobuf; the double serves
/// JSON only, so a client asking only for protobuf (`application/vnd.kubernetes.protobuf`) is
/// refused rather than answered in a format it did not ask for.
fn negotiate(headers: &hyper::HeaderMap) -> Result<(), Box<Reply>> {
    let accept: Vec<&str> = headers
        .get_all(hyper::header::ACCEPT)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(','))
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    if accept.is_empty() {
        return Ok(());
    }
    let acceptable = accept.iter().any(|clause| {
        let mut parts = clause.split(';').map(str::trim);
        let kind = parts.next().unwrap_or("").to_ascii_lowercase();
        let params: Vec<(String, String)> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let refused_by_q = params
            .iter()
            .any(|(k, v)| k == "q" && v.parse::<f32>().is_ok_and(|q| q <= 0.0));
        let converted = params
            .iter()
            .any(|(k, _)| k == "as" || k == "g" || k == "v");
        matches!(kind.as_str(), "application/json" | "application/*" | "*/*")
            && !refused_by_q
            && !converted
    });
    if acceptable {
        Ok(())
    } else {
        Err(Box::new(status(
            StatusCode::NOT_ACCEPTABLE,
            "NotAcceptable",
            "only the following media types are accepted: application/json",
            json!({}),
        )))
    }
}

/// The request body as JSON, read as its `Content-Type` says, as the API server decodes
/// it (apiserver `negotiation.NegotiateInputSerializer`): a create or update in JSON or
/// YAML, a patch as `application/json-patch+json`, `application/merge-patch+json` or
/// `application/strategic-merge-patch+json`, and a create in protobuf (what kubectl's typed
/// commands send) for the kinds [`super::protobuf`] decodes. What the double does not decode
/// (protobuf of other kinds, server-side apply's `application/apply-patch+yaml`, CBOR) is 415
/// `UnsupportedMediaType` (`negotiation/errors.go`, `errUnsupportedMediaType`), never
/// misread. A body without a `Content-Type` is read as JSON.
fn decode_body(
    method: &Method,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Value, Box<Reply>> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    let accepted: &[&str] = if method == Method::PATCH {
        &[
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
        ]
    } else {
        &[
            "application/json",
            "application/yaml",
            "application/vnd.kubernetes.protobuf",
        ]
    };
    let kind = content_type
        .map(media_type)
        .unwrap_or("application/json")
        .to_ascii_lowercase();
    if kind == "application/vnd.kubernetes.protobuf" && method != Method::PATCH {
        return super::protobuf::decode(body).map_err(|e| {
            Box::new(match e {
                super::protobuf::Error::Kind(api_version, kind) => status(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    &format!(
                        "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (the double decodes protobuf only for {}; not {api_version} {kind})",
                        super::protobuf::DECODED
                    ),
                    json!({}),
                ),
                super::protobuf::Error::Malformed(e) => status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    &format!("the protobuf body does not decode: {e}"),
                    json!({}),
                ),
            })
        });
    }
    if !accepted.contains(&kind.as_str()) {
        return Err(Box::new(status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                accepted.join(", ")
            ),
            json!({}),
        )));
    }
    let decoded = if kind == "application/yaml" {
        serde_yaml::from_slice::<Value>(body).map_err(|e| e.to_string())
    } else {
        serde_json::from_slice::<Value>(body).map_err(|e| e.to_string())
    };
    decoded.map_err(|e| {
        Box::new(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("the body of the request ({kind}) does not decode: {e}"),
            json!({}),
        ))
    })
}

/// The patch formats the double applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Patch {
    /// RFC 6902.
    Json,
    /// RFC 7386.
    Merge,
    /// Kubernetes' strategic merge patch.
    StrategicMerge,
}

pub(crate) async fn handle(state: Arc<DoubleState>, req: Request<Incoming>) -> Reply {
    let path = req.uri().path().to_owned();
    {
        let header = |name| {
            req.headers()
                .get(name)
                .and_then(|h| h.to_str().ok())
                .map(str::to_owned)
        };
        let seen = super::Seen {
            method: req.method().to_string(),
            uri: req.uri().to_string(),
            content_type: header(hyper::header::CONTENT_TYPE),
            accept: header(hyper::header::ACCEPT),
            watch: param(&query_pairs(req.uri().query()), "watch")
                .is_some_and(|w| w != "0" && !w.eq_ignore_ascii_case("false")),
        };
        state.store().seen.push(seen);
    }
    if path.trim_end_matches('/') == "/version"
        && req.method() == Method::GET
        && !req.headers().contains_key(hyper::header::AUTHORIZATION)
    {
        // Readable without credentials, as `system:anonymous` (the `system:public-info-viewer`
        // ClusterRole); a request with a token the server does not know is still 401, as
        // authentication comes first. The Python client asks for `/version/` (a go-restful
        // route, "/" under "/version").
        return json_reply(StatusCode::OK, &discovery::version());
    }
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
    // Negotiated by the handler of a path that exists (an unknown path is 404 whatever the
    // client accepts), after authentication, as the API server does; pods/log is text, exec
    // and port-forward are websockets.
    let json_answer = !(req.method() == Method::GET
        && (path.ends_with("/log") || req.headers().contains_key(hyper::header::UPGRADE)));
    if req.method() == Method::GET
        && let Some(document) = discovery::document(&path)
    {
        if let Err(refused) = negotiate(req.headers()) {
            return *refused;
        }
        // Any authenticated caller reads discovery (the `system:discovery` ClusterRole).
        return json_reply(StatusCode::OK, &document);
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
    let served = discovery::find(&route.group, &route.version, &route.resource).filter(|_| {
        route.sub.as_ref().is_none_or(|sub| {
            discovery::find(
                &route.group,
                &route.version,
                &format!("{}/{sub}", route.resource),
            )
            .is_some()
        })
    });
    let Some(resource) = served else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("the server could not find the requested resource ({path})"),
            json!({}),
        );
    };
    if json_answer && let Err(refused) = negotiate(req.headers()) {
        return *refused;
    }
    let (api_version, kind, namespaced) =
        (resource.api_version(), resource.kind, resource.namespaced);
    // `watch=1`, `watch=true`, `watch=True`: the API server reads a bool query parameter as
    // true unless it is `0` or `false` in any case (apimachinery `runtime/conversion.go`,
    // `Convert_Slice_string_To_bool`).
    let watching =
        param(&query, "watch").is_some_and(|w| w != "0" && !w.eq_ignore_ascii_case("false"));
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
        (Method::GET, _, None) if watching => "watch",
        (Method::GET, Some(_), _) => "get",
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
    if !matches!(
        route.resource.as_str(),
        "selfsubjectaccessreviews" | "selfsubjectreviews"
    ) {
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
        if !(namespaced && route.name.is_none() && (verb == "list" || verb == "watch")) {
            return status(
                StatusCode::NOT_FOUND,
                "NotFound",
                &format!("the server could not find the requested resource ({path})"),
                json!({}),
            );
        }
    }
    let spdy_upgrade = req
        .headers()
        .get(hyper::header::UPGRADE)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|u| u.eq_ignore_ascii_case("SPDY/3.1"));
    if spdy_upgrade && route.resource == "pods" && route.sub.as_deref() == Some("portforward") {
        // kubectl's fallback when the tunnelled websocket is refused (or turned off).
        return streams::portforward_spdy(state, req, route).await;
    }
    if !upgrade
        && route.resource == "pods"
        && matches!(
            route.sub.as_deref(),
            Some("exec" | "portforward" | "attach")
        )
    {
        // SPDY exec and attach (`Upgrade: SPDY/3.1`, what kubectl falls back to when a
        // websocket is refused) are not served: said in kubectl's own error ("error
        // upgrading connection: ...").
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!(
                "the kube double serves pods/{} over websockets only ({}), not over SPDY",
                route.sub.as_deref().unwrap_or_default(),
                if route.sub.as_deref() == Some("portforward") {
                    "v4.channel.k8s.io and SPDY/3.1+portforward.k8s.io, or an upgrade to SPDY/3.1"
                } else {
                    "v5.channel.k8s.io, v4.channel.k8s.io"
                }
            ),
            json!({}),
        );
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
    let content_type = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned);
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
    let body = match decode_body(&method, content_type.as_deref(), &body) {
        Ok(body) => body,
        Err(refused) => return *refused,
    };
    let ctx = Ctx {
        state: &state,
        identity: &identity,
        route: &route,
        query: &query,
        api_version: &api_version,
        kind,
    };
    match (method, route.name.as_deref(), route.sub.as_deref()) {
        (Method::POST, None, None) if route.resource == "selfsubjectreviews" => ctx.self_review(),
        (Method::GET, name, None) if watching => ctx.watch(name),
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
        (Method::PUT, Some(name), None) => ctx.update(name, body).await,
        (Method::PATCH, Some(name), None) => {
            let patch = match content_type.as_deref().map(media_type).unwrap_or_default() {
                "application/json-patch+json" => Patch::Json,
                "application/merge-patch+json" => Patch::Merge,
                _ => Patch::StrategicMerge,
            };
            ctx.patch(name, patch, body).await
        }
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
    api_version: &'a str,
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
        // A claim is a volume on the runtime (provisioned at once, then bound: below).
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
                // As an API server admits a claim: `PrepareForCreate` clears the status
                // (pkg/registry/core/persistentvolumeclaim/strategy.go), and decoding
                // defaults `status.phase` to `Pending` and `spec.volumeMode` to `Filesystem`
                // (`SetDefaults_PersistentVolumeClaim`, `SetDefaults_PersistentVolumeClaimSpec`
                // in pkg/apis/core/v1/defaults.go). Binding is the PV controller's later
                // update (below, when a volume was provisioned); with no storage class and
                // no volume the claim stays `Pending`, as on a cluster without a provisioner.
                if object["spec"]["volumeMode"].is_null()
                    && let Some(spec) = object["spec"].as_object_mut()
                {
                    spec.insert("volumeMode".into(), json!("Filesystem"));
                }
                object["status"] = json!({"phase": "Pending"});
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
            store.put(key.clone(), object.clone());
            if self.route.resource == "namespaces" {
                add_default_account(&mut store, &name);
            }
            if self.route.resource == "pods" && self.state.runtime.is_some() {
                store.running.insert(uid.clone(), Running::Creating);
            }
            let reply = json_reply(StatusCode::CREATED, &object);
            if let Some(volume) = volume {
                store.volumes.insert(uid.clone(), volume);
                // Provisioned at once: bound as the PV controller binds a claim (a later
                // update, its own resourceVersion), to a volume named as provisioners name
                // theirs (`pvc-<uid>`), the status carrying the volume's modes and capacity.
                let mut bound = object.clone();
                bound["spec"]["volumeName"] = json!(format!("pvc-{uid}"));
                bound["status"] = json!({
                    "phase": "Bound",
                    "accessModes": object["spec"]["accessModes"],
                    "capacity": {"storage": object["spec"]["resources"]["requests"]["storage"]},
                });
                bound["metadata"]["resourceVersion"] = json!(store.next_version());
                store.put(key, bound);
            }
            reply
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

    /// The `fieldSelector` of the request, checked: only the fields an API server
    /// selects on for every object (`metadata.name`, `metadata.namespace`) and, for Pods,
    /// `spec.nodeName` and `spec.serviceAccountName`; any other field is 400, as the API
    /// server answers "field label not supported".
    fn field_selector(&self) -> Result<Vec<(String, bool, String)>, Box<Reply>> {
        let mut terms = Vec::new();
        for term in param(self.query, "fieldSelector")
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (f, true, v)
            } else {
                return Err(Box::new(status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    &format!("invalid selector: '{term}'; can't understand '{term}'"),
                    json!({}),
                )));
            };
            let field = field.trim();
            let supported = matches!(field, "metadata.name" | "metadata.namespace")
                || (self.route.resource == "pods"
                    && matches!(field, "spec.nodeName" | "spec.serviceAccountName"));
            if !supported {
                return Err(Box::new(status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    &format!("field label not supported: {field}"),
                    json!({}),
                )));
            }
            terms.push((field.to_owned(), equal, value.trim().to_owned()));
        }
        Ok(terms)
    }

    /// Whether this list or watch selects the object (the route's resource and namespace,
    /// `labelSelector`, `fieldSelector`, and `name` for a watch of one object).
    fn matches(
        &self,
        (r, ns, n): &Key,
        object: &Value,
        fields: &[(String, bool, String)],
        name: Option<&str>,
    ) -> bool {
        let labels = param(self.query, "labelSelector").unwrap_or("");
        *r == self.route.key()
            && self.route.namespace.as_ref().is_none_or(|want| want == ns)
            && name.is_none_or(|want| want == n)
            && matches_selector(&object["metadata"]["labels"], labels)
            && fields.iter().all(|(field, equal, value)| {
                let pointer = format!("/{}", field.replace('.', "/"));
                let actual = object
                    .pointer(&pointer)
                    .and_then(Value::as_str)
                    .unwrap_or("");
                (actual == value) == *equal
            })
    }

    /// The stored objects this list or watch selects.
    fn selected(
        &self,
        store: &Store,
        fields: &[(String, bool, String)],
        name: Option<&str>,
    ) -> Vec<(Key, Value)> {
        store
            .objects
            .iter()
            .filter(|(k, o)| self.matches(k, o, fields, name))
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect()
    }

    async fn list(&self) -> Reply {
        let fields = match self.field_selector() {
            Ok(fields) => fields,
            Err(refused) => return *refused,
        };
        let (items, rv): (Vec<Value>, u64) = {
            let store = self.state.store();
            let items = self
                .selected(&store, &fields, None)
                .into_iter()
                .map(|(_, o)| o)
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

    /// A watch: a stream of `{"type": ..., "object": ...}` lines, one per change, as the API
    /// server streams a JSON watch (apiserver `endpoints/handlers/watch.go`;
    /// <https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes>).
    /// Without `resourceVersion` (or with `0`) it starts with an `ADDED` for every object
    /// selected now; from a `resourceVersion` (a list's), with every change after it (410
    /// Gone when the double no longer holds them, [`super::KEPT_CHANGES`]). Then `ADDED`,
    /// `MODIFIED` and `DELETED` in the order the store changed, each object as it was then
    /// (an object that stops matching a selector is `DELETED`, one that starts is
    /// `ADDED`), until `timeoutSeconds` (the API server's default is 30 to 60 minutes; the
    /// double's is 30) or the client goes. `sendInitialEvents=true` (a watch-list) ends the
    /// initial events with a `BOOKMARK` annotated `k8s.io/initial-events-end`.
    ///
    /// A Pod's status is read from the runtime when the event is sent: its changes (a
    /// container started or ended) are no events of their own, as they would be from a
    /// kubelet's status updates.
    fn watch(&self, name: Option<&str>) -> Reply {
        let fields = match self.field_selector() {
            Ok(fields) => fields,
            Err(refused) => return *refused,
        };
        let since = match param(self.query, "resourceVersion").filter(|v| !v.is_empty()) {
            None | Some("0") => None,
            Some(v) => match v.parse::<u64>() {
                Ok(v) => Some(v),
                Err(_) => {
                    return status(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        &format!("invalid resource version: {v:?}"),
                        json!({}),
                    );
                }
            },
        };
        let timeout = param(self.query, "timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .filter(|t| *t > 0)
            .unwrap_or(1800);
        let initial_end = param(self.query, "sendInitialEvents") == Some("true");
        // The first events, and where in the store's changes the watch goes on from.
        let (first, mut seen_rv) = {
            let store = self.state.store();
            match since {
                None => {
                    let added: Vec<(&str, Value)> = self
                        .selected(&store, &fields, name)
                        .into_iter()
                        .map(|(_, o)| ("ADDED", o))
                        .collect();
                    (added, store.resource_version)
                }
                Some(since) => {
                    let oldest = store.changes.front().map(|c| c.resource_version);
                    if store.changes.len() >= super::KEPT_CHANGES
                        && oldest.is_some_and(|oldest| oldest > since + 1)
                    {
                        return status(
                            StatusCode::GONE,
                            "Expired",
                            &format!(
                                "too old resource version: {since} ({})",
                                oldest.unwrap_or_default()
                            ),
                            json!({}),
                        );
                    }
                    (Vec::new(), since)
                }
            }
        };
        let (state, route, query) = (self.state.clone(), self.route.clone(), self.query.to_vec());
        let (api_version, kind, identity) = (
            self.api_version.to_owned(),
            self.kind,
            self.identity.clone(),
        );
        let name = name.map(str::to_owned);
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
        tokio::spawn(async move {
            let ctx = Ctx {
                state: &state,
                identity: &identity,
                route: &route,
                query: &query,
                api_version: &api_version,
                kind,
            };
            let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
            let send = |event: &str, object: Value| {
                let tx = tx.clone();
                let state = state.clone();
                let event = event.to_owned();
                async move {
                    let object = with_status(&state, object).await;
                    let line = format!("{}\n", json!({"type": event, "object": object}));
                    tx.send(Bytes::from(line)).await.is_ok()
                }
            };
            for (event, object) in first {
                if !send(event, object).await {
                    return;
                }
            }
            if initial_end {
                let bookmark = json!({"apiVersion": api_version, "kind": kind,
                    "metadata": {"resourceVersion": seen_rv.to_string(),
                        "annotations": {"k8s.io/initial-events-end": "true"}}});
                if !send("BOOKMARK", bookmark).await {
                    return;
                }
            }
            loop {
                let events: Vec<(&str, Value)> = {
                    let store = state.store();
                    let matches = |key: &Key, object: &Option<Value>| {
                        object
                            .as_ref()
                            .is_some_and(|o| ctx.matches(key, o, &fields, name.as_deref()))
                    };
                    let events = store
                        .changes
                        .iter()
                        .filter(|c| c.resource_version > seen_rv)
                        .filter_map(|c| {
                            let (was, is) = (matches(&c.key, &c.before), matches(&c.key, &c.after));
                            let uid = |o: &Option<Value>| {
                                o.as_ref().map(|o| o["metadata"]["uid"].clone())
                            };
                            match (was, is, c.after.clone()) {
                                (true, true, Some(after)) if uid(&c.before) == uid(&c.after) => {
                                    Some(("MODIFIED", after))
                                }
                                (_, true, Some(after)) => Some(("ADDED", after)),
                                (true, _, after) => {
                                    // Gone (or no longer selected): the object as it was,
                                    // at the deletion's resourceVersion.
                                    let mut last = after.or(c.before.clone())?;
                                    last["metadata"]["resourceVersion"] =
                                        json!(c.resource_version.to_string());
                                    Some(("DELETED", last))
                                }
                                _ => None,
                            }
                        })
                        .collect();
                    seen_rv = store.resource_version;
                    events
                };
                for (event, object) in events {
                    if !send(event, object).await {
                        return;
                    }
                }
                if tokio::time::Instant::now() >= deadline {
                    return;
                }
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(25)) => {}
                    () = tx.closed() => return,
                }
            }
        });
        let frames = futures_util::stream::unfold(rx, |mut rx| async move {
            let bytes = rx.recv().await?;
            Some((
                Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(bytes)),
                rx,
            ))
        });
        let mut reply = Response::new(http_body_util::StreamBody::new(frames).boxed());
        reply.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        reply
    }

    fn self_review(&self) -> Reply {
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

    /// A PUT: the whole object replaced (its `resourceVersion`, when given, must be the
    /// stored one: 409 otherwise, as the API server's optimistic concurrency answers).
    async fn update(&self, name: &str, object: Value) -> Reply {
        if object["metadata"]["name"].as_str() != Some(name) {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    object["metadata"]["name"].as_str().unwrap_or_default()
                ),
                json!({}),
            );
        }
        let Some(existing) = self.state.store().objects.get(&self.key(name)).cloned() else {
            return not_found(self.route, name);
        };
        self.commit(name, existing, object).await
    }

    /// A PATCH applied to the stored object, then stored as an update.
    async fn patch(&self, name: &str, kind: Patch, patch: Value) -> Reply {
        let Some(existing) = self.state.store().objects.get(&self.key(name)).cloned() else {
            return not_found(self.route, name);
        };
        let mut object = existing.clone();
        let applied = match kind {
            Patch::Json => super::patch::json_patch(&mut object, &patch),
            Patch::Merge => {
                super::patch::merge(&mut object, &patch);
                Ok(())
            }
            Patch::StrategicMerge => super::patch::strategic(&mut object, &patch),
        };
        if let Err(e) = applied {
            return status(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                &format!(
                    "the patch does not apply to {} \"{name}\": {e}",
                    self.route.resource
                ),
                json!({"name": name, "kind": self.route.resource}),
            );
        }
        if patch["metadata"].get("resourceVersion").is_none() {
            // No precondition in the patch: it applies to the stored version.
            object["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"].clone();
        }
        self.commit(name, existing, object).await
    }

    /// Stores `object` in place of `existing` (an update or a patched object): what the
    /// server owns (UID, creation time, name, namespace, kind, a Pod's spec but for what may
    /// change, a claim's and a namespace's status) is kept, `resourceVersion` advanced.
    /// The 409 an API server answers an update whose resourceVersion is no longer the stored
    /// one (the update's own, or the version read when a concurrent write won).
    fn modified_since(&self, name: &str) -> Reply {
        status(
            StatusCode::CONFLICT,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                self.route.resource
            ),
            json!({"name": name, "kind": self.route.resource}),
        )
    }

    async fn commit(&self, name: &str, existing: Value, mut object: Value) -> Reply {
        if !object.is_object() {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "the body is not an object",
                json!({}),
            );
        }
        let stored_rv = existing["metadata"]["resourceVersion"].clone();
        match object["metadata"]["resourceVersion"].as_str() {
            Some(rv) if !rv.is_empty() && Some(rv) != stored_rv.as_str() => {
                return self.modified_since(name);
            }
            _ => {}
        }
        if self.route.resource == "pods" {
            // Only what the API server lets change on a Pod (its metadata here; the spec's
            // mutable fields, images and the like, are refused too: the double's runtime
            // Pod could not follow them).
            let mut spec = object.clone();
            super::defaults::default_pod(&mut spec);
            if spec["spec"] != existing["spec"] {
                return status(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    &format!(
                        "Pod \"{name}\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative) (the double changes none of them)"
                    ),
                    json!({"name": name, "kind": "Pod"}),
                );
            }
            object["spec"] = existing["spec"].clone();
        }
        if matches!(
            self.route.resource.as_str(),
            "pods" | "persistentvolumeclaims" | "namespaces"
        ) && let Some(fields) = object.as_object_mut()
        {
            match existing.get("status") {
                Some(kept) => fields.insert("status".into(), kept.clone()),
                None => fields.remove("status"),
            };
        }
        object["apiVersion"] = json!(self.api_version);
        object["kind"] = json!(self.kind);
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
        ] {
            match existing["metadata"].get(field) {
                Some(v) => object["metadata"][field] = v.clone(),
                None => {
                    if let Some(meta) = object["metadata"].as_object_mut() {
                        meta.remove(field);
                    }
                }
            }
        }
        if param(self.query, "dryRun") != Some("All") {
            let key = self.key(name);
            let mut store = self.state.store();
            if store
                .objects
                .get(&key)
                .map(|o| &o["metadata"]["resourceVersion"])
                != Some(&stored_rv)
            {
                return self.modified_since(name);
            }
            object["metadata"]["resourceVersion"] = json!(store.next_version());
            store.put(key, object.clone());
        }
        json_reply(StatusCode::OK, &with_status(self.state, object).await)
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
        let mut reply = Response::new(full(text));
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
                store.put(key.clone(), shown.clone());
                drop(store);
                tokio::spawn(remove_pod(self.state.clone(), key, uid));
            }
            "namespaces" => {
                shown["status"]["phase"] = json!("Terminating");
                shown["metadata"]["resourceVersion"] = json!(store.next_version());
                store.put(key.clone(), shown.clone());
                drop(store);
                tokio::spawn(remove_namespace(self.state.clone(), name.to_owned()));
            }
            "persistentvolumeclaims" => {
                store.delete(&key);
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
                store.delete(&key);
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
            if let Some((key, mut object)) = store
                .objects
                .iter()
                .find(|(_, o)| o["kind"] == "Pod" && o["metadata"]["uid"].as_str() == Some(&uid))
                .map(|(k, o)| (k.clone(), o.clone()))
                && object["spec"]["nodeName"]
                    .as_str()
                    .is_none_or(str::is_empty)
            {
                object["spec"]["nodeName"] = json!(super::NODE);
                object["metadata"]["resourceVersion"] = json!(rv);
                store.put(key, object);
            }
            store.running.insert(uid.clone(), Running::Ready(pod));
            drop(store);
            tokio::spawn(kubelet(state, uid));
        }
        Err(e) => {
            store.running.insert(uid, Running::Failed(e));
        }
    }
}

/// What a kubelet's status updates would change: the Pod's phase and each container's state
/// and readiness (not the timestamps the double writes at each read).
fn status_fingerprint(pod: &Value) -> String {
    let status = &pod["status"];
    let containers = |field: &str| -> Vec<String> {
        status[field]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let state = c["state"]
                    .as_object()
                    .and_then(|s| s.iter().next())
                    .map(|(k, v)| format!("{k}:{}:{}", v["reason"], v["exitCode"]))
                    .unwrap_or_default();
                format!("{}={state}:{}:{}", c["name"], c["ready"], c["restartCount"])
            })
            .collect()
    };
    format!(
        "{} {:?} {:?}",
        status["phase"],
        containers("initContainerStatuses"),
        containers("containerStatuses")
    )
}

/// The kubelet's status updates, as far as a watch sees them: while the Pod is stored, its
/// status (read from the runtime) is compared every half second, and a change stores the
/// Pod again with a new `resourceVersion` (a `MODIFIED` event, as a kubelet's status update
/// is), so `kubectl wait` and `get -w` see it become ready and its containers end.
async fn kubelet(state: Arc<DoubleState>, uid: String) {
    let mut last = String::new();
    loop {
        let stored = {
            let store = state.store();
            store
                .objects
                .iter()
                .find(|(_, o)| o["kind"] == "Pod" && o["metadata"]["uid"].as_str() == Some(&uid))
                .map(|(k, o)| (k.clone(), o.clone()))
        };
        let Some((key, object)) = stored else {
            return;
        };
        let fingerprint = status_fingerprint(&with_status(&state, object).await);
        if fingerprint != last {
            let mut store = state.store();
            if let Some(mut current) = store.objects.get(&key).cloned()
                && current["metadata"]["uid"].as_str() == Some(&uid)
            {
                if !last.is_empty() {
                    current["metadata"]["resourceVersion"] = json!(store.next_version());
                    store.put(key, current);
                }
            } else {
                return;
            }
            last = fingerprint;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
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
        store.delete(&key);
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
        store.delete_where(|(r, ns, _)| *ns == name && r != "/pods");
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
    store.delete_where(|(_, ns, _)| *ns == name);
    store.delete(&("/namespaces".into(), String::new(), name));
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
        store.put(
            ("/persistentvolumeclaims".into(), "ns".into(), "gone".into()),
            json!({}),
        );
        assert_eq!(unschedulable(&store, &claim), None);
    }
}
