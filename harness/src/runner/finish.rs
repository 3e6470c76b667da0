//! The end of a run: the node view shut down, what still carries the run's label, the
//! run-level teardown, what the task Pods ran, the report assembled (the command line writes
//! it, `outputs`).

use super::assemble::{RunParts, assemble};
use super::scenario::Scenario;
use super::{Keep, Run, StopReason};
use crate::pod::identity::LABEL_RUN;
use kandev_report::{Environment, Report};

impl Run {
    /// Assembles the report (scenarios in `registry` order).
    pub async fn finish(&self, registry: &[Scenario]) -> Report {
        let mut scenarios = self.results();
        let order = |name: &str| {
            registry
                .iter()
                .position(|s| s.name == name)
                .unwrap_or(usize::MAX)
        };
        scenarios.sort_by_key(|s| order(&s.name));
        let env = self.prepared_env();
        if let Some(node) = env.as_ref().and_then(|e| e.node.clone()) {
            node.shutdown().await;
        }
        let leftovers = match &env {
            Some(env) => env
                .backend
                .list_labelled(&[(LABEL_RUN, self.id.as_str())])
                .await
                .unwrap_or_else(|e| vec![format!("(inventory failed: {e})")]),
            None => Vec::new(),
        };
        // What the run set up beyond its sessions; kept Pods (`--keep`) keep it, so that
        // they stay reachable.
        let teardown = match env.as_ref().and_then(|e| e.teardown.as_ref()) {
            Some(teardown) if self.config.keep == Keep::Never || leftovers.is_empty() => {
                teardown.teardown().await
            }
            Some(teardown) => {
                eprintln!("{}", teardown.kept_hint(&self.config.gc_command(&self.id)));
                teardown.release().await
            }
            None => Vec::new(),
        };
        assemble(RunParts {
            run_id: self.id.clone(),
            backend: env
                .as_ref()
                .map(|e| e.backend.name())
                .unwrap_or(self.config.backend.name())
                .into(),
            gate: self.config.gate.clone(),
            started_at: self.started_at,
            duration: self.started.elapsed(),
            interrupted: self.stop_reason() == Some(StopReason::Signal),
            deadline_exceeded: self.stop_reason() == Some(StopReason::Deadline),
            environment: env
                .as_ref()
                .map(|e| self.ran_into(e.environment.clone()))
                .unwrap_or_default(),
            settings: serde_json::to_value(&self.config).unwrap_or_default(),
            behaviour: self.behaviour.clone(),
            setup: self.setup_steps(),
            scenarios,
            leftovers,
            teardown,
            cost: Some(self.cost_start.finish(
                super::engine_host(&self.config).as_ref(),
                self.calls.snapshot(),
            )),
            selection: self.selection.clone(),
            kept: self.config.keep != Keep::Never,
        })
    }

    /// `environment` with what the task Pods' containers ran, per image role: the worker's
    /// in the main container, the daemon's in the companion.
    fn ran_into(&self, mut environment: Environment) -> Environment {
        for image in &mut environment.images {
            let container = match image.role.as_str() {
                "worker" => &self.config.main_container,
                "daemon" => &self.config.daemon_container,
                _ => continue,
            };
            image.ran = self.ran_images.of_container(container);
        }
        environment
    }
}
