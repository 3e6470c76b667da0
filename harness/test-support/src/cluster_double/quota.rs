//! A namespace's ResourceQuotas and LimitRanges, as their admission plugins apply them to a
//! Pod being created.
//!
//! - `LimitRanger` (mutating, `plugin/pkg/admission/limitranger/admission.go`,
//!   `defaultContainerResourceRequirements` and `mergeContainerResources`): a container of a
//!   Pod in a namespace with a `Container` LimitRange gets the range's `default` as each limit
//!   it does not set and `defaultRequest` (else the default limit) as each request, and the
//!   Pod the annotation `kubernetes.io/limit-ranger` saying so.
//! - `ResourceQuota` (validating, `staging/src/k8s.io/apiserver/pkg/admission/plugin/
//!   resourcequota/controller.go`, `checkQuotas`): for every quota whose `hard` constrains
//!   CPU or memory, every container (and init container) must set that resource itself
//!   (`podEvaluator.Constraints` in `pkg/quota/v1/evaluator/core/pods.go`,
//!   `enforcePodContainerConstraints`): else 403 `failed quota: <quota>: must specify
//!   <resource> for: <containers>; ...`; and the namespace's use plus the Pod's must stay
//!   within `hard`: else 403 `exceeded quota: <quota>, requested: ..., used: ..., limited:
//!   ...`. Counted: `pods`, `cpu`/`requests.cpu`, `memory`/`requests.memory`,
//!   `limits.cpu`, `limits.memory`, over the namespace's Pods that have not ended (the
//!   evaluator's `QuotaV1Pod`). Other quota resources are not enforced.
//!
//! The quota controller's part (`status.hard` copied from `spec.hard`, `status.used`) is
//! written when the quota is created (`status.used` then, not kept up to date).

use super::store::Store;
use kandev_harness::pod::requests::{Amounts, limits, requests};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// The resources the quota's Pod evaluator requires every container to set (its
/// `validationSet`).
const CONSTRAINED: [&str; 6] = [
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

fn in_namespace<'a>(
    store: &'a Store,
    resource: &'a str,
    namespace: &'a str,
) -> impl Iterator<Item = &'a Value> + 'a {
    store
        .of_resource(resource)
        .filter(move |o| o["metadata"]["namespace"] == namespace)
}

/// `LimitRanger`: fills the defaults of the namespace's `Container` limit ranges into `pod`.
pub(crate) fn apply_limit_ranges(store: &Store, namespace: &str, pod: &mut Value) {
    let mut notes: Vec<String> = Vec::new();
    for range in in_namespace(store, "limitranges", namespace) {
        for item in range["spec"]["limits"].as_array().into_iter().flatten() {
            if item["type"] != "Container" {
                continue;
            }
            let (default, request) = (&item["default"], &item["defaultRequest"]);
            for list in ["initContainers", "containers"] {
                for c in pod["spec"][list].as_array_mut().into_iter().flatten() {
                    let name = c["name"].as_str().unwrap_or_default().to_owned();
                    let mut set = Vec::new();
                    for resource in ["cpu", "memory"] {
                        if !default[resource].is_null()
                            && c["resources"]["limits"][resource].is_null()
                        {
                            c["resources"]["limits"][resource] = default[resource].clone();
                            set.push(format!("{resource} limit"));
                        }
                        let wanted = if request[resource].is_null() {
                            &default[resource]
                        } else {
                            &request[resource]
                        };
                        if !wanted.is_null() && c["resources"]["requests"][resource].is_null() {
                            c["resources"]["requests"][resource] = wanted.clone();
                            set.push(format!("{resource} request"));
                        }
                    }
                    if !set.is_empty() {
                        notes.push(format!("{} for container {name}", set.join(", ")));
                    }
                }
            }
        }
    }
    if !notes.is_empty() {
        pod["metadata"]["annotations"]["kubernetes.io/limit-ranger"] =
            json!(format!("LimitRanger plugin set: {}", notes.join("; ")));
    }
}

/// What a Pod counts for, by quota resource name.
fn usage(pod: &Value) -> BTreeMap<&'static str, i64> {
    let spec = serde_json::from_value(pod["spec"].clone()).unwrap_or_default();
    let (r, l): (Amounts, Amounts) = (requests(&spec), limits(&spec));
    BTreeMap::from([
        ("pods", 1),
        ("cpu", r.cpu_millis),
        ("requests.cpu", r.cpu_millis),
        ("memory", r.memory_bytes),
        ("requests.memory", r.memory_bytes),
        ("limits.cpu", l.cpu_millis),
        ("limits.memory", l.memory_bytes),
    ])
}

/// A quota resource's amount as a number of the unit [`usage`] counts in.
fn amount(resource: &str, quantity: &Value) -> Option<i64> {
    let text = quantity
        .as_str()
        .map_or_else(|| quantity.to_string(), str::to_owned);
    let q = k8s_openapi::apimachinery::pkg::api::resource::Quantity(text);
    match resource {
        "pods" => q.0.parse().ok(),
        r if r.ends_with("cpu") => kandev_harness::pod::compose::parse_quantity(&q, true),
        _ => kandev_harness::pod::compose::parse_quantity(&q, false),
    }
}

/// An amount as a quantity reads (`600m`, `2`, `512Mi`).
fn shown(resource: &str, value: i64) -> String {
    if resource == "pods" {
        return value.to_string();
    }
    if resource.ends_with("cpu") {
        return if value % 1000 == 0 {
            (value / 1000).to_string()
        } else {
            format!("{value}m")
        };
    }
    for (suffix, size) in [("Gi", 1i64 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)] {
        if value != 0 && value % size == 0 {
            return format!("{}{suffix}", value / size);
        }
    }
    value.to_string()
}

/// `prettyPrint`: `name=value` pairs, sorted by name, joined by `,`.
fn pretty(pairs: &BTreeMap<&str, String>) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `ResourceQuota`: why the quotas of `namespace` refuse `pod` (defaulted), in the plugin's
/// words (the message after `pods "<name>" is forbidden: `). `ended` are the UIDs of Pods
/// that no longer count.
pub(crate) fn refused(store: &Store, namespace: &str, pod: &Value) -> Option<String> {
    let wanted = usage(pod);
    for quota in in_namespace(store, "resourcequotas", namespace) {
        let name = quota["metadata"]["name"].as_str().unwrap_or_default();
        let hard = quota["spec"]["hard"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        // Constraints: each constrained resource set by every container itself.
        let required: BTreeSet<&str> = CONSTRAINED
            .iter()
            .copied()
            .filter(|r| hard.contains_key(*r))
            .collect();
        let mut missing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        for list in ["containers", "initContainers"] {
            for c in pod["spec"][list].as_array().into_iter().flatten() {
                let set = |kind: &str, r: &str| !c["resources"][kind][r].is_null();
                for resource in &required {
                    let has = match *resource {
                        "cpu" | "requests.cpu" => set("requests", "cpu"),
                        "memory" | "requests.memory" => set("requests", "memory"),
                        "limits.cpu" => set("limits", "cpu"),
                        _ => set("limits", "memory"),
                    };
                    if !has {
                        missing
                            .entry(resource)
                            .or_default()
                            .insert(c["name"].as_str().unwrap_or_default().to_owned());
                    }
                }
            }
        }
        if !missing.is_empty() {
            let parts: Vec<String> = missing
                .iter()
                .map(|(r, names)| {
                    format!(
                        "{r} for: {}",
                        names.iter().cloned().collect::<Vec<_>>().join(",")
                    )
                })
                .collect();
            return Some(format!(
                "failed quota: {name}: must specify {}",
                parts.join("; ")
            ));
        }
        // Usage within hard.
        let mut used: BTreeMap<&str, i64> = BTreeMap::new();
        for other in in_namespace(store, "pods", namespace) {
            let uid = other["metadata"]["uid"].as_str().unwrap_or_default();
            if store.ended.contains(uid) || other["metadata"]["uid"] == pod["metadata"]["uid"] {
                continue;
            }
            for (r, v) in usage(other) {
                *used.entry(r).or_default() += v;
            }
        }
        let mut requested = BTreeMap::new();
        let mut was = BTreeMap::new();
        let mut limited = BTreeMap::new();
        for (resource, limit) in &hard {
            let (Some(&want), Some(limit)) =
                (wanted.get(resource.as_str()), amount(resource, limit))
            else {
                continue;
            };
            let so_far = used.get(resource.as_str()).copied().unwrap_or(0);
            if want > 0 && so_far + want > limit {
                requested.insert(resource.as_str(), shown(resource, want));
                was.insert(resource.as_str(), shown(resource, so_far));
                limited.insert(resource.as_str(), shown(resource, limit));
            }
        }
        if !requested.is_empty() {
            return Some(format!(
                "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
                pretty(&requested),
                pretty(&was),
                pretty(&limited)
            ));
        }
    }
    None
}

/// The quota controller's first status of a new quota: `hard` as specified, nothing used.
pub(crate) fn initial_status(quota: &mut Value) {
    let hard = quota["spec"]["hard"].clone();
    let used: serde_json::Map<String, Value> = hard
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, _)| (k.clone(), json!("0")))
        .collect();
    quota["status"] = json!({"hard": hard, "used": used});
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with_quota(hard: Value) -> Store {
        let mut store = Store::default();
        store.create(
            ("/resourcequotas".into(), "ns".into(), "q".into()),
            json!({"kind": "ResourceQuota", "metadata": {"name": "q", "namespace": "ns"},
                "spec": {"hard": hard}}),
        );
        store
    }

    fn pod(resources: Value) -> Value {
        json!({"metadata": {"namespace": "ns", "uid": "new"},
            "spec": {"containers": [{"name": "a", "resources": resources}, {"name": "b", "resources": resources}]}})
    }

    #[test]
    fn a_pod_without_the_constrained_resource_is_refused_naming_it_and_its_containers() {
        let store = store_with_quota(json!({"limits.cpu": "4", "limits.memory": "4Gi"}));
        assert_eq!(
            refused(&store, "ns", &pod(json!({}))).as_deref(),
            Some("failed quota: q: must specify limits.cpu for: a,b; limits.memory for: a,b")
        );
        let fine = pod(json!({"limits": {"cpu": "1", "memory": "1Gi"}}));
        assert_eq!(refused(&store, "ns", &fine), None);
        assert_eq!(refused(&store, "other", &pod(json!({}))), None);
    }

    #[test]
    fn usage_beyond_hard_is_exceeded_in_the_plugins_words() {
        let mut store = store_with_quota(json!({"requests.cpu": "1"}));
        let running = json!({"kind": "Pod", "metadata": {"namespace": "ns", "uid": "old", "name": "old"},
            "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "600m"}}}]}});
        store.put(("/pods".into(), "ns".into(), "old".into()), running);
        let new = json!({"metadata": {"namespace": "ns", "uid": "new"},
            "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "500m"}}}]}});
        assert_eq!(
            refused(&store, "ns", &new).as_deref(),
            Some(
                "exceeded quota: q, requested: requests.cpu=500m, used: requests.cpu=600m, limited: requests.cpu=1"
            )
        );
        store.ended.insert("old".into());
        assert_eq!(refused(&store, "ns", &new), None);
    }

    #[test]
    fn a_limit_range_fills_in_defaults() {
        let mut store = Store::default();
        store.create(
            ("/limitranges".into(), "ns".into(), "l".into()),
            json!({"kind": "LimitRange", "metadata": {"name": "l", "namespace": "ns"},
                "spec": {"limits": [{"type": "Container", "default": {"cpu": "1", "memory": "1Gi"},
                    "defaultRequest": {"cpu": "100m"}}]}}),
        );
        let mut p = pod(json!({}));
        apply_limit_ranges(&store, "ns", &mut p);
        let r = &p["spec"]["containers"][0]["resources"];
        assert_eq!(r["limits"], json!({"cpu": "1", "memory": "1Gi"}));
        assert_eq!(r["requests"], json!({"cpu": "100m", "memory": "1Gi"}));
        assert!(
            p["metadata"]["annotations"]["kubernetes.io/limit-ranger"]
                .as_str()
                .unwrap()
                .starts_with("LimitRanger plugin set: cpu limit, cpu request, memory limit, memory request for container a")
        );
    }
}
