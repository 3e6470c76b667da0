//! Other formats, derived from the one result model ([`Report`]) and written beside
//! `report.json`: JUnit XML (`junit.xml`) and CTRF JSON (`ctrf.json`) for CI systems, and
//! `report.html` for people ([`super::html`]). Test ids are the scenario names; diagnoses, step
//! errors and teardown failures appear in each format.

use crate::report::{CleanupOutcome, Outcome, Report, ScenarioReport, StepOutcome};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Renders a report in one format; the folder is where `report.json` is (for formats that
/// embed evidence files).
pub type Render = fn(&Report, &Path) -> String;

/// Every output format a run writes beside `report.json`: (file name, renderer). Adding a
/// format is adding a line here.
pub const FORMATS: &[(&str, Render)] = &[
    ("junit.xml", |report, _| junit(report)),
    ("ctrf.json", |report, _| ctrf_text(report)),
    ("report.html", |report, folder| {
        super::html::render(report, Some(folder))
    }),
];

fn ctrf_text(report: &Report) -> String {
    serde_json::to_string_pretty(&ctrf(report)).unwrap_or_default()
}

/// Writes `report.json` and every format of [`FORMATS`] into `folder`; returns the path of
/// `report.json`, or why it could not be written (a format that cannot be written is said on
/// stderr: `report.json` is what gates read).
pub fn write_all(report: &Report, folder: &Path) -> Result<PathBuf, String> {
    let path = folder.join("report.json");
    super::write(report, &path).map_err(|e| format!("write the report {}: {e}", path.display()))?;
    for (name, render) in FORMATS {
        if let Err(e) = std::fs::write(folder.join(name), render(report, folder)) {
            eprintln!("error: write {}: {e}", folder.join(name).display());
        }
    }
    Ok(path)
}

fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            // XML 1.0 forbids most control characters even when escaped.
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\r' | '\t') => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// Teardown failures of a scenario, one line each.
fn teardown_failures(s: &ScenarioReport) -> Vec<String> {
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
fn details(s: &ScenarioReport) -> String {
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

/// JUnit XML (the common Jenkins/GitLab/GitHub reading of it).
pub fn junit(report: &Report) -> String {
    let s = &report.summary;
    let failures = s.failed + s.timed_out + s.leaked;
    let errors = s.errored + s.cancelled;
    let skipped = s.skipped + s.incompatible;
    let secs = |ms: u64| format!("{:.3}", ms as f64 / 1000.0);
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    // The skipped count goes on the testsuite only: the common XSD has none on testsuites.
    xml.push_str(&format!(
        "<testsuites name=\"kandev-acceptance\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{}\">\n",
        s.total,
        secs(report.duration_ms)
    ));
    xml.push_str(&format!(
        "  <testsuite name=\"kandev-acceptance.{}\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\" time=\"{}\" timestamp=\"{}\">\n",
        xml_escape(&report.backend),
        s.total,
        secs(report.duration_ms),
        xml_escape(&report.started_at)
    ));
    xml.push_str("    <properties>\n");
    for (name, value) in [
        ("run_id", report.run_id.clone()),
        ("interrupted", report.interrupted.to_string()),
        (
            "engine_version",
            report
                .environment
                .engine_version
                .clone()
                .unwrap_or_default(),
        ),
        ("leftovers", report.leftovers.join(", ")),
        // What a green proves: system checks judge the cluster, template, images and prepare
        // script; mirror checks only the harness's mirror of Kandev.
        ("checks", report.summary.checks.kinds_line()),
        (
            "checks_system",
            report.summary.checks.system.total.to_string(),
        ),
        (
            "checks_system_with_twin",
            report.summary.checks.with_twin.to_string(),
        ),
        (
            "checks_mirror",
            report.summary.checks.mirror.total.to_string(),
        ),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    // One property a check (testcases carry none in the common XSD): its kind and outcome.
    .chain(report.scenarios.iter().flat_map(|s| {
        s.checks.iter().map(|c| {
            (
                format!("check:{}", c.id),
                format!("{} {}", c.kind.as_str(), c.outcome.as_str()),
            )
        })
    })) {
        xml.push_str(&format!(
            "      <property name=\"{}\" value=\"{}\"/>\n",
            xml_escape(&name),
            xml_escape(&value)
        ));
    }
    xml.push_str("    </properties>\n");
    for scenario in &report.scenarios {
        let class = scenario.name.split("::").next().unwrap_or_default();
        xml.push_str(&format!(
            "    <testcase classname=\"{}\" name=\"{}\" time=\"{}\">\n",
            xml_escape(class),
            xml_escape(&scenario.name),
            secs(scenario.duration_ms)
        ));
        let diagnosis = scenario.diagnosis.clone().unwrap_or_default();
        let teardown = teardown_failures(scenario);
        match scenario.outcome {
            Outcome::Passed if teardown.is_empty() => {}
            Outcome::Passed => xml.push_str(&format!(
                "      <error type=\"teardown\" message=\"{}\"/>\n",
                xml_escape(&teardown.join("; "))
            )),
            Outcome::Failed | Outcome::TimedOut | Outcome::Leaked => xml.push_str(&format!(
                "      <failure type=\"{}\" message=\"{}\">{}</failure>\n",
                scenario.outcome.as_str(),
                xml_escape(&diagnosis),
                xml_escape(&details(scenario))
            )),
            Outcome::Errored | Outcome::Cancelled => xml.push_str(&format!(
                "      <error type=\"{}\" message=\"{}\">{}</error>\n",
                scenario.outcome.as_str(),
                xml_escape(&diagnosis),
                xml_escape(&details(scenario))
            )),
            Outcome::Skipped | Outcome::Incompatible => xml.push_str(&format!(
                "      <skipped message=\"{}: {}\"/>\n",
                scenario.outcome.as_str(),
                xml_escape(&diagnosis)
            )),
        }
        // Surefire's reading of reruns: one flakyFailure per failed attempt of a flaky pass.
        if scenario.flaky {
            for earlier in &scenario.previous_attempts {
                xml.push_str(&format!(
                    "      <flakyFailure type=\"failed attempt\" message=\"{}\"/>\n",
                    xml_escape(earlier)
                ));
            }
        }
        xml.push_str(&format!(
            "      <system-out>{}</system-out>\n",
            xml_escape(&details(scenario))
        ));
        xml.push_str("    </testcase>\n");
    }
    xml.push_str("  </testsuite>\n</testsuites>\n");
    xml
}

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
    let start = crate::report::unix_ms(&report.started_at).unwrap_or_default();
    let tests: Vec<Value> = report
        .scenarios
        .iter()
        .map(|s| {
            let started = crate::report::unix_ms(&s.started_at).unwrap_or(start);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{CleanupRecord, StepReport, Summary};

    fn scenario(name: &str, outcome: Outcome, diagnosis: Option<&str>) -> ScenarioReport {
        ScenarioReport {
            name: name.into(),
            promise: "p".into(),
            outcome,
            diagnosis: diagnosis.map(str::to_owned),
            checks: Vec::new(),
            lacking: None,
            started_at: String::new(),
            duration_ms: 1500,
            steps: vec![StepReport {
                name: "s".into(),
                outcome: StepOutcome::Failed,
                offset_ms: 0,
                duration_ms: 5,
                evidence: Value::Null,
                error: Some("x < y & \"z\"".into()),
            }],
            findings: Vec::new(),
            sessions: Vec::new(),
            cleanup: vec![CleanupRecord {
                object: "pod/p".into(),
                outcome: CleanupOutcome::Failed,
                duration_ms: 1,
                error: Some("busy".into()),
            }],
            resources: None,
            calls: Default::default(),
            artifacts: vec!["a/b.log".into()],
            attempts: 1,
            flaky: false,
            previous_attempts: Vec::new(),
            nested_inventory: Vec::new(),
            leaks: Vec::new(),
        }
    }

    fn report() -> Report {
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
            schema_version: 1,
            run_id: "r1".into(),
            harness_version: "0.1.0".into(),
            started_at: "2026-11-29T00:00:00.000Z".into(),
            finished_at: "2026-11-29T00:01:00.000Z".into(),
            duration_ms: 60_000,
            interrupted: false,
            deadline_exceeded: false,
            backend: "local".into(),
            gate: Default::default(),
            environment: Default::default(),
            configuration: Default::default(),
            summary: Summary::of(&scenarios),
            setup: Vec::new(),
            scenarios,
            leftovers: Vec::new(),
            teardown: Vec::new(),
            cost: None,
        }
    }

    #[test]
    fn junit_counts_classes_escapes_text_and_shows_teardown_failures() {
        let xml = junit(&report());
        assert!(
            xml.contains("tests=\"4\" failures=\"1\" errors=\"1\" skipped=\"1\""),
            "the testsuite carries the skipped count: {xml}"
        );
        assert!(
            xml.contains("<testsuites name=\"kandev-acceptance\" tests=\"4\" failures=\"1\" errors=\"1\" time"),
            "{xml}"
        );
        assert!(
            xml.contains("<failure type=\"failed\" message=\"promise &lt;broke&gt;\">"),
            "{xml}"
        );
        assert!(xml.contains("x &lt; y &amp; &quot;z&quot;"), "{xml}");
        assert!(
            xml.contains("<error type=\"teardown\" message=\"teardown of pod/p failed: busy\"/>"),
            "{xml}"
        );
        assert!(
            xml.contains("<skipped message=\"incompatible: no browser\"/>"),
            "{xml}"
        );
        assert_eq!(xml.matches("<testcase ").count(), 4);
        assert!(
            xml.contains(
                "<flakyFailure type=\"failed attempt\" message=\"attempt 1: failed: x\"/>"
            ),
            "{xml}"
        );
        assert_eq!(xml.matches("</testcase>").count(), 4);
    }

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
