//! Resources: each container's engine limits and the Pod cgroup's summed limits.

use super::{CGROUP_ROOT, PlanContext};
use crate::pod::compose::parse_quantity;
use k8s_openapi::api::core::v1::{Container, PodSpec};

/// Limits of the Pod-level cgroup (kubelet: a resource's Pod limit is the sum of the
/// containers' limits when every container has one; otherwise it is unlimited).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodCgroupLimits {
    /// Path of the Pod cgroup below each hierarchy's root, e.g. `kandev-acceptance/pod<uid>`.
    pub relative_path: String,
    pub memory_bytes: Option<i64>,
    pub cpu_millis: Option<i64>,
    pub pids: Option<i64>,
}

/// A container's `resources` as the engine's settings, as the kubelet maps them.
pub(super) struct ContainerResources {
    pub memory: Option<i64>,
    pub nano_cpus: Option<i64>,
    pub cpu_shares: Option<i64>,
}

impl ContainerResources {
    pub(super) fn of(c: &Container) -> Self {
        let limits = c
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .unwrap_or_default();
        let requests = c
            .resources
            .as_ref()
            .and_then(|r| r.requests.clone())
            .unwrap_or_default();
        let memory = limits.get("memory").and_then(|q| parse_quantity(q, false));
        let cpu_limit = limits.get("cpu").and_then(|q| parse_quantity(q, true));
        let cpu_request = requests
            .get("cpu")
            .or(limits.get("cpu"))
            .and_then(|q| parse_quantity(q, true));
        Self {
            memory,
            nano_cpus: cpu_limit.map(|m| m * 1_000_000),
            cpu_shares: cpu_request.map(|m| (m * 1024 / 1000).max(2)),
        }
    }
}

/// The engine's cgroup parent of every container of the Pod.
pub(super) fn cgroup_parent(ctx: &PlanContext) -> String {
    format!("/{CGROUP_ROOT}/pod{}", ctx.uid)
}

/// The Pod cgroup's limits: the containers' summed limits and the node's `podPidsLimit`.
pub(super) fn pod_cgroup_limits(spec: &PodSpec, ctx: &PlanContext) -> PodCgroupLimits {
    let sum = |select: &dyn Fn(&Container) -> Option<i64>| -> Option<i64> {
        spec.containers.iter().map(select).sum::<Option<i64>>()
    };
    let limit = |c: &Container, key: &str, milli: bool| {
        c.resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get(key))
            .and_then(|q| parse_quantity(q, milli))
    };
    PodCgroupLimits {
        relative_path: format!("{CGROUP_ROOT}/pod{}", ctx.uid),
        memory_bytes: sum(&|c| limit(c, "memory", false)),
        cpu_millis: sum(&|c| limit(c, "cpu", true)),
        pids: Some(ctx.pod_pids_limit),
    }
}
