//! `coordination.k8s.io/v1` Leases, which a run holds to tell `gc` it is alive: stored as
//! any object is, with the API server's validation of their spec on create, update and
//! patch. The rules are Kubernetes' own (`pkg/apis/coordination/validation/validation.go`,
//! `ValidateLeaseSpec` and `ValidateCoordinatedLeaseStrategy`): a `leaseDurationSeconds`
//! greater than 0, `leaseTransitions` not negative, a `strategy` that is Kubernetes'
//! `OldestEmulationVersion` or a qualified name with a `/`, and a `preferredHolder` only
//! beside a `strategy`. `renewTime` is a MicroTime and, there as here, not checked further.

use serde_json::{Value, json};

/// Kubernetes' lease strategies (`validLeaseStrategies`).
const STRATEGIES: &[&str] = &["OldestEmulationVersion"];

/// The 422 message and causes of a Lease the API server refuses, if it does.
pub(crate) fn invalid(object: &Value) -> Option<(String, Value)> {
    let spec = &object["spec"];
    let mut causes = Vec::new();
    let mut cause = |field: &str, message: String| {
        causes.push(json!({"reason": "FieldValueInvalid", "message": message, "field": field}));
    };
    if let Some(seconds) = spec["leaseDurationSeconds"].as_i64()
        && seconds <= 0
    {
        cause(
            "spec.leaseDurationSeconds",
            format!("Invalid value: {seconds}: must be greater than 0"),
        );
    }
    if let Some(transitions) = spec["leaseTransitions"].as_i64()
        && transitions < 0
    {
        cause(
            "spec.leaseTransitions",
            format!("Invalid value: {transitions}: must be greater than or equal to 0"),
        );
    }
    let strategy = spec["strategy"].as_str();
    if let Some(strategy) = strategy {
        // One part: one of Kubernetes' names; more: a qualified name (prefix/name).
        let known = if strategy.contains('/') {
            qualified(strategy)
        } else {
            STRATEGIES.contains(&strategy)
        };
        if !known {
            cause(
                "spec.strategy",
                format!(
                    "Unsupported value: \"{strategy}\": supported values: \"OldestEmulationVersion\""
                ),
            );
        }
    }
    if spec["preferredHolder"]
        .as_str()
        .is_some_and(|h| !h.is_empty())
        && strategy.is_none_or(str::is_empty)
    {
        cause(
            "spec.preferredHolder",
            "Forbidden: may only be specified if `strategy` is defined".into(),
        );
    }
    if causes.is_empty() {
        return None;
    }
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let details: Vec<String> = causes
        .iter()
        .map(|c| {
            format!(
                "{}: {}",
                c["field"].as_str().unwrap_or_default(),
                c["message"].as_str().unwrap_or_default()
            )
        })
        .collect();
    Some((
        format!(
            "Lease.coordination.k8s.io \"{name}\" is invalid: {}",
            details.join(", ")
        ),
        Value::Array(causes),
    ))
}

/// `prefix/name` as apimachinery's `IsQualifiedName` takes it: a DNS subdomain prefix and
/// a name of at most 63 alphanumerics, `-`, `_` or `.`, starting and ending alphanumeric.
fn qualified(text: &str) -> bool {
    let Some((prefix, name)) = text.split_once('/') else {
        return false;
    };
    let alnum_ends = |s: &str| {
        s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && s.chars().last().is_some_and(|c| c.is_ascii_alphanumeric())
    };
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && alnum_ends(name)
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    let prefix_ok = !prefix.is_empty()
        && prefix.len() <= 253
        && prefix.split('.').all(|label| {
            alnum_ends(label)
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        });
    name_ok && prefix_ok
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_refused_as_the_api_server_refuses_it() {
        let lease = |spec: Value| json!({"metadata": {"name": "l"}, "spec": spec});
        assert!(
            invalid(&lease(
                json!({"holderIdentity": "h", "leaseDurationSeconds": 60})
            ))
            .is_none()
        );
        assert!(invalid(&lease(json!({}))).is_none());
        let (message, causes) = invalid(&lease(json!({"leaseDurationSeconds": 0}))).unwrap();
        assert!(message.contains("spec.leaseDurationSeconds"), "{message}");
        assert_eq!(causes.as_array().map(Vec::len), Some(1));
        assert!(invalid(&lease(json!({"leaseTransitions": -1}))).is_some());
        assert!(invalid(&lease(json!({"preferredHolder": "x"}))).is_some());
        assert!(invalid(&lease(json!({"strategy": "Newest"}))).is_some());
        assert!(
            invalid(&lease(
                json!({"strategy": "example.com/mine", "preferredHolder": "x"})
            ))
            .is_none()
        );
    }
}
