//! junit.xml and ctrf.json validate against the formats' own schemas for every outcome the
//! harness reports (and the report's classes show up in each).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kandev_harness::outputs::{ctrf, junit};
use kandev_report::{
    CheckKind, CheckOutcome, CheckReport, CleanupOutcome, CleanupRecord, Outcome, Report,
    ScenarioReport, StepOutcome, StepReport, Summary,
};
use kandev_test_support::schemas;
use serde_json::Value;

const EVERY_OUTCOME: [Outcome; 8] = [
    Outcome::Passed,
    Outcome::Failed,
    Outcome::Errored,
    Outcome::TimedOut,
    Outcome::Cancelled,
    Outcome::Skipped,
    Outcome::Incompatible,
    Outcome::Leaked,
];

fn scenario(i: usize, outcome: Outcome) -> ScenarioReport {
    let steps = [
        StepOutcome::Passed,
        StepOutcome::Failed,
        StepOutcome::Errored,
        StepOutcome::Incompatible,
    ]
    .into_iter()
    .map(|o| StepReport {
        name: format!("step <{o:?}> & \"more\""),
        outcome: o,
        offset_ms: 3,
        duration_ms: 1234,
        evidence: Value::Null,
        error: (o != StepOutcome::Passed).then(|| "bad \u{1} byte, ünïcode, ]]> end".into()),
    })
    .collect();
    ScenarioReport {
        name: format!("area{i}::{}", outcome.as_str().replace(' ', "_")),
        promise: "a promise with <markup>".into(),
        outcome,
        diagnosis: (outcome != Outcome::Passed).then(|| format!("{}: why \u{7}", outcome.as_str())),
        checks: std::iter::once(CheckReport {
            id: format!("area{i}::x/holds"),
            promise: "it holds".into(),
            kind: if i.is_multiple_of(2) {
                CheckKind::System
            } else {
                CheckKind::Mirror
            },
            outcome: match outcome {
                Outcome::Failed => CheckOutcome::Failed,
                Outcome::Passed | Outcome::Leaked => CheckOutcome::Passed,
                _ => CheckOutcome::NotReached,
            },
            reason: None,
            lacking: None,
            twin: "fixtures/templates/broken/x.yaml".into(),
        })
        // A passed scenario with a check it could not judge: skipped, with the reason.
        .chain((outcome == Outcome::Passed).then(|| CheckReport {
            id: format!("area{i}::x/unseen"),
            promise: "it is seen".into(),
            kind: CheckKind::System,
            outcome: CheckOutcome::NotJudged,
            reason: Some("no <node> view & \"more\"".into()),
            lacking: None,
            twin: "fixtures/templates/broken/y.yaml".into(),
        }))
        .collect(),
        started_at: "2026-11-30T00:00:01.250Z".into(),
        duration_ms: 61_001,
        steps,
        cleanup: vec![CleanupRecord {
            object: "pod/kandev-0123456789abcdef (uid u)".into(),
            outcome: CleanupOutcome::Failed,
            duration_ms: 10,
            error: Some("busy".into()),
        }],
        artifacts: vec![
            "area-x/kandev-1.kandev-agent.log".into(),
            "area-x/p.cgroup.json".into(),
        ],
        attempts: if outcome == Outcome::Passed { 3 } else { 1 },
        flaky: outcome == Outcome::Passed,
        previous_attempts: if outcome == Outcome::Passed {
            vec![
                "attempt 1: failed: x".into(),
                "attempt 2: timed out: y".into(),
            ]
        } else {
            Vec::new()
        },
        leaks: if outcome == Outcome::Leaked {
            vec!["node: process/42 `sleep 3600` (4:memory:/escaped)".into()]
        } else {
            Vec::new()
        },
        ..Default::default()
    }
}

fn report(scenarios: Vec<ScenarioReport>, leftovers: Vec<String>) -> Report {
    Report {
        run_id: "20261130t000000-abcdef".into(),
        harness_version: "0.1.0".into(),
        started_at: "2026-11-30T00:00:00.000Z".into(),
        finished_at: "2026-11-30T00:02:00.000Z".into(),
        duration_ms: 120_000,
        interrupted: true,
        backend: "local".into(),
        summary: Summary::of(&scenarios),
        scenarios,
        leftovers,
        ..Default::default()
    }
}

#[test]
fn every_outcome_validates_in_junit_and_ctrf() {
    let scenarios: Vec<_> = EVERY_OUTCOME
        .iter()
        .enumerate()
        .map(|(i, o)| scenario(i, *o))
        .collect();
    let report = report(scenarios, vec!["volume/left <behind>".into()]);

    let xml = junit(&report);
    let errors = schemas::junit_errors(&xml);
    assert!(errors.is_empty(), "{errors:#?}\n{xml}");
    // A case per check, and a scenario's own case where its checks cannot tell: failures
    // are the failed check, the timed-out and the leaked scenario; errors the passed one's
    // teardown, the errored and the cancelled scenario; skipped the check not judged and the
    // five checks not reached.
    assert!(
        xml.contains("tests=\"14\" failures=\"3\" errors=\"3\" skipped=\"6\""),
        "{xml}"
    );
    assert!(
        xml.contains(
            "<testcase classname=\"area0::passed\" name=\"area0::x/unseen\" time=\"0.000\">\n      <skipped message=\"not judged: no &lt;node&gt; view &amp; &quot;more&quot;\"/>"
        ),
        "{xml}"
    );
    assert!(xml.contains("<failure type=\"leaked\""), "{xml}");
    assert_eq!(xml.matches("<flakyFailure ").count(), 2, "{xml}");

    let doc = ctrf(&report);
    let errors = schemas::ctrf_errors(&doc);
    assert!(errors.is_empty(), "{errors:#?}\n{doc:#}");
    let summary = &doc["results"]["summary"];
    assert_eq!(summary["tests"], 14);
    assert_eq!(summary["failed"], 3, "failed, timed out and leaked");
    assert_eq!(summary["other"], 3, "a teardown, errored and cancelled");
    assert_eq!(summary["skipped"], 6, "not judged, and not reached");
    assert_eq!(summary["passed"], 2);
    assert_eq!(summary["flaky"], 1);
    assert_eq!(
        summary["stop"].as_u64().unwrap() - summary["start"].as_u64().unwrap(),
        120_000
    );
    let leaked = doc["results"]["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["rawStatus"] == "leaked")
        .unwrap();
    assert_eq!(leaked["status"], "failed");
    assert!(
        leaked["trace"]
            .as_str()
            .unwrap()
            .contains("leaked node: process/42")
    );
    assert_eq!(doc["results"]["environment"]["healthy"], false);
}

#[test]
fn an_empty_run_validates_too() {
    let report = report(Vec::new(), Vec::new());
    let errors = schemas::junit_errors(&junit(&report));
    assert!(errors.is_empty(), "{errors:#?}");
    let errors = schemas::ctrf_errors(&ctrf(&report));
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn the_schemas_reject_what_they_should() {
    // The validators are live: a broken document is refused by each.
    let mut doc = ctrf(&report(vec![scenario(0, Outcome::Failed)], Vec::new()));
    doc["results"]["tests"][0]["status"] = "broken".into();
    assert!(!schemas::ctrf_errors(&doc).is_empty());
    let xml = junit(&report(vec![scenario(0, Outcome::Failed)], Vec::new()))
        .replace("<testcase ", "<testcase bogus=\"1\" ");
    assert!(!schemas::junit_errors(&xml).is_empty());
}
