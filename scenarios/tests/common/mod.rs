//! What the end-to-end test files share: running the harness binary into a fresh report
//! folder, the fixtures' paths, and the checks and clean-ups every engine test needs.

// Each test file uses a part of this module.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod kube;
pub mod real_kind;

use kandev_harness::runner::{Check, Scenario};
use kandev_report::{CheckOutcome, Outcome, Report};
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

pub struct Run {
    pub code: i32,
    pub report: Report,
    pub report_path: PathBuf,
    pub output: String,
    pub _dir: tempfile::TempDir,
}

/// Runs `kandev-acceptance run` with `args` into a fresh report folder.
pub fn run(args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let output = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .arg("run")
        .arg("--report")
        .arg(dir.path())
        .args(args)
        .env("KANDEV_ACCEPTANCE_ROOT", root())
        // The harness's own test runs are not the CI job's results: no job summary, no
        // annotations (report_html.rs sets these on purpose where it tests them).
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("GITHUB_ACTIONS")
        .output()
        .unwrap();
    let text = output_text(&output);
    let (run_dir, report) = written_report(dir.path(), &text);
    let report_path = run_dir.join("report.json");
    Run {
        code: output.status.code().unwrap_or(-1),
        report,
        report_path,
        output: text,
        _dir: dir,
    }
}

/// A finished command's stdout and stderr, as one text.
pub fn output_text(output: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The run folder a `run --report dir` wrote and its report (`output`: what the run printed,
/// shown when no report was written). `Report` denies unknown fields: this also checks that
/// the writer and the types agree.
pub fn written_report(dir: &Path, output: &str) -> (PathBuf, Report) {
    // Exactly one: two runs writing to one folder would leave which is read to chance.
    let mut written: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("report.json").is_file())
        .collect();
    assert!(
        written.len() <= 1,
        "{} reports in {}: give each run its own folder; output:\n{output}",
        written.len(),
        dir.display()
    );
    let run_dir = written
        .pop()
        .unwrap_or_else(|| panic!("no report was written; output:\n{output}"));
    let report =
        serde_json::from_slice(&std::fs::read(run_dir.join("report.json")).unwrap()).unwrap();
    (run_dir, report)
}

pub fn fixture(path: &str) -> String {
    root().join("fixtures").join(path).display().to_string()
}

pub fn docker_lines(args: &[&str]) -> Vec<String> {
    let out = Command::new("docker").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .filter(|l| !l.is_empty())
        .collect()
}

/// Asserts `scenario` failed (exit 1) with a diagnosis containing `promise`.
pub fn assert_fails(run: &Run, scenario: &str, promise: &str) {
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

pub fn assert_nothing_left(report: &Report) {
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

/// Removes what the escape fixtures leave on the node by design: processes that outlived
/// their Pod and the cgroups they were moved into, then the orphaned Pod cgroups (`gc`).
/// Only this run's processes are killed: their exact marker is in the report's evidence.
pub fn clean_escaped(run: &Run, prefix: &str) {
    clean_run_escaped(run, prefix);
    remove_escaped_folders();
}

/// [`clean_escaped`] but for the folder escape fixtures share outside every Pod.
pub fn clean_run_escaped(run: &Run, prefix: &str) {
    let text = std::fs::read_to_string(&run.report_path).unwrap();
    let mut markers: Vec<String> = text
        .match_indices(prefix)
        .map(|(i, _)| {
            text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect()
        })
        .collect();
    markers.sort();
    markers.dedup();
    for marker in markers.iter().filter(|m| m.len() > prefix.len()) {
        let _ = Command::new("pkill").args(["-9", "-f", marker]).status();
    }
    // This run's Pod cgroups only (never another test's): the fixtures move processes out of
    // some hierarchies and not others, so kill whatever is still inside, then remove them.
    let uids: Vec<String> = run
        .report
        .scenarios
        .iter()
        .flat_map(|s| &s.sessions)
        .map(|s| s.pod_uid.clone())
        .collect();
    let mut left = Vec::new();
    for _ in 0..40 {
        left.clear();
        for hierarchy in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
            for uid in &uids {
                let pod = hierarchy.path().join(format!("kandev-acceptance/pod{uid}"));
                if !pod.is_dir() {
                    continue;
                }
                let mut dirs = Vec::new();
                let mut stack = vec![pod.clone()];
                while let Some(dir) = stack.pop() {
                    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                        if entry.file_type().is_ok_and(|t| t.is_dir()) {
                            stack.push(entry.path());
                        }
                    }
                    dirs.push(dir);
                }
                for dir in &dirs {
                    let procs =
                        std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                    for pid in procs.split_whitespace() {
                        let _ = Command::new("kill").args(["-9", pid]).status();
                    }
                }
                dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
                for dir in &dirs {
                    let _ = std::fs::remove_dir(dir);
                }
                if pod.exists() {
                    left.push(pod.display().to_string());
                }
            }
        }
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    assert!(
        left.is_empty(),
        "Pod cgroups of this run could not be removed: {left:?}"
    );
}

/// Removes the cgroup folder the escape fixtures move processes into, outside every Pod
/// (`kandev-acceptance-escaped` in each hierarchy), when it is empty: a folder still holding a
/// process (another escape twin's, still running) stays, and is named. (The fixtures make it
/// again right before each move.)
pub fn remove_escaped_folders() -> Vec<String> {
    let mut left = Vec::new();
    for hierarchy in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        let folder = hierarchy.path().join("kandev-acceptance-escaped");
        if folder.is_dir() && std::fs::remove_dir(&folder).is_err() {
            left.push(folder.display().to_string());
        }
    }
    left
}

/// The fixture worker image this machine has built (a run that builds it, once per test
/// process).
fn fixture_worker() -> String {
    static WORKER: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    WORKER
        .get_or_init(|| {
            let base = run(&["--exact", "template::grant_rules"]);
            base.report
                .environment
                .images
                .iter()
                .find(|i| i.role == "worker")
                .map(|i| i.reference.clone())
                .unwrap()
        })
        .clone()
}

/// Builds `fixtures/images/broken/<name>` FROM the fixture worker this machine has built.
pub fn broken_worker(name: &str) -> String {
    let worker = fixture_worker();
    let tag = format!("kandev-acceptance/broken-{name}:test");
    let build = || {
        Command::new("docker")
            .args([
                "build",
                "-q",
                "--build-arg",
                &format!("WORKER_IMAGE={worker}"),
                "-t",
                &tag,
            ])
            .arg(root().join("fixtures/images/broken").join(name))
            .output()
            .unwrap()
    };
    // Twins build side by side FROM the same worker: the legacy builder shares their cached
    // first layer, and a concurrent removal of another twin's image can take that layer
    // away mid-build ("failed to get digest ...: no such file or directory", or "unknown
    // parent image ID" at the next step, both seen in CI). Built again, it is made anew; any
    // other failure stands.
    let mut build_output = build();
    for _ in 0..2 {
        let stderr = String::from_utf8_lossy(&build_output.stderr);
        let layer_taken =
            stderr.contains("failed to get digest") || stderr.contains("unknown parent image ID");
        if build_output.status.success() || !layer_taken {
            break;
        }
        build_output = build();
    }
    let build = build_output;
    assert!(
        build.status.success(),
        "{}",
        String::from_utf8_lossy(&build.stderr)
    );
    tag
}

/// Arguments that select exactly `names` (libtest takes one filter: skip every other
/// scenario by its exact name).
pub fn only(names: &[&str]) -> Vec<String> {
    let mut args = vec!["--exact".to_owned()];
    for scenario in kandev_scenarios::registry() {
        if !names.contains(&scenario.name) {
            args.extend(["--skip".to_owned(), scenario.name.to_owned()]);
        }
    }
    args
}

/// Runs `kandev-acceptance gate --report REPORT ARGS...`: exit code and output. Without
/// `--template` in `args`, `--no-template` (the gate requires one of them).
pub fn gate(report: &Path, args: &[&str]) -> (i32, String) {
    let unbound = (!args.contains(&"--template")).then_some("--no-template");
    let output = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .arg("gate")
        .arg("--report")
        .arg(report)
        .args(args)
        .args(unbound)
        .env("KANDEV_ACCEPTANCE_ROOT", root())
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// `name@<engine image id>` of the image the run used as `role`: how a release names a
/// locally built image (it has no registry digest).
pub fn image_as_run(report: &Report, role: &str) -> String {
    let image = report
        .environment
        .images
        .iter()
        .find(|i| i.role == role)
        .unwrap();
    let name = image.reference.split(':').next().unwrap();
    format!("{name}@{}", image.id.clone().unwrap())
}

/// The check judged before a run starts by Kandev's rules (a mirror check: only the rules
/// decide it): a template that breaks them is refused by `run` (exit 2, nothing created).
pub const REFUSED_BY_RULES: &str = "template::grant_rules/passes";
/// The template `run` must refuse by Kandev's rules, naming the main container's command.
pub const REFUSED_BY_RULES_FIXTURE: &str = "templates/broken/main-command-overridden.yaml";
/// The check judged before any scenario by the cluster's preflight: its twin, a Role without
/// a permission Kandev needs, is refused naming the check (exit 3, what the run set up
/// removed).
pub const REFUSED_BY_PREFLIGHT: &str = "launch::connection/granted";
/// The checks whose twins `run` refuses before any scenario: that refusal is the check
/// failing.
pub const REFUSED_BEFORE_THE_RUN: [&str; 2] = [REFUSED_BY_RULES, REFUSED_BY_PREFLIGHT];

/// What is wrong with `scenario`'s result in `report` for a twin of its check `check`, if
/// anything: the scenario failed, its diagnosis names the check, the checks before it passed
/// and the later ones were not reached, and a failed scenario with sessions kept their
/// evidence (one without, its steps' evidence, in the report).
pub fn twin_failures(report: &Report, scenario: &Scenario, check: &Check) -> Vec<String> {
    let id = scenario.check_id(check);
    let Some(report) = report.scenarios.iter().find(|s| s.name == scenario.name) else {
        return vec![format!("{id}: {} did not run", scenario.name)];
    };
    let mut wrong = Vec::new();
    if report.outcome != Outcome::Failed {
        wrong.push(format!(
            "{id}: {} ended {} (expected failed): {:?}",
            scenario.name,
            report.outcome.as_str(),
            report.diagnosis
        ));
    }
    let diagnosis = report.diagnosis.clone().unwrap_or_default();
    if !diagnosis.starts_with(&id) {
        wrong.push(format!(
            "{id}: the diagnosis does not name the check: {diagnosis}"
        ));
    }
    let position = scenario.checks.iter().position(|c| c.id == check.id);
    for (i, c) in report.checks.iter().enumerate() {
        let expected = match position {
            Some(p) if i < p => CheckOutcome::Passed,
            Some(p) if i == p => CheckOutcome::Failed,
            _ => CheckOutcome::NotReached,
        };
        // Later checks are not reached; earlier ones must have been judged and held, or left
        // not judged for a capability this backend lacks (launch::contract's two on local).
        let lacked = c.outcome == CheckOutcome::NotJudged && c.lacking.is_some();
        if (i as isize) <= position.map_or(-1, |p| p as isize)
            && c.outcome != expected
            && !(expected == CheckOutcome::Passed && lacked)
        {
            wrong.push(format!(
                "{id}: {} is {} (expected {})",
                c.id,
                c.outcome.as_str(),
                expected.as_str()
            ));
        }
    }
    let step_evidence = report
        .steps
        .iter()
        .any(|s| s.evidence.as_object().is_some_and(|e| !e.is_empty()));
    // A failed scenario keeps evidence: its Pods' artifacts, or (one without a session, such
    // as launch::connection) what its steps observed.
    if report.artifacts.is_empty() && !step_evidence {
        wrong.push(format!("{id}: a failed scenario keeps evidence"));
    }
    wrong
}
