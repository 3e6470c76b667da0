//! The double's router, in the order of the API server's handler chain
//! (`DefaultBuildHandlerChain`, apiserver `pkg/server/config.go`: authentication, then
//! authorization, then the resource's handler). [`handle`] records the request, authenticates
//! it ([`authenticate`]), answers `/version` and the health endpoints (every authenticated
//! user's), resolves what the request names ([`resolve`]), authorizes it ([`authorize`]),
//! then hands it to exec and port-forward streams or to the one handler of its resource
//! ([`dispatch`]). What the harness's client never asks (anonymous requests, discovery
//! documents beyond `/version`, OpenAPI, watches, SPDY streams, other bodies than JSON) is
//! refused with a `Status` saying so.

use super::negotiation::{decode_body, negotiate};
use super::rbac::{Attributes, allowed};
use super::request::Ctx;
use super::route::{Route, param, parse_route, query_pairs};
use super::status::{Reply, json_reply, status};
use super::store::{DoubleState, Identity, Seen};
use super::{discovery, streams};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;

pub(crate) async fn handle(state: Arc<DoubleState>, req: Request<Incoming>) -> Reply {
    let query = query_pairs(req.uri().query());
    // `watch=1`, `watch=true`, `watch=True`: the API server reads a bool query parameter as
    // true unless it is `0` or `false` in any case (apimachinery `runtime/conversion.go`,
    // `Convert_Slice_string_To_bool`).
    let watch =
        param(&query, "watch").is_some_and(|w| w != "0" && !w.eq_ignore_ascii_case("false"));
    record(&state, &req, watch);
    let Some(identity) = authenticate(&state, &req) else {
        return status(
            StatusCode::UNAUTHORIZED,
            "Unauthorized",
            "Unauthorized",
            json!({}),
        );
    };
    // Every authenticated user reads these (the `system:public-info-viewer` ClusterRole). The
    // double is ready once it serves; a client reads /readyz to tell a 403 of a server whose
    // informers have not synced from its answer (`resilience.rs`).
    if req.method() == Method::GET {
        match req.uri().path().trim_end_matches('/') {
            "/version" => {
                return match negotiate(req.headers()) {
                    Ok(()) => json_reply(StatusCode::OK, &discovery::version()),
                    Err(refused) => *refused,
                };
            }
            "/healthz" | "/readyz" | "/livez" => {
                let mut reply = hyper::Response::new(super::status::full("ok".to_owned()));
                reply.headers_mut().insert(
                    hyper::header::CONTENT_TYPE,
                    hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
                );
                return reply;
            }
            _ => {}
        }
    }
    let asked = match resolve(&req, watch) {
        Ok(asked) => asked,
        Err(refused) => return *refused,
    };
    if let Err(refused) = authorize(&state, &identity, &asked, &query) {
        return *refused;
    }
    if let Err(refused) = served_here(&asked) {
        return *refused;
    }
    // Exec and port-forward over websockets only: without the upgrade (SPDY, kubectl's and
    // client-go's older transport) they fall to `dispatch`, which refuses them naming it.
    match (asked.upgrade, asked.route.sub.as_deref()) {
        (true, Some("exec")) => return streams::exec(state, req, asked.route, query).await,
        (true, Some("portforward")) => {
            return streams::portforward(state, req, asked.route, query).await;
        }
        _ => {}
    }
    let body = match body(req).await {
        Ok(body) => body,
        Err(refused) => return *refused,
    };
    // The request's options (`dryRun`, a list's `resourceVersionMatch`) are not validated
    // here: the real API server is their referee (`tests/real_api_server/corpus.rs`).
    let ctx = Ctx {
        state: &state,
        identity: &identity,
        route: &asked.route,
        query: &query,
        api_version: &asked.api_version,
        kind: asked.kind,
    };
    dispatch(&ctx, &asked.method, asked.verb, body).await
}

/// Every request, as the tests read them back (`DoubleState::requests`).
fn record(state: &DoubleState, req: &Request<Incoming>, watch: bool) {
    let header = |name| {
        req.headers()
            .get(name)
            .and_then(|h| h.to_str().ok())
            .map(str::to_owned)
    };
    let seen = Seen {
        method: req.method().to_string(),
        uri: req.uri().to_string(),
        content_type: header(hyper::header::CONTENT_TYPE),
        accept: header(hyper::header::ACCEPT),
        watch,
    };
    state.store().seen.push(seen);
}

/// Who the bearer token is. An expired token is refused as the API server's token
/// authenticator refuses it (`pkg/serviceaccount/claims.go`, `validator.Validate`: "service
/// account token has expired"), with 401.
fn authenticate(state: &DoubleState, req: &Request<Incoming>) -> Option<Identity> {
    let token = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))?;
    if state.faults().token_expired(token) {
        state
            .faults()
            .record(format!("ExpiredToken {} {}", req.method(), req.uri()));
        return None;
    }
    state.store().authenticate(token)
}

/// What an authenticated request names, once the double knows it serves it.
struct Asked {
    path: String,
    route: Route,
    method: Method,
    /// RBAC's verb for it.
    verb: &'static str,
    /// A websocket upgrade (exec, port-forward).
    upgrade: bool,
    api_version: String,
    kind: &'static str,
    namespaced: bool,
}

/// The route, the resource it names (404 for a path the double does not serve), the
/// negotiated answer and RBAC's verb.
fn resolve(req: &Request<Incoming>, watch: bool) -> Result<Asked, Box<Reply>> {
    let path = req.uri().path();
    // Negotiated by the handler of a path that exists (an unknown path is 404 whatever the
    // client accepts), after authentication, as the API server does; pods/log is text, exec
    // and port-forward are websockets.
    let json_answer = !(req.method() == Method::GET
        && (path.ends_with("/log") || req.headers().contains_key(hyper::header::UPGRADE)));
    let not_found = |why: &str| {
        Box::new(status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("the server could not find the requested resource ({path}){why}"),
            json!({}),
        ))
    };
    // `/api`, `/apis`, a group version's resource list, `/openapi/...`: what kubectl and
    // other clients discover a server by; the harness's client asks only `/version`.
    let route = parse_route(path).ok_or_else(|| not_found(": the kube double serves no discovery documents but /version, only what the harness's client asks"))?;
    let resource = discovery::find(&route.group, &route.version, &route.resource)
        .filter(|_| {
            route.sub.as_ref().is_none_or(|sub| {
                let with_sub = format!("{}/{sub}", route.resource);
                discovery::find(&route.group, &route.version, &with_sub).is_some()
            })
        })
        .ok_or_else(|| not_found(""))?;
    if json_answer {
        negotiate(req.headers())?;
    }
    // The harness never watches (it polls with GETs), so the double serves no watch: 405,
    // as the API server answers a watch of a resource whose storage cannot watch
    // (`ListResource` in apiserver `pkg/endpoints/handlers/get.go`,
    // `errors.NewMethodNotSupported(..., "watch")`), saying why.
    if req.method() == Method::GET && route.sub.is_none() && watch {
        return Err(Box::new(status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            &format!(
                "watch is not supported on resources of kind {}: the kube double serves only what the harness's client sends, and it never watches (the real API server's tests referee watches)",
                json!(route.resource_with_sub())
            ),
            json!({"group": route.group, "kind": route.resource}),
        )));
    }
    let upgrade = req
        .headers()
        .get(hyper::header::UPGRADE)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|u| u.eq_ignore_ascii_case("websocket"));
    let verb = match (req.method(), &route.name, route.sub.as_deref()) {
        // A websocket upgrade is a GET; the API server also asks for `create` since 1.30.
        (&Method::GET, _, Some("exec" | "portforward")) if upgrade => "create",
        (&Method::GET, Some(_), _) => "get",
        (&Method::GET, None, _) => "list",
        (&Method::POST, _, _) => "create",
        (&Method::DELETE, _, _) => "delete",
        (&Method::PUT, _, _) => "update",
        (&Method::PATCH, _, _) => "patch",
        _ => {
            return Err(Box::new(status(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                "method not allowed",
                json!({}),
            )));
        }
    };
    Ok(Asked {
        path: path.to_owned(),
        method: req.method().clone(),
        verb,
        upgrade,
        api_version: resource.api_version(),
        kind: resource.kind,
        namespaced: resource.namespaced,
        route,
    })
}

/// RBAC's gate (`rbac::allowed`): a request its caller's Roles do not grant is 403 (the
/// corpus holds it to the real API server's). The self-reviews are every user's.
fn authorize(
    state: &DoubleState,
    identity: &Identity,
    asked: &Asked,
    query: &[(String, String)],
) -> Result<(), Box<Reply>> {
    let route = &asked.route;
    if matches!(
        route.resource.as_str(),
        "selfsubjectaccessreviews" | "selfsubjectrulesreviews" | "selfsubjectreviews"
    ) {
        return Ok(());
    }
    let store = state.store();
    let resource = route.resource_with_sub();
    let ns = route
        .namespace
        .clone()
        .or_else(|| (route.resource == "namespaces").then(|| route.name.clone())?);
    // A list of one object by `metadata.name` names it, as the API server's request info
    // does (so `resourceNames` can grant it).
    let name = match asked.verb {
        "list" => param(query, "fieldSelector")
            .and_then(|f| f.strip_prefix("metadata.name="))
            .filter(|n| !n.contains(','))
            .map(str::to_owned),
        _ => route.name.clone(),
    };
    let attributes = Attributes {
        verb: asked.verb,
        group: &route.group,
        resource: &resource,
        namespace: ns.as_deref(),
        name: name.as_deref(),
    };
    if allowed(&store, identity, &attributes) {
        return Ok(());
    }
    let scope = match &ns {
        Some(ns) => format!(" in the namespace \"{ns}\""),
        None => " at the cluster scope".into(),
    };
    Err(Box::new(status(
        StatusCode::FORBIDDEN,
        "Forbidden",
        &format!(
            "{resource} is forbidden: User \"{}\" cannot {} resource \"{resource}\" in API group \"{}\"{scope}",
            identity.user_name(),
            asked.verb,
            route.group
        ),
        // A real API server leaves `name` out when the request has none (a create):
        // `"name": null` is no Status a client can parse.
        match &route.name {
            Some(name) => json!({"kind": route.resource, "name": name}),
            None => json!({"kind": route.resource}),
        },
    )))
}

/// What the route's scope leaves unserved: a namespaced resource outside a namespace (but a
/// list across namespaces), a cluster-scoped one inside one.
fn served_here(asked: &Asked) -> Result<(), Box<Reply>> {
    let route = &asked.route;
    let across_namespaces = asked.namespaced && route.name.is_none() && asked.verb == "list";
    if asked.namespaced != route.namespace.is_some()
        && route.resource != "namespaces"
        && !across_namespaces
    {
        return Err(Box::new(status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!(
                "the server could not find the requested resource ({})",
                asked.path
            ),
            json!({}),
        )));
    }
    Ok(())
}

/// The request's body, decoded as the double serves bodies (`negotiation::decode_body`).
async fn body(req: Request<Incoming>) -> Result<Value, Box<Reply>> {
    let method = req.method().clone();
    let content_type = req
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned);
    let bytes = req.into_body().collect().await.map_err(|e| {
        Box::new(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &e.to_string(),
            json!({}),
        ))
    })?;
    decode_body(&method, content_type.as_deref(), &bytes.to_bytes())
}

/// The one handler of the request's resource: the reviews (`rbac`), Jobs (`jobs`), a
/// ServiceAccount's TokenRequest (`rbac`), pods/log, and every other stored object's verbs
/// (`objects`).
async fn dispatch(ctx: &Ctx<'_>, method: &Method, verb: &str, body: Value) -> Reply {
    let route = ctx.route;
    match (method, route.name.as_deref(), route.sub.as_deref()) {
        (&Method::POST, None, None) if route.resource == "selfsubjectreviews" => ctx.self_review(),
        (&Method::POST, None, None) if route.resource == "selfsubjectrulesreviews" => {
            ctx.rules_review(body)
        }
        (&Method::POST, None, None) if route.resource == "selfsubjectaccessreviews" => {
            ctx.access_review(body)
        }
        (&Method::POST, None, None) if route.resource == "jobs" => ctx.create_job(body).await,
        (&Method::DELETE, Some(name), None) if route.resource == "jobs" => {
            ctx.delete_job(name, body)
        }
        (&Method::POST, Some(name), Some("token")) if route.resource == "serviceaccounts" => {
            ctx.token(name, body)
        }
        (&Method::GET, Some(name), Some("log")) if route.resource == "pods" => ctx.log(name).await,
        (&Method::POST, None, None) => ctx.create(body).await,
        (&Method::GET, None, None) => ctx.list().await,
        (&Method::GET, Some(name), None) => ctx.get(name).await,
        (&Method::DELETE, Some(name), None) => ctx.delete(name, body),
        (&Method::PUT, Some(name), None) => ctx.update(name, body).await,
        (&Method::PATCH, Some(name), None) => ctx.patch(name, body).await,
        // pods/exec, pods/portforward and pods/attach without a websocket upgrade: SPDY
        // (kubectl's and client-go's older transport), which kube-rs never speaks.
        (_, Some(_), Some("exec" | "portforward" | "attach")) if route.resource == "pods" => {
            status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!(
                    "the kube double serves pods/exec and pods/portforward over websockets only (what the harness's client uses), not pods/{} over SPDY",
                    route.sub.as_deref().unwrap_or_default()
                ),
                json!({}),
            )
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
