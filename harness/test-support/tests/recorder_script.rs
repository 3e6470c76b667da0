//! `harness/scripts/record-kube-fixtures.sh` against the cluster double (an API server over
//! HTTPS that kubectl reaches through the double's kubeconfig): the script's own plumbing
//! (namespace, ServiceAccount wait, composing, raw creates, what it strips, cleanup), which
//! otherwise first runs in the nightly Kind workflow. What it records here is the double's
//! answer, not an API server's: it goes to a temporary folder, never to `fixtures/`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kandev_test_support::cluster_double::{self, recorded};
use std::io::Write;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs kubectl, jq and cargo (said and skipped when kubectl or jq is missing): cargo test -p kandev-test-support -- --include-ignored"]
async fn the_recorder_script_records_each_case_and_removes_its_namespace() {
    let missing: Vec<&str> = ["kubectl", "jq"]
        .into_iter()
        .filter(|tool| {
            std::process::Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .map_or(true, |o| !o.status.success())
        })
        .collect();
    if !missing.is_empty() {
        // Straight to stderr, past the test harness's capture: seen on every run.
        let _ = writeln!(
            std::io::stderr(),
            "NOTICE: the recorder script was not run: {} missing on this machine",
            missing.join(" and ")
        );
        return;
    }
    let double = cluster_double::start(None).await.unwrap();
    let out = tempfile::tempdir().unwrap();
    let script =
        kandev_harness::paths::workspace_root().join("harness/scripts/record-kube-fixtures.sh");
    let args = [
        "--kubeconfig".to_owned(),
        double.kubeconfig.display().to_string(),
        "--context".to_owned(),
        double.context.clone(),
        "--out".to_owned(),
        out.path().display().to_string(),
    ];
    let run = tokio::task::spawn_blocking(move || {
        std::process::Command::new("bash")
            .arg(script)
            .args(args)
            .output()
    });
    let output = run.await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");

    let recordings = recorded::load(out.path()).unwrap();
    let names: Vec<String> = recordings
        .iter()
        .map(|r| r.file.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "task-pod-claim",
            "task-pod-emptydir-dry-run",
            "task-pod-emptydir"
        ]
    );
    for recording in &recordings {
        let name = recording.file.display();
        assert_eq!(recording.server_version, "v1.36.0-kube-double", "{name}");
        assert_eq!(
            recording.dry_run,
            name.to_string().ends_with("dry-run.json"),
            "{name}"
        );
        let namespace = recording.request["metadata"]["namespace"].as_str().unwrap();
        assert!(namespace.starts_with("kandev-record-"), "{name}");
        assert_eq!(recording.request["kind"], "Pod", "{name}");
        assert!(recording.request["metadata"].get("uid").is_none(), "{name}");
        let response = &recording.response;
        assert_eq!(
            response["metadata"]["name"],
            recording.request["metadata"]["name"]
        );
        for field in recorded::VOLATILE_METADATA {
            assert!(
                response["metadata"].get(field).is_none(),
                "{name}: {field} kept"
            );
        }
        assert_eq!(response["spec"]["dnsPolicy"], "ClusterFirst", "{name}");
        // The double against itself: only that the recording replays.
        let answer = recorded::replay(recording).await.unwrap();
        assert_eq!(
            recorded::differences(
                &recorded::normalized(response),
                &recorded::normalized(&answer)
            ),
            Vec::<String>::new(),
            "{name}"
        );
    }
    let claim = &recordings[0].request["spec"]["volumes"];
    assert!(
        claim.to_string().contains("kandev-record-workspace"),
        "{claim}"
    );

    // The namespace it made (and so its Pods) is gone.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<String> = double
            .state
            .objects("namespaces")
            .iter()
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned))
            .filter(|n| n.starts_with("kandev-record-"))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left behind: {left:?}\n{stderr}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        double
            .state
            .deletions()
            .iter()
            .any(|d| d.resource == "namespaces" && d.name.starts_with("kandev-record-")),
        "{stderr}"
    );
}
