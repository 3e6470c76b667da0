//! The command line's arguments (clap). What they mean is decided elsewhere: `run`, `gc` and
//! `validate` in their own files, the backends through their providers.

use crate::backend::BackendKind;
use crate::config::Keep;
use crate::pod::template::WorkspaceMode;
use clap::{Args, Parser, Subcommand, ValueEnum};
use kandev_report::{Capability, GateProfile};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "kandev-acceptance",
    version = crate::BUILD,
    about = "End-to-end acceptance of Kandev's Docker-workloads task Pods"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Run the acceptance scenarios (libtest-style filters, --list, --exact, --skip, --test-threads).
    Run(Box<RunArgs>),
    /// Run the scenarios from inside a cluster: a Job running the harness image with
    /// `run --in-cluster` as Kandev's executor identity; follows its log, retrieves the
    /// report into --report DIR, removes what it created and exits with the run's code.
    Launch(Box<LaunchArgs>),
    /// Check a Pod template with Kandev's rules; creates nothing.
    Validate(ValidateArgs),
    /// Remove what a killed run left behind, by label.
    Gc(GcArgs),
    /// List every scenario's promise checks, their kind (system or mirror) and the broken twin
    /// that shows each system check can fail (a Markdown table).
    Checks,
    /// Gate a release on a report: passes only for a complete, uninterrupted run of this
    /// catalogue whose scenarios and checks all passed, on exactly these images (and template),
    /// recent enough. Exit 0 passes, 1 refuses (every reason named), 2 bad input.
    Gate(GateArgs),
    /// Work with reports.
    Report {
        #[command(subcommand)]
        command: ReportCommand,
    },
    /// Build images the harness itself runs from (`image harness`).
    Image {
        #[command(subcommand)]
        command: super::image::ImageCommand,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum ReportCommand {
    /// Print a report's summary.
    Show {
        file: PathBuf,
        /// Also (re)write `report.html` beside the report.
        #[arg(long)]
        html: bool,
    },
    /// What changed between two runs: scenarios newly failing, fixed or flaky, checks,
    /// durations beyond the noise threshold, the environment. Exit code 1 when something
    /// regressed.
    Diff {
        old: PathBuf,
        new: PathBuf,
        #[arg(long, value_enum, default_value = "text")]
        format: OutputFormat,
    },
}

/// Where a `kind`/`kube` cluster comes from (shared by `run` and `gc`).
#[derive(Args, Debug, Clone)]
pub(crate) struct ClusterArgs {
    /// Kubeconfig file for --backend kube (default: KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    pub(crate) kubeconfig: Option<PathBuf>,
    /// The kubeconfig context for --backend kube; required (the current context is never
    /// used implicitly).
    #[arg(long, value_name = "NAME")]
    pub(crate) context: Option<String>,
    /// An existing namespace to run in (it must admit privileged Pods); default: the run
    /// creates kandev-acceptance-<run id> and removes it.
    #[arg(long, value_name = "NAME")]
    pub(crate) namespace: Option<String>,
    /// The kind binary.
    #[arg(long, value_name = "PATH", default_value = "kind")]
    pub(crate) kind_bin: PathBuf,
    /// Use (and never delete) this existing Kind cluster instead of creating kandev-acc-<run id>.
    #[arg(long, value_name = "NAME")]
    pub(crate) kind_cluster: Option<String>,
}

#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    #[arg(long, value_enum, default_value = "local")]
    pub(crate) backend: BackendKind,
    #[command(flatten)]
    pub(crate) cluster: ClusterArgs,
    /// The Kind cluster configuration (node image pinned by digest).
    #[arg(long, value_name = "FILE")]
    pub(crate) kind_config: Option<PathBuf>,
    /// Override the configuration's Kind node image.
    #[arg(long, value_name = "REF")]
    pub(crate) kind_node_image: Option<String>,
    /// Leave the Kind cluster the run created (remove later: kind delete cluster --name ...).
    #[arg(long)]
    pub(crate) keep_cluster: bool,
    /// The platform the sessions' Pods are pinned to (Kandev's profile `platform`:
    /// linux/amd64 or linux/arm64); default: the cluster nodes' own architecture
    /// (kubernetes.io/arch), refused when they disagree. The local backend runs this host's.
    #[arg(long, value_name = "OS/ARCH", value_parser = crate::pod::compose::Arch::from_platform)]
    pub(crate) platform: Option<crate::pod::compose::Arch>,
    /// Size of a managed workspace claim (`workspace.size`).
    #[arg(long, value_name = "QUANTITY", default_value = "10Gi")]
    pub(crate) workspace_size: String,
    /// Access modes of a managed workspace claim (`workspace.access_modes`).
    #[arg(
        long,
        value_name = "MODES",
        value_delimiter = ',',
        default_value = "ReadWriteOnce"
    )]
    pub(crate) workspace_access_modes: Vec<String>,
    /// Storage class of a managed workspace claim (default: the cluster's default class).
    #[arg(long, value_name = "NAME")]
    pub(crate) storage_class: Option<String>,
    /// --backend kube from inside the cluster: the Pod's service account (its mounted token
    /// and CA, KUBERNETES_SERVICE_HOST/PORT) is the sessions' identity; no kubeconfig, no
    /// --context. The namespace is --namespace, else the service account's own.
    #[arg(long, conflicts_with_all = ["context", "kubeconfig"])]
    pub(crate) in_cluster: bool,
    /// With --in-cluster: a token file of the identity that reads evidence (logs, events),
    /// lists the run's objects and sweeps them, which Kandev's executor Role does not allow;
    /// default: the Pod's own identity.
    #[arg(long, value_name = "FILE", requires = "in_cluster")]
    pub(crate) bookkeeper_token: Option<PathBuf>,
    /// --backend kind|kube: a Role document (rbac.authorization.k8s.io/v1, kind Role) whose
    /// rules replace the ones the run binds its executor service account to (default: a
    /// mirror of Kandev's executor Role); the harness sets its name, namespace and labels.
    /// `launch::connection` judges the identity it makes. Not with --in-cluster, where the
    /// Pod's own service account is the executor.
    #[arg(long, value_name = "FILE", conflicts_with = "in_cluster")]
    pub(crate) executor_role: Option<PathBuf>,
    /// The run's id (default: a fresh one); `launch` passes the id it labels its objects with.
    #[arg(long, value_name = "ID", hide = true, value_parser = parse_run_id)]
    pub(crate) run_id: Option<String>,
    /// After publishing, keep the process (and so its Pod) alive up to SECONDS until the
    /// report folder is retrieved (`<report dir>/<run id>.retrieved` appears) or SIGTERM;
    /// then exit with the run's code. For `launch`, which copies the folder out of the Pod.
    #[arg(long, value_name = "SECONDS", hide = true, requires = "run_id")]
    pub(crate) hold_report: Option<u64>,
    /// --backend kube: admit a privileged inspector Pod (host PID, the node's cgroup tree
    /// read-only) on each session's node for the node view; without it the scenarios that
    /// need the node's own view are skipped.
    #[arg(long)]
    pub(crate) node_inspector: bool,
    /// The inspector's image (default: the docker-engine image); needs sh, find, tr, dmesg.
    #[arg(long, value_name = "REF")]
    pub(crate) node_inspector_image: Option<String>,
    /// The Pod template (a v1/PodTemplate document); default: Kandev's full-worker fixture.
    #[arg(long, value_name = "FILE")]
    pub(crate) template: Option<PathBuf>,
    /// The profile's prepare script; default: the full-worker prepare script.
    #[arg(long, value_name = "FILE")]
    pub(crate) prepare_script: Option<PathBuf>,
    /// Use this worker image (present in the engine) instead of building the fixture one.
    #[arg(long, value_name = "REF")]
    pub(crate) worker_image: Option<String>,
    /// Use this docker-engine image (present in the engine) instead of building the fixture one.
    #[arg(long, value_name = "REF")]
    pub(crate) daemon_image: Option<String>,
    /// Debian base for the fixture images if present in the engine; otherwise debootstrapped.
    #[arg(long, value_name = "REF", default_value = "debian:bookworm")]
    pub(crate) base_image: String,
    #[arg(long, default_value = "kandev-agent")]
    pub(crate) main_container: String,
    #[arg(long, default_value = "docker-engine")]
    pub(crate) daemon_container: String,
    #[arg(long, value_enum, default_value = "managed-pvc")]
    pub(crate) workspace_mode: WorkspaceMode,
    /// The claim `--workspace-mode existing-claim` mounts (never created, relabelled or
    /// deleted by the harness).
    #[arg(long, value_name = "NAME")]
    pub(crate) workspace_claim: Option<String>,
    /// Folder for reports (`<DIR>/<run-id>/report.json`).
    #[arg(long = "report", value_name = "DIR")]
    pub(crate) report_dir: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "never")]
    pub(crate) keep: Keep,
    /// The prepare script's bound on waiting for `docker info` (1..=120).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=120))]
    pub(crate) docker_ready_timeout: u32,
    /// The Pod-level pids limit (the kubelet's podPidsLimit).
    #[arg(long, default_value_t = 4096)]
    pub(crate) pod_pids_limit: i64,
    /// MTU of the local backend's per-run Pod network (clusters' overlay CNIs run 1450 or lower).
    #[arg(long, default_value_t = 1450, value_parser = clap::value_parser!(u32).range(576..=9000))]
    pub(crate) pod_mtu: u32,
    /// Tools the worker image must carry (`worker::toolchain`; comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = crate::config::RECIPE_TOOLS
    )]
    pub(crate) required_tools: Vec<String>,
    /// Tools checked when present (a missing one is a finding).
    #[arg(long, value_delimiter = ',', default_value = crate::config::RECIPE_OPTIONAL_TOOLS)]
    pub(crate) optional_tools: Vec<String>,
    /// Scenarios (and so sessions) at once; default: twice the cores, at most 8 (scenarios
    /// mostly wait on the engine). `--test-threads` wins when both are given.
    #[arg(long, value_name = "N")]
    pub(crate) jobs: Option<usize>,
    /// Run a failed, errored or timed-out scenario again up to N times; a later pass is
    /// reported flaky.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(crate) retries: u32,
    /// Run the selection N times (each a run with its own report) and summarize the pass
    /// rates in `<report dir>/repeat-<first run id>/repeat.json`.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub(crate) repeat: u32,
    /// Override every scenario's deadline, in seconds.
    #[arg(long, value_name = "SECONDS")]
    pub(crate) scenario_timeout: Option<u64>,
    /// The longest one step of a scenario may take, in seconds (default: only the
    /// scenario's deadline applies).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) step_timeout: Option<u64>,
    /// The gate the run is judged by: `release` requires every capability the backend offers
    /// (docker, compose, browser, node-view; and cluster on kind and kube) and immutable image
    /// references (digests).
    #[arg(long, value_enum, default_value = "default")]
    pub(crate) gate: GateProfile,
    /// Capabilities the run must be able to check (comma-separated: docker, compose, browser,
    /// node-view, cluster; or none); a scenario that lacks one fails instead of ending skipped or
    /// incompatible. Replaces what the template declares it serves
    /// (acceptance.kandev.ai/serves).
    #[arg(long, value_name = "LIST", value_parser = parse_requirements)]
    pub(crate) require: Option<Requirements>,
    /// The whole run's budget, in seconds: past it, running scenarios tear down and time
    /// out, and no further scenario starts.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) deadline: Option<u64>,
    #[command(flatten)]
    pub(crate) libtest: libtest_mimic::Arguments,
}

#[derive(Args, Debug)]
pub(crate) struct LaunchArgs {
    /// The harness image the cluster's nodes can pull (`kandev-acceptance image harness`
    /// builds one here; push it, or `kind load docker-image` it).
    #[arg(long, value_name = "REF")]
    pub(crate) harness_image: String,
    /// How long the run inside the Pod may take, in seconds (the Job's deadline, with the
    /// hold added).
    #[arg(long, value_name = "SECONDS", default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) job_timeout: u64,
    /// How long the Job's Pod may take to start (an image pull included), in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) start_timeout: u64,
    /// How long the finished run waits for its report to be retrieved, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 600, value_parser = clap::value_parser!(u64).range(10..))]
    pub(crate) hold: u64,
    /// What `run` takes (passed on to the run in the Pod; --template and --prepare-script
    /// travel in a Secret, --report is where the report is retrieved to).
    #[command(flatten)]
    pub(crate) run: RunArgs,
}

/// `launch`'s own options and the host-side ones the Pod's `run` gets otherwise (each takes
/// a value): not forwarded as they are.
pub(crate) const NOT_FORWARDED: [&str; 12] = [
    "--harness-image",
    "--job-timeout",
    "--start-timeout",
    "--hold",
    "--backend",
    "--context",
    "--kubeconfig",
    "--namespace",
    "--report",
    "--template",
    "--prepare-script",
    "--executor-role",
];

#[derive(Args, Debug)]
pub(crate) struct GateArgs {
    /// The run's report.json.
    #[arg(long, value_name = "FILE")]
    pub(crate) report: PathBuf,
    /// The worker image the release ships, `name@sha256:<digest>`.
    #[arg(long, value_name = "REF@sha256:DIGEST")]
    pub(crate) worker_image: String,
    /// The daemon (docker-engine) image the release ships, `name@sha256:<digest>`.
    #[arg(long, value_name = "REF@sha256:DIGEST")]
    pub(crate) daemon_image: String,
    /// The template file the release ships: the run must have used exactly it.
    #[arg(long, value_name = "FILE")]
    pub(crate) template: Option<PathBuf>,
    /// The report's greatest age since the run finished (`90m`, `36h`, `7d`).
    #[arg(long, value_name = "DURATION", value_parser = parse_age)]
    pub(crate) max_age: Option<u64>,
    /// Capabilities whose lack fails (default: as the release profile, every capability the
    /// report's backend offers: cluster only on kind and kube); `none` to excuse skipped and
    /// incompatible scenarios.
    #[arg(long, value_name = "LIST", value_parser = parse_requirements)]
    pub(crate) require: Option<Requirements>,
}

/// A run id names labels, a namespace and folders: lowercase letters, digits and `-`, at
/// most 40 characters (the namespace `kandev-acceptance-<id>` stays a DNS label).
fn parse_run_id(text: &str) -> Result<String, String> {
    let fine = !text.is_empty()
        && text.len() <= 40
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !text.starts_with('-')
        && !text.ends_with('-');
    fine.then(|| text.to_owned())
        .ok_or_else(|| format!("{text:?}: lowercase letters, digits and '-', at most 40"))
}

/// `90m`, `36h`, `7d`, `3600s` in milliseconds.
fn parse_age(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let wrong = || format!("{text:?}: a number with s, m, h or d (e.g. 36h)");
    let unit = text.chars().last().ok_or_else(wrong)?;
    let seconds: u64 = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return Err(wrong()),
    };
    text[..text.len() - unit.len_utf8()]
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(seconds * 1000))
        .ok_or_else(wrong)
}

/// `--require`'s list.
#[derive(Debug, Clone)]
pub(crate) struct Requirements(pub(crate) Vec<Capability>);

fn parse_requirements(text: &str) -> Result<Requirements, String> {
    if text.trim() == "none" {
        return Ok(Requirements(Vec::new()));
    }
    text.split(',')
        .map(|name| {
            Capability::parse(name).ok_or_else(|| {
                format!(
                    "unknown capability {:?}; known: {}, or none",
                    name.trim(),
                    Capability::ALL.map(Capability::name).join(", ")
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Requirements)
}

#[derive(Args, Debug)]
pub(crate) struct ValidateArgs {
    #[arg(long, value_name = "FILE")]
    pub(crate) template: PathBuf,
    #[arg(long, default_value = "kandev-agent")]
    pub(crate) main_container: String,
    #[arg(long, value_enum, default_value = "managed-pvc")]
    pub(crate) workspace_mode: WorkspaceMode,
    /// The workspace claim (PVC modes), for the rule that no other volume may alias it.
    #[arg(long, value_name = "NAME")]
    pub(crate) workspace_claim: Option<String>,
    /// Also the release gate's static rules: every image reference a digest, no
    /// `*_REQUIRED` placeholder left, declared capabilities known.
    #[arg(long)]
    pub(crate) for_release: bool,
    #[arg(long, value_enum, default_value = "text")]
    pub(crate) format: OutputFormat,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum OutputFormat {
    Text,
    Json,
}

#[derive(Args, Debug)]
pub(crate) struct GcArgs {
    /// Where to look: the local engine, Kind clusters, or a cluster (--context).
    #[arg(long, value_enum, default_value = "local")]
    pub(crate) backend: BackendKind,
    #[command(flatten)]
    pub(crate) cluster: ClusterArgs,
    /// Only what this run created; default: everything the harness labelled.
    #[arg(long, value_name = "ID")]
    pub(crate) run: Option<String>,
    /// List what would be removed; remove nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Orphaned Pod cgroups (their Pod's containers gone, no process left) are removed only
    /// when older than this many seconds, so that a Pod being created right now is safe.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    pub(crate) older_than: u64,
}
