//! `ctrf.json`: the run in CTRF JSON (Common Test Report Format), one test per scenario.

use super::trace::{details, teardown_failures};
use kandev_report::{Outcome, Report, StepOutcome};
use serde_json::{Value, json};

/// The CTRF specification version [`ctrf`] writes (its JSON schema is in the tests).
pub const CTRF_SPEC_VERSION: &str = "0.0.0";

/// CTRF's five statuses; `rawStatus` keeps the exact outcome.
fn ctrf_status(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Passed => "passed",
        Outcome::Failed | Outcome::TimedOut | Outcome::Leaked => "failed",
        Outcome::Skipped | Outcome::Incompatible => "skipped",
        Outcome::Errored | Outcome::Cancelled => "other",
    }
}

/// CTRF JSON (Common Test Report Format): `reportFormat`, `specVersion`, `results` with the
/// tool, summary (epoch milliseconds), one test per scenario and the environment.
pub fn ctrf(report: &Report) -> Value {
    let count = |wanted: &str| {
        report
            .scenarios
            .iter()
            .filter(|s| ctrf_status(s.outcome) == wanted)
            .count()
    };
    let start = kandev_report::unix_ms(&report.started_at).unwrap_or_default();
    let tests: Vec<Value> = report
        .scenarios
        .iter()
        .map(|s| {
            let started = kandev_report::unix_ms(&s.started_at).unwrap_or(start);
            let mut test = json!({
                "name": s.name,
                "status": ctrf_status(s.outcome),
                "rawStatus": s.outcome.as_str(),
                "duration": s.duration_ms,
                "start": started,
                "stop": started + s.duration_ms,
                "trace": details(s),
                "suite": [s.name.split("::").next().unwrap_or_default()],
                "type": "e2e",
                "flaky": s.flaky,
                "retries": s.attempts.saturating_sub(1),
                "steps": s.steps.iter().map(|st| json!({
                    "name": st.name,
                    "status": match st.outcome {
                        StepOutcome::Passed => "passed",
                        StepOutcome::Failed => "failed",
                        StepOutcome::Incompatible => "skipped",
                        StepOutcome::Errored => "other",
                    },
                    "extra": {"duration_ms": st.duration_ms, "error": st.error},
                })).collect::<Vec<_>>(),
                "attachments": s.artifacts.iter().map(|a| json!({
                    "name": a.rsplit('/').next().unwrap_or(a),
                    "contentType": if a.ends_with(".json") { "application/json" } else { "text/plain" },
                    "path": a,
                })).collect::<Vec<_>>(),
                "extra": {
                    "promise": s.promise,
                    "checks": s.checks.iter().map(|c| json!({
                        "id": c.id,
                        "kind": c.kind.as_str(),
                        "outcome": c.outcome.as_str(),
                        "twin": c.twin,
                    })).collect::<Vec<_>>(),
                    "findings": s.findings,
                    "teardown_failures": teardown_failures(s),
                    "leaks": s.leaks,
                },
            });
            // Optional members are left out rather than null or empty (the schema wants
            // a string message and at least one retry attempt when the list is there).
            if let Some(object) = test.as_object_mut() {
                if let Some(diagnosis) = &s.diagnosis {
                    object.insert("message".into(), json!(diagnosis));
                }
                if !s.previous_attempts.is_empty() {
                    let attempts: Vec<Value> = s
                        .previous_attempts
                        .iter()
                        .enumerate()
                        .map(|(i, text)| json!({"attempt": i + 1, "status": "failed", "message": text}))
                        .collect();
                    object.insert("retryAttempts".into(), json!(attempts));
                }
            }
            test
        })
        .collect();
    json!({
        "reportFormat": "CTRF",
        "specVersion": CTRF_SPEC_VERSION,
        "reportId": report.run_id,
        "timestamp": report.finished_at,
        "generatedBy": format!("kandev-acceptance {}", report.harness_version),
        "results": {
            "tool": {"name": "kandev-acceptance", "version": report.harness_version},
            "summary": {
                "tests": report.scenarios.len(),
                "passed": count("passed"),
                "failed": count("failed"),
                "pending": 0,
                "skipped": count("skipped"),
                "other": count("other"),
                "flaky": report.summary.flaky,
                "start": start,
                "stop": start + report.duration_ms,
                "duration": report.duration_ms,
            },
            "tests": tests,
            "environment": {
                "reportName": report.run_id,
                "healthy": report.leftovers.is_empty() && report.summary.leaked == 0,
                "extra": {
                    "backend": report.backend,
                    "interrupted": report.interrupted,
                    "leftovers": report.leftovers,
                    "checks": {
                        "summary": report.summary.checks.kinds_line(),
                        "system": report.summary.checks.system,
                        "system_with_twin": report.summary.checks.with_twin,
                        "mirror": report.summary.checks.mirror,
                    },
                },
            },
        }
    })
}

/// [`ctrf`] as the text written to `ctrf.json`.
pub fn ctrf_text(report: &Report) -> String {
    serde_json::to_string_pretty(&ctrf(report)).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::trace::tests::report;

    #[test]
    fn ctrf_has_the_required_shape() {
        let v = ctrf(&report());
        let summary = &v["results"]["summary"];
        assert_eq!(summary["tests"], 4);
        assert_eq!(
            (
                summary["passed"].as_u64(),
                summary["failed"].as_u64(),
                summary["skipped"].as_u64(),
                summary["other"].as_u64()
            ),
            (Some(1), Some(1), Some(1), Some(1))
        );
        assert_eq!(v["results"]["tool"]["name"], "kandev-acceptance");
        for t in v["results"]["tests"].as_array().unwrap() {
            assert!(
                t["name"].is_string() && t["status"].is_string() && t["duration"].is_u64(),
                "{t}"
            );
        }
    }
}
