//! The `kandev-acceptance` command line.
//!
//! `main` builds the tokio runtime by hand (not `#[tokio::main]`): with one test thread,
//! libtest-mimic runs trials on the main thread, and `block_on` inside a runtime would panic.
//! It returns the mapped exit code instead of exiting past the report writer.

use crate::backend::Backend;
use crate::backend::kube::cluster::{ClusterSettings, KindSettings};
use crate::backend::local::{LocalBackend, connect_engine};
use crate::identity::{LABEL_MANAGED, LABEL_RUN};
use crate::report::{Configuration, Outcome, Report, SCHEMA_VERSION, Summary};
use crate::runner::{Keep, Run, RunConfig, Scenario, StopReason};
use crate::template::{self, RuleOptions, Severity, WorkspaceMode};
use clap::{Args, Parser, Subcommand, ValueEnum};
use libtest_mimic::Trial;
use sha2::{Digest, Sha256};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Exit codes, for CI and release gates.
pub mod exit {
    /// Every selected scenario passed (or was skipped/incompatible with a reason).
    pub const SUCCESS: u8 = 0;
    /// At least one scenario failed or timed out: a promise broke.
    pub const SCENARIO_FAILED: u8 = 1;
    /// Bad command line or invalid template; nothing was created.
    pub const USAGE: u8 = 2;
    /// The environment could not be prepared or a scenario errored (engine, images, infra).
    pub const ENVIRONMENT: u8 = 3;
    /// Something the run created is still there after teardown.
    pub const LEAKED: u8 = 4;
    /// The filter selected no scenario.
    pub const NOTHING_SELECTED: u8 = 5;
    /// The run was interrupted (Ctrl-C, SIGTERM); the report is marked so.
    pub const INTERRUPTED: u8 = 130;
}

#[derive(Parser, Debug)]
#[command(
    name = "kandev-acceptance",
    version,
    about = "End-to-end acceptance of Kandev's Docker-workloads task Pods"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the acceptance scenarios (libtest-style filters, --list, --exact, --skip, --test-threads).
    Run(Box<RunArgs>),
    /// Check a Pod template with Kandev's rules; creates nothing.
    Validate(ValidateArgs),
    /// Remove what a killed run left behind, by label.
    Gc(GcArgs),
    /// Work with reports.
    Report {
        #[command(subcommand)]
        command: ReportCommand,
    },
}

#[derive(Subcommand, Debug)]
enum ReportCommand {
    /// Print a report's summary.
    Show { file: PathBuf },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BackendKind {
    /// The embedded default: a Docker engine on this host.
    Local,
    /// A Kind cluster the run creates from kind/cluster.yaml (and deletes), images loaded.
    Kind,
    /// An existing cluster: --context (required) from --kubeconfig or KUBECONFIG.
    Kube,
}

/// Where a `kind`/`kube` cluster comes from (shared by `run` and `gc`).
#[derive(Args, Debug, Clone)]
struct ClusterArgs {
    /// Kubeconfig file for --backend kube (default: KUBECONFIG, then ~/.kube/config).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context for --backend kube; required (the current context is never
    /// used implicitly).
    #[arg(long, value_name = "NAME")]
    context: Option<String>,
    /// An existing namespace to run in (it must admit privileged Pods); default: the run
    /// creates kandev-acceptance-<run id> and removes it.
    #[arg(long, value_name = "NAME")]
    namespace: Option<String>,
    /// The kind binary.
    #[arg(long, value_name = "PATH", default_value = "kind")]
    kind_bin: PathBuf,
    /// Use (and never delete) this existing Kind cluster instead of creating kandev-acc-<run id>.
    #[arg(long, value_name = "NAME")]
    kind_cluster: Option<String>,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[arg(long, value_enum, default_value = "local")]
    backend: BackendKind,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// The Kind cluster configuration (node image pinned by digest).
    #[arg(long, value_name = "FILE")]
    kind_config: Option<PathBuf>,
    /// Override the configuration's Kind node image.
    #[arg(long, value_name = "REF")]
    kind_node_image: Option<String>,
    /// Leave the Kind cluster the run created (remove later: kind delete cluster --name ...).
    #[arg(long)]
    keep_cluster: bool,
    /// Size of a managed workspace claim (`workspace.size`).
    #[arg(long, value_name = "QUANTITY", default_value = "10Gi")]
    workspace_size: String,
    /// Access modes of a managed workspace claim (`workspace.access_modes`).
    #[arg(
        long,
        value_name = "MODES",
        value_delimiter = ',',
        default_value = "ReadWriteOnce"
    )]
    workspace_access_modes: Vec<String>,
    /// Storage class of a managed workspace claim (default: the cluster's default class).
    #[arg(long, value_name = "NAME")]
    storage_class: Option<String>,
    /// --backend kube: admit a privileged inspector Pod (host PID, the node's cgroup tree
    /// read-only) on each session's node for the node view; without it the scenarios that
    /// need the node's own view are skipped.
    #[arg(long)]
    node_inspector: bool,
    /// The inspector's image (default: the docker-engine image); needs sh, find, tr, dmesg.
    #[arg(long, value_name = "REF")]
    node_inspector_image: Option<String>,
    /// The Pod template (a v1/PodTemplate document); default: Kandev's full-worker fixture.
    #[arg(long, value_name = "FILE")]
    template: Option<PathBuf>,
    /// The profile's prepare script; default: the full-worker prepare script.
    #[arg(long, value_name = "FILE")]
    prepare_script: Option<PathBuf>,
    /// Use this worker image (present in the engine) instead of building the fixture one.
    #[arg(long, value_name = "REF")]
    worker_image: Option<String>,
    /// Use this docker-engine image (present in the engine) instead of building the fixture one.
    #[arg(long, value_name = "REF")]
    daemon_image: Option<String>,
    /// Debian base for the fixture images if present in the engine; otherwise debootstrapped.
    #[arg(long, value_name = "REF", default_value = "debian:bookworm")]
    base_image: String,
    #[arg(long, default_value = "kandev-agent")]
    main_container: String,
    #[arg(long, default_value = "docker-engine")]
    daemon_container: String,
    #[arg(long, value_enum, default_value = "managed-pvc")]
    workspace_mode: WorkspaceMode,
    /// The claim `--workspace-mode existing-claim` mounts (never created, relabelled or
    /// deleted by the harness).
    #[arg(long, value_name = "NAME")]
    workspace_claim: Option<String>,
    /// Folder for reports (`<DIR>/<run-id>/report.json`).
    #[arg(long = "report", value_name = "DIR")]
    report_dir: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "never")]
    keep: Keep,
    /// The prepare script's bound on waiting for `docker info` (1..=120).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u32).range(1..=120))]
    docker_ready_timeout: u32,
    /// The Pod-level pids limit (the kubelet's podPidsLimit).
    #[arg(long, default_value_t = 4096)]
    pod_pids_limit: i64,
    /// Tools the worker image must carry (`worker::toolchain`; comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "git,python-venv,c,node,docker,compose"
    )]
    required_tools: Vec<String>,
    /// Tools checked when present (a missing one is a finding).
    #[arg(long, value_delimiter = ',', default_value = "buildx,go,rust,pnpm")]
    optional_tools: Vec<String>,
    /// Scenarios (and so sessions) at once; default: twice the cores, at most 8 (scenarios
    /// mostly wait on the engine). `--test-threads` wins when both are given.
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// Run a failed, errored or timed-out scenario again up to N times; a later pass is
    /// reported flaky.
    #[arg(long, value_name = "N", default_value_t = 0)]
    retries: u32,
    /// Run the selection N times (each a run with its own report) and summarize the pass
    /// rates in `<report dir>/repeat-<first run id>/repeat.json`.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    repeat: u32,
    /// Override every scenario's deadline, in seconds.
    #[arg(long, value_name = "SECONDS")]
    scenario_timeout: Option<u64>,
    /// The longest one step of a scenario may take, in seconds (default: only the
    /// scenario's deadline applies).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    step_timeout: Option<u64>,
    /// The whole run's budget, in seconds: past it, running scenarios tear down and time
    /// out, and no further scenario starts.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    deadline: Option<u64>,
    #[command(flatten)]
    libtest: libtest_mimic::Arguments,
}

#[derive(Args, Debug)]
struct ValidateArgs {
    #[arg(long, value_name = "FILE")]
    template: PathBuf,
    #[arg(long, default_value = "kandev-agent")]
    main_container: String,
    #[arg(long, value_enum, default_value = "managed-pvc")]
    workspace_mode: WorkspaceMode,
    /// The workspace claim (PVC modes), for the rule that no other volume may alias it.
    #[arg(long, value_name = "NAME")]
    workspace_claim: Option<String>,
    #[arg(long, value_enum, default_value = "text")]
    format: OutputFormat,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum OutputFormat {
    Text,
    Json,
}

#[derive(Args, Debug)]
struct GcArgs {
    /// Where to look: the local engine, Kind clusters, or a cluster (--context).
    #[arg(long, value_enum, default_value = "local")]
    backend: BackendKind,
    #[command(flatten)]
    cluster: ClusterArgs,
    /// Only what this run created; default: everything the harness labelled.
    #[arg(long, value_name = "ID")]
    run: Option<String>,
    /// List what would be removed; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Orphaned Pod cgroups (their Pod's containers gone, no process left) are removed only
    /// when older than this many seconds, so that a Pod being created right now is safe.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    older_than: u64,
}

/// Entry point of the `kandev-acceptance` binary.
pub fn main(registry: Vec<Scenario>) -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() {
                exit::USAGE
            } else {
                exit::SUCCESS
            });
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KANDEV_ACCEPTANCE_LOG")
                // kube-rs logs every failed connection at error level; the harness reports
                // the failure itself, once, with its fix.
                .unwrap_or_else(|_| "warn,kube_client=off".into()),
        )
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: start the async runtime: {e}");
            return ExitCode::from(exit::ENVIRONMENT);
        }
    };
    let code = match cli.command {
        Command::Run(args) => run(*args, registry, &runtime),
        Command::Validate(args) => validate(&args),
        Command::Gc(args) => runtime.block_on(gc(&args)),
        Command::Report {
            command: ReportCommand::Show { file },
        } => match crate::report::read(&file) {
            Ok(report) => {
                print!("{}", crate::report::human_summary(&report, &file));
                exit::SUCCESS
            }
            Err(e) => {
                eprintln!(
                    "error: read report {}: {e:#}\n  fix: pass the report.json a run wrote (reports/<run-id>/report.json)",
                    file.display()
                );
                exit::USAGE
            }
        },
    };
    ExitCode::from(code)
}

fn read_input(path: &PathBuf, what: &str) -> Result<String, u8> {
    let bytes = std::fs::read(path).map_err(|e| {
        let fix = match e.kind() {
            std::io::ErrorKind::NotFound => "pass the path of an existing file",
            std::io::ErrorKind::PermissionDenied => "make it readable for this user",
            std::io::ErrorKind::IsADirectory => "pass a file, not a folder",
            _ => "pass a readable file",
        };
        eprintln!(
            "error: read the {what} {}: {e}\n  fix: {fix}",
            path.display()
        );
        exit::USAGE
    })?;
    String::from_utf8(bytes).map_err(|e| {
        eprintln!(
            "error: the {what} {} is not UTF-8 text (invalid byte at offset {})\n  fix: save it as UTF-8",
            path.display(),
            e.utf8_error().valid_up_to()
        );
        exit::USAGE
    })
}

fn validate(args: &ValidateArgs) -> u8 {
    let text = match read_input(&args.template, "template") {
        Ok(t) => t,
        Err(code) => return code,
    };
    let findings = check_template(
        &text,
        &args.main_container,
        args.workspace_mode,
        args.workspace_claim.as_deref(),
    );
    let errors = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    match args.format {
        OutputFormat::Json => println!(
            "{}",
            serde_json::json!({"valid": errors == 0, "findings": findings})
        ),
        OutputFormat::Text => {
            for finding in &findings {
                println!("{finding}");
            }
            println!(
                "{}: {errors} errors, {} warnings",
                args.template.display(),
                findings.len() - errors
            );
        }
    }
    if errors == 0 {
        exit::SUCCESS
    } else {
        exit::USAGE
    }
}

/// Parses and checks a template; fixture placeholders count as images.
fn check_template(
    text: &str,
    main_container: &str,
    mode: WorkspaceMode,
    claim: Option<&str>,
) -> Vec<template::TemplateFinding> {
    let rendered = template::render(text, "kandev-acceptance/worker", "kandev-acceptance/daemon");
    match template::parse(&rendered.text) {
        Ok(parsed) => template::validate(
            &parsed,
            &RuleOptions {
                main_container: main_container.into(),
                workspace_mode: mode,
                workspace_claim: claim.map(str::to_owned),
            },
        ),
        Err(findings) => findings,
    }
}

fn cluster_settings(args: &RunArgs) -> Option<ClusterSettings> {
    let c = &args.cluster;
    let kind = match args.backend {
        BackendKind::Local => return None,
        BackendKind::Kube => None,
        BackendKind::Kind => Some(KindSettings {
            kind_bin: c.kind_bin.clone(),
            cluster: c.kind_cluster.clone(),
            config: args
                .kind_config
                .clone()
                .unwrap_or_else(|| crate::paths::workspace_root().join("kind/cluster.yaml")),
            node_image: args.kind_node_image.clone(),
            keep_cluster: args.keep_cluster,
        }),
    };
    Some(ClusterSettings {
        kind,
        kubeconfig: c.kubeconfig.clone(),
        context: c.context.clone(),
        namespace: c.namespace.clone(),
        workspace_size: args.workspace_size.clone(),
        workspace_access_modes: args.workspace_access_modes.clone(),
        storage_class: args.storage_class.clone(),
        node_inspector: args.node_inspector,
        node_inspector_image: args.node_inspector_image.clone(),
    })
}

fn run(args: RunArgs, registry: Vec<Scenario>, runtime: &tokio::runtime::Runtime) -> u8 {
    if args.backend == BackendKind::Kube && !args.libtest.list {
        if args.cluster.context.is_none() {
            eprintln!(
                "error: --backend kube needs --context NAME: the harness never uses the kubeconfig's current context implicitly"
            );
            return exit::USAGE;
        }
        if args.worker_image.is_none() || args.daemon_image.is_none() {
            eprintln!(
                "error: --backend kube runs your images: pass --worker-image and --daemon-image references the cluster can pull (this harness never pushes to a registry)"
            );
            return exit::USAGE;
        }
    }
    let registry = Arc::new(registry);
    if args.libtest.list {
        // Listing touches nothing: no engine, no template.
        let trials = registry
            .iter()
            .map(|s| Trial::test(s.name, || Ok(())))
            .collect();
        let _ = libtest_mimic::run(&args.libtest, trials);
        return exit::SUCCESS;
    }
    let config = RunConfig {
        template: args
            .template
            .clone()
            .unwrap_or_else(crate::paths::default_template),
        prepare_script: args
            .prepare_script
            .clone()
            .unwrap_or_else(crate::paths::default_prepare_script),
        main_container: args.main_container.clone(),
        daemon_container: args.daemon_container.clone(),
        workspace_mode: args.workspace_mode,
        base_image: args.base_image.clone(),
        worker_image: args.worker_image.clone(),
        daemon_image: args.daemon_image.clone(),
        report_dir: args
            .report_dir
            .clone()
            .unwrap_or_else(crate::paths::reports),
        keep: args.keep,
        docker_ready_timeout_seconds: args.docker_ready_timeout,
        pod_pids_limit: args.pod_pids_limit,
        scenario_timeout: args.scenario_timeout.map(Duration::from_secs),
        required_tools: args.required_tools.clone(),
        optional_tools: args.optional_tools.clone(),
        retries: args.retries,
        workspace_claim: args.workspace_claim.clone(),
        cluster: cluster_settings(&args),
        step_timeout: args.step_timeout.map(Duration::from_secs),
        deadline: args.deadline.map(Duration::from_secs),
    };
    let template_text = match read_input(&config.template, "template") {
        Ok(t) => t,
        Err(code) => return code,
    };
    let prepare_text = match read_input(&config.prepare_script, "prepare script") {
        Ok(t) => t,
        Err(code) => return code,
    };
    // Kandev's rules first: an invalid template creates nothing, and every problem is named.
    let findings = check_template(
        &template_text,
        &config.main_container,
        config.workspace_mode,
        None,
    );
    if findings.iter().any(|f| f.severity == Severity::Error) {
        eprintln!(
            "error: the template {} breaks Kandev's rules; nothing was created:",
            config.template.display()
        );
        for finding in &findings {
            eprintln!("  {finding}");
        }
        return exit::USAGE;
    }
    for image in [&config.worker_image, &config.daemon_image]
        .into_iter()
        .flatten()
    {
        if !valid_reference(image) {
            eprintln!(
                "error: {image:?} is not a valid image reference\n  fix: pass name[:tag][@sha256:<64 hex>] of an image present in the engine"
            );
            return exit::USAGE;
        }
    }
    if let Err(e) = std::fs::create_dir_all(&config.report_dir) {
        eprintln!(
            "error: create the report folder {}: {e}\n  fix: pass a writable --report DIR",
            config.report_dir.display()
        );
        return exit::USAGE;
    }

    let mut libtest = args.libtest;
    if libtest.test_threads.is_none() {
        let cores = std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(2);
        libtest.test_threads = Some(args.jobs.unwrap_or((cores * 2).min(8)).max(1));
    }
    let repeat = args.repeat.max(1);
    let mut runs = Vec::new();
    for iteration in 1..=repeat {
        if repeat > 1 {
            eprintln!("repeat {iteration}/{repeat}");
        }
        let (code, report) = run_once(
            &config,
            &libtest,
            &registry,
            runtime,
            template_text.clone(),
            prepare_text.clone(),
        );
        let stop =
            code == exit::INTERRUPTED || code == exit::USAGE || code == exit::NOTHING_SELECTED;
        runs.push((code, report));
        if stop {
            break;
        }
    }
    if repeat == 1 {
        return runs.first().map(|(code, _)| *code).unwrap_or(exit::SUCCESS);
    }
    crate::repeat::finish(&config.report_dir, &runs)
}

/// One run of the selected scenarios: its own id, report folder, signal and deadline
/// watchers; returns the exit code and the report (None when nothing ran).
fn run_once(
    config: &RunConfig,
    libtest: &libtest_mimic::Arguments,
    registry: &Arc<Vec<Scenario>>,
    runtime: &tokio::runtime::Runtime,
    template_text: String,
    prepare_text: String,
) -> (u8, Option<Report>) {
    let run = Arc::new(Run::new(
        crate::identity::new_run_id(),
        config.clone(),
        template_text,
        prepare_text,
    ));
    // The run's folder exists from the start, so that the run id can be found (and `gc --run`
    // used) even when the run is killed before it writes its report.
    if let Err(e) = std::fs::create_dir_all(run.report_folder()) {
        eprintln!(
            "error: create {}: {e}\n  fix: pass a writable --report DIR",
            run.report_folder().display()
        );
        return (exit::USAGE, None);
    }
    let mut libtest = libtest.clone();
    // A live view on a terminal: libtest's own lines go to a log beside the report so that
    // they do not tear the view (the view prints one line per finished scenario instead).
    if std::io::stderr().is_terminal() && libtest.logfile.is_none() {
        run.live.show(&run.progress);
        libtest.logfile = Some(
            run.report_folder()
                .join("libtest.log")
                .display()
                .to_string(),
        );
    }
    // A cluster is prepared before any trial: an unreachable API server or a failed
    // preflight stops the run at once with one clear message, and nothing was created.
    if config.cluster.is_some() {
        let prepared = runtime.block_on(async {
            tokio::select! {
                env = run.env() => env.map(|_| ()),
                _ = tokio::signal::ctrl_c() => Err("interrupted while preparing the cluster".to_owned()),
            }
        });
        if let Err(e) = prepared {
            run.live.finish();
            eprintln!("error: {e}");
            let (_, report) = runtime.block_on(finish_run(&run, registry));
            return (exit::ENVIRONMENT, report);
        }
    }
    let handle = runtime.handle().clone();
    let watchers = [
        handle.spawn(watch_signals(run.clone())),
        handle.spawn(run.clone().enforce_deadline()),
    ];
    let trials: Vec<Trial> = (0..registry.len())
        .map(|index| {
            let (run, registry, handle) = (run.clone(), registry.clone(), handle.clone());
            let name = registry.get(index).map(|s| s.name).unwrap_or_default();
            Trial::test(name, move || {
                let Some(scenario) = registry.get(index) else {
                    return Err("no such scenario".into());
                };
                let report = handle.block_on(run.run_scenario(scenario));
                match report.outcome {
                    Outcome::Passed => Ok(()),
                    Outcome::Skipped | Outcome::Incompatible => {
                        run.live.println(&format!(
                            "{}: {} ({})",
                            scenario.name,
                            report.outcome.as_str(),
                            report.diagnosis.unwrap_or_default()
                        ));
                        Ok(())
                    }
                    other => Err(format!(
                        "{}: {}",
                        other.as_str(),
                        report.diagnosis.unwrap_or_default()
                    )
                    .into()),
                }
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&libtest, trials);
    run.live.finish();
    for watcher in watchers {
        watcher.abort();
    }
    if conclusion.num_passed + conclusion.num_failed == 0 {
        eprintln!("no scenario matched the filter; see `kandev-acceptance run --list`");
        // Nothing ran: leave no empty run folder behind.
        let _ = std::fs::remove_dir_all(run.report_folder());
        return (exit::NOTHING_SELECTED, None);
    }
    let (code, report) = runtime.block_on(finish_run(&run, registry));
    (code, report)
}

fn valid_reference(reference: &str) -> bool {
    !reference.is_empty()
        && reference.len() <= 255
        && reference
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-/:@".contains(c))
        && !reference.starts_with(['.', '-', '/', ':', '@'])
}

async fn watch_signals(run: Arc<Run>) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let mut seen = 0;
    loop {
        let term_signal = async {
            match term.as_mut() {
                Some(t) => {
                    t.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            () = term_signal => {},
        }
        seen += 1;
        if seen == 1 {
            eprintln!(
                "\ncancelling: tearing down what the run created (interrupt again to abort now; `kandev-acceptance gc --run {}` removes leftovers)",
                run.id
            );
            run.cancel();
        } else {
            eprintln!(
                "aborting without teardown; remove leftovers with: kandev-acceptance gc --run {}",
                run.id
            );
            std::process::exit(i32::from(exit::INTERRUPTED));
        }
    }
}

async fn finish_run(run: &Arc<Run>, registry: &[Scenario]) -> (u8, Option<Report>) {
    let mut scenarios = run.results();
    let order = |name: &str| {
        registry
            .iter()
            .position(|s| s.name == name)
            .unwrap_or(usize::MAX)
    };
    scenarios.sort_by_key(|s| order(&s.name));
    let env = run.prepared_env();
    if let Some(node) = env.as_ref().and_then(|e| e.node.clone()) {
        node.shutdown().await;
    }
    let leftovers = match &env {
        Some(env) => env
            .backend
            .list_labelled(&[(LABEL_RUN, run.id.as_str())])
            .await
            .unwrap_or_else(|e| vec![format!("(inventory failed: {e})")]),
        None => Vec::new(),
    };
    // What the run set up in the cluster (namespace or executor objects, a Kind cluster).
    let teardown = match env.as_ref().and_then(|e| e.cluster.clone()) {
        // Kept Pods (`--keep`) keep their namespace, so that they stay reachable.
        Some(cluster) if run.config.keep == Keep::Never || leftovers.is_empty() => {
            cluster.teardown().await
        }
        Some(cluster) => {
            eprintln!(
                "kept the run's namespace {} (--keep); remove later: kandev-acceptance gc --backend {} --run {}",
                cluster.namespace,
                if cluster.kind.is_some() {
                    "kind"
                } else {
                    "kube"
                },
                run.id
            );
            Vec::new()
        }
        None => Vec::new(),
    };
    let settings = serde_json::to_value(&run.config).unwrap_or_default();
    let sha = hex::encode(Sha256::digest(settings.to_string().as_bytes()));
    let report = Report {
        schema_version: SCHEMA_VERSION,
        run_id: run.id.clone(),
        harness_version: env!("CARGO_PKG_VERSION").into(),
        started_at: crate::report::rfc3339(run.started_at),
        finished_at: crate::report::rfc3339(std::time::SystemTime::now()),
        duration_ms: run.started.elapsed().as_millis() as u64,
        interrupted: run.stop_reason() == Some(StopReason::Signal),
        deadline_exceeded: run.stop_reason() == Some(StopReason::Deadline),
        backend: env
            .as_ref()
            .map(|e| e.backend.name())
            .unwrap_or(match &run.config.cluster {
                None => "local",
                Some(c) if c.kind.is_some() => "kind",
                Some(_) => "kube",
            })
            .into(),
        environment: env
            .as_ref()
            .map(|e| e.environment.clone())
            .unwrap_or_default(),
        configuration: Configuration {
            sha256: format!("sha256:{sha}"),
            settings,
        },
        summary: Summary::of(&scenarios),
        setup: run.setup_steps(),
        scenarios,
        leftovers,
        teardown,
    };
    let path = run.report_folder().join("report.json");
    if let Err(e) = crate::report::write(&report, &path) {
        eprintln!("error: write the report {}: {e}", path.display());
        return (exit::ENVIRONMENT, Some(report));
    }
    let folder = run.report_folder();
    for (name, text) in [
        ("junit.xml", crate::outputs::junit(&report)),
        (
            "ctrf.json",
            serde_json::to_string_pretty(&crate::outputs::ctrf(&report)).unwrap_or_default(),
        ),
    ] {
        if let Err(e) = std::fs::write(folder.join(name), text) {
            eprintln!("error: write {}: {e}", folder.join(name).display());
        }
    }
    eprint!("{}", crate::report::human_summary(&report, &path));
    // Pods kept on purpose (`--keep`) are listed as leftovers but are not leaks.
    let code = exit_code(&report, run.config.keep != Keep::Never);
    (code, Some(report))
}

/// The exit code a report maps to (most severe class first); `kept` excuses leftovers that
/// `--keep` left on purpose.
pub fn exit_code(report: &Report, kept: bool) -> u8 {
    let s = &report.summary;
    if report.interrupted {
        exit::INTERRUPTED
    } else if s.failed + s.timed_out > 0 || report.deadline_exceeded {
        exit::SCENARIO_FAILED
    } else if s.errored + s.cancelled > 0 {
        exit::ENVIRONMENT
    } else if s.leaked > 0
        || (!report.leftovers.is_empty() && !kept)
        || report
            .teardown
            .iter()
            .any(|t| t.outcome == crate::report::CleanupOutcome::Failed)
    {
        exit::LEAKED
    } else {
        exit::SUCCESS
    }
}

async fn gc(args: &GcArgs) -> u8 {
    match args.backend {
        BackendKind::Local => gc_local(args).await,
        BackendKind::Kind | BackendKind::Kube => gc_cluster(args).await,
    }
}

fn print_removed(removed: &[String], dry_run: bool) {
    let verb = if dry_run { "would remove" } else { "removed" };
    for object in removed {
        println!("{verb} {object}");
    }
    println!("{verb} {} objects", removed.len());
}

/// Kind clusters the harness created (`kandev-acc-<run>`) are deleted whole; in a cluster
/// named by --context (or an existing Kind cluster), labelled namespaces and objects go.
async fn gc_cluster(args: &GcArgs) -> u8 {
    use crate::backend::kube::cluster;
    let mut removed = Vec::new();
    let c = &args.cluster;
    let mut context = c.context.clone();
    let mut kubeconfig = c.kubeconfig.clone();
    if args.backend == BackendKind::Kind {
        let listed = std::process::Command::new(&c.kind_bin)
            .args(["get", "clusters"])
            .output();
        let listed = match listed {
            Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).into_owned(),
            Ok(out) => {
                eprintln!(
                    "error: kind get clusters: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                );
                return exit::ENVIRONMENT;
            }
            Err(e) => {
                eprintln!(
                    "error: run {}: {e}\n  fix: install kind or pass --kind-bin PATH",
                    c.kind_bin.display()
                );
                return exit::ENVIRONMENT;
            }
        };
        let wanted = |name: &str| match &args.run {
            Some(run) => name == cluster::run_kind_cluster(run),
            None => name.starts_with(&cluster::run_kind_cluster("")),
        };
        for name in listed.lines().map(str::trim).filter(|n| wanted(n)) {
            if !args.dry_run {
                let out = std::process::Command::new(&c.kind_bin)
                    .args(["delete", "cluster", "--name", name])
                    .output();
                if !out.as_ref().is_ok_and(|o| o.status.success()) {
                    eprintln!("error: kind delete cluster --name {name} failed");
                    return exit::ENVIRONMENT;
                }
            }
            removed.push(format!("kind-cluster/{name}"));
        }
        // An existing cluster the run used (--kind-cluster) keeps running: sweep inside it.
        match &c.kind_cluster {
            Some(name) => {
                let out = std::process::Command::new(&c.kind_bin)
                    .args(["get", "kubeconfig", "--name", name])
                    .output();
                let Ok(out) = out.map(|o| o.stdout) else {
                    eprintln!("error: kind get kubeconfig --name {name} failed");
                    return exit::ENVIRONMENT;
                };
                let path =
                    std::env::temp_dir().join(format!("kandev-acceptance-gc-{name}.kubeconfig"));
                if std::fs::write(&path, out).is_err() {
                    eprintln!("error: write {}", path.display());
                    return exit::ENVIRONMENT;
                }
                kubeconfig = Some(path);
                context = Some(format!("kind-{name}"));
            }
            None => {
                print_removed(&removed, args.dry_run);
                return exit::SUCCESS;
            }
        }
    }
    let client = match cluster::open(kubeconfig.as_deref(), context.as_deref()).await {
        Ok(reached) => reached.admin,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::ENVIRONMENT;
        }
    };
    match cluster::gc(
        &client,
        c.namespace.as_deref(),
        args.run.as_deref(),
        args.dry_run,
    )
    .await
    {
        Ok(found) => {
            removed.extend(found);
            print_removed(&removed, args.dry_run);
            exit::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::ENVIRONMENT
        }
    }
}

async fn gc_local(args: &GcArgs) -> u8 {
    let docker = match connect_engine().await {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {}", crate::error_chain(&e));
            return exit::ENVIRONMENT;
        }
    };
    let backend = LocalBackend::new(docker, String::new(), Vec::new(), 0);
    let result = match &args.run {
        Some(id) => {
            backend
                .remove_labelled(&[(LABEL_RUN, id.as_str())], args.dry_run)
                .await
        }
        None => {
            backend
                .remove_labelled(&[(LABEL_MANAGED, "true")], args.dry_run)
                .await
        }
    };
    let result = match result {
        Ok(mut removed) => backend
            .sweep_orphan_cgroups(Duration::from_secs(args.older_than), args.dry_run)
            .await
            .map(|swept| {
                removed.extend(swept);
                removed
            }),
        Err(e) => Err(e),
    };
    match result {
        Ok(removed) => {
            print_removed(&removed, args.dry_run);
            exit::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", crate::error_chain(&e));
            exit::ENVIRONMENT
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(summary: Summary, leftovers: &[&str], interrupted: bool) -> Report {
        Report {
            schema_version: SCHEMA_VERSION,
            run_id: "r".into(),
            harness_version: "0".into(),
            started_at: String::new(),
            finished_at: String::new(),
            duration_ms: 0,
            interrupted,
            deadline_exceeded: false,
            backend: "local".into(),
            environment: Default::default(),
            configuration: Default::default(),
            summary,
            setup: Vec::new(),
            scenarios: Vec::new(),
            leftovers: leftovers.iter().map(|s| (*s).to_owned()).collect(),
            teardown: Vec::new(),
        }
    }

    #[test]
    fn exit_codes_map_each_class_most_severe_first() {
        let passed = Summary {
            total: 2,
            passed: 1,
            skipped: 1,
            ..Default::default()
        };
        assert_eq!(
            exit_code(&report(passed.clone(), &[], false), false),
            exit::SUCCESS
        );
        let failed = Summary {
            total: 2,
            failed: 1,
            errored: 1,
            ..Default::default()
        };
        assert_eq!(
            exit_code(&report(failed, &["pod/x"], false), false),
            exit::SCENARIO_FAILED
        );
        let timed_out = Summary {
            total: 1,
            timed_out: 1,
            ..Default::default()
        };
        assert_eq!(
            exit_code(&report(timed_out, &[], false), false),
            exit::SCENARIO_FAILED
        );
        let errored = Summary {
            total: 1,
            errored: 1,
            ..Default::default()
        };
        assert_eq!(
            exit_code(&report(errored, &["pod/x"], false), false),
            exit::ENVIRONMENT
        );
        assert_eq!(
            exit_code(&report(passed.clone(), &["volume/x"], false), false),
            exit::LEAKED
        );
        assert_eq!(
            exit_code(&report(passed.clone(), &["volume/x"], false), true),
            exit::SUCCESS
        );
        let cancelled = Summary {
            total: 1,
            cancelled: 1,
            ..Default::default()
        };
        assert_eq!(
            exit_code(&report(cancelled.clone(), &[], true), false),
            exit::INTERRUPTED
        );
        // A run stopped by --deadline: its cut-short scenarios timed out (a gate failure).
        let mut out_of_time = report(cancelled, &[], false);
        out_of_time.deadline_exceeded = true;
        assert_eq!(exit_code(&out_of_time, false), exit::SCENARIO_FAILED);
        // A scenario that leaked fails the gate even when the run-level inventory is clean.
        let leaked = Summary {
            total: 2,
            passed: 1,
            leaked: 1,
            ..Default::default()
        };
        assert_eq!(
            exit_code(&report(leaked.clone(), &[], false), false),
            exit::LEAKED
        );
        assert_eq!(
            exit_code(&report(leaked, &[], false), true),
            exit::LEAKED,
            "--keep excuses kept Pods, not leaks of scenarios that tore down"
        );
    }

    #[test]
    fn image_references_are_checked() {
        for good in [
            "kandev-acceptance/worker:abc",
            "registry.example/w@sha256:0123",
            "w",
        ] {
            assert!(valid_reference(good), "{good}");
        }
        for bad in ["", "Upper/Case", "-x", "a b", "/x"] {
            assert!(!valid_reference(bad), "{bad}");
        }
    }
}
