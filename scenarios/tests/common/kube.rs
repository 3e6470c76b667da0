//! Running the harness binary with `--backend kube` against the wire-level cluster double
//! (`kandev_test_support::cluster_double`), whose Pods run on this host's engine
//! (`kandev_test_support::engine::engine_double`).

use super::root;
use kandev_harness::host::images::ImageSet;
use kandev_report::Report;
use kandev_test_support::cluster_double;
use std::path::{Path, PathBuf};

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
    let text = super::output_text(&output);
    let (report_dir, report) = super::written_report(dir.path(), &text);
    Run {
        code: output.status.code(),
        report,
        report_dir,
        text,
        _dir: dir,
    }
}
