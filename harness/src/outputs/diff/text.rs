//! `report diff` for people: each kind of change as a titled list, the checks by kind.

use super::{CheckChange, Diff, OutcomeChange};
use kandev_report::{CheckKind, CheckOutcome, CheckSummary, Outcome};
use std::fmt::Write as _;

/// "64 system checks (60 judged against the system, 4 not judged), 60 with a twin; 10 mirror
/// checks (58 and 10 passed)".
fn kinds_passed(c: &CheckSummary) -> String {
    format!(
        "{} ({} and {} passed)",
        c.kinds_line(),
        c.system.passed,
        c.mirror.passed
    )
}

fn outcome_text(outcome: Option<Outcome>) -> &'static str {
    outcome.map(Outcome::as_str).unwrap_or("(not run)")
}

fn check_text(outcome: Option<CheckOutcome>) -> &'static str {
    outcome.map(CheckOutcome::as_str).unwrap_or("(absent)")
}

/// The diff for people.
pub fn human(diff: &Diff) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "report diff {} -> {}: {}",
        diff.old_run,
        diff.new_run,
        if diff.regressed {
            "REGRESSED"
        } else {
            "no regression"
        }
    );
    let section = |out: &mut String, title: &str, lines: Vec<String>| {
        if !lines.is_empty() {
            let _ = writeln!(out, "{title} ({}):", lines.len());
            for line in lines {
                let _ = writeln!(out, "  {line}");
            }
        }
    };
    let outcome_lines = |changes: &[OutcomeChange]| {
        changes
            .iter()
            .map(|c| {
                let diagnosis = c
                    .diagnosis
                    .as_deref()
                    .and_then(|d| d.lines().next())
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default();
                format!(
                    "{:<28} {} -> {}{diagnosis}",
                    c.scenario,
                    outcome_text(c.old),
                    c.new.as_str()
                )
            })
            .collect::<Vec<_>>()
    };
    section(
        &mut out,
        "newly failing",
        outcome_lines(&diff.newly_failing),
    );
    section(&mut out, "fixed", outcome_lines(&diff.fixed));
    section(
        &mut out,
        "flaky (passed only after a retry)",
        diff.flaky.clone(),
    );
    section(
        &mut out,
        "other outcome changes",
        outcome_lines(&diff.other_outcome_changes),
    );
    section(&mut out, "no longer run", diff.removed.clone());
    // The checks by kind, when they differ: what each green proves.
    if diff.old_checks != diff.new_checks {
        let _ = writeln!(
            out,
            "checks: {} -> {}",
            kinds_passed(&diff.old_checks),
            kinds_passed(&diff.new_checks)
        );
    }
    let change_line = |c: &CheckChange| {
        let reclassified = c
            .old_kind
            .map(|k| format!(" (was a {} check)", k.as_str()))
            .unwrap_or_default();
        format!(
            "{:<40} {} {} -> {}{reclassified}",
            c.id,
            c.kind.as_str(),
            check_text(c.old),
            check_text(c.new)
        )
    };
    for (kind, title) in [
        (CheckKind::System, "system checks whose outcome changed"),
        (
            CheckKind::Mirror,
            "mirror checks (the harness's mirror of Kandev) whose outcome changed",
        ),
    ] {
        section(
            &mut out,
            title,
            diff.checks
                .iter()
                .filter(|c| c.kind == kind)
                .map(change_line)
                .collect(),
        );
    }
    section(
        &mut out,
        "catalogue changes (not judged: checks only one harness has, or whose kind changed)",
        diff.catalogue_changes.iter().map(change_line).collect(),
    );
    section(
        &mut out,
        &format!("durations changed beyond {}", diff.threshold),
        diff.durations
            .iter()
            .map(|c| {
                format!(
                    "{:<44} {:.1} s -> {:.1} s ({:+.1} s, {})",
                    c.what,
                    c.old_ms as f64 / 1000.0,
                    c.new_ms as f64 / 1000.0,
                    c.delta_ms as f64 / 1000.0,
                    if c.delta_ms > 0 { "slower" } else { "faster" }
                )
            })
            .collect(),
    );
    section(
        &mut out,
        "environment changes",
        diff.environment
            .iter()
            .map(|c| format!("{}: {} -> {}", c.what, c.old, c.new))
            .collect(),
    );
    out
}
