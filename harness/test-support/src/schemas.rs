//! Validation of the harness's outputs against the formats' own schemas (used by the
//! harness's tests and the end-to-end tests).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The vendored schemas: `schemas/` beside this crate's manifest.
fn schemas() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas")
}

/// The errors of `junit.xml` text against the JUnit XSD (xmllint; Debian's libxml2-utils).
pub fn junit_errors(xml: &str) -> Vec<String> {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), xml).unwrap();
    let out = Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(schemas().join("junit-10.xsd"))
        .arg(file.path())
        .output()
        .unwrap_or_else(|e| {
            panic!("run xmllint: {e}; install it: apt-get install libxml2-utils (harness/scripts/ensure-test-deps.sh does)")
        });
    if out.status.success() {
        Vec::new()
    } else {
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// The errors of a CTRF document against the CTRF JSON schema.
pub fn ctrf_errors(ctrf: &serde_json::Value) -> Vec<String> {
    let schema: serde_json::Value =
        serde_json::from_slice(&std::fs::read(schemas().join("ctrf-schema-0.0.json")).unwrap())
            .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    validator
        .iter_errors(ctrf)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}
