//! The report of one run (`report.json`) and what it records of the run as a whole: its
//! environment, configuration, gate, set-up steps, teardown and cost.

use crate::cost::RunCost;
use crate::gate::Gate;
use crate::scenario::{CleanupRecord, ScenarioReport, StepReport};
use crate::summary::Summary;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Bumped on every incompatible change of the report's shape.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Report {
    pub schema_version: u32,
    pub run_id: String,
    pub harness_version: String,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub finished_at: String,
    pub duration_ms: u64,
    /// True when the run was cancelled (Ctrl-C, SIGTERM) before every scenario finished.
    pub interrupted: bool,
    /// True when `--deadline` passed before every scenario finished.
    pub deadline_exceeded: bool,
    pub backend: String,
    /// The gate the run was judged by (absent in reports written before gates existed:
    /// the default profile, nothing required).
    #[serde(default)]
    pub gate: Gate,
    pub environment: Environment,
    pub configuration: Configuration,
    pub summary: Summary,
    /// Run-level steps (engine checks, image builds) with their timings.
    pub setup: Vec<StepReport>,
    pub scenarios: Vec<ScenarioReport>,
    /// What carried this run's labels after teardown (empty when nothing leaked).
    pub leftovers: Vec<String>,
    /// The run-level teardown: what the run set up in a cluster (its namespace, or the
    /// executor's Role, binding and service account; a Kind cluster it created).
    pub teardown: Vec<CleanupRecord>,
    /// What the run cost beyond its work: the harness's and the engine's CPU, the calls it
    /// made (absent in reports written before it was recorded).
    #[serde(default)]
    pub cost: Option<RunCost>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    pub engine_version: Option<String>,
    pub engine_api_version: Option<String>,
    pub kubernetes_version: Option<String>,
    pub kernel: Option<String>,
    pub operating_system: Option<String>,
    pub architecture: Option<String>,
    /// `1` (legacy or hybrid) or `2` (unified).
    pub cgroup_version: Option<u8>,
    pub cgroup_driver: Option<String>,
    /// MTU of the Pod network's interface as the engine configures it.
    pub node_mtu: Option<u32>,
    pub images: Vec<ImageRecord>,
    pub template: Option<TemplateRecord>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImageRecord {
    /// `base`, `daemon`, `worker`, `mock-agent`; `harness`: the image of a run in the cluster.
    pub role: String,
    pub reference: String,
    /// Engine image id (`sha256:...`).
    pub id: Option<String>,
    /// True when this run built it; false when an image with the same content tag was reused.
    pub built: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TemplateRecord {
    /// The template file: relative to the repository root when it lies below it (the
    /// fixtures), else as given.
    pub path: String,
    /// SHA-256 of the rendered template text.
    pub sha256: String,
    /// SHA-256 of the template file as read (before its placeholders were rendered): what
    /// `gate --template` compares.
    #[serde(default)]
    pub source_sha256: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Configuration {
    /// SHA-256 over the canonical JSON of the settings below.
    pub sha256: String,
    pub settings: Value,
}

/// An empty report of this schema version: a base for `Report { .., ..Default::default() }`.
impl Default for Report {
    fn default() -> Self {
        Self {
            schema_version: SCHEMA_VERSION,
            run_id: String::new(),
            harness_version: String::new(),
            started_at: String::new(),
            finished_at: String::new(),
            duration_ms: 0,
            interrupted: false,
            deadline_exceeded: false,
            backend: String::new(),
            gate: Gate::default(),
            environment: Environment::default(),
            configuration: Configuration::default(),
            summary: Summary::default(),
            setup: Vec::new(),
            scenarios: Vec::new(),
            leftovers: Vec::new(),
            teardown: Vec::new(),
            cost: None,
        }
    }
}
