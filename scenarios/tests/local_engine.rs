//! End-to-end tests of the harness on the local engine: the good fixture passes every
//! scenario and leaves nothing behind; every broken fixture makes its scenario fail with a
//! diagnosis that names the broken promise. Needs a reachable engine
//! (`bash harness/scripts/ensure-engine.sh`).

// A test file: failing loudly with unwrap/panic is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kandev_harness::report::{Outcome, Report};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

struct Run {
    code: i32,
    report: Report,
    report_path: PathBuf,
    output: String,
    _dir: tempfile::TempDir,
}

/// Runs `kandev-acceptance run` with `args` into a fresh report folder.
fn run(args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .arg("run")
        .arg("--report")
        .arg(dir.path())
        .args(args)
        .env("KANDEV_ACCEPTANCE_ROOT", root())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let run_dir = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .find(|e| e.path().join("report.json").is_file())
        .unwrap_or_else(|| panic!("no report was written; output:\n{text}"));
    let report_path = run_dir.path().join("report.json");
    // `Report` denies unknown fields: this also checks the writer and the types agree.
    let report: Report = serde_json::from_slice(&std::fs::read(&report_path).unwrap()).unwrap();
    Run {
        code: output.status.code().unwrap_or(-1),
        report,
        report_path,
        output: text,
        _dir: dir,
    }
}

fn fixture(path: &str) -> String {
    root().join("fixtures").join(path).display().to_string()
}

fn docker_lines(args: &[&str]) -> Vec<String> {
    let out = Command::new("docker").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .filter(|l| !l.is_empty())
        .collect()
}

/// Asserts `scenario` failed (exit 1) with a diagnosis containing `promise`.
fn assert_fails(run: &Run, scenario: &str, promise: &str) {
    let report = run
        .report
        .scenarios
        .iter()
        .find(|s| s.name == scenario)
        .unwrap_or_else(|| panic!("{scenario} did not run:\n{}", run.output));
    assert_eq!(
        report.outcome,
        Outcome::Failed,
        "{scenario}: {:?}\n{}",
        report.diagnosis,
        run.output
    );
    let diagnosis = report.diagnosis.clone().unwrap_or_default();
    assert!(
        diagnosis.contains(promise),
        "{scenario} failed, but the diagnosis does not name the promise {promise:?}: {diagnosis}"
    );
    assert_eq!(
        run.code, 1,
        "exit code of a failed scenario\n{}",
        run.output
    );
    assert!(
        !report.artifacts.is_empty(),
        "a failed scenario keeps evidence"
    );
    for artifact in &report.artifacts {
        assert!(
            run.report_path.parent().unwrap().join(artifact).is_file(),
            "artifact {artifact} is missing"
        );
    }
    assert_nothing_left(&run.report);
}

fn assert_nothing_left(report: &Report) {
    let label = format!("label=acceptance.kandev.ai/run={}", report.run_id);
    assert_eq!(
        docker_lines(&["ps", "-aq", "--filter", &label]),
        Vec::<String>::new(),
        "containers left behind"
    );
    assert_eq!(
        docker_lines(&["volume", "ls", "-q", "--filter", &label]),
        Vec::<String>::new(),
        "volumes left behind"
    );
    assert!(report.leftovers.is_empty(), "{:?}", report.leftovers);
    for session in report.scenarios.iter().flat_map(|s| &s.sessions) {
        for hierarchy in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
            let pod = hierarchy
                .path()
                .join(format!("kandev-acceptance/pod{}", session.pod_uid));
            assert!(!pod.exists(), "cgroup {} left behind", pod.display());
            let unified = Path::new("/sys/fs/cgroup")
                .join(format!("kandev-acceptance/pod{}", session.pod_uid));
            assert!(
                !unified.exists(),
                "cgroup {} left behind",
                unified.display()
            );
        }
    }
}

#[test]
fn the_full_worker_fixture_passes_every_scenario_and_leaves_nothing() {
    let run = run(&[]);
    for scenario in &run.report.scenarios {
        assert_eq!(
            scenario.outcome,
            Outcome::Passed,
            "{}: {:?}\n{}",
            scenario.name,
            scenario.diagnosis,
            run.output
        );
        assert!(!scenario.steps.is_empty());
        assert!(
            scenario.cleanup.iter().all(|c| c.error.is_none()),
            "{:?}",
            scenario.cleanup
        );
    }
    assert_eq!(
        run.report.summary.passed,
        kandev_scenarios::registry().len()
    );
    assert_eq!(run.code, 0, "{}", run.output);
    assert_nothing_left(&run.report);

    // The report validates against the checked-in schema.
    let schema: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root().join("reports/report.schema.json")).unwrap())
            .unwrap();
    let instance: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&run.report_path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&instance)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{errors:?}");

    // Findings the design asks to be reported are there, with evidence.
    let bind = run
        .report
        .scenarios
        .iter()
        .find(|s| s.name == "bind::workspace")
        .unwrap();
    assert!(
        bind.findings
            .iter()
            .any(|f| f.code == "bind.source_outside_workspace"),
        "{:?}",
        bind.findings
    );
    assert!(
        run.report
            .environment
            .images
            .iter()
            .any(|i| i.role == "worker" && i.id.is_some())
    );
    assert!(
        run.report
            .environment
            .template
            .as_ref()
            .is_some_and(|t| t.sha256.starts_with("sha256:"))
    );
}

#[test]
fn a_daemon_that_never_starts_fails_the_docker_gate() {
    let run = run(&[
        "--template",
        &fixture("templates/broken/daemon-unprivileged.yaml"),
        "--docker-ready-timeout",
        "5",
        "--exact",
        "prepare::docker_gate",
    ]);
    assert_fails(
        &run,
        "prepare::docker_gate",
        "the Pod's Docker daemon becomes ready within the preparation bound",
    );
    let diagnosis = run.report.scenarios[0]
        .diagnosis
        .clone()
        .unwrap_or_default();
    assert!(
        diagnosis.contains("Docker daemon did not become ready"),
        "{diagnosis}"
    );
}

#[test]
fn a_prepare_script_without_the_gate_fails_the_docker_gate() {
    let run = run(&[
        "--prepare-script",
        &fixture("prepare/broken/no-docker-gate.sh"),
        "--exact",
        "prepare::docker_gate",
    ]);
    assert_fails(
        &run,
        "prepare::docker_gate",
        "with no daemon, preparation fails instead of starting the agent",
    );
}

#[test]
fn a_companion_without_the_grant_fails_workspace_shared() {
    let run = run(&[
        "--template",
        &fixture("templates/broken/no-workspace-grant.yaml"),
        "--exact",
        "workspace::shared",
    ]);
    assert_fails(
        &run,
        "workspace::shared",
        "both containers see one /workspace",
    );
}

#[test]
fn a_daemon_that_cannot_run_containers_fails_image_build_run() {
    let run = run(&[
        "--template",
        &fixture("templates/broken/daemon-runtime-broken.yaml"),
        "--exact",
        "image::build_run",
    ]);
    assert_fails(
        &run,
        "image::build_run",
        "the agent runs the built image and its output matches",
    );
}

#[test]
fn a_daemon_with_a_private_workspace_fails_bind_workspace() {
    let run = run(&[
        "--template",
        &fixture("templates/broken/daemon-private-workspace.yaml"),
        "--exact",
        "bind::workspace",
    ]);
    assert_fails(
        &run,
        "bind::workspace",
        "a nested bind of /workspace reads the bytes the agent wrote",
    );
}

#[test]
fn an_invalid_template_is_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("bad.yaml");
    let text = std::fs::read_to_string(root().join("fixtures/templates/full-worker.yaml"))
        .unwrap()
        .replace("    containers:", "    restartPolicy: Never\n    containers:")
        .replace("        imagePullPolicy: IfNotPresent\n        securityContext:\n          runAsUser: 1000", "        imagePullPolicy: IfNotPresent\n        command: [sh]\n        securityContext:\n          runAsUser: 1000");
    std::fs::write(&template, text).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["run", "--report"])
        .arg(dir.path())
        .arg("--template")
        .arg(&template)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    // Every problem at once, each with its field path.
    assert!(
        stderr.contains("config.pod_template_yaml.template.spec.restartPolicy"),
        "{stderr}"
    );
    assert!(
        stderr.contains("config.pod_template_yaml.template.spec.containers[0].command"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was created"), "{stderr}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "only the template is in the folder: no run started"
    );
}

#[test]
fn list_touches_nothing() {
    let output = Command::new(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["run", "--list"])
        .env("DOCKER_HOST", "unix:///nonexistent.sock")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success());
    for scenario in kandev_scenarios::registry() {
        assert!(
            stdout.contains(&format!("{}: test", scenario.name)),
            "{stdout}"
        );
    }
}

#[test]
fn an_unreachable_engine_is_a_clear_environment_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["run", "--exact", "image::build_run", "--report"])
        .arg(dir.path())
        .env("DOCKER_HOST", "unix:///nonexistent.sock")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(3), "{text}");
    assert!(
        text.contains("no container engine answers at unix:///nonexistent.sock"),
        "{text}"
    );
    assert!(text.contains("fix: start one"), "{text}");
}
