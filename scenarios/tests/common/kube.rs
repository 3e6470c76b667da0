//! Running the harness binary with `--backend kube` against the wire-level cluster double
//! (`kandev_test_support::cluster_double`), whose Pods run on this host's engine.

use super::root;
use kandev_harness::backend::Backend;
use kandev_harness::backend::local::LocalBackend;
use kandev_harness::host::connect_engine;
use kandev_harness::host::images::{ImageConfig, ImageSet, ensure_images, mock_agent_binary};
use kandev_harness::report::Report;
use kandev_test_support::cluster_double;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The fixture images, and the double with Pods on the local engine behind it.
pub async fn engine_double() -> (cluster_double::KubeDouble, ImageSet) {
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
    (double, images)
}

/// `kandev-acceptance <subcommand>` against the double (kubeconfig and context), with `args`.
pub fn command(double: &cluster_double::KubeDouble, subcommand: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kandev-acceptance"));
    command
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("GITHUB_ACTIONS")
        .arg(subcommand)
        .args(["--backend", "kube", "--kubeconfig"])
        .arg(&double.kubeconfig)
        .args(["--context", &double.context])
        .env("KANDEV_ACCEPTANCE_ROOT", root());
    command
}

/// `kandev-acceptance run` against the double with `args`, into `dir`.
pub fn run_command(
    double: &cluster_double::KubeDouble,
    images: &ImageSet,
    dir: &Path,
    args: &[&str],
) -> tokio::process::Command {
    let mut command = command(double, "run");
    command
        .arg("--report")
        .arg(dir)
        .args(["--worker-image", &images.worker])
        .args(["--daemon-image", &images.daemon])
        .args(args);
    command
}

pub struct Run {
    pub code: Option<i32>,
    pub report: Report,
    pub report_dir: PathBuf,
    pub text: String,
    pub _dir: tempfile::TempDir,
}

/// Runs `kandev-acceptance run` against the double with `args`; its report.
pub async fn run(double: &cluster_double::KubeDouble, images: &ImageSet, args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let output = run_command(double, images, dir.path(), args)
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
    Run {
        code: output.status.code(),
        report,
        report_dir: run_dir.path(),
        text,
        _dir: dir,
    }
}
