//! How a run prepares the local backend (this host's engine, the fixture images, the host's
//! cgroup tree as the node view), and `gc` of what killed runs left in the engine.

use super::LocalBackend;
use super::objects::LocalObjects;
use crate::backend::{Backend, GcRequest, PrepareInput, Prepared, Provider};
use crate::config::RunConfig;
use crate::host::HostEngine;
use crate::host::images::{ImageConfig, ensure_images};
use crate::node::{HostNode, NodeView};
use crate::pod::identity::{LABEL_MANAGED, LABEL_RUN};
use async_trait::async_trait;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// Namespace name the local backend reports (it has no namespaces).
pub const LOCAL_NAMESPACE: &str = "local";

pub struct LocalProvider;

/// The fixture images (or the operator's, if given) in this host's engine: shared by the
/// backends whose Pods run from this engine's images (local, and Kind after `kind load`).
pub async fn host_images(
    engine: &HostEngine,
    input: &PrepareInput<'_>,
) -> anyhow::Result<crate::host::images::ImageSet> {
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
pub async fn host_engine(
    input: &PrepareInput<'_>,
) -> anyhow::Result<(HostEngine, crate::report::Environment)> {
    let started = Instant::now();
    input.setup.step(
        "engine",
        started,
        HostEngine::connect().await,
        |(_, e)| json!({"version": e.engine_version, "api_version": e.engine_api_version}),
    )
}

#[async_trait]
impl Provider for LocalProvider {
    fn check(&self, _config: &RunConfig) -> Result<(), String> {
        Ok(())
    }

    async fn prepare(&self, input: &PrepareInput<'_>) -> anyhow::Result<Prepared> {
        let (engine, mut environment) = host_engine(input).await?;
        let images = host_images(&engine, input).await?;
        let local = Arc::new(LocalBackend::new(
            engine.docker().clone(),
            images.mock_agent.clone(),
            vec!["/opt/kandev/agentctl".into(), "bridge".into()],
            input.config.pod_pids_limit,
        ));
        // Local Pods sit on the engine's default bridge.
        environment.node_mtu = std::fs::read_to_string("/sys/class/net/docker0/mtu")
            .ok()
            .and_then(|m| m.trim().parse().ok());
        let node = local.cgroups().cloned().map(|cgroups| {
            Arc::new(HostNode {
                cgroups,
                proc_root: PathBuf::from("/proc"),
                scope: super::plan::CGROUP_ROOT.into(),
                description: "this host (the local engine runs the Pods)".into(),
            }) as Arc<dyn NodeView>
        });
        let backend: Arc<dyn Backend> = local;
        Ok(Prepared {
            backend,
            namespace: LOCAL_NAMESPACE.into(),
            images,
            node,
            host_engine: Some(engine),
            environment,
            teardown: None,
        })
    }

    /// Everything labelled with the run (or with the harness), then Pod cgroups whose Pod is
    /// gone (a cgroup carries no labels).
    async fn gc(&self, request: &GcRequest) -> anyhow::Result<Vec<String>> {
        let objects = LocalObjects::new(crate::host::connect_engine().await?);
        let selector = match &request.run {
            Some(id) => [(LABEL_RUN, id.as_str())],
            None => [(LABEL_MANAGED, "true")],
        };
        let mut removed = objects.remove_labelled(&selector, request.dry_run).await?;
        removed.extend(
            objects
                .sweep_orphan_cgroups(request.older_than, request.dry_run)
                .await?,
        );
        Ok(removed)
    }
}
