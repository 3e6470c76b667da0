//! `--repeat N`: the selection run N times, each a full run with its own report, and the pass
//! rate of every scenario over those runs (`repeat-<first run id>/repeat.json`), so that a
//! flaky promise shows as a rate rather than as a lucky green.

use kandev_report::{Outcome, Report, Summary, exit};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepeatSummary {
    pub runs: Vec<RepeatedRun>,
    /// One entry per scenario, in the order first seen.
    pub scenarios: Vec<PassRate>,
    /// The most severe exit code of the runs (the command's exit code).
    pub exit_code: u8,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepeatedRun {
    pub run_id: String,
    pub exit_code: u8,
    pub summary: Summary,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PassRate {
    pub name: String,
    pub runs: usize,
    pub passed: usize,
    /// Passed only after a retry (counted in `passed` too).
    pub flaky: usize,
    /// Runs that left one of its checks not judged (counted by outcome too: a pass with a
    /// check not judged vouches for less than its name says).
    #[serde(default)]
    pub not_judged: usize,
    /// Every outcome seen, with its count.
    pub outcomes: BTreeMap<String, usize>,
    /// `passed / runs`.
    pub pass_rate: f64,
}

/// Exit codes from the least to the most severe.
const SEVERITY: [u8; 6] = [
    exit::SUCCESS,
    exit::NOTHING_SELECTED,
    exit::LEAKED,
    exit::ENVIRONMENT,
    exit::SCENARIO_FAILED,
    exit::INTERRUPTED,
];

/// The most severe of `codes` (an unknown code counts as the most severe).
pub fn most_severe(codes: impl IntoIterator<Item = u8>) -> u8 {
    codes
        .into_iter()
        .max_by_key(|c| {
            SEVERITY
                .iter()
                .position(|s| s == c)
                .unwrap_or(SEVERITY.len())
        })
        .unwrap_or(exit::SUCCESS)
}

pub fn summarize(runs: &[(u8, Option<Report>)]) -> RepeatSummary {
    let mut scenarios: Vec<PassRate> = Vec::new();
    for report in runs.iter().filter_map(|(_, r)| r.as_ref()) {
        for s in &report.scenarios {
            let index = match scenarios.iter().position(|p| p.name == s.name) {
                Some(i) => i,
                None => {
                    scenarios.push(PassRate {
                        name: s.name.clone(),
                        runs: 0,
                        passed: 0,
                        flaky: 0,
                        not_judged: 0,
                        outcomes: BTreeMap::new(),
                        pass_rate: 0.0,
                    });
                    scenarios.len() - 1
                }
            };
            if let Some(rate) = scenarios.get_mut(index) {
                rate.runs += 1;
                rate.passed += usize::from(s.outcome == Outcome::Passed);
                rate.flaky += usize::from(s.flaky);
                rate.not_judged += usize::from(
                    s.checks
                        .iter()
                        .any(|c| c.outcome == kandev_report::CheckOutcome::NotJudged),
                );
                *rate
                    .outcomes
                    .entry(s.outcome.as_str().to_owned())
                    .or_default() += 1;
            }
        }
    }
    for rate in &mut scenarios {
        rate.pass_rate = rate.passed as f64 / rate.runs.max(1) as f64;
    }
    RepeatSummary {
        runs: runs
            .iter()
            .filter_map(|(code, r)| {
                r.as_ref().map(|r| RepeatedRun {
                    run_id: r.run_id.clone(),
                    exit_code: *code,
                    summary: r.summary.clone(),
                })
            })
            .collect(),
        scenarios,
        exit_code: most_severe(runs.iter().map(|(c, _)| *c)),
    }
}

/// Writes `repeat.json`, prints the pass rates, returns the most severe exit code.
pub fn finish(report_dir: &Path, runs: &[(u8, Option<Report>)]) -> u8 {
    let summary = summarize(runs);
    let first = summary
        .runs
        .first()
        .map(|r| r.run_id.clone())
        .unwrap_or_else(|| "none".into());
    let folder = report_dir.join(format!("repeat-{first}"));
    let path = folder.join("repeat.json");
    let written = std::fs::create_dir_all(&folder).and_then(|()| {
        std::fs::write(
            &path,
            serde_json::to_vec_pretty(&summary).map_err(std::io::Error::other)?,
        )
    });
    eprintln!("\npass rates over {} runs:", summary.runs.len());
    for rate in &summary.scenarios {
        let outcomes: Vec<String> = rate
            .outcomes
            .iter()
            .map(|(o, n)| format!("{n} {o}"))
            .collect();
        eprintln!("{}", rate_line(rate, &outcomes));
    }
    match written {
        Ok(()) => eprintln!("  repeat summary: {}", path.display()),
        Err(e) => eprintln!("error: write {}: {e}", path.display()),
    }
    summary.exit_code
}

/// `  66.7%  a::x   2/3 passed, 1 flaky, 1 with a check not judged  (2 passed, 1 failed)`.
fn rate_line(rate: &PassRate, outcomes: &[String]) -> String {
    let mut notes = String::new();
    if rate.flaky > 0 {
        notes.push_str(&format!(", {} flaky", rate.flaky));
    }
    if rate.not_judged > 0 {
        notes.push_str(&format!(", {} with a check not judged", rate.not_judged));
    }
    format!(
        "  {:>5.1}%  {:<28} {}/{} passed{notes}  ({})",
        rate.pass_rate * 100.0,
        rate.name,
        rate.passed,
        rate.runs,
        outcomes.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_severe_exit_code_wins() {
        assert_eq!(most_severe([0, 4, 0]), exit::LEAKED);
        assert_eq!(most_severe([4, 3, 1, 0]), exit::SCENARIO_FAILED);
        assert_eq!(most_severe([1, 130]), exit::INTERRUPTED);
        assert_eq!(most_severe([5, 0]), exit::NOTHING_SELECTED);
        assert_eq!(most_severe([]), exit::SUCCESS);
    }

    fn run(id: &str, outcomes: &[(&str, Outcome, bool)]) -> Report {
        let scenarios: Vec<kandev_report::ScenarioReport> = outcomes
            .iter()
            .map(|(name, outcome, flaky)| {
                serde_json::from_value(serde_json::json!({
                    "name": name, "promise": "p", "outcome": outcome, "diagnosis": null,
                    "started_at": "", "duration_ms": 1, "steps": [], "findings": [],
                    "sessions": [], "cleanup": [], "artifacts": [], "attempts": 1,
                    "flaky": flaky, "previous_attempts": [], "nested_inventory": [], "leaks": []
                }))
                .unwrap_or_else(|e| unreachable!("{e}"))
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "schema_version": 1, "run_id": id, "harness_version": "0", "started_at": "",
            "finished_at": "", "duration_ms": 0, "interrupted": false, "deadline_exceeded": false,
            "backend": "local", "environment": {"engine_version": null, "engine_api_version": null,
            "kubernetes_version": null, "kernel": null, "operating_system": null,
            "architecture": null, "cgroup_version": null, "cgroup_driver": null, "node_mtu": null,
            "images": [], "template": null}, "configuration": {"sha256": "", "settings": null},
            "summary": Summary::of(&scenarios), "setup": [], "scenarios": scenarios, "leftovers": [], "teardown": []
        }))
        .unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[test]
    fn pass_rates_count_every_outcome_per_scenario() {
        let runs = vec![
            (
                0,
                Some(run(
                    "r1",
                    &[
                        ("a::x", Outcome::Passed, false),
                        ("b::y", Outcome::Passed, true),
                    ],
                )),
            ),
            (
                1,
                Some(run(
                    "r2",
                    &[
                        ("a::x", Outcome::Failed, false),
                        ("b::y", Outcome::Passed, false),
                    ],
                )),
            ),
            (
                4,
                Some(run(
                    "r3",
                    &[
                        ("a::x", Outcome::Leaked, false),
                        ("b::y", Outcome::Passed, false),
                    ],
                )),
            ),
            (5, None),
        ];
        let summary = summarize(&runs);
        assert_eq!(summary.runs.len(), 3);
        assert_eq!(summary.exit_code, exit::SCENARIO_FAILED);
        let a = &summary.scenarios[0];
        assert_eq!((a.name.as_str(), a.runs, a.passed), ("a::x", 3, 1));
        assert!((a.pass_rate - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(a.outcomes.get("leaked"), Some(&1));
        assert_eq!(a.outcomes.get("failed"), Some(&1));
        let b = &summary.scenarios[1];
        assert_eq!((b.passed, b.flaky, b.pass_rate), (3, 1, 1.0));
        assert_eq!((a.not_judged, b.not_judged), (0, 0));
    }

    #[test]
    fn runs_that_left_a_check_not_judged_are_counted_and_said() {
        let mut judged = run("r1", &[("a::x", Outcome::Passed, false)]);
        let mut unjudged = judged.clone();
        unjudged.run_id = "r2".into();
        judged.scenarios[0].checks = vec![check(kandev_report::CheckOutcome::Passed)];
        unjudged.scenarios[0].checks = vec![check(kandev_report::CheckOutcome::NotJudged)];
        let summary = summarize(&[(0, Some(judged)), (0, Some(unjudged))]);
        let a = &summary.scenarios[0];
        assert_eq!((a.passed, a.not_judged), (2, 1));
        assert!(
            rate_line(a, &["2 passed".into()])
                .ends_with("2/2 passed, 1 with a check not judged  (2 passed)"),
            "{}",
            rate_line(a, &[])
        );
    }

    fn check(outcome: kandev_report::CheckOutcome) -> kandev_report::CheckReport {
        kandev_report::CheckReport {
            id: "a::x/c".into(),
            promise: "p".into(),
            kind: Default::default(),
            outcome,
            reason: None,
            lacking: None,
            twin: "t".into(),
        }
    }
}
