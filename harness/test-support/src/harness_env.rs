//! The harness's binary as the tests run it: without the `KANDEV_ACCEPTANCE_*` settings of
//! the shell that started `cargo test`. A developer's `export KANDEV_ACCEPTANCE_BACKEND=kube`
//! (or `_TEMPLATE`, `_WORKER_IMAGE`, `_ROOT`: every main flag reads one, see `--help`) must not
//! turn a local test into a cluster run or another template's; a test passes what it means
//! explicitly. `KANDEV_ACCEPTANCE_LOG` is kept: it changes what is printed, not what is done.

use std::ffi::{OsStr, OsString};

/// The settings this process has that a harness command started by a test must not inherit.
pub fn inherited_settings() -> Vec<OsString> {
    std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| {
            name.to_str().is_some_and(|name| {
                name.starts_with("KANDEV_ACCEPTANCE_") && name != "KANDEV_ACCEPTANCE_LOG"
            })
        })
        .collect()
}

/// `binary` (a test's `env!("CARGO_BIN_EXE_kandev-acceptance")`) as a command, every inherited
/// setting removed; `.env(...)` after this still sets one.
pub fn harness(binary: impl AsRef<OsStr>) -> std::process::Command {
    let mut command = std::process::Command::new(binary);
    for name in inherited_settings() {
        command.env_remove(name);
    }
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a harness command started by a test sees of the two settings.
    fn seen_by_the_harness() -> String {
        let out = harness("sh")
            .args([
                "-c",
                "echo backend=${KANDEV_ACCEPTANCE_BACKEND-unset} log=${KANDEV_ACCEPTANCE_LOG-unset}",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Runs only as the child of the test below, in the environment a developer's shell gave.
    #[test]
    #[ignore = "the child of a_setting_of_the_shell_does_not_reach_the_harness"]
    fn as_started_from_a_shell_with_settings() {
        if std::env::var_os("HARNESS_ENV_CHILD").is_none() {
            return;
        }
        // The positive control: this process has both.
        assert_eq!(std::env::var("KANDEV_ACCEPTANCE_BACKEND").unwrap(), "kube");
        assert_eq!(
            inherited_settings(),
            vec![OsString::from("KANDEV_ACCEPTANCE_BACKEND")]
        );
        assert_eq!(seen_by_the_harness(), "backend=unset log=debug");
    }

    /// This test binary run again as `cargo test` would from a shell that exported
    /// `KANDEV_ACCEPTANCE_BACKEND=kube` and `KANDEV_ACCEPTANCE_LOG=debug` (a test may not set
    /// its own process's variables): the harness it starts sees the log level only.
    #[test]
    fn a_setting_of_the_shell_does_not_reach_the_harness() {
        // Started as the tests start the harness: whatever this shell exported is gone first.
        let out = harness(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "harness_env::tests::as_started_from_a_shell_with_settings",
                "--include-ignored",
                "--nocapture",
            ])
            .env("HARNESS_ENV_CHILD", "1")
            .env("KANDEV_ACCEPTANCE_BACKEND", "kube")
            .env("KANDEV_ACCEPTANCE_LOG", "debug")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && text.contains("1 passed"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
