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

/// Help that starts as a command's does: its usage, then what it does (clap puts the about
/// line first).
const USAGE_FIRST: &str = "{usage-heading} {usage}\n\n{about-with-newline}\n{all-args}{after-help}";

#[derive(Subcommand, Debug)]
pub(crate) enum Command {
    /// Run the acceptance scenarios: all of them, or those FILTER, --exact and --skip select.
    #[command(help_template = USAGE_FIRST)]
    Run(Box<RunArgs>),
    /// Run the scenarios from inside a cluster: a Job running the harness image with
    /// `run --in-cluster` as Kandev's executor identity; follows its log, retrieves the
    /// report into --report-dir DIR, removes what it created and exits with the run's code.
    #[command(help_template = USAGE_FIRST)]
    // run's options that launch sets itself or refuses (launch.rs `refused` names why, if
    // given anyway) are not in its help.
    #[command(mut_arg("in_cluster", |a| a.hide(true)))]
    #[command(mut_arg("bookkeeper_token", |a| a.hide(true)))]
    #[command(mut_arg("hold_report", |a| a.hide(true)))]
    #[command(mut_arg("repeat", |a| a.hide(true)))]
    #[command(mut_arg("keep", |a| a.hide(true)))]
    Launch(Box<LaunchArgs>),
    /// Check a Pod template with Kandev's rules; creates nothing.
    #[command(help_template = USAGE_FIRST)]
    Validate(ValidateArgs),
    /// Remove what killed runs left behind, by label: one run (--run ID) or every run
    /// (--all; the default locally). Runs still alive (their lease is live) are spared, and
    /// `--run` of a live run refuses, unless --force.
    #[command(help_template = USAGE_FIRST)]
    // The cluster options are run's (shared), their help gc's own: what each means here.
    #[command(mut_arg("namespace", |a| gc_help(a, GC_NAMESPACE)))]
    #[command(mut_arg("kind_cluster", |a| gc_help(a, GC_KIND_CLUSTER)))]
    #[command(mut_arg("context", |a| gc_help(a, GC_CONTEXT)))]
    #[command(mut_arg("kubeconfig", |a| gc_help(a, GC_KUBECONFIG)))]
    Gc(GcArgs),
    /// List every scenario's promise checks, their kind (system or mirror) and the broken twin
    /// that shows each system check can fail (a Markdown table).
    #[command(help_template = USAGE_FIRST)]
    Checks {
        /// text (the Markdown table docs/catalogue.md holds), or json for tools.
        #[arg(long, value_enum, default_value = "text")]
        format: OutputFormat,
    },
    /// Gate a release on a report: passes only for a complete, uninterrupted run of this
    /// catalogue whose scenarios and checks all passed, on exactly these images (and template),
    /// recent enough. Exit 0 passes, 1 refuses (every reason named), 2 bad input.
    #[command(help_template = USAGE_FIRST)]
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
    /// Print the shell completion script for SHELL (e.g. `kandev-acceptance completions bash >
    /// /etc/bash_completion.d/kandev-acceptance`).
    #[command(help_template = USAGE_FIRST)]
    Completions {
        /// The shell the script is for.
        #[arg(value_enum, value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff; `kandev-acceptance man | man -l -`), or write one page per
    /// command into --dir.
    #[command(help_template = USAGE_FIRST)]
    Man {
        /// Write kandev-acceptance.1 and one page per command (kandev-acceptance-run.1, ...)
        /// into this existing folder instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum ReportCommand {
    /// Print a report's summary.
    Show {
        /// The report: its report.json, or the run's folder (<report dir>/<run id>/).
        #[arg(value_name = "REPORT")]
        file: PathBuf,
        /// Also (re)write `report.html` beside the report.
        #[arg(long)]
        html: bool,
        /// text for people, or json for tools: the run's id, backend, verdict, counts, and
        /// each scenario's outcome, diagnosis and checks' outcomes (report.json holds all).
        #[arg(long, value_enum, default_value = "text")]
        format: OutputFormat,
    },
    /// What changed between two runs: scenarios newly failing, fixed or flaky, checks,
    /// durations beyond the noise threshold, the environment. Exit code 1 when something
    /// regressed.
    Diff {
        /// The earlier run's report (its report.json or its folder).
        #[arg(value_name = "OLD")]
        old: PathBuf,
        /// The later run's report (its report.json or its folder).
        #[arg(value_name = "NEW")]
        new: PathBuf,
        /// text for people, json for tools.
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
    #[arg(long, env = "KANDEV_ACCEPTANCE_CONTEXT", value_name = "NAME")]
    pub(crate) context: Option<String>,
    /// An existing namespace to run in (it must admit privileged Pods); default: the run
    /// creates kandev-acceptance-<run id> and removes it.
    // gc's help for it: GC_NAMESPACE (mut_arg on Command::Gc).
    #[arg(long, env = "KANDEV_ACCEPTANCE_NAMESPACE", value_name = "NAME")]
    pub(crate) namespace: Option<String>,
    /// The kind binary (default: the one harness/scripts/ensure-kind.sh built for the node
    /// image it assembled, else `kind` on PATH).
    #[arg(long, value_name = "PATH")]
    pub(crate) kind_bin: Option<PathBuf>,
    /// Use (and never delete) this existing Kind cluster instead of creating kandev-acc-<run id>.
    #[arg(long, value_name = "NAME")]
    pub(crate) kind_cluster: Option<String>,
}

#[derive(Args, Debug)]
pub(crate) struct RunArgs {
    /// What runs the Pods: local (this host's engine; the default for `run`), kind (a Kind
    /// cluster the run creates from kind/cluster.yaml), kube (an existing cluster: --context).
    /// `launch` runs on kube only, and needs no --backend.
    #[arg(long, env = "KANDEV_ACCEPTANCE_BACKEND", value_enum)]
    pub(crate) backend: Option<BackendKind>,
    #[command(flatten)]
    pub(crate) cluster: ClusterArgs,
    /// The Kind cluster configuration (node image pinned by digest).
    #[arg(long, value_name = "FILE")]
    pub(crate) kind_config: Option<PathBuf>,
    /// Override the configuration's Kind node image (default: the node image
    /// harness/scripts/ensure-kind.sh assembled here, when this host's engine has it).
    #[arg(long, value_name = "REF")]
    pub(crate) kind_node_image: Option<String>,
    /// Leave the Kind cluster the run created (remove later: kind delete cluster --name ...).
    #[arg(long)]
    pub(crate) keep_cluster: bool,
    /// The platform the sessions' Pods are pinned to (Kandev's profile `platform`:
    /// linux/amd64 or linux/arm64); default: the architecture (kubernetes.io/arch) of the
    /// nodes the template's Pods can be placed on, refused when they disagree. The local
    /// backend runs this host's.
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
    /// The run's id (default: a fresh, sortable one, e.g. 20261203t141500-3fa9c1), so that a
    /// CI job knows its report folder (<report dir>/<ID>/) in advance. It labels every object
    /// the run creates and names its namespace (kandev-acceptance-<ID>): lowercase letters,
    /// digits and '-', at most 40, starting and ending with a letter or digit; one not used
    /// before in the report folder (e.g. ci-${GITHUB_RUN_ID}-${GITHUB_RUN_ATTEMPT}).
    #[arg(long, value_name = "ID", value_parser = parse_run_id)]
    pub(crate) run_id: Option<String>,
    /// After publishing, keep the process (and so its Pod) alive up to DURATION until the
    /// report folder is retrieved (`<report dir>/<run id>.retrieved` appears) or SIGTERM;
    /// then exit with the run's code. For `launch`, which copies the folder out of the Pod.
    #[arg(long, value_name = "DURATION", hide = true, requires = "run_id", value_parser = seconds_in(1, u64::MAX))]
    pub(crate) hold_report: Option<u64>,
    /// --backend kube: admit a privileged inspector Pod (host PID, the node's cgroup tree
    /// read-only) on each session's node for the node view; without it the scenarios that
    /// need the node's own view are skipped.
    #[arg(long)]
    pub(crate) node_inspector: bool,
    /// --backend kind|kube, repeatable: a Secret of type kubernetes.io/dockerconfigjson that
    /// lets the nodes pull the run's images from a private registry. NAME is read from the
    /// kubeconfig context's namespace (`default` when the context names none), NS/NAME from
    /// NS; it is copied, run-labelled, into the run's namespace before any Pod (one of that
    /// name already there is used as it is) and removed with the run. Every Pod the run
    /// creates carries it (task, warm-up, inspector, MTU peer), as do the template's own
    /// imagePullSecrets, which are copied the same way.
    #[arg(long, value_name = "[NS/]NAME", value_parser = crate::backend::kube::pull_secrets::parse_flag)]
    pub(crate) image_pull_secret: Vec<String>,
    /// The inspector's image (default: the docker-engine image); needs sh, find, tr, dmesg.
    #[arg(long, value_name = "REF")]
    pub(crate) node_inspector_image: Option<String>,
    /// The Pod template (a v1/PodTemplate document); default: Kandev's full-worker fixture.
    #[arg(long, env = "KANDEV_ACCEPTANCE_TEMPLATE", value_name = "FILE")]
    pub(crate) template: Option<PathBuf>,
    /// The profile's prepare script; default: the full-worker prepare script.
    #[arg(long, env = "KANDEV_ACCEPTANCE_PREPARE_SCRIPT", value_name = "FILE")]
    pub(crate) prepare_script: Option<PathBuf>,
    /// Use this worker image (present in the engine) instead of building the fixture one.
    #[arg(long, env = "KANDEV_ACCEPTANCE_WORKER_IMAGE", value_name = "REF")]
    pub(crate) worker_image: Option<String>,
    /// Use this docker-engine image (present in the engine) instead of building the fixture one.
    #[arg(long, env = "KANDEV_ACCEPTANCE_DAEMON_IMAGE", value_name = "REF")]
    pub(crate) daemon_image: Option<String>,
    /// Debian base for the fixture images if present in the engine; otherwise debootstrapped.
    #[arg(long, value_name = "REF", default_value = "debian:bookworm")]
    pub(crate) base_image: String,
    /// The template's main container: the one Kandev's agent runs in (UID 1000, no
    /// capabilities), which gets the reserved workspace and agent volumes.
    #[arg(long, value_name = "NAME", default_value = "kandev-agent")]
    pub(crate) main_container: String,
    /// The template's Docker-in-Docker companion container, whose daemon the agent reaches
    /// through the Pod-local socket.
    #[arg(long, value_name = "NAME", default_value = "docker-engine")]
    pub(crate) daemon_container: String,
    /// Where /workspace lives, as a Kandev profile sets it: managed-pvc (a claim per session,
    /// created and deleted with it), empty-dir (the Pod's own emptyDir), existing-claim (a
    /// claim that already exists: --workspace-claim).
    #[arg(long, value_enum, value_name = "MODE", default_value = "managed-pvc")]
    pub(crate) workspace_mode: WorkspaceMode,
    /// The claim `--workspace-mode existing-claim` mounts (never created, relabelled or
    /// deleted by the harness).
    #[arg(long, value_name = "NAME")]
    pub(crate) workspace_claim: Option<String>,
    /// The folder reports go in: each run writes <DIR>/<run id>/ (report.json, junit.xml,
    /// ctrf.json, report.html, logs); default: reports/ of the checkout. `--report DIR` is
    /// its old spelling (deprecated: `--report` names one report elsewhere, as in `gate`).
    #[arg(
        long = "report-dir",
        env = "KANDEV_ACCEPTANCE_REPORT_DIR",
        alias = "report",
        value_name = "DIR"
    )]
    pub(crate) report_dir: Option<PathBuf>,
    /// When a scenario's Pods stay after it, to look inside (each kept Pod prints how to get
    /// in and the exact `gc` command that removes it later): never, on-failure (of that
    /// scenario), always. The run then keeps what it set up (its namespace or network) too.
    #[arg(long, value_enum, value_name = "WHEN", default_value = "never")]
    pub(crate) keep: Keep,
    /// The prepare script's bound on waiting for `docker info` (1s to 2m).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = seconds_in(1, 120))]
    pub(crate) docker_ready_timeout: u64,
    /// How long a task Pod may take to have its main container running (launch stage
    /// pod_ready): a cold node pulling a multi-GB worker image, a CSI attach or an autoscaler's
    /// new node can take minutes (1s to 1h). A Pod the cluster refuses outright (no node
    /// matches, an image name that cannot be pulled) fails at once, whatever this bound. Past
    /// about 4 minutes raise --scenario-timeout too (most scenarios end at 300 s).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = seconds_in(1, 3600))]
    pub(crate) pod_ready_timeout: u64,
    /// On a cluster (kind, kube): before the first scenario, every node the task Pod can be
    /// placed on pulls the worker and daemon images (one short-lived Pod per node), within
    /// this bound (0s to 2h; 0s skips it), so that a cold pull is spent there, reported as
    /// the `warm_up` set-up step, and not in a scenario's pod_ready.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = seconds_in(0, 7200))]
    pub(crate) warm_up_timeout: u64,
    /// Skip the cluster warm-up (the report says so): each scenario's first Pod on a cold
    /// node then pulls the images within --pod-ready-timeout.
    #[arg(long, conflicts_with = "warm_up_timeout")]
    pub(crate) no_warm_up: bool,
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
    /// mostly wait on the engine), and on kind and kube at most half the task Pods the nodes
    /// the template's Pods can be placed on (taints tolerated, nodeSelector matched) still
    /// hold. `--test-threads` wins when both are given.
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
    /// Override every scenario's deadline.
    #[arg(long, value_name = "DURATION", value_parser = seconds_in(1, u64::MAX))]
    pub(crate) scenario_timeout: Option<u64>,
    /// The longest one step of a scenario may take (default: only the scenario's deadline
    /// applies).
    #[arg(long, value_name = "DURATION", value_parser = seconds_in(1, u64::MAX))]
    pub(crate) step_timeout: Option<u64>,
    /// The profile the run is judged by, recorded in its report: `release` requires every
    /// capability the backend offers (docker, compose, browser, node-view; and cluster on kind
    /// and kube) and immutable image references (digests). The `gate` command later judges
    /// such a report for one release's images. `--gate` is its old spelling (deprecated).
    #[arg(
        long = "gate-profile",
        alias = "gate",
        value_enum,
        default_value = "default"
    )]
    pub(crate) gate: GateProfile,
    /// Capabilities the run must be able to check (comma-separated: docker, compose, browser,
    /// node-view, cluster; or none); a scenario that lacks one fails instead of ending skipped or
    /// incompatible. Replaces what the template declares it serves
    /// (acceptance.kandev.ai/serves).
    #[arg(long, value_name = "LIST", value_parser = parse_requirements)]
    pub(crate) require: Option<Requirements>,
    /// The whole run's budget: past it, running scenarios tear down and time out, and no
    /// further scenario starts.
    #[arg(long, value_name = "DURATION", value_parser = seconds_in(1, u64::MAX))]
    pub(crate) deadline: Option<u64>,
    #[command(flatten)]
    pub(crate) scenarios: ScenarioSelection,
}

/// Which scenarios run, in libtest's words (the harness runs them as libtest trials); only
/// the libtest options that mean something here (libtest-mimic's own `Arguments`, flattened,
/// brought its usage line and a dozen options that do nothing here into `run --help`).
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct ScenarioSelection {
    /// Run only the scenarios whose names contain FILTER (`daemon::`, `lifecycle::teardown`).
    #[arg(value_name = "FILTER")]
    pub(crate) filter: Option<String>,
    /// FILTER (and every --skip) must equal a scenario's whole name.
    #[arg(long)]
    pub(crate) exact: bool,
    /// Leave out the scenarios whose names contain FILTER (may be given more than once).
    #[arg(long, value_name = "FILTER")]
    pub(crate) skip: Vec<String>,
    /// List the scenarios the filters select, one per line (`NAME: test`, as libtest does),
    /// and touch nothing.
    #[arg(long)]
    pub(crate) list: bool,
    /// With --list: text (libtest's lines), or json for tools (each scenario's name, promise
    /// and check ids).
    #[arg(long, value_enum, default_value = "text", requires = "list")]
    pub(crate) format: OutputFormat,
    /// How many scenarios run at once; the same as --jobs.
    #[arg(long, value_name = "N")]
    pub(crate) test_threads: Option<usize>,
    /// Write the per-scenario `test ... ok` lines to PATH (default: stdout, or beside the
    /// report when stderr is a terminal).
    #[arg(long, value_name = "PATH")]
    pub(crate) logfile: Option<String>,
}

impl ScenarioSelection {
    /// The same selection as libtest-mimic's arguments, which run the trials.
    pub(crate) fn libtest(&self) -> libtest_mimic::Arguments {
        libtest_mimic::Arguments {
            filter: self.filter.clone(),
            exact: self.exact,
            skip: self.skip.clone(),
            list: self.list,
            test_threads: self.test_threads,
            logfile: self.logfile.clone(),
            ..Default::default()
        }
    }
}

impl RunArgs {
    /// `--backend`, local when not given.
    pub(crate) fn backend(&self) -> BackendKind {
        self.backend.unwrap_or_default()
    }
}

#[derive(Args, Debug)]
pub(crate) struct LaunchArgs {
    /// The harness image the cluster's nodes can pull (`kandev-acceptance image harness`
    /// builds one here; push it, or `kind load docker-image` it).
    #[arg(long, value_name = "REF")]
    pub(crate) harness_image: String,
    /// How long the run inside the Pod may take (the Job's deadline, with the hold added).
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = seconds_in(1, u64::MAX))]
    pub(crate) job_timeout: u64,
    /// How long the Job's Pod may take to start (an image pull included).
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = seconds_in(1, u64::MAX))]
    pub(crate) start_timeout: u64,
    /// How long the finished run waits for its report to be retrieved (at least 10s).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = seconds_in(10, u64::MAX))]
    pub(crate) hold: u64,
    /// What `run` takes (passed on to the run in the Pod; --template and --prepare-script
    /// travel in a Secret, --report-dir is where the report is retrieved to).
    #[command(flatten)]
    pub(crate) run: RunArgs,
}

/// `launch`'s own options and the host-side ones the Pod's `run` gets otherwise (each takes
/// a value): not forwarded as they are.
pub(crate) const NOT_FORWARDED: [&str; 14] = [
    "--run-id",
    "--harness-image",
    "--job-timeout",
    "--start-timeout",
    "--hold",
    "--backend",
    "--context",
    "--kubeconfig",
    "--namespace",
    "--report",
    "--report-dir",
    "--template",
    "--prepare-script",
    "--executor-role",
];

#[derive(Args, Debug)]
pub(crate) struct GateArgs {
    /// The run's report: its report.json, or its folder (<report dir>/<run id>/).
    #[arg(long, value_name = "FILE|DIR")]
    pub(crate) report: PathBuf,
    /// The worker image the release ships, `name@sha256:<digest>`.
    #[arg(
        long,
        env = "KANDEV_ACCEPTANCE_WORKER_IMAGE",
        value_name = "REF@sha256:DIGEST"
    )]
    pub(crate) worker_image: String,
    /// The daemon (docker-engine) image the release ships, `name@sha256:<digest>`.
    #[arg(
        long,
        env = "KANDEV_ACCEPTANCE_DAEMON_IMAGE",
        value_name = "REF@sha256:DIGEST"
    )]
    pub(crate) daemon_image: String,
    /// The template file the release ships: the run must have used exactly it. Required,
    /// unless --no-template says the release ships none (named in the PASS line).
    #[arg(
        long,
        env = "KANDEV_ACCEPTANCE_TEMPLATE",
        value_name = "FILE",
        conflicts_with = "no_template"
    )]
    pub(crate) template: Option<PathBuf>,
    /// The release ships no template: the run's is not bound (the PASS line says so).
    #[arg(long)]
    pub(crate) no_template: bool,
    /// The prepare script the release ships: the run's sessions must have run exactly it.
    #[arg(long, env = "KANDEV_ACCEPTANCE_PREPARE_SCRIPT", value_name = "FILE")]
    pub(crate) prepare_script: Option<PathBuf>,
    /// The report's greatest age since the run finished (`90m`, `36h`, `7d`).
    #[arg(long, value_name = "DURATION", value_parser = max_age)]
    pub(crate) max_age: Option<u64>,
    /// Capabilities whose lack fails (default: as the release profile, every capability the
    /// report's backend offers: cluster only on kind and kube); `none` to excuse skipped and
    /// incompatible scenarios.
    #[arg(long, value_name = "LIST", value_parser = parse_requirements)]
    pub(crate) require: Option<Requirements>,
    /// text for people, or json for tools: passed, the PASS line or every reason, the
    /// report's own verdict (the exit code is the same).
    #[arg(long, value_enum, default_value = "text")]
    pub(crate) format: OutputFormat,
}

/// A run id is a label value (`acceptance.kandev.ai/run`), a DNS label's part (the namespace
/// `kandev-acceptance-<id>`, the launch's Job, `kandev-acc-<id>` for Kind) and a folder name:
/// lowercase letters, digits and `-`, starting and ending with a letter or digit, at most 40
/// characters (the namespace stays within a DNS label's 63). apimachinery's
/// `IsValidLabelValue` and `IsDNS1123Label` both hold for such an id.
pub(crate) fn parse_run_id(text: &str) -> Result<String, String> {
    let fine = !text.is_empty()
        && text.len() <= 40
        && text
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !text.starts_with('-')
        && !text.ends_with('-');
    fine.then(|| text.to_owned()).ok_or_else(|| {
        format!(
            "{text:?} is no run id: it labels the run's objects and names its namespace, so lowercase letters, digits and '-', starting and ending with a letter or digit, at most 40 (e.g. ci-1234-1)"
        )
    })
}

/// A duration in every time flag's one format: numbers with a unit, `s`, `m`, `h` or `d`,
/// one after another (`90s`, `10m`, `1h30m`, `7d`), or plain seconds (`90`, as the flags
/// took before). In seconds.
pub(crate) fn parse_seconds(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let wrong =
        || format!("{text:?} is no duration: write e.g. 90s, 10m, 1h30m, 7d (or plain seconds)");
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit()) {
        return text.parse::<u64>().map_err(|_| wrong());
    }
    let mut total: u64 = 0;
    let mut number = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit: u64 = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(wrong()),
        };
        let n: u64 = number.parse().map_err(|_| wrong())?;
        number.clear();
        total = n
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(wrong)?;
    }
    if !number.is_empty() || text.is_empty() {
        return Err(wrong());
    }
    Ok(total)
}

/// [`parse_seconds`] within `min..=max` seconds.
fn seconds_in(
    min: u64,
    max: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |text| {
        let seconds = parse_seconds(text)?;
        if seconds < min || seconds > max {
            let bound = if max == u64::MAX {
                format!("at least {min}s")
            } else {
                format!("from {min}s to {max}s")
            };
            return Err(format!("{text:?} is {seconds}s: {bound}"));
        }
        Ok(seconds)
    }
}

/// `gate --max-age`: a duration with its unit. A bare number is refused: the flag once took
/// hours, so `--max-age 36` meant 36 h to some and 36 s to others.
fn max_age(text: &str) -> Result<u64, String> {
    if !text.trim().is_empty() && text.trim().chars().all(|c| c.is_ascii_digit()) {
        return Err(format!(
            "{text:?} has no unit: write {text}h for hours, {text}m for minutes (or 90m, 36h, 7d)"
        ));
    }
    seconds_in(1, u64::MAX / 1000)(text)
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
    /// The Pod template to check (a v1/PodTemplate document, as a Kandev profile's
    /// pod_template_yaml holds it).
    #[arg(long, value_name = "FILE")]
    pub(crate) template: PathBuf,
    /// The template's main container (the agent's), which the rules single out.
    #[arg(long, value_name = "NAME", default_value = "kandev-agent")]
    pub(crate) main_container: String,
    /// The workspace mode the template is used with (managed-pvc, empty-dir,
    /// existing-claim): some rules depend on it.
    #[arg(long, value_enum, value_name = "MODE", default_value = "managed-pvc")]
    pub(crate) workspace_mode: WorkspaceMode,
    /// The workspace claim (PVC modes), for the rule that no other volume may alias it.
    #[arg(long, value_name = "NAME")]
    pub(crate) workspace_claim: Option<String>,
    /// Also the release gate's static rules: every image reference a digest, no
    /// `*_REQUIRED` placeholder left, declared capabilities known.
    #[arg(long)]
    pub(crate) for_release: bool,
    /// text for people (each finding with its field path), json for tools.
    #[arg(long, value_enum, default_value = "text")]
    pub(crate) format: OutputFormat,
}

#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub(crate) enum OutputFormat {
    #[default]
    Text,
    Json,
}

/// `gc`'s words for the cluster options it shares with `run`.
const GC_NAMESPACE: &str = "The namespace the runs used (their --namespace), swept object by object; the runs' own namespaces are found by label without it";
const GC_KIND_CLUSTER: &str = "Also sweep inside this existing Kind cluster (one runs used with --kind-cluster): their labelled namespaces and objects; the cluster itself is never deleted";
const GC_CONTEXT: &str = "The kubeconfig context of the cluster to sweep (--backend kube); required, the current context is never used implicitly";
const GC_KUBECONFIG: &str =
    "Kubeconfig file for --backend kube (default: KUBECONFIG, then ~/.kube/config)";

fn gc_help(arg: clap::Arg, help: &'static str) -> clap::Arg {
    arg.help(help).long_help(help)
}

#[derive(Args, Debug)]
pub(crate) struct GcArgs {
    /// Where to look: local (this host's engine), kind (the Kind clusters runs created here),
    /// or kube (a cluster: --context).
    #[arg(long, value_enum, default_value = "local", hide_possible_values = true)]
    pub(crate) backend: BackendKind,
    #[command(flatten)]
    pub(crate) cluster: ClusterArgs,
    /// Only what this run created (its id is its report folder's name).
    #[arg(long, value_name = "ID", value_parser = parse_run_id)]
    pub(crate) run: Option<String>,
    /// Every run the harness labelled that is not alive. Required on a cluster (kind, kube)
    /// when --run is not given; locally it is the default.
    #[arg(long, conflicts_with = "run")]
    pub(crate) all: bool,
    /// Also remove runs that are still alive (their lease is live): only for a run whose
    /// process is gone before its lease expired, or a lease you know to be stale.
    #[arg(long)]
    pub(crate) force: bool,
    /// List what would be removed; remove nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Orphaned Pod cgroups (their Pod's containers gone, no process left) are removed only
    /// when older than this, so that a Pod being created right now is safe.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = seconds_in(0, u64::MAX))]
    pub(crate) older_than: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_time_flag_takes_one_duration_format() {
        for (text, seconds) in [
            ("90", 90),
            ("90s", 90),
            ("10m", 600),
            ("1h30m", 5400),
            ("36h", 129_600),
            ("7d", 604_800),
            ("1d2h3m4s", 93_784),
        ] {
            assert_eq!(parse_seconds(text), Ok(seconds), "{text}");
        }
        for bad in ["", "m", "10x", "1h30", "-5", "1.5h", "h1"] {
            let problem = parse_seconds(bad).unwrap_err();
            assert!(problem.contains("e.g. 90s, 10m, 1h30m"), "{bad}: {problem}");
        }
        let parse = |line: &str| Cli::try_parse_from(line.split_whitespace());
        let Ok(Cli {
            command: Command::Run(run),
        }) = parse(
            "kandev-acceptance run --deadline 10m --step-timeout 90 --docker-ready-timeout 2m",
        )
        else {
            panic!("run's time flags")
        };
        assert_eq!(
            (run.deadline, run.step_timeout, run.docker_ready_timeout),
            (Some(600), Some(90), 120)
        );
        assert!(parse("kandev-acceptance run --docker-ready-timeout 3m").is_err());
        // A cold node's pull: minutes, up to an hour; 60 s unless given.
        let Ok(Cli {
            command: Command::Run(run),
        }) = parse("kandev-acceptance run --pod-ready-timeout 10m")
        else {
            panic!("--pod-ready-timeout")
        };
        assert_eq!(run.pod_ready_timeout, 600);
        assert!(parse("kandev-acceptance run --pod-ready-timeout 2h").is_err());
        // The cluster warm-up: 10 minutes unless given; 0s or --no-warm-up skips it.
        let Ok(Cli {
            command: Command::Run(run),
        }) = parse("kandev-acceptance run")
        else {
            panic!("run")
        };
        assert_eq!((run.warm_up_timeout, run.no_warm_up), (600, false));
        let Ok(Cli {
            command: Command::Run(run),
        }) = parse("kandev-acceptance run --warm-up-timeout 0s")
        else {
            panic!("--warm-up-timeout 0s")
        };
        assert_eq!(run.warm_up_timeout, 0);
        assert!(parse("kandev-acceptance run --no-warm-up").is_ok());
        assert!(parse("kandev-acceptance run --no-warm-up --warm-up-timeout 5m").is_err());
        assert!(parse("kandev-acceptance run --warm-up-timeout 3h").is_err());
        let Ok(Cli {
            command: Command::Launch(launch),
        }) = parse("kandev-acceptance launch --harness-image h --hold 15m")
        else {
            panic!("launch's time flags")
        };
        assert_eq!(
            (launch.job_timeout, launch.start_timeout, launch.hold),
            (3600, 300, 900)
        );
        assert!(parse("kandev-acceptance launch --harness-image h --hold 5s").is_err());
        let Ok(Cli {
            command: Command::Gate(gate),
        }) = parse(
            "kandev-acceptance gate --report r --worker-image w --daemon-image d --max-age 36h",
        )
        else {
            panic!("gate's time flag")
        };
        assert_eq!(gate.max_age, Some(129_600));
        // Below an hour works; a bare number has no unit to read.
        let below_an_hour = parse(
            "kandev-acceptance gate --report r --worker-image w --daemon-image d --max-age 30m",
        );
        assert!(
            matches!(below_an_hour, Ok(Cli { command: Command::Gate(g) }) if g.max_age == Some(1800))
        );
        let bare = parse(
            "kandev-acceptance gate --report r --worker-image w --daemon-image d --max-age 36",
        );
        assert!(bare.is_err_and(|e| e.to_string().contains("has no unit")));
        let Ok(Cli {
            command: Command::Gc(gc),
        }) = parse("kandev-acceptance gc --older-than 2m")
        else {
            panic!("gc's time flag")
        };
        assert_eq!(gc.older_than, 120);
    }
}

#[cfg(test)]
mod help {
    use super::Cli;
    use clap::CommandFactory;

    /// Every argument of every command (and subcommand) says what it is for: `--help` is the
    /// first document an operator reads.
    #[test]
    fn every_argument_has_help() {
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in command.get_subcommands() {
                if sub.get_about().is_none() && sub.get_long_about().is_none() {
                    missing.push(format!("{path} {} (the command)", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "kandev-acceptance", &mut missing);
        assert!(missing.is_empty(), "without help: {missing:#?}");
    }
}

/// What `--help` prints for `words` (`["run"]`, `["report", "show"]`).
#[cfg(test)]
fn help_of(words: &[&str]) -> String {
    use clap::CommandFactory;
    let mut command = Cli::command();
    command.build();
    let mut current = &mut command;
    for word in words {
        current = current.find_subcommand_mut(word).expect("a command");
    }
    current.render_long_help().to_string()
}

#[cfg(test)]
mod help_text {
    use super::help_of;

    /// `run --help` and `launch --help` read as the harness's own commands: their usage
    /// first, then what they do, and only the libtest options that select scenarios here
    /// (libtest-mimic's flattened arguments printed its usage and a dozen that did nothing).
    #[test]
    fn run_and_launch_help_is_the_harness_own() {
        for command in ["run", "launch"] {
            let help = help_of(&[command]);
            assert!(
                help.starts_with(&format!("Usage: kandev-acceptance {command} [OPTIONS]")),
                "{help}"
            );
            let about = help.lines().nth(2).unwrap_or_default();
            assert!(about.starts_with("Run the"), "{command}: {about:?}");
            for kept in ["--exact", "--skip", "--list", "--test-threads", "[FILTER]"] {
                assert!(help.contains(kept), "{command} lost {kept}");
            }
            for dropped in [
                "--nocapture",
                "--ignored",
                "--include-ignored",
                "--show-output",
                "--bench",
                "--color",
                "--quiet",
                "terse",
                "--force-run-in-process",
            ] {
                assert!(!help.contains(dropped), "{command} still lists {dropped}");
            }
        }
    }

    /// The main flags can come from the environment (a CI job's variables), and `--help`
    /// says which variable, beside the flag.
    #[test]
    fn the_main_flags_are_bound_to_environment_variables_shown_in_help() {
        let run = help_of(&["run"]);
        for (flag, variable) in [
            ("--backend", "KANDEV_ACCEPTANCE_BACKEND"),
            ("--context", "KANDEV_ACCEPTANCE_CONTEXT"),
            ("--namespace", "KANDEV_ACCEPTANCE_NAMESPACE"),
            ("--template", "KANDEV_ACCEPTANCE_TEMPLATE"),
            ("--prepare-script", "KANDEV_ACCEPTANCE_PREPARE_SCRIPT"),
            ("--worker-image", "KANDEV_ACCEPTANCE_WORKER_IMAGE"),
            ("--daemon-image", "KANDEV_ACCEPTANCE_DAEMON_IMAGE"),
            ("--report-dir", "KANDEV_ACCEPTANCE_REPORT_DIR"),
        ] {
            let at = run
                .find(&format!("{flag} <"))
                .unwrap_or_else(|| panic!("{flag}"));
            let entry = &run[at..];
            let next = entry[2..].find("\n      --").map_or(entry.len(), |n| n + 2);
            assert!(
                entry[..next].contains(&format!("[env: {variable}=")),
                "{flag}: {}",
                &entry[..next]
            );
        }
        let gate = help_of(&["gate"]);
        assert!(
            gate.contains("[env: KANDEV_ACCEPTANCE_WORKER_IMAGE="),
            "{gate}"
        );
    }

    /// `launch --help` lists no option launch refuses or sets itself; `run --help` has them.
    #[test]
    fn launch_help_lists_no_option_it_refuses() {
        let launch = help_of(&["launch"]);
        let run = help_of(&["run"]);
        for refused in [
            "--in-cluster",
            "--bookkeeper-token",
            "--hold-report",
            "--repeat",
            "--keep",
        ] {
            assert!(
                !launch.contains(&format!("{refused} "))
                    && !launch.contains(&format!("{refused}\n")),
                "launch --help lists {refused}"
            );
            // --hold-report is launch's to pass: hidden from run's help too.
            assert!(
                refused == "--hold-report" || run.contains(refused),
                "run --help lost {refused}"
            );
        }
    }

    /// `gc --help` describes gc's options: the cluster options it shares with `run` say what
    /// they mean for a sweep, not for a run.
    #[test]
    fn gc_help_speaks_of_gc() {
        let gc = help_of(&["gc"]);
        for runs_words in [
            "to run in",
            "the run creates",
            "images loaded",
            "instead of creating",
        ] {
            assert!(
                !gc.contains(runs_words),
                "gc --help says {runs_words:?}:\n{gc}"
            );
        }
        assert!(gc.contains("swept object by object"), "{gc}");
        let run = help_of(&["run"]);
        assert!(run.contains("An existing namespace to run in"), "{run}");
    }

    /// Help is printed text: no rustdoc link syntax (a doc comment's [`Type`] reads as
    /// brackets and backticks there) in any command's help.
    #[test]
    fn no_rustdoc_links_in_help() {
        use clap::CommandFactory;
        fn walk(command: &clap::Command, words: &mut Vec<String>, found: &mut Vec<String>) {
            let names: Vec<&str> = words.iter().map(String::as_str).collect();
            let help = help_of(&names);
            if help.contains("[`") {
                found.push(names.join(" "));
            }
            for sub in command.get_subcommands() {
                words.push(sub.get_name().to_owned());
                walk(sub, words, found);
                words.pop();
            }
        }
        let mut found = Vec::new();
        walk(&super::Cli::command(), &mut Vec::new(), &mut found);
        assert!(found.is_empty(), "rustdoc links in the help of: {found:?}");
    }
}
