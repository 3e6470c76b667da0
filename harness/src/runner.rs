//! The runner: scenarios as libtest-mimic trials, bridged to one tokio runtime on purpose.
//!
//! Each trial runs its scenario body under the scenario's deadline and the run's cancellation,
//! classifies the result (passed, failed = a promise broke, errored = infrastructure, timed
//! out, cancelled, skipped, incompatible), collects evidence on failure, and always tears its
//! cleanup stack down afterwards. The engine and images are prepared once, lazily, by the
//! first trial that needs them, so `--list` and filtered-out runs touch nothing.

use crate::backend::Backend;
use crate::backend::kube::cluster::{Cluster, ClusterSettings};
use crate::backend::local::{LocalBackend, connect_engine};
use crate::cleanup::CleanupStack;
use crate::identity::SessionIdentity;
use crate::images::{ImageConfig, ImageSet};
use crate::node::{HostNode, NodeView};
use crate::report::{
    CleanupOutcome, CleanupRecord, Environment, Finding, FindingLevel, Outcome, ScenarioReport,
    SessionRecord, StepOutcome, StepReport, TemplateRecord,
};
use crate::session::{LaunchSettings, Session, SessionOptions};
use crate::template::{self, RenderedTemplate, WorkspaceMode};
use anyhow::{Context, anyhow};
use futures_util::FutureExt;
use indicatif::MultiProgress;
use k8s_openapi::api::core::v1::PodTemplate;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

pub type ScenarioFuture<'a> = Pin<Box<dyn Future<Output = anyhow::Result<Verdict>> + Send + 'a>>;

/// A named check of one promise. The registry in `scenarios/` lists them all.
pub struct Scenario {
    /// `area::name`, mirroring `scenarios/src/<area>/<name>.rs`.
    pub name: &'static str,
    /// The promise of the design it checks, as the report states it.
    pub promise: &'static str,
    pub timeout: Duration,
    pub run: for<'a> fn(&'a mut Ctx) -> ScenarioFuture<'a>,
}

/// How a scenario body ends when it does not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    Skipped(String),
    Incompatible(String),
}

/// A broken promise: the scenario ran and the design's promise did not hold.
#[derive(Debug, thiserror::Error)]
#[error("{promise}: {evidence}")]
pub struct Broken {
    pub promise: String,
    pub evidence: String,
}

/// Fails the scenario: `promise` broke, `evidence` shows how.
pub fn broken(promise: impl Into<String>, evidence: impl Into<String>) -> anyhow::Error {
    Broken {
        promise: promise.into(),
        evidence: evidence.into(),
    }
    .into()
}

/// `Ok(())` when `holds`, else a [`Broken`] with the evidence.
pub fn promise(
    holds: bool,
    promise: &str,
    evidence: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    if holds {
        Ok(())
    } else {
        Err(broken(promise, evidence()))
    }
}

/// When to leave a scenario's Pods running for debugging.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Keep {
    Never,
    OnFailure,
    Always,
}

/// Settings of a run (from the command line).
#[derive(Debug, Clone, Serialize)]
pub struct RunConfig {
    pub template: PathBuf,
    pub prepare_script: PathBuf,
    pub main_container: String,
    pub daemon_container: String,
    pub workspace_mode: WorkspaceMode,
    pub base_image: String,
    pub worker_image: Option<String>,
    pub daemon_image: Option<String>,
    pub report_dir: PathBuf,
    pub keep: Keep,
    pub docker_ready_timeout_seconds: u32,
    pub pod_pids_limit: i64,
    pub scenario_timeout: Option<Duration>,
    /// Tools `worker::toolchain` requires of the worker image (a missing one fails it).
    pub required_tools: Vec<String>,
    /// Tools it checks when present (a missing one is a finding).
    pub optional_tools: Vec<String>,
    /// How often a failed, errored or timed-out scenario is run again.
    pub retries: u32,
    /// The claim `existing_claim` mode mounts.
    pub workspace_claim: Option<String>,
    /// The longest any one step of a scenario may take (`--step-timeout`).
    pub step_timeout: Option<Duration>,
    /// The whole run's budget (`--deadline`): past it, running scenarios time out (after
    /// their teardown) and the rest are not started.
    pub deadline: Option<Duration>,
    /// `--backend kind|kube`: where the cluster comes from and how sessions use it.
    pub cluster: Option<ClusterSettings>,
}

/// With a remote cluster the operator's images are used as they are (the harness never
/// pushes); their references must be ones the cluster can pull.
fn operator_images(config: &RunConfig) -> anyhow::Result<ImageSet> {
    let (Some(worker), Some(daemon)) = (&config.worker_image, &config.daemon_image) else {
        anyhow::bail!(
            "--backend kube runs your images: pass --worker-image and --daemon-image references the cluster can pull (this harness never pushes to a registry)"
        );
    };
    let record = |role: &str, reference: &str| crate::report::ImageRecord {
        role: role.into(),
        reference: reference.into(),
        id: None,
        built: false,
    };
    Ok(ImageSet {
        worker: worker.clone(),
        daemon: daemon.clone(),
        mock_agent: String::new(),
        records: vec![record("worker", worker), record("daemon", daemon)],
    })
}

/// Why a run stops early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Ctrl-C or SIGTERM.
    Signal,
    /// `--deadline` passed.
    Deadline,
}

/// Prepared once per run, by the first scenario that needs it.
pub struct RunEnv {
    pub backend: Arc<dyn Backend>,
    /// The Docker engine on this host (images are built there; the local backend runs Pods
    /// there; Kind runs its node there). None when a remote cluster is used without one.
    pub host_engine: Option<bollard::Docker>,
    pub images: ImageSet,
    pub launch: LaunchSettings,
    pub rendered: RenderedTemplate,
    pub environment: Environment,
    /// The node seen from outside the Pods, when the backend has one (leak ledger, evidence).
    pub node: Option<Arc<dyn NodeView>>,
    /// The cluster of the `kind`/`kube` backends (torn down when the run ends).
    pub cluster: Option<Arc<Cluster>>,
}

/// State shared by every trial of a run.
pub struct Run {
    pub id: String,
    pub config: RunConfig,
    pub template_text: String,
    pub prepare_text: String,
    pub progress: MultiProgress,
    /// The live status view (hidden unless the CLI shows it on a terminal).
    pub live: crate::progress::LiveView,
    pub started: Instant,
    pub started_at: SystemTime,
    env: tokio::sync::OnceCell<Result<Arc<RunEnv>, String>>,
    results: Mutex<Vec<ScenarioReport>>,
    setup: Mutex<Vec<StepReport>>,
    cancelled: AtomicBool,
    stop_reason: Mutex<Option<StopReason>>,
    cancel: tokio::sync::Notify,
}

impl Run {
    pub fn new(id: String, config: RunConfig, template_text: String, prepare_text: String) -> Self {
        Self {
            id,
            config,
            template_text,
            prepare_text,
            progress: MultiProgress::new(),
            live: crate::progress::LiveView::default(),
            started: Instant::now(),
            started_at: SystemTime::now(),
            env: tokio::sync::OnceCell::new(),
            results: Mutex::new(Vec::new()),
            setup: Mutex::new(Vec::new()),
            cancelled: AtomicBool::new(false),
            stop_reason: Mutex::new(None),
            cancel: tokio::sync::Notify::new(),
        }
    }

    /// Stops the run (Ctrl-C, SIGTERM): running scenarios tear down and end `cancelled`.
    pub fn cancel(&self) {
        self.stop(StopReason::Signal);
    }

    /// Stops the run for `reason`; the first reason given is the one reported.
    pub fn stop(&self, reason: StopReason) {
        if let Ok(mut current) = self.stop_reason.lock() {
            current.get_or_insert(reason);
        }
        self.cancelled.store(true, Ordering::SeqCst);
        self.cancel.notify_waiters();
    }

    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop_reason.lock().ok().and_then(|r| *r)
    }

    /// Stops the run with [`StopReason::Deadline`] once `config.deadline` has passed.
    pub async fn enforce_deadline(self: Arc<Self>) {
        if let Some(deadline) = self.config.deadline {
            tokio::time::sleep(deadline.saturating_sub(self.started.elapsed())).await;
            if !self.is_cancelled() {
                eprintln!(
                    "deadline: the run's budget of {deadline:?} is used up; tearing down what runs, starting nothing more"
                );
                self.stop(StopReason::Deadline);
            }
        }
    }

    fn stop_diagnosis(&self, started: bool) -> (Outcome, String) {
        match (self.stop_reason(), started) {
            (Some(StopReason::Deadline), true) => (
                Outcome::TimedOut,
                format!(
                    "the run's --deadline of {:?} passed; teardown ran",
                    self.config.deadline.unwrap_or_default()
                ),
            ),
            (Some(StopReason::Deadline), false) => (
                Outcome::Cancelled,
                format!(
                    "not started: the run's --deadline of {:?} had passed",
                    self.config.deadline.unwrap_or_default()
                ),
            ),
            (_, true) => (
                Outcome::Cancelled,
                "cancelled (Ctrl-C or SIGTERM); teardown ran".to_owned(),
            ),
            (_, false) => (
                Outcome::Cancelled,
                "the run was cancelled before this scenario started".to_owned(),
            ),
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    async fn cancelled(&self) {
        let notified = self.cancel.notified();
        if self.is_cancelled() {
            return;
        }
        notified.await;
    }

    pub fn results(&self) -> Vec<ScenarioReport> {
        self.results.lock().map(|r| r.clone()).unwrap_or_default()
    }

    pub fn setup_steps(&self) -> Vec<StepReport> {
        self.setup.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The run's environment if it was prepared (successfully).
    pub fn prepared_env(&self) -> Option<Arc<RunEnv>> {
        self.env.get().and_then(|r| r.as_ref().ok()).cloned()
    }

    pub fn report_folder(&self) -> PathBuf {
        self.config.report_dir.join(&self.id)
    }

    fn record_setup(&self, name: &str, started: Instant, result: &anyhow::Result<Value>) {
        let step = StepReport {
            name: name.to_owned(),
            outcome: if result.is_ok() {
                StepOutcome::Passed
            } else {
                StepOutcome::Errored
            },
            offset_ms: started.duration_since(self.started).as_millis() as u64,
            duration_ms: started.elapsed().as_millis() as u64,
            evidence: result.as_ref().ok().cloned().unwrap_or(Value::Null),
            error: result.as_ref().err().map(crate::error_chain_anyhow),
        };
        if let Ok(mut setup) = self.setup.lock() {
            setup.push(step);
        }
    }

    /// Connects to the engine, builds or reuses the images, renders the template.
    pub async fn env(&self) -> Result<Arc<RunEnv>, String> {
        self.env
            .get_or_init(|| async {
                self.prepare_env()
                    .await
                    .map(Arc::new)
                    .map_err(|e| crate::error_chain_anyhow(&e))
            })
            .await
            .clone()
    }

    async fn prepare_env(&self) -> anyhow::Result<RunEnv> {
        let cluster_settings = self.config.cluster.clone();
        if let Some(kind) = cluster_settings.as_ref().and_then(|c| c.kind.as_ref()) {
            let started = Instant::now();
            let version = crate::backend::kube::cluster::check_kind(&kind.kind_bin);
            self.record_setup(
                "kind",
                started,
                &version
                    .as_ref()
                    .map(|v| json!(v))
                    .map_err(|e| anyhow!("{e}")),
            );
            version?;
        }
        // An existing cluster is reached before anything is built: an unreachable one fails
        // in seconds, and nothing is created before it answered.
        let mut reached = None;
        if let Some(settings) = cluster_settings.as_ref().filter(|c| c.kind.is_none()) {
            let started = Instant::now();
            let opened = crate::backend::kube::cluster::open(
                settings.kubeconfig.as_deref(),
                settings.context.as_deref(),
            )
            .await;
            self.record_setup(
                "cluster",
                started,
                &opened
                    .as_ref()
                    .map(|r| json!({"context": r.context, "server": r.server, "version": r.server_version}))
                    .map_err(|e| anyhow!("{e}")),
            );
            reached = Some(opened?);
        }
        // Local and Kind need this host's engine (Kind's node runs there and the images are
        // built there); a remote cluster runs the operator's images and needs none.
        let engine = match &cluster_settings {
            Some(c) if c.kind.is_none() => None,
            _ => {
                let started = Instant::now();
                let engine = async {
                    let docker = connect_engine().await?;
                    let version = docker.version().await.context("engine version")?;
                    let info = docker.info().await.context("engine info")?;
                    anyhow::Ok((docker, version, info))
                }
                .await;
                self.record_setup(
                    "engine",
                    started,
                    &engine
                        .as_ref()
                        .map(
                            |(_, v, _)| json!({"version": v.version, "api_version": v.api_version}),
                        )
                        .map_err(|e| anyhow!("{e:#}")),
                );
                Some(engine?)
            }
        };

        let started = Instant::now();
        let binary = crate::images::mock_agent_binary(&crate::paths::workspace_root()).await;
        self.record_setup(
            "mock_agent_binary",
            started,
            &binary
                .as_ref()
                .map(|p| json!({"path": p}))
                .map_err(|e| anyhow!("{e:#}")),
        );
        let binary = binary?;

        let started = Instant::now();
        let images = match &engine {
            Some((docker, _, _)) => {
                let image_config = ImageConfig {
                    base_image: self.config.base_image.clone(),
                    worker_image: self.config.worker_image.clone(),
                    daemon_image: self.config.daemon_image.clone(),
                    images_dir: crate::paths::fixtures().join("images"),
                    mock_agent_binary: binary.clone(),
                };
                crate::images::ensure_images(docker, &image_config, &self.progress).await
            }
            None => operator_images(&self.config),
        };
        self.record_setup(
            "images",
            started,
            &images
                .as_ref()
                .map(|i| json!(i.records))
                .map_err(|e| anyhow!("{e:#}")),
        );
        let images = images?;

        let rendered = template::render(&self.template_text, &images.worker, &images.daemon);
        let parsed: PodTemplate = template::parse(&rendered.text)
            .map_err(|f| anyhow!("template: {}", join_findings(&f)))?;
        let agent_binary =
            Arc::new(std::fs::read(&binary).with_context(|| format!("read {}", binary.display()))?);
        let host_engine = engine.as_ref().map(|(d, _, _)| d.clone());
        let mut environment = Environment {
            engine_version: engine.as_ref().and_then(|(_, v, _)| v.version.clone()),
            engine_api_version: engine.as_ref().and_then(|(_, v, _)| v.api_version.clone()),
            kubernetes_version: None,
            kernel: engine
                .as_ref()
                .and_then(|(_, _, i)| i.kernel_version.clone()),
            operating_system: engine
                .as_ref()
                .and_then(|(_, _, i)| i.operating_system.clone()),
            architecture: engine.as_ref().and_then(|(_, _, i)| i.architecture.clone()),
            cgroup_version: engine.as_ref().and_then(|(_, _, i)| {
                i.cgroup_version
                    .as_ref()
                    .map(|v| if format!("{v:?}").contains('2') { 2 } else { 1 })
            }),
            cgroup_driver: engine.as_ref().and_then(|(_, _, i)| {
                i.cgroup_driver
                    .as_ref()
                    .map(|d| format!("{d:?}").to_lowercase())
            }),
            node_mtu: None,
            images: images.records.clone(),
            template: Some(TemplateRecord {
                path: self.config.template.display().to_string(),
                sha256: rendered.sha256.clone(),
            }),
        };
        let launch = |backend: Arc<dyn Backend>, namespace: String| LaunchSettings {
            backend,
            namespace,
            template: parsed.clone(),
            main_container: self.config.main_container.clone(),
            daemon_container: self.config.daemon_container.clone(),
            prepare_script: self.prepare_text.clone(),
            agent_binary: agent_binary.clone(),
            pod_ready_timeout: Duration::from_secs(60),
            prepare_timeout: Duration::from_secs(
                u64::from(self.config.docker_ready_timeout_seconds) + 120,
            ),
            connect_timeout: Duration::from_secs(30),
            profile_env: BTreeMap::from([(
                "DOCKER_READY_TIMEOUT_SECONDS".to_owned(),
                self.config.docker_ready_timeout_seconds.to_string(),
            )]),
            existing_claim: self.config.workspace_claim.clone(),
        };

        let Some(settings) = cluster_settings else {
            let Some((docker, _, _)) = engine else {
                anyhow::bail!("the local backend needs this host's engine");
            };
            let local = Arc::new(LocalBackend::new(
                docker,
                images.mock_agent.clone(),
                vec!["/opt/kandev/agentctl".into(), "bridge".into()],
                self.config.pod_pids_limit,
            ));
            environment.node_mtu = std::fs::read_to_string("/sys/class/net/docker0/mtu")
                .ok()
                .and_then(|m| m.trim().parse().ok());
            let node: Option<Arc<dyn NodeView>> = local.cgroups().cloned().map(|cgroups| {
                Arc::new(HostNode {
                    cgroups,
                    proc_root: PathBuf::from("/proc"),
                    scope: crate::backend::local::plan::CGROUP_ROOT.into(),
                    description: "this host (the local engine runs the Pods)".into(),
                }) as Arc<dyn NodeView>
            });
            let backend: Arc<dyn Backend> = local;
            return Ok(RunEnv {
                backend: backend.clone(),
                host_engine,
                images,
                launch: launch(backend, crate::backend::local::LOCAL_NAMESPACE.into()),
                rendered,
                environment,
                node,
                cluster: None,
            });
        };

        // A cluster: reach it (fast failure, nothing created), set up the namespace and the
        // executor identity, load images into Kind, then the preflight.
        let started = Instant::now();
        let connected = match reached {
            Some(reached) => {
                Cluster::set_up(
                    reached,
                    None,
                    settings.namespace.as_deref(),
                    self.config.workspace_mode,
                    &self.id,
                )
                .await
            }
            None => {
                Cluster::connect(
                    &settings.source(&self.id, &self.report_folder()),
                    settings.namespace.as_deref(),
                    self.config.workspace_mode,
                    &self.id,
                )
                .await
            }
        };
        self.record_setup(
            "cluster_setup",
            started,
            &connected
                .as_ref()
                .map(|c| json!({"context": c.context, "server": c.server, "version": c.server_version, "namespace": c.namespace}))
                .map_err(|e| anyhow!("{e}")),
        );
        let mut cluster = connected?;
        let prepared = async {
            if let Some(kind) = &cluster.kind {
                let started = Instant::now();
                let refs = vec![images.worker.clone(), images.daemon.clone()];
                let loaded = kind.load(&refs);
                self.record_setup(
                    "kind_load",
                    started,
                    &loaded
                        .as_ref()
                        .map(|()| json!(refs))
                        .map_err(|e| anyhow!("{e}")),
                );
                loaded?;
            }
            let started = Instant::now();
            let probe_identity = crate::identity::SessionIdentity::new(&self.id, "preflight", 0);
            let mut probe = crate::compose::compose_pod(&crate::compose::ComposeInput {
                template: &parsed,
                identity: &probe_identity,
                namespace: &cluster.namespace,
                main_container: &self.config.main_container,
                arch: crate::compose::Arch::of_this_machine(),
                workspace: crate::compose::WorkspaceSource::EmptyDir,
                create_nonce: &crate::identity::create_nonce(),
            })?;
            probe
                .metadata
                .labels
                .get_or_insert_default()
                .extend(probe_identity.harness_labels());
            let checked = cluster.preflight(&probe, self.config.workspace_mode).await;
            self.record_setup(
                "preflight",
                started,
                &checked
                    .as_ref()
                    .map(Clone::clone)
                    .map_err(|e| anyhow!("{e}")),
            );
            checked?;
            anyhow::Ok(())
        }
        .await;
        if let Err(e) = prepared {
            cluster.teardown().await;
            return Err(e);
        }
        let backend = crate::backend::kube::KubeBackend::new(
            cluster.session.clone(),
            &cluster.namespace,
            if cluster.kind.is_some() {
                "kind"
            } else {
                "kube"
            },
            &self.config.main_container,
            settings.managed_pvc(),
        )
        .with_admin(cluster.admin.clone());
        environment.kubernetes_version = Some(cluster.server_version.clone());
        let node = match cluster.node_view(host_engine.as_ref()).await {
            Some(view) => Some(view),
            None if settings.node_inspector => {
                Some(Arc::new(crate::inspector::ClusterInspector::new(
                    cluster.admin.clone(),
                    &cluster.namespace,
                    settings
                        .node_inspector_image
                        .as_deref()
                        .unwrap_or(&images.daemon),
                    &self.id,
                )) as Arc<dyn NodeView>)
            }
            None => None,
        };
        let backend: Arc<dyn Backend> = Arc::new(backend);
        let namespace = cluster.namespace.clone();
        // A Kind node on this host: the host engine is not the one running the Pods, but it
        // must not see the session's images either.
        Ok(RunEnv {
            backend: backend.clone(),
            host_engine,
            images,
            launch: launch(backend, namespace),
            rendered,
            environment,
            node,
            cluster: Some(Arc::new(cluster)),
        })
    }

    /// Runs one scenario to its report, teardown included; with `--retries N` a failed,
    /// errored or timed-out attempt is run again (fresh sessions), and a later pass is flaky.
    pub async fn run_scenario(self: &Arc<Self>, scenario: &Scenario) -> ScenarioReport {
        self.live.started(scenario.name);
        let mut previous = Vec::new();
        let mut attempt = 1;
        loop {
            let mut report = self.attempt(scenario).await;
            if should_retry(
                report.outcome,
                attempt,
                self.config.retries,
                self.is_cancelled(),
            ) {
                previous.push(format!(
                    "attempt {attempt}: {}: {}",
                    report.outcome.as_str(),
                    report.diagnosis.clone().unwrap_or_default()
                ));
                attempt += 1;
                continue;
            }
            report.attempts = attempt;
            report.flaky = report.outcome == Outcome::Passed && attempt > 1;
            report.previous_attempts = previous;
            if let Ok(mut results) = self.results.lock() {
                results.push(report.clone());
            }
            self.live.finished(&report);
            return report;
        }
    }

    /// One attempt of a scenario, teardown included.
    async fn attempt(self: &Arc<Self>, scenario: &Scenario) -> ScenarioReport {
        let started = Instant::now();
        let started_at = crate::report::rfc3339(SystemTime::now());
        let mut report = ScenarioReport {
            name: scenario.name.into(),
            promise: scenario.promise.into(),
            outcome: Outcome::Errored,
            diagnosis: None,
            started_at,
            duration_ms: 0,
            steps: Vec::new(),
            findings: Vec::new(),
            sessions: Vec::new(),
            cleanup: Vec::new(),
            artifacts: Vec::new(),
            attempts: 1,
            flaky: false,
            previous_attempts: Vec::new(),
            nested_inventory: Vec::new(),
            leaks: Vec::new(),
        };
        if self.is_cancelled() {
            let (outcome, diagnosis) = self.stop_diagnosis(false);
            report.outcome = outcome;
            report.diagnosis = Some(diagnosis);
            return self.finish(report, started);
        }
        let env = match self.env().await {
            Ok(env) => env,
            Err(e) => {
                report.diagnosis = Some(format!("environment: {e}"));
                return self.finish(report, started);
            }
        };
        // The scenario's own time starts once the shared environment is ready.
        let started = Instant::now();
        report.started_at = crate::report::rfc3339(SystemTime::now());
        let mut ctx = Ctx::new(self.clone(), env.clone(), scenario.name);
        let timeout = self.config.scenario_timeout.unwrap_or(scenario.timeout);
        let current_step = ctx.current_step.clone();
        let outcome = {
            let body = AssertUnwindSafe((scenario.run)(&mut ctx)).catch_unwind();
            tokio::select! {
                result = tokio::time::timeout(timeout, body) => match result {
                    Ok(Ok(Ok(verdict))) => Ok(verdict),
                    Ok(Ok(Err(error))) => Err(classify(&error)),
                    Ok(Err(panic)) => Err((Outcome::Errored, format!("the scenario panicked: {}", panic_message(&panic)))),
                    Err(_) => Err((Outcome::TimedOut, format!("no result within the scenario's deadline of {timeout:?}"))),
                },
                step = step_overrun(&current_step, self.config.step_timeout) => Err((
                    Outcome::TimedOut,
                    format!("step {step:?} ran past the per-step deadline of {:?}", self.config.step_timeout.unwrap_or_default()),
                )),
                () = self.cancelled() => Err(self.stop_diagnosis(true)),
            }
        };
        match outcome {
            Ok(Verdict::Passed) => {
                ctx.close_step(StepOutcome::Passed, None);
                report.outcome = Outcome::Passed;
            }
            Ok(Verdict::Skipped(reason)) => {
                ctx.close_step(StepOutcome::Passed, None);
                report.outcome = Outcome::Skipped;
                report.diagnosis = Some(reason);
            }
            Ok(Verdict::Incompatible(reason)) => {
                ctx.close_step(StepOutcome::Incompatible, Some(reason.clone()));
                report.outcome = Outcome::Incompatible;
                report.diagnosis = Some(reason);
            }
            Err((outcome, diagnosis)) => {
                let step = match outcome {
                    Outcome::Failed => StepOutcome::Failed,
                    Outcome::Incompatible => StepOutcome::Incompatible,
                    _ => StepOutcome::Errored,
                };
                ctx.close_step(step, Some(diagnosis.clone()));
                report.outcome = outcome;
                report.diagnosis = Some(diagnosis);
            }
        }
        if report.outcome != Outcome::Passed {
            report.artifacts = ctx.collect_evidence().await;
        }
        let keep = match self.config.keep {
            Keep::Always => true,
            Keep::OnFailure => !report.outcome.is_acceptable(),
            Keep::Never => false,
        };
        // Every Pod the scenario made (also those it deleted itself), for the ledger.
        let mut pods: Vec<(String, String)> = ctx
            .sessions
            .iter()
            .map(|s| (s.pod_name.clone(), s.pod_uid.clone()))
            .chain(ctx.cleanup.pods().into_iter().map(|p| (p.name, p.uid)))
            .collect();
        pods.sort();
        pods.dedup();
        if !keep {
            if let Some(node) = &env.node {
                for (_, uid) in &pods {
                    node.track_pod(uid).await;
                }
            }
            let daemon = self.config.daemon_container.as_str();
            report.nested_inventory = crate::ledger::nested_inventories(
                env.backend.as_ref(),
                &ctx.cleanup.pods(),
                daemon,
            )
            .await;
        }
        report.cleanup = ctx
            .cleanup
            .teardown(env.backend.as_ref(), Duration::from_secs(120), keep)
            .await;
        if !keep {
            // Objects of a create that was in flight when the body stopped (cancel, timeout)
            // never reached the stack: sweep by this run's and scenario's labels, and record
            // what had to be swept so that it is visible.
            let scenario_label = scenario.name.replace("::", ".");
            let selector = [
                (crate::identity::LABEL_RUN, self.id.as_str()),
                (crate::identity::LABEL_SCENARIO, scenario_label.as_str()),
            ];
            match env.backend.remove_labelled(&selector, false).await {
                Ok(swept) => report
                    .cleanup
                    .extend(swept.into_iter().map(|object| CleanupRecord {
                        object: format!("{object} (swept by label: not on the cleanup stack)"),
                        outcome: CleanupOutcome::Removed,
                        duration_ms: 0,
                        error: None,
                    })),
                Err(e) => report.cleanup.push(CleanupRecord {
                    object: format!(
                        "objects labelled {}={} {}={scenario_label}",
                        crate::identity::LABEL_RUN,
                        self.id,
                        crate::identity::LABEL_SCENARIO
                    ),
                    outcome: CleanupOutcome::Failed,
                    duration_ms: 0,
                    error: Some(crate::error_chain(&e)),
                }),
            }
        }
        if !keep {
            let scenario_label = scenario.name.replace("::", ".");
            report.leaks = crate::ledger::remains_after_teardown(
                env.backend.as_ref(),
                env.node.as_deref(),
                &[
                    (crate::identity::LABEL_RUN, self.id.as_str()),
                    (crate::identity::LABEL_SCENARIO, scenario_label.as_str()),
                ],
                &pods,
                &report.nested_inventory,
                Duration::from_secs(3),
            )
            .await;
            if !report.leaks.is_empty() && report.outcome.is_acceptable() {
                report.diagnosis = Some(format!(
                    "leaked: {} outlived teardown: {}",
                    report.leaks.len(),
                    report.leaks.join("; ")
                ));
                report.outcome = Outcome::Leaked;
            }
        }
        if keep {
            for pod in ctx.cleanup_pods_kept() {
                eprintln!(
                    "kept {}: docker exec -it {}-{} sh   (remove later: kandev-acceptance gc --run {})",
                    pod, pod, self.config.main_container, self.id
                );
            }
        }
        report.steps = std::mem::take(&mut ctx.steps);
        report.findings = std::mem::take(&mut ctx.findings);
        report.sessions = std::mem::take(&mut ctx.sessions);
        self.finish(report, started)
    }

    fn finish(&self, mut report: ScenarioReport, started: Instant) -> ScenarioReport {
        report.duration_ms = started.elapsed().as_millis() as u64;
        report
    }
}

/// Resolves with the name of the open step once it has run longer than `limit`; never
/// without a limit.
async fn step_overrun(
    current: &Mutex<Option<(String, Instant)>>,
    limit: Option<Duration>,
) -> String {
    let Some(limit) = limit else {
        return std::future::pending().await;
    };
    loop {
        let open = current.lock().ok().and_then(|c| c.clone());
        let wait = match open {
            Some((name, started)) if started.elapsed() >= limit => return name,
            Some((_, started)) => limit - started.elapsed(),
            None => limit,
        };
        tokio::time::sleep(wait.min(Duration::from_millis(500))).await;
    }
}

/// Whether an attempt that ended with `outcome` is run again: only outcomes a rerun can change,
/// never after cancellation, at most `retries` times.
pub fn should_retry(outcome: Outcome, attempt: u32, retries: u32, cancelled: bool) -> bool {
    matches!(
        outcome,
        Outcome::Failed | Outcome::Errored | Outcome::TimedOut
    ) && !cancelled
        && attempt <= retries
}

fn join_findings(findings: &[template::TemplateFinding]) -> String {
    findings
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "unknown panic".into())
}

/// A broken promise anywhere in the chain fails the scenario; anything else is an error of
/// the infrastructure (the promise could not be judged).
fn classify(error: &anyhow::Error) -> (Outcome, String) {
    let text = crate::error_chain_anyhow(error);
    // Admission that changed what Kandev owns breaks the promise that the Pod runs as
    // composed: a failure of the cluster under test, not of the harness.
    let admission_mutated = |e: &(dyn std::error::Error + 'static)| {
        e.downcast_ref::<crate::backend::kube::AdmissionMutated>()
            .is_some()
    };
    if error.chain().any(|e| e.downcast_ref::<Broken>().is_some())
        || error.chain().any(admission_mutated)
    {
        (Outcome::Failed, text)
    } else if error.chain().any(|e| {
        e.downcast_ref::<crate::session::WorkerImageLacks>()
            .is_some()
    }) {
        (Outcome::Incompatible, text)
    } else {
        (Outcome::Errored, text)
    }
}

/// The nested daemon's state for a failed scenario's evidence: `info`, every container
/// (running or not) with the tail of its logs, volumes and networks.
const NESTED_DAEMON_STATE: &str = r#"export DOCKER_HOST="${DOCKER_HOST:-unix:///run/docker/docker.sock}"
docker info 2>&1; echo; docker ps -a --no-trunc 2>&1; echo
for c in $(docker ps -aq 2>/dev/null); do
  echo "== logs of nested container $c (last 200 lines)"; docker logs --tail 200 "$c" 2>&1; echo
done
docker volume ls 2>&1; docker network ls 2>&1
"#;

struct OpenStep {
    name: String,
    started: Instant,
    evidence: serde_json::Map<String, Value>,
    outcome: Option<StepOutcome>,
}

/// What a scenario body works with: the run's environment, its steps and evidence, and its
/// cleanup stack.
pub struct Ctx {
    pub run: Arc<Run>,
    pub env: Arc<RunEnv>,
    pub scenario: &'static str,
    pub cleanup: Arc<CleanupStack>,
    /// The open step and when it started, watched for `--step-timeout`.
    current_step: Arc<Mutex<Option<(String, Instant)>>>,
    started: Instant,
    steps: Vec<StepReport>,
    open: Option<OpenStep>,
    findings: Vec<Finding>,
    sessions: Vec<SessionRecord>,
    ordinal: usize,
}

impl Ctx {
    fn new(run: Arc<Run>, env: Arc<RunEnv>, scenario: &'static str) -> Self {
        Self {
            run,
            env,
            scenario,
            cleanup: Arc::new(CleanupStack::default()),
            current_step: Arc::new(Mutex::new(None)),
            started: Instant::now(),
            steps: Vec::new(),
            open: None,
            findings: Vec::new(),
            sessions: Vec::new(),
            ordinal: 0,
        }
    }

    fn close_step(&mut self, default: StepOutcome, error: Option<String>) {
        if let Ok(mut current) = self.current_step.lock() {
            *current = None;
        }
        if let Some(open) = self.open.take() {
            let outcome = open.outcome.unwrap_or(default);
            self.steps.push(StepReport {
                name: open.name,
                outcome,
                offset_ms: open.started.duration_since(self.started).as_millis() as u64,
                duration_ms: open.started.elapsed().as_millis() as u64,
                evidence: Value::Object(open.evidence),
                error: if outcome == StepOutcome::Passed {
                    None
                } else {
                    error
                },
            });
        }
    }

    /// Starts a step (the previous one ends as passed).
    pub fn step(&mut self, name: &str) {
        self.close_step(StepOutcome::Passed, None);
        tracing::info!(scenario = self.scenario, step = name, "step");
        if let Ok(mut current) = self.current_step.lock() {
            *current = Some((name.to_owned(), Instant::now()));
        }
        self.open = Some(OpenStep {
            name: name.to_owned(),
            started: Instant::now(),
            evidence: serde_json::Map::new(),
            outcome: None,
        });
    }

    /// Attaches evidence to the current step.
    pub fn evidence(&mut self, key: &str, value: impl Serialize) {
        if self.open.is_none() {
            self.step("evidence");
        }
        if let Some(open) = self.open.as_mut() {
            open.evidence.insert(
                key.to_owned(),
                serde_json::to_value(value).unwrap_or(Value::Null),
            );
        }
    }

    /// Marks the current step incompatible (the scenario may still pass).
    pub fn step_incompatible(&mut self) {
        if let Some(open) = self.open.as_mut() {
            open.outcome = Some(StepOutcome::Incompatible);
        }
    }

    pub fn finding(
        &mut self,
        level: FindingLevel,
        code: &str,
        message: impl Into<String>,
        evidence: Value,
    ) {
        self.findings.push(Finding {
            level,
            code: code.to_owned(),
            message: message.into(),
            evidence,
        });
    }

    /// A fresh Kandev identity for the next session of this scenario.
    pub fn identity(&mut self) -> SessionIdentity {
        self.ordinal += 1;
        SessionIdentity::new(&self.run.id, self.scenario, self.ordinal)
    }

    pub fn template(&self) -> &PodTemplate {
        &self.env.launch.template
    }

    /// The identity (given, or a fresh one) and the options with the run's defaults filled in.
    fn resolve(&mut self, mut options: SessionOptions) -> (SessionIdentity, SessionOptions) {
        let identity = match &options.identity {
            Some(identity) => identity.clone(),
            None => self.identity(),
        };
        options.workspace_mode = options
            .workspace_mode
            .or(Some(self.run.config.workspace_mode));
        (identity, options)
    }

    /// Launches a session through all of Kandev's stages.
    pub async fn launch(&mut self, options: SessionOptions) -> anyhow::Result<Session> {
        let mut sessions = self.launch_many(vec![options]).await?;
        sessions
            .pop()
            .ok_or_else(|| anyhow::anyhow!("no session was launched"))
    }

    /// Launches several sessions at once (each through all stages); all or an error.
    pub async fn launch_many(
        &mut self,
        options: Vec<SessionOptions>,
    ) -> anyhow::Result<Vec<Session>> {
        let prepared: Vec<_> = options.into_iter().map(|o| self.resolve(o)).collect();
        let launches = prepared.iter().map(|(identity, o)| {
            Session::launch(&self.env.launch, &self.cleanup, identity.clone(), o)
        });
        let results = futures_util::future::join_all(launches).await;
        let mut sessions = Vec::new();
        for result in results {
            let session = result?;
            self.sessions.push(session.record());
            sessions.push(session);
        }
        self.note_unenforced(&sessions);
        let stages: Vec<_> = sessions
            .iter()
            .map(|s| json!({"pod": s.pod.name, "stages_ms": s.stages}))
            .collect();
        self.evidence("launch_stages_ms", stages);
        Ok(sessions)
    }

    /// Reports, once per scenario, what the local backend accepted without enforcing it.
    fn note_unenforced(&mut self, sessions: &[Session]) {
        for session in sessions {
            for note in crate::backend::local::plan::unenforced(&session.pod_spec) {
                if !self.findings.iter().any(|f| f.message == note) {
                    self.finding(
                        FindingLevel::Info,
                        "local.not_enforced",
                        note,
                        json!({"pod": session.pod.name}),
                    );
                }
            }
        }
    }

    /// Creates a session's storage and Pod only (the scenario drives the bootstrap).
    pub async fn create_session(&mut self, options: SessionOptions) -> anyhow::Result<Session> {
        let (identity, options) = self.resolve(options);
        let session = Session::create(&self.env.launch, &self.cleanup, identity, &options).await?;
        self.sessions.push(session.record());
        self.note_unenforced(std::slice::from_ref(&session));
        Ok(session)
    }

    fn cleanup_pods_kept(&self) -> Vec<String> {
        self.sessions.iter().map(|s| s.pod_name.clone()).collect()
    }

    /// Before teardown of a scenario that did not pass: container logs and the nested
    /// daemon's state, under `reports/<run>/<scenario>/`, size-capped.
    async fn collect_evidence(&self) -> Vec<String> {
        let folder = self.run.report_folder();
        let scenario_dir = self.scenario.replace("::", "-");
        let dir = folder.join(&scenario_dir);
        if std::fs::create_dir_all(&dir).is_err() {
            return Vec::new();
        }
        let mut written = Vec::new();
        let backend = &self.env.backend;
        let mut save = |name: String, text: String| {
            let text: String = text.chars().take(1 << 20).collect();
            if std::fs::write(dir.join(&name), text).is_ok() {
                written.push(format!("{scenario_dir}/{name}"));
            }
        };
        for pod in self.cleanup.pods() {
            let states = backend.container_states(&pod).await.unwrap_or_default();
            save(format!("{}.containers.json", pod.name), serde_json::to_string_pretty(&states.iter().map(|s| json!({"name": s.name, "running": s.running, "restarts": s.restarts, "exit_code": s.exit_code})).collect::<Vec<_>>()).unwrap_or_default());
            for state in &states {
                if let Ok(logs) = backend.logs(&pod, &state.name).await {
                    save(format!("{}.{}.log", pod.name, state.name), logs);
                }
            }
            // Kubernetes: the Pod object, its events, previous container logs.
            for (suffix, text) in backend.diagnostics(&pod).await {
                save(format!("{}.{suffix}", pod.name), text);
            }
            let daemon = crate::backend::ExecRequest::new(
                &self.run.config.daemon_container,
                &["sh", "-c", NESTED_DAEMON_STATE],
            )
            .timeout(Duration::from_secs(30));
            if let Ok(out) = backend.exec(&pod, daemon).await {
                save(
                    format!("{}.daemon-state.txt", pod.name),
                    format!("{}{}", out.stdout_text(), out.stderr_text()),
                );
            }
            if let Some(node) = &self.env.node
                && let Ok(Some(path)) = node.pod_cgroup(&pod.uid).await
                && let Ok(reading) = node.read_cgroup(&path).await
            {
                save(
                    format!("{}.cgroup.json", pod.name),
                    serde_json::to_string_pretty(
                        &json!({"node": node.describe(), "cgroup": path, "reading": reading}),
                    )
                    .unwrap_or_default(),
                );
            }
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_mutated_by_admission_fails_the_scenario() {
        let mutated = crate::backend::kube::AdmissionMutated {
            what: "pod",
            name: "kandev-0123456789abcdef".into(),
            uid: "u".into(),
            mismatches: vec![crate::admission::AdmissionMismatch {
                path: "spec.containers[docker-engine].volumeMounts".into(),
                message: "the workspace grant was removed".into(),
            }],
        };
        let error = anyhow::Error::new(crate::backend::BackendError::Other {
            operation: "admission of the Pod".into(),
            source: mutated.into(),
        })
        .context("pod_ready: create the Pod");
        let (outcome, text) = classify(&error);
        assert_eq!(outcome, Outcome::Failed, "{text}");
        assert!(text.contains("the workspace grant was removed"), "{text}");
        let plain = anyhow::anyhow!("connection refused").context("pod_ready: create the Pod");
        assert_eq!(classify(&plain).0, Outcome::Errored);
    }

    #[test]
    fn retries_only_what_a_rerun_can_change() {
        assert!(should_retry(Outcome::Failed, 1, 1, false));
        assert!(should_retry(Outcome::TimedOut, 2, 2, false));
        assert!(should_retry(Outcome::Errored, 1, 3, false));
        assert!(
            !should_retry(Outcome::Failed, 2, 1, false),
            "the retries are used up"
        );
        assert!(
            !should_retry(Outcome::Failed, 1, 0, false),
            "no retries asked for"
        );
        assert!(
            !should_retry(Outcome::Failed, 1, 3, true),
            "never after cancellation"
        );
        for settled in [
            Outcome::Passed,
            Outcome::Skipped,
            Outcome::Incompatible,
            Outcome::Cancelled,
        ] {
            assert!(!should_retry(settled, 1, 3, false), "{settled:?}");
        }
    }
}
