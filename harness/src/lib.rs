//! kandev-acceptance: proves, on a real engine, that Kandev's Docker-workloads task Pod keeps
//! the promises of its design, and writes a report CI and release gating can read.

pub mod admission;
pub mod agent;
pub mod backend;
pub mod cleanup;
pub mod cli;
pub mod compose;
pub mod identity;
pub mod images;
pub mod inspector;
pub mod ledger;
pub mod node;
pub mod outputs;
pub mod paths;
pub mod progress;
pub mod repeat;
pub mod report;
pub mod runner;
pub mod session;
pub mod template;

/// An error and its sources, once each, joined with `: `.
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![error.to_string()];
    let mut source = error.source();
    while let Some(e) = source {
        let text = e.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        source = e.source();
    }
    parts.join(": ")
}

/// [`error_chain`] for `anyhow` errors.
pub fn error_chain_anyhow(error: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for e in error.chain() {
        let text = e.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
    }
    parts.join(": ")
}
