//! End-to-end tests of the harness on the local engine: the good fixture passes every
//! scenario and leaves nothing behind; every broken fixture makes its scenario fail with a
//! diagnosis that names the broken promise. The tests that need a reachable engine are
//! `#[ignore]`d with the way to run them (`bash harness/scripts/ensure-engine.sh`, then
//! `cargo test --workspace -- --include-ignored`); the ones that never reach an engine (a
//! refused template, an empty filter, `--list`, an unreachable engine) always run.

// A test file: failing loudly with unwrap/panic is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use kandev_report::Capability;
use kandev_report::{CheckOutcome, Outcome, Report};
use kandev_test_support::schemas;
use std::path::Path;
use std::process::Command;

#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn the_full_worker_fixture_passes_every_scenario_and_leaves_nothing() {
    // Under the release gate: what `gate` then accepts.
    let run = run(&["--gate", "release"]);
    for scenario in &run.report.scenarios {
        // No API server here: the scenarios that need one are skipped, which the release gate
        // of a local run accepts (it requires what the backend can offer).
        if scenario.name == "launch::causal_failures" {
            assert!(
                scenario.outcome == Outcome::Skipped
                    && scenario.lacking == Some(Capability::Cluster),
                "{scenario:?}"
            );
            continue;
        }
        if scenario.name == "launch::connection" {
            assert!(
                scenario.outcome == Outcome::Skipped
                    && scenario.lacking == Some(Capability::Cluster),
                "{scenario:?}"
            );
            // And libtest's own line does not call it ok.
            assert!(
                // libtest pads names to one column.
                run.output
                    .lines()
                    .any(|line| line.starts_with("test launch::connection ")
                        && line.contains(" ... ignored (skipped: ")),
                "{}",
                run.output
            );
            continue;
        }
        assert_eq!(
            scenario.outcome,
            Outcome::Passed,
            "{}: {:?}\n{}",
            scenario.name,
            scenario.diagnosis,
            run.output
        );
        assert!(!scenario.steps.is_empty());
        // No vacuous pass: a passed scenario judged every one of its checks, but the two that
        // only a cluster can judge (locally only the harness writes what they read), not
        // judged for want of one, which the release gate of a local run accepts.
        let unjudged: Vec<&str> = scenario
            .checks
            .iter()
            .filter(|c| c.outcome != CheckOutcome::Passed)
            .filter(|c| {
                !(c.outcome == CheckOutcome::NotJudged
                    && c.lacking == Some(Capability::Cluster)
                    && [
                        "launch::contract/labels_as_composed",
                        "launch::contract/no_service",
                    ]
                    .contains(&c.id.as_str()))
            })
            .map(|c| c.id.as_str())
            .collect();
        assert!(
            unjudged.is_empty() && !scenario.checks.is_empty(),
            "{} passed without judging {unjudged:?}",
            scenario.name
        );
        assert!(
            scenario.cleanup.iter().all(|c| c.error.is_none()),
            "{:?}",
            scenario.cleanup
        );
    }
    // launch::connection and launch::causal_failures need a cluster.
    assert_eq!(
        run.report.summary.passed,
        kandev_scenarios::registry().len() - 2
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

    // The release gate passes this report for exactly its images and template, and names
    // every reason it refuses other images, an interrupted copy and an old one.
    let worker = image_as_run(&run.report, "worker");
    let daemon = image_as_run(&run.report, "daemon");
    let template = root().join("fixtures/templates/full-worker.yaml");
    let (code, out) = gate(
        &run.report_path,
        &[
            "--worker-image",
            &worker,
            "--daemon-image",
            &daemon,
            "--template",
            template.to_str().unwrap(),
            "--max-age",
            "1h",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("PASS"), "{out}");
    // The PASS line counts what this run did, and says what its verdict does not cover.
    assert!(
        out.contains("22 scenarios run: 20 passed, 2 skipped"),
        "{out}"
    );
    assert!(
        out.contains("but 2 system checks of launch::connection not judged (local lacks cluster): a release verdict on them needs a cluster")
            && out.contains("but 3 system checks of launch::causal_failures not judged (local lacks cluster)")
            && out.contains("but 2 system checks of launch::contract not judged (local lacks cluster)"),
        "{out}"
    );
    let other = format!("r.example/worker@sha256:{}", "0".repeat(64));
    let (code, out) = gate(
        &run.report_path,
        &["--worker-image", &other, "--daemon-image", &daemon],
    );
    assert!(
        code == 1 && out.contains("the run used worker image") && out.contains(&other),
        "{out}"
    );
    let (code, out) = gate(
        &run.report_path,
        &[
            "--worker-image",
            "r.example/worker:latest",
            "--daemon-image",
            &daemon,
        ],
    );
    assert!(
        code == 2 && out.contains("not name@sha256:<digest>"),
        "{out}"
    );
    // The template the release ships is bound, or said not to be.
    let unbound =
        kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
            .args(["gate", "--report"])
            .arg(&run.report_path)
            .args(["--worker-image", &worker, "--daemon-image", &daemon])
            .output()
            .unwrap();
    let text = output_text(&unbound);
    assert!(
        unbound.status.code() == Some(2) && text.contains("fix: pass --template FILE"),
        "{text}"
    );
    let (code, out) = gate(
        &run.report_path,
        &["--worker-image", &worker, "--daemon-image", &daemon],
    );
    assert!(
        code == 0 && out.contains("the template is not bound (--no-template)"),
        "{out}"
    );
    // The prepare script the sessions ran is bound too.
    let prepare = root().join("fixtures/prepare/full-worker-prepare.sh");
    let other_prepare = root().join("fixtures/templates/full-worker.yaml");
    for (script, passes) in [(&prepare, true), (&other_prepare, false)] {
        let (code, out) = gate(
            &run.report_path,
            &[
                "--worker-image",
                &worker,
                "--daemon-image",
                &daemon,
                "--prepare-script",
                script.to_str().unwrap(),
            ],
        );
        assert!(
            (code == 0) == passes && (passes || out.contains("not the gated one")),
            "{out}"
        );
    }
    let mut edited: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&run.report_path).unwrap()).unwrap();
    edited["interrupted"] = serde_json::json!(true);
    edited["finished_at"] = serde_json::json!("2026-01-01T00:00:00.000Z");
    let copy = run.report_path.with_file_name("edited.json");
    std::fs::write(&copy, serde_json::to_vec(&edited).unwrap()).unwrap();
    let (code, out) = gate(
        &copy,
        &[
            "--worker-image",
            &worker,
            "--daemon-image",
            &daemon,
            "--template",
            root()
                .join("fixtures/templates/broken/daemon-tcp-listener.yaml")
                .to_str()
                .unwrap(),
            "--max-age",
            "7d",
        ],
    );
    assert!(
        code == 1
            && out.contains("(3 reasons)")
            && out.contains("interrupted")
            && out.contains("h old")
            && out.contains("not the gated one"),
        "{out}"
    );

    // JUnit and CTRF beside it, from the same results.
    let folder = run.report_path.parent().unwrap();
    // A test case per check, its scenario as the class (every scenario here has checks and
    // none failed outside one: no scenario needs a case of its own).
    let junit = std::fs::read_to_string(folder.join("junit.xml")).unwrap();
    let checks = &run.report.summary.checks;
    assert_eq!(junit.matches("<testcase ").count(), checks.total);
    for s in &run.report.scenarios {
        for c in &s.checks {
            let case = format!("<testcase classname=\"{}\" name=\"{}\"", s.name, c.id);
            assert!(junit.contains(&case), "{case}");
        }
    }
    let ctrf: serde_json::Value =
        serde_json::from_slice(&std::fs::read(folder.join("ctrf.json")).unwrap()).unwrap();
    assert_eq!(
        ctrf["results"]["summary"]["passed"].as_u64(),
        Some(checks.passed as u64)
    );
    // launch::connection's checks, never reached (no API server here).
    assert_eq!(
        ctrf["results"]["summary"]["skipped"].as_u64(),
        Some((checks.not_reached + checks.not_judged) as u64)
    );
    // The report's own verdict: the release gate's, passed; the whole catalogue selected;
    // the build named; what the Pods ran recorded and agreeing.
    let verdict = run.report.verdict.clone().unwrap();
    assert!(
        verdict.passed && verdict.profile == kandev_report::GateProfile::Release,
        "{verdict:?}"
    );
    let selection = run.report.selection.clone().unwrap();
    assert!(!selection.filtered && selection.left_out.is_empty());
    assert_eq!(run.report.harness_version, kandev_harness::BUILD);
    for role in ["worker", "daemon"] {
        let image = run
            .report
            .environment
            .images
            .iter()
            .find(|i| i.role == role)
            .unwrap();
        assert!(
            !image.ran.is_empty() && image.disagreements().is_empty(),
            "{image:?}"
        );
    }
    let errors = schemas::junit_errors(&junit);
    assert!(
        errors.is_empty(),
        "junit.xml against the JUnit XSD: {errors:#?}"
    );
    let errors = schemas::ctrf_errors(&ctrf);
    assert!(
        errors.is_empty(),
        "ctrf.json against the CTRF schema: {errors:#?}"
    );
    // The leak ledger ran for every scenario: nested daemons were inventoried, nothing left.
    assert!(
        run.report
            .scenarios
            .iter()
            .all(|s| s.leaks.is_empty() && s.nested_inventory.iter().all(|n| n.error.is_none())),
        "{:#?}",
        run.report
            .scenarios
            .iter()
            .map(|s| (&s.name, &s.leaks, &s.nested_inventory))
            .collect::<Vec<_>>()
    );

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
fn an_invalid_template_is_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("bad.yaml");
    let text = std::fs::read_to_string(root().join("fixtures/templates/full-worker.yaml"))
        .unwrap()
        .replace("    containers:", "    restartPolicy: Never\n    containers:")
        .replace("        imagePullPolicy: IfNotPresent\n        securityContext:\n          runAsUser: 1000", "        imagePullPolicy: IfNotPresent\n        command: [sh]\n        securityContext:\n          runAsUser: 1000");
    std::fs::write(&template, text).unwrap();
    let output = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
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

/// A template that names its own worker image would run it and ignore `--worker-image`,
/// while the report recorded the flag's: refused before anything is created, naming both
/// images, the field and the fix (the engine is never reached).
#[test]
fn an_image_flag_the_template_ignores_is_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("own-images.yaml");
    let text = std::fs::read_to_string(root().join("fixtures/templates/full-worker.yaml"))
        .unwrap()
        .replace(
            "FULL_WORKER_IMAGE_REQUIRED",
            "registry.example/own-worker:1",
        );
    std::fs::write(&template, text).unwrap();
    let output = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["run", "--report"])
        .arg(dir.path())
        .arg("--template")
        .arg(&template)
        .args([
            "--worker-image",
            "registry.example/flag-worker:1",
            "--daemon-image",
            "registry.example/flag-daemon:1",
        ])
        .env("DOCKER_HOST", "unix:///nonexistent.sock")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("would ignore an image flag; nothing was created")
            && stderr.contains("--worker-image \"registry.example/flag-worker:1\"")
            && stderr.contains("its own image \"registry.example/own-worker:1\"")
            && stderr.contains("config.pod_template_yaml.template.spec.containers[0].image")
            && stderr.contains("fix: drop --worker-image"),
        "{stderr}"
    );
    // The daemon's placeholder takes --daemon-image: no complaint about it.
    assert!(!stderr.contains("--daemon-image \""), "{stderr}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "only the template is in the folder: no run started"
    );
}

/// A release vouches for the whole catalogue: a filtered `--gate release` run is refused
/// before anything is created, naming what the filter leaves out.
#[test]
fn a_filtered_release_run_is_refused_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let output = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args([
            "run",
            "--gate",
            "release",
            "--skip",
            "browser::launch",
            "--report",
        ])
        .arg(dir.path())
        .env("DOCKER_HOST", "unix:///nonexistent.sock")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the release gate refuses this run; nothing was created")
            && stderr.contains("leaves out 1 of the catalogue's")
            && stderr.contains("(browser::launch)")
            && stderr.contains("fix: drop the filter"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    // `launch` refuses it too, before it reaches a cluster (the context here is dead).
    let digest = |name: &str| format!("r.example/{name}@sha256:{}", "1".repeat(64));
    let output = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["launch", "--backend", "kube", "--context", "dead"])
        .args(["--harness-image", &digest("harness")])
        .args([
            "--worker-image",
            &digest("worker"),
            "--daemon-image",
            &digest("dind"),
        ])
        .args(["--gate", "release", "--skip", "browser::launch", "--report"])
        .arg(dir.path())
        .env("KUBECONFIG", "/nonexistent/kubeconfig")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("leaves out 1 of the catalogue's") && stderr.contains("(browser::launch)"),
        "{stderr}"
    );
}

/// `gate` and `report show` name a report written in a newer schema as such: its version,
/// the highest this build reads, and the fix.
#[test]
fn a_report_of_a_newer_schema_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("report.json");
    let mut newer = serde_json::to_value(Report::default()).unwrap();
    let version = kandev_report::SCHEMA_VERSION + 1;
    newer["schema_version"] = version.into();
    newer["field_of_the_future"] = true.into();
    std::fs::write(&path, serde_json::to_vec(&newer).unwrap()).unwrap();
    let digest = format!("r.example/w@sha256:{}", "1".repeat(64));
    let (code, out) = gate(
        &path,
        &["--worker-image", &digest, "--daemon-image", &digest],
    );
    assert_eq!(code, 2, "{out}");
    let named = format!(
        "the report's schema version is {version}, newer than the highest this build reads ({}",
        kandev_report::SCHEMA_VERSION
    );
    assert!(
        out.contains(&named)
            && out
                .contains("fix: read it with the kandev-acceptance that wrote it, or a newer one"),
        "{out}"
    );
    let output = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["report", "show"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains(&named));
}

#[test]
fn a_filter_that_selects_nothing_exits_5_and_touches_no_engine() {
    let dir = tempfile::tempdir().unwrap();
    let output = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["run", "--exact", "no::such_scenario", "--report"])
        .arg(dir.path())
        .env("DOCKER_HOST", "unix:///nonexistent.sock")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(5), "{stderr}");
    assert!(
        stderr.contains("no scenario matched the filter"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "no run folder is left"
    );
}

#[test]
fn list_touches_nothing() {
    let output = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
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

/// `run --list | head -1`: a reader that stops after one line ends the listing quietly (exit
/// 0, nothing on stderr), as `ls | head -1` does; libtest-mimic's listing panicked, exit 101.
#[test]
fn a_listing_whose_reader_stops_early_exits_quietly() {
    // A pipe whose reader is gone before the listing starts: its first write fails (EPIPE),
    // as `| head -1`'s does once head has exited.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let child = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["run", "--list"])
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");

    // And the same listing, read whole, as JSON for tools.
    let json = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["run", "--list", "--format", "json", "daemon::"])
        .output()
        .unwrap();
    assert!(json.status.success(), "{}", output_text(&json));
    let listed: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    let expected: Vec<&str> = kandev_scenarios::registry()
        .iter()
        .map(|s| s.name)
        .filter(|name| name.contains("daemon::"))
        .collect();
    assert_eq!(names, expected);
    assert!(
        listed[0]["checks"]
            .as_array()
            .is_some_and(|c| !c.is_empty())
    );
}

/// `checks --format json` holds every check of the catalogue, in its order, with its kind
/// and what breaks it: the same facts as the Markdown table, for tools.
#[test]
fn checks_print_as_json_for_tools() {
    let output = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["checks", "--format", "json"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", output_text(&output));
    let checks: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    let expected: Vec<String> = kandev_scenarios::registry()
        .iter()
        .flat_map(|s| s.checks.iter().map(|c| s.check_id(c)))
        .collect();
    let ids: Vec<&str> = checks.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, expected);
    for check in &checks {
        let twin = check["twin"].as_object().unwrap();
        match check["kind"].as_str() {
            Some("mirror") => assert!(twin.contains_key("mirror"), "{check}"),
            Some("system") => assert!(
                twin.get("fixture").is_some_and(|f| f.is_string())
                    || twin.contains_key("cluster_double_test")
                    || twin.contains_key("exempt"),
                "{check}"
            ),
            other => panic!("kind {other:?}: {check}"),
        }
    }
}

/// The local and Kind backends need root on this host: anyone else is refused before
/// anything is built or created (exit 2, the fix named), not halfway through with EACCES.
#[test]
fn a_run_on_this_hosts_engine_by_anyone_but_root_is_refused_first() {
    for backend in ["local", "kind"] {
        let bin = env!("CARGO_BIN_EXE_kandev-acceptance");
        let args = ["run", "--backend", backend, "--exact", "image::build_run"];
        // As root (CI), the same command as nobody; otherwise as this very user.
        let root = std::fs::read_to_string("/proc/self/status")
            .unwrap_or_default()
            .lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
        let mut command = if root {
            let mut c = kandev_test_support::harness_env::harness("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", bin]);
            c
        } else {
            kandev_test_support::harness_env::harness(bin)
        };
        let output = command
            .args(args)
            .env("DOCKER_HOST", "unix:///nonexistent.sock")
            .output()
            .unwrap();
        let text = output_text(&output);
        assert_eq!(output.status.code(), Some(2), "{backend}: {text}");
        assert!(
            text.contains(&format!("--backend {backend} runs as root")) && text.contains("fix:"),
            "{text}"
        );
    }
}

#[test]
fn an_unreachable_engine_is_a_clear_environment_error() {
    let dir = tempfile::tempdir().unwrap();
    let output = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
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

#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn a_daemon_with_a_tcp_listener_fails_socket_only() {
    // With a retry: a broken promise stays broken, and both attempts are torn down and recorded.
    let run = run(&[
        "--template",
        &fixture("templates/broken/daemon-tcp-listener.yaml"),
        "--exact",
        "daemon::socket_only",
        "--retries",
        "1",
    ]);
    assert_fails(
        &run,
        "daemon::socket_only",
        "no TCP listener in the Pod besides the loopback control port",
    );
    let scenario = &run.report.scenarios[0];
    assert_eq!(
        (
            scenario.attempts,
            scenario.flaky,
            scenario.previous_attempts.len()
        ),
        (2, false, 1),
        "{scenario:?}"
    );
}

#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn a_daemon_escaping_the_pod_cgroup_fails_cgroup_accounting() {
    let run = run(&[
        "--template",
        &fixture("templates/broken/daemon-escapes-pod-pids.yaml"),
        "--exact",
        "cgroup::accounting",
    ]);
    clean_escaped(&run, "kandev-accounting-");
    assert_fails(
        &run,
        "cgroup::accounting",
        "every nested process's cgroup lies under the Pod's cgroup",
    );
    // The evidence holds the nested daemon's containers with their logs.
    let scenario = &run.report.scenarios[0];
    let state = scenario
        .artifacts
        .iter()
        .find(|a| a.ends_with(".daemon-state.txt"))
        .unwrap_or_else(|| panic!("no nested daemon state in {:?}", scenario.artifacts));
    let text = std::fs::read_to_string(run.report_path.parent().unwrap().join(state)).unwrap();
    assert!(text.contains("== logs of nested container"), "{text}");
}

#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn a_companion_leaving_a_process_on_the_node_is_reported_leaked() {
    let run = run(&[
        "--template",
        &fixture("templates/broken/daemon-leaves-process.yaml"),
        "--exact",
        "workspace::shared",
    ]);
    // Remove what the fixture leaves by design before asserting: the pids are in the ledger.
    let leaks = run
        .report
        .scenarios
        .first()
        .map(|s| s.leaks.clone())
        .unwrap_or_default();
    for pid in leaks.iter().filter_map(|l| {
        l.split("process/")
            .nth(1)?
            .split(' ')
            .next()?
            .parse::<u32>()
            .ok()
    }) {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    clean_escaped(&run, "no-marker-");
    let scenario = &run.report.scenarios[0];
    assert_eq!(
        scenario.outcome,
        Outcome::Leaked,
        "{:?}\n{}",
        scenario.diagnosis,
        run.output
    );
    assert!(
        leaks
            .iter()
            .any(|l| l.starts_with("node: process/") && l.contains("sleep 3600")),
        "{leaks:#?}"
    );
    assert!(
        scenario
            .diagnosis
            .as_deref()
            .unwrap_or_default()
            .starts_with("leaked:"),
        "{:?}",
        scenario.diagnosis
    );
    assert!(
        scenario.nested_inventory.len() == scenario.sessions.len()
            && scenario.nested_inventory.iter().all(|n| n.error.is_none()),
        "each session's nested daemon was inventoried before teardown: {:?}",
        scenario.nested_inventory
    );
    assert_eq!(run.report.summary.leaked, 1);
    assert_eq!(run.code, 4, "exit code of a leak\n{}", run.output);
    let junit = std::fs::read_to_string(run.report_path.with_file_name("junit.xml")).unwrap();
    assert!(junit.contains("<failure type=\"leaked\""), "{junit}");
}

#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn a_run_past_its_deadline_times_out_what_runs_and_starts_nothing_more() {
    let started = std::time::Instant::now();
    // 4 s: less than launching one task Pod takes anywhere (Pod, bootstrap, Docker gate).
    let run = run(&["--deadline", "4", "--test-threads", "1", "lifecycle::"]);
    let elapsed = started.elapsed();
    assert!(run.report.deadline_exceeded, "{}", run.output);
    assert!(!run.report.interrupted);
    let outcomes: Vec<_> = run.report.scenarios.iter().map(|s| s.outcome).collect();
    // The first lifecycle scenario times out; every later one is never started.
    let mut expected = vec![Outcome::Cancelled; outcomes.len().max(2)];
    expected[0] = Outcome::TimedOut;
    assert_eq!(
        outcomes,
        expected,
        "{:#?}",
        run.report
            .scenarios
            .iter()
            .map(|s| &s.diagnosis)
            .collect::<Vec<_>>()
    );
    let diagnoses: Vec<String> = run
        .report
        .scenarios
        .iter()
        .map(|s| s.diagnosis.clone().unwrap_or_default())
        .collect();
    assert!(
        diagnoses[0].contains("--deadline of 4s passed; teardown ran"),
        "{diagnoses:?}"
    );
    assert!(
        diagnoses[1..].iter().all(|d| d.contains("not started")),
        "{diagnoses:?}"
    );
    assert_eq!(run.code, 1, "a deadline is a gate failure\n{}", run.output);
    assert!(
        elapsed < std::time::Duration::from_secs(90),
        "the run stopped near its deadline, not after the scenarios: {elapsed:?}"
    );
    assert_nothing_left(&run.report);
}

#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn a_step_past_the_step_timeout_times_the_scenario_out_naming_the_step() {
    let run = run(&["--step-timeout", "1", "--exact", "image::build_run"]);
    let scenario = &run.report.scenarios[0];
    assert_eq!(scenario.outcome, Outcome::TimedOut, "{}", run.output);
    let diagnosis = scenario.diagnosis.clone().unwrap_or_default();
    assert!(
        diagnosis.starts_with("step ") && diagnosis.contains("per-step deadline of 1s"),
        "{diagnosis}"
    );
    assert_eq!(run.code, 1, "{}", run.output);
    assert_nothing_left(&run.report);
}

#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn repeat_runs_the_selection_n_times_and_writes_pass_rates() {
    let dir = tempfile::tempdir().unwrap();
    let output = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args([
            "run",
            "--repeat",
            "2",
            "--exact",
            "template::grant_rules",
            "--report",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let folders: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    let reports = folders
        .iter()
        .filter(|f| f.join("report.json").is_file())
        .count();
    assert_eq!(reports, 2, "one report per repetition: {folders:?}");
    let summary = folders
        .iter()
        .find(|f| {
            f.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("repeat-")
        })
        .map(|f| f.join("repeat.json"))
        .unwrap_or_else(|| panic!("no repeat summary in {folders:?}"));
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(summary).unwrap()).unwrap();
    assert_eq!(summary["runs"].as_array().unwrap().len(), 2);
    assert_eq!(summary["scenarios"][0]["name"], "template::grant_rules");
    assert_eq!(summary["scenarios"][0]["pass_rate"], 1.0);
    assert!(stderr.contains("100.0%  template::grant_rules"), "{stderr}");
    // Not a terminal: no live view, no control sequences in the log.
    assert!(!stderr.contains("\u{1b}["), "{stderr}");
}

/// `--run-id`: a CI job knows its report folder in advance (`<report dir>/<ID>/report.json`),
/// and the report carries the id.
#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn a_given_run_id_names_the_report_folder() {
    let dir = tempfile::tempdir().unwrap();
    let id = format!("ci-{}-1", std::process::id());
    let output = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args([
            "run",
            "--run-id",
            &id,
            "--exact",
            "template::grant_rules",
            "--report",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join(&id).join("report.json")).unwrap())
            .unwrap();
    assert_eq!(report["run_id"], id.as_str());
}

/// A run whose stdout reader is gone before its first line (`run | head -0`, a dead log
/// collector) still runs its Pods to their teardown, writes its report and exits with the
/// run's code; libtest-mimic's printer panicked on the closed pipe (exit 101).
#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn a_run_whose_stdout_closed_still_tears_down_and_reports() {
    let dir = tempfile::tempdir().unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["run", "--exact", "daemon::socket_only", "--report"])
        .arg(dir.path())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
        .wait_with_output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("note: stdout is closed"), "{stderr}");
    let (_, report) = common::written_report(dir.path(), &stderr);
    assert_eq!(report.scenarios.len(), 1);
    assert!(
        !report.scenarios[0].sessions.is_empty(),
        "the scenario ran no Pod"
    );
    common::assert_nothing_left(&report);

    // Its report, for tools: `report show` and `gate` as JSON say what their text says.
    let folder = dir.path().join(&report.run_id);
    let shown = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["report", "show", "--format", "json"])
        .arg(&folder)
        .output()
        .unwrap();
    assert!(shown.status.success(), "{}", output_text(&shown));
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["run_id"], report.run_id.as_str());
    assert_eq!(shown["scenarios"][0]["name"], "daemon::socket_only");
    assert_eq!(shown["scenarios"][0]["outcome"], "passed");
    let digest = |c: char| format!("fixture@sha256:{}", c.to_string().repeat(64));
    let gated = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["gate", "--format", "json", "--report"])
        .arg(&folder)
        .args([
            "--worker-image",
            &digest('a'),
            "--daemon-image",
            &digest('b'),
            "--no-template",
        ])
        .output()
        .unwrap();
    assert_eq!(gated.status.code(), Some(1), "{}", output_text(&gated));
    let gated: serde_json::Value = serde_json::from_slice(&gated.stdout).unwrap();
    assert_eq!(gated["passed"], false);
    let reasons = gated["reasons"].as_array().unwrap();
    assert!(
        reasons
            .iter()
            .any(|r| r.as_str().unwrap().contains("filtered")),
        "{reasons:?}"
    );
}

#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn a_terminal_gets_the_live_view_and_libtest_lines_go_to_a_log() {
    let dir = tempfile::tempdir().unwrap();
    let command = format!(
        "{} run --exact template::grant_rules --report {}",
        env!("CARGO_BIN_EXE_kandev-acceptance"),
        dir.path().display()
    );
    // `script` gives the run a pseudo-terminal, as an operator's shell would.
    let output = kandev_test_support::harness_env::harness("script")
        .args(["-qec", &command, "/dev/null"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(text.contains("running 1 · passed 0"), "{text}");
    assert!(text.contains("running 0 · passed 1"), "{text}");
    let run_dir = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let log = std::fs::read_to_string(run_dir.join("libtest.log")).unwrap();
    assert!(log.contains("test template::grant_rules ... ok"), "{log}");
}

/// The engine's id of an image (`docker image inspect`).
fn engine_image_id(reference: &str) -> String {
    let out = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", reference])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The report records, per image role, the image ids the Pods' containers ran, as the engine
/// gives them (each container's `Image`): the flag's image when the template renders it; the
/// template's own when the template names one, which a gate for the recorded image refuses
/// (a run on image A never passes a gate for image B).
#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn the_report_records_the_image_ids_the_pods_containers_ran() {
    let tag = broken_worker("worker-without-browser-and-compose");
    let tag_id = engine_image_id(&tag);
    // The flag fills the template's placeholder: the containers ran the flag's image.
    let flagged = run(&["--worker-image", &tag, "--exact", "workspace::shared"]);
    // A template naming that image itself, no flag: the run records the fixture worker it
    // built, while the Pods ran the template's image.
    let dir = tempfile::tempdir().unwrap();
    let template = dir.path().join("own-worker.yaml");
    let text = std::fs::read_to_string(root().join("fixtures/templates/full-worker.yaml"))
        .unwrap()
        .replace("FULL_WORKER_IMAGE_REQUIRED", &tag);
    std::fs::write(&template, text).unwrap();
    let own = run(&[
        "--template",
        template.to_str().unwrap(),
        "--exact",
        "workspace::shared",
    ]);
    let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();

    assert_eq!(flagged.code, 0, "{}", flagged.output);
    let image = |run: &common::Run, role: &str| {
        run.report
            .environment
            .images
            .iter()
            .find(|i| i.role == role)
            .cloned()
            .unwrap()
    };
    let worker = image(&flagged, "worker");
    assert_eq!(worker.reference, tag);
    assert!(!worker.ran.is_empty(), "{worker:?}");
    for ran in &worker.ran {
        assert_eq!(ran.image_id, tag_id, "{worker:?}");
        assert_eq!(ran.image, tag, "{worker:?}");
    }
    assert!(worker.disagreements().is_empty());
    let daemon = image(&flagged, "daemon");
    let daemon_id = engine_image_id(&daemon.reference);
    assert!(
        !daemon.ran.is_empty() && daemon.ran.iter().all(|r| r.image_id == daemon_id),
        "{daemon:?}"
    );

    assert_eq!(
        own.code, 0,
        "a default run reports, it does not judge: {}",
        own.output
    );
    let recorded = image(&own, "worker");
    assert_ne!(
        recorded.id.as_deref(),
        Some(tag_id.as_str()),
        "{recorded:?}"
    );
    let disagreements = recorded.disagreements();
    assert!(
        !disagreements.is_empty() && disagreements.iter().all(|r| r.image_id == tag_id),
        "{recorded:?}"
    );
    assert!(
        own.output.contains(&format!(
            "IMAGE: the worker containers ran {tag} (id {tag_id})"
        )),
        "{}",
        own.output
    );
    let (code, out) = gate(
        &own.report_path,
        &[
            "--worker-image",
            &image_as_run(&own.report, "worker"),
            "--daemon-image",
            &image_as_run(&own.report, "daemon"),
        ],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "the worker containers ran {tag} (id {tag_id}), not "
        )),
        "{out}"
    );
    assert_nothing_left(&flagged.report);
    assert_nothing_left(&own.report);
}

#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn a_worker_without_docker_fails_the_gate_or_is_incompatible_with_the_fix() {
    let tag = broken_worker("worker-without-docker");
    // The default template declares it serves docker: lacking it fails, naming the capability.
    let gated = run(&["--worker-image", &tag, "--exact", "image::build_run"]);
    // With nothing required, the same lack is reported incompatible, and the run passes.
    let ungated = run(&[
        "--worker-image",
        &tag,
        "--require",
        "none",
        "--exact",
        "image::build_run",
    ]);
    let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
    let scenario = &gated.report.scenarios[0];
    let diagnosis = scenario.diagnosis.clone().unwrap_or_default();
    assert!(
        scenario.outcome == Outcome::Failed
            && diagnosis.starts_with("required capability docker is missing")
            && diagnosis.contains("acceptance.kandev.ai/serves")
            && diagnosis.contains("has no `docker` on the agent's PATH")
            && diagnosis.contains("fix:"),
        "{:?}: {diagnosis}\n{}",
        scenario.outcome,
        gated.output
    );
    assert_eq!(scenario.lacking, Some(Capability::Docker));
    assert_eq!(
        gated.report.gate.requires.len(),
        3,
        "{:?}",
        gated.report.gate
    );
    assert_eq!(gated.code, 1, "{}", gated.output);
    let scenario = &ungated.report.scenarios[0];
    assert_eq!(
        scenario.outcome,
        Outcome::Incompatible,
        "{:?}\n{}",
        scenario.diagnosis,
        ungated.output
    );
    assert!(ungated.report.gate.requires.is_empty());
    assert_eq!(
        ungated.code, 0,
        "incompatible is reported, not a failure, when nothing requires it\n{}",
        ungated.output
    );
    assert_nothing_left(&gated.report);
    assert_nothing_left(&ungated.report);
}

/// Starts a run in the background and waits until it has containers; returns the child (the
/// caller reaps it) and the run id.
#[expect(
    clippy::zombie_processes,
    reason = "the child is returned to the caller, which waits for it"
)]
fn start_run_until_containers(dir: &Path) -> (std::process::Child, String) {
    let mut child =
        kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
            .args(["run", "--report"])
            .arg(dir)
            .args(["--skip", "template::grant_rules"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
    let started = std::time::Instant::now();
    loop {
        if started.elapsed() > std::time::Duration::from_secs(300) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the run never created a container");
        }
        let id = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .next()
            .map(|e| e.file_name().to_string_lossy().into_owned());
        if let Some(id) = id
            && !docker_lines(&[
                "ps",
                "-q",
                "--filter",
                &format!("label=acceptance.kandev.ai/run={id}"),
            ])
            .is_empty()
        {
            std::thread::sleep(std::time::Duration::from_secs(3));
            return (child, id);
        }
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}

#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn an_interrupted_run_tears_down_and_marks_its_report() {
    let dir = tempfile::tempdir().unwrap();
    let (child, id) = start_run_until_containers(dir.path());
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(130));
    let report: Report =
        serde_json::from_slice(&std::fs::read(dir.path().join(&id).join("report.json")).unwrap())
            .unwrap();
    assert!(report.interrupted);
    assert!(report.summary.cancelled > 0, "{:?}", report.summary);
    // A real interrupted run never gates a release.
    let (code, out) = gate(
        &dir.path().join(&id).join("report.json"),
        &[
            "--worker-image",
            &image_as_run(&report, "worker"),
            "--daemon-image",
            &image_as_run(&report, "daemon"),
        ],
    );
    assert!(
        code == 1 && out.contains("the run was interrupted") && out.contains("cancelled"),
        "{out}"
    );
    assert_nothing_left(&report);
}

/// While a run is going, `gc` spares it (its lease container runs); killed, its lease ends
/// with its process, and `gc --run` removes what it left and nothing of another run.
#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn gc_removes_what_a_killed_run_left_and_only_that() {
    let dir = tempfile::tempdir().unwrap();
    // A look-alike the harness manages but that belongs to no run of this test.
    let other = format!("kandev-acceptance-gc-lookalike-{}", std::process::id());
    let image = docker_lines(&[
        "images",
        "--format",
        "{{.Repository}}:{{.Tag}}",
        "kandev-acceptance/mock-agent",
    ])
    .into_iter()
    .next()
    .unwrap();
    let created = Command::new("docker")
        .args([
            "run",
            "-d",
            "--name",
            &other,
            "--label",
            "acceptance.kandev.ai/managed=true",
            "--label",
            "acceptance.kandev.ai/run=some-other-run",
            &image,
            "pause",
        ])
        .output()
        .unwrap();
    assert!(
        created.status.success(),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );

    let (mut child, id) = start_run_until_containers(dir.path());
    // Alive: its lease container runs; `gc --run` refuses and removes nothing, `gc` (every
    // run) spares it (a dry run: the look-alike stays for the end).
    let lease = format!("name=kandev-acceptance-lease-{id}");
    assert_eq!(
        docker_lines(&["ps", "-q", "--filter", &lease]).len(),
        1,
        "the live run's lease container"
    );
    let refused =
        kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
            .args(["gc", "--run", &id])
            .output()
            .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(refused.status.code(), Some(2), "{text}");
    assert!(
        text.contains("is still alive") && text.contains("lease container"),
        "{text}"
    );
    let all = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["gc", "--dry-run"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&all.stdout).into_owned();
    assert!(text.contains(&format!("spared run {id}: alive")), "{text}");
    assert!(!text.contains(&format!("kandev-acceptance-{id}")), "{text}");
    child.kill().unwrap();
    child.wait().unwrap();
    // Killed: the engine closes the lease's stdin and the container ends (and is removed).
    let started = std::time::Instant::now();
    while !docker_lines(&["ps", "-aq", "--filter", &lease]).is_empty() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the killed run's lease container lives on"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // The engine finishes requests the dead run had sent: wait until its objects stop changing.
    let label = format!("label=acceptance.kandev.ai/run={id}");
    settle(&label);
    assert!(
        !docker_lines(&["ps", "-aq", "--filter", &label]).is_empty(),
        "the killed run left nothing to collect"
    );
    assert_eq!(
        docker_lines(&["network", "ls", "-q", "--filter", &label]).len(),
        1,
        "the killed run's Pod network"
    );
    let dry = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["gc", "--run", &id, "--dry-run"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&dry.stdout).contains("would remove"),
        "{}",
        String::from_utf8_lossy(&dry.stdout)
    );
    assert!(
        !docker_lines(&["ps", "-aq", "--filter", &label]).is_empty(),
        "a dry run removed something"
    );
    let gc = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["gc", "--run", &id])
        .output()
        .unwrap();
    assert!(
        gc.status.success(),
        "{}",
        String::from_utf8_lossy(&gc.stderr)
    );
    assert_eq!(
        docker_lines(&["ps", "-aq", "--filter", &label]),
        Vec::<String>::new()
    );
    assert_eq!(
        docker_lines(&["volume", "ls", "-q", "--filter", &label]),
        Vec::<String>::new()
    );
    assert_eq!(
        docker_lines(&["network", "ls", "-q", "--filter", &label]),
        Vec::<String>::new(),
        "gc leaves the killed run's Pod network"
    );
    let survivor = docker_lines(&["ps", "-q", "--filter", &format!("name={other}")]);
    let _ = Command::new("docker").args(["rm", "-f", &other]).output();
    assert_eq!(
        survivor.len(),
        1,
        "gc --run removed an object of another run"
    );
}

/// Waits (up to 60 s) until the engine's containers, volumes and networks matching `filter`
/// read the same twice, a second apart.
fn settle(filter: &str) {
    let read = || {
        ["ps -aq", "volume ls -q", "network ls -q"].map(|list| {
            let mut args: Vec<&str> = list.split(' ').collect();
            args.extend(["--filter", filter]);
            docker_lines(&args)
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut last = read();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
        let now = read();
        if now == last || std::time::Instant::now() > deadline {
            return;
        }
        last = now;
    }
}

/// After an engine restart, a killed run's Pod can leave an emptyDir volume the engine
/// recreated by name without labels; `gc` (for all runs) finds it by its task-Pod name, and
/// leaves an unlabelled volume of any other name alone. A dry run: a real `gc` for all runs
/// would also remove the Pods of the tests running beside this one.
#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn gc_finds_an_unlabelled_emptydir_volume_of_a_task_pod() {
    let hex = format!("{:016x}", u64::from(std::process::id()) << 20 | 0xabcde);
    let leftover = format!("kandev-{hex}-docker-socket");
    let unrelated = format!("kandev-acceptance-unrelated-{}", std::process::id());
    for name in [&leftover, &unrelated] {
        let made = Command::new("docker")
            .args(["volume", "create", name.as_str()])
            .output()
            .unwrap();
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stderr)
        );
    }
    let dry = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["gc", "--dry-run"])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&dry.stdout).into_owned();
    for name in [&leftover, &unrelated] {
        let _ = Command::new("docker")
            .args(["volume", "rm", name.as_str()])
            .output();
    }
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    assert!(
        listed.contains(&format!("would remove volume/{leftover}")),
        "gc does not find the unlabelled task-Pod volume:\n{listed}"
    );
    assert!(
        !listed.contains(&unrelated),
        "gc would remove an unlabelled volume that is not a task Pod's:\n{listed}"
    );
}

#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn a_worker_without_browser_and_compose_fails_only_those_scenarios_on_the_gate() {
    let tag = broken_worker("worker-without-browser-and-compose");
    let mut args = vec!["--worker-image".to_owned(), tag.clone()];
    args.extend(only(&[
        "browser::launch",
        "compose::cleanup",
        "workspace::shared",
    ]));
    let run = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
    for scenario in &run.report.scenarios {
        let diagnosis = scenario.diagnosis.clone().unwrap_or_default();
        let lacking = match scenario.name.as_str() {
            "browser::launch" => Some((Capability::Browser, "no headless browser")),
            "compose::cleanup" => Some((Capability::Compose, "no Docker Compose")),
            _ => None,
        };
        match lacking {
            Some((capability, why)) => assert!(
                scenario.outcome == Outcome::Failed
                    && scenario.lacking == Some(capability)
                    && diagnosis.starts_with(&format!(
                        "required capability {} is missing",
                        capability.name()
                    ))
                    && diagnosis.contains(why),
                "{}: {:?} {diagnosis}",
                scenario.name,
                scenario.outcome
            ),
            None => assert_eq!(
                scenario.outcome,
                Outcome::Passed,
                "{}: {diagnosis}",
                scenario.name
            ),
        }
    }
    assert_eq!(run.report.scenarios.len(), 3, "{}", run.output);
    assert_eq!(run.code, 1, "{}", run.output);
    assert_nothing_left(&run.report);
}

#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn compose_cleanup_passes_on_the_compose_v1_worker() {
    // The default recipe has Compose v2; the previous bookworm worker
    // (fixtures/images/worker-compose-v1) keeps the v1 path (`docker-compose`) tested.
    let base_run = run(&["--exact", "template::grant_rules"]);
    let id = |role: &str| {
        base_run
            .report
            .environment
            .images
            .iter()
            .find(|i| i.role == role)
            .and_then(|i| i.id.clone())
            .unwrap_or_else(|| panic!("no {role} image in the report"))
    };
    let tag = "kandev-acceptance/worker-compose-v1:test";
    let build = Command::new("docker")
        .args(["build", "-q", "--network", "host"])
        .args(["--build-arg", &format!("BASE_IMAGE={}", id("base"))])
        .args(["--build-arg", &format!("DAEMON_IMAGE={}", id("daemon"))])
        .args(["-t", tag])
        .arg(root().join("fixtures/images/worker-compose-v1"))
        .output()
        .unwrap();
    assert!(
        build.status.success(),
        "{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let run = run(&["--worker-image", tag, "--exact", "compose::cleanup"]);
    let _ = Command::new("docker").args(["rmi", "-f", tag]).output();
    let scenario = &run.report.scenarios[0];
    assert_eq!(
        scenario.outcome,
        Outcome::Passed,
        "{:?}\n{}",
        scenario.diagnosis,
        run.output
    );
    let text = serde_json::to_string(&scenario.steps).unwrap();
    assert!(
        text.contains("\"command\":\"docker-compose\""),
        "compose::cleanup did not take the v1 path: {text}"
    );
    assert_nothing_left(&run.report);
}

/// `kandev-acceptance image harness` (with `args`): its exit status, stdout and stderr.
fn image_harness(args: &[&str]) -> std::process::Output {
    kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["image", "harness"])
        .args(args)
        .env("KANDEV_ACCEPTANCE_ROOT", root())
        .output()
        .unwrap()
}

/// `docker run --rm <options> <image> <command>`.
fn docker_run(options: &[&str], image: &str, command: &[&str]) -> std::process::Output {
    Command::new("docker")
        .args(["run", "--rm"])
        .args(options)
        .arg(image)
        .args(command)
        .output()
        .unwrap()
}

#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn the_harness_image_runs_this_binary_as_non_root_without_a_toolchain() {
    let output = image_harness(&[]);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "{}", output_text(&output));
    // One line, the reference alone: scripts take it as it is.
    let reference = stdout.trim_end_matches('\n');
    assert!(
        reference.starts_with("kandev-acceptance/harness:") && !reference.contains('\n'),
        "{stdout}"
    );
    let id = docker_lines(&["image", "inspect", "--format", "{{.Id}}", reference]);

    // The image holds this very binary, and it lists the whole catalogue as the host's does.
    let host_list =
        kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
            .args(["run", "--list"])
            .output()
            .unwrap();
    let list = docker_run(&[], reference, &["run", "--list"]);
    assert!(list.status.success(), "{}", output_text(&list));
    assert_eq!(
        String::from_utf8_lossy(&list.stdout),
        String::from_utf8_lossy(&host_list.stdout)
    );
    let sums = docker_run(
        &["--entrypoint", "sha256sum"],
        reference,
        &["/usr/local/bin/kandev-acceptance"],
    );
    let host_sum = Command::new("sha256sum")
        .arg(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .output()
        .unwrap();
    let digest = |o: &std::process::Output| {
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(digest(&sums), digest(&host_sum), "{}", output_text(&sums));

    // Non-root, no compiler or cargo.
    let probe = docker_run(
        &["--entrypoint", "sh"],
        reference,
        &[
            "-c",
            "id -u; for t in cc gcc clang rustc cargo; do command -v $t; done; true",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&probe.stdout).trim(),
        "65532",
        "{}",
        output_text(&probe)
    );

    // A run finds its fixtures and the mock agent without arguments, and writes its report to
    // the default folder as that user. The image is for cluster runs (the local and Kind
    // backends refuse non-root): it reads the template and prepare script, then stops at the
    // cluster (no kubeconfig in the container), exit 3 with a report.
    let inside = docker_run(
        &["--entrypoint", "sh"],
        reference,
        &[
            "-c",
            "test -x \"$KANDEV_MOCK_AGENT_BIN\" || exit 9; kandev-acceptance run --backend kube --context nowhere --worker-image w:1 --daemon-image d:1 --exact image::build_run >/dev/null 2>&1; echo $?; ls \"$KANDEV_ACCEPTANCE_ROOT\"/reports/*/report.json",
        ],
    );
    let text = String::from_utf8_lossy(&inside.stdout);
    assert!(
        text.starts_with("3\n") && text.contains("/opt/kandev-acceptance/reports/"),
        "{}",
        output_text(&inside)
    );

    // A second build builds nothing: the same reference and image. (Not timed: it waits on
    // the machine's image lock, which parallel tests' runs hold while preparing images.)
    let again = image_harness(&[]);
    assert!(again.status.success(), "{}", output_text(&again));
    assert_eq!(String::from_utf8_lossy(&again.stdout), stdout);
    assert!(
        String::from_utf8_lossy(&again.stderr).starts_with("reused "),
        "{}",
        output_text(&again)
    );
    assert_eq!(
        docker_lines(&["image", "inspect", "--format", "{{.Id}}", reference]),
        id
    );

    // The engine tests' helper names the same image for this binary (and builds nothing).
    let record = tokio::runtime::Runtime::new().unwrap().block_on(async {
        kandev_test_support::engine::FixtureEngine::start()
            .await
            .harness_image(Path::new(env!("CARGO_BIN_EXE_kandev-acceptance")))
            .await
    });
    assert_eq!(record.reference, reference);
    assert_eq!(record.role, "harness");
    assert!(!record.built);
    assert_eq!(record.id.into_iter().collect::<Vec<_>>(), id);
}

/// `gc --backend kind` spares the Kind cluster of a run whose engine lease runs (a Kind run
/// holds one on this host's engine, as a local run does) and deletes the cluster of a run
/// that is over; `--run` of the live one refuses. Kind cannot run here: a stand-in `kind`
/// lists two run clusters and records what it is asked to delete; the lease is a real one,
/// held by this test as a run holds it.
#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn gc_of_kind_clusters_spares_a_run_whose_engine_lease_runs() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let live = format!("kindlive-{}", std::process::id());
    let dead = format!("kinddead-{}", std::process::id());
    let log = dir.path().join("kind.log");
    let kind = dir.path().join("kind");
    std::fs::write(
        &kind,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nif [ \"$1 $2\" = 'get clusters' ]; then echo kandev-acc-{live}; echo kandev-acc-{dead}; echo someone-elses; fi\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&kind, std::fs::Permissions::from_mode(0o755)).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let lease = runtime.block_on(async {
        let engine = kandev_test_support::engine::FixtureEngine::start().await;
        kandev_harness::backend::local::lease::EngineLease::take(
            &engine.docker,
            &engine.images.mock_agent,
            &live,
        )
        .await
        .unwrap()
    });
    let gc = |args: &[&str]| {
        kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
            .args(["gc", "--backend", "kind", "--kind-bin"])
            .arg(&kind)
            .args(args)
            .output()
            .unwrap()
    };
    let refused = gc(&["--run", &live]);
    assert_eq!(refused.status.code(), Some(2), "{}", output_text(&refused));
    let all = gc(&["--all"]);
    let text = output_text(&all);
    assert!(all.status.success(), "{text}");
    assert!(
        text.contains(&format!("spared run {live}: alive (lease container")),
        "{text}"
    );
    assert!(
        text.contains(&format!("removed kind-cluster/kandev-acc-{dead}")),
        "{text}"
    );
    let calls = std::fs::read_to_string(&log).unwrap();
    let deleted: Vec<&str> = calls
        .lines()
        .filter(|l| l.starts_with("delete cluster"))
        .collect();
    assert_eq!(
        deleted,
        [format!("delete cluster --name kandev-acc-{dead}")],
        "{calls}"
    );
    runtime.block_on(lease.release()).unwrap();
    // Released: the live run's cluster is the next gc's to delete.
    let after = gc(&["--run", &live]);
    assert!(after.status.success(), "{}", output_text(&after));
}
