//! A run's report from its parts: the one place that fills in [`Report`], its own verdict
//! included (kandev-report's one rule, under the run's gate).

use kandev_report::{
    CleanupRecord, Configuration, Environment, Gate, Report, Rules, RunCost, SCHEMA_VERSION,
    ScenarioReport, Selection, StepReport, Summary, judge, rfc3339,
};
use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime};

/// Everything a run knows at its end.
pub struct RunParts {
    pub run_id: String,
    pub backend: String,
    pub gate: Gate,
    pub started_at: SystemTime,
    pub duration: Duration,
    pub interrupted: bool,
    pub deadline_exceeded: bool,
    pub environment: Environment,
    /// The run's settings as recorded (their digest identifies the configuration).
    pub settings: serde_json::Value,
    pub setup: Vec<StepReport>,
    /// In the order the report lists them.
    pub scenarios: Vec<ScenarioReport>,
    pub leftovers: Vec<String>,
    pub teardown: Vec<CleanupRecord>,
    pub cost: Option<RunCost>,
    /// What the filter selected from the catalogue.
    pub selection: Option<Selection>,
    /// Pods kept on purpose (`--keep`): the run's leftovers are not leaks.
    pub kept: bool,
}

pub fn assemble(parts: RunParts) -> Report {
    let sha = hex::encode(Sha256::digest(parts.settings.to_string().as_bytes()));
    let rules = Rules {
        profile: parts.gate.profile,
        requires: parts.gate.requires.clone(),
        kept: parts.kept,
    };
    let mut report = Report {
        schema_version: SCHEMA_VERSION,
        run_id: parts.run_id,
        harness_version: crate::BUILD.into(),
        started_at: rfc3339(parts.started_at),
        finished_at: rfc3339(SystemTime::now()),
        duration_ms: parts.duration.as_millis() as u64,
        interrupted: parts.interrupted,
        deadline_exceeded: parts.deadline_exceeded,
        backend: parts.backend,
        gate: parts.gate,
        environment: parts.environment,
        configuration: Configuration {
            sha256: format!("sha256:{sha}"),
            settings: parts.settings,
        },
        summary: Summary::of(&parts.scenarios),
        setup: parts.setup,
        scenarios: parts.scenarios,
        leftovers: parts.leftovers,
        teardown: parts.teardown,
        cost: parts.cost,
        selection: parts.selection,
        verdict: None,
    };
    report.verdict = Some(judge(&report, &rules));
    report
}
