//! `report show FILE [--html]` and `report diff OLD NEW [--format text|json]`.

use super::args::{OutputFormat, ReportCommand};
use crate::outputs::{console, diff, html};
use kandev_report::{Report, ReportTooNew, exit};
use std::path::Path;

pub(crate) fn report(command: ReportCommand) -> u8 {
    match command {
        ReportCommand::Show { file, html } => show(&file, html),
        ReportCommand::Diff { old, new, format } => compare(&old, &new, format),
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
                "error: read report {}: {e:#}\n  fix: pass the report.json a run wrote (reports/<run-id>/report.json)",
                file.display()
            );
        }
        exit::USAGE
    })
}

fn show(file: &Path, write_html: bool) -> u8 {
    let report = match read(file) {
        Ok(report) => report,
        Err(code) => return code,
    };
    print!("{}", console::human_summary(&report, file));
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
