//! Strict decoding of one `v1/PodTemplate` document, as Kandev decodes a profile's
//! `pod_template_yaml`: bounded in size and nesting, unknown fields refused.

use super::finding::{PATH_PREFIX, TemplateFinding, error};
use k8s_openapi::api::core::v1::PodTemplate;
use serde_json::Value;

/// Kandev's `MaxPodTemplateBytes`.
pub const MAX_TEMPLATE_BYTES: usize = 256 * 1024;

/// Parses one strict `v1/PodTemplate` document. Unknown fields are errors (found by
/// comparing the document with its typed round trip), as Kandev decodes strictly.
pub fn parse(text: &str) -> Result<PodTemplate, Vec<TemplateFinding>> {
    within_size_limit(text).map_err(|finding| vec![finding])?;
    if text.trim().is_empty() {
        return Err(vec![error(
            PATH_PREFIX,
            "is empty; provide one v1/PodTemplate document",
        )]);
    }
    let depth = flow_depth(text);
    if depth > MAX_FLOW_DEPTH {
        return Err(vec![error(
            PATH_PREFIX,
            format!(
                "nests [ ] / {{ }} collections {depth} deep; a Pod template needs far fewer than {MAX_FLOW_DEPTH}"
            ),
        )]);
    }
    let mut documents = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        match <Value as serde::Deserialize>::deserialize(document) {
            Ok(value) => documents.push(value),
            Err(e) => return Err(vec![error(PATH_PREFIX, format!("is not valid YAML: {e}"))]),
        }
    }
    documents.retain(|d| !d.is_null());
    let document = match documents.as_slice() {
        [one] => one.clone(),
        [] => {
            return Err(vec![error(
                PATH_PREFIX,
                "is empty; provide one v1/PodTemplate document",
            )]);
        }
        many => {
            return Err(vec![error(
                PATH_PREFIX,
                format!(
                    "holds {} YAML documents; exactly one is allowed",
                    many.len()
                ),
            )]);
        }
    };
    let mut findings = Vec::new();
    if document.get("apiVersion").and_then(Value::as_str) != Some("v1") {
        findings.push(error(format!("{PATH_PREFIX}.apiVersion"), "must be v1"));
    }
    if document.get("kind").and_then(Value::as_str) != Some("PodTemplate") {
        findings.push(error(format!("{PATH_PREFIX}.kind"), "must be PodTemplate"));
    }
    let template: PodTemplate = match serde_json::from_value(document.clone()) {
        Ok(t) => t,
        Err(e) => {
            findings.push(error(
                PATH_PREFIX,
                format!("does not decode as a v1/PodTemplate: {}", located(text, e)),
            ));
            return Err(findings);
        }
    };
    match serde_json::to_value(&template) {
        Ok(round_trip) => unknown_fields(&document, &round_trip, PATH_PREFIX, &mut findings),
        Err(e) => findings.push(error(PATH_PREFIX, format!("cannot be re-encoded: {e}"))),
    }
    if findings.is_empty() {
        Ok(template)
    } else {
        Err(findings)
    }
}

/// A decode error with its line and column in the template's text: the typed decode runs on
/// the parsed value, which has none, so the same decode is asked of the text itself (one
/// document; otherwise the value's error stands).
fn located(text: &str, from_value: serde_json::Error) -> String {
    match serde_yaml::from_str::<PodTemplate>(text) {
        Err(e) if e.location().is_some() => e.to_string(),
        _ => from_value.to_string(),
    }
}

/// Kandev's size limit on a template's text.
pub(super) fn within_size_limit(text: &str) -> Result<(), TemplateFinding> {
    if text.len() > MAX_TEMPLATE_BYTES {
        return Err(error(
            PATH_PREFIX,
            format!(
                "is {} bytes; the limit is {MAX_TEMPLATE_BYTES} bytes",
                text.len()
            ),
        ));
    }
    Ok(())
}

/// Deepest flow-collection nesting a template may have. The YAML scanner slows down
/// superlinearly on deep flow nesting, so deeper input is refused before it is parsed.
const MAX_FLOW_DEPTH: usize = 100;

/// The deepest `[`/`{` nesting outside quotes and comments (an upper bound: brackets inside
/// plain scalars count too, which only errs towards refusing absurd input).
fn flow_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut single, mut double, mut comment, mut escaped) = (false, false, false, false);
    let mut previous = '\n';
    for c in text.chars() {
        if comment {
            comment = c != '\n';
        } else if double {
            double = escaped || c != '"';
            escaped = !escaped && c == '\\';
        } else if single {
            single = c != '\'';
        } else {
            match c {
                '#' if previous.is_whitespace() => comment = true,
                '"' => double = true,
                '\'' => single = true,
                '[' | '{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        previous = c;
    }
    deepest
}

/// Reports every field of `input` that the typed round trip dropped.
fn unknown_fields(input: &Value, typed: &Value, path: &str, findings: &mut Vec<TemplateFinding>) {
    match (input, typed) {
        (Value::Object(input), Value::Object(typed)) => {
            for (key, value) in input {
                let child = format!("{path}.{key}");
                match typed.get(key) {
                    Some(typed_value) => unknown_fields(value, typed_value, &child, findings),
                    None if value.is_null() => {}
                    None => findings.push(error(child, "is not a known field (strict decoding)")),
                }
            }
        }
        (Value::Array(input), Value::Array(typed)) => {
            for (i, (value, typed_value)) in input.iter().zip(typed).enumerate() {
                unknown_fields(value, typed_value, &format!("{path}[{i}]"), findings);
            }
        }
        _ => {}
    }
}
