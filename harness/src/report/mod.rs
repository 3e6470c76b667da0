//! The run report: typed, versioned JSON whose JSON Schema is checked in under `reports/`.
//!
//! CI, operators and release gating read this file; `schema_version` changes whenever a
//! field changes meaning. Readers in this repository deserialize with `deny_unknown_fields`.

pub mod assemble;
pub mod cost;
pub mod diff;
pub mod exit;
pub mod gate;
pub mod html;
pub mod outputs;
pub mod repeat;
pub mod summary;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

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
    pub gate: gate::Gate,
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
    pub cost: Option<cost::RunCost>,
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

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImageRecord {
    /// `base`, `daemon`, `worker`, `mock-agent`.
    pub role: String,
    pub reference: String,
    /// Engine image id (`sha256:...`).
    pub id: Option<String>,
    /// True when this run built it; false when an image with the same content tag was reused.
    pub built: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
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

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    pub total: usize,
    pub passed: usize,
    pub failed: usize,
    pub errored: usize,
    pub timed_out: usize,
    pub cancelled: usize,
    pub skipped: usize,
    pub incompatible: usize,
    /// Its checks held, but something it created outlived its teardown.
    pub leaked: usize,
    /// Passed after a retry (counted in `passed` too).
    pub flaky: usize,
    /// The promise checks of the scenarios run.
    #[serde(default)]
    pub checks: CheckSummary,
    /// What the scenarios' Pods consumed: CPU summed over the scenarios, memory the largest
    /// scenario's peak (scenarios run in parallel: their peaks do not add up to the run's).
    /// Absent without a node view, and in reports written before it was recorded.
    #[serde(default)]
    pub resources: Option<ResourceUsage>,
}

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

/// How many promise checks the run judged, of which kind, and how many have a broken twin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckSummary {
    pub total: usize,
    pub passed: usize,
    pub failed: usize,
    pub not_reached: usize,
    /// System checks with a broken twin that shows they can fail, a fixture or a cluster twin
    /// (the rest of the system checks are exempt, with the reason in `twin`; mirror checks
    /// have none).
    pub with_twin: usize,
    /// Checks the system under test (cluster, template, images, prepare script, daemon
    /// configuration) can break.
    #[serde(default)]
    pub system: KindCount,
    /// Checks only the harness's mirror of Kandev decides: they say nothing of the system.
    #[serde(default)]
    pub mirror: KindCount,
}

/// The checks of one [`CheckKind`] and how they ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KindCount {
    pub total: usize,
    pub passed: usize,
    pub failed: usize,
    pub not_reached: usize,
}

impl KindCount {
    fn add(&mut self, outcome: CheckOutcome) {
        self.total += 1;
        match outcome {
            CheckOutcome::Passed => self.passed += 1,
            CheckOutcome::Failed => self.failed += 1,
            CheckOutcome::NotReached => self.not_reached += 1,
        }
    }
}

impl CheckSummary {
    /// "62 system checks, 58 with a twin; 10 mirror checks": what a green of these checks
    /// proves about the system, and what only about the harness's mirror of Kandev.
    pub fn kinds_line(&self) -> String {
        format!(
            "{} system checks, {} with a twin; {} mirror checks",
            self.system.total, self.with_twin, self.mirror.total
        )
    }
}

impl Summary {
    pub fn of(scenarios: &[ScenarioReport]) -> Self {
        let mut s = Summary {
            total: scenarios.len(),
            ..Default::default()
        };
        for scenario in scenarios {
            s.flaky += usize::from(scenario.flaky);
            if let Some(used) = &scenario.resources {
                let total = s.resources.get_or_insert_with(ResourceUsage::default);
                total.pods += used.pods;
                total.cpu_ms += used.cpu_ms;
                total.memory_peak_bytes = total.memory_peak_bytes.max(used.memory_peak_bytes);
            }
            for check in &scenario.checks {
                s.checks.total += 1;
                s.checks.with_twin += usize::from(has_twin(&check.twin));
                match check.kind {
                    CheckKind::System => s.checks.system.add(check.outcome),
                    CheckKind::Mirror => s.checks.mirror.add(check.outcome),
                }
                match check.outcome {
                    CheckOutcome::Passed => s.checks.passed += 1,
                    CheckOutcome::Failed => s.checks.failed += 1,
                    CheckOutcome::NotReached => s.checks.not_reached += 1,
                }
            }
            match scenario.outcome {
                Outcome::Passed => s.passed += 1,
                Outcome::Failed => s.failed += 1,
                Outcome::Errored => s.errored += 1,
                Outcome::TimedOut => s.timed_out += 1,
                Outcome::Cancelled => s.cancelled += 1,
                Outcome::Skipped => s.skipped += 1,
                Outcome::Incompatible => s.incompatible += 1,
                Outcome::Leaked => s.leaked += 1,
            }
        }
        s
    }
}

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
    pub lacking: Option<gate::Capability>,
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
    pub calls: cost::Calls,
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
    /// The broken twin that proves this check can fail: a fixture (`fixtures/...`) or a
    /// cluster twin ([`CLUSTER_TWIN`] and its test); else `exempt: <reason>` (a system check
    /// only a cluster can break, no twin yet) or `mirror: <reason>`.
    pub twin: String,
}

/// How a report's `twin` names a cluster twin: this, then the test's name.
pub const CLUSTER_TWIN: &str = "cluster double: scenarios/tests/kube_double.rs ";

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
}

impl CheckOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckOutcome::Passed => "passed",
            CheckOutcome::Failed => "failed",
            CheckOutcome::NotReached => "not reached",
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

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
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

/// The JSON Schema of [`Report`], as checked in at `reports/report.schema.json`.
pub fn json_schema() -> Value {
    serde_json::to_value(schemars::schema_for!(Report)).unwrap_or(Value::Null)
}

/// Writes the report atomically (temp file + rename) so readers never see half a file.
pub fn write(report: &Report, path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_vec_pretty(report).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text)?;
    std::fs::rename(tmp, path)
}

pub fn read(path: &Path) -> anyhow::Result<Report> {
    let text = std::fs::read(path)?;
    let mut report: Report = serde_json::from_slice(&text)?;
    // A report from before check kinds has no kind counts: its checks were read as system
    // checks (the default), so count them so.
    let c = &report.summary.checks;
    if c.total > 0 && c.system.total + c.mirror.total == 0 {
        report.summary.checks = Summary::of(&report.scenarios).checks;
    }
    Ok(report)
}

/// Milliseconds since the epoch of an RFC 3339 UTC time as [`rfc3339`] writes it
/// (`YYYY-MM-DDTHH:MM:SS[.fff]Z`); None for anything else.
pub fn unix_ms(text: &str) -> Option<u64> {
    let text = text.strip_suffix('Z')?;
    let (date, time) = text.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, fraction) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<u64>().ok());
    let (hour, minute, second) = (t.next()??, t.next()??, t.next()??);
    let millis: u64 = format!("{fraction:0<3}").get(..3)?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    // Howard Hinnant's days-from-civil, the inverse of Civil::from_unix.
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = u64::try_from(era * 146_097 + doe - 719_468).ok()?;
    Some(((days * 86_400 + hour * 3600 + minute * 60 + second) * 1000) + millis)
}

/// A UTC calendar date and time, without a time crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: i64,
    pub day: i64,
    pub hour: u64,
    pub minute: u64,
    pub second: u64,
}

impl Civil {
    /// From seconds since the epoch (Howard Hinnant's days-to-civil algorithm).
    pub fn from_unix(secs: u64) -> Self {
        let z = (secs / 86_400) as i64 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let rem = secs % 86_400;
        Self {
            year: yoe + era * 400 + i64::from(month <= 2),
            month,
            day,
            hour: rem / 3600,
            minute: rem % 3600 / 60,
            second: rem % 60,
        }
    }
}

/// RFC 3339 (UTC, milliseconds) for a `SystemTime`.
pub fn rfc3339(time: std::time::SystemTime) -> String {
    let d = time
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let c = Civil::from_unix(d.as_secs());
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        c.year,
        c.month,
        c.day,
        c.hour,
        c.minute,
        c.second,
        d.subsec_millis()
    )
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

/// The short human summary printed after a run.
pub fn human_summary(report: &Report, path: &Path) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "\nkandev-acceptance run {} on {}: {}\n",
        report.run_id,
        report.backend,
        report.summary.checks.kinds_line()
    ));
    for s in &report.scenarios {
        out.push_str(&format!(
            "  {:<12} {:<28} {:>7.1}s",
            s.outcome.as_str(),
            s.name,
            s.duration_ms as f64 / 1000.0
        ));
        if s.flaky {
            out.push_str(&format!("  FLAKY: passed on attempt {}", s.attempts));
        }
        if let Some(d) = &s.diagnosis {
            let first = d.lines().next().unwrap_or_default();
            out.push_str(&format!("  {first}"));
        }
        out.push('\n');
        if let Some(check) = s.checks.iter().find(|c| c.outcome == CheckOutcome::Failed) {
            out.push_str(&format!("               failed check {}\n", check.id));
        }
        for leak in &s.leaks {
            out.push_str(&format!("               leaked {leak}\n"));
        }
        for f in s.findings.iter().filter(|f| f.level != FindingLevel::Info) {
            out.push_str(&format!(
                "               finding {}: {}\n",
                f.code, f.message
            ));
        }
    }
    let s = &report.summary;
    out.push_str(&format!(
        "  {} scenarios: {} passed, {} failed, {} leaked, {} errored, {} timed out, {} cancelled, {} skipped, {} incompatible ({:.1}s)\n",
        s.total, s.passed, s.failed, s.leaked, s.errored, s.timed_out, s.cancelled, s.skipped, s.incompatible,
        report.duration_ms as f64 / 1000.0
    ));
    let c = &s.checks;
    out.push_str(&format!(
        "  {} system checks: {} passed, {} failed, {} not reached; {} mirror checks: {} passed, {} failed, {} not reached\n",
        c.system.total, c.system.passed, c.system.failed, c.system.not_reached,
        c.mirror.total, c.mirror.passed, c.mirror.failed, c.mirror.not_reached
    ));
    if let Some(used) = &s.resources {
        out.push_str(&format!(
            "  resources of {} Pods: {} (CPU summed, memory the largest scenario's)\n",
            used.pods,
            used.describe()
        ));
    }
    if let Some(cost) = &report.cost {
        out.push_str(&format!("  cost: {}\n", cost::console_line(cost)));
    }
    if !report.leftovers.is_empty() {
        out.push_str(&format!("  LEFT BEHIND: {}\n", report.leftovers.join(", ")));
    }
    out.push_str(&format!("  report: {}\n", path.display()));
    out
}

/// The run-level set-up steps as they happen (engine, images, cluster, preflight), each with
/// its timing and evidence or error, for `report.setup`.
pub struct SetupLog {
    run_started: std::time::Instant,
    steps: std::sync::Mutex<Vec<StepReport>>,
}

impl SetupLog {
    pub fn new(run_started: std::time::Instant) -> Self {
        Self {
            run_started,
            steps: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Records the step's `result` (with `evidence` of its value, or its error with every
    /// cause) and returns it.
    pub fn step<T, E: Into<anyhow::Error>>(
        &self,
        name: &str,
        started: std::time::Instant,
        result: Result<T, E>,
        evidence: impl FnOnce(&T) -> Value,
    ) -> anyhow::Result<T> {
        let result = result.map_err(Into::into);
        let step = StepReport {
            name: name.to_owned(),
            outcome: if result.is_ok() {
                StepOutcome::Passed
            } else {
                StepOutcome::Errored
            },
            offset_ms: started.duration_since(self.run_started).as_millis() as u64,
            duration_ms: started.elapsed().as_millis() as u64,
            evidence: result.as_ref().map(evidence).unwrap_or(Value::Null),
            // `{:#}`: the error with its causes.
            error: result.as_ref().err().map(|e| format!("{e:#}")),
        };
        if let Ok(mut steps) = self.steps.lock() {
            steps.push(step);
        }
        result
    }

    pub fn steps(&self) -> Vec<StepReport> {
        self.steps.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_from_before_check_kinds_counts_its_checks_as_system() {
        let report =
            crate::report::html::tests::report(vec![crate::report::html::tests::scenario(
                "a::x",
                Outcome::Passed,
                None,
            )]);
        let mut old = serde_json::to_value(&report).unwrap();
        for check in old["scenarios"][0]["checks"].as_array_mut().unwrap() {
            check.as_object_mut().unwrap().remove("kind");
        }
        let summary = old["summary"]["checks"].as_object_mut().unwrap();
        summary.remove("system");
        summary.remove("mirror");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        std::fs::write(&path, serde_json::to_vec(&old).unwrap()).unwrap();
        let read = read(&path).unwrap();
        assert_eq!(read.summary.checks.system.total, 2);
        assert_eq!(read.summary.checks.system.passed, 2);
        assert_eq!(read.summary.checks.mirror.total, 0);
    }

    #[test]
    fn checked_in_schema_matches_the_types() {
        let path = crate::paths::reports().join("report.schema.json");
        let generated = json_schema();
        if std::env::var_os("KANDEV_ACCEPTANCE_BLESS").is_some() {
            let text = serde_json::to_string_pretty(&generated).unwrap_or_default() + "\n";
            std::fs::write(&path, text).unwrap_or_default();
        }
        let checked_in: Value = std::fs::read(&path)
            .ok()
            .and_then(|t| serde_json::from_slice(&t).ok())
            .unwrap_or(Value::Null);
        assert!(
            checked_in == generated,
            "reports/report.schema.json drifted from the report types; regenerate it with \
             KANDEV_ACCEPTANCE_BLESS=1 cargo test -p kandev-harness checked_in_schema"
        );
    }

    #[test]
    fn the_summary_sums_cpu_and_keeps_the_largest_memory_peak() {
        use crate::report::html::tests::scenario;
        let mut a = scenario("a::one", Outcome::Passed, None);
        a.resources = Some(ResourceUsage {
            pods: 2,
            cpu_ms: 1_500,
            memory_peak_bytes: Some(300 << 20),
        });
        let mut b = scenario("b::two", Outcome::Passed, None);
        b.resources = Some(ResourceUsage {
            pods: 1,
            cpu_ms: 2_000,
            memory_peak_bytes: Some(100 << 20),
        });
        let unmeasured = scenario("c::three", Outcome::Passed, None);
        let summary = Summary::of(&[a, b, unmeasured]);
        let total = summary.resources.unwrap_or_default();
        assert_eq!(
            (total.pods, total.cpu_ms, total.memory_peak_bytes),
            (3, 3_500, Some(300 << 20))
        );
        assert_eq!(total.describe(), "3.5 s CPU, peak 300 MiB");
        assert_eq!(Summary::of(&[]).resources, None);
    }

    #[test]
    fn rfc3339_formats_utc() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_796_000_000_123);
        assert_eq!(rfc3339(t), "2026-11-30T00:53:20.123Z");
    }

    #[test]
    fn unix_ms_inverts_rfc3339() {
        for ms in [0, 951_782_400_000, 1_796_000_000_123, 4_102_444_799_999] {
            let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
            assert_eq!(unix_ms(&rfc3339(t)), Some(ms), "{}", rfc3339(t));
        }
        assert_eq!(unix_ms("2026-11-30T00:53:20Z"), Some(1_796_000_000_000));
        for bad in [
            "",
            "2026-11-30",
            "2026-13-01T00:00:00Z",
            "2026-11-30T00:53:20+01:00",
        ] {
            assert_eq!(unix_ms(bad), None, "{bad}");
        }
    }
}
