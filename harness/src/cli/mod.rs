//! The `kandev-acceptance` command line: argument parsing and dispatch.
//!
//! `main` builds the tokio runtime by hand (not `#[tokio::main]`): with one test thread,
//! libtest-mimic runs trials on the main thread, and `block_on` inside a runtime would panic.
//! It returns the mapped exit code instead of exiting past the report writer.

mod args;
mod closed_stdout;
mod gate;
mod gc;
mod hold;
mod image;
mod launch;
mod reference;
mod report;
mod run;
mod shell;
mod validate;

use crate::backend::kube::cluster::tolerant_no_proxy;
use crate::runner::Scenario;
use args::{Cli, Command};
use clap::Parser;
use kandev_report::exit;
use std::path::PathBuf;
use std::process::ExitCode;

/// Entry point of the `kandev-acceptance` binary.
pub fn main(registry: Vec<Scenario>) -> ExitCode {
    run_again_with_a_tolerant_no_proxy();
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
    for note in deprecated(&std::env::args().collect::<Vec<_>>()) {
        eprintln!("note: {note}");
    }
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
        Command::Checks { format } => {
            let text = match format {
                args::OutputFormat::Text => crate::runner::scenario::checks_table(&registry),
                args::OutputFormat::Json => {
                    let checks = crate::runner::scenario::checks_json(&registry);
                    serde_json::to_string_pretty(&checks).unwrap_or_default() + "\n"
                }
            };
            shell::print(&text)
        }
        Command::Report { command } => report::report(command),
        Command::Image { command } => runtime.block_on(image::image(command)),
        Command::Completions { shell } => shell::completions(shell),
        Command::Man { dir } => shell::man(dir.as_deref()),
    };
    ExitCode::from(code)
}

/// `NO_PROXY` (or `no_proxy`) with an empty entry (`a,b,`), which kube-rs refuses before the
/// harness decides on a proxy and Go (kubectl) skips: the harness runs itself again, in this
/// process (`exec`, so the pid, signals and exit status stay the caller's), with those
/// entries dropped ([`tolerant_no_proxy`]). Done first, before a thread starts: the
/// environment cannot be changed in place without `unsafe`. Once dropped there is nothing
/// left to drop, so it runs again at most once.
fn run_again_with_a_tolerant_no_proxy() {
    use std::os::unix::process::CommandExt;
    let fixes = tolerant_no_proxy(|name| std::env::var(name).ok());
    if fixes.is_empty() {
        return;
    }
    // This very binary, even if its file was replaced or removed since it started.
    let mut argv = std::env::args_os();
    let mut again = std::process::Command::new("/proc/self/exe");
    if let Some(arg0) = argv.next() {
        again.arg0(arg0);
    }
    again.args(argv);
    for (name, value) in fixes {
        match value {
            Some(value) => again.env(name, value),
            None => again.env_remove(name),
        };
    }
    // Returns only if the exec failed; the run goes on with the environment as it is.
    let error = again.exec();
    eprintln!(
        "note: NO_PROXY has an empty entry, and running again without it failed ({error}): remove the empty entry (a doubled or trailing comma) if a cluster client refuses NO_PROXY"
    );
}

/// The command line as clap builds it, for what checks documented commands
/// (`harness/tests/docs.rs` parses every command the docs quote with it).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Why the harness would refuse `argv` (program name first) once parsed, before it reads a
/// file or reaches an engine or a cluster; Ok: it would go on. `harness/tests/docs.rs` holds
/// every documented command to it: a quoted command that parses but is refused (`gc
/// --backend kind` without `--run` or `--all`) is as wrong as one that does not parse.
pub fn refused_at_once<I, T>(argv: I) -> Result<(), String>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    match Cli::try_parse_from(argv)
        .map_err(|e| e.to_string())?
        .command
    {
        Command::Gc(args) => gc::refused(&args),
        Command::Gate(args) => gate::refused(&args),
        Command::Launch(args) => launch::refused_at_once(&args),
        _ => Ok(()),
    }
}

/// Old spellings `run` and `launch` still take, each with its new one: `--report DIR`
/// (`--report` names one report elsewhere, as in `gate`) and `--gate PROFILE` (the `gate`
/// command is another thing).
fn deprecated(argv: &[String]) -> Vec<&'static str> {
    let mut words = argv.iter().skip(1);
    if !words
        .by_ref()
        .find(|w| !w.starts_with('-'))
        .is_some_and(|command| command == "run" || command == "launch")
    {
        return Vec::new();
    }
    let mut notes = Vec::new();
    for word in words.take_while(|w| *w != "--") {
        let flag = word.split_once('=').map_or(word.as_str(), |(f, _)| f);
        let note = match flag {
            "--report" => {
                "--report DIR is now --report-dir DIR (the old spelling still works; `--report` names one report, as in `gate --report`)"
            }
            "--gate" => {
                "--gate PROFILE is now --gate-profile PROFILE (the old spelling still works; `gate` is the command that judges a report for a release)"
            }
            _ => continue,
        };
        if !notes.contains(&note) {
            notes.push(note);
        }
    }
    notes
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

#[cfg(test)]
mod tests {
    use super::deprecated;

    fn argv(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn old_spellings_get_a_note_with_the_new_one() {
        let notes = deprecated(&argv(
            "kandev-acceptance run --report r --gate=release --report r2",
        ));
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("--report-dir") && notes[1].contains("--gate-profile"));
        assert!(deprecated(&argv("kandev-acceptance launch --report=r")).len() == 1);
        for quiet in [
            "kandev-acceptance run --report-dir r --gate-profile release",
            "kandev-acceptance gate --report r/report.json",
            "kandev-acceptance run -- --report",
        ] {
            assert!(deprecated(&argv(quiet)).is_empty(), "{quiet}");
        }
    }
}
