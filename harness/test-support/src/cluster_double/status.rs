//! The double's answers: whole or streamed bodies, JSON replies and the API server's
//! `Status` errors.

use super::route::Route;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

/// Every answer's body: whole (`Full`) or streamed (a Pod's log).
pub(crate) type Body = http_body_util::combinators::BoxBody<Bytes, std::convert::Infallible>;
pub(crate) type Reply = Response<Body>;

/// A whole body.
pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// A `Status` error. An empty `reason` is an error the API server holds no API status for
/// (`ErrorToAPIStatus` in apiserver `pkg/endpoints/handlers/responsewriters/status.go`:
/// `StatusReasonUnknown` is empty and left out, with the details).
pub(crate) fn status(code: StatusCode, reason: &str, message: &str, details: Value) -> Reply {
    let mut body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "code": code.as_u16(),
    });
    if !reason.is_empty() {
        body["reason"] = json!(reason);
        body["details"] = details;
    }
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

pub(crate) fn not_found(route: &Route, name: &str) -> Reply {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!("{} \"{name}\" not found", route.resource),
        json!({"name": name, "kind": route.resource}),
    )
}
