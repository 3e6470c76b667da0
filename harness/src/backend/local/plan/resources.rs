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

/// The `oom_score_adj` a kubelet gives every process of `c` (Kubernetes v1.37,
/// `pkg/kubelet/qos/policy.go`, `GetContainerOOMScoreAdjust`): 1000 in a BestEffort Pod, and
/// in a Burstable one `1000 - 1000 * memory request / node memory`, kept within 3..=999. A
/// Docker companion inherits it and the nested containers its daemon starts get the engine's
/// 0, so a recipe that does not lower its daemon's score loses the daemon to a nested memory
/// hog (what real Kind showed). `None` for a Guaranteed Pod (the kubelet's -997): lowering a
/// score needs CAP_SYS_RESOURCE, which an engine may lack (this project's machines do), so
/// this backend leaves that Pod at the engine's 0 rather than fail its start.
pub(super) fn oom_score_adj(spec: &PodSpec, c: &Container, node_memory: i64) -> Option<i64> {
    let quantity = |c: &Container, list: &str, key: &str| {
        let r = c.resources.as_ref()?;
        let map = if list == "limits" {
            r.limits.as_ref()
        } else {
            r.requests.as_ref()
        }?;
        map.get(key).and_then(|q| parse_quantity(q, key == "cpu"))
    };
    // An unset request is the limit (the API server defaults it so), as GetPodQOS reads it.
    let request = |c: &Container, key: &str| {
        quantity(c, "requests", key).or_else(|| quantity(c, "limits", key))
    };
    let all = || {
        spec.containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
    };
    let keys = ["cpu", "memory"];
    // pkg/apis/core/v1/helper/qos GetPodQOS.
    if all().all(|c| keys.iter().all(|k| request(c, k).is_none())) {
        return Some(1000);
    }
    let guaranteed = all().all(|c| {
        keys.iter()
            .all(|k| quantity(c, "limits", k).is_some_and(|l| request(c, k) == Some(l)))
    });
    if guaranteed || node_memory <= 0 {
        return None;
    }
    let memory_request = request(c, "memory").unwrap_or(0);
    let adj = 1000 - (1000 * memory_request) / node_memory;
    Some(adj.clamp(3, 999))
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
