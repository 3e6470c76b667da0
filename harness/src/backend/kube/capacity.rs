//! How many task Pods a cluster can hold at once, for `--jobs` when it is not given: each
//! node the task Pod can be placed on (`placement`: the run's architecture, the template's
//! tolerations, `nodeSelector` and required affinity) offers its allocatable CPU, memory and Pod
//! slots less what the Pods bound there (and not ended) already request, as the scheduler's
//! `NodeResourcesFit` counts them; a session's Pod needs what the template requests (summed
//! as the scheduler sums a Pod's requests). More scenarios at once than that would only leave
//! Pods `Unschedulable` until others end (waited on, but spending the scenarios' budgets).
//! Read with the operator's identity, which must list nodes and Pods cluster-wide; when it
//! cannot, nothing is derived and the run says why.

use crate::pod::compose::Arch;
use crate::pod::requests::{Amounts, requests};
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

/// The sessions a cluster can hold at once, and the evidence (per node).
#[derive(Debug, Clone, PartialEq)]
pub struct Capacity {
    pub sessions: usize,
    pub evidence: Value,
}

/// `allocatable - requested`, floored at zero, per resource; with the Pod slots left.
fn fits(allocatable: Amounts, pods: i64, requested: Amounts, bound: i64, per: Amounts) -> i64 {
    let slots = (pods - bound).max(0);
    let by = |free: i64, need: i64| {
        if need <= 0 {
            i64::MAX
        } else {
            free.max(0) / need
        }
    };
    by(
        allocatable.cpu_millis - requested.cpu_millis,
        per.cpu_millis,
    )
    .min(by(
        allocatable.memory_bytes - requested.memory_bytes,
        per.memory_bytes,
    ))
    .min(slots)
}

/// How many Pods of `template` (requesting `per`) the `nodes` it can be placed on
/// (`placement::excluded`) hold beside the bound `pods` (pure).
pub fn sessions_that_fit(
    nodes: &[Node],
    pods: &[Pod],
    arch: Arch,
    template: &PodSpec,
    per: Amounts,
) -> Capacity {
    let mut total: i64 = 0;
    let mut shown = Vec::new();
    for node in nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        if let Some(why) = super::placement::excluded(node, template, Some(arch)) {
            shown.push(json!({"node": name, "counted": false, "why": why}));
            continue;
        }
        let list = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.clone())
            .unwrap_or_default();
        let allocatable = Amounts::of(&list);
        let max_pods: i64 = list
            .get("pods")
            .and_then(|q| q.0.parse().ok())
            .unwrap_or(110);
        let mut requested = Amounts::default();
        let mut bound = 0i64;
        for pod in pods {
            let spec = pod.spec.clone().unwrap_or_default();
            let phase = pod
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default();
            if spec.node_name.as_deref() != Some(name.as_str())
                || phase == "Succeeded"
                || phase == "Failed"
            {
                continue;
            }
            let r = requests(&spec);
            requested.cpu_millis += r.cpu_millis;
            requested.memory_bytes += r.memory_bytes;
            bound += 1;
        }
        let here = fits(allocatable, max_pods, requested, bound, per);
        total = total.saturating_add(here);
        shown.push(json!({"node": name, "counted": true,
            "allocatable": {"cpu_millis": allocatable.cpu_millis, "memory_bytes": allocatable.memory_bytes, "pods": max_pods},
            "requested": {"cpu_millis": requested.cpu_millis, "memory_bytes": requested.memory_bytes, "pods": bound},
            "sessions": here}));
    }
    let sessions = usize::try_from(total).unwrap_or(usize::MAX);
    Capacity {
        sessions,
        evidence: json!({
            "per_session": {"cpu_millis": per.cpu_millis, "memory_bytes": per.memory_bytes},
            "nodes": shown,
            "sessions": sessions,
        }),
    }
}

/// Reads the nodes and Pods with `admin` and counts (see [`sessions_that_fit`]).
pub async fn read(admin: &kube::Client, arch: Arch, template: &PodSpec) -> kube::Result<Capacity> {
    let lp = ListParams::default();
    let nodes = Api::<Node>::all(admin.clone()).list(&lp).await?.items;
    let pods = Api::<Pod>::all(admin.clone()).list(&lp).await?.items;
    Ok(sessions_that_fit(
        &nodes,
        &pods,
        arch,
        template,
        requests(template),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, cpu: &str, memory: &str, extra: Value) -> Node {
        let mut value = json!({"metadata": {"name": name, "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
            "spec": {}, "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}});
        if let (Some(spec), Some(extra)) = (value["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        serde_json::from_value(value).unwrap_or_default()
    }

    fn pod(node: &str, cpu: &str, phase: &str) -> Pod {
        serde_json::from_value(json!({"spec": {"nodeName": node, "containers": [
            {"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}]},
            "status": {"phase": phase}}))
        .unwrap_or_default()
    }

    /// Issue 32's case: a 4-vCPU Kind node whose system Pods request 950m, a template
    /// requesting 500m: 6 sessions fit, not the 8 a host-derived `--jobs` would start.
    #[test]
    fn what_is_left_on_each_node_counts() {
        let nodes = [
            node("kind", "4", "16Gi", json!({})),
            node(
                "cp",
                "8",
                "16Gi",
                json!({"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}),
            ),
        ];
        let pods = [
            pod("kind", "950m", "Running"),
            pod("kind", "2", "Succeeded"),
            pod("cp", "1", "Running"),
        ];
        let per = Amounts {
            cpu_millis: 500,
            memory_bytes: 1 << 30,
        };
        let capacity = sessions_that_fit(&nodes, &pods, Arch::Amd64, &PodSpec::default(), per);
        assert_eq!(capacity.sessions, 6, "{}", capacity.evidence);
        assert_eq!(
            sessions_that_fit(&nodes, &pods, Arch::Arm64, &PodSpec::default(), per).sessions,
            0
        );
    }

    /// A control plane that admits tolerating Pods, and a node the template's selector leaves
    /// out: `--jobs` counts what the task Pod can really be placed on.
    #[test]
    fn taints_tolerations_and_the_node_selector_decide_which_nodes_count() {
        let control_plane = json!({"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]});
        let mut other_pool = node("batch", "4", "16Gi", json!({}));
        other_pool
            .metadata
            .labels
            .get_or_insert_default()
            .insert("pool".into(), "batch".into());
        let mut agents = node("agents", "2", "16Gi", json!({}));
        agents
            .metadata
            .labels
            .get_or_insert_default()
            .insert("pool".into(), "agents".into());
        let mut cp = node("cp", "4", "16Gi", control_plane);
        cp.metadata
            .labels
            .get_or_insert_default()
            .insert("pool".into(), "agents".into());
        let nodes = [other_pool, agents, cp];
        let per = Amounts {
            cpu_millis: 1000,
            memory_bytes: 1 << 30,
        };
        let counted = |template: Value| {
            let template: PodSpec = serde_json::from_value(template).unwrap_or_default();
            sessions_that_fit(&nodes, &[], Arch::Amd64, &template, per)
        };
        // No selector, no toleration: the two untainted nodes.
        assert_eq!(counted(json!({"containers": []})).sessions, 6);
        // The agents pool only.
        let selected = counted(json!({"containers": [], "nodeSelector": {"pool": "agents"}}));
        assert_eq!(selected.sessions, 2, "{}", selected.evidence);
        assert_eq!(
            selected.evidence["nodes"][0]["why"],
            json!("nodeSelector pool=agents does not match (batch)")
        );
        // The agents pool, its control plane tolerated.
        let tolerating = counted(json!({"containers": [], "nodeSelector": {"pool": "agents"},
            "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]}));
        assert_eq!(tolerating.sessions, 6, "{}", tolerating.evidence);
    }
}
