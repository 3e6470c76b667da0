//! One scenario's report: its outcome, checks, steps, findings, sessions, cleanup and leaks.

use crate::cost::{Calls, ResourceUsage};
use crate::gate::Capability;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a scenario ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every promise held.
    Passed,
    /// A promise broke: `diagnosis` names it and the evidence shows it.
    Failed,
    /// The harness or the infrastructure failed before the promise could be judged.
    Errored,
    TimedOut,
    Cancelled,
    /// Not run, with the reason.
    Skipped,
    /// The environment cannot support what the scenario checks, with the reason.
    Incompatible,
    /// The checks held, but something the scenario created outlived its teardown (`leaks`).
    Leaked,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Failed => "failed",
            Outcome::Errored => "errored",
            Outcome::TimedOut => "timed out",
            Outcome::Cancelled => "cancelled",
            Outcome::Skipped => "skipped",
            Outcome::Incompatible => "incompatible",
            Outcome::Leaked => "leaked",
        }
    }

    /// Whether the outcome lets a release gate pass.
    pub fn is_acceptable(self) -> bool {
        matches!(
            self,
            Outcome::Passed | Outcome::Skipped | Outcome::Incompatible
        )
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScenarioReport {
    /// `area::name`.
    pub name: String,
    /// The promise of the design this scenario checks.
    pub promise: String,
    pub outcome: Outcome,
    /// For anything but `passed`: which promise broke (or why it was not judged), with the
    /// evidence that shows it.
    pub diagnosis: Option<String>,
    /// Its promise checks in the order the body reaches them, each with its outcome (absent
    /// in reports written before checks had ids).
    #[serde(default)]
    pub checks: Vec<CheckReport>,
    /// What the run lacked to judge it (a `skipped` or `incompatible` scenario, or one the gate
    /// failed because it required that capability).
    #[serde(default)]
    pub lacking: Option<Capability>,
    pub started_at: String,
    pub duration_ms: u64,
    pub steps: Vec<StepReport>,
    pub findings: Vec<Finding>,
    pub sessions: Vec<SessionRecord>,
    pub cleanup: Vec<CleanupRecord>,
    /// CPU time and peak memory of its Pods (absent without a node view, and in reports
    /// written before it was recorded).
    #[serde(default)]
    pub resources: Option<ResourceUsage>,
    /// The backend and node calls the scenario made, by kind (count and time).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub calls: Calls,
    /// Files collected for this scenario, relative to the report's folder.
    pub artifacts: Vec<String>,
    /// How many attempts ran (`--retries`); the report describes the last one.
    pub attempts: u32,
    /// Passed only after a failed attempt.
    pub flaky: bool,
    /// The outcome and diagnosis of each earlier attempt.
    pub previous_attempts: Vec<String>,
    /// What each session's nested daemon held just before teardown: what the Pod's deletion
    /// had to take with it.
    pub nested_inventory: Vec<NestedInventory>,
    /// The leak ledger after teardown: everything of this scenario still in the engine or
    /// cluster (by label) or on the node (processes, cgroups of its Pods and their nested
    /// containers). Not empty means `leaked` (unless a worse outcome came first).
    pub leaks: Vec<String>,
}

/// One promise check of a scenario, as the run judged it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckReport {
    /// `<scenario>/<check>`, stable across runs.
    pub id: String,
    pub promise: String,
    /// Who can break it (reports from before kinds: every check `system`).
    #[serde(default)]
    pub kind: CheckKind,
    pub outcome: CheckOutcome,
    /// Why a `not_judged` check could not be judged (absent for every other outcome).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The capability whose lack left a `not_judged` check unjudged: the run's backend does not
    /// have it (`cluster` on the local backend). The release gate excuses it unless the gate
    /// requires it, as it does a skipped scenario's lack, and says what the verdict does not
    /// cover. Absent otherwise, and in reports before schema 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lacking: Option<Capability>,
    /// The broken twin that proves this check can fail: a fixture (`fixtures/...`) or a
    /// cluster twin ([`CLUSTER_TWIN`] and its test); else `exempt: <reason>` (a system check
    /// only a cluster can break, no twin yet) or `mirror: <reason>`.
    pub twin: String,
}

/// How a report's `twin` names a cluster twin: this, then the test's name.
pub const CLUSTER_TWIN: &str = "cluster double: scenarios/tests/kube_double/main.rs ";

/// Whether a report's `twin` names a broken twin (a fixture, or a cluster twin).
pub fn has_twin(twin: &str) -> bool {
    twin.starts_with("fixtures/") || twin.starts_with(CLUSTER_TWIN)
}

/// Who can break a check: what a green of it proves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    /// Something an operator or a recipe author controls (the cluster, the template, the
    /// images, the prepare script, the daemon's configuration) can break it.
    #[default]
    System,
    /// Only the harness's mirror of Kandev's executor decides it (composition, launch,
    /// snapshot, reconnect, terminal cleanup): it judges the harness, not the system.
    Mirror,
}

impl CheckKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckKind::System => "system",
            CheckKind::Mirror => "mirror",
        }
    }
}

/// How one check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CheckOutcome {
    /// The body judged it and it held.
    Passed,
    /// It broke: the scenario's diagnosis names it.
    Failed,
    /// The body never judged it (it ended before, or the scenario was skipped, incompatible,
    /// errored or timed out): nothing is claimed.
    NotReached,
    /// The body reached it but could not judge it on this backend (no evidence it could see:
    /// `reason` says what was missing): nothing is claimed, and a release gate fails it.
    NotJudged,
}

impl CheckOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckOutcome::Passed => "passed",
            CheckOutcome::Failed => "failed",
            CheckOutcome::NotReached => "not reached",
            CheckOutcome::NotJudged => "not judged",
        }
    }
}

/// The nested daemon's objects in one session's Pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NestedInventory {
    pub pod: String,
    /// Full container IDs, running or not.
    pub containers: Vec<String>,
    pub images: Vec<String>,
    pub volumes: Vec<String>,
    /// User-defined networks (the defaults are left out).
    pub networks: Vec<String>,
    pub compose_projects: Vec<String>,
    /// Why the inventory could not be taken (e.g. the scenario had deleted the Pod).
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StepOutcome {
    Passed,
    Failed,
    Errored,
    Incompatible,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StepReport {
    pub name: String,
    pub outcome: StepOutcome,
    /// Milliseconds from the scenario's (or run's) start to this step's start.
    pub offset_ms: u64,
    pub duration_ms: u64,
    /// What the step observed: digests, exit codes, outputs, paths.
    pub evidence: Value,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FindingLevel {
    Info,
    Warning,
    Incompatible,
}

/// Something worth knowing that does not break a promise (root-owned files in the workspace,
/// a bind source the daemon cannot see, a browser flag that was needed).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    pub level: FindingLevel,
    /// Stable machine-readable key, e.g. `workspace.root_owned_files`.
    pub code: String,
    pub message: String,
    pub evidence: Value,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionRecord {
    pub pod_name: String,
    pub pod_uid: String,
    pub namespace: String,
    pub task_id: String,
    pub session_id: String,
    pub workspace: String,
    /// Milliseconds per launch stage (`storage`, `pod_ready`, `bootstrap`, `agentctl_connect`).
    pub launch_stages_ms: Vec<(String, u64)>,
    /// The launch snapshot's template digest (`sha256:<hex>` of the template the session was
    /// launched with; a replacement Pod keeps its session's).
    #[serde(default)]
    pub template_sha256: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CleanupOutcome {
    Removed,
    AlreadyGone,
    Kept,
    Failed,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CleanupRecord {
    /// `kind/name`, e.g. `pod/kandev-0123456789abcdef`.
    pub object: String,
    pub outcome: CleanupOutcome,
    pub duration_ms: u64,
    pub error: Option<String>,
}

impl CleanupRecord {
    /// One removal that began at `started`: removed when `result` is Ok, else failed with
    /// its error.
    pub fn timed(object: String, started: std::time::Instant, result: Result<(), String>) -> Self {
        let outcome = if result.is_ok() {
            CleanupOutcome::Removed
        } else {
            CleanupOutcome::Failed
        };
        Self {
            object,
            outcome,
            duration_ms: started.elapsed().as_millis() as u64,
            error: result.err(),
        }
    }
}

/// A scenario judged nothing on its one attempt and recorded nothing: a base for
/// `ScenarioReport { name, outcome, .., ..Default::default() }`. Its outcome is `Errored`,
/// so a report that forgets to say how its scenario ended fails rather than passes.
impl Default for ScenarioReport {
    fn default() -> Self {
        Self {
            name: String::new(),
            promise: String::new(),
            outcome: Outcome::Errored,
            diagnosis: None,
            checks: Vec::new(),
            lacking: None,
            started_at: String::new(),
            duration_ms: 0,
            steps: Vec::new(),
            findings: Vec::new(),
            sessions: Vec::new(),
            cleanup: Vec::new(),
            resources: None,
            calls: Calls::new(),
            artifacts: Vec::new(),
            attempts: 1,
            flaky: false,
            previous_attempts: Vec::new(),
            nested_inventory: Vec::new(),
            leaks: Vec::new(),
        }
    }
}
