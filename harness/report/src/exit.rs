//! Exit codes: what a run (or a report) means for CI and release gates, most severe first.
//! README's "Exit codes" table lists the same codes, and `harness/tests/docs.rs` keeps it so.

use crate::run::Report;
use serde_json::Value;

/// Every selected scenario passed (or was skipped/incompatible with a reason).
pub const SUCCESS: u8 = 0;
/// At least one scenario failed or timed out: a promise broke.
pub const SCENARIO_FAILED: u8 = 1;
/// Bad command line or invalid template; nothing was created.
pub const USAGE: u8 = 2;
/// `gate`: the report does not gate the release (every reason is printed).
pub const GATE_REFUSED: u8 = 1;
/// The environment could not be prepared or a scenario errored (engine, images, infra).
pub const ENVIRONMENT: u8 = 3;
/// Something the run created is still there after teardown.
pub const LEAKED: u8 = 4;
/// The filter selected no scenario.
pub const NOTHING_SELECTED: u8 = 5;
/// The run was interrupted (Ctrl-C, SIGTERM); the report is marked so.
pub const INTERRUPTED: u8 = 130;

/// `report diff`: a scenario or check that held in the old report does not in the new one
/// (the same value as [`SCENARIO_FAILED`]: a promise that held now breaks).
pub const REGRESSED: u8 = 1;

/// What a run's exit code means, in short (README's "Exit codes" table says it at length).
pub fn meaning(code: u8) -> &'static str {
    match code {
        SUCCESS => "every selected scenario passed (or was skipped or incompatible with a reason)",
        SCENARIO_FAILED => {
            "a scenario failed or timed out, or the run's deadline passed: a promise broke or could not be shown in time"
        }
        USAGE => "bad command line or invalid input; nothing was created",
        ENVIRONMENT => "the environment could not be prepared, or a scenario errored",
        LEAKED => "a scenario leaked, or something the run created was still there after the run",
        NOTHING_SELECTED => "the filter selected no scenario",
        INTERRUPTED => "interrupted; teardown ran and the report is marked interrupted",
        _ => "unknown exit code",
    }
}

/// Whether the run was told to keep Pods (`--keep`), which excuses its leftovers: the exit
/// code a report's own run ended with is `exit_code(report, kept(report))`.
pub fn kept(report: &Report) -> bool {
    report
        .configuration
        .settings
        .get("keep")
        .and_then(Value::as_str)
        .is_some_and(|k| k != "never")
}

/// The exit code a report maps to (most severe class first); `kept` excuses leftovers that
/// `--keep` left on purpose. The rule is [`crate::judge`]'s, under the report's own gate.
pub fn exit_code(report: &Report, kept: bool) -> u8 {
    let rules = crate::Rules {
        kept,
        ..crate::Rules::of_run(report)
    };
    crate::judge(report, &rules).exit_code
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Outcome, ScenarioReport};
    use crate::summary::Summary;

    /// A report whose scenarios end as `summary` counts them.
    fn report(summary: Summary, leftovers: &[&str], interrupted: bool) -> Report {
        let s = &summary;
        let scenarios = [
            (Outcome::Passed, s.passed),
            (Outcome::Failed, s.failed),
            (Outcome::Errored, s.errored),
            (Outcome::TimedOut, s.timed_out),
            (Outcome::Cancelled, s.cancelled),
            (Outcome::Skipped, s.skipped),
            (Outcome::Leaked, s.leaked),
        ]
        .into_iter()
        .flat_map(|(outcome, n)| {
            (0..n).map(move |i| ScenarioReport {
                name: format!("{}::{i}", outcome.as_str()),
                outcome,
                ..Default::default()
            })
        })
        .collect();
        Report {
            run_id: "r".into(),
            harness_version: "0".into(),
            interrupted,
            backend: "local".into(),
            summary,
            scenarios,
            leftovers: leftovers.iter().map(|s| (*s).to_owned()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn exit_codes_map_each_class_most_severe_first() {
        let passed = Summary {
            total: 2,
            passed: 1,
            skipped: 1,
            ..Default::default()
        };
        assert_eq!(
            exit_code(&report(passed.clone(), &[], false), false),
            SUCCESS
        );
        let failed = Summary {
            total: 2,
            failed: 1,
            errored: 1,
            ..Default::default()
        };
        assert_eq!(
            exit_code(&report(failed, &["pod/x"], false), false),
            SCENARIO_FAILED
        );
        let timed_out = Summary {
            total: 1,
            timed_out: 1,
            ..Default::default()
        };
        assert_eq!(
            exit_code(&report(timed_out, &[], false), false),
            SCENARIO_FAILED
        );
        let errored = Summary {
            total: 1,
            errored: 1,
            ..Default::default()
        };
        assert_eq!(
            exit_code(&report(errored, &["pod/x"], false), false),
            ENVIRONMENT
        );
        assert_eq!(
            exit_code(&report(passed.clone(), &["volume/x"], false), false),
            LEAKED
        );
        assert_eq!(
            exit_code(&report(passed.clone(), &["volume/x"], false), true),
            SUCCESS
        );
        let cancelled = Summary {
            total: 1,
            cancelled: 1,
            ..Default::default()
        };
        assert_eq!(
            exit_code(&report(cancelled.clone(), &[], true), false),
            INTERRUPTED
        );
        // A run stopped by --deadline: its cut-short scenarios timed out (a gate failure).
        let mut out_of_time = report(cancelled, &[], false);
        out_of_time.deadline_exceeded = true;
        assert_eq!(exit_code(&out_of_time, false), SCENARIO_FAILED);
        // A scenario that leaked fails the gate even when the run-level inventory is clean.
        let leaked = Summary {
            total: 2,
            passed: 1,
            leaked: 1,
            ..Default::default()
        };
        assert_eq!(
            exit_code(&report(leaked.clone(), &[], false), false),
            LEAKED
        );
        assert_eq!(
            exit_code(&report(leaked, &[], false), true),
            LEAKED,
            "--keep excuses kept Pods, not leaks of scenarios that tore down"
        );
    }
}
