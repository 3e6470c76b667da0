//! `kandev-acceptance validate` gives Kandev's verdict on every upstream case file
//! (`fixtures/templates/cases/`): JSON `valid` and the exit code (0 accepted, 2 rejected).

// A test file: failing loudly with unwrap/panic is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[test]
fn validate_command_follows_the_verdict_of_every_case_file() {
    let dir = kandev_harness::paths::fixtures().join("templates/cases");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let text = std::fs::read_to_string(entry.path()).unwrap();
        let accepted = text.lines().next() == Some("# expect: accepted");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kandev-acceptance"))
            .args([
                "validate",
                "--format",
                "json",
                "--workspace-claim",
                "kandev-0011223344556677-workspace",
                "--template",
            ])
            .arg(entry.path())
            .output()
            .unwrap();
        let verdict: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            verdict["valid"],
            accepted,
            "{}: {verdict}",
            entry.path().display()
        );
        assert_eq!(
            out.status.code(),
            Some(if accepted { 0 } else { 2 }),
            "{}",
            entry.path().display()
        );
        checked += 1;
    }
    assert!(checked >= 20, "{checked} case files");
}

#[test]
fn bad_command_lines_and_inputs_name_the_cause_and_the_fix() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kandev-acceptance"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["run", "--no-such-flag"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--no-such-flag"), "{err}");
    let (code, err) = run(&["run", "--template", "/nonexistent/template.yaml"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("/nonexistent/template.yaml")
            && err.contains("fix: pass the path of an existing file"),
        "{err}"
    );
    let (code, err) = run(&["run", "--worker-image", "Not A Reference"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("not a valid image reference") && err.contains("fix:"),
        "{err}"
    );
    let (code, err) = run(&[
        "run",
        "--report",
        "/proc/kandev-acceptance-cannot-write-here",
    ]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("report folder") && err.contains("fix: pass a writable --report DIR"),
        "{err}"
    );
    let (code, err) = run(&["report", "show", "/nonexistent/report.json"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("fix:"), "{err}");
}
