//! One scenario, attempt by attempt, to its report: the body under the scenario's deadline,
//! the run's cancellation and the per-step limit; its outcome; evidence when it did not
//! pass; then always teardown, the label sweep and the leak ledger.

use super::context::Ctx;
use super::judge::{BodyEnd, check_reports, stopped};
use super::scenario::{HELD, Scenario};
use super::{Keep, Run, RunEnv};
use crate::pod::identity::{LABEL_RUN, LABEL_SCENARIO, scenario_label};
use crate::runner::cost::{CallMeter, SCENARIO_CALLS};
use futures_util::FutureExt;
use kandev_report::{CheckReport, CleanupOutcome, CleanupRecord, Outcome, ScenarioReport};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

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
        let unstarted = |mut report: ScenarioReport, end: BodyEnd| {
            report.outcome = end.outcome();
            report.diagnosis = end.diagnosis(scenario);
            finished(report, started)
        };
        if self.is_cancelled() {
            return unstarted(
                report,
                stopped(self.stop_reason(), self.config.deadline, false),
            );
        }
        let env = match self.env().await {
            Ok(env) => env,
            Err(e) => return unstarted(report, BodyEnd::Errored(format!("environment: {e}"))),
        };
        // The scenario's own time starts once the shared environment is ready.
        let started = Instant::now();
        // The node's cgroup folders now, for the ledger to find those the scenario left.
        let cgroups = super::ledger::cgroup_baseline(env.node.as_deref()).await;
        report.started_at = kandev_report::rfc3339(SystemTime::now());
        let timeout = self.config.scenario_timeout.unwrap_or(scenario.timeout);
        let mut ctx = Ctx::new(self.clone(), env.clone(), scenario.name, timeout);
        // The checks that held, as `promise` records them while the body runs.
        let held = Arc::default();
        let end = HELD
            .scope(Arc::clone(&held), self.body(scenario, &mut ctx, timeout))
            .await;
        report.checks = match held.lock() {
            Ok(judged) => check_reports(scenario, &judged, end.broken_check()),
            Err(_) => Vec::new(),
        };
        end.mark_unjudged(&mut report.checks);
        let end = end.unless_vacuous(&report.checks);
        report.lacking = end.lacking();
        let end = end
            .by_gate(&self.config.gate)
            .unless_unjudged_under(&self.config.gate, &report.checks);
        end.settle(&mut report, &mut ctx, scenario);
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
            self.tear_down(&mut report, &ctx, &env, scenario, &cgroups)
                .await;
        }
        report.steps = std::mem::take(&mut ctx.steps);
        report.findings = std::mem::take(&mut ctx.findings);
        report.sessions = std::mem::take(&mut ctx.sessions);
        finished(report, started)
    }

    /// The scenario's body, bounded by its deadline, the per-step limit and the run's stop.
    async fn body(&self, scenario: &Scenario, ctx: &mut Ctx, timeout: Duration) -> BodyEnd {
        let current_step = ctx.current_step.clone();
        let body = AssertUnwindSafe((scenario.run)(ctx)).catch_unwind();
        tokio::select! {
            result = tokio::time::timeout(timeout, body) => match result {
                Ok(Ok(returned)) => BodyEnd::of(returned),
                Ok(Err(panic)) => BodyEnd::Errored(format!("the scenario panicked: {}", panic_message(&panic))),
                Err(_) => BodyEnd::TimedOut(format!("no result within the scenario's deadline of {timeout:?}")),
            },
            step = step_overrun(&current_step, self.config.step_timeout) => BodyEnd::TimedOut(
                format!("step {step:?} ran past the per-step deadline of {:?}", self.config.step_timeout.unwrap_or_default()),
            ),
            () = self.cancelled() => stopped(self.stop_reason(), self.config.deadline, true),
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
                "kept {}: {}   (remove later: {})",
                pod.name,
                env.backend.keep_hint(&pod, &self.config.main_container),
                self.config.gc_command(&self.id)
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
        cgroups: &super::ledger::CgroupBaseline,
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
        let mut unjudged = None;
        if let Some(node) = env.node.as_deref() {
            let names: Vec<String> = pods.iter().map(|(name, _)| name.clone()).collect();
            let nested: Vec<String> = report
                .nested_inventory
                .iter()
                .flat_map(|n| n.containers.iter().cloned())
                .collect();
            match super::ledger::cgroups_left(node, cgroups, &names, &nested).await {
                Ok(cgroups) => {
                    report.leaks.extend(cgroups.left);
                    // Said, never taken for "nothing left": the report shows what was not
                    // looked for.
                    if let Some(why) = cgroups.not_compared {
                        report.findings.push(kandev_report::Finding {
                            level: kandev_report::FindingLevel::Info,
                            code: "ledger.cgroups_not_compared".into(),
                            message: why,
                            evidence: serde_json::json!({"node_view": node.describe()}),
                        });
                    }
                }
                // The ledger could not judge the node's cgroups: "nothing left" is unproven.
                // Leaks found otherwise still show (below); with none, the scenario errs.
                Err(why) => unjudged = Some(why),
            }
        }
        if !report.leaks.is_empty() && report.outcome.is_acceptable() {
            report.diagnosis = Some(format!(
                "leaked: {} outlived teardown: {}{}",
                report.leaks.len(),
                report.leaks.join("; "),
                unjudged
                    .as_deref()
                    .map(|why| format!("; and the leak ledger: {why}"))
                    .unwrap_or_default()
            ));
            report.outcome = Outcome::Leaked;
        } else if let Some(why) = unjudged
            && report.outcome.is_acceptable()
        {
            report.diagnosis = Some(format!("the leak ledger: {why}"));
            report.outcome = Outcome::Errored;
        }
    }
}

fn empty_report(scenario: &Scenario) -> ScenarioReport {
    ScenarioReport {
        name: scenario.name.into(),
        promise: scenario.promise.into(),
        outcome: Outcome::Errored,
        checks: not_reached(scenario),
        started_at: kandev_report::rfc3339(SystemTime::now()),
        ..Default::default()
    }
}

/// Every check of `scenario`, none judged (a scenario that never started its body).
fn not_reached(scenario: &Scenario) -> Vec<CheckReport> {
    check_reports(scenario, &Default::default(), None)
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

#[cfg(test)]
mod tests {
    use super::*;

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
