//! Which architecture a cluster's task Pods are pinned to (`nodeSelector kubernetes.io/arch`,
//! as Kandev composes it from its profile's `platform`): `--platform` when given, else the
//! one the cluster's schedulable nodes carry (their `kubernetes.io/arch` label, which every
//! kubelet registers). Not the machine the harness runs on: an arm64 laptop driving an amd64
//! cluster would pin every Pod to nodes that do not exist, and the preflight's dry run (which
//! does not schedule) could not see it.

use crate::pod::compose::Arch;
use k8s_openapi::api::core::v1::{Node, PodSpec};
use kube::api::{Api, ListParams};
use std::collections::BTreeMap;

/// The arch a run's Pods are pinned to and how it was chosen (the report's set-up evidence).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Platform {
    pub arch: Arch,
    /// `--platform`, `nodes`, or `this Pod's node` (in the cluster, when the nodes cannot
    /// be read: the harness runs on one of them).
    pub from: &'static str,
    /// Each counted node's `kubernetes.io/arch`, when they were read.
    pub nodes: BTreeMap<String, String>,
}

/// Why no architecture could be chosen.
#[derive(Debug, thiserror::Error)]
pub enum PlatformError {
    #[error(
        "the cluster's nodes could not be read to learn their architecture ({source}); fix: pass --platform linux/amd64 or linux/arm64"
    )]
    NodesUnreadable { source: kube::Error },
    #[error(
        "the cluster's schedulable nodes have no one architecture ({found}); fix: pass --platform linux/amd64 or linux/arm64 to pin the Pods to one of them"
    )]
    Disagree { found: String },
}

/// The architecture an ELF executable is built for, from its header's `e_machine` (bytes
/// 18-19, little-endian on both: 62 x86-64, 183 AArch64; the System V ABI's ELF header).
/// None: not a 64-bit little-endian ELF of either.
pub fn elf_arch(header: &[u8]) -> Option<Arch> {
    let magic = header.get(..6)?;
    if magic != b"\x7fELF\x02\x01" {
        return None;
    }
    match u16::from_le_bytes([*header.get(18)?, *header.get(19)?]) {
        62 => Some(Arch::Amd64),
        183 => Some(Arch::Arm64),
        _ => None,
    }
}

/// `Err(the fix)` unless the mock agent uploaded into every task Pod (`agent`, its first
/// bytes) runs on the architecture the Pods are pinned to: a mismatch would fail every
/// session with "exec format error", after the Pods started.
pub fn check_agent_runs_on(agent: &[u8], platform: &Platform) -> Result<(), String> {
    match elf_arch(agent) {
        Some(arch) if arch == platform.arch => Ok(()),
        Some(arch) => Err(format!(
            "the mock agent binary uploaded into every task Pod is built for linux/{}, but the run's Pods are pinned to linux/{} (from {}): every session would fail with exec format error; nothing ran\n  fix: run the harness from a linux/{} machine (for `launch`, build its harness image on one), or pass --platform linux/{} if the cluster has such nodes",
            arch.as_str(),
            platform.arch.as_str(),
            platform.from,
            platform.arch.as_str(),
            arch.as_str()
        )),
        None => Err(
            "the mock agent binary is no 64-bit ELF executable for linux/amd64 or linux/arm64\n  fix: rebuild it (cargo build -p kandev-mock-agent), or remove its cache (~/.cache/kandev-acceptance/mock-agent-*)".into(),
        ),
    }
}

/// The architecture `nodes` agree on: that of the nodes the template's Pod can be placed on
/// (`placement::excluded`: not cordoned, its taints tolerated, its `nodeSelector` and
/// required affinity matched; all nodes when none is), each counted by its
/// `kubernetes.io/arch` label.
pub fn arch_of_nodes(nodes: &[Node], template: &PodSpec) -> Result<Platform, PlatformError> {
    let schedulable: Vec<&Node> = nodes
        .iter()
        .filter(|n| super::placement::excluded(n, template, None).is_none())
        .collect();
    let counted: Vec<&Node> = if schedulable.is_empty() {
        nodes.iter().collect()
    } else {
        schedulable
    };
    let archs: BTreeMap<String, String> = counted
        .iter()
        .map(|n| {
            let name = n.metadata.name.clone().unwrap_or_default();
            let arch = n
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/arch"))
                .cloned()
                .unwrap_or_else(|| "(no kubernetes.io/arch label)".into());
            (name, arch)
        })
        .collect();
    let mut distinct: Vec<&String> = archs.values().collect();
    distinct.sort();
    distinct.dedup();
    match (
        distinct.as_slice(),
        distinct.first().and_then(|a| Arch::from_label(a)),
    ) {
        ([_], Some(arch)) => Ok(Platform {
            arch,
            from: "nodes",
            nodes: archs,
        }),
        _ => {
            let found = if archs.is_empty() {
                "the cluster lists no nodes".to_owned()
            } else {
                archs
                    .iter()
                    .map(|(n, a)| format!("{n}: {a}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            Err(PlatformError::Disagree { found })
        }
    }
}

/// The run's platform: `--platform`, else that of the nodes (read with `admin`) the
/// template's Pod can be placed on; in the cluster, nodes the run may not read leave the
/// architecture of the node it runs on.
pub async fn resolve(
    admin: &kube::Client,
    platform: Option<Arch>,
    in_cluster: bool,
    template: &PodSpec,
) -> Result<Platform, PlatformError> {
    if let Some(arch) = platform {
        return Ok(Platform {
            arch,
            from: "--platform",
            nodes: BTreeMap::new(),
        });
    }
    match Api::<Node>::all(admin.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => arch_of_nodes(&list.items, template),
        Err(_) if in_cluster => Ok(Platform {
            arch: Arch::of_this_machine(),
            from: "this Pod's node",
            nodes: BTreeMap::new(),
        }),
        Err(source) => Err(PlatformError::NodesUnreadable { source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, arch: &str, extra: serde_json::Value) -> Node {
        let mut value = serde_json::json!({"metadata": {"name": name,
            "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": arch}}, "spec": {}});
        if let (Some(spec), Some(extra)) = (value["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        serde_json::from_value(value).unwrap_or_default()
    }

    #[test]
    fn the_agent_must_run_on_the_pods_architecture() {
        // This test binary is an ELF of this machine's architecture.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(elf_arch(&me), Some(Arch::of_this_machine()));
        let pinned = |arch| Platform {
            arch,
            from: "nodes",
            nodes: BTreeMap::new(),
        };
        assert!(check_agent_runs_on(&me, &pinned(Arch::of_this_machine())).is_ok());
        let other = match Arch::of_this_machine() {
            Arch::Amd64 => Arch::Arm64,
            Arch::Arm64 => Arch::Amd64,
        };
        let why = check_agent_runs_on(&me, &pinned(other)).unwrap_err();
        assert!(
            why.contains("exec format error")
                && why.contains(&format!(
                    "pass --platform linux/{}",
                    Arch::of_this_machine().as_str()
                )),
            "{why}"
        );
        assert!(check_agent_runs_on(b"#!/bin/sh\n", &pinned(other)).is_err());
    }

    #[test]
    fn the_schedulable_nodes_name_the_arch() {
        let nodes = [
            node("a", "arm64", serde_json::json!({})),
            node("b", "arm64", serde_json::json!({})),
            // A control plane of another arch, tainted: not where task Pods go.
            node(
                "cp",
                "amd64",
                serde_json::json!({"taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]}),
            ),
            node(
                "cordoned",
                "amd64",
                serde_json::json!({"unschedulable": true}),
            ),
        ];
        let platform = arch_of_nodes(&nodes, &PodSpec::default()).map_err(|e| e.to_string());
        assert_eq!(
            platform.map(|p| (p.arch, p.from)),
            Ok((Arch::Arm64, "nodes"))
        );
    }

    /// A template tolerating a dedicated pool's taint and selecting it: the pool's nodes
    /// name the architecture, not the untainted nodes its Pods never go to.
    #[test]
    fn the_nodes_the_templates_pod_can_be_placed_on_name_the_arch() {
        let dedicated = serde_json::json!({"taints": [{"key": "dedicated", "value": "agents", "effect": "NoSchedule"}]});
        let mut pool = node("pool", "arm64", dedicated);
        pool.metadata
            .labels
            .get_or_insert_default()
            .insert("pool".into(), "agents".into());
        let nodes = [pool, node("general", "amd64", serde_json::json!({}))];
        let template: PodSpec = serde_json::from_value(serde_json::json!({"containers": [],
            "nodeSelector": {"pool": "agents"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "agents", "effect": "NoSchedule"}]}))
        .unwrap_or_default();
        let platform = arch_of_nodes(&nodes, &template).map_err(|e| e.to_string());
        assert_eq!(
            platform.map(|p| (p.arch, p.nodes.into_keys().collect::<Vec<_>>())),
            Ok((Arch::Arm64, vec!["pool".to_owned()]))
        );
        // Without the toleration and selector, the general node is where Pods go.
        let platform = arch_of_nodes(&nodes, &PodSpec::default()).map_err(|e| e.to_string());
        assert_eq!(platform.map(|p| p.arch), Ok(Arch::Amd64));
    }

    #[test]
    fn disagreeing_nodes_are_refused_naming_platform() {
        let nodes = [
            node("a", "arm64", serde_json::json!({})),
            node("b", "amd64", serde_json::json!({})),
        ];
        let refused = arch_of_nodes(&nodes, &PodSpec::default())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            refused.contains("a: arm64, b: amd64") && refused.contains("--platform linux/amd64"),
            "{refused}"
        );
        let none = arch_of_nodes(&[], &PodSpec::default())
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(none.contains("no nodes"), "{none}");
    }
}
