//! `completions SHELL` and `man [--dir DIR]`: generated from the same clap definitions as
//! `--help`, so they cannot drift from the command line. And printing to stdout that a reader
//! may stop early (`| head`).

use super::args::Cli;
use clap::CommandFactory;
use kandev_report::exit;
use std::io::Write;
use std::path::Path;

/// The completion script for `shell` on stdout (`kandev-acceptance completions bash >
/// /etc/bash_completion.d/kandev-acceptance`).
pub(crate) fn completions(shell: clap_complete::Shell) -> u8 {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "kandev-acceptance", &mut script);
    written(std::io::stdout().lock().write_all(&script))
}

/// The manual page: without `dir`, the main page (roff) on stdout; with it, one page per
/// command (`kandev-acceptance.1`, `kandev-acceptance-run.1`, ...) in `dir`.
pub(crate) fn man(dir: Option<&Path>) -> u8 {
    let command = Cli::command();
    match dir {
        None => {
            let mut page = Vec::new();
            if let Err(e) = clap_mangen::Man::new(command).render(&mut page) {
                eprintln!("error: render the manual page: {e}");
                return exit::ENVIRONMENT;
            }
            written(std::io::stdout().lock().write_all(&page))
        }
        Some(dir) => match clap_mangen::generate_to(command, dir) {
            Ok(()) => {
                eprintln!(
                    "wrote the manual pages to {} (man -l {}/kandev-acceptance.1)",
                    dir.display(),
                    dir.display()
                );
                exit::SUCCESS
            }
            Err(e) => {
                eprintln!(
                    "error: write the manual pages to {}: {e}\n  fix: pass --dir an existing, writable folder",
                    dir.display()
                );
                exit::ENVIRONMENT
            }
        },
    }
}

/// `text` on stdout; a reader that stopped early (`checks | head`) is no error.
pub(crate) fn print(text: &str) -> u8 {
    written(std::io::stdout().lock().write_all(text.as_bytes()))
}

/// A reader that stopped early (`| head`) is no error.
fn written(result: std::io::Result<()>) -> u8 {
    match result {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            eprintln!("error: write to stdout: {e}");
            exit::ENVIRONMENT
        }
        _ => exit::SUCCESS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shell's script knows every command and the main flags; the man pages, one per
    /// command, carry each command's options.
    #[test]
    fn completions_and_man_pages_come_from_the_command_line() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "kandev-acceptance", &mut script);
            let script = String::from_utf8(script).unwrap_or_default();
            for word in [
                "run",
                "launch",
                "gc",
                "gate",
                "validate",
                "worker-image",
                "exact",
            ] {
                assert!(script.contains(word), "{shell}: no {word}");
            }
        }
        let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(man(Some(dir.path())), exit::SUCCESS);
        let run =
            std::fs::read_to_string(dir.path().join("kandev-acceptance-run.1")).unwrap_or_default();
        assert!(run.contains("worker\\-image"), "{run}");
        assert!(dir.path().join("kandev-acceptance-gc.1").exists());
        assert!(dir.path().join("kandev-acceptance.1").exists());
    }
}
