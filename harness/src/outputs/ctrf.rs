//! `ctrf.json`: the run in CTRF JSON (Common Test Report Format), one test per check.

use super::cases::{Status, cases};
use super::trace::{details, teardown_failures};
use kandev_report::{Report, ScenarioReport, StepOutcome, verdict_of};
use serde_json::{Value, json};

/// The CTRF specification version [`ctrf`] writes (its JSON schema is in the tests).
pub const CTRF_SPEC_VERSION: &str = "0.0.0";

/// CTRF's five statuses; `rawStatus` keeps the exact outcome.
fn ctrf_status(status: Status) -> &'static str {
    match status {
        Status::Passed => "passed",
        Status::Failed => "failed",
        Status::Skipped => "skipped",
        Status::Errored => "other",
    }
}

/// CTRF JSON (Common Test Report Format): `reportFormat`, `specVersion`, `results` with the
/// tool, summary (epoch milliseconds), one test per check (and a scenario's own test only
/// where its checks cannot tell how it ended, as `outputs::cases` decides) and the environment.
pub fn ctrf(report: &Report) -> Value {
    let cases = cases(report);
    let count = |wanted: Status| cases.iter().filter(|c| c.status == wanted).count();
    let start = kandev_report::unix_ms(&report.started_at).unwrap_or_default();
    let tests: Vec<Value> = cases
        .iter()
        .map(|case| {
            let s = case.scenario;
            let started = kandev_report::unix_ms(&s.started_at).unwrap_or(start);
            let duration = case.duration_ms();
            let mut test = json!({
                "name": case.name,
                "status": ctrf_status(case.status),
                "rawStatus": case.raw,
                "duration": duration,
                "start": started,
                "stop": started + duration,
                "suite": [s.name.split("::").next().unwrap_or_default(), s.name],
                "type": "e2e",
                "flaky": s.flaky && case.carries_scenario,
                "retries": if case.carries_scenario { s.attempts.saturating_sub(1) } else { 0 },
                "extra": {
                    "scenario": s.name,
                    "scenario_outcome": s.outcome.as_str(),
                    "promise": case.check.map_or(s.promise.as_str(), |c| c.promise.as_str()),
                },
            });
            if let Some(object) = test.as_object_mut() {
                // Optional members are left out rather than null or empty (the schema wants
                // a string message and at least one retry attempt when the list is there).
                if !case.message.is_empty() {
                    object.insert("message".into(), json!(case.message));
                }
                if let Some(c) = case.check
                    && let Some(extra) = object.get_mut("extra").and_then(Value::as_object_mut)
                {
                    extra.insert("kind".into(), json!(c.kind.as_str()));
                    extra.insert("twin".into(), json!(c.twin));
                    if let Some(reason) = &c.reason {
                        extra.insert("reason".into(), json!(reason));
                    }
                }
                if case.carries_scenario {
                    scenario_details(object, s);
                }
            }
            test
        })
        .collect();
    let c = &report.summary.checks;
    json!({
        "reportFormat": "CTRF",
        "specVersion": CTRF_SPEC_VERSION,
        "reportId": report.run_id,
        "timestamp": report.finished_at,
        "generatedBy": format!("kandev-acceptance {}", report.harness_version),
        "results": {
            "tool": {"name": "kandev-acceptance", "version": report.harness_version},
            "summary": {
                "tests": cases.len(),
                "passed": count(Status::Passed),
                "failed": count(Status::Failed),
                "pending": 0,
                "skipped": count(Status::Skipped),
                "other": count(Status::Errored),
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
                        "summary": c.kinds_line(),
                        "system": c.system,
                        "system_with_twin": c.with_twin,
                        "mirror": c.mirror,
                        "not_judged": c.not_judged,
                    },
                    "verdict": verdict_of(report),
                    "selection": report.selection,
                },
            },
        }
    })
}

/// What the case that carries scenario `s` adds: its steps, evidence files, findings,
/// teardown failures, leaks, the whole trace and earlier attempts.
fn scenario_details(test: &mut serde_json::Map<String, Value>, s: &ScenarioReport) {
    test.insert("trace".into(), json!(details(s)));
    test.insert(
        "steps".into(),
        json!(
            s.steps
                .iter()
                .map(|st| json!({
                    "name": st.name,
                    "status": match st.outcome {
                        StepOutcome::Passed => "passed",
                        StepOutcome::Failed => "failed",
                        StepOutcome::Incompatible => "skipped",
                        StepOutcome::Errored => "other",
                    },
                    "extra": {"duration_ms": st.duration_ms, "error": st.error},
                }))
                .collect::<Vec<_>>()
        ),
    );
    test.insert(
        "attachments".into(),
        json!(s.artifacts.iter().map(|a| json!({
            "name": a.rsplit('/').next().unwrap_or(a),
            "contentType": if a.ends_with(".json") { "application/json" } else { "text/plain" },
            "path": a,
        })).collect::<Vec<_>>()),
    );
    if let Some(extra) = test.get_mut("extra").and_then(Value::as_object_mut) {
        extra.insert("findings".into(), json!(s.findings));
        extra.insert("teardown_failures".into(), json!(teardown_failures(s)));
        extra.insert("leaks".into(), json!(s.leaks));
        if let Some(diagnosis) = &s.diagnosis {
            extra.insert("diagnosis".into(), json!(diagnosis));
        }
    }
    if !s.previous_attempts.is_empty() {
        let attempts: Vec<Value> = s
            .previous_attempts
            .iter()
            .enumerate()
            .map(|(i, text)| json!({"attempt": i + 1, "status": "failed", "message": text}))
            .collect();
        test.insert("retryAttempts".into(), json!(attempts));
    }
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
    fn ctrf_has_a_test_per_check_in_the_required_shape() {
        let mut r = report();
        r.scenarios[0].checks[0].outcome = kandev_report::CheckOutcome::NotJudged;
        r.scenarios[0].checks[0].reason = Some("no node view".into());
        let v = ctrf(&r);
        let summary = &v["results"]["summary"];
        assert_eq!(summary["tests"], 6);
        assert_eq!(
            (
                summary["passed"].as_u64(),
                summary["failed"].as_u64(),
                summary["skipped"].as_u64(),
                summary["other"].as_u64()
            ),
            (Some(0), Some(1), Some(3), Some(2))
        );
        assert_eq!(v["results"]["tool"]["name"], "kandev-acceptance");
        let tests = v["results"]["tests"].as_array().unwrap();
        for t in tests {
            assert!(
                t["name"].is_string() && t["status"].is_string() && t["duration"].is_u64(),
                "{t}"
            );
        }
        let unjudged = tests
            .iter()
            .find(|t| t["name"] == "a::passed/holds")
            .unwrap();
        assert_eq!(unjudged["status"], "skipped");
        assert_eq!(unjudged["rawStatus"], "not judged");
        assert_eq!(unjudged["message"], "not judged: no node view");
        assert_eq!(unjudged["extra"]["reason"], "no node view");
        let failed = tests
            .iter()
            .find(|t| t["name"] == "b::failed/holds")
            .unwrap();
        assert_eq!(
            (&failed["status"], &failed["message"], &failed["suite"][1]),
            (
                &json!("failed"),
                &json!("promise <broke>"),
                &json!("b::failed")
            )
        );
        assert!(failed["trace"].as_str().unwrap().contains("step \"s\""));
    }
}
