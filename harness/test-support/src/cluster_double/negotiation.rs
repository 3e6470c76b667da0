//! Content negotiation, reduced to what the harness's client (kube-rs, JSON only) sends: JSON
//! answers, JSON request bodies and JSON merge patches. A real API server also speaks YAML,
//! protobuf, JSON Patch, strategic merge patch and server-side apply; the double refuses
//! them loudly (406, 415) instead of misreading them: the real API server referees those
//! (`tests/real_api_server/`).

use super::status::{Reply, status};
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

/// What a refusal adds, so that an accidental use says why.
const ONLY: &str = "the kube double serves only what the harness's client sends";

/// `type/subtype` of a media type, without its parameters.
fn media_type(value: &str) -> &str {
    value.split(';').next().unwrap_or("").trim()
}

/// Whether the client accepts JSON, as the object itself: no `Accept` means JSON; a clause
/// of another type or asking for a conversion (`as=Table`, aggregated discovery) does not
/// count; nothing acceptable is 406 `NotAcceptable` (apiserver
/// `endpoints/handlers/negotiation/errors.go`, `errNotAcceptable`).
pub(crate) fn negotiate(headers: &hyper::HeaderMap) -> Result<(), Box<Reply>> {
    let mut clauses = headers
        .get_all(hyper::header::ACCEPT)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(','))
        .map(|c| c.trim().to_ascii_lowercase().replace(' ', ""))
        .filter(|c| !c.is_empty())
        .peekable();
    let json = |c: String| {
        let json = ["application/json", "application/*", "*/*"].contains(&media_type(&c));
        json && !c.contains(";as=")
    };
    if clauses.peek().is_none() || clauses.any(json) {
        return Ok(());
    }
    Err(Box::new(status(
        StatusCode::NOT_ACCEPTABLE,
        "NotAcceptable",
        &format!("only the following media types are accepted: application/json ({ONLY})"),
        json!({}),
    )))
}

/// The request body as JSON: `application/json` (or no `Content-Type`) for a create, an
/// update or a delete's options, `application/merge-patch+json` for a PATCH. Anything else
/// is 415 `UnsupportedMediaType` (`errUnsupportedMediaType`), never misread; a body that is
/// not a JSON object 400. An empty body is `null` (a GET's, a DELETE without options).
pub(crate) fn decode_body(
    method: &Method,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Value, Box<Reply>> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    let accepted = if method == Method::PATCH {
        "application/merge-patch+json"
    } else {
        "application/json"
    };
    let kind = content_type
        .map(media_type)
        .unwrap_or("application/json")
        .to_ascii_lowercase();
    if kind != accepted {
        return Err(Box::new(status(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "UnsupportedMediaType",
            &format!(
                "the body of the request was in an unknown format - accepted media types include: {accepted} ({ONLY}; not {kind})"
            ),
            json!({}),
        )));
    }
    // A body that is not an object is no object of any kind, and no merge patch either
    // (apiserver `pkg/endpoints/handlers/patch.go`: `error decoding patch`).
    let refused = |message: String| {
        Box::new(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &message,
            json!({}),
        ))
    };
    match serde_json::from_slice::<Value>(body) {
        Ok(value) if value.is_object() => Ok(value),
        Ok(_) if method == Method::PATCH => Err(refused(
            "error decoding patch: the patch is not a JSON object".into(),
        )),
        Ok(_) => Err(refused("the body is not an object".into())),
        Err(e) => Err(refused(format!(
            "the body of the request ({kind}) does not decode: {e}"
        ))),
    }
}
