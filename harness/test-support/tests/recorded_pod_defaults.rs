//! The cluster double's Pod defaulting against a real API server's, from the recordings in
//! `fixtures/kube/recorded/` (made by `harness/scripts/record-kube-fixtures.sh`; the nightly
//! Kind workflow records against Kind's v1.36 API server and then runs this file with
//! `KANDEV_REQUIRE_RECORDINGS=1`, so a divergence, or nothing recorded, fails the nightly).
//!
//! The checked-in recordings are kube-apiserver v1.37's, made by the `real_api_server` tests
//! (which also compare the double with the live server). Where a folder holds nothing, the
//! comparison says so and claims nothing. `KANDEV_KUBE_RECORDINGS=DIR` reads the recordings
//! from another folder.

use kandev_test_support::cluster_double::recorded::{
    self, Recording, composed_task_pod, differences, normalized, replay,
};
use serde_json::json;
use std::io::Write;
use std::path::PathBuf;

fn recordings_folder() -> PathBuf {
    std::env::var_os("KANDEV_KUBE_RECORDINGS")
        .map(PathBuf::from)
        .unwrap_or_else(recorded::folder)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_doubles_pod_defaulting_matches_every_recorded_api_server_answer() {
    let folder = recordings_folder();
    let recordings = recorded::load(&folder).expect("readable recordings");
    if recordings.is_empty() {
        let required = std::env::var("KANDEV_REQUIRE_RECORDINGS").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "KANDEV_REQUIRE_RECORDINGS=1 but {} holds no recording: the recorder made none",
            folder.display()
        );
        // Straight to stderr, past the test harness's capture: seen on every run.
        let _ = writeln!(
            std::io::stderr(),
            "NOTICE: no recorded API server answers in {}: the double's Pod defaulting was \
             compared with nothing here (record some with harness/scripts/record-kube-fixtures.sh \
             --context CONTEXT; the nightly Kind workflow does).",
            folder.display()
        );
        return;
    }
    let mut failures = Vec::new();
    for recording in &recordings {
        let answer = match replay(recording).await {
            Ok(answer) => answer,
            Err(e) => {
                failures.push(format!("{}: {e:#}", recording.file.display()));
                continue;
            }
        };
        let found = differences(&normalized(&recording.response), &normalized(&answer));
        if found.is_empty() {
            println!(
                "{}: the double's answer equals the recorded one ({}{})",
                recording.file.display(),
                recording.server_version,
                if recording.dry_run { ", dry run" } else { "" }
            );
        } else {
            failures.push(format!(
                "{} ({}{}): the double's Pod differs from the API server's:\n  {}",
                recording.file.display(),
                recording.server_version,
                if recording.dry_run { ", dry run" } else { "" },
                found.join("\n  ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The comparison itself, on a synthetic recording (the double's own answer, changed by
/// hand; not an API server's): it names exactly the fields that differ, and ignores what
/// varies from one create to the next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_comparison_names_each_field_the_double_answers_differently() {
    let request = composed_task_pod(
        "kandev-record-test",
        None,
        "kandev-acceptance/worker:recorded",
        "kandev-acceptance/daemon:recorded",
    )
    .unwrap();
    let mut synthetic = Recording {
        file: PathBuf::from("synthetic.json"),
        server_version: "none (synthetic)".into(),
        dry_run: false,
        request: request.clone(),
        response: json!(null),
    };
    let answer = replay(&synthetic).await.unwrap();
    // What a real create also answers: defaults, the status a new Pod has, generation 1.
    assert_eq!(answer["spec"]["dnsPolicy"], "ClusterFirst");
    assert_eq!(answer["status"]["qosClass"], "Burstable");
    assert_eq!(answer["metadata"]["generation"], 1);
    assert!(answer["metadata"]["uid"].is_string());

    // Another create's volatile fields (and a token volume's random name) are no difference.
    let mut response = answer.clone();
    response["metadata"]["uid"] = json!("00000000-0000-0000-0000-000000000000");
    response["metadata"]["resourceVersion"] = json!("1");
    response["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    response["metadata"]["managedFields"] = json!([{"manager": "kubectl-create"}]);
    synthetic.response = normalized(&response);
    let again = replay(&synthetic).await.unwrap();
    assert_eq!(
        differences(&synthetic.response, &normalized(&again)),
        Vec::<String>::new()
    );
    assert_eq!(
        normalized(&json!({"spec": {"volumes": [{"name": "kube-api-access-x7k2p"}]}})),
        json!({"spec": {"volumes": [{"name": "kube-api-access-RANDOM"}]}})
    );

    // A default the API server sets otherwise, one it sets that the double does not, and
    // one the double sets that it does not: each named by its path.
    response["spec"]["dnsPolicy"] = json!("Default");
    response["spec"]["containers"][0]["resizePolicy"] =
        json!([{"resourceName": "cpu", "restartPolicy": "NotRequired"}]);
    response["spec"]["containers"][1]
        .as_object_mut()
        .unwrap()
        .remove("terminationMessagePolicy");
    synthetic.response = normalized(&response);
    let found = differences(&synthetic.response, &normalized(&again));
    assert_eq!(
        found,
        vec![
            r#"spec.containers[0].resizePolicy: recorded [{"resourceName":"cpu","restartPolicy":"NotRequired"}], double absent"#.to_owned(),
            r#"spec.containers[1].terminationMessagePolicy: recorded absent, double "File""#.to_owned(),
            r#"spec.dnsPolicy: recorded "Default", double "ClusterFirst""#.to_owned(),
        ],
        "{found:#?}"
    );
}
