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
        let out =
            kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
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
        let out =
            kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
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
    // --run-id: a CI job names its report folder in advance; the id is checked as the label
    // value and namespace part it becomes, and an id already used there is refused.
    let (code, err) = run(&["run", "--run-id", "CI_1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("is no run id") && err.contains("e.g. ci-1234-1"),
        "{err}"
    );
    let used = tempfile::tempdir().unwrap();
    std::fs::create_dir(used.path().join("ci-7-1")).unwrap();
    let (code, err) = run(&[
        "run",
        "--run-id",
        "ci-7-1",
        "--report",
        used.path().to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("already exists"), "{err}");
    // A Kind run names its cluster kandev-acc-<run id>: an id that takes the name past Kind's
    // 50 bytes is refused before anything is made (the node's hostname would not fit).
    let kind_reports = tempfile::tempdir().unwrap();
    let (code, err) = run(&[
        "run",
        "--backend",
        "kind",
        "--run-id",
        &"a".repeat(40),
        "--report-dir",
        kind_reports.path().join("r").to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("over Kind's 50") && err.contains("at most 39 characters"),
        "{err}"
    );
    assert!(!kind_reports.path().join("r").exists());
    // existing-claim without a claim: refused at once (it was exit 3 once the images were
    // built), nothing made, not even the report folder.
    let reports = tempfile::tempdir().unwrap();
    let folder = reports.path().join("reports");
    let (code, err) = run(&[
        "run",
        "--workspace-mode",
        "existing-claim",
        "--report",
        folder.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--workspace-claim NAME"), "{err}");
    assert!(!folder.exists(), "refused before anything was made");
    // Under --namespace a bare --image-pull-secret NAME the template names too is read from
    // another namespace than the template's: refused before anything is made (no cluster is
    // reached: the kubeconfig does not exist).
    let worker = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/templates/full-worker.yaml"),
    )
    .unwrap();
    let mut template: serde_yaml::Value = serde_yaml::from_str(&worker).unwrap();
    template["template"]["spec"]["imagePullSecrets"] =
        serde_yaml::from_str("[{name: regcred}]").unwrap();
    let inputs = tempfile::tempdir().unwrap();
    let with_secret = inputs.path().join("with-pull-secret.yaml");
    std::fs::write(&with_secret, serde_yaml::to_string(&template).unwrap()).unwrap();
    let folder = inputs.path().join("reports");
    let (code, err) = run(&[
        "run",
        "--backend",
        "kube",
        "--kubeconfig",
        "/nonexistent/kubeconfig",
        "--context",
        "team-cluster",
        "--worker-image",
        "registry.example/worker:1",
        "--daemon-image",
        "registry.example/docker:1",
        "--namespace",
        "team",
        "--image-pull-secret",
        "regcred",
        "--template",
        with_secret.to_str().unwrap(),
        "--report-dir",
        folder.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("image pull secret regcred is named by --image-pull-secret")
            && err.contains("fix: leave out --image-pull-secret regcred"),
        "{err}"
    );
    assert!(!folder.exists(), "refused before anything was made");
    // A tag may hold uppercase (distribution/reference's grammar); a repository may not, and
    // the fix names its lowercase form. The uppercase tag passes on to the next refusal.
    let (code, err) = run(&["run", "--worker-image", "Team/Worker:V1"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("must be lowercase") && err.contains("\"team/worker:V1\""),
        "{err}"
    );
    let (code, err) = run(&[
        "run",
        "--worker-image",
        "team/worker:V1",
        "--report",
        "/proc/kandev-acceptance-cannot-write-here",
    ]);
    assert_eq!(code, Some(2));
    assert!(
        !err.contains("image reference") && err.contains("report folder"),
        "{err}"
    );
    let (code, err) = run(&[
        "run",
        "--report",
        "/proc/kandev-acceptance-cannot-write-here",
    ]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("report folder") && err.contains("fix: pass a writable --report-dir DIR"),
        "{err}"
    );
    // The old spelling still works, with a note naming the new one.
    assert!(
        err.contains("note: --report DIR is now --report-dir DIR"),
        "{err}"
    );
    let (code, err) = run(&[
        "run",
        "--report-dir",
        "/proc/kandev-acceptance-cannot-write-here",
    ]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("report folder") && !err.contains("note:"),
        "{err}"
    );
    let (code, err) = run(&["report", "show", "/nonexistent/report.json"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("fix:"), "{err}");
}

fn acceptance(args: &[&str]) -> (Option<i32>, String) {
    let out = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn validate_for_release_refuses_placeholders_and_tags_at_their_field_paths() {
    let dir = tempfile::tempdir().unwrap();
    let good = kandev_harness::paths::fixtures().join("templates/full-worker.yaml");
    let text = std::fs::read_to_string(&good).unwrap();
    let template = good.display().to_string();
    // The fixture is valid, but its placeholders are not images a release can gate.
    assert_eq!(
        acceptance(&["validate", "--template", &template]).0,
        Some(0)
    );
    let (code, out) = acceptance(&["validate", "--for-release", "--template", &template]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("containers[0].image: FULL_WORKER_IMAGE_REQUIRED is a placeholder")
            && out.contains("containers[1].image: DOCKER_ENGINE_IMAGE_REQUIRED is a placeholder"),
        "{out}"
    );
    // Rendered with a digest and a tag: only the tag is refused.
    let digest = format!("r.example/worker@sha256:{}", "ab".repeat(32));
    let rendered = text
        .replace("FULL_WORKER_IMAGE_REQUIRED", &digest)
        .replace("DOCKER_ENGINE_IMAGE_REQUIRED", "r.example/daemon:29");
    let path = dir.path().join("rendered.yaml");
    std::fs::write(&path, rendered).unwrap();
    let (code, out) = acceptance(&[
        "validate",
        "--for-release",
        "--template",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("containers[1].image: \"r.example/daemon:29\" can move")
            && !out.contains("containers[0].image"),
        "{out}"
    );
    let both = text
        .replace("FULL_WORKER_IMAGE_REQUIRED", &digest)
        .replace("DOCKER_ENGINE_IMAGE_REQUIRED", &digest);
    std::fs::write(&path, both).unwrap();
    let (code, out) = acceptance(&[
        "validate",
        "--for-release",
        "--template",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0), "{out}");
}

#[test]
fn a_release_run_refuses_moving_images_and_unknown_capabilities_before_touching_anything() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().display().to_string();
    let (code, out) = acceptance(&[
        "run",
        "--report",
        &report,
        "--gate",
        "release",
        "--worker-image",
        "r.example/worker:latest",
    ]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("the release gate refuses this run")
            && out.contains("--worker-image \"r.example/worker:latest\" can move")
            && out.contains("fix:"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
    // Settings under which a check would hold for less than it promises.
    let (code, out) = acceptance(&[
        "run",
        "--report",
        &report,
        "--gate",
        "release",
        "--retries",
        "1",
        "--pod-mtu",
        "1500",
        "--required-tools",
        "git,docker",
    ]);
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("--retries 1")
            && out.contains("--pod-mtu 1500")
            && out.contains(
                "--required-tools leaves out [\"python-venv\", \"c\", \"node\", \"pnpm\", \"go\", \"rust\", \"buildx\", \"compose\", \"playwright\"]"
            ),
        "{out}"
    );
    let (code, out) = acceptance(&["run", "--report", &report, "--require", "docker,gpu"]);
    assert_eq!(code, Some(2), "{out}");
    assert!(out.contains("unknown capability \"gpu\""), "{out}");
}
