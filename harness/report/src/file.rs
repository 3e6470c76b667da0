//! `report.json` on disk: written atomically, read (with what older reports lack filled in),
//! and its JSON Schema.

use crate::run::{Report, SCHEMA_VERSION};
use crate::summary::Summary;
use serde_json::Value;
use std::path::Path;

/// The JSON Schema of [`Report`], as checked in at `reports/report.schema.json`.
pub fn json_schema() -> Value {
    serde_json::to_value(schemars::schema_for!(Report)).unwrap_or(Value::Null)
}

/// Writes the report atomically (temp file + rename) so readers never see half a file.
pub fn write(report: &Report, path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    let text = serde_json::to_vec_pretty(report).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text)?;
    std::fs::rename(tmp, path)
}

/// A report written by a newer harness, in a schema this build does not know: its fields could
/// mean what this build cannot tell, so it is not read at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportTooNew {
    /// The report's `schema_version`.
    pub version: u64,
    /// The highest this build reads ([`SCHEMA_VERSION`]).
    pub highest: u32,
}

impl std::fmt::Display for ReportTooNew {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the report's schema version is {}, newer than the highest this build reads ({}, kandev-report {})\n  fix: read it with the kandev-acceptance that wrote it, or a newer one",
            self.version,
            self.highest,
            env!("CARGO_PKG_VERSION")
        )
    }
}

impl std::error::Error for ReportTooNew {}

/// Reads a report of any schema version up to [`SCHEMA_VERSION`] (what older ones lack is
/// filled in); a newer one is refused as [`ReportTooNew`] before its fields are read.
pub fn read(path: &Path) -> anyhow::Result<Report> {
    let text = std::fs::read(path)?;
    let value: Value = serde_json::from_slice(&text)?;
    // The version first: a newer report's unknown fields would otherwise be the error.
    if let Some(version) = value.get("schema_version").and_then(Value::as_u64)
        && version > u64::from(SCHEMA_VERSION)
    {
        return Err(ReportTooNew {
            version,
            highest: SCHEMA_VERSION,
        }
        .into());
    }
    let mut report: Report = serde_json::from_value(value)?;
    // A report from before check kinds has no kind counts: its checks were read as system
    // checks (the default), so count them so.
    let c = &report.summary.checks;
    if c.total > 0 && c.system.total + c.mirror.total == 0 {
        report.summary.checks = Summary::of(&report.scenarios).checks;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{CheckKind, CheckOutcome, CheckReport, ScenarioReport};

    #[test]
    fn a_report_from_before_check_kinds_counts_its_checks_as_system() {
        let check = |id: &str, kind| CheckReport {
            id: id.into(),
            promise: "p".into(),
            kind,
            outcome: CheckOutcome::Passed,
            reason: None,
            lacking: None,
            twin: "fixtures/templates/broken/x.yaml".into(),
        };
        let scenarios = vec![ScenarioReport {
            name: "a::x".into(),
            checks: vec![
                check("a::x/first", CheckKind::System),
                check("a::x/second", CheckKind::Mirror),
            ],
            ..Default::default()
        }];
        let report = Report {
            summary: Summary::of(&scenarios),
            scenarios,
            ..Default::default()
        };
        let mut old = serde_json::to_value(&report).unwrap();
        for check in old["scenarios"][0]["checks"].as_array_mut().unwrap() {
            check.as_object_mut().unwrap().remove("kind");
        }
        let summary = old["summary"]["checks"].as_object_mut().unwrap();
        summary.remove("system");
        summary.remove("mirror");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        std::fs::write(&path, serde_json::to_vec(&old).unwrap()).unwrap();
        let read = read(&path).unwrap();
        assert_eq!(read.summary.checks.system.total, 2);
        assert_eq!(read.summary.checks.system.passed, 2);
        assert_eq!(read.summary.checks.mirror.total, 0);
    }

    #[test]
    fn a_newer_report_is_named_as_such_and_an_older_one_still_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        let mut newer = serde_json::to_value(Report::default()).unwrap();
        newer["schema_version"] = (SCHEMA_VERSION + 1).into();
        newer["a_field_from_the_future"] = true.into();
        std::fs::write(&path, serde_json::to_vec(&newer).unwrap()).unwrap();
        let e = read(&path).unwrap_err();
        let too_new = e.downcast_ref::<ReportTooNew>().unwrap();
        assert_eq!(too_new.version, u64::from(SCHEMA_VERSION) + 1);
        let text = e.to_string();
        assert!(
            text.contains(&format!("schema version is {}", SCHEMA_VERSION + 1))
                && text.contains(&format!("highest this build reads ({SCHEMA_VERSION}"))
                && text.contains("fix: "),
            "{text}"
        );
        // Version 1: no verdict, selection, not-judged counts or images ran.
        let mut older = serde_json::to_value(Report::default()).unwrap();
        older["schema_version"] = 1.into();
        let o = older.as_object_mut().unwrap();
        o.remove("verdict");
        o.remove("selection");
        o["summary"]["checks"]
            .as_object_mut()
            .unwrap()
            .remove("not_judged");
        std::fs::write(&path, serde_json::to_vec(&older).unwrap()).unwrap();
        let read = read(&path).unwrap();
        assert_eq!(
            (read.schema_version, read.verdict, read.selection),
            (1, None, None)
        );
    }

    #[test]
    fn checked_in_schema_matches_the_types() {
        // `reports/` of the repository (`KANDEV_ACCEPTANCE_ROOT`, as the harness finds it).
        let root = std::env::var_os("KANDEV_ACCEPTANCE_ROOT")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
        let path = root.join("reports/report.schema.json");
        let generated = json_schema();
        if std::env::var_os("KANDEV_ACCEPTANCE_BLESS").is_some() {
            let text = serde_json::to_string_pretty(&generated).unwrap_or_default() + "\n";
            std::fs::write(&path, text).unwrap_or_default();
        }
        let checked_in: Value = std::fs::read(&path)
            .ok()
            .and_then(|t| serde_json::from_slice(&t).ok())
            .unwrap_or(Value::Null);
        assert!(
            checked_in == generated,
            "reports/report.schema.json drifted from the report types; regenerate it with \
             KANDEV_ACCEPTANCE_BLESS=1 cargo test -p kandev-report checked_in_schema"
        );
    }
}
