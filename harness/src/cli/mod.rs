//! The `kandev-acceptance` command line: argument parsing and dispatch.
//!
//! `main` builds the tokio runtime by hand (not `#[tokio::main]`): with one test thread,
//! libtest-mimic runs trials on the main thread, and `block_on` inside a runtime would panic.
//! It returns the mapped exit code instead of exiting past the report writer.

mod args;
mod gate;
mod gc;
mod hold;
mod image;
mod launch;
mod report;
mod run;
mod validate;

use crate::runner::Scenario;
use args::{Cli, Command};
use clap::Parser;
use kandev_report::exit;
use std::path::PathBuf;
use std::process::ExitCode;

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
        Command::Run(args) => run::run(*args, registry, &runtime),
        Command::Launch(args) => launch::launch(*args, registry, &runtime),
        Command::Validate(args) => validate::validate(&args),
        Command::Gc(args) => runtime.block_on(gc::gc(&args)),
        Command::Gate(args) => gate::gate(&args, &registry),
        Command::Checks => {
            print!("{}", crate::runner::scenario::checks_table(&registry));
            exit::SUCCESS
        }
        Command::Report { command } => report::report(command),
        Command::Image { command } => runtime.block_on(image::image(command)),
    };
    ExitCode::from(code)
}

/// The command line as clap builds it, for what checks documented commands
/// (`harness/tests/docs.rs` parses every command the docs quote with it).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

pub(crate) fn read_input(path: &PathBuf, what: &str) -> Result<String, u8> {
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

/// The fixtures' root (`paths`' order: `KANDEV_ACCEPTANCE_ROOT`, the build's checkout, the
/// carried copy written out), asked before anything reads a fixture: a root that cannot be
/// read is one error naming its fix, not a missing template. Err: the exit code.
pub(crate) fn fixtures_ready() -> Result<(), u8> {
    crate::paths::ready().map(|_| ()).map_err(|e| {
        eprintln!("error: {e}");
        match e {
            crate::paths::PathsError::NoFixtures { .. } => exit::USAGE,
            crate::paths::PathsError::Embedded(_) => exit::ENVIRONMENT,
        }
    })
}
