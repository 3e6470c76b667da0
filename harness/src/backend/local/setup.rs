//! How a run prepares the local backend (this host's engine, the fixture images, the host's
//! cgroup tree as the node view), and `gc` of what killed runs left in the engine.

use super::LocalBackend;
use super::objects::LocalObjects;
use crate::backend::{Backend, GcRequest, PrepareInput, Prepared, Provider, on_this_host};
use crate::config::RunConfig;
use crate::node::{HostNode, NodeView};
use crate::pod::identity::{LABEL_MANAGED, LABEL_RUN};
use async_trait::async_trait;
use std::path::PathBuf;
use std::sync::Arc;

/// Namespace name the local backend reports (it has no namespaces).
pub const LOCAL_NAMESPACE: &str = "local";

pub struct LocalProvider;

#[async_trait]
impl Provider for LocalProvider {
    fn check(&self, _config: &RunConfig) -> Result<(), String> {
        Ok(())
    }

    async fn prepare(&self, input: &PrepareInput<'_>) -> anyhow::Result<Prepared> {
        let (engine, mut environment) = on_this_host::engine(input).await?;
        let images = on_this_host::images(&engine, input).await?;
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
                settle: crate::node::ENGINE_SETTLE,
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
