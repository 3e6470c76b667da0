//! The run on the console: the summary printed after a run (and by `report show`), and the
//! one line of what the run itself cost.

use kandev_report::{CheckOutcome, FindingLevel, Report, RunCost};
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
        "  {} system checks: {} passed, {} failed, {} not reached; {} mirror checks: {} passed, {} failed, {} not reached\n",
        c.system.total, c.system.passed, c.system.failed, c.system.not_reached,
        c.mirror.total, c.mirror.passed, c.mirror.failed, c.mirror.not_reached
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
    out.push_str(&format!("  report: {}\n", path.display()));
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
