//! The whole catalogue through `--backend kube --node-inspector` against the wire-level
//! cluster double (`kandev_test_support::cluster_double`): the harness binary reaches the double
//! only through the kubeconfig it wrote (HTTPS, its own CA, a token), sets the executor up with
//! real RBAC and runs every session over the double's websockets; the double runs the Pods on
//! this host's engine through the local backend (with the UIDs it assigned, so the inspector
//! Pod finds each Pod's `pod<uid>` cgroup on the one node). Every scenario must pass and
//! nothing of the run may be left on the engine. Needs a reachable engine, so it is `#[ignore]`d.

// A test file: failing loudly with unwrap/panic is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kandev_harness::backend::Backend;
use kandev_harness::backend::local::LocalBackend;
use kandev_harness::host::connect_engine;
use kandev_harness::host::images::{ImageConfig, ensure_images, mock_agent_binary};
use kandev_harness::report::{Outcome, Report};
use kandev_test_support::cluster_double;
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
async fn catalogue_on_kube_double() {
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
    let runtime: Arc<dyn Backend> = Arc::new(LocalBackend::new(
        docker,
        images.mock_agent.clone(),
        vec!["/opt/kandev/agentctl".into(), "bridge".into()],
        4096,
    ));
    let double = cluster_double::start(Some(runtime)).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .arg("run")
        .arg("--report")
        .arg(dir.path())
        .args(["--backend", "kube", "--kubeconfig"])
        .arg(&double.kubeconfig)
        .args(["--context", &double.context])
        .args(["--worker-image", &images.worker])
        .args(["--daemon-image", &images.daemon])
        .arg("--node-inspector")
        .env("KANDEV_ACCEPTANCE_ROOT", &root)
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
    assert_eq!(
        report.scenarios.len(),
        kandev_scenarios::registry().len(),
        "{text}"
    );
    for scenario in &report.scenarios {
        eprintln!(
            "{:<40} {:?} {} ms",
            scenario.name, scenario.outcome, scenario.duration_ms
        );
    }
    let failures: Vec<String> = report
        .scenarios
        .iter()
        .filter(|s| s.outcome != Outcome::Passed)
        .map(|s| format!("{}: {:?} {:?}", s.name, s.outcome, s.diagnosis))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}\n{text}");
    assert_eq!(report.summary.passed, kandev_scenarios::registry().len());
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(report.leftovers.is_empty(), "{:?}", report.leftovers);
    // Nothing of the run is left on the engine behind the double (claims' volumes are
    // removed once their Pod is gone: polled briefly).
    let label = format!("label=acceptance.kandev.ai/run={}", report.run_id);
    let mut left = Vec::new();
    for _ in 0..60 {
        left = ["ps -aq", "volume ls -q"]
            .iter()
            .flat_map(|command| {
                let mut args: Vec<&str> = command.split(' ').collect();
                args.extend(["--filter", &label]);
                let out = std::process::Command::new("docker")
                    .args(&args)
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .map(str::to_owned)
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
            })
            .collect();
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    assert!(left.is_empty(), "left on the engine: {left:?}");
}
