//! The run's environment, prepared once: the backend (through its provider), the template
//! with the images the backend runs, and what every session shares. Nothing here knows which
//! backend it is.

use super::Run;
use super::cost::metered_backend::MeteredBackend;
use super::cost::metered_node::MeteredNode;
use crate::backend::{Backend, PrepareInput, RunTeardown};
use crate::host::HostEngine;
use crate::host::images::ImageSet;
use crate::node::NodeView;
use crate::session::LaunchSettings;
use anyhow::Context;
use kandev_report::{Environment, TemplateRecord};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Prepared once per run, by the first scenario that needs it (or before any, for a
/// backend that must fail fast).
pub struct RunEnv {
    pub backend: Arc<dyn Backend>,
    /// This host's engine, when the backend uses one.
    pub host_engine: Option<HostEngine>,
    pub images: ImageSet,
    pub launch: LaunchSettings,
    pub environment: Environment,
    /// The node seen from outside the Pods, when the backend has one (leak ledger, evidence).
    pub node: Option<Arc<dyn NodeView>>,
    /// What the run set up beyond its sessions, removed when it ends.
    pub teardown: Option<Box<dyn RunTeardown>>,
    /// How many scenarios to run at once, as the backend derived it (see [`Prepared::jobs`]).
    ///
    /// [`Prepared::jobs`]: crate::backend::Prepared::jobs
    pub jobs: Option<usize>,
}

impl Run {
    /// Prepares the environment once; later calls get the same (or the same error).
    pub async fn env(&self) -> Result<Arc<RunEnv>, String> {
        self.env
            .get_or_init(|| async {
                self.prepare_env()
                    .await
                    .map(Arc::new)
                    .map_err(|e| crate::error_chain(e.as_ref()))
            })
            .await
            .clone()
    }

    /// The run's environment if it was prepared (successfully).
    pub fn prepared_env(&self) -> Option<Arc<RunEnv>> {
        self.env.get().and_then(|r| r.as_ref().ok()).cloned()
    }

    async fn prepare_env(&self) -> anyhow::Result<RunEnv> {
        let input = PrepareInput {
            run_id: &self.id,
            config: &self.config,
            report_folder: &self.report_folder(),
            mock_agent: tokio::sync::OnceCell::new(),
            setup: &self.setup,
            progress: &self.progress,
            template: &self.template,
            stopped: &self.cancelled,
        };
        let prepared = crate::backend::provider(self.config.backend)
            .prepare(&input)
            .await?;
        let binary = input.mock_agent_binary().await;
        let prepared_teardown = prepared.teardown;
        let agent_binary = binary.and_then(|path| {
            std::fs::read(&path).with_context(|| format!("read {}", path.display()))
        });
        let (worker, daemon) = (&prepared.images.worker, &prepared.images.daemon);
        let used = self
            .template
            .with_images(worker, daemon)
            .map_err(anyhow::Error::from);
        let (agent_binary, used) = match (agent_binary, used) {
            (Ok(binary), Ok(used)) => (binary, used),
            (Err(e), _) | (_, Err(e)) => {
                // The backend set things up already: undo them before failing.
                if let Some(teardown) = prepared_teardown {
                    teardown.teardown().await;
                }
                return Err(e);
            }
        };
        let mut environment = prepared.environment;
        environment.images = prepared.images.records.clone();
        environment.template = Some(TemplateRecord {
            path: crate::paths::shown(&self.config.template),
            sha256: used.sha256,
            source_sha256: Some(self.template.source_sha256()),
        });
        environment.fixtures = crate::paths::fixtures_record();
        environment.prepare_script = Some(kandev_report::PrepareScriptRecord {
            path: crate::paths::shown(&self.config.prepare_script),
            sha256: crate::pod::template::sha256_hex(&self.prepare_text),
        });
        let config = &self.config;
        // Every call the scenarios make goes through the meter (the report's cost).
        let backend: Arc<dyn Backend> = Arc::new(MeteredBackend::new(
            prepared.backend,
            self.calls.clone(),
            self.ran_images.clone(),
        ));
        let launch = LaunchSettings {
            backend: backend.clone(),
            namespace: prepared.namespace,
            template: used.template,
            main_container: config.main_container.clone(),
            daemon_container: config.daemon_container.clone(),
            prepare_script: self.prepare_text.clone(),
            agent_binary: Arc::new(agent_binary),
            pod_ready_timeout: config.pod_ready_timeout,
            prepare_timeout: Duration::from_secs(
                u64::from(config.docker_ready_timeout_seconds) + 120,
            ),
            connect_timeout: Duration::from_secs(30),
            profile_env: BTreeMap::from([(
                "DOCKER_READY_TIMEOUT_SECONDS".to_owned(),
                config.docker_ready_timeout_seconds.to_string(),
            )]),
            existing_claim: config.workspace_claim.clone(),
            launch_log: Default::default(),
        };
        Ok(RunEnv {
            backend,
            host_engine: prepared.host_engine,
            images: prepared.images,
            launch,
            environment,
            node: prepared.node.map(|node| {
                Arc::new(MeteredNode::new(node, self.calls.clone())) as Arc<dyn NodeView>
            }),
            teardown: prepared_teardown,
            jobs: prepared.jobs,
        })
    }
}
