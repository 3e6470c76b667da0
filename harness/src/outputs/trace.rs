//! A scenario as a CI test case tells it: its steps with timings and errors, its checks,
//! teardown failures, leaks and evidence files (the body JUnit and CTRF both carry).

use kandev_report::{CleanupOutcome, ScenarioReport};

/// Teardown failures of a scenario, one line each.
pub(crate) fn teardown_failures(s: &ScenarioReport) -> Vec<String> {
    s.cleanup
        .iter()
        .filter(|c| c.outcome == CleanupOutcome::Failed)
        .map(|c| {
            format!(
                "teardown of {} failed: {}",
                c.object,
                c.error.clone().unwrap_or_default()
            )
        })
        .collect()
}

/// Steps with timings, errors and findings: the body of a test case's output.
pub(crate) fn details(s: &ScenarioReport) -> String {
    let mut lines: Vec<String> = s
        .steps
        .iter()
        .map(|st| {
            let error = st
                .error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default();
            format!(
                "step {:?} {:?} {} ms{error}",
                st.name, st.outcome, st.duration_ms
            )
        })
        .collect();
    lines.extend(
        s.findings
            .iter()
            .map(|f| format!("finding {:?} {}: {}", f.level, f.code, f.message)),
    );
    lines.extend(s.checks.iter().map(|c| {
        format!(
            "check {} ({}) {}",
            c.id,
            c.kind.as_str(),
            c.outcome.as_str()
        )
    }));
    lines.extend(teardown_failures(s));
    lines.extend(s.leaks.iter().map(|l| format!("leaked {l}")));
    lines.extend(s.artifacts.iter().map(|a| format!("artifact {a}")));
    lines.join("\n")
}

#[cfg(test)]
pub(crate) mod tests {
    use kandev_report::{
        CheckOutcome, CheckReport, CleanupOutcome, CleanupRecord, Outcome, Report, ScenarioReport,
        StepOutcome, StepReport, Summary,
    };
    use serde_json::Value;

    fn scenario(name: &str, outcome: Outcome, diagnosis: Option<&str>) -> ScenarioReport {
        ScenarioReport {
            name: name.into(),
            promise: "p".into(),
            outcome,
            diagnosis: diagnosis.map(str::to_owned),
            checks: vec![CheckReport {
                id: format!("{name}/holds"),
                promise: "it holds".into(),
                kind: Default::default(),
                outcome: match outcome {
                    Outcome::Passed => CheckOutcome::Passed,
                    Outcome::Failed => CheckOutcome::Failed,
                    _ => CheckOutcome::NotReached,
                },
                reason: None,
                lacking: None,
                twin: "fixtures/templates/broken/x.yaml".into(),
            }],
            duration_ms: 1500,
            steps: vec![StepReport {
                name: "s".into(),
                outcome: StepOutcome::Failed,
                offset_ms: 0,
                duration_ms: 5,
                evidence: Value::Null,
                error: Some("x < y & \"z\"".into()),
            }],
            cleanup: vec![CleanupRecord {
                object: "pod/p".into(),
                outcome: CleanupOutcome::Failed,
                duration_ms: 1,
                error: Some("busy".into()),
            }],
            artifacts: vec!["a/b.log".into()],
            ..Default::default()
        }
    }

    /// Four scenarios, one of each CI class (a flaky pass, a failure, a skip, an error).
    pub(crate) fn report() -> Report {
        let scenarios = vec![
            ScenarioReport {
                attempts: 2,
                flaky: true,
                previous_attempts: vec!["attempt 1: failed: x".into()],
                ..scenario("a::passed", Outcome::Passed, None)
            },
            scenario("b::failed", Outcome::Failed, Some("promise <broke>")),
            scenario("c::skipped", Outcome::Incompatible, Some("no browser")),
            scenario("d::errored", Outcome::Errored, Some("engine")),
        ];
        Report {
            run_id: "r1".into(),
            harness_version: "0.1.0".into(),
            started_at: "2026-11-29T00:00:00.000Z".into(),
            finished_at: "2026-11-29T00:01:00.000Z".into(),
            duration_ms: 60_000,
            backend: "local".into(),
            summary: Summary::of(&scenarios),
            scenarios,
            ..Default::default()
        }
    }
}
