//! What the API server refuses in a request before its registry stores anything, in its
//! words: the request's options (`dryRun`, a list's), a body that does not
//! decode as the resource's kind (another kind, another namespace, labels or annotations that
//! are not strings), and the fields an update may not change (a Pod's spec but for what
//! `ValidatePodUpdate` lets change, a RoleBinding's `roleRef`, `metadata.uid`). Held to a
//! real kube-apiserver by `tests/real_api_server/corpus.rs`.

use super::status::{Reply, status};
use super::validation::{Cause, Invalid, invalid_status};
use hyper::StatusCode;
use serde_json::{Value, json};

/// The 422 of options that do not validate (`NewInvalid` of the options' kind in the
/// `meta.k8s.io` group, its name empty), each error a `field.Error` of `field` and `body`.
fn invalid_options(options: &str, errors: &[(&str, &str, String)]) -> Reply {
    let texts: Vec<String> = errors
        .iter()
        .map(|(field, _, body)| format!("{field}: {body}"))
        .collect();
    let aggregate = match texts.as_slice() {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    };
    let causes: Vec<Value> = errors
        .iter()
        .map(|(field, reason, body)| json!({"reason": reason, "message": body, "field": field}))
        .collect();
    status(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        &format!("{options}.meta.k8s.io \"\" is invalid: {aggregate}"),
        json!({"group": "meta.k8s.io", "kind": options, "causes": causes}),
    )
}

/// `ValidateDryRun` (apimachinery `pkg/apis/meta/v1/validation/validation.go`, called by
/// `ValidateCreateOptions`, `ValidateUpdateOptions`, `ValidatePatchOptions` and
/// `ValidateDeleteOptions` before anything is read): every `dryRun` value must be `All`.
/// `options` is the options' kind (`CreateOptions`, ...), `values` the query's and a
/// DeleteOptions body's values.
pub(crate) fn refused_dry_run(options: &str, values: &[String]) -> Option<Reply> {
    if values.iter().all(|v| v == "All") {
        return None;
    }
    let shown: Vec<String> = values.iter().map(|v| json!(v).to_string()).collect();
    Some(invalid_options(
        options,
        &[(
            "dryRun",
            "FieldValueNotSupported",
            format!(
                "Unsupported value: [{}]: supported values: \"All\"",
                shown.join(", ")
            ),
        )],
    ))
}

/// `ValidateListOptions` (apimachinery `pkg/apis/meta/internalversion/validation/
/// validation.go`) of a list (the double serves no watch): `resourceVersionMatch` needs a
/// `resourceVersion` and is `Exact` (not with `0`) or `NotOlderThan`, and a list takes no
/// `sendInitialEvents`.
pub(crate) fn refused_list_options(
    resource_version: Option<&str>,
    resource_version_match: Option<&str>,
    send_initial_events: Option<&str>,
) -> Option<Reply> {
    let forbidden =
        |field, detail: &str| (field, "FieldValueForbidden", format!("Forbidden: {detail}"));
    let mut errors = Vec::new();
    let matching = resource_version_match.filter(|m| !m.is_empty());
    if let Some(matching) = matching {
        if resource_version.is_none_or(str::is_empty) {
            errors.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if matching != "Exact" && matching != "NotOlderThan" {
            errors.push((
                "resourceVersionMatch",
                "FieldValueNotSupported",
                format!(
                    "Unsupported value: {}: supported values: \"Exact\", \"NotOlderThan\", \"\"",
                    json!(matching)
                ),
            ));
        }
        if matching == "Exact" && resource_version == Some("0") {
            errors.push(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    if send_initial_events.is_some() {
        errors.push(forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for list",
        ));
    }
    (!errors.is_empty()).then(|| invalid_options("ListOptions", &errors))
}

/// The 400 of a body the API server's decoder does not turn into the resource's kind: a
/// `kind` (or `apiVersion`) that is another's (the create and update handlers' `Decode`
/// into the resource's type, `transformDecodeError` in apiserver
/// `pkg/endpoints/handlers/create.go`, the API version check after it), or metadata maps
/// whose values are not strings (Go's `json: cannot unmarshal ... into Go struct field
/// ObjectMeta.metadata.labels of type string`). A `null` label or annotation value decodes
/// as Go decodes it into a `map[string]string`: the empty string.
pub(crate) fn undecodable(object: &mut Value, api_version: &str, kind: &str) -> Option<Reply> {
    let message = decode_error(object, api_version, kind)?;
    Some(status(
        StatusCode::BAD_REQUEST,
        "BadRequest",
        &message,
        json!({}),
    ))
}

/// Why `object` does not decode as `kind` of `api_version` (see [`undecodable`]).
pub(crate) fn decode_error(object: &mut Value, api_version: &str, kind: &str) -> Option<String> {
    let (version, group) = match api_version.split_once('/') {
        Some((group, version)) => (version, group),
        None => (api_version, ""),
    };
    let sent_version = object["apiVersion"].as_str().unwrap_or_default();
    if !sent_version.is_empty() && sent_version != api_version {
        return Some(format!(
            "the API version in the data ({sent_version}) does not match the expected API version ({api_version})"
        ));
    }
    if let Some(sent) = object["kind"]
        .as_str()
        .filter(|k| !k.is_empty() && *k != kind)
    {
        let internal = match group.split('.').next() {
            Some("") | None => "core",
            Some(first) => first,
        };
        return Some(format!(
            "{sent} in version \"{version}\" cannot be handled as a {kind}: converting ({version}.{sent}) to ({internal}.{kind}): unknown conversion"
        ));
    }
    for field in ["labels", "annotations"] {
        let Some(map) = object.get_mut("metadata").and_then(|m| m.get_mut(field)) else {
            continue;
        };
        let problem = match map {
            Value::Null => None,
            Value::Object(entries) => entries.values_mut().find_map(|value| match value {
                Value::String(_) => None,
                Value::Null => {
                    *value = json!("");
                    None
                }
                other => Some(format!(
                    "json: cannot unmarshal {} into Go struct field ObjectMeta.metadata.{field} of type string",
                    json_type(other)
                )),
            }),
            other => Some(format!(
                "json: cannot unmarshal {} into Go struct field ObjectMeta.metadata.{field} of type map[string]string",
                json_type(other)
            )),
        };
        if let Some(problem) = problem {
            return Some(format!(
                "{kind} in version \"{version}\" cannot be handled as a {kind}: {problem}"
            ));
        }
    }
    None
}

/// How Go's `encoding/json` names a JSON value's type in an `UnmarshalTypeError`.
pub(crate) fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `EnsureObjectNamespaceMatchesRequestNamespace` (apiserver `pkg/registry/rest/meta.go`):
/// a body's namespace, when it names one, must be the request's (400); an unset one takes
/// the request's; a cluster-scoped object's is cleared.
pub(crate) fn namespace_mismatch(object: &mut Value, namespace: Option<&str>) -> Option<Reply> {
    let sent = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    match namespace {
        None => {
            if let Some(meta) = object["metadata"].as_object_mut() {
                meta.remove("namespace");
            }
            None
        }
        Some(ns) if sent.is_empty() || sent == ns => None,
        Some(_) => Some(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the namespace of the provided object does not match the namespace sent on the request",
            json!({}),
        )),
    }
}

/// Why a Pod's spec may not change from `old` to `new` (both defaulted), as
/// `ValidatePodUpdate` (kubernetes `pkg/apis/core/validation/validation.go`) judges it:
/// containers neither added nor removed (`ValidateContainerUpdates`); then, the fields it
/// lets change set back to the old values (`containers[*].image`, `initContainers[*].image`,
/// `activeDeadlineSeconds` set or lowered, `tolerations` added to (a toleration's
/// `tolerationSeconds` may change: `validateOnlyAddedTolerations`), `schedulingGates`
/// removed, `terminationGracePeriodSeconds` from negative to 1), the rest must be the old
/// spec. None: the update may be stored.
pub(crate) fn pod_update_error(old: &Value, new: &Value) -> Option<String> {
    for list in ["containers", "initContainers"] {
        let count = |spec: &Value| spec[list].as_array().map_or(0, Vec::len);
        if count(old) != count(new) {
            return Some(format!(
                "spec.{list}: Forbidden: pod updates may not add or remove containers"
            ));
        }
        for (i, container) in new[list].as_array().into_iter().flatten().enumerate() {
            let image = container["image"].as_str().unwrap_or_default();
            if image.is_empty() {
                return Some(format!("spec.{list}[{i}].image: Required value"));
            }
            if image.trim() != image {
                return Some(format!(
                    "spec.{list}[{i}].image: Invalid value: {}: must not have leading or trailing whitespace",
                    json!(image)
                ));
            }
        }
    }
    let deadline = |spec: &Value| spec["activeDeadlineSeconds"].as_i64();
    match (deadline(old), deadline(new)) {
        (_, Some(new)) if !(0..=i64::from(i32::MAX)).contains(&new) => {
            return Some(format!(
                "spec.activeDeadlineSeconds: Invalid value: {new}: must be between 0 and 2147483647, inclusive"
            ));
        }
        (Some(old), Some(new)) if old < new => {
            return Some(format!(
                "spec.activeDeadlineSeconds: Invalid value: {new}: must be less than or equal to previous value"
            ));
        }
        (Some(_), None) => {
            return Some(
                "spec.activeDeadlineSeconds: Invalid value: \"null\": must not update from a positive integer to nil value"
                    .to_owned(),
            );
        }
        _ => {}
    }
    let tolerations = |spec: &Value| spec["tolerations"].as_array().cloned().unwrap_or_default();
    let without_seconds = |t: &Value| {
        let mut t = t.clone();
        if let Some(fields) = t.as_object_mut() {
            fields.remove("tolerationSeconds");
        }
        t
    };
    let added: Vec<Value> = tolerations(new).iter().map(without_seconds).collect();
    if !tolerations(old)
        .iter()
        .all(|t| added.contains(&without_seconds(t)))
    {
        return Some(
            "spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"
                .to_owned(),
        );
    }
    let mut munged = new.clone();
    for list in ["containers", "initContainers"] {
        if let Some(containers) = munged.get_mut(list).and_then(Value::as_array_mut) {
            for (i, container) in containers.iter_mut().enumerate() {
                container["image"] = old[list][i]["image"].clone();
            }
        }
    }
    let gates = |spec: &Value| {
        spec["schedulingGates"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    };
    if gates(new).iter().all(|g| gates(old).contains(g)) {
        keep(&mut munged, old, "schedulingGates");
    }
    keep(&mut munged, old, "activeDeadlineSeconds");
    keep(&mut munged, old, "tolerations");
    if old["terminationGracePeriodSeconds"]
        .as_i64()
        .is_some_and(|g| g < 0)
        && munged["terminationGracePeriodSeconds"] == 1
    {
        keep(&mut munged, old, "terminationGracePeriodSeconds");
    }
    (munged != *old).then(|| {
        "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)".to_owned()
    })
}

/// `munged[field] = old[field]` (absent when `old` has none).
fn keep(munged: &mut Value, old: &Value, field: &str) {
    let Some(fields) = munged.as_object_mut() else {
        return;
    };
    match old.get(field) {
        Some(value) => fields.insert(field.to_owned(), value.clone()),
        None => fields.remove(field),
    };
}

/// The immutable fields an update (`resource`'s `ValidateXUpdate`) or a patch changed: a
/// RoleBinding's `roleRef` (`ValidateRoleBindingUpdate`, kubernetes
/// `pkg/apis/rbac/validation/validation.go`), and with `uid_too` (a patch: an update's UID is
/// its precondition instead, [`uid_precondition_failed`]) `metadata.uid`
/// (`ValidateObjectMetaUpdate`, apimachinery `pkg/api/validation/objectmeta.go`).
pub(crate) fn immutable_errors(
    resource: &str,
    existing: &Value,
    object: &Value,
    uid_too: bool,
) -> Vec<Invalid> {
    let mut errors = Vec::new();
    let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
    if uid_too && !uid.is_empty() && Some(uid) != existing["metadata"]["uid"].as_str() {
        errors.push(Invalid {
            field: "metadata.uid".into(),
            value: uid.to_owned(),
            detail: "field is immutable".into(),
            cause: Cause::Invalid,
        });
    }
    if matches!(resource, "rolebindings" | "clusterrolebindings")
        && object["roleRef"] != existing["roleRef"]
    {
        errors.push(Invalid {
            field: "roleRef".into(),
            value: object["roleRef"].to_string(),
            detail: "field is immutable".into(),
            cause: Cause::Invalid,
        });
    }
    errors
}

/// The 422 of [`immutable_errors`] (or any `Invalid` of an update) about `kind` named `name`.
pub(crate) fn invalid(kind: &str, api_version: &str, name: &str, errors: &[Invalid]) -> Reply {
    let (message, details) = invalid_status(kind, api_version, name, errors);
    status(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        &message,
        details,
    )
}

/// An update's body names the object's UID, which is its precondition
/// (`defaultUpdatedObjectInfo.Preconditions` in apiserver `pkg/registry/rest/update.go`): a
/// UID that is not the stored object's fails it in the store (`Preconditions.Check` in
/// apiserver `pkg/storage/interfaces.go`), 409 `Conflict` in the store's words.
pub(crate) fn uid_precondition_failed(
    resource: &str,
    namespace: Option<&str>,
    name: &str,
    sent: &str,
    stored: &str,
) -> Reply {
    let key = match namespace {
        Some(ns) => format!("/registry/{resource}/{ns}/{name}"),
        None => format!("/registry/{resource}/{name}"),
    };
    status(
        StatusCode::CONFLICT,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on {resource} \"{name}\": StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {sent}, UID in object meta: {stored}"
        ),
        json!({"name": name, "kind": resource}),
    )
}

/// A core v1 Event's namespace and its involved object's must agree (`legacyValidateEvent`
/// in kubernetes `pkg/apis/core/validation/events.go`, for an Event without `eventTime`): an
/// involved object of no namespace only in `default` (or no namespace), else the same.
pub(crate) fn event_errors(event: &Value, namespace: &str) -> Vec<Invalid> {
    if !event["eventTime"].is_null() {
        return Vec::new();
    }
    let involved = event["involvedObject"]["namespace"]
        .as_str()
        .unwrap_or_default();
    let agrees = if involved.is_empty() {
        namespace.is_empty() || namespace == "default"
    } else {
        involved == namespace
    };
    if agrees {
        return Vec::new();
    }
    vec![Invalid {
        field: "involvedObject.namespace".into(),
        value: involved.to_owned(),
        detail: "does not match event.namespace".into(),
        cause: Cause::Invalid,
    }]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_update_may_change_images_deadlines_and_add_tolerations_only() {
        let old = json!({"containers": [{"name": "a", "image": "x:1"}],
            "tolerations": [{"key": "k", "operator": "Exists", "tolerationSeconds": 300}]});
        let mut new = old.clone();
        new["containers"][0]["image"] = json!("x:2");
        new["activeDeadlineSeconds"] = json!(60);
        new["tolerations"] = json!([{"key": "k", "operator": "Exists", "tolerationSeconds": 10},
            {"key": "added", "operator": "Exists"}]);
        assert_eq!(pod_update_error(&old, &new), None);
        let mut renamed = old.clone();
        renamed["containers"][0]["name"] = json!("b");
        assert!(
            pod_update_error(&old, &renamed)
                .unwrap()
                .starts_with("spec: Forbidden")
        );
        let mut removed = old.clone();
        removed["tolerations"] = json!([]);
        assert!(
            pod_update_error(&old, &removed)
                .unwrap()
                .starts_with("spec.tolerations: Forbidden")
        );
        let mut raised = new.clone();
        raised["activeDeadlineSeconds"] = json!(61);
        assert!(
            pod_update_error(&new, &raised)
                .unwrap()
                .contains("previous value")
        );
        let mut added = old.clone();
        added["containers"] = json!([{"name": "a", "image": "x:1"}, {"name": "b", "image": "y"}]);
        assert!(
            pod_update_error(&old, &added)
                .unwrap()
                .contains("add or remove")
        );
    }

    #[test]
    fn metadata_maps_decode_as_go_decodes_them() {
        let mut object = json!({"metadata": {"labels": {"a": null}}});
        assert_eq!(decode_error(&mut object, "v1", "Pod"), None);
        assert_eq!(object["metadata"]["labels"]["a"], "");
        let mut object = json!({"metadata": {"annotations": {"a": 1}}});
        assert_eq!(
            decode_error(&mut object, "v1", "Pod").unwrap(),
            "Pod in version \"v1\" cannot be handled as a Pod: json: cannot unmarshal number into Go struct field ObjectMeta.metadata.annotations of type string"
        );
        let mut object = json!({"kind": "Secret"});
        assert!(
            decode_error(&mut object, "v1", "ServiceAccount")
                .unwrap()
                .starts_with("Secret in version \"v1\" cannot be handled as a ServiceAccount")
        );
    }

    #[test]
    fn a_bogus_dry_run_is_refused_as_the_options_kind() {
        assert!(refused_dry_run("CreateOptions", &["All".into()]).is_none());
        assert_eq!(
            refused_dry_run("DeleteOptions", &["Bogus".into()])
                .unwrap()
                .status(),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert!(refused_list_options(None, None, Some("true")).is_some());
        assert!(refused_list_options(Some("5"), Some("NotOlderThan"), None).is_none());
    }
}
