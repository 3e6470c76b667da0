//! What a scenario is, and how its body says that a promise broke.

use crate::runner::context::Ctx;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub type ScenarioFuture<'a> = Pin<Box<dyn Future<Output = anyhow::Result<Verdict>> + Send + 'a>>;

/// A named check of one promise. The registry in `scenarios/` lists them all.
pub struct Scenario {
    /// `area::name`, mirroring `scenarios/src/<area>/<name>.rs`.
    pub name: &'static str,
    /// The promise of the design it checks, as the report states it.
    pub promise: &'static str,
    pub timeout: Duration,
    pub run: for<'a> fn(&'a mut Ctx) -> ScenarioFuture<'a>,
}

/// How a scenario body ends when it does not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    Skipped(String),
    Incompatible(String),
}

/// A broken promise: the scenario ran and the design's promise did not hold.
#[derive(Debug, thiserror::Error)]
#[error("{promise}: {evidence}")]
pub struct Broken {
    pub promise: String,
    pub evidence: String,
}

/// Fails the scenario: `promise` broke, `evidence` shows how.
pub fn broken(promise: impl Into<String>, evidence: impl Into<String>) -> anyhow::Error {
    Broken {
        promise: promise.into(),
        evidence: evidence.into(),
    }
    .into()
}

/// `Ok(())` when `holds`, else a [`Broken`] with the evidence.
pub fn promise(
    holds: bool,
    promise: &str,
    evidence: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    if holds {
        Ok(())
    } else {
        Err(broken(promise, evidence()))
    }
}
