//! apimachinery's syntax rules for names and label keys and values, in its words. The double
//! no longer refuses a written object for them (issue 39: `ValidateObjectMeta` on the real
//! API server is the referee, `tests/real_api_server/names.rs` and the corpus); they stay for
//! the double's label selectors (`route`: a requirement's key and values) and for the
//! scenarios' test that every session identity is one an API server admits.
//!
//! Written from apimachinery's own functions, message for message:
//! - `IsLabelKey` (alias `IsQualifiedName`) and `IsLabelValue` in
//!   `staging/src/k8s.io/apimachinery/pkg/api/validate/content/kube.go`;
//! - `IsDNS1123Label` and `IsDNS1123Subdomain` in `.../api/validate/content/dns.go`;
//! - `MaxLenError` and `RegexError` in `.../api/validate/content/errors.go`;
//! - `ValidateLabels` in `staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/
//!   validation.go`, and the name rules `ValidateObjectMeta` applies
//!   (`.../apimachinery/pkg/api/validation/objectmeta.go`: `NameIsDNSSubdomain`,
//!   `NameIsDNSLabel` for Namespaces, `path.IsValidPathSegmentName` for RBAC objects);
//! - the error text `field.Error.Error` in `.../util/validation/field/errors.go`.

use serde_json::Value;

const LABEL_KEY_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_KEY_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

/// `MaxLenError`.
fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} bytes")
}

/// `RegexError`: the message, its examples, the regular expression.
fn regex_error(message: &str, regex: &str, examples: &[&str]) -> String {
    let mut out = format!("{message} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{example}', "));
    }
    out.push_str(&format!("regex used for validation is '{regex}')"));
    out
}

fn empty_error() -> String {
    "must be non-empty".to_owned()
}

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`.
fn matches_label_key_name(text: &str) -> bool {
    let bytes = text.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(b))
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`.
fn matches_dns1123_label(text: &str) -> bool {
    let bytes = text.as_bytes();
    let lower_alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            lower_alnum(first)
                && lower_alnum(last)
                && bytes.iter().all(|b| lower_alnum(b) || *b == b'-')
        }
        _ => false,
    }
}

/// `^<label>(\.<label>)*$`.
fn matches_dns1123_subdomain(text: &str) -> bool {
    text.split('.').all(matches_dns1123_label)
}

/// `IsDNS1123Label`.
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !matches_dns1123_label(value) {
        if matches_dns1123_subdomain(value) {
            errs.push("must not contain dots".to_owned());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `IsDNS1123Subdomain`.
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !matches_dns1123_subdomain(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            &format!("{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*"),
            &["example.com"],
        ));
    }
    errs
}

/// `IsLabelKey` (`IsQualifiedName`): an optional DNS-1123 subdomain prefix and `/`, then a
/// name of at most 63 bytes.
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push(format!("prefix part {}", empty_error()));
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a valid label key {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(LABEL_KEY_MSG, LABEL_KEY_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push(format!("name part {}", empty_error()));
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !matches_label_key_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                LABEL_KEY_MSG,
                LABEL_KEY_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `IsLabelValue`: empty, or at most 63 bytes of the label key name's syntax.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !value.is_empty() && !matches_label_key_name(value) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            &format!("({LABEL_KEY_FMT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// `path.IsValidPathSegmentName` (RBAC object names).
fn is_valid_path_segment_name(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    ["/", "%"]
        .iter()
        .filter(|bad| name.contains(**bad))
        .map(|bad| format!("may not contain '{bad}'"))
        .collect()
}

/// The name rule of a resource, as its registry's `ValidateObjectMeta` call names it.
pub fn name_errors(resource: &str, name: &str) -> Vec<String> {
    match resource {
        "namespaces" => is_dns1123_label(name),
        "roles" | "rolebindings" | "clusterroles" | "clusterrolebindings" => {
            is_valid_path_segment_name(name)
        }
        _ => is_dns1123_subdomain(name),
    }
}

/// One `field.Invalid`: its field and detail, and the value it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub field: String,
    pub value: String,
    pub detail: String,
}

impl Invalid {
    /// `field.Error.Error`: `<field>: Invalid value: "<value>": <detail>`.
    pub fn text(&self) -> String {
        format!(
            "{}: Invalid value: {}: {}",
            self.field,
            Value::String(self.value.clone()),
            self.detail
        )
    }
}

/// What `ValidateObjectMeta` refuses in `object`'s name under `resource` and in its labels
/// (keys and values), in that order.
pub fn metadata_errors(resource: &str, name: &str, object: &Value) -> Vec<Invalid> {
    let mut out: Vec<Invalid> = name_errors(resource, name)
        .into_iter()
        .map(|detail| Invalid {
            field: "metadata.name".into(),
            value: name.to_owned(),
            detail,
        })
        .collect();
    out.extend(labels_errors(
        &object["metadata"]["labels"],
        "metadata.labels",
    ));
    out
}

/// `ValidateLabels` over a labels map at `field`: each key's `IsQualifiedName` errors, each
/// value's `IsValidLabelValue` errors.
pub fn labels_errors(labels: &Value, field: &str) -> Vec<Invalid> {
    let mut out = Vec::new();
    for (key, value) in labels.as_object().into_iter().flatten() {
        for detail in is_qualified_name(key) {
            out.push(Invalid {
                field: field.to_owned(),
                value: key.clone(),
                detail,
            });
        }
        let text = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_owned);
        for detail in is_valid_label_value(&text) {
            out.push(Invalid {
                field: field.to_owned(),
                value: text.clone(),
                detail,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_follow_is_valid_label_value() {
        assert!(is_valid_label_value("").is_empty());
        assert!(is_valid_label_value("env-20261129t211500-3fa9c1-x-1-ab12cd34").is_empty());
        assert!(is_valid_label_value("a.b_c-D9").is_empty());
        let long = "a".repeat(64);
        assert_eq!(is_valid_label_value(&long), vec![max_len_error(63)]);
        assert!(is_valid_label_value(&"a".repeat(63)).is_empty());
        let errs = is_valid_label_value("-leading");
        assert_eq!(errs.len(), 1);
        assert!(errs[0].starts_with("a valid label must be an empty string"));
        assert!(errs[0].ends_with(
            "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        ));
        assert_eq!(is_valid_label_value("a:b").len(), 1);
    }

    #[test]
    fn label_keys_follow_is_qualified_name() {
        assert!(is_qualified_name("app.kubernetes.io/instance").is_empty());
        assert!(is_qualified_name("plain").is_empty());
        assert_eq!(
            is_qualified_name("/x"),
            vec!["prefix part must be non-empty".to_owned()]
        );
        assert!(
            is_qualified_name("Upper.Case/x")[0]
                .starts_with("prefix part a lowercase RFC 1123 subdomain")
        );
        assert!(is_qualified_name("a/b/c")[0].starts_with("a valid label key must consist"));
        assert_eq!(
            is_qualified_name(&format!("x/{}", "n".repeat(64)))[0],
            "name part must be no more than 63 bytes"
        );
    }

    #[test]
    fn names_follow_each_resources_rule() {
        assert!(name_errors("pods", "kandev-0123456789abcdef").is_empty());
        assert!(name_errors("pods", "a.b").is_empty());
        assert!(!name_errors("pods", "Upper").is_empty());
        assert_eq!(
            name_errors("namespaces", "a.b"),
            vec!["must not contain dots".to_owned()]
        );
        assert!(!name_errors("namespaces", &"n".repeat(64)).is_empty());
        assert!(name_errors("pods", &"n".repeat(253)).is_empty());
        assert!(name_errors("roles", "system:kandev").is_empty());
        assert_eq!(
            name_errors("roles", "a/b"),
            vec!["may not contain '/'".to_owned()]
        );
    }

    #[test]
    fn an_error_reads_as_the_api_servers() {
        let pod =
            serde_json::json!({"metadata": {"labels": {"kandev.ai/instance-id": "x".repeat(64)}}});
        let errors = metadata_errors("pods", "p", &pod);
        assert_eq!(
            errors.iter().map(Invalid::text).collect::<Vec<_>>(),
            vec![format!(
                "metadata.labels: Invalid value: \"{}\": must be no more than 63 bytes",
                "x".repeat(64)
            )]
        );
    }
}
