//! `junit.xml`: the run in JUnit XML (the common Jenkins/GitLab/GitHub reading of it, with
//! Surefire's rerun elements for flaky passes), one test case per scenario.

use super::trace::{details, teardown_failures};
use kandev_report::{Outcome, Report};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::trace::tests::report;

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
}
