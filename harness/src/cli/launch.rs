//! `launch`: the run from inside the cluster (see `backend::kube::launch`). Checks what it
//! can here first (the options, the template against Kandev's rules, the cluster reached),
//! so that bad input creates nothing; then hands the run's own options on to the Pod.

use super::args::{LaunchArgs, NOT_FORWARDED};
use crate::backend::BackendKind;
use crate::backend::kube::cluster::{self, executor_role, executor_role_file};
use crate::backend::kube::launch::{self, INPUTS, Interrupts, LaunchPlan};
use crate::runner::Scenario;
use kandev_report::exit;
use std::collections::BTreeMap;
use std::time::Duration;

pub(crate) fn launch(
    mut args: LaunchArgs,
    registry: Vec<Scenario>,
    runtime: &tokio::runtime::Runtime,
) -> u8 {
    if let Err(problem) = refused_at_once(&args) {
        eprintln!("error: {problem}");
        return exit::USAGE;
    }
    // Its only backend: --backend kube may be given, and is assumed when it is not.
    args.run.backend = Some(BackendKind::Kube);
    let run = &args.run;
    if run.scenarios.list {
        return super::run::run(args.run, registry, runtime);
    }
    // Everything `run` refuses before it creates anything, refused here too: the template
    // against Kandev's rules, the gate, the image references and flags, the report folder,
    // a filtered release.
    let (config, template) = match super::run::checked(run) {
        Ok((config, template, _)) => (config, template),
        Err(code) => return code,
    };
    // The flag's and the template's image pull secrets, copied by launch (the run in the Pod
    // carries their names: `--image-pull-secret` is forwarded to it).
    let template_spec = template
        .parsed()
        .template
        .as_ref()
        .and_then(|t| t.spec.clone())
        .unwrap_or_default();
    let pull_secrets = match crate::backend::kube::pull_secrets::wanted(
        &run.image_pull_secret,
        &template_spec,
        crate::backend::kube::pull_secrets::namespace_given(
            run.cluster.namespace.as_deref(),
            false,
            None,
        ),
    ) {
        Ok(wanted) => wanted,
        Err(refused) => {
            eprintln!("error: {refused}");
            return exit::USAGE;
        }
    };
    if let Err(code) = super::run::whole_catalogue_under_release(run, &config, &registry) {
        return code;
    }
    // The files travel in the inputs Secret (without one, the image's defaults serve); their
    // options go before the forwarded ones, which may end in `-- FILTER`.
    let mut inputs = Vec::new();
    let mut run_args = Vec::new();
    for (path, key, flag) in [
        (&run.template, "template.yaml", "--template"),
        (&run.prepare_script, "prepare.sh", "--prepare-script"),
    ] {
        let Some(path) = path else { continue };
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) => {
                eprintln!("error: read {}: {e}", path.display());
                return exit::USAGE;
            }
        };
        inputs.push((key.to_owned(), bytes));
        run_args.extend([flag.to_owned(), format!("{INPUTS}/{key}")]);
    }
    // The run's own budget ends before the Job's deadline, so that it tears down, writes its
    // report and holds it; the deadline only ends a run that does not stop.
    if let (None, Some(deadline)) = (
        run.deadline,
        launch::run_deadline(Duration::from_secs(args.job_timeout)),
    ) {
        run_args.extend(["--deadline".to_owned(), deadline.as_secs().to_string()]);
    }
    let argv: Vec<String> = std::env::args().collect();
    // Images given by environment (KANDEV_ACCEPTANCE_WORKER_IMAGE, ..._DAEMON_IMAGE) are not
    // on the command line forwarded below: the run in the Pod gets them as flags.
    for (flag, value) in [
        ("--worker-image", &run.worker_image),
        ("--daemon-image", &run.daemon_image),
    ] {
        if let Some(value) = value
            && !on_command_line(&argv, flag)
        {
            run_args.extend([flag.to_owned(), value.clone()]);
        }
    }
    run_args.extend(forwarded(&argv));
    // The operator's Role for the executor (`--executor-role`) is launch's to create: the run
    // in the Pod only uses the account bound to it.
    let executor_role = match &run.executor_role {
        Some(path) => match executor_role_file(path, "", &BTreeMap::new()) {
            Ok(role) => role,
            Err(e) => {
                eprintln!("error: {e}");
                return exit::USAGE;
            }
        },
        None => executor_role("", run.workspace_mode, &BTreeMap::new()),
    };
    // `--run-id`: the launch's objects, the run in the Pod and the retrieved report folder
    // all carry it.
    let run_id = run
        .run_id
        .clone()
        .unwrap_or_else(crate::pod::identity::new_run_id);
    let gc_where = crate::config::gc_where(
        BackendKind::Kube,
        &super::run::cluster_settings(BackendKind::Kube, &run.cluster, None),
    );
    let harness_arch = match runtime.block_on(launch::harness_image_arch(&args.harness_image)) {
        Ok(arch) => {
            eprintln!(
                "launch: the harness image is linux/{}: the Job runs on such nodes only",
                arch.as_str()
            );
            Some(arch)
        }
        Err(why) => {
            eprintln!(
                "launch: the harness image's architecture is not known here: {why}; the Job is pinned to none (on a cluster of mixed architectures, use an image built for every one)"
            );
            None
        }
    };
    let plan = LaunchPlan {
        run_id: run_id.clone(),
        namespace: run.cluster.namespace.clone(),
        harness_image: args.harness_image.clone(),
        harness_arch,
        executor_role,
        node_inspector: run.node_inspector,
        job_timeout: Duration::from_secs(args.job_timeout),
        start_timeout: Duration::from_secs(args.start_timeout),
        hold: Duration::from_secs(args.hold),
        inputs,
        run_args,
        gc_where: gc_where.clone(),
        pull_secrets,
    };
    let report_dir = run.report_dir.clone().unwrap_or_else(crate::paths::reports);
    let context = run.cluster.context.clone();
    let ended = runtime.block_on(async {
        // Ctrl-C is launch's to handle from its first line on.
        let interrupts = Interrupts::listen();
        eprintln!(
            "launch {run_id}: namespace {}, Job {} running {}",
            plan.namespace(),
            plan.job_name(),
            plan.harness_image
        );
        let reached = cluster::open(run.cluster.kubeconfig.as_deref(), context.as_deref()).await;
        let reached = match reached {
            Ok(reached) => reached,
            Err(e) => {
                eprintln!("error: {e}");
                return None;
            }
        };
        Some(launch::launch(reached.admin, &plan, &report_dir, &interrupts).await)
    });
    let Some(ended) = ended else {
        return exit::ENVIRONMENT;
    };
    let (code, cleanup) = match ended {
        Ok(ended) => {
            eprintln!(
                "launch {run_id}: report retrieved: {} (its sha256 is the one the run logged); the run's exit code {}",
                report_dir.join(&run_id).join("report.json").display(),
                ended.code
            );
            (ended.code, ended.cleanup)
        }
        Err((e, ended)) => {
            eprintln!("error: {}", crate::error_chain(&e));
            (ended.code, ended.cleanup)
        }
    };
    let mut leftovers = false;
    for (object, result) in &cleanup {
        match result {
            Ok(()) => eprintln!("launch {run_id}: removed {object}"),
            Err(e) => {
                leftovers = true;
                eprintln!("launch {run_id}: could not remove {object}: {e}");
            }
        }
    }
    if leftovers {
        eprintln!(
            "  fix: {gc_where} --run {}",
            crate::config::shell_word(&run_id)
        );
        // A run's own failure or interruption says more than the leftovers do.
        if code == exit::SUCCESS {
            return exit::LEAKED;
        }
    }
    code
}

/// What `launch` refuses before it reads anything: another backend, and for a run (not
/// `--list`) the options it needs or sets itself.
pub(super) fn refused_at_once(args: &LaunchArgs) -> Result<(), String> {
    if let Some(other) = args.run.backend.filter(|b| *b != BackendKind::Kube) {
        return Err(format!(
            "launch runs in an existing cluster, not on --backend {}\n  fix: drop --backend (launch needs none) and pass --context NAME",
            other.name()
        ));
    }
    if args.run.scenarios.list {
        return Ok(());
    }
    refused(args)
}

/// What `launch` refuses of a run's options: those it needs, and those it sets itself.
fn refused(args: &LaunchArgs) -> Result<(), String> {
    let run = &args.run;
    if run.cluster.context.is_none() {
        return Err("launch needs --context NAME: the harness never uses the kubeconfig's current context implicitly".into());
    }
    if run.worker_image.is_none() || run.daemon_image.is_none() {
        return Err("launch runs your images: pass --worker-image and --daemon-image references the cluster can pull".into());
    }
    if run.in_cluster || run.bookkeeper_token.is_some() || run.hold_report.is_some() {
        return Err("--in-cluster, --bookkeeper-token and --hold-report are launch's to set for the run in the Pod".into());
    }
    if run.repeat > 1 {
        return Err("launch runs the selection once: run launch again for another run".into());
    }
    if run.keep != crate::config::Keep::Never {
        return Err("--keep does not apply to launch: it removes everything it created (run from outside the cluster with --keep to inspect Pods)".into());
    }
    if run.workspace_mode == crate::pod::template::WorkspaceMode::ExistingClaim
        && run.cluster.namespace.is_none()
    {
        return Err("--workspace-mode existing-claim needs --namespace: the claim must already exist there (a namespace launch creates holds none)".into());
    }
    Ok(())
}

/// Whether `flag` was given on the command line (`--flag value` or `--flag=value`, before any
/// `--`), not by its environment variable.
fn on_command_line(argv: &[String], flag: &str) -> bool {
    argv.iter().take_while(|a| a.as_str() != "--").any(|a| {
        a == flag
            || a.strip_prefix(flag)
                .is_some_and(|rest| rest.starts_with('='))
    })
}

/// The `run` options of a `launch` command line that the Pod's run gets as they are: all
/// after `launch`, without [`NOT_FORWARDED`] (each with its value, `--flag value` or
/// `--flag=value`).
pub(crate) fn forwarded(argv: &[String]) -> Vec<String> {
    let mut rest = argv.iter().skip_while(|a| a.as_str() != "launch").skip(1);
    let mut kept = Vec::new();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            kept.push(arg.clone());
            kept.extend(rest.by_ref().cloned());
            break;
        }
        let flag = arg.split_once('=').map_or(arg.as_str(), |(f, _)| f);
        if NOT_FORWARDED.contains(&flag) {
            if !arg.contains('=') {
                rest.next();
            }
            continue;
        }
        kept.push(arg.clone());
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::{Cli, Command};
    use clap::Parser;

    fn argv(words: &str) -> Vec<String> {
        words.split_whitespace().map(str::to_owned).collect()
    }

    /// Every `run` option survives the trip to the Pod: the launch's `run` options parsed
    /// here equal those of `run` given the forwarded ones plus the host-side ones.
    #[test]
    fn forwarded_options_parse_to_the_same_run() {
        let host = "--backend kube --context c --kubeconfig /k --namespace ns --report /r --template /t --prepare-script /p";
        let given = format!(
            "kandev-acceptance launch --harness-image h:1 --job-timeout 60 {host} --worker-image w:1 --daemon-image=d:1 --node-inspector --workspace-mode empty-dir --retries 2 --require docker,compose --step-timeout 30 --keep on-failure --test-threads 3 --exact worker::toolchain"
        );
        let Command::Launch(launch) = Cli::try_parse_from(argv(&given)).unwrap().command else {
            panic!("not launch")
        };
        let forwarded = forwarded(&argv(&given));
        assert!(
            !forwarded
                .iter()
                .any(|a| a.contains("h:1") || a == "/t" || a == "c")
        );
        let again = format!("kandev-acceptance run {host} {}", forwarded.join(" "));
        let Command::Run(run) = Cli::try_parse_from(argv(&again)).unwrap().command else {
            panic!("not run")
        };
        assert_eq!(format!("{:?}", launch.run), format!("{run:?}"));
    }

    /// An image given by its environment variable is not on the command line `forwarded`
    /// copies, so launch adds it; one on the command line (either spelling) is not added twice.
    #[test]
    fn only_a_flag_on_the_command_line_counts_as_given_there() {
        let given = argv(
            "kandev-acceptance launch --worker-image w:1 --daemon-image=d:1 -- --worker-image",
        );
        assert!(on_command_line(&given, "--worker-image"));
        assert!(on_command_line(&given, "--daemon-image"));
        let from_env = argv("kandev-acceptance launch --context c -- --daemon-image");
        assert!(!on_command_line(&from_env, "--daemon-image"));
        assert!(!on_command_line(
            &argv("kandev-acceptance launch --worker-images x"),
            "--worker-image"
        ));
    }

    /// `launch --run-id ID` names the launch (its objects, the run in the Pod, the report
    /// folder retrieved): launch passes it on itself, once.
    #[test]
    fn a_launch_run_id_is_launchs_to_pass_on() {
        let given = "kandev-acceptance launch --harness-image h:1 --context c --run-id ci-9-1 --worker-image w:1 --daemon-image d:1";
        let Command::Launch(launch) = Cli::try_parse_from(argv(given)).unwrap().command else {
            panic!("not launch")
        };
        assert_eq!(launch.run.run_id.as_deref(), Some("ci-9-1"));
        assert!(refused(&launch).is_ok());
        let forwarded = forwarded(&argv(given));
        assert!(
            !forwarded
                .iter()
                .any(|a| a.contains("run-id") || a == "ci-9-1"),
            "{forwarded:?}"
        );
    }
}
