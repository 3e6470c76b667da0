//! How a backend's preparation records its run-level set-up steps (engine, images, cluster,
//! preflight) for the report: an interface the backend defines and the runner's log
//! implements, so that the backend needs nothing of the runner.

use serde_json::Value;
use std::time::Instant;

/// Where run-level set-up steps go, each with its timing and evidence or error.
pub trait SetupSteps: Send + Sync {
    /// Records the step `name` that began at `started` and ended now: its evidence, or its
    /// error with every cause.
    fn record(&self, name: &str, started: Instant, ended: Result<Value, String>);
}

impl dyn SetupSteps + '_ {
    /// Records the step's `result` (with `evidence` of its value, or its error with every
    /// cause) and returns it.
    pub fn step<T, E: Into<anyhow::Error>>(
        &self,
        name: &str,
        started: Instant,
        result: Result<T, E>,
        evidence: impl FnOnce(&T) -> Value,
    ) -> anyhow::Result<T> {
        let result = result.map_err(Into::into);
        // `{:#}`: the error with its causes.
        let ended = result.as_ref().map(evidence).map_err(|e| format!("{e:#}"));
        self.record(name, started, ended);
        result
    }
}
