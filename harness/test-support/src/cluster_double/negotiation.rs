//! Content negotiation as the API server does it: what a client accepts (`Accept`) and how
//! a request body is decoded (`Content-Type`).

use super::protobuf;
use super::status::{Reply, status};
use hyper::{Method, StatusCode};
use serde_json::{Value, json};

/// `type/subtype` of a media type, without its parameters.
pub(crate) fn media_type(value: &str) -> &str {
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
pub(crate) fn negotiate(headers: &hyper::HeaderMap) -> Result<(), Box<Reply>> {
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
pub(crate) fn decode_body(
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
        return protobuf::decode(body).map_err(|e| {
            Box::new(match e {
                protobuf::Error::Kind(api_version, kind) => status(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    &format!(
                        "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (the double decodes protobuf only for {}; not {api_version} {kind})",
                        protobuf::DECODED
                    ),
                    json!({}),
                ),
                protobuf::Error::Malformed(e) => status(
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
