//! The double's router: every request recorded, authenticated, negotiated, routed to what
//! serves it (`/version`, RBAC's gate, the stored objects' verbs, exec and port-forward
//! streams). What the harness's client never asks (discovery documents beyond `/version`,
//! OpenAPI, watches, SPDY streams, other bodies than JSON) is refused with a `Status` saying
//! so.

use super::negotiation::{decode_body, negotiate};
use super::rbac::{Attributes, allowed};
use super::request::Ctx;
use super::route::{param, parse_route, query_pairs};
use super::status::{Reply, json_reply, status};
use super::store::{DoubleState, Refusal, Seen};
use super::{discovery, streams};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Method, Request, StatusCode};
use serde_json::json;
use std::sync::Arc;

pub(crate) async fn handle(state: Arc<DoubleState>, req: Request<Incoming>) -> Reply {
    let path = req.uri().path().to_owned();
    let query = query_pairs(req.uri().query());
    // `watch=1`, `watch=true`, `watch=True`: the API server reads a bool query parameter as
    // true unless it is `0` or `false` in any case (apimachinery `runtime/conversion.go`,
    // `Convert_Slice_string_To_bool`).
    let watch =
        param(&query, "watch").is_some_and(|w| w != "0" && !w.eq_ignore_ascii_case("false"));
    {
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
    if path.trim_end_matches('/') == "/version"
        && req.method() == Method::GET
        && !req.headers().contains_key(hyper::header::AUTHORIZATION)
    {
        // Readable without credentials, as `system:anonymous` (the `system:public-info-viewer`
        // ClusterRole); a request with a token the server does not know is still 401, as
        // authentication comes first.
        return json_reply(StatusCode::OK, &discovery::version());
    }
    // The health endpoints answer every client (kube-apiserver's RBAC allows them to all
    // through the bootstrap binding `system:public-info-viewer`); the double is ready once
    // it serves. A client reads /readyz to tell a 403 of a server whose
    // informers have not synced from its answer (`resilience.rs`).
    if matches!(
        path.trim_end_matches('/'),
        "/healthz" | "/readyz" | "/livez"
    ) && req.method() == Method::GET
    {
        let mut reply = hyper::Response::new(super::status::full("ok".to_owned()));
        reply.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        return reply;
    }
    let token = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::to_owned);
    // An expired token is refused as the API server's token authenticator refuses it
    // (`pkg/serviceaccount/claims.go`, `validator.Validate`: "service account token has
    // expired"), with 401.
    let expired = token
        .as_ref()
        .is_some_and(|t| state.faults().token_expired(t));
    if expired {
        state
            .faults()
            .record(format!("ExpiredToken {} {}", req.method(), req.uri()));
    }
    let identity = token
        .filter(|_| !expired)
        .and_then(|t| state.store().authenticate(&t));
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
    if req.method() == Method::GET && path.trim_end_matches('/') == "/version" {
        // Any authenticated caller reads it (the `system:public-info-viewer` ClusterRole).
        if let Err(refused) = negotiate(req.headers()) {
            return *refused;
        }
        return json_reply(StatusCode::OK, &discovery::version());
    }
    let Some(route) = parse_route(&path) else {
        // `/api`, `/apis`, a group version's resource list, `/openapi/...`: what kubectl and
        // other clients discover a server by; the harness's client asks only `/version`.
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!(
                "the server could not find the requested resource ({path}): the kube double serves no discovery documents but /version, only what the harness's client asks"
            ),
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
    // The harness never watches (it polls with GETs), so the double serves no watch: 405,
    // as the API server answers a watch of a resource whose storage cannot watch
    // (`ListResource` in apiserver `pkg/endpoints/handlers/get.go`,
    // `errors.NewMethodNotSupported(..., "watch")`), saying why.
    if req.method() == Method::GET && route.sub.is_none() && watch {
        return status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            &format!(
                "watch is not supported on resources of kind {}: the kube double serves only what the harness's client sends, and it never watches (the real API server's tests referee watches)",
                json!(route.resource_with_sub())
            ),
            json!({"group": route.group, "kind": route.resource}),
        );
    }
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
        "selfsubjectaccessreviews" | "selfsubjectrulesreviews" | "selfsubjectreviews"
    ) {
        let mut store = state.store();
        let resource = route.resource_with_sub();
        let ns = route
            .namespace
            .clone()
            .or_else(|| (route.resource == "namespaces").then(|| route.name.clone())?);
        // A list of one object by `metadata.name` names it, as the API server's request
        // info does (so `resourceNames` can grant it).
        let selected = param(&query, "fieldSelector")
            .and_then(|f| f.strip_prefix("metadata.name="))
            .filter(|n| !n.contains(','))
            .map(str::to_owned);
        let name = match verb {
            "list" => selected,
            _ => route.name.clone(),
        };
        let asked = Attributes {
            verb,
            group: &route.group,
            resource: &resource,
            namespace: ns.as_deref(),
            name: name.as_deref(),
        };
        if !allowed(&store, &identity, &asked) {
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
    if !upgrade
        && route.resource == "pods"
        && matches!(
            route.sub.as_deref(),
            Some("exec" | "portforward" | "attach")
        )
    {
        // SPDY (`Upgrade: SPDY/3.1`, kubectl's and client-go's older transport) and attach are
        // not served: kube-rs, the harness's client, uses websockets.
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!(
                "the kube double serves pods/exec and pods/portforward over websockets only (v5.channel.k8s.io, v4.channel.k8s.io), what the harness's client uses; not pods/{} over SPDY",
                route.sub.as_deref().unwrap_or_default(),
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
    // The request's options (`dryRun`, a list's `resourceVersionMatch`) are not validated
    // here: the real API server is their referee (`tests/real_api_server/corpus.rs`).
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
        (Method::POST, None, None) if route.resource == "selfsubjectrulesreviews" => {
            ctx.rules_review(body)
        }
        (Method::POST, None, None) if route.resource == "jobs" => ctx.create_job(body).await,
        (Method::DELETE, Some(name), None) if route.resource == "jobs" => {
            ctx.delete_job(name, body)
        }
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
        (Method::PATCH, Some(name), None) => ctx.patch(name, body).await,
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
