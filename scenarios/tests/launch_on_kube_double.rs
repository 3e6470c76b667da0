//! `launch::causal_failures` and `launch::contract` through `--backend kube` against the
//! cluster double: every failure case, the restricted identity included, is judged there (not
//! reported "not applicable"), each names its cause as the API server and scheduler word it,
//! and the contract reads the Pod and the namespace's Services back through the API.
//! Needs a reachable engine, so it is `#[ignore]`d.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kandev_harness::backend::Backend;
use kandev_harness::backend::local::LocalBackend;
use kandev_harness::host::connect_engine;
use kandev_harness::host::images::{ImageConfig, ensure_images, mock_agent_binary};
use kandev_harness::report::{Outcome, Report};
use kandev_test_support::cluster_double;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn launch_scenarios_judge_every_case_on_kube_double() {
    let docker = connect_engine().await.unwrap();
    let root = root();
    let binary = mock_agent_binary(&root).await.unwrap();
    let images = ensure_images(
        &docker,
        &ImageConfig {
            base_image: "debian:bookworm".into(),
            worker_image: None,
            daemon_image: None,
            images_dir: root.join("fixtures/images"),
            mock_agent_binary: binary,
        },
        &indicatif::MultiProgress::with_draw_target(indicatif::ProgressDrawTarget::hidden()),
    )
    .await
    .unwrap();
    let runtime: Arc<dyn Backend> =
        Arc::new(LocalBackend::new(docker, images.mock_agent.clone(), 4096));
    let double = cluster_double::start(Some(runtime)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("GITHUB_ACTIONS")
        .arg("run")
        .args(["--backend", "kube", "--kubeconfig"])
        .arg(&double.kubeconfig)
        .args(["--context", &double.context])
        .env("KANDEV_ACCEPTANCE_ROOT", &root)
        .arg("--report")
        .arg(dir.path())
        .args(["--worker-image", &images.worker])
        .args(["--daemon-image", &images.daemon])
        .arg("launch::")
        .output()
        .await
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
    let report: Report =
        serde_json::from_slice(&std::fs::read(run_dir.path().join("report.json")).unwrap())
            .unwrap();
    assert_eq!(report.scenarios.len(), 2, "{text}");
    for scenario in &report.scenarios {
        assert_eq!(scenario.outcome, Outcome::Passed, "{text}");
    }
    let causal = report
        .scenarios
        .iter()
        .find(|s| s.name == "launch::causal_failures")
        .unwrap();
    let cases: Vec<Value> = causal
        .steps
        .iter()
        .find_map(|s| s.evidence.get("cases").cloned())
        .and_then(|c| serde_json::from_value(c).ok())
        .unwrap();
    let case = |name: &str| {
        cases
            .iter()
            .find(|c| c["case"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no case {name}: {cases:?}"))
    };
    let message = |name: &str| case(name)["message"].as_str().unwrap().to_owned();
    assert!(message("image").contains("ErrImagePull"), "{cases:?}");
    assert!(
        message("node_selector").contains("Unschedulable"),
        "{cases:?}"
    );
    assert!(message("missing_claim").contains("not found"), "{cases:?}");
    let restricted = case("restricted_identity");
    assert_eq!(restricted["judged"], true, "{cases:?}");
    assert!(
        restricted["message"]
            .as_str()
            .unwrap()
            .contains("cannot create resource \"pods\""),
        "{cases:?}"
    );
    for name in ["image", "node_selector", "missing_claim"] {
        // Surfaced from the status, long before the pod_ready bound.
        assert!(
            case(name)["elapsed_ms"].as_u64().unwrap() < 30_000,
            "{cases:?}"
        );
    }
}
