//! Kandev's template rules against the upstream acceptance cases, table-driven from
//! `fixtures/templates/cases/*.yaml`. Each file's first line says what the rules must say:
//! `# expect: accepted`, or `# expect: <field path> | <message>` for a rejection.

// A test file: failing loudly with unwrap/panic is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kandev_harness::pod::template::{self, RuleOptions, WorkspaceMode};

const CLAIM: &str = "kandev-0011223344556677-workspace";

/// (file name, expectation, text) of every case file.
fn cases() -> Vec<(String, String, String)> {
    let dir = kandev_harness::paths::fixtures().join("templates/cases");
    let mut cases: Vec<(String, String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let text = std::fs::read_to_string(e.path()).unwrap();
            let expect = text
                .lines()
                .next()
                .and_then(|l| l.strip_prefix("# expect: "))
                .unwrap()
                .to_owned();
            (e.file_name().to_string_lossy().into_owned(), expect, text)
        })
        .collect();
    cases.sort();
    assert!(
        cases.len() >= 20,
        "the case folder holds {} files",
        cases.len()
    );
    cases
}

#[test]
fn every_upstream_case_gets_kandevs_verdict_in_every_workspace_mode() {
    let mut checked = 0;
    for (name, expect, text) in cases() {
        for mode in [
            WorkspaceMode::ManagedPvc,
            WorkspaceMode::EmptyDir,
            WorkspaceMode::ExistingClaim,
        ] {
            // The claim-alias rule exists only where the workspace is a claim.
            if name.contains("claim-alias") && mode == WorkspaceMode::EmptyDir {
                continue;
            }
            let options = RuleOptions {
                main_container: "kandev-agent".into(),
                workspace_mode: mode,
                workspace_claim: Some(CLAIM.into()),
            };
            let findings = match template::parse(&text) {
                Ok(t) => template::validate(&t, &options),
                Err(f) => f,
            };
            let errors: Vec<String> = template::errors(&findings)
                .map(ToString::to_string)
                .collect();
            if expect == "accepted" {
                assert!(
                    errors.is_empty(),
                    "{name} ({mode:?}) must be accepted: {errors:?}"
                );
            } else {
                let (path, message) = expect.split_once(" | ").unwrap();
                let hit = template::errors(&findings)
                    .any(|f| f.path == path && f.message.contains(message));
                assert!(
                    hit,
                    "{name} ({mode:?}) must be rejected at {path} with {message:?}; got {errors:?}"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 60, "{checked} checks");
}
