//! What a Pod asks of a node (its CPU and memory requests) and what it may use at most (its
//! limits), summed as Kubernetes sums them: the cluster's scheduler places a Pod by the
//! first, a ResourceQuota counts both, and the harness sizes `--jobs` on a cluster from the
//! first.
//!
//! The rule is `PodRequests` / `PodLimits` in
//! `staging/src/k8s.io/component-helpers/resource/helpers.go`: per resource, the sum over the
//! app containers and the restartable (sidecar) init containers, or the largest ordinary
//! init container if that is larger, plus `spec.overhead`; Pod-level `spec.resources` when
//! set. A container that sets a limit and no request requests its limit (the API server's
//! defaulting, `SetDefaults_Container` via `defaultResourceRequirements`), so templates and
//! stored Pods sum alike.

use super::compose::parse_quantity;
use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

/// CPU (millicores) and memory (bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Amounts {
    pub cpu_millis: i64,
    pub memory_bytes: i64,
}

impl Amounts {
    fn max(self, other: Amounts) -> Amounts {
        Amounts {
            cpu_millis: self.cpu_millis.max(other.cpu_millis),
            memory_bytes: self.memory_bytes.max(other.memory_bytes),
        }
    }

    fn add(self, other: Amounts) -> Amounts {
        Amounts {
            cpu_millis: self.cpu_millis.saturating_add(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_add(other.memory_bytes),
        }
    }

    /// `cpu` and `memory` of a resource list (absent ones are zero).
    pub fn of(list: &BTreeMap<String, Quantity>) -> Amounts {
        Amounts {
            cpu_millis: list
                .get("cpu")
                .and_then(|q| parse_quantity(q, true))
                .unwrap_or(0),
            memory_bytes: list
                .get("memory")
                .and_then(|q| parse_quantity(q, false))
                .unwrap_or(0),
        }
    }
}

/// Requests or limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Requests,
    Limits,
}

/// A container's requests (each defaulted to its limit) or limits.
fn of_container(resources: Option<&ResourceRequirements>, kind: Kind) -> Amounts {
    let Some(resources) = resources else {
        return Amounts::default();
    };
    let empty = BTreeMap::new();
    let limits = resources.limits.as_ref().unwrap_or(&empty);
    match kind {
        Kind::Limits => Amounts::of(limits),
        Kind::Requests => {
            let mut requests = resources.requests.clone().unwrap_or_default();
            for (name, limit) in limits {
                requests
                    .entry(name.clone())
                    .or_insert_with(|| limit.clone());
            }
            Amounts::of(&requests)
        }
    }
}

/// Whether a limit on `resource` is set on every container the quota counts (app and
/// init), as the quota admission plugin requires of a constrained `limits.*` resource.
pub fn every_container_sets(spec: &PodSpec, kind: &str, resource: &str) -> bool {
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .all(|c| {
            let resources = c.resources.as_ref();
            let set = |list: Option<&BTreeMap<String, Quantity>>| {
                list.is_some_and(|l| l.contains_key(resource))
            };
            match kind {
                "limits" => set(resources.and_then(|r| r.limits.as_ref())),
                // A request is set when given, or defaulted from a limit.
                _ => {
                    set(resources.and_then(|r| r.requests.as_ref()))
                        || set(resources.and_then(|r| r.limits.as_ref()))
                }
            }
        })
}

fn sum(spec: &PodSpec, kind: Kind) -> Amounts {
    if let Some(pod_level) = &spec.resources {
        let amounts = of_container(Some(pod_level), kind);
        if amounts != Amounts::default() {
            return amounts;
        }
    }
    let restartable = |c: &&Container| c.restart_policy.as_deref() == Some("Always");
    let mut app = spec
        .containers
        .iter()
        .map(|c| of_container(c.resources.as_ref(), kind))
        .fold(Amounts::default(), Amounts::add);
    // Sidecars run beside the app containers: they add up; each ordinary init container runs
    // alone, after the sidecars started before it.
    let mut sidecars = Amounts::default();
    let mut init_peak = Amounts::default();
    for c in spec.init_containers.iter().flatten() {
        let own = of_container(c.resources.as_ref(), kind);
        if restartable(&c) {
            sidecars = sidecars.add(own);
            init_peak = init_peak.max(sidecars);
        } else {
            init_peak = init_peak.max(sidecars.add(own));
        }
    }
    app = app.add(sidecars);
    let overhead = spec.overhead.as_ref().map(Amounts::of).unwrap_or_default();
    app.max(init_peak).add(overhead)
}

/// The Pod's requests, as the scheduler counts them against a node's allocatable.
pub fn requests(spec: &PodSpec) -> Amounts {
    sum(spec, Kind::Requests)
}

/// The Pod's limits, as a ResourceQuota counts `limits.cpu` and `limits.memory`.
pub fn limits(spec: &PodSpec) -> Amounts {
    sum(spec, Kind::Limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(value: serde_json::Value) -> PodSpec {
        serde_json::from_value(value).unwrap_or_default()
    }

    #[test]
    fn requests_sum_app_containers_and_default_to_limits() {
        let s = spec(serde_json::json!({"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "512Mi"},
                "limits": {"cpu": "2", "memory": "4Gi"}}},
            {"name": "b", "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}},
            {"name": "c"},
        ]}));
        assert_eq!(
            requests(&s),
            Amounts {
                cpu_millis: 750,
                memory_bytes: (512 + 1024) << 20
            }
        );
        assert_eq!(
            limits(&s),
            Amounts {
                cpu_millis: 2500,
                memory_bytes: 5 << 30
            }
        );
        assert!(!every_container_sets(&s, "requests", "cpu"));
        assert!(!every_container_sets(&s, "limits", "memory"));
    }

    #[test]
    fn the_largest_init_container_counts_when_it_is_larger() {
        let s = spec(serde_json::json!({
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "3"}}}],
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
            "overhead": {"cpu": "100m"}}));
        assert_eq!(
            requests(&s),
            Amounts {
                cpu_millis: 3100,
                memory_bytes: 1 << 30
            }
        );
    }
}
