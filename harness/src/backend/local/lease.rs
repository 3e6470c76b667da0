//! A run's liveness on this host's engine (the `local` and `kind` backends), which `gc`
//! respects: a small container the run holds by its attached stdin.
//!
//! The lease container runs the mock agent's `tunnel`, which ends when its stdin ends, with
//! `StdinOnce` (the engine closes the container's stdin when the one attached client goes)
//! and `AutoRemove`. The run attaches before it starts it and keeps the connection open for
//! its whole life; when the run's process ends, however it ends (`SIGKILL` included), the
//! kernel closes the connection, the engine closes stdin, the container exits and is
//! removed. So the engine itself holds the evidence, with no clock to compare: a run is
//! alive exactly while its lease container runs. A label with a heartbeat cannot do that
//! here (an engine object's labels never change), and a file beside the report is not seen
//! by a `gc` given another `--report-dir` or run on another host against the same engine.
//!
//! The container carries [`LABEL_LEASE`] (the run id) and the managed label, not the run's
//! label, so that the run's own inventory of what it left never counts it.

use crate::backend::RunTeardown;
use crate::host::is_not_found;
use crate::pod::identity::LABEL_MANAGED;
use anyhow::Context;
use async_trait::async_trait;
use bollard::Docker;
use bollard::container::AttachContainerResults;
use bollard::models::{ContainerCreateBody, ContainerSummaryStateEnum, HostConfig};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder, StartContainerOptions,
};
use kandev_report::CleanupRecord;
use std::collections::{BTreeMap, HashMap};

/// Label on a run's lease container: the run id.
pub const LABEL_LEASE: &str = "acceptance.kandev.ai/lease";

/// How long a lease container that was created but never started counts as its run being
/// set up (between create and start, the run attaches).
const SETTING_UP_SECONDS: i64 = 60;

/// The lease container's name.
pub fn lease_container(run_id: &str) -> String {
    format!("kandev-acceptance-lease-{run_id}")
}

/// A lease this process holds on the engine: alive while the process (and so its attached
/// connection) is.
pub struct EngineLease {
    docker: Docker,
    pub name: String,
    /// The attached connection; dropping it ends the lease.
    _attached: AttachContainerResults,
}

impl EngineLease {
    /// Creates the lease container from `image` (the mock agent's), attaches its stdin and
    /// starts it.
    pub async fn take(docker: &Docker, image: &str, run_id: &str) -> anyhow::Result<Self> {
        let name = lease_container(run_id);
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            cmd: Some(vec!["tunnel".into()]),
            labels: Some(HashMap::from([
                (LABEL_MANAGED.to_owned(), "true".to_owned()),
                (LABEL_LEASE.to_owned(), run_id.to_owned()),
            ])),
            attach_stdin: Some(true),
            open_stdin: Some(true),
            stdin_once: Some(true),
            host_config: Some(HostConfig {
                auto_remove: Some(true),
                network_mode: Some("none".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let what = || format!("the run's lease container {name} (gc spares a run while it runs)");
        docker
            .create_container(
                Some(CreateContainerOptionsBuilder::default().name(&name).build()),
                body,
            )
            .await
            .with_context(|| format!("create {}", what()))?;
        let attached = docker
            .attach_container(
                &name,
                Some(
                    AttachContainerOptionsBuilder::default()
                        .stream(true)
                        .stdin(true)
                        .stdout(true)
                        .stderr(true)
                        .build(),
                ),
            )
            .await
            .with_context(|| format!("attach to {}", what()));
        let attached = match attached {
            Ok(attached) => attached,
            Err(e) => {
                let _ = remove(docker, &name).await;
                return Err(e);
            }
        };
        if let Err(e) = docker
            .start_container(&name, None::<StartContainerOptions>)
            .await
        {
            let _ = remove(docker, &name).await;
            return Err(e).with_context(|| format!("start {}", what()));
        }
        Ok(Self {
            docker: docker.clone(),
            name,
            _attached: attached,
        })
    }

    /// Ends the lease: the container is removed (absent is fine).
    pub async fn release(self) -> Result<(), String> {
        remove(&self.docker, &self.name)
            .await
            .map_err(|e| format!("{e:#}"))
    }
}

async fn remove(docker: &Docker, name: &str) -> anyhow::Result<()> {
    let options = RemoveContainerOptionsBuilder::default().force(true).build();
    match docker.remove_container(name, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        // AutoRemove already removing it.
        Err(e) if e.to_string().contains("is already in progress") => Ok(()),
        Err(e) => Err(e).with_context(|| format!("remove the lease container {name}")),
    }
}

/// The runs alive on this engine (their lease container running, or created moments ago
/// and about to start), with the evidence for each. An engine that cannot be listed is an
/// error: no run is judged dead on evidence `gc` did not see.
pub async fn live_runs(docker: &Docker) -> anyhow::Result<BTreeMap<String, String>> {
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&HashMap::from([(
            "label".to_owned(),
            vec![LABEL_LEASE.to_owned()],
        )]))
        .build();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let mut live = BTreeMap::new();
    for c in docker
        .list_containers(Some(options))
        .await
        .context("list the runs' lease containers (gc spares runs that hold one)")?
    {
        let Some(run) = c.labels.as_ref().and_then(|l| l.get(LABEL_LEASE)).cloned() else {
            continue;
        };
        let name = c
            .names
            .as_ref()
            .and_then(|n| n.first())
            .map(|n| n.trim_start_matches('/').to_owned())
            .unwrap_or_default();
        let age = c.created.map(|created| now - created);
        let evidence = match c.state {
            Some(ContainerSummaryStateEnum::RUNNING) => Some(format!(
                "lease container {name} running ({}; it ends with the run's process)",
                c.status.unwrap_or_default()
            )),
            Some(ContainerSummaryStateEnum::CREATED)
                if age.is_some_and(|a| a < SETTING_UP_SECONDS) =>
            {
                Some(format!(
                    "lease container {name} created {} s ago, not started yet (being set up)",
                    age.unwrap_or_default()
                ))
            }
            _ => None,
        };
        if let Some(evidence) = evidence {
            live.insert(run, evidence);
        }
    }
    Ok(live)
}

/// Removes the lease containers of runs that are over (a lease whose container stopped but
/// was not removed: an engine restart); returns what was (or would be) removed.
pub async fn remove_dead(
    docker: &Docker,
    live: &BTreeMap<String, String>,
    run: Option<&str>,
    dry_run: bool,
) -> anyhow::Result<Vec<String>> {
    let mut filter = vec![LABEL_LEASE.to_owned()];
    if let Some(run) = run {
        filter = vec![format!("{LABEL_LEASE}={run}")];
    }
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&HashMap::from([("label".to_owned(), filter)]))
        .build();
    let mut removed = Vec::new();
    for c in docker
        .list_containers(Some(options))
        .await
        .context("list the runs' lease containers")?
    {
        let run = c.labels.as_ref().and_then(|l| l.get(LABEL_LEASE));
        if run.is_some_and(|r| live.contains_key(r)) {
            continue;
        }
        let Some(name) = c
            .names
            .as_ref()
            .and_then(|n| n.first())
            .map(|n| n.trim_start_matches('/').to_owned())
        else {
            continue;
        };
        if !dry_run {
            remove(docker, &name).await?;
        }
        removed.push(format!("container/{name}"));
    }
    Ok(removed)
}

/// What a run set up beyond its sessions, and the engine lease it holds until that is gone
/// (released last, also when `--keep` leaves the rest).
pub struct Leased {
    inner: Box<dyn RunTeardown>,
    lease: tokio::sync::Mutex<Option<EngineLease>>,
}

impl Leased {
    pub fn new(inner: Box<dyn RunTeardown>, lease: EngineLease) -> Self {
        Self {
            inner,
            lease: tokio::sync::Mutex::new(Some(lease)),
        }
    }

    async fn release_lease(&self) -> Option<CleanupRecord> {
        let lease = self.lease.lock().await.take()?;
        let started = std::time::Instant::now();
        let object = format!("container/{}", lease.name);
        let result = lease.release().await;
        Some(CleanupRecord::timed(object, started, result))
    }
}

#[async_trait]
impl RunTeardown for Leased {
    async fn teardown(&self) -> Vec<CleanupRecord> {
        let mut records = self.inner.teardown().await;
        records.extend(self.release_lease().await);
        records
    }

    fn kept_hint(&self, gc: &str) -> String {
        self.inner.kept_hint(gc)
    }

    async fn release(&self) -> Vec<CleanupRecord> {
        let mut records = self.inner.release().await;
        records.extend(self.release_lease().await);
        records
    }
}
