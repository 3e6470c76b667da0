//! `gc`: removes what killed runs left, by label, through the backend's provider; never what
//! a run still going uses (its lease is live) unless `--force`.

use super::args::GcArgs;
use super::run::cluster_settings;
use crate::backend::{BackendKind, GcRequest};
use kandev_report::exit;
use std::time::Duration;

pub(crate) async fn gc(args: &GcArgs) -> u8 {
    if let Err(problem) = refused(args) {
        eprintln!("error: {problem}");
        return exit::USAGE;
    }
    let request = GcRequest {
        run: args.run.clone(),
        dry_run: args.dry_run,
        force: args.force,
        older_than: Duration::from_secs(args.older_than),
        cluster: cluster_settings(args.backend, &args.cluster, None),
    };
    let outcome = match crate::backend::provider(args.backend).gc(&request).await {
        Ok(outcome) => outcome,
        Err(e) => {
            eprintln!("error: {}", crate::error_chain(e.as_ref()));
            return exit::ENVIRONMENT;
        }
    };
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    for object in &outcome.removed {
        println!("{verb} {object}");
    }
    for object in &outcome.being_removed {
        println!(
            "being removed already: {object} (its deletion was requested; the cluster finishes it)"
        );
    }
    for spared in &outcome.spared {
        println!("spared run {}: alive ({})", spared.run, spared.evidence);
    }
    for (object, age) in &outcome.too_young {
        println!(
            "left {object}: orphaned, but only {}s old (younger than --older-than {}s: a Pod being created may own it); a later gc removes it",
            age.as_secs(),
            request.older_than.as_secs()
        );
    }
    for why in &outcome.not_searched {
        println!("not searched: {why}");
    }
    println!("{verb} {} objects", outcome.removed.len());
    if let Some(run) = &args.run
        && let Some(spared) = outcome.spared.iter().find(|s| &s.run == run)
    {
        eprintln!(
            "error: run {run} is still alive ({}); nothing of it was removed\n  fix: wait until it ends (it removes what it created itself), or, if its process is gone (its lease expires {}), pass --force",
            spared.evidence,
            match args.backend {
                BackendKind::Local | BackendKind::Kind => "at once with the process",
                BackendKind::Kube => "a minute after its last renewal",
            }
        );
        return exit::USAGE;
    }
    exit::SUCCESS
}

/// What `gc` refuses before it reaches anything.
pub(super) fn refused(args: &GcArgs) -> Result<(), String> {
    if args.backend != BackendKind::Local && args.run.is_none() && !args.all {
        return Err(format!(
            "gc --backend {} removes runs' namespaces and objects on a shared cluster: name what to remove\n  fix: pass --run ID (one run: its id is its report folder's name), or --all (every run there that is not alive)",
            args.backend.name()
        ));
    }
    // A missing --context is the cluster's to name (with the kubeconfig's contexts).
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::args::{Cli, Command};
    use clap::Parser;

    fn gc_args(line: &str) -> GcArgs {
        match Cli::try_parse_from(line.split_whitespace()) {
            Ok(Cli {
                command: Command::Gc(args),
            }) => args,
            other => panic!("{line}: {other:?}"),
        }
    }

    /// On a cluster `gc` names what it removes: one run, or `--all`; locally every run that
    /// is not alive stays the default.
    #[test]
    fn gc_on_a_cluster_needs_run_or_all() {
        for line in [
            "kandev-acceptance gc --backend kube --context c",
            "kandev-acceptance gc --backend kind",
        ] {
            let problem = refused(&gc_args(line)).expect_err(line);
            assert!(
                problem.contains("--run ID") && problem.contains("--all"),
                "{problem}"
            );
        }
        for line in [
            "kandev-acceptance gc --backend kube --context c --all",
            "kandev-acceptance gc --backend kube --context c --run r1 --force",
            "kandev-acceptance gc --backend kind --run r1",
            "kandev-acceptance gc",
            "kandev-acceptance gc --all --dry-run",
        ] {
            assert!(refused(&gc_args(line)).is_ok(), "{line}");
        }
        assert!(
            Cli::try_parse_from("kandev-acceptance gc --run r1 --all".split_whitespace()).is_err(),
            "--run and --all together"
        );
        assert!(
            Cli::try_parse_from("kandev-acceptance gc --run R1".split_whitespace()).is_err(),
            "a run id is a label value the harness makes: lowercase"
        );
    }
}
