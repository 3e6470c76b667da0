//! One request to a stored resource as its handlers see it ([`Ctx`]): who asks, the route,
//! the query, and which stored objects a list or watch selects.

use super::route::{Route, matches_selector, param};
use super::status::{Reply, status};
use super::store::{DoubleState, Identity, Key, Store};
use hyper::StatusCode;
use serde_json::{Value, json};
use std::sync::Arc;

/// A request to a stored resource: who asks, where, with what query, and the apiVersion and
/// kind of the resource it names (what the verbs in `objects`, `watch` and `rbac` work on).
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

    /// The `fieldSelector` of the request, checked: only the fields an API server
    /// selects on for every object (`metadata.name`, `metadata.namespace`) and, for Pods,
    /// `spec.nodeName` and `spec.serviceAccountName`; any other field is 400, as the API
    /// server answers "field label not supported".
    pub(crate) fn field_selector(&self) -> Result<Vec<(String, bool, String)>, Box<Reply>> {
        let mut terms = Vec::new();
        for term in param(self.query, "fieldSelector")
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (f, true, v)
            } else {
                return Err(Box::new(status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    &format!("invalid selector: '{term}'; can't understand '{term}'"),
                    json!({}),
                )));
            };
            let field = field.trim();
            // A Pod's selectable fields: `PodToSelectableFields` in
            // pkg/registry/core/pod/strategy.go (`kubectl describe node` selects its Pods by
            // `spec.nodeName` and `status.phase`).
            let supported = matches!(field, "metadata.name" | "metadata.namespace")
                || (self.route.resource == "pods"
                    && matches!(
                        field,
                        "spec.nodeName"
                            | "spec.serviceAccountName"
                            | "spec.restartPolicy"
                            | "spec.schedulerName"
                            | "status.phase"
                            | "status.podIP"
                    ));
            if !supported {
                return Err(Box::new(status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    &format!("field label not supported: {field}"),
                    json!({}),
                )));
            }
            terms.push((field.to_owned(), equal, value.trim().to_owned()));
        }
        Ok(terms)
    }

    /// Whether this list or watch selects the object (the route's resource and namespace,
    /// `labelSelector`, `fieldSelector`, and `name` for a watch of one object).
    pub(crate) fn matches(
        &self,
        (r, ns, n): &Key,
        object: &Value,
        fields: &[(String, bool, String)],
        name: Option<&str>,
    ) -> bool {
        let labels = param(self.query, "labelSelector").unwrap_or("");
        *r == self.route.key()
            && self.route.namespace.as_ref().is_none_or(|want| want == ns)
            && name.is_none_or(|want| want == n)
            && matches_selector(&object["metadata"]["labels"], labels)
            && fields.iter().all(|(field, equal, value)| {
                let pointer = format!("/{}", field.replace('.', "/"));
                let actual = object
                    .pointer(&pointer)
                    .and_then(Value::as_str)
                    .unwrap_or("");
                (actual == value) == *equal
            })
    }

    /// The stored objects this list or watch selects.
    pub(crate) fn selected(
        &self,
        store: &Store,
        fields: &[(String, bool, String)],
        name: Option<&str>,
    ) -> Vec<(Key, Value)> {
        store
            .objects
            .iter()
            .filter(|(k, o)| self.matches(k, o, fields, name))
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect()
    }
}
