//! The scenario API: what a scenario body works with (steps, evidence, findings, sessions,
//! waits) and read access to what the run prepared.

use super::{Run, RunEnv};
use crate::backend::Backend;
use crate::config::RunConfig;
use crate::host::HostEngine;
use crate::host::images::ImageSet;
use crate::node::NodeView;
use crate::pod::identity::SessionIdentity;
use crate::session::cleanup::{CleanupStack, CleanupTarget};
use crate::session::timing::LaunchRecord;
use crate::session::{Reconnected, Session, SessionInventory, SessionOptions};
use k8s_openapi::api::core::v1::PodTemplate;
use kandev_report::{Finding, FindingLevel, SessionRecord, StepOutcome, StepReport};
use serde::Serialize;
use serde_json::{Value, json};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

struct OpenStep {
    name: String,
    started: Instant,
    evidence: serde_json::Map<String, Value>,
    outcome: Option<StepOutcome>,
}

/// What a scenario body works with: its steps and evidence, its sessions, and read access to
/// what the run prepared. Scenarios reach the backend, the node and this host's engine only
/// through these methods.
pub struct Ctx {
    pub(super) run: Arc<Run>,
    pub(super) env: Arc<RunEnv>,
    scenario: &'static str,
    pub(super) cleanup: Arc<CleanupStack>,
    /// The open step and when it started, watched for `--step-timeout`.
    pub(super) current_step: Arc<Mutex<Option<(String, Instant)>>>,
    started: Instant,
    /// When the scenario's own deadline passes.
    deadline: Instant,
    pub(super) steps: Vec<StepReport>,
    open: Option<OpenStep>,
    pub(super) findings: Vec<Finding>,
    pub(super) sessions: Vec<SessionRecord>,
    ordinal: usize,
}

/// What a wait inside a scenario leaves of the scenario's budget, so that its own typed
/// timeout (naming what it waited for) is reported rather than the scenario's deadline.
const WAIT_RESERVE: Duration = Duration::from_secs(5);
/// How often [`Ctx::wait_for`] probes.
const WAIT_INTERVAL: Duration = Duration::from_millis(200);

impl Ctx {
    pub(super) fn new(
        run: Arc<Run>,
        env: Arc<RunEnv>,
        scenario: &'static str,
        budget: Duration,
    ) -> Self {
        let started = Instant::now();
        Self {
            run,
            env,
            scenario,
            cleanup: Arc::new(CleanupStack::default()),
            current_step: Arc::new(Mutex::new(None)),
            started,
            deadline: started + budget,
            steps: Vec::new(),
            open: None,
            findings: Vec::new(),
            sessions: Vec::new(),
            ordinal: 0,
        }
    }

    /// `area::name` of the running scenario.
    pub fn scenario(&self) -> &'static str {
        self.scenario
    }

    /// The run's id (labels, unique tags).
    pub fn run_id(&self) -> &str {
        &self.run.id
    }

    /// The run's settings, read-only.
    pub fn config(&self) -> &RunConfig {
        &self.run.config
    }

    /// The backend running this run's Pods.
    pub fn backend(&self) -> Arc<dyn Backend> {
        self.env.backend.clone()
    }

    /// The node seen from outside the Pods, when the backend has one.
    pub fn node(&self) -> Option<Arc<dyn NodeView>> {
        self.env.node.clone()
    }

    /// This host's engine, when the backend uses one (never the engine of a session).
    pub fn host_engine(&self) -> Option<&HostEngine> {
        self.env.host_engine.as_ref()
    }

    /// The images the run's Pods use.
    pub fn images(&self) -> &ImageSet {
        &self.env.images
    }

    /// Removes `target` when the scenario ends (LIFO, UID-checked), whatever its outcome.
    pub fn on_teardown(&self, target: CleanupTarget) {
        self.cleanup.push(target);
    }

    /// What is left of the scenario's budget.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Polls `probe` until it answers `Some`, spending what is left of the scenario's budget
    /// (less a reserve, so the timeout reported is this one: a [`WaitTimedOut`](crate::wait::WaitTimedOut) naming `what`).
    pub async fn wait_for<T, F, Fut>(&self, what: &str, probe: F) -> anyhow::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<Option<T>>>,
    {
        self.wait_within(what, Duration::MAX, probe).await
    }

    /// [`Ctx::wait_for`] bounded by `limit` as well (a promise with its own bound, such as
    /// kubelet housekeeping seconds after a delete).
    pub async fn wait_within<T, F, Fut>(
        &self,
        what: &str,
        limit: Duration,
        probe: F,
    ) -> anyhow::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<Option<T>>>,
    {
        let budget = self.remaining().saturating_sub(WAIT_RESERVE).min(limit);
        crate::wait::until(what, budget, WAIT_INTERVAL, probe).await
    }

    pub(super) fn close_step(&mut self, default: StepOutcome, error: Option<String>) {
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

    /// Reports, once per scenario, what the backend accepted without enforcing it.
    fn note_unenforced(&mut self, sessions: &[Session]) {
        for session in sessions {
            // `<backend>.not_enforced`: `local.not_enforced` on the local engine.
            let code = format!("{}.not_enforced", self.env.backend.name());
            for note in self.env.backend.unenforced(&session.pod_spec) {
                if !self.findings.iter().any(|f| f.message == note) {
                    self.finding(
                        FindingLevel::Info,
                        &code,
                        note,
                        json!({"pod": session.pod.name}),
                    );
                }
            }
        }
    }

    /// Replaces `session`'s missing Pod as Kandev does ([`Session::replace_missing`]): from the
    /// session's recorded snapshot, with `current_profile` as the profile's template is now
    /// (an edited profile; `None`: unchanged), which the replacement must not use.
    pub async fn replace(
        &mut self,
        session: &Session,
        current_profile: Option<PodTemplate>,
    ) -> anyhow::Result<Session> {
        let mut current = self.env.launch.clone();
        if let Some(template) = current_profile {
            current.template = template;
        }
        let replacement = session.replace_missing(&current, &self.cleanup).await?;
        self.sessions.push(replacement.record());
        self.note_unenforced(std::slice::from_ref(&replacement));
        self.evidence(
            "replacement_stages_ms",
            json!({"pod": replacement.pod.name, "stages_ms": replacement.stages}),
        );
        Ok(replacement)
    }

    /// The launch timing records the run wrote for `session`'s task session (Kandev's
    /// `kubernetes.launch.*` records in its backend log), in order.
    pub fn launch_records(&self, session: &SessionIdentity) -> Vec<LaunchRecord> {
        self.env
            .launch
            .launch_log
            .for_session(&session.task_id, &session.session_id)
    }

    /// A backend restart under a running session: everything the backend held of it is
    /// dropped except its inventory row (serialized, as Kandev's database holds it), and
    /// Kandev's reconnect reaches the Pod from that row alone ([`Session::reattach`]). The
    /// row is evidence, its token and nonce redacted and its profile environment by key only.
    pub async fn restart_backend(
        &mut self,
        session: Session,
    ) -> anyhow::Result<(Session, Reconnected)> {
        let row = serde_json::to_string(&session.inventory())?;
        drop(session);
        let inventory: SessionInventory = serde_json::from_str(&row)?;
        let mut shown = serde_json::to_value(&inventory)?;
        for secret in ["token", "bootstrap_nonce"] {
            if let Some(v) = shown.get_mut(secret)
                && !v.is_null()
            {
                *v = json!("<redacted>");
            }
        }
        // The profile's environment may hold credentials: its keys only.
        if let Some(env) = shown.get_mut("session_env") {
            *env = json!(inventory.session_env.keys().collect::<Vec<_>>());
        }
        if let Some(snapshot) = shown.get_mut("snapshot") {
            *snapshot = json!({"profile_hash": inventory.snapshot.profile_hash, "template_hash": inventory.snapshot.template_hash});
        }
        self.evidence("inventory_row", shown);
        Session::reattach(&self.env.launch, inventory).await
    }

    /// Creates a session's storage and Pod only (the scenario drives the bootstrap).
    pub async fn create_session(&mut self, options: SessionOptions) -> anyhow::Result<Session> {
        let (identity, options) = self.resolve(options);
        let session = Session::create(&self.env.launch, &self.cleanup, identity, &options).await?;
        self.sessions.push(session.record());
        self.note_unenforced(std::slice::from_ref(&session));
        Ok(session)
    }
}
