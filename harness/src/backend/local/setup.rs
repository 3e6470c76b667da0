//! How a run prepares the local backend (this host's engine, the fixture images, the run's
//! lease, the host's cgroup tree as the node view), and `gc` of what killed runs left in the
//! engine (sparing runs that are alive: [`super::lease`]).

use super::backend::{LOCAL_NAMESPACE, LocalBackend};
use super::lease::{self, EngineLease, Leased};
use super::objects::LocalObjects;
use crate::backend::{
    Backend, GcOutcome, GcRequest, PrepareInput, Prepared, Provider, RunTeardown, Spared,
    on_this_host,
};
use crate::config::RunConfig;
use crate::host::is_not_found;
use crate::node::{HostNode, NodeView};
use crate::pod::identity::{LABEL_MANAGED, LABEL_RUN};
use anyhow::Context;
use async_trait::async_trait;
use bollard::Docker;
use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::ListNetworksOptionsBuilder;
use kandev_report::{CleanupOutcome, CleanupRecord};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

pub struct LocalProvider;

#[async_trait]
impl Provider for LocalProvider {
    fn check(&self, config: &RunConfig) -> Result<(), String> {
        on_this_host::check_root("local")?;
        if config.cluster.executor_role.is_some() {
            return Err("--executor-role replaces the Role a cluster run binds its executor to; the local engine has no RBAC: use --backend kind or kube".into());
        }
        let here = crate::pod::compose::Arch::of_this_machine();
        if let Some(arch) = config.cluster.platform.filter(|a| *a != here) {
            return Err(format!(
                "--platform linux/{} pins a cluster's Pods; the local engine runs them on this machine (linux/{}): leave --platform out, or use --backend kind or kube",
                arch.as_str(),
                here.as_str()
            ));
        }
        Ok(())
    }

    async fn prepare(&self, input: &PrepareInput<'_>) -> anyhow::Result<Prepared> {
        let (engine, mut environment) = on_this_host::engine(input).await?;
        let images = on_this_host::images(&engine, input).await?;
        // The lease before anything labelled with the run: `gc` spares the run from here on.
        let lease = EngineLease::take(engine.docker(), &images.mock_agent, input.run_id).await?;
        let network =
            PodNetwork::create(engine.docker().clone(), input.run_id, input.config.pod_mtu).await?;
        let local = Arc::new(
            LocalBackend::new(
                engine.docker().clone(),
                images.mock_agent.clone(),
                input.config.pod_pids_limit,
            )
            .on_network(&network.name),
        );
        // Local Pods sit on the run's network, whose MTU is the Pod MTU.
        environment.node_mtu = Some(input.config.pod_mtu);
        let node = local.cgroups().cloned().map(|cgroups| {
            Arc::new(HostNode {
                cgroups,
                proc_root: PathBuf::from("/proc"),
                scope: super::plan::CGROUP_ROOT.into(),
                description: "this host (the local engine runs the Pods)".into(),
                settle: crate::node::ENGINE_SETTLE,
                ledger: crate::node::LedgerFolders::HostButScope,
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
            teardown: Some(Box::new(Leased::new(Box::new(network), lease))),
            jobs: None,
        })
    }

    /// Everything labelled with the run (or with the harness), then Pod cgroups whose Pod is
    /// gone (a cgroup carries no labels), then (not for one run) unused unlabelled volumes
    /// named as a task Pod's emptyDir.
    ///
    /// Runs that are alive (their lease container runs) are spared unless `force`. What may
    /// be removed is listed before the leases are read, and only runs seen then are removed:
    /// a run takes its lease before it labels anything, so a run that starts meanwhile is
    /// never removed half-seen.
    async fn gc(&self, request: &GcRequest) -> anyhow::Result<GcOutcome> {
        let objects = LocalObjects::new(crate::host::connect_engine().await?);
        let selector = match &request.run {
            Some(id) => [(LABEL_RUN, id.as_str())],
            None => [(LABEL_MANAGED, "true")],
        };
        let seen = runs_labelled(&objects, &selector).await?;
        let live = if request.force {
            BTreeMap::new()
        } else {
            lease::live_runs(&objects.docker).await?
        };
        let spare = |labels: &HashMap<String, String>| {
            labels
                .get(LABEL_RUN)
                .is_some_and(|run| live.contains_key(run) || !seen.contains(run))
        };
        let mut outcome = GcOutcome {
            spared: live
                .iter()
                .filter(|(run, _)| seen.contains(*run) || request.run.as_ref() == Some(*run))
                .map(|(run, evidence)| Spared {
                    run: run.clone(),
                    evidence: evidence.clone(),
                })
                .collect(),
            ..Default::default()
        };
        let mut removed = objects
            .remove_labelled_but(&selector, request.dry_run, &spare)
            .await?;
        removed.extend(
            PodNetwork::remove_labelled(&objects.docker, &selector, request.dry_run, &spare)
                .await?,
        );
        removed.extend(
            lease::remove_dead(
                &objects.docker,
                &live,
                request.run.as_deref(),
                request.dry_run,
            )
            .await?,
        );
        let (cgroups, too_young) = objects
            .sweep_orphan_cgroups(request.older_than, request.dry_run)
            .await?;
        removed.extend(cgroups);
        outcome.too_young = too_young;
        // Last: such a volume may be one the engine still counts as mounted (a failure then
        // names the fix), and everything else is already gone.
        if request.run.is_none() {
            removed.extend(
                objects
                    .remove_unlabelled_pod_volumes(request.dry_run)
                    .await?,
            );
        }
        outcome.removed = removed;
        Ok(outcome)
    }
}

/// The run's Pod network: a bridge with the Pod MTU (`--pod-mtu`), as a cluster's overlay
/// network gives its Pods (VXLAN, Geneve, WireGuard: 1450 or lower), where the engine's
/// default bridge runs 1500. Created at prepare, removed at the run's teardown and by `gc`.
pub struct PodNetwork {
    docker: Docker,
    pub name: String,
}

/// Engine option of a bridge network's MTU.
const MTU_OPTION: &str = "com.docker.network.driver.mtu";

impl PodNetwork {
    pub async fn create(docker: Docker, run_id: &str, mtu: u32) -> anyhow::Result<Self> {
        let name = format!("kandev-acceptance-{run_id}");
        let request = NetworkCreateRequest {
            name: name.clone(),
            driver: Some("bridge".into()),
            options: Some(HashMap::from([(MTU_OPTION.to_owned(), mtu.to_string())])),
            labels: Some(HashMap::from([
                (LABEL_RUN.to_owned(), run_id.to_owned()),
                (LABEL_MANAGED.to_owned(), "true".to_owned()),
            ])),
            ..Default::default()
        };
        docker
            .create_network(request)
            .await
            .with_context(|| format!("create the run's Pod network {name} (MTU {mtu})"))?;
        Ok(Self { docker, name })
    }

    /// Networks carrying the run's (or the harness's) labels, but those whose labels
    /// `spare` holds to.
    pub async fn remove_labelled(
        docker: &Docker,
        selector: &[(&str, &str)],
        dry_run: bool,
        spare: &(dyn Fn(&HashMap<String, String>) -> bool + Sync),
    ) -> anyhow::Result<Vec<String>> {
        let mut filter: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        filter.push(format!("{LABEL_MANAGED}=true"));
        let options = ListNetworksOptionsBuilder::default()
            .filters(&HashMap::from([("label".to_owned(), filter)]))
            .build();
        let mut removed = Vec::new();
        for network in docker
            .list_networks(Some(options))
            .await
            .context("list networks")?
        {
            if network.labels.as_ref().is_some_and(spare) {
                continue;
            }
            let name = network.name.unwrap_or_default();
            if !dry_run {
                match docker.remove_network(&name).await {
                    Err(e) if !is_not_found(&e) => {
                        return Err(
                            anyhow::Error::from(e).context(format!("remove network {name}"))
                        );
                    }
                    _ => {}
                }
            }
            removed.push(format!("network/{name}"));
        }
        Ok(removed)
    }
}

#[async_trait]
impl RunTeardown for PodNetwork {
    async fn teardown(&self) -> Vec<CleanupRecord> {
        let started = Instant::now();
        let (outcome, error) = match self.docker.remove_network(&self.name).await {
            Ok(()) => (CleanupOutcome::Removed, None),
            Err(e) if is_not_found(&e) => (CleanupOutcome::AlreadyGone, None),
            Err(e) => (CleanupOutcome::Failed, Some(e.to_string())),
        };
        vec![CleanupRecord {
            object: format!("network/{}", self.name),
            outcome,
            duration_ms: started.elapsed().as_millis() as u64,
            error,
        }]
    }

    fn kept_hint(&self, gc: &str) -> String {
        format!(
            "kept the run's Pod network {} (--keep); remove later: {gc}",
            self.name
        )
    }
}

/// The runs (their run labels) of everything `selector` matches in the engine: containers,
/// volumes and networks.
async fn runs_labelled(
    objects: &LocalObjects,
    selector: &[(&str, &str)],
) -> anyhow::Result<BTreeSet<String>> {
    let mut runs = BTreeSet::new();
    let mut add = |labels: Option<&HashMap<String, String>>| {
        runs.extend(labels.and_then(|l| l.get(LABEL_RUN)).cloned());
    };
    for c in objects.containers_with(selector).await? {
        add(c.labels.as_ref());
    }
    for v in objects.volumes_with(selector).await? {
        add(Some(&v.labels));
    }
    let mut filter: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    filter.push(format!("{LABEL_MANAGED}=true"));
    let options = ListNetworksOptionsBuilder::default()
        .filters(&HashMap::from([("label".to_owned(), filter)]))
        .build();
    for network in objects
        .docker
        .list_networks(Some(options))
        .await
        .context("list networks")?
    {
        add(network.labels.as_ref());
    }
    Ok(runs)
}
