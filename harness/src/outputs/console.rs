//! The run on the console: the summary printed after a run (and by `report show`), and the
//! one line of what the run itself cost.

use kandev_report::{
    Capability, CheckKind, CheckOutcome, FindingLevel, GateProfile, Report, RunCost, verdict_of,
};
use std::path::Path;

/// The short human summary printed after a run.
pub fn human_summary(report: &Report, path: &Path) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "\nkandev-acceptance run {} on {}: {}\n",
        report.run_id,
        report.backend,
        report.summary.checks.kinds_line()
    ));
    for s in &report.scenarios {
        out.push_str(&format!(
            "  {:<12} {:<28} {:>7.1}s",
            s.outcome.as_str(),
            s.name,
            s.duration_ms as f64 / 1000.0
        ));
        if s.flaky {
            out.push_str(&format!("  FLAKY: passed on attempt {}", s.attempts));
        }
        if let Some(d) = &s.diagnosis {
            let first = d.lines().next().unwrap_or_default();
            out.push_str(&format!("  {first}"));
        }
        out.push('\n');
        if let Some(check) = s.checks.iter().find(|c| c.outcome == CheckOutcome::Failed) {
            out.push_str(&format!("               failed check {}\n", check.id));
        }
        for check in s
            .checks
            .iter()
            .filter(|c| c.outcome == CheckOutcome::NotJudged)
        {
            out.push_str(&format!(
                "               not judged {}: {}\n",
                check.id,
                check.reason.as_deref().unwrap_or("no reason recorded")
            ));
        }
        for leak in &s.leaks {
            out.push_str(&format!("               leaked {leak}\n"));
        }
        for f in s.findings.iter().filter(|f| f.level != FindingLevel::Info) {
            out.push_str(&format!(
                "               finding {}: {}\n",
                f.code, f.message
            ));
        }
    }
    let s = &report.summary;
    out.push_str(&format!(
        "  {} scenarios: {} passed, {} failed, {} leaked, {} errored, {} timed out, {} cancelled, {} skipped, {} incompatible ({:.1}s)\n",
        s.total, s.passed, s.failed, s.leaked, s.errored, s.timed_out, s.cancelled, s.skipped, s.incompatible,
        report.duration_ms as f64 / 1000.0
    ));
    let c = &s.checks;
    out.push_str(&format!(
        "  {} system checks: {} passed, {} failed, {} not judged, {} not reached; {} mirror checks: {} passed, {} failed, {} not judged, {} not reached\n",
        c.system.total, c.system.passed, c.system.failed, c.system.not_judged, c.system.not_reached,
        c.mirror.total, c.mirror.passed, c.mirror.failed, c.mirror.not_judged, c.mirror.not_reached
    ));
    if let Some(used) = &s.resources {
        out.push_str(&format!(
            "  resources of {} Pods: {} (CPU summed, memory the largest scenario's)\n",
            used.pods,
            used.describe()
        ));
    }
    if let Some(cost) = &report.cost {
        out.push_str(&format!("  cost: {}\n", console_line(cost)));
    }
    if !report.leftovers.is_empty() {
        out.push_str(&format!("  LEFT BEHIND: {}\n", report.leftovers.join(", ")));
    }
    for image in &report.environment.images {
        for ran in image.disagreements() {
            out.push_str(&format!(
                "  IMAGE: the {} containers ran {} (id {}), not {} (id {})\n",
                image.role,
                ran.image,
                ran.image_id,
                image.reference,
                image.id.as_deref().unwrap_or("unknown")
            ));
        }
    }
    if let Some(selection) = report.selection.as_ref().filter(|s| s.filtered) {
        out.push_str(&format!(
            "  FILTERED: {} of {} scenarios selected; left out: {}\n",
            selection.selected.len(),
            selection.selected.len() + selection.left_out.len(),
            selection.left_out.join(", ")
        ));
    }
    out.push_str(&verdict_lines(report));
    out.push_str(&format!("  report: {}\n", path.display()));
    out
}

/// The report's own verdict: `verdict (release gate): passed`, or `FAILED (exit 1)` and every
/// reason, one a line.
pub fn verdict_lines(report: &Report) -> String {
    let v = verdict_of(report);
    let mut out = format!("  verdict ({} gate): ", v.profile.name());
    if v.passed {
        out.push_str("passed\n");
        out.push_str(&unjudged_for_lack(report));
    } else {
        out.push_str(&format!(
            "FAILED (exit {}: {})\n",
            v.exit_code,
            kandev_report::exit::meaning(v.exit_code)
        ));
        for reason in &v.reasons {
            let first = reason.lines().next().unwrap_or_default();
            out.push_str(&format!("    - {first}\n"));
        }
    }
    out
}

/// Under a passed release verdict, one line per scenario the run's backend or images could not
/// hold (skipped or incompatible for a lacking capability, or with checks the lack left not
/// judged): the gate accepts them, as it requires only what the backend can offer, so the line
/// says what the verdict does not cover.
pub fn unjudged_for_lack(report: &Report) -> String {
    if verdict_of(report).profile != GateProfile::Release {
        return String::new();
    }
    let mut out = String::new();
    for s in &report.scenarios {
        // A scenario skipped for a lack (all its checks), or a check its backend's lack left
        // unjudged (`launch::contract`'s labels and exposure on the local backend).
        let Some(lacking) = s
            .lacking
            .or_else(|| s.checks.iter().find_map(|c| c.lacking))
        else {
            continue;
        };
        let system = s
            .checks
            .iter()
            .filter(|c| c.kind == CheckKind::System && c.outcome == CheckOutcome::NotJudged)
            .filter(|c| s.lacking.is_some() || c.lacking == Some(lacking))
            .count();
        let fix = if lacking == Capability::Cluster {
            "a release verdict on them needs a cluster: run with --backend kind or kube"
        } else {
            "a release verdict on them needs images and a backend that have it"
        };
        out.push_str(&format!(
            "    but {} of {} not judged ({} lacks {}): {fix}\n",
            if system == 1 {
                "1 system check".to_string()
            } else {
                format!("{system} system checks")
            },
            s.name,
            report.backend,
            lacking.name()
        ));
    }
    out
}

/// One line for the console: `harness 2.1 s CPU, engine 24.3 s, machine 58.0 s busy; 131 exec, ...`.
pub fn console_line(cost: &RunCost) -> String {
    let s = |ms: u64| format!("{:.1} s", ms as f64 / 1000.0);
    let mut parts = vec![format!("harness {} CPU", s(cost.harness_cpu_ms))];
    if let Some(engine) = &cost.engine {
        parts.push(format!("engine {}", s(engine.cpu_ms)));
    }
    if let Some(busy) = cost.machine_busy_ms {
        parts.push(format!("machine {} busy", s(busy)));
    }
    let mut calls: Vec<_> = cost.calls.iter().collect();
    calls.sort_by_key(|(_, c)| std::cmp::Reverse(c.count));
    let calls: Vec<String> = calls
        .iter()
        .take(6)
        .map(|(kind, c)| format!("{} {kind}", c.count))
        .collect();
    format!("{}; calls: {}", parts.join(", "), calls.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::html::tests::{report, scenario};
    use kandev_report::{Outcome, Rules, judge};

    #[test]
    fn the_summary_counts_not_judged_apart_names_each_with_its_reason_and_shows_the_verdict() {
        let mut s = scenario("a::passes", Outcome::Passed, None);
        s.checks[0].outcome = CheckOutcome::NotJudged;
        s.checks[0].reason = Some("no host engine".into());
        let mut r = report(vec![s]);
        r.gate.profile = kandev_report::GateProfile::Release;
        r.verdict = Some(judge(&r, &Rules::release(Vec::new())));
        let text = human_summary(&r, Path::new("report.json"));
        for expected in [
            "1 system checks (0 judged against the system, 1 not judged), 1 with a twin; 1 mirror checks",
            "not judged a::passes/first: no host engine",
            "1 system checks: 0 passed, 0 failed, 1 not judged, 0 not reached",
            "verdict (release gate): FAILED (exit 1: ",
            "    - check a::passes/first not judged: no host engine",
        ] {
            assert!(text.contains(expected), "{expected}\n{text}");
        }
        // A passed release verdict that accepts a scenario skipped for a lacking cluster says
        // so in one line, with the way to judge it.
        let mut skipped = scenario("launch::connection", Outcome::Skipped, None);
        skipped.lacking = Some(Capability::Cluster);
        skipped.checks[0].outcome = CheckOutcome::NotJudged;
        let mut r2 = report(vec![skipped]);
        r2.gate.profile = kandev_report::GateProfile::Release;
        r2.verdict = Some(judge(&r2, &Rules::release(Vec::new())));
        let text = verdict_lines(&r2);
        assert!(text.contains("verdict (release gate): passed"), "{text}");
        assert!(
            text.contains("but 1 system check of launch::connection not judged (")
                && text.contains("lacks cluster): a release verdict on them needs a cluster: run with --backend kind or kube"),
            "{text}"
        );
        // As does one that accepts checks a lacking cluster left unjudged in a scenario that
        // passed (launch::contract on the local backend).
        let mut contract = scenario("launch::contract", Outcome::Passed, None);
        contract.checks[0].outcome = CheckOutcome::NotJudged;
        contract.checks[0].lacking = Some(Capability::Cluster);
        let mut r3 = report(vec![contract]);
        r3.gate.profile = kandev_report::GateProfile::Release;
        r3.verdict = Some(judge(&r3, &Rules::release(Vec::new())));
        let text = verdict_lines(&r3);
        assert!(
            text.contains("verdict (release gate): passed")
                && text.contains("but 1 system check of launch::contract not judged ("),
            "{text}"
        );
        r.verdict = None;
        r.gate.profile = kandev_report::GateProfile::Default;
        let text = human_summary(&r, Path::new("report.json"));
        assert!(text.contains("verdict (default gate): passed"), "{text}");
    }
}
