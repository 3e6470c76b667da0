//! `report show REPORT [--html]` and `report diff OLD NEW [--format text|json]`; a REPORT is
//! a report.json or the run's folder holding it.

use super::args::{OutputFormat, ReportCommand};
use crate::outputs::{console, diff, html};
use kandev_report::{Report, ReportTooNew, exit};
use std::path::{Path, PathBuf};

pub(crate) fn report(command: ReportCommand) -> u8 {
    match command {
        ReportCommand::Show { file, html, format } => show(&report_file(&file), html, format),
        ReportCommand::Diff { old, new, format } => {
            compare(&report_file(&old), &report_file(&new), format)
        }
    }
}

/// `report show --format json`: what the text summary says, as data.
fn summary_json(report: &Report, file: &Path) -> serde_json::Value {
    serde_json::json!({
        "report": file,
        "run_id": report.run_id,
        "backend": report.backend,
        "started_at": report.started_at,
        "duration_ms": report.duration_ms,
        "interrupted": report.interrupted,
        "deadline_exceeded": report.deadline_exceeded,
        "verdict": report.verdict,
        "summary": report.summary,
        "selection": report.selection,
        "leftovers": report.leftovers,
        "scenarios": report.scenarios.iter().map(|s| serde_json::json!({
            "name": s.name,
            "outcome": s.outcome,
            "diagnosis": s.diagnosis,
            "duration_ms": s.duration_ms,
            "checks": s.checks.iter().map(|c| serde_json::json!({"id": c.id, "outcome": c.outcome})).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// A report as every command names one: its report.json, or the run's folder holding it
/// (`<report dir>/<run id>/`, what `run --report-dir` and `--run-id` name in advance).
pub(crate) fn report_file(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("report.json")
    } else {
        path.to_owned()
    }
}

/// Reads a report for `report` and `gate`: a report newer than this build reads is named as
/// such (its version, the highest this build reads, the fix: a newer harness); anything else
/// unreadable is a usage error naming the file.
pub(crate) fn read(file: &Path) -> Result<Report, u8> {
    kandev_report::read(file).map_err(|e| {
        if e.downcast_ref::<ReportTooNew>().is_some() {
            eprintln!("error: read report {}: {e}", file.display());
        } else {
            eprintln!(
                "error: read report {}: {e:#}\n  fix: pass a run's report folder (<report dir>/<run id>/) or the report.json in it",
                file.display()
            );
        }
        exit::USAGE
    })
}

fn show(file: &Path, write_html: bool, format: OutputFormat) -> u8 {
    let report = match read(file) {
        Ok(report) => report,
        Err(code) => return code,
    };
    match format {
        OutputFormat::Text => print!("{}", console::human_summary(&report, file)),
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&summary_json(&report, file)).unwrap_or_default()
        ),
    }
    if write_html {
        let folder = file.parent().unwrap_or(Path::new("."));
        let path = folder.join("report.html");
        if let Err(e) = std::fs::write(&path, html::render(&report, Some(folder))) {
            eprintln!("error: write {}: {e}", path.display());
            return exit::ENVIRONMENT;
        }
        println!("  html: {}", path.display());
    }
    exit::SUCCESS
}

fn compare(old: &Path, new: &Path, format: OutputFormat) -> u8 {
    let (old, new) = match (read(old), read(new)) {
        (Ok(old), Ok(new)) => (old, new),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    let d = diff::diff(&old, &new);
    match format {
        OutputFormat::Text => print!("{}", diff::text::human(&d)),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&d).unwrap_or_default()),
    }
    diff::exit_code(&d)
}

#[cfg(test)]
mod tests {
    use super::report_file;

    /// `gate --report`, `report show` and `report diff` take a run's folder as well as its
    /// report.json (what `run --report-dir DIR --run-id ID` names in advance).
    #[test]
    fn a_report_is_its_file_or_its_run_folder() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(report_file(dir.path()), dir.path().join("report.json"));
        let file = dir.path().join("report.json");
        assert_eq!(report_file(&file), file);
    }
}
