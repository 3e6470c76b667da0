//! `run`: the selected scenarios as libtest trials, once or `--repeat N` times, each run with
//! its own id, report folder, signal and deadline watchers.

use super::args::{ClusterArgs, OutputFormat, RunArgs, ScenarioSelection};
use super::read_input;
use super::validate::check_rules;
use crate::backend::BackendKind;
use crate::config::{ClusterSettings, Keep, KindSettings, RunConfig};
use crate::pod::template::{
    DAEMON_IMAGE_PLACEHOLDER, Severity, TemplateFile, TemplateFinding, WORKER_IMAGE_PLACEHOLDER,
    WorkspaceMode, ignored_image_flag,
};
use crate::runner::{Run, Scenario};
use k8s_openapi::api::core::v1::PodTemplate;
use kandev_report::{Gate, GateProfile};
use kandev_report::{Outcome, Report, Selection, exit};
use libtest_mimic::{Completion, Trial};
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

/// Where a `kind`/`kube` cluster comes from, for `run` (with `run`'s Kind and claim options)
/// and `gc` (without them).
pub(crate) fn cluster_settings(
    backend: BackendKind,
    c: &ClusterArgs,
    run: Option<&RunArgs>,
) -> ClusterSettings {
    let kind = (backend == BackendKind::Kind).then(|| KindSettings {
        kind_bin: crate::backend::kube::kind::resolve_kind_bin(c.kind_bin.clone()),
        cluster: c.kind_cluster.clone(),
        config: run
            .and_then(|r| r.kind_config.clone())
            .unwrap_or_else(crate::paths::kind_config),
        node_image: run.and_then(|r| r.kind_node_image.clone()),
        keep_cluster: run.is_some_and(|r| r.keep_cluster),
    });
    let mut settings = ClusterSettings {
        kind,
        kubeconfig: c.kubeconfig.clone(),
        context: c.context.clone(),
        namespace: c.namespace.clone(),
        platform: run.and_then(|r| r.platform),
        ..Default::default()
    };
    if let Some(r) = run {
        settings.workspace_size = r.workspace_size.clone();
        settings.workspace_access_modes = r.workspace_access_modes.clone();
        settings.storage_class = r.storage_class.clone();
        settings.node_inspector = r.node_inspector;
        settings.node_inspector_image = r.node_inspector_image.clone();
        settings.in_cluster = r.in_cluster;
        settings.bookkeeper_token = r.bookkeeper_token.clone();
        settings.executor_role = r.executor_role.clone();
        settings.image_pull_secrets = r.image_pull_secret.clone();
    }
    settings
}

pub(crate) fn run(args: RunArgs, registry: Vec<Scenario>, runtime: &tokio::runtime::Runtime) -> u8 {
    let registry = Arc::new(registry);
    if args.scenarios.list {
        // Listing touches nothing: no engine, no template.
        return list(&args.scenarios, &registry);
    }
    let shield = super::closed_stdout::Shield::install();
    let code = run_selected(args, registry, runtime);
    if let Some(shield) = shield {
        shield.finish();
    }
    code
}

/// A run of the selection, once or `--repeat` times, with its stdout shielded.
fn run_selected(
    args: RunArgs,
    registry: Arc<Vec<Scenario>>,
    runtime: &tokio::runtime::Runtime,
) -> u8 {
    let (config, template, prepare_text) = match checked(&args) {
        Ok(checked) => checked,
        Err(code) => return code,
    };
    if let Err(code) = whole_catalogue_under_release(&args, &config, &registry) {
        return code;
    }

    let mut libtest = args.scenarios.libtest();
    if libtest.test_threads.is_none() {
        // On a cluster, run_once lowers it to what the cluster can hold when it was not given.
        libtest.test_threads = Some(args.jobs.unwrap_or_else(crate::config::host_jobs).max(1));
    }
    let repeat = args.repeat.max(1);
    if repeat > 1 && args.run_id.is_some() {
        eprintln!("error: --run-id names one run; --repeat {repeat} makes {repeat}");
        return exit::USAGE;
    }
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
            template.clone(),
            prepare_text.clone(),
            args.run_id.clone(),
        );
        let stop =
            code == exit::INTERRUPTED || code == exit::USAGE || code == exit::NOTHING_SELECTED;
        runs.push((code, report));
        if stop {
            break;
        }
    }
    if repeat == 1 {
        let code = runs.first().map(|(code, _)| *code).unwrap_or(exit::SUCCESS);
        if let (Some(seconds), Some(id), Some((_, Some(_)))) =
            (args.hold_report, &args.run_id, runs.first())
        {
            runtime.block_on(super::hold::hold(
                &config.report_dir,
                id,
                code,
                Duration::from_secs(seconds),
            ));
        }
        return code;
    }
    crate::outputs::repeat::finish(&config.report_dir, &runs)
}

/// The run's settings from its arguments, and its template (parsed) and prepare script, once
/// everything that refuses a run before it creates anything has passed: the backend's own
/// checks, Kandev's template rules, the gate, the image references, a writable report
/// folder. `launch` asks the same before it creates anything. Err: the exit code (each
/// refusal printed with its fix).
pub(crate) fn checked(args: &RunArgs) -> Result<(RunConfig, TemplateFile, String), u8> {
    super::fixtures_ready()?;
    let mut config = RunConfig {
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
        // At most 120 (its parser's bound).
        docker_ready_timeout_seconds: u32::try_from(args.docker_ready_timeout).unwrap_or(120),
        pod_ready_timeout: Duration::from_secs(args.pod_ready_timeout),
        warm_up_timeout: (!args.no_warm_up && args.warm_up_timeout > 0)
            .then(|| Duration::from_secs(args.warm_up_timeout)),
        pod_pids_limit: args.pod_pids_limit,
        pod_mtu: args.pod_mtu,
        scenario_timeout: args.scenario_timeout.map(Duration::from_secs),
        required_tools: args.required_tools.clone(),
        optional_tools: args.optional_tools.clone(),
        retries: args.retries,
        workspace_claim: args.workspace_claim.clone(),
        backend: args.backend(),
        cluster: cluster_settings(args.backend(), &args.cluster, Some(args)),
        step_timeout: args.step_timeout.map(Duration::from_secs),
        deadline: args.deadline.map(Duration::from_secs),
        // Resolved below, once the template's declaration is read.
        gate: Gate::default(),
        jobs: args.jobs.or(args.scenarios.test_threads),
    };
    if let Err(message) = crate::backend::provider(config.backend).check(&config) {
        eprintln!("error: {message}");
        return Err(exit::USAGE);
    }
    if let Err(message) = claim_given(config.workspace_mode, config.workspace_claim.as_deref()) {
        eprintln!("error: {message}");
        return Err(exit::USAGE);
    }
    let template_text = read_input(&config.template, "template")?;
    let prepare_text = read_input(&config.prepare_script, "prepare script")?;
    // Kandev's rules first: an invalid template creates nothing, and every problem is named.
    // The template is parsed here, once; the run puts its images into the parsed form.
    let template = match TemplateFile::parse(template_text) {
        Ok(template) => template,
        Err(findings) => return Err(breaks_rules(&config, &findings)),
    };
    let findings = check_rules(
        template.parsed(),
        &config.main_container,
        config.workspace_mode,
        None,
    );
    if findings.iter().any(|f| f.severity == Severity::Error) {
        return Err(breaks_rules(&config, &findings));
    }
    // The image pull secrets named twice, before anything is created (a run's set-up and
    // `launch` read the same list again).
    let template_spec = template
        .parsed()
        .template
        .as_ref()
        .and_then(|t| t.spec.clone());
    let named = crate::backend::kube::pull_secrets::wanted(
        &config.cluster.image_pull_secrets,
        &template_spec.unwrap_or_default(),
        crate::backend::kube::pull_secrets::namespace_given(
            config.cluster.namespace.as_deref(),
            config.cluster.in_cluster,
            args.run_id.as_deref(),
        ),
    );
    if let Err(refused) = named {
        eprintln!("error: {refused}");
        return Err(exit::USAGE);
    }
    // An image flag the template would ignore: the report would record an image no Pod ran.
    let ignored: Vec<String> = [
        (
            "--worker-image",
            &config.worker_image,
            &config.main_container,
            WORKER_IMAGE_PLACEHOLDER,
        ),
        (
            "--daemon-image",
            &config.daemon_image,
            &config.daemon_container,
            DAEMON_IMAGE_PLACEHOLDER,
        ),
    ]
    .into_iter()
    .filter_map(|(flag, image, container, placeholder)| {
        let image = image.as_deref()?;
        ignored_image_flag(template.parsed(), flag, image, container, placeholder)
    })
    .collect();
    if !ignored.is_empty() {
        eprintln!(
            "error: the template {} would ignore an image flag; nothing was created:",
            config.template.display()
        );
        for problem in ignored {
            eprintln!("  {problem}");
        }
        return Err(exit::USAGE);
    }
    config.gate = match resolve_gate(args, template.parsed(), &config) {
        Ok(gate) => gate,
        Err(problems) => {
            eprintln!(
                "error: the {} gate refuses this run; nothing was created:",
                args.gate.name()
            );
            for problem in problems {
                eprintln!("  {problem}");
            }
            return Err(exit::USAGE);
        }
    };
    for (flag, image) in [
        ("--worker-image", &config.worker_image),
        ("--daemon-image", &config.daemon_image),
    ] {
        if let Some(Err(problem)) = image.as_deref().map(super::reference::check) {
            eprintln!("error: {flag} {problem}");
            return Err(exit::USAGE);
        }
    }
    // A run id names one run: a folder it already names holds another run's report.
    if let Some(id) = &args.run_id
        && config.report_dir.join(id).exists()
    {
        eprintln!(
            "error: --run-id {id}: {} already exists (a run with this id was made before); nothing was created\n  fix: pass an id not used before in this report folder (in CI, e.g. ci-<run number>-<attempt>), or remove that folder",
            config.report_dir.join(id).display()
        );
        return Err(exit::USAGE);
    }
    // A Kind run names its cluster after the run: Kind's limit bounds the id.
    if let Some(id) = &args.run_id
        && config.backend == BackendKind::Kind
        && config
            .cluster
            .kind
            .as_ref()
            .is_some_and(|k| k.cluster.is_none())
        && let Err(why) = crate::backend::kube::kind::check_run_kind_cluster(id)
    {
        eprintln!("error: {why}");
        return Err(exit::USAGE);
    }
    if let Err(e) = std::fs::create_dir_all(&config.report_dir) {
        eprintln!(
            "error: create the report folder {}: {e}\n  fix: pass a writable --report-dir DIR",
            config.report_dir.display()
        );
        return Err(exit::USAGE);
    }
    Ok((config, template, prepare_text))
}

/// One run of the selected scenarios: its own id, report folder, signal and deadline
/// watchers; returns the exit code and the report (None when nothing ran).
/// How long a preparation stopped by Ctrl-C or SIGTERM is waited on to remove what it made.
const PREPARE_STOP_BOUND: std::time::Duration = std::time::Duration::from_secs(30);

fn run_once(
    config: &RunConfig,
    libtest: &libtest_mimic::Arguments,
    registry: &Arc<Vec<Scenario>>,
    runtime: &tokio::runtime::Runtime,
    template: TemplateFile,
    prepare_text: String,
    run_id: Option<String>,
) -> (u8, Option<Report>) {
    let run = Arc::new(
        Run::new(
            run_id.unwrap_or_else(crate::pod::identity::new_run_id),
            config.clone(),
            template,
            prepare_text,
        )
        .with_selection(selection(libtest, registry)),
    );
    // The run's folder exists from the start, so that the run id can be found (and `gc --run`
    // used) even when the run is killed before it writes its report.
    if let Err(e) = std::fs::create_dir_all(run.report_folder()) {
        eprintln!(
            "error: create {}: {e}\n  fix: pass a writable --report-dir DIR",
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
    // The run's --deadline holds from its start: a preparation still going then (a warm-up
    // waiting on a slow registry) is stopped like the scenarios. Ends with this function.
    let _deadline = AbortOnDrop(runtime.spawn(run.clone().enforce_deadline()));
    // No live view (a CI log): a line every 30 s while images build and scenarios run, so a
    // long quiet stretch is not taken for a hang. Ends with this function.
    let _heartbeat = (!std::io::stderr().is_terminal()).then(|| {
        let run = run.clone();
        AbortOnDrop(runtime.spawn(async move {
            loop {
                tokio::time::sleep(crate::runner::live::HEARTBEAT).await;
                eprintln!(
                    "{}",
                    crate::runner::live::heartbeat_line(
                        run.started.elapsed(),
                        &crate::host::images::building(),
                        &run.live.counts()
                    )
                );
            }
        }))
    });
    // A cluster is prepared before any trial: an unreachable API server or a failed
    // preflight stops the run at once with one clear message, and nothing was created.
    if crate::backend::provider(config.backend).prepare_first() {
        // SIGTERM too: in a Pod (`launch`), the harness is PID 1, and the kernel drops a
        // signal PID 1 has no handler for.
        let prepared = runtime.block_on(async {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
            let terminated = async {
                match term.as_mut() {
                    Some(t) => {
                        t.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            let prepare = run.env();
            tokio::pin!(prepare);
            let signal = tokio::select! {
                env = &mut prepare => return env.map(|_| ()).map_err(|e| (e, false)),
                _ = tokio::signal::ctrl_c() => "interrupted while preparing the cluster",
                () = terminated => "terminated (SIGTERM) while preparing the cluster",
            };
            // Stopped: a step that watches the stop (the warm-up) removes what it made and
            // fails, and the failed preparation tears the rest down; a step that does not is
            // waited on a while, then left (a second Ctrl-C leaves it at once) for gc.
            run.cancel();
            eprintln!(
                "{signal}: stopping the preparation and removing what it made (up to {}s; Ctrl-C again to leave it)",
                PREPARE_STOP_BOUND.as_secs()
            );
            let left = tokio::select! {
                _ = &mut prepare => false,
                _ = tokio::time::sleep(PREPARE_STOP_BOUND) => true,
                _ = tokio::signal::ctrl_c() => true,
            };
            if left {
                eprintln!(
                    "leaving the preparation without its teardown; remove leftovers with: {}",
                    run.config.gc_command(&run.id)
                );
            }
            Err((signal.to_owned(), true))
        });
        if let Err((e, interrupted)) = prepared {
            run.live.finish();
            eprintln!("error: {e}");
            if interrupted {
                run.cancel();
            }
            let report = runtime.block_on(run.finish(registry));
            publish(&run, &report);
            let code = if interrupted {
                exit::INTERRUPTED
            } else {
                exit::ENVIRONMENT
            };
            return (code, Some(report));
        }
    }
    // Not given: no more scenarios at once than the cluster holds sessions (the backend's
    // preparation derived it and recorded how, the `jobs` set-up step).
    if let Some(derived) = run.prepared_env().and_then(|env| env.jobs) {
        libtest.test_threads = Some(derived);
        eprintln!(
            "jobs: {derived} (half the sessions the cluster can hold at once: a scenario may hold two Pods; at most the host's {}; see the report's jobs set-up step)",
            crate::config::host_jobs()
        );
    }
    let handle = runtime.handle().clone();
    let watchers = [handle.spawn(watch_signals(run.clone()))];
    // The longest scenarios start first (libtest-mimic starts trials in the order given;
    // `--list` returned earlier, in the catalogue's order).
    let mut start_order: Vec<usize> = (0..registry.len()).collect();
    start_order.sort_by_key(|&index| !registry.get(index).is_some_and(|s| s.starts_first));
    let trials: Vec<Trial> = start_order
        .into_iter()
        .map(|index| {
            let (run, registry, handle) = (run.clone(), registry.clone(), handle.clone());
            let name = registry.get(index).map(|s| s.name).unwrap_or_default();
            Trial::ignorable_test(name, move || {
                let Some(scenario) = registry.get(index) else {
                    return Err("no such scenario".into());
                };
                let report = handle.block_on(run.run_scenario(scenario));
                match report.outcome {
                    Outcome::Passed => Ok(Completion::Completed),
                    // libtest's line says `ignored, skipped: why`, not `ok`: the scenario
                    // judged nothing.
                    Outcome::Skipped | Outcome::Incompatible => {
                        let why = format!(
                            "{}: {}",
                            report.outcome.as_str(),
                            report.diagnosis.unwrap_or_default()
                        );
                        run.live.println(&format!("{}: {why}", scenario.name));
                        Ok(Completion::ignored_with(why))
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
    // Ignored here means a scenario that ran and ended skipped or incompatible.
    if conclusion.num_passed + conclusion.num_failed + conclusion.num_ignored == 0 {
        eprintln!(
            "no scenario matched the filter; see `{} run --list`",
            crate::paths::command()
        );
        // Nothing ran: leave no empty run folder behind.
        let _ = std::fs::remove_dir_all(run.report_folder());
        return (exit::NOTHING_SELECTED, None);
    }
    let report = runtime.block_on(run.finish(registry));
    let code = publish(&run, &report);
    (code, Some(report))
}

/// Writes a finished run's report in every format, summarises it on the console (and to
/// GitHub Actions); returns its exit code.
fn publish(run: &Run, report: &Report) -> u8 {
    // Pods kept on purpose (`--keep`) are listed as leftovers but are not leaks.
    let kept = run.config.keep != Keep::Never;
    crate::outputs::publish_run(report, &run.report_folder(), kept)
}

/// A release vouches for the whole catalogue: under `--gate release`, a filter (FILTER,
/// `--skip`, `--exact`) that leaves a scenario out is refused before anything is created
/// (`run` and `launch` alike). Err: the exit code, the refusal printed with its fix.
pub(crate) fn whole_catalogue_under_release(
    args: &RunArgs,
    config: &RunConfig,
    registry: &[Scenario],
) -> Result<(), u8> {
    let selection = selection(&args.scenarios.libtest(), registry);
    if config.gate.profile != GateProfile::Release || !selection.filtered {
        return Ok(());
    }
    eprintln!(
        "error: the release gate refuses this run; nothing was created:\n  the filter (FILTER, --skip, --exact) leaves out {} of the catalogue's {} scenarios ({}): a release vouches for the whole catalogue\n    fix: drop the filter, or run the part under the default gate (drop --gate release)",
        selection.left_out.len(),
        registry.len(),
        selection.left_out.join(", ")
    );
    Err(exit::USAGE)
}

/// `run --list`: the selected scenarios, as libtest lists tests (`NAME: test`) or as JSON. A
/// reader that stops early (`| head -1`) ends the listing quietly: libtest-mimic's own listing
/// panicked on the closed pipe and exited 101.
fn list(scenarios: &ScenarioSelection, registry: &[Scenario]) -> u8 {
    use std::io::Write;
    let selected = selection(&scenarios.libtest(), registry).selected;
    let text = match scenarios.format {
        OutputFormat::Text => selected
            .iter()
            .map(|name| format!("{name}: test\n"))
            .collect(),
        OutputFormat::Json => {
            let listed: Vec<_> = registry
                .iter()
                .filter(|s| selected.iter().any(|name| name == s.name))
                .map(|s| {
                    serde_json::json!({
                        "name": s.name,
                        "promise": s.promise,
                        "checks": s.checks.iter().map(|c| s.check_id(c)).collect::<Vec<_>>(),
                    })
                })
                .collect();
            serde_json::to_string_pretty(&listed).unwrap_or_default() + "\n"
        }
    };
    match std::io::stdout().lock().write_all(text.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("error: writing the list: {e}");
            exit::ENVIRONMENT
        }
        _ => exit::SUCCESS,
    }
}

/// Which scenarios of `registry` the libtest filter selects (FILTER, `--skip`, `--exact`, as
/// libtest-mimic itself decides it), and which it leaves out.
fn selection(libtest: &libtest_mimic::Arguments, registry: &[Scenario]) -> Selection {
    let (selected, left_out): (Vec<String>, Vec<String>) = registry
        .iter()
        .map(|s| s.name.to_owned())
        .partition(|name| !libtest.is_filtered_out(&Trial::test(name.as_str(), || Ok(()))));
    Selection {
        filtered: !left_out.is_empty(),
        filter: libtest.filter.clone(),
        skip: libtest.skip.clone(),
        exact: libtest.exact,
        selected,
        left_out,
    }
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
                "\ncancelling: tearing down what the run created (interrupt again to abort now; `{}` removes leftovers)",
                run.config.gc_command(&run.id)
            );
            run.cancel();
        } else {
            // The run gives up its lease first (bounded), so that the command printed works at
            // once instead of being refused while the lease runs out.
            if let Some(env) = run.prepared_env()
                && let Some(teardown) = env.teardown.as_ref()
            {
                let _ = tokio::time::timeout(Duration::from_secs(5), teardown.release()).await;
            }
            eprintln!(
                "aborting without teardown; remove leftovers with: {}",
                run.config.gc_command(&run.id)
            );
            std::process::exit(i32::from(exit::INTERRUPTED));
        }
    }
}

/// `--workspace-mode existing-claim` mounts a claim that already exists: without
/// `--workspace-claim` (or with a name no claim can have) the run is refused before any
/// image is built, not when its first session is created.
fn claim_given(mode: WorkspaceMode, claim: Option<&str>) -> Result<(), String> {
    match (mode, claim) {
        (WorkspaceMode::ExistingClaim, None) => Err(
            "--workspace-mode existing-claim mounts a claim that already exists, and none is named; nothing was created\n  fix: pass --workspace-claim NAME (the PersistentVolumeClaim, in the run's namespace; locally, the engine volume), or another --workspace-mode".into(),
        ),
        (_, Some(name)) if !dns_subdomain(name) => Err(format!(
            "--workspace-claim {name:?} is no claim's name: a PersistentVolumeClaim's name is a DNS subdomain (lowercase letters, digits, '-' and '.', at most 253, starting and ending with a letter or digit); nothing was created\n  fix: pass the claim's name as `kubectl get pvc` shows it"
        )),
        _ => Ok(()),
    }
}

/// apimachinery's `IsDNS1123Subdomain` (`NameIsDNSSubdomain`, which validates a
/// PersistentVolumeClaim's name).
fn dns_subdomain(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Refuses the run: the template breaks Kandev's rules (every finding named).
fn breaks_rules(config: &RunConfig, findings: &[TemplateFinding]) -> u8 {
    eprintln!(
        "error: the template {} breaks Kandev's rules; nothing was created:",
        config.template.display()
    );
    for finding in findings {
        eprintln!("  {finding}");
    }
    exit::USAGE
}

/// The local Pod MTU a release is judged at, at most (clusters' overlay CNIs run 1450 or lower).
const RELEASE_MAX_POD_MTU: u32 = 1450;

/// The run's gate from `--gate-profile`, `--require` and the template's declaration; under the
/// release profile also what it refuses before anything runs (each with its field or flag).
fn resolve_gate(
    args: &RunArgs,
    parsed: &PodTemplate,
    config: &RunConfig,
) -> Result<Gate, Vec<String>> {
    let serves = crate::pod::release::declared_serves(parsed).map_err(|f| vec![f.to_string()])?;
    let required = args.require.as_ref().map(|r| r.0.as_slice());
    let gate = Gate::resolve(args.gate, required, &serves, config.backend.name());
    if gate.profile != GateProfile::Release {
        return Ok(gate);
    }
    let mut problems: Vec<String> = crate::pod::release::mutable_references(parsed, true)
        .iter()
        .map(ToString::to_string)
        .collect();
    // Settings that would let a check hold for less than it promises.
    if args.retries > 0 {
        problems.push(format!(
            "--retries {}: a release does not take a pass after a failed attempt\n    fix: drop --retries",
            args.retries
        ));
    }
    if args.pod_mtu > RELEASE_MAX_POD_MTU {
        problems.push(format!(
            "--pod-mtu {}: above {RELEASE_MAX_POD_MTU}, a daemon that ignores the Pod MTU is not caught\n    fix: drop --pod-mtu (or lower it)",
            args.pod_mtu
        ));
    }
    // The tools of the full-worker recipe `worker::toolchain` must find under a release gate.
    let missing: Vec<&str> = crate::config::recipe_tools()
        .into_iter()
        .filter(|t| !args.required_tools.iter().any(|r| r == t))
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "--required-tools leaves out {missing:?}, which the recipe promises\n    fix: drop --required-tools (or add them)"
        ));
    }
    // Images the run builds carry a content-hash tag (immutable by construction); images
    // given by flag must be digests.
    for (flag, image) in [
        ("--worker-image", &config.worker_image),
        ("--daemon-image", &config.daemon_image),
    ] {
        if let Some(image) = image
            .as_deref()
            .filter(|i| !crate::pod::release::is_immutable(i))
        {
            problems.push(format!(
                "{flag} {image:?} can move (a tag, not a digest)\n    fix: pass name@sha256:<digest> (docker inspect --format '{{{{index .RepoDigests 0}}}}' IMAGE), or let the run build the fixture images"
            ));
        }
    }
    if problems.is_empty() {
        Ok(gate)
    } else {
        Err(problems)
    }
}

/// A task that ends when its handle is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn scenario(name: &'static str) -> Scenario {
        fn run(_: &mut crate::runner::Ctx) -> crate::runner::ScenarioFuture<'_> {
            Box::pin(async { Ok(crate::runner::Verdict::Passed) })
        }
        Scenario {
            name,
            promise: "p",
            timeout: Duration::from_secs(1),
            starts_first: false,
            checks: &[],
            run,
        }
    }

    #[test]
    fn the_selection_is_libtests_own_and_says_what_it_left_out() {
        let registry = [scenario("a::one"), scenario("a::two"), scenario("b::three")];
        let select = |args: &[&str]| {
            let libtest = libtest_mimic::Arguments::try_parse_from(
                std::iter::once("run").chain(args.iter().copied()),
            )
            .unwrap_or_else(|e| unreachable!("{e}"));
            selection(&libtest, &registry)
        };
        let whole = select(&[]);
        assert!(!whole.filtered && whole.left_out.is_empty() && whole.selected.len() == 3);
        let by_filter = select(&["a::"]);
        assert_eq!(
            (by_filter.filtered, by_filter.filter.as_deref()),
            (true, Some("a::"))
        );
        assert_eq!(by_filter.left_out, ["b::three"]);
        let exact = select(&["--exact", "--skip", "a::one", "--skip", "b::three"]);
        assert_eq!(exact.selected, ["a::two"]);
        assert_eq!(exact.left_out, ["a::one", "b::three"]);
        assert!(exact.exact && exact.skip.len() == 2);
        // A filter every scenario matches leaves nothing out: not filtered.
        assert!(!select(&["::"]).filtered);
    }

    #[test]
    fn an_existing_claim_run_names_its_claim() {
        let refused = claim_given(WorkspaceMode::ExistingClaim, None).unwrap_err();
        assert!(refused.contains("--workspace-claim NAME"), "{refused}");
        assert!(claim_given(WorkspaceMode::ExistingClaim, Some("team-workspace")).is_ok());
        assert!(claim_given(WorkspaceMode::ManagedPvc, None).is_ok());
        for bad in ["Team", "-x", "a..b", "a_b"] {
            assert!(
                claim_given(WorkspaceMode::ExistingClaim, Some(bad)).is_err(),
                "{bad}"
            );
        }
    }
}
