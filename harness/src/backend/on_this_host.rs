//! Preparation steps shared by the backends whose Pods run from this host's engine: the
//! local backend, and Kind (its node runs there and `kind load` takes the images from there).

use super::PrepareInput;
use crate::host::HostEngine;
use crate::host::images::{ImageConfig, ImageSet, ensure_images};
use kandev_report::Environment;
use serde_json::json;
use std::time::Instant;

/// Refuses a run on this host's engine by anyone but root, before anything is built: the
/// local backend reads the Pods' processes and cgroups here (`/proc/<pid>`, the cgroup tree,
/// the node view) and removes their cgroups; Kind's run builds and loads its images here and
/// reads its node's processes the same way.
pub fn check_root(backend: &str) -> Result<(), String> {
    if rustix::process::geteuid().is_root() {
        return Ok(());
    }
    Err(format!(
        "--backend {backend} runs as root: it reads the Pods' processes and cgroups on this host (/proc, /sys/fs/cgroup) and removes what they leave\n  fix: run it as root (sudo -E kandev-acceptance run ...), or against a cluster you can reach: --backend kube --context NAME"
    ))
}

/// The fixture images (or the operator's, if given) in this host's engine: shared by the
/// backends whose Pods run from this engine's images (local, and Kind after `kind load`).
pub async fn images(engine: &HostEngine, input: &PrepareInput<'_>) -> anyhow::Result<ImageSet> {
    let config = input.config;
    let mock_agent_binary = input.mock_agent_binary().await?;
    let image_config = ImageConfig {
        base_image: config.base_image.clone(),
        worker_image: config.worker_image.clone(),
        daemon_image: config.daemon_image.clone(),
        images_dir: crate::paths::fixtures().join("images"),
        mock_agent_binary,
    };
    let started = Instant::now();
    let images = ensure_images(engine.docker(), &image_config, input.progress).await;
    input
        .setup
        .step("images", started, images, |i| json!(i.records))
}

/// This host's engine, reached and described (the `engine` set-up step).
pub async fn engine(input: &PrepareInput<'_>) -> anyhow::Result<(HostEngine, Environment)> {
    let started = Instant::now();
    input.setup.step(
        "engine",
        started,
        HostEngine::connect().await,
        |(_, e)| json!({"version": e.engine_version, "api_version": e.engine_api_version}),
    )
}
