//! Request bodies in the Kubernetes protobuf encoding (`application/vnd.kubernetes.protobuf`),
//! decoded into the JSON the double stores, for the kinds a client sends that way.
//!
//! kubectl's typed commands (`create namespace`, `create serviceaccount`, `create role`,
//! `create rolebinding`, `create secret`, `create token`, `auth can-i` (with `--list`), `auth
//! whoami`) go through client-go's
//! typed clientsets, which send built-in kinds as protobuf (`Content-Type:
//! application/vnd.kubernetes.protobuf`, `Accept: application/vnd.kubernetes.protobuf,
//! application/json`); the API server decodes it as it decodes JSON. The envelope
//! (apimachinery `runtime/serializer/protobuf/protobuf.go`): the magic bytes `k8s\0`, then a
//! `runtime.Unknown` message (`runtime/generated.proto`: `typeMeta` 1 {`apiVersion` 1, `kind`
//! 2}, `raw` 2, `contentEncoding` 3, `contentType` 4) whose `raw` is the object's message.
//! The field numbers below are those of k8s.io/api's and apimachinery's `generated.proto`.
//!
//! Only the kinds listed in [`schema`] are decoded (anything else is 415, said by the
//! caller); a field the schema does not name is an error, never skipped. go-to-protobuf
//! writes a non-pointer scalar even when it is empty, where JSON's `omitempty` leaves it out:
//! zero values are dropped unless the Go field is a pointer ([`Kind::Kept`]). Timestamps
//! (`metadata.creationTimestamp`, ...) and `status` are dropped: the server sets them.

use serde_json::{Map, Value, json};

#[derive(Clone, Copy)]
enum Kind {
    Str,
    Int,
    Bool,
    /// A pointer scalar in Go (`*bool`, `*int64`): its zero value is kept.
    Kept(&'static Kind),
    Msg(&'static [Field]),
    /// `map<string, string>`.
    Map,
    /// `map<string, bytes>` (a Secret's `data`): JSON carries the bytes as base64.
    BytesMap,
    /// Dropped: a `metav1.Time`, or a `status` (what the server writes; go-to-protobuf
    /// sends it empty).
    Dropped,
}

#[derive(Clone, Copy)]
struct Field {
    number: u64,
    name: &'static str,
    kind: Kind,
    repeated: bool,
}

const fn f(number: u64, name: &'static str, kind: Kind) -> Field {
    Field {
        number,
        name,
        kind,
        repeated: false,
    }
}

const fn list(number: u64, name: &'static str, kind: Kind) -> Field {
    Field {
        number,
        name,
        kind,
        repeated: true,
    }
}

const OWNER_REFERENCE: &[Field] = &[
    f(5, "apiVersion", Kind::Str),
    f(1, "kind", Kind::Str),
    f(3, "name", Kind::Str),
    f(4, "uid", Kind::Str),
    f(6, "controller", Kind::Kept(&Kind::Bool)),
    f(7, "blockOwnerDeletion", Kind::Kept(&Kind::Bool)),
];

const OBJECT_META: &[Field] = &[
    f(1, "name", Kind::Str),
    f(2, "generateName", Kind::Str),
    f(3, "namespace", Kind::Str),
    f(4, "selfLink", Kind::Str),
    f(5, "uid", Kind::Str),
    f(6, "resourceVersion", Kind::Str),
    f(7, "generation", Kind::Int),
    f(8, "creationTimestamp", Kind::Dropped),
    f(9, "deletionTimestamp", Kind::Dropped),
    f(10, "deletionGracePeriodSeconds", Kind::Kept(&Kind::Int)),
    f(11, "labels", Kind::Map),
    f(12, "annotations", Kind::Map),
    list(13, "ownerReferences", Kind::Msg(OWNER_REFERENCE)),
    list(14, "finalizers", Kind::Str),
];

const NAMESPACE_SPEC: &[Field] = &[list(1, "finalizers", Kind::Str)];
const NAMESPACE: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(NAMESPACE_SPEC)),
    f(3, "status", Kind::Dropped),
];

const OBJECT_REFERENCE: &[Field] = &[
    f(1, "kind", Kind::Str),
    f(2, "namespace", Kind::Str),
    f(3, "name", Kind::Str),
    f(4, "uid", Kind::Str),
    f(5, "apiVersion", Kind::Str),
    f(6, "resourceVersion", Kind::Str),
    f(7, "fieldPath", Kind::Str),
];
const LOCAL_OBJECT_REFERENCE: &[Field] = &[f(1, "name", Kind::Str)];
const SERVICE_ACCOUNT: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    list(2, "secrets", Kind::Msg(OBJECT_REFERENCE)),
    f(3, "automountServiceAccountToken", Kind::Kept(&Kind::Bool)),
    list(4, "imagePullSecrets", Kind::Msg(LOCAL_OBJECT_REFERENCE)),
];

const SECRET: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "data", Kind::BytesMap),
    f(3, "type", Kind::Str),
    f(4, "stringData", Kind::Map),
    f(5, "immutable", Kind::Kept(&Kind::Bool)),
];

const POLICY_RULE: &[Field] = &[
    list(1, "verbs", Kind::Str),
    list(2, "apiGroups", Kind::Str),
    list(3, "resources", Kind::Str),
    list(4, "resourceNames", Kind::Str),
    list(5, "nonResourceURLs", Kind::Str),
];
const ROLE: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    list(2, "rules", Kind::Msg(POLICY_RULE)),
];
const SUBJECT: &[Field] = &[
    f(1, "kind", Kind::Str),
    f(2, "apiGroup", Kind::Str),
    f(3, "name", Kind::Str),
    f(4, "namespace", Kind::Str),
];
const ROLE_REF: &[Field] = &[
    f(1, "apiGroup", Kind::Str),
    f(2, "kind", Kind::Str),
    f(3, "name", Kind::Str),
];
const ROLE_BINDING: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    list(2, "subjects", Kind::Msg(SUBJECT)),
    f(3, "roleRef", Kind::Msg(ROLE_REF)),
];

const BOUND_OBJECT_REFERENCE: &[Field] = &[
    f(1, "kind", Kind::Str),
    f(2, "apiVersion", Kind::Str),
    f(3, "name", Kind::Str),
    f(4, "uid", Kind::Str),
];
const TOKEN_REQUEST_SPEC: &[Field] = &[
    list(1, "audiences", Kind::Str),
    f(4, "expirationSeconds", Kind::Kept(&Kind::Int)),
    f(3, "boundObjectRef", Kind::Msg(BOUND_OBJECT_REFERENCE)),
];
const TOKEN_REQUEST: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(TOKEN_REQUEST_SPEC)),
    f(3, "status", Kind::Dropped),
];

const RESOURCE_ATTRIBUTES: &[Field] = &[
    f(1, "namespace", Kind::Str),
    f(2, "verb", Kind::Str),
    f(3, "group", Kind::Str),
    f(4, "version", Kind::Str),
    f(5, "resource", Kind::Str),
    f(6, "subresource", Kind::Str),
    f(7, "name", Kind::Str),
];
const NON_RESOURCE_ATTRIBUTES: &[Field] = &[f(1, "path", Kind::Str), f(2, "verb", Kind::Str)];
const SELF_SUBJECT_ACCESS_REVIEW_SPEC: &[Field] = &[
    f(1, "resourceAttributes", Kind::Msg(RESOURCE_ATTRIBUTES)),
    f(
        2,
        "nonResourceAttributes",
        Kind::Msg(NON_RESOURCE_ATTRIBUTES),
    ),
];
const SELF_SUBJECT_ACCESS_REVIEW: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(SELF_SUBJECT_ACCESS_REVIEW_SPEC)),
    f(3, "status", Kind::Dropped),
];
const SELF_SUBJECT_RULES_REVIEW_SPEC: &[Field] = &[f(1, "namespace", Kind::Str)];
const SELF_SUBJECT_RULES_REVIEW: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "spec", Kind::Msg(SELF_SUBJECT_RULES_REVIEW_SPEC)),
    f(3, "status", Kind::Dropped),
];
const SELF_SUBJECT_REVIEW: &[Field] = &[
    f(1, "metadata", Kind::Msg(OBJECT_META)),
    f(2, "status", Kind::Dropped),
];

/// The message of the kinds decoded here.
fn schema(api_version: &str, kind: &str) -> Option<&'static [Field]> {
    Some(match (api_version, kind) {
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        ("v1", "Secret") => SECRET,
        ("rbac.authorization.k8s.io/v1", "Role") => ROLE,
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => ROLE_BINDING,
        ("authentication.k8s.io/v1", "TokenRequest") => TOKEN_REQUEST,
        ("authentication.k8s.io/v1", "SelfSubjectReview") => SELF_SUBJECT_REVIEW,
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => SELF_SUBJECT_ACCESS_REVIEW,
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => SELF_SUBJECT_RULES_REVIEW,
        _ => return None,
    })
}

/// The kinds [`decode`] reads, for an error message.
pub(crate) const DECODED: &str = "Namespace, ServiceAccount, Secret, Role, RoleBinding, TokenRequest, SelfSubjectAccessReview, SelfSubjectRulesReview, SelfSubjectReview";

/// Why a body was not decoded.
#[derive(Debug)]
pub(crate) enum Error {
    /// A kind the double does not decode from protobuf (its `apiVersion` and `kind`).
    Kind(String, String),
    Malformed(String),
}

/// A protobuf-encoded object as JSON (with its `apiVersion` and `kind`).
pub(crate) fn decode(body: &[u8]) -> Result<Value, Error> {
    let envelope = body
        .strip_prefix(b"k8s\0")
        .ok_or_else(|| Error::Malformed("no k8s protobuf envelope (k8s\\0)".into()))?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for (number, value) in fields(envelope)? {
        match (number, value) {
            (1, Wire::Bytes(type_meta)) => {
                for (number, value) in fields(type_meta)? {
                    match (number, value) {
                        (1, Wire::Bytes(v)) => api_version = text(v)?,
                        (2, Wire::Bytes(v)) => kind = text(v)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(v)) => raw = v,
            (3, Wire::Bytes(encoding)) if !encoding.is_empty() => {
                return Err(Error::Malformed(format!(
                    "content encoding {:?}",
                    String::from_utf8_lossy(encoding)
                )));
            }
            _ => {}
        }
    }
    let fields =
        schema(&api_version, &kind).ok_or(Error::Kind(api_version.clone(), kind.clone()))?;
    let mut object = message(raw, fields)?;
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    Ok(object)
}

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn varint(bytes: &[u8], at: &mut usize) -> Result<u64, Error> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *bytes
            .get(*at)
            .ok_or_else(|| Error::Malformed("truncated varint".into()))?;
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(Error::Malformed("varint too long".into()))
}

/// The (field number, value) pairs of a message, in order.
fn fields(bytes: &[u8]) -> Result<Vec<(u64, Wire<'_>)>, Error> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < bytes.len() {
        let tag = varint(bytes, &mut at)?;
        let value = match tag & 7 {
            0 => Wire::Varint(varint(bytes, &mut at)?),
            2 => {
                let len = usize::try_from(varint(bytes, &mut at)?)
                    .map_err(|_| Error::Malformed("length".into()))?;
                let end = at
                    .checked_add(len)
                    .filter(|end| *end <= bytes.len())
                    .ok_or_else(|| Error::Malformed("truncated field".into()))?;
                let v = &bytes[at..end];
                at = end;
                Wire::Bytes(v)
            }
            wire => {
                return Err(Error::Malformed(format!(
                    "wire type {wire} (field {})",
                    tag >> 3
                )));
            }
        };
        out.push((tag >> 3, value));
    }
    Ok(out)
}

fn text(bytes: &[u8]) -> Result<String, Error> {
    String::from_utf8(bytes.to_vec()).map_err(|_| Error::Malformed("a string is not UTF-8".into()))
}

fn message(bytes: &[u8], schema: &[Field]) -> Result<Value, Error> {
    let mut object = Map::new();
    for (number, wire) in fields(bytes)? {
        let field = schema.iter().find(|f| f.number == number).ok_or_else(|| {
            Error::Malformed(format!("field {number} is not one the double decodes"))
        })?;
        // A list's items are kept even when empty (`apiGroups: [""]`, the core group).
        let value = scalar(field.kind, &wire, field.repeated)?;
        let Some(value) = value else { continue };
        if field.repeated {
            let slot = object
                .entry(field.name)
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Some(items) = slot.as_array_mut() {
                items.push(value);
            }
        } else if let (Kind::Map | Kind::BytesMap, Some((k, v))) = (field.kind, pair(&value)) {
            let slot = object
                .entry(field.name)
                .or_insert_with(|| Value::Object(Map::new()));
            slot[k] = json!(v);
        } else {
            object.insert(field.name.to_owned(), value);
        }
    }
    Ok(Value::Object(object))
}

fn pair(entry: &Value) -> Option<(String, String)> {
    Some((
        entry["key"].as_str().unwrap_or_default().to_owned(),
        entry["value"].as_str().unwrap_or_default().to_owned(),
    ))
}

/// One field's value; `None` for what JSON leaves out (a zero scalar, a timestamp).
fn scalar(kind: Kind, wire: &Wire<'_>, keep_zero: bool) -> Result<Option<Value>, Error> {
    const ENTRY: &[Field] = &[f(1, "key", Kind::Str), f(2, "value", Kind::Str)];
    let wrong = || Error::Malformed("a field of an unexpected wire type".into());
    Ok(match (kind, wire) {
        (Kind::Str, Wire::Bytes(v)) => Some(text(v)?)
            .filter(|s| keep_zero || !s.is_empty())
            .map(Value::from),
        (Kind::Int, Wire::Varint(v)) => Some(*v as i64)
            .filter(|v| keep_zero || *v != 0)
            .map(Value::from),
        (Kind::Bool, Wire::Varint(v)) => Some(*v != 0).filter(|v| keep_zero || *v).map(Value::from),
        (Kind::Kept(Kind::Int), Wire::Varint(v)) => Some(json!(*v as i64)),
        (Kind::Kept(Kind::Bool), Wire::Varint(v)) => Some(json!(*v != 0)),
        (Kind::Msg(schema), Wire::Bytes(v)) => Some(message(v, schema)?),
        (Kind::Map, Wire::Bytes(v)) => {
            let entry = message(v, ENTRY)?;
            Some(json!({"key": entry["key"].as_str().unwrap_or_default(),
                "value": entry["value"].as_str().unwrap_or_default()}))
        }
        (Kind::BytesMap, Wire::Bytes(v)) => {
            use base64::Engine;
            let (mut key, mut value) = (String::new(), Vec::new());
            for (number, wire) in fields(v)? {
                match (number, wire) {
                    (1, Wire::Bytes(k)) => key = text(k)?,
                    (2, Wire::Bytes(b)) => value = b.to_vec(),
                    _ => return Err(wrong()),
                }
            }
            let encoded = base64::engine::general_purpose::STANDARD.encode(value);
            Some(json!({"key": key, "value": encoded}))
        }
        (Kind::Dropped, Wire::Bytes(_)) => None,
        _ => return Err(wrong()),
    })
}
