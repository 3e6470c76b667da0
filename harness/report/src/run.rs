//! The report of one run (`report.json`) and what it records of the run as a whole: its
//! environment, configuration, gate, set-up steps, teardown and cost.

use crate::cost::RunCost;
use crate::gate::{Gate, GateProfile};
use crate::scenario::{CleanupRecord, ScenarioReport, StepReport};
use crate::summary::Summary;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The report's shape: bumped whenever it changes (a field added, or a value that changes
/// meaning). A reader reads every version up to its own (what an older report lacks is filled
/// in with defaults) and refuses a newer one by name ([`crate::ReportTooNew`]).
///
/// 1: the first. 2: a check may be `not_judged` (with its `reason`, counted apart), and a
/// report carries its own `verdict`, its `selection` (a filtered run says so) and, per image
/// role, the image ids its Pods' containers `ran`. 3: a check not judged names the capability
/// whose lack left it so (`lacking`), which the release gate excuses as a skipped scenario's.
pub const SCHEMA_VERSION: u32 = 3;

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
    /// What the run was asked to run: the whole catalogue, or the part a filter selected
    /// (absent in reports before schema 2: unknown).
    #[serde(default)]
    pub selection: Option<Selection>,
    /// The report's own verdict, by the one rule ([`crate::judge`]) under the run's gate: what
    /// the run's exit code says, and every reason it did not pass (absent in reports before
    /// schema 2; readers judge those themselves).
    #[serde(default)]
    pub verdict: Option<Verdict>,
}

/// Which scenarios of the catalogue a run selected (libtest's FILTER, `--skip`, `--exact`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Selection {
    /// True when the filter left a scenario of the catalogue out: the run vouches only for
    /// the part it selected, and cannot pass a release gate.
    pub filtered: bool,
    /// The FILTER as given (a substring of scenario names, or the whole name with `exact`).
    pub filter: Option<String>,
    /// Every `--skip` as given.
    pub skip: Vec<String>,
    pub exact: bool,
    /// The scenarios the run selected, in the catalogue's order.
    pub selected: Vec<String>,
    /// The scenarios of the catalogue the filter left out.
    pub left_out: Vec<String>,
}

/// Whether a report passes, and why not: the profile it was judged under, the exit code the
/// rule maps it to, and every reason (empty: it passed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Verdict {
    pub profile: GateProfile,
    /// True exactly when `reasons` is empty (and `exit_code` is 0).
    pub passed: bool,
    /// The exit code of the run (most severe class of its reasons; `exit::meaning` says it).
    pub exit_code: u8,
    /// Every reason the report does not pass, most severe class first.
    pub reasons: Vec<String>,
}

impl Verdict {
    /// `passed`, or `failed (exit 1, 2 reasons)`: the verdict in a few words.
    pub fn brief(&self) -> String {
        if self.passed {
            return "passed".into();
        }
        let n = self.reasons.len();
        format!(
            "failed (exit {}, {n} reason{})",
            self.exit_code,
            if n == 1 { "" } else { "s" }
        )
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    pub engine_version: Option<String>,
    pub engine_api_version: Option<String>,
    pub kubernetes_version: Option<String>,
    /// Kind runs: the node image the cluster's nodes ran, and `kind version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind_node_image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind_version: Option<String>,
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
    /// The prepare script the sessions ran (Kandev's bootstrap's prepare step): what
    /// `gate --prepare-script` compares. Absent in reports before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare_script: Option<PrepareScriptRecord>,
    /// The fixtures the run read (templates, prepare scripts, image build contexts, the Kind
    /// configuration) and their digest. Absent in reports before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fixtures: Option<FixturesRecord>,
}

/// Where a run's fixtures came from, and what they held.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FixturesRecord {
    /// `checkout` (a development build in its checkout), `embedded` (what the binary
    /// carries) or `KANDEV_ACCEPTANCE_ROOT`.
    pub source: String,
    /// How many files the digest covers.
    pub files: usize,
    /// `sha256:<hex>` over every file a run reads below the root (the templates, prepare
    /// scripts, image build contexts, RBAC fixtures, the Kind configuration and pins), by
    /// relative path and bytes.
    pub sha256: String,
}

/// A prepare script as the run read it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrepareScriptRecord {
    /// The script file: relative to the repository root when it lies below it (the
    /// fixtures), else as given.
    pub path: String,
    /// `sha256:<hex>` of the script's text.
    pub sha256: String,
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
    /// What the Pods' containers of this role really ran, read from the backend after each
    /// Pod started (the engine's container `Image` locally, the kubelet's
    /// `status.containerStatuses[].imageID` on a cluster); empty when no Pod of the role
    /// started, and in reports before schema 2.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ran: Vec<RanImage>,
}

/// One image the containers of a role ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RanImage {
    /// The image as the container names it (the Pod's `image`, as the engine or the kubelet
    /// reports it).
    pub image: String,
    /// The image id it ran: `sha256:<hex>` (the engine's, or containerd's for an image without
    /// a registry digest), or `name@sha256:<digest>` (the kubelet's for a pulled image).
    pub image_id: String,
    /// How many of the run's containers ran it.
    pub containers: usize,
}

impl ImageRecord {
    /// Whether `ran` is this record's image: the same id (bare, or as the digest of the
    /// kubelet's `name@sha256:..`, or with a `docker-pullable://`/`docker://` prefix), or the
    /// digest this record's reference pins. By reference alone when the record cannot say
    /// more: it has neither an id nor a digest (an image the cluster resolves, whose id the run
    /// never saw), or the runtime names the image by a registry digest this run never saw (a
    /// `kind load`ed image).
    pub fn is(&self, ran: &RanImage) -> bool {
        let id = ran
            .image_id
            .trim_start_matches("docker-pullable://")
            .trim_start_matches("docker://");
        let digest = id.rsplit_once('@').map(|(_, d)| d).unwrap_or(id);
        let pinned = self.reference.rsplit_once('@').map(|(_, d)| d);
        if self.id.as_deref() == Some(digest) || pinned == Some(digest) {
            return true;
        }
        let unknown = self.id.is_none() && pinned.is_none();
        (unknown || id.contains('@')) && normalized(&ran.image) == normalized(&self.reference)
    }

    /// The images this role's containers ran that are not this record's.
    pub fn disagreements(&self) -> Vec<&RanImage> {
        self.ran.iter().filter(|ran| !self.is(ran)).collect()
    }
}

/// A reference as runtimes write it, without Docker Hub's implied `docker.io/` and
/// `library/` prefixes.
fn normalized(reference: &str) -> &str {
    let reference = reference.strip_prefix("docker.io/").unwrap_or(reference);
    reference.strip_prefix("library/").unwrap_or(reference)
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
            selection: None,
            verdict: None,
        }
    }
}
