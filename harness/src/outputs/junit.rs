//! `junit.xml`: the run in JUnit XML (the common Jenkins/GitLab/GitHub reading of it, with
//! Surefire's rerun elements for flaky passes), one test case per check, so that CI viewers
//! (GitHub, GitLab, Jenkins) list the checks, each failure with its diagnosis.

use super::cases::{Status, cases};
use super::trace::details;
use kandev_report::{Report, verdict_of};

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

/// JUnit XML (the common Jenkins/GitLab/GitHub reading of it): a test case per check
/// (classname: its scenario; name: the check's id), and a scenario's own case only where its
/// checks cannot tell how it ended (`outputs::cases`).
pub fn junit(report: &Report) -> String {
    let cases = cases(report);
    let count = |status: Status| cases.iter().filter(|c| c.status == status).count();
    let (failures, errors, skipped) = (
        count(Status::Failed),
        count(Status::Errored),
        count(Status::Skipped),
    );
    let secs = |ms: u64| format!("{:.3}", ms as f64 / 1000.0);
    let mut xml = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    // The skipped count goes on the testsuite only: the common XSD has none on testsuites.
    xml.push_str(&format!(
        "<testsuites name=\"kandev-acceptance\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{}\">\n",
        cases.len(),
        secs(report.duration_ms)
    ));
    xml.push_str(&format!(
        "  <testsuite name=\"kandev-acceptance.{}\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\" time=\"{}\" timestamp=\"{}\">\n",
        xml_escape(&report.backend),
        cases.len(),
        secs(report.duration_ms),
        xml_escape(&report.started_at)
    ));
    xml.push_str("    <properties>\n");
    let verdict = verdict_of(report);
    let c = &report.summary.checks;
    for (name, value) in [
        ("run_id", report.run_id.clone()),
        ("harness_version", report.harness_version.clone()),
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
        ("checks", c.kinds_line()),
        ("checks_system", c.system.total.to_string()),
        ("checks_system_judged", c.system.judged().to_string()),
        ("checks_system_not_judged", c.system.not_judged.to_string()),
        ("checks_system_with_twin", c.with_twin.to_string()),
        ("checks_mirror", c.mirror.total.to_string()),
        (
            "verdict",
            format!(
                "{} gate: {}",
                verdict.profile.name(),
                if verdict.passed { "passed" } else { "failed" }
            ),
        ),
        (
            "filtered",
            report
                .selection
                .as_ref()
                .map(|s| s.filtered.to_string())
                .unwrap_or_else(|| "unknown".into()),
        ),
    ] {
        xml.push_str(&format!(
            "      <property name=\"{}\" value=\"{}\"/>\n",
            xml_escape(name),
            xml_escape(&value)
        ));
    }
    xml.push_str("    </properties>\n");
    for case in &cases {
        let s = case.scenario;
        xml.push_str(&format!(
            "    <testcase classname=\"{}\" name=\"{}\" time=\"{}\">\n",
            xml_escape(&s.name),
            xml_escape(&case.name),
            secs(case.duration_ms())
        ));
        let body = if case.carries_scenario {
            xml_escape(&details(s))
        } else {
            String::new()
        };
        let kind = if case.check.is_some() {
            case.raw
        } else {
            s.outcome.as_str()
        };
        match case.status {
            Status::Passed => {}
            Status::Failed => xml.push_str(&format!(
                "      <failure type=\"{}\" message=\"{}\">{body}</failure>\n",
                xml_escape(kind),
                xml_escape(&case.message),
            )),
            Status::Errored => xml.push_str(&format!(
                "      <error type=\"{}\" message=\"{}\">{body}</error>\n",
                xml_escape(case.raw),
                xml_escape(&case.message),
            )),
            Status::Skipped => xml.push_str(&format!(
                "      <skipped message=\"{}\"/>\n",
                xml_escape(&case.message)
            )),
        }
        // Surefire's reading of reruns: one flakyFailure per failed attempt of a flaky pass.
        if s.flaky && case.carries_scenario {
            for earlier in &s.previous_attempts {
                xml.push_str(&format!(
                    "      <flakyFailure type=\"failed attempt\" message=\"{}\"/>\n",
                    xml_escape(earlier)
                ));
            }
        }
        let out = match case.check {
            Some(c) => format!(
                "{} check of {} ({} in {:.1} s): {}\ntwin: {}",
                c.kind.as_str(),
                s.name,
                s.outcome.as_str(),
                s.duration_ms as f64 / 1000.0,
                c.promise,
                c.twin
            ),
            None => format!("{}: {}", s.name, s.promise),
        };
        let out = if case.carries_scenario {
            format!("{out}\n{}", details(s))
        } else {
            out
        };
        xml.push_str(&format!(
            "      <system-out>{}</system-out>\n",
            xml_escape(&out)
        ));
        xml.push_str("    </testcase>\n");
    }
    xml.push_str("  </testsuite>\n</testsuites>\n");
    xml
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::trace::tests::report;

    #[test]
    fn junit_has_a_case_per_check_escapes_text_and_shows_teardown_failures() {
        let mut r = report();
        r.scenarios[0].checks[0].outcome = kandev_report::CheckOutcome::NotJudged;
        r.scenarios[0].checks[0].reason = Some("no <host> engine".into());
        let xml = junit(&r);
        // Cases: a::passed's teardown + its check, b::failed's check, c::skipped's check,
        // d::errored's own case + its check.
        assert!(
            xml.contains("tests=\"6\" failures=\"1\" errors=\"2\" skipped=\"3\""),
            "the testsuite carries the skipped count: {xml}"
        );
        assert!(
            xml.contains("<testcase classname=\"b::failed\" name=\"b::failed/holds\""),
            "{xml}"
        );
        assert!(
            xml.contains("<failure type=\"failed\" message=\"promise &lt;broke&gt;\">"),
            "{xml}"
        );
        assert!(xml.contains("x &lt; y &amp; &quot;z&quot;"), "{xml}");
        assert!(
            xml.contains(
                "<error type=\"teardown failed\" message=\"teardown of pod/p failed: busy\">"
            ),
            "{xml}"
        );
        assert!(
            xml.contains("<skipped message=\"not judged: no &lt;host&gt; engine\"/>"),
            "{xml}"
        );
        assert!(
            xml.contains("<skipped message=\"not reached: c::skipped incompatible: no browser\"/>"),
            "{xml}"
        );
        assert!(
            xml.contains("<testcase classname=\"d::errored\" name=\"d::errored\""),
            "{xml}"
        );
        assert_eq!(xml.matches("<testcase ").count(), 6);
        assert_eq!(
            xml.matches("<flakyFailure type=\"failed attempt\" message=\"attempt 1: failed: x\"/>")
                .count(),
            1,
            "{xml}"
        );
        assert_eq!(xml.matches("</testcase>").count(), 6);
    }
}
