//! kandev-acceptance: proves, on a real engine, that Kandev's Docker-workloads task Pod keeps
//! the promises of its design, and writes a report CI and release gating can read.
//!
//! The report model (outcomes, exit codes, the gate vocabulary, `report.json` and its schema)
//! is a crate of its own, `kandev-report` (`harness/report/`), which every layer may use.
//!
//! The layers, each a folder (or file), each using only the ones listed before it
//! (`harness/tests/layers.rs` enforces the order):
//!
//! - [`wait`], [`paths`]: the one polling helper; where fixtures and reports live.
//! - [`pod`]: Kandev's knowledge of a task Pod: template rules, identity, composition,
//!   admission comparison. Pure: no I/O.
//! - [`config`]: the settings of a run, as the command line gave them.
//! - [`node`]: evidence from outside the Pods: processes and cgroups of a node.
//! - [`host`]: this host's Docker engine, the fixture images and the harness image built there.
//! - [`backend`]: what runs a composed Pod (local engine, Kind, an existing cluster); each
//!   backend owns its preparation, teardown, `gc` and node view, registered once in
//!   [`backend::provider`].
//! - [`session`]: one Kandev task session launched through Kandev's stages, and its agent.
//! - [`runner`]: a run: scenarios as trials, the scenario API ([`runner::Ctx`]), teardown,
//!   the leak ledger, the run's set-up log and cost meter, report assembly.
//! - [`outputs`]: what is made of a report: JUnit, CTRF, HTML, the console and GitHub
//!   summaries, and its readings (`report diff`, `--repeat` pass rates, the release gate).
//! - [`cli`]: argument parsing and dispatch.

pub mod backend;
pub mod cli;
pub mod config;
pub mod host;
pub mod node;
pub mod outputs;
pub mod paths;
pub mod pod;
pub mod runner;
pub mod session;
pub mod wait;

/// This build's name: the crate version plus the git commit it was built from
/// (`0.1.0+0123456789ab`, `-dirty` when tracked files differed; `+unknown` without git and
/// without `KANDEV_ACCEPTANCE_COMMIT`), as `build.rs` found it. Reports record it as
/// `harness_version`.
pub const BUILD: &str = env!("KANDEV_ACCEPTANCE_BUILD");

/// An error and its sources, once each, joined with `: ` (anyhow errors: pass `e.as_ref()`).
/// A source whose text its error already ends with is not repeated (kube-rs's
/// `failed to read kubeconfig from ...: No such file ...` carries its io::Error's text).
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![error.to_string()];
    let mut source = error.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !parts.last().is_some_and(|last| last.ends_with(&text)) {
            parts.push(text);
        }
        source = e.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("failed to read kubeconfig from '/nonexist': {0}")]
    struct Read(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("read the template")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn the_error_chain_names_each_cause_once() {
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let text = super::error_chain(&Read(io()));
        assert_eq!(
            text,
            format!("failed to read kubeconfig from '/nonexist': {}", io())
        );
        let text = super::error_chain(&Outer(io()));
        assert_eq!(text, format!("read the template: {}", io()));
    }
}
