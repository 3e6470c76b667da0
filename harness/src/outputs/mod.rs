//! What the harness makes of a report (the model is kandev-report): the formats written beside
//! `report.json` (JUnit XML and CTRF JSON for CI systems, `report.html` for people), the
//! console and GitHub Actions summaries, and the readings of reports: `report diff`, the
//! `--repeat` pass rates and the release gate's refusals. CI formats have a test per check
//! (its id; its scenario as the class), a scenario's own test only where its checks cannot
//! tell how it ended; diagnoses, reasons a check was not judged, step errors and teardown
//! failures appear in each format.

mod cases;
pub mod console;
pub mod ctrf;
pub mod diff;
pub mod gate;
pub mod github;
pub mod html;
pub mod junit;
pub mod repeat;
mod trace;

pub use ctrf::ctrf;
pub use junit::junit;
use kandev_report::{Report, exit};
use std::path::{Path, PathBuf};

/// Renders a report in one format; the folder is where `report.json` is (for formats that
/// embed evidence files).
pub type Render = fn(&Report, &Path) -> String;

/// Every output format a run writes beside `report.json`: (file name, renderer). Adding a
/// format is adding a line here.
pub const FORMATS: &[(&str, Render)] = &[
    ("junit.xml", |report, _| junit(report)),
    ("ctrf.json", |report, _| ctrf::ctrf_text(report)),
    ("report.html", |report, folder| {
        html::render(report, Some(folder))
    }),
];

/// Writes `report.json` and every format of [`FORMATS`] into `folder`; returns the path of
/// `report.json`, or why it could not be written (a format that cannot be written is said on
/// stderr: `report.json` is what gates read).
pub fn write_all(report: &Report, folder: &Path) -> Result<PathBuf, String> {
    let path = folder.join("report.json");
    kandev_report::write(report, &path)
        .map_err(|e| format!("write the report {}: {e}", path.display()))?;
    for (name, render) in FORMATS {
        if let Err(e) = std::fs::write(folder.join(name), render(report, folder)) {
            eprintln!("error: write {}: {e}", folder.join(name).display());
        }
    }
    Ok(path)
}

/// The end of a run, for people and CI: the report written in every format into `folder`,
/// its summary on the console and, under GitHub Actions, the step summary and annotations.
/// Returns the run's exit code (`kept`: Pods kept on purpose with `--keep` are listed as
/// leftovers but are not leaks), or [`exit::ENVIRONMENT`] when `report.json` could not be
/// written.
pub fn publish_run(report: &Report, folder: &Path, kept: bool) -> u8 {
    let path = match write_all(report, folder) {
        Ok(path) => path,
        Err(e) => {
            eprintln!("error: {e}");
            return exit::ENVIRONMENT;
        }
    };
    eprint!("{}", console::human_summary(report, &path));
    // GitHub Actions: the step summary and the failed checks as annotations.
    github::publish_from_env(report);
    // The report's own verdict is the run's exit code (the same rule, under its gate).
    match &report.verdict {
        Some(verdict) => verdict.exit_code,
        None => exit::exit_code(report, kept),
    }
}
