//! What things cost, as a report records it: the resources of a scenario's Pods (CPU time,
//! memory peak), and what the run itself cost beyond its work (the harness's, the engine's
//! and the machine's CPU, and every call the harness made to the backend and the node view,
//! by kind). The runner measures them (`kandev_harness::runner::cost`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// CPU time and peak memory of Pods, read from their Pod cgroups through the node view just
/// before teardown (Pods a scenario deleted itself are not counted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceUsage {
    /// Pods whose cgroup was read.
    pub pods: usize,
    /// CPU time of their processes (nested containers included), in milliseconds.
    pub cpu_ms: u64,
    /// The sum of the Pods' memory peaks (an upper bound of their peak together), in bytes;
    /// None when the kernel does not record a peak (cgroup v2 before Linux 5.19).
    pub memory_peak_bytes: Option<u64>,
}

impl ResourceUsage {
    /// `12.3 s CPU, peak 456 MiB` (`peak unknown` without a recorded peak).
    pub fn describe(&self) -> String {
        let peak = match self.memory_peak_bytes {
            Some(bytes) => format!("peak {} MiB", bytes.div_ceil(1 << 20)),
            None => "peak unknown".into(),
        };
        format!("{:.1} s CPU, {peak}", self.cpu_ms as f64 / 1000.0)
    }
}

/// Calls of one kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallCost {
    pub count: u64,
    /// Wall time spent in them, summed (calls overlap).
    pub total_ms: u64,
}

/// Calls by kind (`exec`, `port_exchange`, `create_pod`, `node_scan`, ...).
pub type Calls = BTreeMap<String, CallCost>;

/// CPU of the engine's own processes over the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EngineCpu {
    pub cpu_ms: u64,
    /// How it was measured: the engine's cgroups (exact, shims included), or its processes
    /// (the shims of containers removed during the run are not counted).
    pub method: String,
}

/// What the run cost.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunCost {
    /// The harness process itself (user + system).
    pub harness_cpu_ms: u64,
    /// The engine on this machine (absent when the engine is elsewhere, e.g. a cluster).
    pub engine: Option<EngineCpu>,
    /// Machine-wide busy CPU on the harness's machine over the run (`/proc/stat`).
    pub machine_busy_ms: Option<u64>,
    /// Every call the harness made, by kind.
    pub calls: Calls,
}
