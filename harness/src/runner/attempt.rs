//! One scenario, attempt by attempt, to its report: the body under the scenario's deadline,
//! the run's cancellation and the per-step limit; its outcome; evidence when it did not
//! pass; then always teardown, the label sweep and the leak ledger.

use super::context::Ctx;
use super::scenario::{Broken, JUDGED, JudgedChecks, Scenario, Verdict};
use super::{Keep, Run, RunEnv};
use crate::pod::admission::AdmissionMutated;
use crate::pod::identity::{LABEL_RUN, LABEL_SCENARIO, scenario_label};
use crate::runner::cost::{CallMeter, SCENARIO_CALLS};
use futures_util::FutureExt;
use kandev_report::Capability;
use kandev_report::{
    CheckOutcome, CheckReport, CleanupOutcome, CleanupRecord, Outcome, ScenarioReport, StepOutcome,
};
use kandev_report::{Gate, GateProfile};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How a scenario body ended: a verdict, or an outcome with its diagnosis.
type BodyResult = Result<Verdict, (Outcome, String)>;

impl Run {
    /// Runs one scenario to its report, teardown included; with `--retries N` a failed,
    /// errored or timed-out attempt is run again (fresh sessions), and a later pass is flaky.
    pub async fn run_scenario(self: &Arc<Self>, scenario: &Scenario) -> ScenarioReport {
        self.live.started(scenario.name);
        let mut previous = Vec::new();
        let mut attempt = 1;
        loop {
            // The calls this attempt makes (body and teardown), for the report's cost.
            let calls = CallMeter::default();
            let mut report = SCENARIO_CALLS
                .scope(calls.clone(), self.attempt(scenario))
                .await;
            report.calls = calls.snapshot();
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
            self.record(report.clone());
            self.live.finished(&report);
            return report;
        }
    }

    /// One attempt of a scenario, teardown included.
    async fn attempt(self: &Arc<Self>, scenario: &Scenario) -> ScenarioReport {
        let mut report = empty_report(scenario);
        let started = Instant::now();
        if self.is_cancelled() {
            let (outcome, diagnosis) = self.stop_diagnosis(false);
            report.outcome = outcome;
            report.diagnosis = Some(diagnosis);
            return finished(report, started);
        }
        let env = match self.env().await {
            Ok(env) => env,
            Err(e) => {
                report.outcome = Outcome::Errored;
                report.diagnosis = Some(format!("environment: {e}"));
                return finished(report, started);
            }
        };
        // The scenario's own time starts once the shared environment is ready.
        let started = Instant::now();
        report.started_at = kandev_report::rfc3339(SystemTime::now());
        let timeout = self.config.scenario_timeout.unwrap_or(scenario.timeout);
        let mut ctx = Ctx::new(self.clone(), env.clone(), scenario.name, timeout);
        let judged = JudgedChecks::default();
        let result = JUDGED
            .scope(judged.clone(), self.body(scenario, &mut ctx, timeout))
            .await;
        report.checks = judged_checks(scenario, &judged);
        let result = no_vacuous_pass(&report.checks, result);
        let result = judge_by_gate(&self.config.gate, &mut report.lacking, result);
        settle(&mut report, &mut ctx, result);
        // A broken promise is named by its check's id first: what people grep and gate on.
        if let (Some(check), Some(diagnosis)) = (
            report
                .checks
                .iter()
                .find(|c| c.outcome == CheckOutcome::Failed),
            &report.diagnosis,
        ) {
            report.diagnosis = Some(format!("{}: {diagnosis}", check.id));
        }
        if report.outcome != Outcome::Passed {
            report.artifacts = super::evidence::collect(&ctx).await;
        }
        report.resources = super::evidence::resources(&ctx).await;
        let keep = match self.config.keep {
            Keep::Always => true,
            Keep::OnFailure => !report.outcome.is_acceptable(),
            Keep::Never => false,
        };
        if keep {
            self.tear_down_kept(&mut report, &ctx, &env).await;
        } else {
            self.tear_down(&mut report, &ctx, &env, scenario).await;
        }
        report.steps = std::mem::take(&mut ctx.steps);
        report.findings = std::mem::take(&mut ctx.findings);
        report.sessions = std::mem::take(&mut ctx.sessions);
        finished(report, started)
    }

    /// The scenario's body, bounded by its deadline, the per-step limit and the run's stop.
    async fn body(&self, scenario: &Scenario, ctx: &mut Ctx, timeout: Duration) -> BodyResult {
        let current_step = ctx.current_step.clone();
        let body = AssertUnwindSafe((scenario.run)(ctx)).catch_unwind();
        tokio::select! {
            result = tokio::time::timeout(timeout, body) => match result {
                Ok(Ok(Ok(verdict))) => Ok(verdict),
                Ok(Ok(Err(error))) => match lacking_tool(&error) {
                    Some(capability) => Ok(Verdict::Lacks(capability, crate::error_chain(error.as_ref()))),
                    None => {
                        note_broken_check(&error);
                        Err(classify(&error))
                    }
                },
                Ok(Err(panic)) => Err((Outcome::Errored, format!("the scenario panicked: {}", panic_message(&panic)))),
                Err(_) => Err((Outcome::TimedOut, format!("no result within the scenario's deadline of {timeout:?}"))),
            },
            step = step_overrun(&current_step, self.config.step_timeout) => Err((
                Outcome::TimedOut,
                format!("step {step:?} ran past the per-step deadline of {:?}", self.config.step_timeout.unwrap_or_default()),
            )),
            () = self.cancelled() => Err(self.stop_diagnosis(true)),
        }
    }

    /// `--keep`: the scenario's objects stay; say how to get in and how to remove them.
    async fn tear_down_kept(&self, report: &mut ScenarioReport, ctx: &Ctx, env: &RunEnv) {
        let kept = ctx.cleanup.pods();
        report.cleanup = ctx
            .cleanup
            .teardown(env.backend.as_ref(), Duration::from_secs(120), true)
            .await;
        for pod in kept {
            eprintln!(
                "kept {}: {}   (remove later: kandev-acceptance gc --backend {} --run {})",
                pod.name,
                env.backend.keep_hint(&pod, &self.config.main_container),
                self.config.backend.name(),
                self.id
            );
        }
    }

    /// Inventory of the nested daemons, the cleanup stack (LIFO, UID-checked), a sweep by
    /// the run's and scenario's labels, then the leak ledger.
    async fn tear_down(
        &self,
        report: &mut ScenarioReport,
        ctx: &Ctx,
        env: &RunEnv,
        scenario: &Scenario,
    ) {
        // Every Pod the scenario made (also those it deleted itself), for the ledger.
        let mut pods: Vec<(String, String)> = ctx
            .sessions
            .iter()
            .map(|s| (s.pod_name.clone(), s.pod_uid.clone()))
            .chain(ctx.cleanup.pods().into_iter().map(|p| (p.name, p.uid)))
            .collect();
        pods.sort();
        pods.dedup();
        if let Some(node) = &env.node {
            for (_, uid) in &pods {
                node.track_pod(uid).await;
            }
        }
        report.nested_inventory = super::ledger::nested_inventories(
            env.backend.as_ref(),
            &ctx.cleanup.pods(),
            &self.config.daemon_container,
        )
        .await;
        report.cleanup = ctx
            .cleanup
            .teardown(env.backend.as_ref(), Duration::from_secs(120), false)
            .await;
        // Objects of a create that was in flight when the body stopped (cancel, timeout)
        // never reached the stack: sweep by this run's and scenario's labels, and record
        // what had to be swept so that it is visible.
        let label = scenario_label(scenario.name);
        let selector = [
            (LABEL_RUN, self.id.as_str()),
            (LABEL_SCENARIO, label.as_str()),
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
                    "objects labelled {LABEL_RUN}={} {LABEL_SCENARIO}={label}",
                    self.id
                ),
                outcome: CleanupOutcome::Failed,
                duration_ms: 0,
                error: Some(crate::error_chain(&e)),
            }),
        }
        report.leaks = super::ledger::remains_after_teardown(
            env.backend.as_ref(),
            env.node.as_deref(),
            &selector,
            &pods,
            &report.nested_inventory,
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
}

fn empty_report(scenario: &Scenario) -> ScenarioReport {
    ScenarioReport {
        name: scenario.name.into(),
        promise: scenario.promise.into(),
        outcome: Outcome::Errored,
        diagnosis: None,
        checks: not_reached(scenario),
        lacking: None,
        started_at: kandev_report::rfc3339(SystemTime::now()),
        duration_ms: 0,
        steps: Vec::new(),
        findings: Vec::new(),
        sessions: Vec::new(),
        cleanup: Vec::new(),
        resources: None,
        calls: Default::default(),
        artifacts: Vec::new(),
        attempts: 1,
        flaky: false,
        previous_attempts: Vec::new(),
        nested_inventory: Vec::new(),
        leaks: Vec::new(),
    }
}

/// A body that ends `Passed` without judging every check proves less than its report would
/// say: errored (the scenario's defect, not the system's), naming what went unjudged.
fn no_vacuous_pass(checks: &[CheckReport], result: BodyResult) -> BodyResult {
    let unjudged: Vec<&str> = checks
        .iter()
        .filter(|c| c.outcome == CheckOutcome::NotReached)
        .map(|c| c.id.as_str())
        .collect();
    match result {
        Ok(Verdict::Passed) if !unjudged.is_empty() => Err((
            Outcome::Errored,
            format!(
                "the scenario ended passed without judging {}: a pass must judge every check",
                unjudged.join(", ")
            ),
        )),
        other => other,
    }
}

/// Every check of `scenario`, none judged (a scenario that never started its body).
fn not_reached(scenario: &Scenario) -> Vec<CheckReport> {
    judged_checks(scenario, &JudgedChecks::default())
}

/// The worker tool a launch found missing (the bootstrap's exit 69: no Docker CLI).
fn lacking_tool(error: &anyhow::Error) -> Option<Capability> {
    error
        .chain()
        .find_map(|e| e.downcast_ref::<crate::session::WorkerImageLacks>())
        .map(|lacks| Capability::parse(&lacks.tool).unwrap_or(Capability::Docker))
}

/// Records in the body's log which check the error broke, if it is a broken promise.
fn note_broken_check(error: &anyhow::Error) {
    let Some(broken) = error.chain().find_map(|e| e.downcast_ref::<Broken>()) else {
        return;
    };
    let _ = JUDGED.try_with(|judged| {
        if let Ok(mut judged) = judged.lock() {
            judged.broke = Some(broken.check);
        }
    });
}

/// Each declared check with its outcome: failed when the body broke it, passed when the body
/// judged it and it held (and did not break later), else not reached.
fn judged_checks(scenario: &Scenario, judged: &JudgedChecks) -> Vec<CheckReport> {
    let Ok(judged) = judged.lock() else {
        return Vec::new();
    };
    scenario
        .checks
        .iter()
        .map(|check| CheckReport {
            id: scenario.check_id(check),
            promise: check.promise.into(),
            kind: check.twin.kind(),
            outcome: if judged.broke == Some(check.id) {
                CheckOutcome::Failed
            } else if judged.held.contains(&check.id) {
                CheckOutcome::Passed
            } else {
                CheckOutcome::NotReached
            },
            twin: check.twin.describe(),
        })
        .collect()
}

/// A scenario the body left unjudged, by the gate: one that lacks a capability is `failed`
/// when the gate requires it (a release must not pass on what it never checked), else
/// `skipped` (the node view) or `incompatible` (worker tools); under the release profile
/// nothing passes unjudged, so any `skipped` or `incompatible` body (e.g. a workspace mode the
/// scenario cannot be shown in) is `failed` too.
fn judge_by_gate(gate: &Gate, lacking: &mut Option<Capability>, result: BodyResult) -> BodyResult {
    if let Ok(Verdict::Skipped(reason) | Verdict::Incompatible(reason)) = &result
        && gate.profile == GateProfile::Release
    {
        return Err((
            Outcome::Failed,
            format!("the release gate accepts no scenario left unjudged: {reason}"),
        ));
    }
    let Ok(Verdict::Lacks(capability, reason)) = result else {
        return result;
    };
    *lacking = Some(capability);
    if gate.requires(capability) {
        Err((
            Outcome::Failed,
            format!(
                "required capability {} is missing ({} gate; required by {}): {reason}",
                capability.name(),
                gate.profile.name(),
                gate.source
            ),
        ))
    } else if capability == Capability::NodeView {
        Ok(Verdict::Skipped(reason))
    } else {
        Ok(Verdict::Incompatible(reason))
    }
}

/// The body's result as the report's outcome, closing the open step accordingly.
fn settle(report: &mut ScenarioReport, ctx: &mut Ctx, result: BodyResult) {
    let (outcome, step, diagnosis) = match result {
        Ok(Verdict::Passed) => (Outcome::Passed, StepOutcome::Passed, None),
        Ok(Verdict::Skipped(reason)) => (Outcome::Skipped, StepOutcome::Passed, Some(reason)),
        // `Lacks` was judged by the gate before (judge_lacking); as incompatible if not.
        Ok(Verdict::Incompatible(reason)) | Ok(Verdict::Lacks(_, reason)) => (
            Outcome::Incompatible,
            StepOutcome::Incompatible,
            Some(reason),
        ),
        Err((outcome, diagnosis)) => {
            let step = match outcome {
                Outcome::Failed => StepOutcome::Failed,
                Outcome::Incompatible => StepOutcome::Incompatible,
                _ => StepOutcome::Errored,
            };
            (outcome, step, Some(diagnosis))
        }
    };
    let step_error = if step == StepOutcome::Passed {
        None
    } else {
        diagnosis.clone()
    };
    ctx.close_step(step, step_error);
    report.outcome = outcome;
    report.diagnosis = diagnosis;
}

fn finished(mut report: ScenarioReport, started: Instant) -> ScenarioReport {
    report.duration_ms = started.elapsed().as_millis() as u64;
    report
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
    let text = crate::error_chain(error.as_ref());
    // Admission that changed what Kandev owns breaks the promise that the Pod runs as
    // composed: a failure of the cluster under test, not of the harness.
    let admission_mutated =
        |e: &(dyn std::error::Error + 'static)| e.downcast_ref::<AdmissionMutated>().is_some();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_mutated_by_admission_fails_the_scenario() {
        let mutated = crate::pod::admission::AdmissionMutated {
            what: "pod",
            name: "kandev-0123456789abcdef".into(),
            uid: "u".into(),
            mismatches: vec![crate::pod::admission::AdmissionMismatch {
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
    fn a_pass_that_judged_not_every_check_is_no_pass() {
        let check = |outcome| CheckReport {
            id: "a::x/c".into(),
            promise: "p".into(),
            kind: Default::default(),
            outcome,
            twin: "t".into(),
        };
        let judged = [check(CheckOutcome::Passed)];
        assert_eq!(
            no_vacuous_pass(&judged, Ok(Verdict::Passed)),
            Ok(Verdict::Passed)
        );
        let vacuous = [check(CheckOutcome::Passed), check(CheckOutcome::NotReached)];
        let ended = no_vacuous_pass(&vacuous, Ok(Verdict::Passed));
        assert!(
            matches!(&ended, Err((Outcome::Errored, why)) if why.contains("without judging a::x/c")),
            "{ended:?}"
        );
        // Skipped, incompatible and failed bodies judged nothing more: left as they are.
        let skipped = Ok(Verdict::Skipped("no node view".into()));
        assert_eq!(no_vacuous_pass(&vacuous, skipped.clone()), skipped);
    }

    #[test]
    fn the_release_gate_fails_what_was_left_unjudged() {
        let mut lacking = None;
        let release = Gate::resolve(GateProfile::Release, None, &[]);
        let default = Gate::resolve(GateProfile::Default, Some(&[]), &[]);
        let incompatible = || Ok(Verdict::Incompatible("empty_dir".into()));
        let ended = judge_by_gate(&release, &mut lacking, incompatible());
        assert!(
            matches!(&ended, Err((Outcome::Failed, why)) if why.contains("unjudged: empty_dir")),
            "{ended:?}"
        );
        assert_eq!(
            judge_by_gate(&default, &mut lacking, incompatible()),
            incompatible()
        );
        let lacks = Ok(Verdict::Lacks(Capability::NodeView, "no node view".into()));
        assert!(matches!(
            judge_by_gate(&release, &mut lacking, lacks.clone()),
            Err((Outcome::Failed, _))
        ));
        assert_eq!(
            judge_by_gate(&default, &mut lacking, lacks),
            Ok(Verdict::Skipped("no node view".into()))
        );
        assert_eq!(lacking, Some(Capability::NodeView));
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
