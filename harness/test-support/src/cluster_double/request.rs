//! One request to a stored resource as its handlers see it ([`Ctx`]): who asks, the route,
//! the query, and which stored objects a list selects.

use super::route::{Route, matches_selector, param, parse_selector};
use super::status::{Reply, status};
use super::store::{DoubleState, Identity, Key, Store};
use hyper::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;

/// A request to a stored resource: who asks, where, with what query, and the apiVersion and
/// kind of the resource it names (what the verbs in `objects` and `rbac` work on).
pub(crate) struct Ctx<'a> {
    pub state: &'a Arc<DoubleState>,
    pub identity: &'a Identity,
    pub route: &'a Route,
    pub query: &'a [(String, String)],
    pub api_version: &'a str,
    pub kind: &'static str,
}

impl Ctx<'_> {
    pub(crate) fn key(&self, name: &str) -> Key {
        (
            self.route.key(),
            self.route.namespace.clone().unwrap_or_default(),
            name.to_owned(),
        )
    }

    /// Whether the request is a dry run: `dryRun=All` in the query, or (a DELETE's)
    /// `"dryRun": ["All"]` in its DeleteOptions (another value is not refused, as the real
    /// API server's `ValidateDryRun` refuses it: the corpus lists it as a difference).
    pub(crate) fn dry_run(&self, options: Option<&Value>) -> bool {
        self.query.iter().any(|(k, v)| k == "dryRun" && v == "All")
            || options
                .and_then(|o| o["dryRun"].as_array())
                .is_some_and(|values| values.iter().any(|v| v == "All"))
    }

    /// The `fieldSelector` of the request, checked: only the fields an API server selects
    /// on for the resource ([`selectable`]); any other field is 400, as the API server
    /// answers "field label not supported". Its `labelSelector` is checked here too (400
    /// when it does not parse, `route::parse_selector`).
    pub(crate) fn field_selector(&self) -> Result<Vec<(String, bool, String)>, Box<Reply>> {
        let refused = |message: String| {
            Box::new(status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &message,
                json!({}),
            ))
        };
        parse_selector(param(self.query, "labelSelector").unwrap_or("")).map_err(refused)?;
        let terms = param(self.query, "fieldSelector").unwrap_or("").split(',');
        let mut selected = Vec::new();
        for term in terms.map(str::trim).filter(|t| !t.is_empty()) {
            let (field, equal, value) = match term.split_once("!=") {
                Some((f, v)) => (f, false, v),
                None => match term.split_once("==").or_else(|| term.split_once('=')) {
                    Some((f, v)) => (f, true, v),
                    None => {
                        return Err(refused(format!(
                            "invalid selector: '{term}'; can't understand '{term}'"
                        )));
                    }
                },
            };
            let field = field.trim();
            if selectable(&self.route.resource, &Value::Null, field).is_none() {
                return Err(refused(format!("field label not supported: {field}")));
            }
            selected.push((field.to_owned(), equal, value.trim().to_owned()));
        }
        Ok(selected)
    }

    /// Whether `object` (of this request's resource) has the selected `fields`.
    pub(crate) fn fields_match(&self, object: &Value, fields: &[(String, bool, String)]) -> bool {
        fields.iter().all(|(field, equal, value)| {
            let actual = selectable(&self.route.resource, object, field).unwrap_or_default();
            (actual == *value) == *equal
        })
    }

    /// The stored objects of the route's resource and namespace its `labelSelector` selects
    /// (its `fieldSelector` is matched on them as shown: [`Ctx::fields_match`]).
    pub(crate) fn selected(&self, store: &Store) -> Vec<Value> {
        let labels = param(self.query, "labelSelector").unwrap_or("");
        store
            .objects
            .iter()
            .filter(|((r, ns, _), o)| {
                *r == self.route.key()
                    && self.route.namespace.as_ref().is_none_or(|want| want == ns)
                    && matches_selector(&o["metadata"]["labels"], labels)
            })
            .map(|(_, o)| o.clone())
            .collect()
    }
}

/// The value of `field` a field selector compares for `object` of `resource`, as the
/// resource's registry sets its selectable fields; None for a field it does not select on
/// (`field label not supported`). Every resource: `metadata.name` and `metadata.namespace`
/// (`generic.ObjectMetaFieldsSet`). Pods: `PodToSelectableFields` (kubernetes
/// `pkg/registry/core/pod/strategy.go`: the first Pod IP, `hostNetwork` as `true`/`false`);
/// core/v1 Events: `ToSelectableFields` (`pkg/registry/core/event/strategy.go`: the involved
/// object's fields, `reason`, `type`, `reportingComponent` and `source`, the source's
/// component or else the reporting component). Others' own fields (a Namespace's phase, a
/// Secret's type, ...) are not selected on: the harness selects Pods and Events only.
pub(crate) fn selectable(resource: &str, object: &Value, field: &str) -> Option<String> {
    let text = |pointer: &str| match object.pointer(pointer) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let path = format!("/{}", field.replace('.', "/"));
    Some(match (resource, field) {
        (_, "metadata.name" | "metadata.namespace") => text(&path),
        (
            "pods",
            "spec.nodeName"
            | "spec.schedulerName"
            | "spec.serviceAccountName"
            | "status.phase"
            | "status.nominatedNodeName",
        ) => text(&path),
        ("pods", "spec.hostNetwork") => (object["spec"]["hostNetwork"] == true).to_string(),
        ("pods", "status.podIP") => text("/status/podIPs/0/ip"),
        (
            "events",
            "reason"
            | "type"
            | "reportingComponent"
            | "involvedObject.kind"
            | "involvedObject.namespace"
            | "involvedObject.name"
            | "involvedObject.uid"
            | "involvedObject.apiVersion"
            | "involvedObject.resourceVersion"
            | "involvedObject.fieldPath",
        ) => text(&path),
        ("events", "source") => match text("/source/component") {
            source if source.is_empty() => text("/reportingComponent"),
            source => source,
        },
        _ => return None,
    })
}
