//! The runner: a run's state and cancellation, and its scenarios as libtest-mimic trials,
//! bridged to one tokio runtime on purpose.
//!
//! Rooms: [`environment`] prepares what every scenario shares (once, lazily, so `--list` and
//! filtered-out runs touch nothing); [`attempt`] runs one scenario to its report, teardown
//! and leak ledger included; `judge` classifies how its body ended, once, and states that
//! as its outcome; [`scenario`] and [`context`] are the scenario API; [`evidence`] collects
//! what a scenario that did not pass leaves for people to read; [`ledger`] finds what a
//! scenario left behind; [`live`] is the console's view of a run; `setup_log` records the
//! run's set-up steps; [`cost`] meters the run's calls and CPU; [`ran_images`] records what
//! the task Pods' containers ran; [`finish`] tears down and `assemble` builds the report from
//! the run's parts.

pub(crate) mod assemble;
pub mod attempt;
pub mod context;
pub mod cost;
pub mod environment;
pub mod evidence;
pub mod finish;
pub(crate) mod judge;
pub mod ledger;
pub mod live;
pub mod ran_images;
pub mod scenario;
pub(crate) mod setup_log;

pub use crate::config::{Keep, RunConfig};
pub use context::Ctx;
pub use environment::RunEnv;
pub use scenario::{
    Broken, Check, Scenario, ScenarioFuture, Twin, Verdict, broken, broken_by, not_judged,
    not_judged_lacking, promise, raise_platform_fault,
};

use crate::pod::template::TemplateFile;
use indicatif::MultiProgress;
use kandev_report::{ScenarioReport, Selection, StepReport};
use setup_log::SetupLog;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

/// Why a run stops early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// Ctrl-C or SIGTERM.
    Signal,
    /// `--deadline` passed.
    Deadline,
}

/// State shared by every trial of a run.
pub struct Run {
    pub id: String,
    pub config: RunConfig,
    /// The run's template, read and parsed once.
    pub template: TemplateFile,
    pub prepare_text: String,
    pub progress: MultiProgress,
    /// The live status view (hidden unless the CLI shows it on a terminal).
    pub live: crate::runner::live::LiveView,
    pub started: Instant,
    pub started_at: SystemTime,
    env: tokio::sync::OnceCell<Result<Arc<RunEnv>, String>>,
    results: Mutex<Vec<ScenarioReport>>,
    setup: SetupLog,
    cancelled: AtomicBool,
    stop_reason: Mutex<Option<StopReason>>,
    cancel: tokio::sync::Notify,
    /// Every backend and node call of the run, by kind.
    calls: cost::CallMeter,
    /// CPU readings at the start, for the report's cost.
    cost_start: cost::cpu::CostStart,
    /// What the task Pods' containers ran, for the report's images.
    ran_images: ran_images::RanImages,
    /// Which scenarios of the catalogue the run selected (None: not said, e.g. a test's run).
    selection: Option<Selection>,
    /// What the configuration digest covers, taken at the start with the files as the run
    /// read them (`assemble::behaviour_settings`).
    behaviour: serde_json::Value,
}

/// Where the engine's processes can be read: on this machine for the local backend.
fn engine_host(config: &RunConfig) -> Option<cost::cpu::EngineHost> {
    (config.backend == crate::config::BackendKind::Local).then(|| cost::cpu::EngineHost {
        proc_root: "/proc".into(),
        cgroup_root: "/sys/fs/cgroup".into(),
    })
}

impl Run {
    pub fn new(
        id: String,
        config: RunConfig,
        template: TemplateFile,
        prepare_text: String,
    ) -> Self {
        let started = Instant::now();
        let cost_start = cost::cpu::CostStart::now(engine_host(&config).as_ref());
        let behaviour = assemble::behaviour_settings(
            &serde_json::to_value(&config).unwrap_or_default(),
            &[
                ("/template", template.text().as_bytes()),
                ("/prepare_script", prepare_text.as_bytes()),
            ],
        );
        Self {
            id,
            config,
            template,
            prepare_text,
            progress: MultiProgress::new(),
            live: crate::runner::live::LiveView::default(),
            started,
            started_at: SystemTime::now(),
            env: tokio::sync::OnceCell::new(),
            results: Mutex::new(Vec::new()),
            setup: SetupLog::new(started),
            cancelled: AtomicBool::new(false),
            stop_reason: Mutex::new(None),
            cancel: tokio::sync::Notify::new(),
            calls: Default::default(),
            cost_start,
            ran_images: Default::default(),
            selection: None,
            behaviour,
        }
    }

    /// The run as its filter selected it from the catalogue (the report records it, and a
    /// filtered run cannot pass a release gate).
    pub fn with_selection(mut self, selection: Selection) -> Self {
        self.selection = Some(selection);
        self
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

    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }

    pub(super) async fn cancelled(&self) {
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
        self.setup.steps()
    }

    pub fn report_folder(&self) -> PathBuf {
        self.config.report_dir.join(&self.id)
    }

    pub(super) fn record(&self, report: ScenarioReport) {
        if let Ok(mut results) = self.results.lock() {
            results.push(report);
        }
    }
}
