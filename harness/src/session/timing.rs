//! Kandev's launch timing records (`kubernetesLaunchTiming` in kdlbs/kandev
//! `apps/backend/internal/agent/runtime/lifecycle`): a fresh launch writes one
//! `kubernetes.launch.stage` record per stage it entered (`storage`, `pod_ready`, `bootstrap`,
//! `agentctl_connect`) and one `kubernetes.launch.completed` record for the whole launch, its
//! rollback included. Every record carries an opaque attempt id, the instance, task and
//! session ids, `mode: fresh`, `duration_ms` and an outcome (`success`, `error`, `timeout`);
//! the completed record names the failed stage when one failed. Reconnects and replacements
//! write none. Records never carry errors, scripts, tokens or nonces. Kandev also records a
//! launch its caller cancelled (`outcome: canceled`); a harness launch is cancelled only by
//! dropping it (a scenario's deadline, Ctrl-C), which writes nothing.
//!
//! The run keeps them in one [`LaunchLog`] (Kandev: its backend log), which checks read by
//! task and session, as Kandev's own end-to-end suite reads its backend log.

use crate::pod::identity::{SessionIdentity, random_hex};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The message of a stage record.
pub const STAGE_RECORD: &str = "kubernetes.launch.stage";
/// The message of the launch's summary record.
pub const COMPLETED_RECORD: &str = "kubernetes.launch.completed";

/// How a stage or a launch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Success,
    Error,
    Timeout,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error => "error",
            Self::Timeout => "timeout",
        }
    }

    /// A timeout when the error is a bounded wait that ran out, else an error.
    pub fn of(result: Result<(), &anyhow::Error>) -> Self {
        match result {
            Ok(()) => Self::Success,
            Err(e) if e.chain().any(is_timeout) => Self::Timeout,
            Err(_) => Self::Error,
        }
    }
}

fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<crate::wait::WaitTimedOut>().is_some()
        || matches!(
            e.downcast_ref::<crate::backend::BackendError>(),
            Some(crate::backend::BackendError::WaitTimedOut(_))
        )
}

/// One launch timing record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchRecord {
    pub msg: String,
    pub attempt_id: String,
    pub instance_id: String,
    pub task_id: String,
    pub session_id: String,
    pub mode: String,
    pub duration_ms: u64,
    pub outcome: Outcome,
    /// Stage records only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    /// The completed record of a launch whose stage failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_stage: Option<String>,
}

/// The timing of one launch attempt, from its start.
pub struct LaunchTiming {
    attempt_id: String,
    identity: SessionIdentity,
    started: Instant,
    records: Vec<LaunchRecord>,
    failed_stage: Option<String>,
}

impl LaunchTiming {
    pub fn start(identity: &SessionIdentity) -> Self {
        Self {
            attempt_id: random_hex(8),
            identity: identity.clone(),
            started: Instant::now(),
            records: Vec::new(),
            failed_stage: None,
        }
    }

    fn record(&self, msg: &str, started: Instant, outcome: Outcome) -> LaunchRecord {
        LaunchRecord {
            msg: msg.to_owned(),
            attempt_id: self.attempt_id.clone(),
            instance_id: self.identity.environment_id.clone(),
            task_id: self.identity.task_id.clone(),
            session_id: self.identity.session_id.clone(),
            mode: "fresh".into(),
            duration_ms: started.elapsed().as_millis() as u64,
            outcome,
            stage: None,
            failed_stage: None,
        }
    }

    /// Records `stage`, entered at `started`, as ended with `result`.
    pub fn stage<T>(&mut self, stage: &str, started: Instant, result: &anyhow::Result<T>) {
        let outcome = Outcome::of(result.as_ref().map(|_| ()));
        if outcome != Outcome::Success {
            self.failed_stage = Some(stage.to_owned());
        }
        let mut record = self.record(STAGE_RECORD, started, outcome);
        record.stage = Some(stage.to_owned());
        self.records.push(record);
    }

    /// Each recorded stage with its duration, in order.
    pub fn stage_durations(&self) -> Vec<(String, u64)> {
        self.records
            .iter()
            .filter_map(|r| Some((r.stage.clone()?, r.duration_ms)))
            .collect()
    }

    /// The stage records and the completed record of the launch, which ended with `result`.
    pub fn complete(mut self, result: Result<(), &anyhow::Error>) -> Vec<LaunchRecord> {
        let mut completed = self.record(COMPLETED_RECORD, self.started, Outcome::of(result));
        if result.is_err() {
            completed.failed_stage = self.failed_stage.take();
        }
        self.records.push(completed);
        self.records
    }
}

/// Every launch record of a run, in the order written (Kandev: its backend log).
#[derive(Clone, Default)]
pub struct LaunchLog(Arc<Mutex<Vec<LaunchRecord>>>);

impl LaunchLog {
    /// Appends `records` and writes each to the run's log.
    pub fn write(&self, records: Vec<LaunchRecord>) {
        for r in &records {
            tracing::info!(
                target: "kandev::launch",
                msg = %r.msg,
                attempt_id = %r.attempt_id,
                instance_id = %r.instance_id,
                task_id = %r.task_id,
                session_id = %r.session_id,
                mode = %r.mode,
                stage = r.stage.as_deref().unwrap_or(""),
                failed_stage = r.failed_stage.as_deref().unwrap_or(""),
                duration_ms = r.duration_ms,
                outcome = r.outcome.as_str(),
                "launch timing"
            );
        }
        if let Ok(mut log) = self.0.lock() {
            log.extend(records);
        }
    }

    /// The records of one task's session.
    pub fn for_session(&self, task_id: &str, session_id: &str) -> Vec<LaunchRecord> {
        self.0
            .lock()
            .map(|log| {
                log.iter()
                    .filter(|r| r.task_id == task_id && r.session_id == session_id)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Kandev's launch stages, in order.
pub const STAGE_ORDER: [&str; 4] = ["storage", "pod_ready", "bootstrap", "agentctl_connect"];

/// What is wrong with a session's launch timing records (empty: one stage record per stage
/// in order and one completed record, one attempt, `mode: fresh`, every outcome success, the
/// total at least the stages' sum).
pub fn record_problems(records: &[LaunchRecord]) -> Vec<String> {
    let stages: Vec<&str> = records
        .iter()
        .filter(|r| r.msg == STAGE_RECORD)
        .map(|r| r.stage.as_deref().unwrap_or("<none>"))
        .collect();
    let mut out = Vec::new();
    for stage in STAGE_ORDER {
        let count = stages.iter().filter(|n| **n == stage).count();
        if count != 1 {
            out.push(format!("{count} {STAGE_RECORD} records of stage {stage}"));
        }
    }
    if out.is_empty() && stages != STAGE_ORDER {
        out.push(format!("stages out of order: {stages:?}"));
    }
    for extra in stages.iter().filter(|n| !STAGE_ORDER.contains(n)) {
        out.push(format!("unknown stage record {extra}"));
    }
    let completed: Vec<&LaunchRecord> = records
        .iter()
        .filter(|r| r.msg == COMPLETED_RECORD)
        .collect();
    if completed.len() != 1 {
        out.push(format!("{} {COMPLETED_RECORD} records", completed.len()));
    }
    for r in records {
        let what = r.stage.as_deref().unwrap_or(&r.msg);
        if r.outcome != Outcome::Success {
            out.push(format!("{what}: outcome {:?}", r.outcome));
        }
        if r.mode != "fresh" {
            out.push(format!("{what}: mode {:?}", r.mode));
        }
        if records.first().is_some_and(|f| {
            f.attempt_id != r.attempt_id
                || f.instance_id != r.instance_id
                || f.task_id != r.task_id
                || f.session_id != r.session_id
        }) {
            out.push(format!(
                "{what}: another attempt or session ({} {} {} {})",
                r.attempt_id, r.instance_id, r.task_id, r.session_id
            ));
        }
        if let Some(stage) = &r.failed_stage {
            out.push(format!("{what}: names failed stage {stage}"));
        }
    }
    let sum: u64 = records
        .iter()
        .filter(|r| r.msg == STAGE_RECORD)
        .map(|r| r.duration_ms)
        .sum();
    if let [total] = completed.as_slice()
        && total.duration_ms < sum
    {
        out.push(format!(
            "the launch took {} ms by its completed record, less than its stages' {sum} ms",
            total.duration_ms
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> SessionIdentity {
        SessionIdentity::new("run1", "launch::contract", 0)
    }

    #[test]
    fn a_launch_writes_one_record_per_stage_entered_and_one_completed() {
        let mut timing = LaunchTiming::start(&identity());
        let started = Instant::now();
        timing.stage("storage", started, &anyhow::Ok(()));
        timing.stage("pod_ready", started, &anyhow::Ok(()));
        let records = timing.complete(Ok(()));
        let msgs: Vec<(&str, Option<&str>)> = records
            .iter()
            .map(|r| (r.msg.as_str(), r.stage.as_deref()))
            .collect();
        assert_eq!(
            msgs,
            [
                (STAGE_RECORD, Some("storage")),
                (STAGE_RECORD, Some("pod_ready")),
                (COMPLETED_RECORD, None)
            ]
        );
        assert!(records.iter().all(|r| r.outcome == Outcome::Success
            && r.mode == "fresh"
            && r.attempt_id == records[0].attempt_id
            && r.failed_stage.is_none()));
    }

    #[test]
    fn a_failed_stage_is_named_by_the_completed_record_and_a_timeout_is_told_apart() {
        let mut timing = LaunchTiming::start(&identity());
        let started = Instant::now();
        timing.stage("storage", started, &anyhow::Ok(()));
        let error = anyhow::Error::from(crate::backend::BackendError::WaitTimedOut(
            crate::wait::WaitTimedOut {
                what: "the main container".into(),
                waited: std::time::Duration::from_secs(1),
            },
        ))
        .context("pod_ready: wait for the main container");
        let timed_out: anyhow::Result<()> = Err(error);
        timing.stage("pod_ready", started, &timed_out);
        let Err(error) = timed_out else {
            unreachable!()
        };
        let records = timing.complete(Err(&error));
        assert_eq!(records[1].outcome, Outcome::Timeout);
        let completed = records.last().unwrap();
        assert_eq!(completed.msg, COMPLETED_RECORD);
        assert_eq!(completed.outcome, Outcome::Timeout);
        assert_eq!(completed.failed_stage.as_deref(), Some("pod_ready"));
        let text = serde_json::to_string(completed).unwrap();
        assert!(
            !text.contains("wait for"),
            "no error text in a record: {text}"
        );
    }

    fn records(stages: &[&str], completed: usize) -> Vec<LaunchRecord> {
        let record = |msg: &str, stage: Option<&str>| LaunchRecord {
            msg: msg.into(),
            attempt_id: "a1".into(),
            instance_id: "i".into(),
            task_id: "t".into(),
            session_id: "s".into(),
            mode: "fresh".into(),
            duration_ms: 1,
            outcome: Outcome::Success,
            stage: stage.map(str::to_owned),
            failed_stage: None,
        };
        let mut out: Vec<LaunchRecord> = stages
            .iter()
            .map(|n| record(STAGE_RECORD, Some(n)))
            .collect();
        for _ in 0..completed {
            let mut total = record(COMPLETED_RECORD, None);
            total.duration_ms = 10;
            out.push(total);
        }
        out
    }

    #[test]
    fn stage_records_must_be_one_each_in_order_with_one_completed() {
        assert!(record_problems(&records(&STAGE_ORDER, 1)).is_empty());
        assert!(!record_problems(&records(&["storage", "pod_ready", "bootstrap"], 1)).is_empty());
        assert!(!record_problems(&records(&STAGE_ORDER, 0)).is_empty());
        assert!(!record_problems(&records(&STAGE_ORDER, 2)).is_empty());
        assert!(
            !record_problems(&records(
                &[
                    "storage",
                    "pod_ready",
                    "bootstrap",
                    "bootstrap",
                    "agentctl_connect"
                ],
                1
            ))
            .is_empty()
        );
        assert!(
            !record_problems(&records(
                &["pod_ready", "storage", "bootstrap", "agentctl_connect"],
                1
            ))
            .is_empty()
        );
    }

    #[test]
    fn a_failed_outcome_another_attempt_or_a_short_total_is_a_problem() {
        let mut failed = records(&STAGE_ORDER, 1);
        failed[2].outcome = Outcome::Error;
        assert!(
            record_problems(&failed)
                .iter()
                .any(|p| p.contains("bootstrap: outcome"))
        );
        let mut other = records(&STAGE_ORDER, 1);
        other[1].attempt_id = "a2".into();
        assert!(
            record_problems(&other)
                .iter()
                .any(|p| p.contains("another attempt"))
        );
        let mut named = records(&STAGE_ORDER, 1);
        named[4].failed_stage = Some("bootstrap".into());
        assert!(
            record_problems(&named)
                .iter()
                .any(|p| p.contains("failed stage"))
        );
        let mut short = records(&STAGE_ORDER, 1);
        short[4].duration_ms = 2;
        assert!(
            record_problems(&short)
                .iter()
                .any(|p| p.contains("less than"))
        );
    }
}
