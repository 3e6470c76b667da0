//! CI conventions (GitHub Actions): a Markdown summary of the run appended to the file
//! `GITHUB_STEP_SUMMARY` names, and each failed check as an `::error` workflow command on
//! stdout, which the runner shows as an annotation.

use kandev_report::{CheckKind, CheckOutcome, Report, exit, verdict_of};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

/// A table cell's text: one line, `|` escaped, markup characters as entities.
fn cell(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '|' => out.push_str("\\|"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '`' => out.push('\''),
            '\n' | '\r' | '\t' => out.push(' '),
            c if c.is_control() => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// The run as GitHub-flavoured Markdown: counts, a table of scenarios and outcomes, and each
/// failure with its failed check and diagnosis.
pub fn markdown(report: &Report) -> String {
    let s = &report.summary;
    // As the run exited (its own verdict: Pods kept with --keep are not leftovers).
    let verdict = verdict_of(report);
    let code = verdict.exit_code;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "### kandev-acceptance run `{}` on {}\n",
        cell(&report.run_id),
        cell(&report.backend)
    );
    let _ = writeln!(
        md,
        "**exit code {code}**: {}. {} scenarios: {} passed, {} failed, {} leaked, {} errored, {} timed out, {} cancelled, {} skipped, {} incompatible ({:.1} s). {}: {} passed, {} failed, {} not judged, {} not reached (system checks: {} passed; mirror checks, which judge only the harness's mirror of Kandev: {} passed).\n",
        exit::meaning(code),
        s.total,
        s.passed,
        s.failed,
        s.leaked,
        s.errored,
        s.timed_out,
        s.cancelled,
        s.skipped,
        s.incompatible,
        report.duration_ms as f64 / 1000.0,
        s.checks.kinds_line(),
        s.checks.passed,
        s.checks.failed,
        s.checks.not_judged,
        s.checks.not_reached,
        s.checks.system.passed,
        s.checks.mirror.passed,
    );
    let _ = writeln!(
        md,
        "**verdict** ({} gate): {}\n",
        verdict.profile.name(),
        verdict.brief()
    );
    if let Some(selection) = report.selection.as_ref().filter(|s| s.filtered) {
        let _ = writeln!(
            md,
            "**Filtered**: {} of {} scenarios selected; left out: {}.\n",
            selection.selected.len(),
            selection.selected.len() + selection.left_out.len(),
            cell(&selection.left_out.join(", "))
        );
    }
    if let Some(used) = &s.resources {
        let _ = writeln!(
            md,
            "Resources of {} Pods: {} (CPU summed over the scenarios, memory the largest scenario's peak).\n",
            used.pods,
            used.describe()
        );
    }
    md.push_str("| scenario | outcome | duration | checks | resources |\n| --- | --- | ---: | --- | --- |\n");
    for scenario in &report.scenarios {
        let passed = scenario
            .checks
            .iter()
            .filter(|c| c.outcome == CheckOutcome::Passed)
            .count();
        let not_judged = match scenario
            .checks
            .iter()
            .filter(|c| c.outcome == CheckOutcome::NotJudged)
            .count()
        {
            0 => String::new(),
            n => format!(", {n} not judged"),
        };
        let mark = if scenario.outcome.is_acceptable() {
            ""
        } else {
            "❌ "
        };
        let flaky = if scenario.flaky { " (flaky)" } else { "" };
        let mirrors = scenario
            .checks
            .iter()
            .filter(|c| c.kind == CheckKind::Mirror)
            .count();
        let mirrors = if mirrors > 0 {
            format!(" ({mirrors} mirror)")
        } else {
            String::new()
        };
        let _ = writeln!(
            md,
            "| `{}` | {mark}{}{flaky} | {:.1} s | {passed}/{} passed{not_judged}{mirrors} | {} |",
            cell(&scenario.name),
            scenario.outcome.as_str(),
            scenario.duration_ms as f64 / 1000.0,
            scenario.checks.len(),
            scenario
                .resources
                .as_ref()
                .map(|r| r.describe())
                .unwrap_or_else(|| "-".into())
        );
    }
    let failures: Vec<_> = report
        .scenarios
        .iter()
        .filter(|s| !s.outcome.is_acceptable())
        .collect();
    if !failures.is_empty() {
        md.push_str("\n#### Failures\n\n");
        for scenario in failures {
            let check = scenario
                .checks
                .iter()
                .find(|c| c.outcome == CheckOutcome::Failed)
                .map(|c| format!(", failed check `{}`", cell(&c.id)))
                .unwrap_or_default();
            let _ = writeln!(
                md,
                "- `{}` {}{check}: {}",
                cell(&scenario.name),
                scenario.outcome.as_str(),
                cell(scenario.diagnosis.as_deref().unwrap_or("no diagnosis"))
            );
        }
    }
    let unjudged: Vec<_> = report
        .scenarios
        .iter()
        .flat_map(|s| &s.checks)
        .filter(|c| c.outcome == CheckOutcome::NotJudged)
        .collect();
    if !unjudged.is_empty() {
        md.push_str("\n#### Not judged (nothing claimed; a release gate fails them)\n\n");
        for check in unjudged {
            let _ = writeln!(
                md,
                "- `{}` ({}): {}",
                cell(&check.id),
                check.kind.as_str(),
                cell(check.reason.as_deref().unwrap_or("no reason recorded"))
            );
        }
    }
    if !verdict.passed {
        md.push_str("\n#### Verdict: every reason\n\n");
        for reason in &verdict.reasons {
            let _ = writeln!(md, "- {}", cell(reason));
        }
    }
    if !report.leftovers.is_empty() {
        let _ = writeln!(
            md,
            "\n**Left behind**: {}",
            cell(&report.leftovers.join(", "))
        );
    }
    md.push('\n');
    md
}

/// A workflow command's message: `%`, CR and LF encoded as the runner expects.
fn command_data(text: &str) -> String {
    text.replace('%', "%25")
        .replace('\r', "%0D")
        .replace('\n', "%0A")
}

/// A workflow command's property value: also `:` and `,`.
fn command_property(text: &str) -> String {
    command_data(text).replace(':', "%3A").replace(',', "%2C")
}

/// One `::error title=<check id>::<diagnosis>` line per failed check; a scenario that did
/// not pass without a failed check (errored, timed out, leaked, cancelled, failed on a gate
/// requirement) gets one titled with its name. A check not judged is a `::warning` with its
/// reason (when the release gate failed its scenario for it, the scenario's `::error` says so
/// too).
pub fn annotations(report: &Report) -> Vec<String> {
    let mut lines = Vec::new();
    for s in &report.scenarios {
        let diagnosis = s.diagnosis.as_deref().unwrap_or(s.outcome.as_str());
        let failed: Vec<_> = s
            .checks
            .iter()
            .filter(|c| c.outcome == CheckOutcome::Failed)
            .collect();
        for check in &failed {
            lines.push(format!(
                "::error title={}::{}",
                command_property(&check.id),
                command_data(diagnosis)
            ));
        }
        for check in s
            .checks
            .iter()
            .filter(|c| c.outcome == CheckOutcome::NotJudged)
        {
            lines.push(format!(
                "::warning title={}::{}",
                command_property(&format!("{} not judged", check.id)),
                command_data(check.reason.as_deref().unwrap_or("no reason recorded"))
            ));
        }
        if failed.is_empty() && !s.outcome.is_acceptable() {
            lines.push(format!(
                "::error title={}::{}",
                command_property(&format!("{} {}", s.name, s.outcome.as_str())),
                command_data(diagnosis)
            ));
        }
    }
    lines
}

/// Under GitHub Actions: appends [`markdown`] to `step_summary` (the file
/// `GITHUB_STEP_SUMMARY` names) when given, and prints [`annotations`] on stdout when
/// `annotate`. A summary that cannot be written is said on stderr.
pub fn publish(report: &Report, step_summary: Option<&Path>, annotate: bool) {
    if let Some(path) = step_summary {
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(markdown(report).as_bytes()));
        if let Err(e) = appended {
            eprintln!("error: append the step summary to {}: {e}", path.display());
        }
    }
    if annotate {
        let mut out = std::io::stdout().lock();
        for line in annotations(report) {
            let _ = writeln!(out, "{line}");
        }
    }
}

/// [`publish`] as the environment asks: the summary when `GITHUB_STEP_SUMMARY` is set,
/// annotations when `GITHUB_ACTIONS` is `true`.
pub fn publish_from_env(report: &Report) {
    let step_summary = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|v| !v.is_empty());
    let annotate = std::env::var("GITHUB_ACTIONS").is_ok_and(|v| v == "true");
    publish(report, step_summary.as_deref().map(Path::new), annotate);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::html::tests::{report, scenario};
    use kandev_report::Outcome;

    #[test]
    fn the_summary_has_a_row_per_scenario_and_each_failure_with_its_check() {
        let mut errored = scenario("e::rr", Outcome::Errored, Some("engine"));
        for check in &mut errored.checks {
            check.outcome = CheckOutcome::NotReached;
        }
        let r = report(vec![
            scenario("a::passes", Outcome::Passed, None),
            scenario(
                "x::y",
                Outcome::Failed,
                Some("x::y/first: a | b\nsecond <line>"),
            ),
            errored,
        ]);
        let md = markdown(&r);
        assert!(
            md.contains("| `a::passes` | passed | 4.0 s | 2/2 passed (1 mirror) | - |"),
            "{md}"
        );
        assert!(
            md.contains("| `x::y` | ❌ failed | 4.0 s | 0/2 passed (1 mirror) | - |"),
            "{md}"
        );
        assert!(
            md.contains("- `x::y` failed, failed check `x::y/first`: x::y/first: a \\| b second &lt;line&gt;"),
            "{md}"
        );
        assert!(md.contains("**exit code 1**"), "{md}");
        let lines = annotations(&r);
        assert_eq!(
            lines,
            vec![
                "::error title=x%3A%3Ay/first::x::y/first: a | b%0Asecond <line>".to_owned(),
                "::error title=e%3A%3Arr errored::engine".to_owned(),
            ]
        );
    }

    #[test]
    fn a_check_not_judged_is_counted_listed_with_its_reason_and_warned() {
        let mut s = scenario("a::passes", Outcome::Passed, None);
        s.checks[0].outcome = CheckOutcome::NotJudged;
        s.checks[0].reason = Some("no host engine | beside the cluster".into());
        let r = report(vec![s]);
        let md = markdown(&r);
        assert!(
            md.contains(
                "| `a::passes` | passed | 4.0 s | 1/2 passed, 1 not judged (1 mirror) | - |"
            ),
            "{md}"
        );
        assert!(
            md.contains("1 system checks (0 judged against the system, 1 not judged)"),
            "{md}"
        );
        assert!(
            md.contains("1 passed, 0 failed, 1 not judged, 0 not reached"),
            "{md}"
        );
        assert!(
            md.contains("- `a::passes/first` (system): no host engine \\| beside the cluster"),
            "{md}"
        );
        assert_eq!(
            annotations(&r),
            vec![
                "::warning title=a%3A%3Apasses/first not judged::no host engine | beside the cluster"
                    .to_owned()
            ]
        );
    }

    #[test]
    fn publish_appends_to_the_step_summary() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
        let path = dir.path().join("summary.md");
        std::fs::write(&path, "before\n").unwrap_or_default();
        let r = report(vec![scenario("a::passes", Outcome::Passed, None)]);
        publish(&r, Some(&path), false);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            text.starts_with("before\n### kandev-acceptance run `r1`"),
            "{text}"
        );
    }
}
