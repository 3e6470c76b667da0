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
    let mut command = tokio::process::Command::from(kandev_test_support::harness_env::harness(
        env!("CARGO_BIN_EXE_kandev-acceptance"),
    ));
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
        .arg("--report-dir")
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

/// A `launch` against the double: its exit code, its output, the run id it announced and
/// the folder the report was retrieved into.
pub struct Launched {
    pub code: Option<i32>,
    pub text: String,
    pub run_id: String,
    pub dir: tempfile::TempDir,
}

impl Launched {
    /// The retrieved report (panics, with launch's output, when there is none).
    pub fn report(&self) -> (PathBuf, Report) {
        super::written_report(self.dir.path(), &self.text)
    }
}

/// `kandev-acceptance launch` against the double with the harness image `harness`, the
/// fixture images and `args`, into a fresh report folder.
pub fn launch_command(
    double: &cluster_double::KubeDouble,
    images: &ImageSet,
    harness: &str,
    dir: &Path,
    args: &[&str],
) -> tokio::process::Command {
    let mut command = command(double, "launch");
    command
        .arg("--report")
        .arg(dir)
        .args(["--harness-image", harness])
        .args(["--worker-image", &images.worker])
        .args(["--daemon-image", &images.daemon])
        .args(args);
    command
}

/// Runs `launch` to its end.
pub async fn launch(
    double: &cluster_double::KubeDouble,
    images: &ImageSet,
    harness: &str,
    args: &[&str],
) -> Launched {
    let dir = tempfile::tempdir().unwrap();
    let output = launch_command(double, images, harness, dir.path(), args)
        .output()
        .await
        .unwrap();
    let text = super::output_text(&output);
    Launched {
        code: output.status.code(),
        run_id: launched_run_id(&text).unwrap_or_default(),
        text,
        dir,
    }
}

/// The run id `launch` announces on its first line (`launch <id>: ...`).
pub fn launched_run_id(text: &str) -> Option<String> {
    text.lines().find_map(|l| {
        l.strip_prefix("launch ")?
            .split_once(':')
            .map(|(id, _)| id.to_owned())
    })
}

/// What the double holds of launch or run `run_id` (by label or in its namespace) now, at one
/// look: for what must still be there (a killed launch's), where waiting for it to go would
/// let its Leases expire.
pub fn held_by_double(double: &cluster_double::KubeDouble, run_id: &str) -> Vec<String> {
    let namespace = format!("kandev-acceptance-{run_id}");
    [
        "namespaces",
        "pods",
        "persistentvolumeclaims",
        "serviceaccounts",
        "roles",
        "rolebindings",
        "secrets",
        "jobs",
        "leases",
    ]
    .iter()
    .flat_map(|resource| double.state.objects(resource))
    .filter(|o| {
        let labels = &o["metadata"]["labels"];
        labels["acceptance.kandev.ai/run"] == run_id
            || labels["acceptance.kandev.ai/launch"] == run_id
            || o["metadata"]["namespace"] == namespace.as_str()
            || o["metadata"]["name"] == namespace.as_str()
    })
    .map(|o| {
        format!(
            "{}/{}",
            o["kind"].as_str().unwrap_or("?"),
            o["metadata"]["name"].as_str().unwrap_or("?")
        )
    })
    .collect()
}

/// What the double still holds of launch or run `run_id` (by label or in its namespace),
/// polled briefly (up to 60 s): a namespace goes once its Pods are removed from the engine.
pub async fn left_in_double(double: &cluster_double::KubeDouble, run_id: &str) -> Vec<String> {
    let mut remaining = Vec::new();
    for _ in 0..120 {
        remaining = held_by_double(double, run_id);
        if remaining.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    remaining
}
