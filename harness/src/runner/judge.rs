//! How a scenario body's end is judged: classified once into a [`BodyEnd`], which the gate,
//! the report's outcome, diagnosis, checks and last step all read.

use super::StopReason;
use super::context::Ctx;
use super::scenario::{Broken, Judged, Scenario, Verdict};
use crate::pod::admission::AdmissionMutated;
use crate::session::WorkerImageLacks;
use kandev_report::Capability;
use kandev_report::{CheckOutcome, CheckReport, Outcome, ScenarioReport, StepOutcome};
use kandev_report::{Gate, GateProfile};
use std::time::Duration;

/// How a scenario body ended, classified once ([`BodyEnd::of`] walks an error's chain once);
/// everything after it matches on this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyEnd {
    /// The body returned `Verdict::Passed`.
    Passed,
    /// Not judged, and why (the body's own skip, or a missing node view the gate lets go).
    Skipped(String),
    /// The environment cannot support what the scenario checks, and why.
    Incompatible(String),
    /// The run lacks a capability the scenario needs (the body said so, or a launch found a
    /// worker tool missing), and why: the gate decides what it comes to ([`BodyEnd::by_gate`]).
    Lacks(Capability, String),
    /// A promise broke: the check's id within its scenario, and the error's chain.
    Broke(&'static str, String),
    /// Admission changed what Kandev owns: the cluster under test broke the promise that the
    /// Pod runs as composed (no check of the scenario's own), and the error's chain.
    Mutated(String),
    /// The gate accepts no scenario left unjudged here, and why.
    Refused(String),
    /// The promise could not be judged: an error of the infrastructure, a panic, or a pass that
    /// judged not every check.
    Errored(String),
    /// The scenario's deadline, a step's limit or the run's `--deadline` passed.
    TimedOut(String),
    /// The run was stopped (Ctrl-C, SIGTERM, or `--deadline` before the scenario started).
    Cancelled(String),
}

impl From<Verdict> for BodyEnd {
    fn from(verdict: Verdict) -> Self {
        match verdict {
            Verdict::Passed => Self::Passed,
            Verdict::Skipped(reason) => Self::Skipped(reason),
            Verdict::Incompatible(reason) => Self::Incompatible(reason),
            Verdict::Lacks(capability, reason) => Self::Lacks(capability, reason),
        }
    }
}

impl BodyEnd {
    /// What the body returned, classified: an error is a missing worker tool (which outranks
    /// anything else in its chain: the launch judged nothing), else the platform's fault (a
    /// lost API server, a kubelet that lost the Pod: [`crate::backend::is_platform_fault`];
    /// it breaks no promise of the Pod, whichever check met it, so the scenario errored),
    /// else a broken check, else a Pod mutated by admission, else an error of the
    /// infrastructure.
    pub fn of(returned: anyhow::Result<Verdict>) -> Self {
        let error = match returned {
            Ok(verdict) => return verdict.into(),
            Err(error) => error,
        };
        let text = crate::error_chain(error.as_ref());
        let mut broke = None;
        let mut mutated = false;
        let mut platform = false;
        for cause in error.chain() {
            if let Some(lacks) = cause.downcast_ref::<WorkerImageLacks>() {
                let capability = Capability::parse(&lacks.tool).unwrap_or(Capability::Docker);
                return Self::Lacks(capability, text);
            }
            if let Some(broken) = cause.downcast_ref::<Broken>() {
                broke = broke.or(Some(broken.check));
            }
            mutated |= cause.is::<AdmissionMutated>();
            platform |= crate::backend::is_platform_cause(cause);
        }
        match (platform, broke, mutated) {
            (true, _, _) => Self::Errored(text),
            (false, Some(check), _) => Self::Broke(check, text),
            (false, None, true) => Self::Mutated(text),
            (false, None, false) => Self::Errored(text),
        }
    }

    /// A body that left its scenario unjudged (skipped, incompatible, or lacking a capability:
    /// e.g. no node view for the cgroup scenarios) judged none of the checks it did not reach:
    /// they are `not judged` with its reason, so every report format counts them apart from
    /// checks a failure stopped before.
    pub fn mark_unjudged(&self, checks: &mut [CheckReport]) {
        let reason = match self {
            Self::Skipped(why) | Self::Incompatible(why) | Self::Lacks(_, why) => why,
            _ => return,
        };
        for check in checks
            .iter_mut()
            .filter(|c| c.outcome == CheckOutcome::NotReached)
        {
            check.outcome = CheckOutcome::NotJudged;
            check.reason = Some(reason.clone());
        }
    }

    /// A body that ends `Passed` without judging every check proves less than its report
    /// would say: errored (the scenario's defect, not the system's), naming what went
    /// unjudged.
    pub fn unless_vacuous(self, checks: &[CheckReport]) -> Self {
        let unjudged: Vec<&str> = checks
            .iter()
            .filter(|c| c.outcome == CheckOutcome::NotReached)
            .map(|c| c.id.as_str())
            .collect();
        match self {
            Self::Passed if !unjudged.is_empty() => Self::Errored(format!(
                "the scenario ended passed without judging {}: a pass must judge every check",
                unjudged.join(", ")
            )),
            other => other,
        }
    }

    /// Under the release profile a check the body could not judge ([`super::not_judged`])
    /// fails the scenario: a release must not pass on what it never saw; one the backend's
    /// lack of a capability the gate does not require left unjudged
    /// ([`super::not_judged_lacking`]) is excused there, as a skipped scenario's lack is. Other gates keep the
    /// body's end (the check stays `not judged` in every report, counted apart).
    pub fn unless_unjudged_under(self, gate: &Gate, checks: &[CheckReport]) -> Self {
        let unjudged: Vec<String> = checks
            .iter()
            .filter(|c| {
                c.outcome == CheckOutcome::NotJudged
                    && c.lacking.is_none_or(|lack| gate.requires.contains(&lack))
            })
            .map(|c| format!("{} ({})", c.id, c.reason.as_deref().unwrap_or("no reason")))
            .collect();
        match self {
            Self::Passed if gate.profile == GateProfile::Release && !unjudged.is_empty() => {
                Self::Refused(format!(
                    "the release gate accepts no check left not judged: {}",
                    unjudged.join("; ")
                ))
            }
            other => other,
        }
    }

    /// The capability the run lacks, for the report's `lacking`.
    pub fn lacking(&self) -> Option<Capability> {
        match self {
            Self::Lacks(capability, _) => Some(*capability),
            _ => None,
        }
    }

    /// What the gate makes of a body it left unjudged: one that lacks a capability is
    /// refused (`failed`) when the gate requires it (a release must not pass on what it never
    /// checked), else `skipped` (the node view, a cluster) or `incompatible` (worker tools);
    /// under the release profile nothing else passes unjudged, so any other `skipped` or
    /// `incompatible` body (e.g. a workspace mode the scenario cannot be shown in) is refused
    /// too. (The release profile requires every capability the backend offers: what a body
    /// still lacks unrequired is one no run on that backend can have, a cluster locally.)
    pub fn by_gate(self, gate: &Gate) -> Self {
        match self {
            Self::Skipped(reason) | Self::Incompatible(reason)
                if gate.profile == GateProfile::Release =>
            {
                Self::Refused(format!(
                    "the release gate accepts no scenario left unjudged: {reason}"
                ))
            }
            Self::Lacks(capability, reason) if gate.requires(capability) => Self::Refused(format!(
                "required capability {} is missing ({} gate; required by {}): {reason}",
                capability.name(),
                gate.profile.name(),
                gate.source
            )),
            // What the run's environment lacks (not the worker image): skipped, not refused.
            Self::Lacks(Capability::NodeView | Capability::Cluster, reason) => {
                Self::Skipped(reason)
            }
            Self::Lacks(_, reason) => Self::Incompatible(reason),
            other => other,
        }
    }

    /// The report's outcome. A `Lacks` the gate did not judge counts as incompatible.
    pub fn outcome(&self) -> Outcome {
        match self {
            Self::Passed => Outcome::Passed,
            Self::Skipped(_) => Outcome::Skipped,
            Self::Incompatible(_) | Self::Lacks(..) => Outcome::Incompatible,
            Self::Broke(..) | Self::Mutated(_) | Self::Refused(_) => Outcome::Failed,
            Self::Errored(_) => Outcome::Errored,
            Self::TimedOut(_) => Outcome::TimedOut,
            Self::Cancelled(_) => Outcome::Cancelled,
        }
    }

    /// The outcome of the step that was open when the body ended.
    fn step(&self) -> StepOutcome {
        match self.outcome() {
            Outcome::Passed | Outcome::Skipped => StepOutcome::Passed,
            Outcome::Failed => StepOutcome::Failed,
            Outcome::Incompatible => StepOutcome::Incompatible,
            _ => StepOutcome::Errored,
        }
    }

    /// Why it ended so; none for a pass.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Self::Passed => None,
            Self::Skipped(why)
            | Self::Incompatible(why)
            | Self::Lacks(_, why)
            | Self::Broke(_, why)
            | Self::Mutated(why)
            | Self::Refused(why)
            | Self::Errored(why)
            | Self::TimedOut(why)
            | Self::Cancelled(why) => Some(why),
        }
    }

    /// The check the body broke, if it broke one.
    pub fn broken_check(&self) -> Option<&'static str> {
        match self {
            Self::Broke(check, _) => Some(check),
            _ => None,
        }
    }

    /// The report's diagnosis: the reason, a broken promise named by its check's report id
    /// first (what people grep and gate on).
    pub fn diagnosis(&self, scenario: &Scenario) -> Option<String> {
        let reason = self.reason()?;
        let named = self
            .broken_check()
            .and_then(|broke| scenario.checks.iter().find(|c| c.id == broke))
            .map(|check| format!("{}: {reason}", scenario.check_id(check)));
        Some(named.unwrap_or_else(|| reason.to_owned()))
    }

    /// The end as the report states it (outcome and diagnosis), closing the open step
    /// accordingly.
    pub fn settle(&self, report: &mut ScenarioReport, ctx: &mut Ctx, scenario: &Scenario) {
        let step = self.step();
        let step_error = (step != StepOutcome::Passed)
            .then(|| self.reason().map(str::to_owned))
            .flatten();
        ctx.close_step(step, step_error);
        report.outcome = self.outcome();
        report.diagnosis = self.diagnosis(scenario);
    }
}

/// Each declared check with its outcome: failed when the body broke it, not judged when the
/// body said it could not judge it (with the reason; even if part of it held), passed when the
/// body judged it and it held (and did not break later), else not reached.
pub fn check_reports(
    scenario: &Scenario,
    judged: &Judged,
    broke: Option<&'static str>,
) -> Vec<CheckReport> {
    scenario
        .checks
        .iter()
        .map(|check| {
            let unjudged: Vec<&str> = judged
                .not_judged
                .iter()
                .filter(|(id, _)| *id == check.id)
                .map(|(_, reason)| reason.as_str())
                .collect();
            let lacking = judged
                .lacking
                .iter()
                .find(|(id, _)| *id == check.id)
                .map(|(_, capability)| *capability);
            let (outcome, reason) = if broke == Some(check.id) {
                (CheckOutcome::Failed, None)
            } else if !unjudged.is_empty() {
                (CheckOutcome::NotJudged, Some(unjudged.join("; ")))
            } else if judged.held.contains(&check.id) {
                (CheckOutcome::Passed, None)
            } else {
                (CheckOutcome::NotReached, None)
            };
            CheckReport {
                id: scenario.check_id(check),
                promise: check.promise.into(),
                kind: check.twin.kind(),
                outcome,
                reason,
                lacking: lacking.filter(|_| outcome == CheckOutcome::NotJudged),
                twin: check.twin.describe(),
            }
        })
        .collect()
}

/// A scenario the run's stop reached: `started` (its body was running; teardown ran) or not.
pub fn stopped(reason: Option<StopReason>, deadline: Option<Duration>, started: bool) -> BodyEnd {
    let deadline = deadline.unwrap_or_default();
    match (reason, started) {
        (Some(StopReason::Deadline), true) => BodyEnd::TimedOut(format!(
            "the run's --deadline of {deadline:?} passed; teardown ran"
        )),
        (Some(StopReason::Deadline), false) => BodyEnd::Cancelled(format!(
            "not started: the run's --deadline of {deadline:?} had passed"
        )),
        (_, true) => BodyEnd::Cancelled("cancelled (Ctrl-C or SIGTERM); teardown ran".to_owned()),
        (_, false) => {
            BodyEnd::Cancelled("the run was cancelled before this scenario started".to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::scenario::{Check, Twin};

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
        let end = BodyEnd::of(Err(error));
        let text = end.reason().unwrap_or_default();
        assert_eq!(end.outcome(), Outcome::Failed, "{text}");
        assert!(text.contains("the workspace grant was removed"), "{text}");
        let plain = anyhow::anyhow!("connection refused").context("pod_ready: create the Pod");
        assert_eq!(BodyEnd::of(Err(plain)).outcome(), Outcome::Errored);
    }

    /// A check that meets the platform's fault (the API server lost past the retries, as
    /// real Kind's containerd restart did) judged nothing: the scenario errors naming the
    /// cluster, not the check; any other error within the check breaks it.
    #[test]
    fn a_platform_fault_within_a_check_errors_and_anything_else_breaks_it() {
        const REHANDSHAKE: Check = Check {
            id: "rehandshake",
            promise: "the agent answers again",
            twin: Twin::Exempt("test"),
        };
        let lost = crate::backend::kube::cluster::resilience::ConnectionLost {
            method: "GET".into(),
            path: "/api/v1/namespaces/n/pods/p/portforward".into(),
            why: "the connection could not be made, tried 19 times over about 30 s".into(),
            cause: "client error (Connect): tls handshake eof".into(),
        };
        let through_the_client = |source: kube::Error| {
            anyhow::Error::new(crate::backend::BackendError::Other {
                operation: "port-forward to p:8765".into(),
                source: source.into(),
            })
            .context("reconnect: instances")
        };
        let end = BodyEnd::of(Err(super::super::scenario::broken_by(
            &REHANDSHAKE,
            through_the_client(kube::Error::Service(Box::new(lost))),
        )));
        let text = end.reason().unwrap_or_default();
        assert_eq!(end.outcome(), Outcome::Errored, "{text}");
        assert!(
            text.contains("the connection to the API server was lost"),
            "{text}"
        );
        assert!(text.contains("fix:"), "{text}");

        let lacks = anyhow::Error::new(crate::backend::kube::KubeletLacksPod).context("exec");
        let end = BodyEnd::of(Err(super::super::scenario::broken_by(&REHANDSHAKE, lacks)));
        assert_eq!(end.outcome(), Outcome::Errored);
        let broke = anyhow::Error::new(crate::backend::BackendError::Exec {
            pod: "p".into(),
            container: "kandev-agent".into(),
            argv: vec!["id".into()],
            source: crate::backend::kube::StreamBroke {
                what: "exec",
                before: "the command's exit status",
                cause: "Connection reset without closing handshake".into(),
            }
            .into(),
        });
        let end = BodyEnd::of(Err(super::super::scenario::broken_by(&REHANDSHAKE, broke)));
        assert_eq!(end.outcome(), Outcome::Errored);
        let silent = anyhow::Error::new(crate::backend::kube::cluster::NoAnswer {
            waited: std::time::Duration::from_secs(60),
        });
        let end = BodyEnd::of(Err(super::super::scenario::broken_by(&REHANDSHAKE, silent)));
        assert_eq!(end.outcome(), Outcome::Errored);

        // However deep in the promise's cause: a platform fault is no broken promise.
        let unreachable = anyhow::Error::new(crate::backend::kube::ContainerUnreachable {
            cause: "error sending request: dial tcp 10.0.0.7:10250: connect: connection refused"
                .into(),
        })
        .context("exec")
        .context("reconnect: instances");
        let wrapped = anyhow::Error::new(Broken {
            check: "rehandshake",
            promise: "the agent re-handshakes",
            evidence: "the exec failed".into(),
            cause: Some(unreachable),
        })
        .context("step");
        let end = BodyEnd::of(Err(wrapped));
        assert_eq!(end.outcome(), Outcome::Errored);
        assert_eq!(end.broken_check(), None);
        let text = end.reason().unwrap_or_default();
        assert!(
            text.contains(
                "the exec failed: reconnect: instances: exec: the exec never reached the container"
            ),
            "{text}"
        );

        // A check that judges an error itself gets every error but the platform's.
        let raised = super::super::scenario::raise_platform_fault::<()>(Err(anyhow::Error::new(
            crate::backend::kube::KubeletLacksPod,
        )));
        assert!(raised.is_err());
        let judged =
            super::super::scenario::raise_platform_fault::<()>(Err(anyhow::anyhow!("refused")));
        assert!(judged.is_ok_and(|r| r.is_err()));

        let refused = anyhow::anyhow!("the agent refused the bootstrap nonce").context("reconnect");
        let end = BodyEnd::of(Err(super::super::scenario::broken_by(
            &REHANDSHAKE,
            refused,
        )));
        assert_eq!(end.outcome(), Outcome::Failed);
        assert!(
            matches!(&end, BodyEnd::Broke("rehandshake", why) if why.contains("refused the bootstrap nonce")),
            "{end:?}"
        );
    }

    /// One walk of the chain decides: a missing worker tool outranks a broken check, which
    /// outranks a mutated admission; the broken check names the diagnosis and fails its check.
    #[test]
    fn an_error_is_classified_once_by_what_its_chain_holds() {
        const HOLDS: Check = Check {
            id: "holds",
            promise: "it holds",
            twin: Twin::Exempt("test"),
        };
        const BREAKS: Check = Check {
            id: "breaks",
            promise: "it breaks",
            twin: Twin::Exempt("test"),
        };
        fn run(_: &mut Ctx) -> crate::runner::ScenarioFuture<'_> {
            Box::pin(async { Ok(Verdict::Passed) })
        }
        let scenario = Scenario {
            name: "a::x",
            promise: "p",
            timeout: Duration::from_secs(1),
            starts_first: false,
            checks: &[HOLDS, BREAKS],
            run,
        };
        let lacks = || WorkerImageLacks {
            image: "worker".into(),
            tool: "docker".into(),
        };
        let broke = BodyEnd::of(Err(
            crate::runner::broken(&BREAKS, "evidence").context("step")
        ));
        assert_eq!(broke.broken_check(), Some("breaks"));
        assert_eq!(broke.outcome(), Outcome::Failed);
        assert_eq!(
            broke.diagnosis(&scenario).as_deref(),
            Some("a::x/breaks: step: it breaks: evidence")
        );
        let judged = Judged {
            held: vec!["holds", "breaks"],
            not_judged: Vec::new(),
            lacking: Vec::new(),
        };
        let checks = check_reports(&scenario, &judged, broke.broken_check());
        assert_eq!(
            checks.iter().map(|c| c.outcome).collect::<Vec<_>>(),
            [CheckOutcome::Passed, CheckOutcome::Failed]
        );
        let lacking = BodyEnd::of(Err(anyhow::Error::new(lacks()).context(Broken {
            check: "breaks",
            promise: "it breaks",
            evidence: "e".into(),
            cause: None,
        })));
        assert!(
            matches!(lacking, BodyEnd::Lacks(Capability::Docker, _)),
            "{lacking:?}"
        );
        assert_eq!(lacking.broken_check(), None);
    }

    #[test]
    fn a_pass_that_judged_not_every_check_is_no_pass() {
        let check = |outcome| CheckReport {
            id: "a::x/c".into(),
            promise: "p".into(),
            kind: Default::default(),
            outcome,
            reason: None,
            lacking: None,
            twin: "t".into(),
        };
        let judged = [check(CheckOutcome::Passed)];
        assert_eq!(BodyEnd::Passed.unless_vacuous(&judged), BodyEnd::Passed);
        let vacuous = [check(CheckOutcome::Passed), check(CheckOutcome::NotReached)];
        let ended = BodyEnd::Passed.unless_vacuous(&vacuous);
        assert!(
            ended.outcome() == Outcome::Errored
                && matches!(&ended, BodyEnd::Errored(why) if why.contains("without judging a::x/c")),
            "{ended:?}"
        );
        // Skipped, incompatible and failed bodies judged nothing more: left as they are.
        let skipped = BodyEnd::Skipped("no node view".into());
        assert_eq!(skipped.clone().unless_vacuous(&vacuous), skipped);
    }

    /// A scenario left unjudged (here: no node view) reports the checks it never reached as
    /// `not judged` with its reason; a failed body's unreached checks stay `not reached`.
    #[test]
    fn an_unjudged_scenarios_unreached_checks_are_not_judged_with_its_reason() {
        let check = |outcome| CheckReport {
            id: "cgroup::accounting/charged".into(),
            promise: "p".into(),
            kind: Default::default(),
            outcome,
            reason: None,
            lacking: None,
            twin: "t".into(),
        };
        let lacks = BodyEnd::Lacks(Capability::NodeView, "no node view".into());
        let mut checks = [check(CheckOutcome::Passed), check(CheckOutcome::NotReached)];
        lacks.mark_unjudged(&mut checks);
        assert_eq!(checks[0].outcome, CheckOutcome::Passed);
        assert_eq!(checks[1].outcome, CheckOutcome::NotJudged);
        assert_eq!(checks[1].reason.as_deref(), Some("no node view"));
        let mut checks = [check(CheckOutcome::NotReached)];
        BodyEnd::Errored("boom".into()).mark_unjudged(&mut checks);
        assert_eq!(checks[0].outcome, CheckOutcome::NotReached);
    }

    /// A check the body could not judge is `not judged` with its reason, even where part of
    /// it held; a pass with it is no vacuous pass, but the release gate refuses it.
    #[test]
    fn a_check_not_judged_is_reported_so_and_fails_only_a_release_gate() {
        const SEEN: Check = Check {
            id: "seen",
            promise: "seen",
            twin: Twin::Exempt("test"),
        };
        const UNSEEN: Check = Check {
            id: "unseen",
            promise: "unseen",
            twin: Twin::Exempt("test"),
        };
        fn run(_: &mut Ctx) -> crate::runner::ScenarioFuture<'_> {
            Box::pin(async { Ok(Verdict::Passed) })
        }
        let scenario = Scenario {
            name: "a::x",
            promise: "p",
            timeout: Duration::from_secs(1),
            starts_first: false,
            checks: &[SEEN, UNSEEN],
            run,
        };
        let judged = Judged {
            held: vec!["seen", "unseen"],
            not_judged: vec![("unseen", "no host engine".into())],
            lacking: Vec::new(),
        };
        let checks = check_reports(&scenario, &judged, None);
        assert_eq!(checks[0].outcome, CheckOutcome::Passed);
        assert_eq!(checks[1].outcome, CheckOutcome::NotJudged);
        assert_eq!(checks[1].reason.as_deref(), Some("no host engine"));
        let end = BodyEnd::Passed.unless_vacuous(&checks);
        assert_eq!(end, BodyEnd::Passed);
        let default = Gate::resolve(GateProfile::Default, Some(&[]), &[], "kind");
        assert_eq!(
            end.clone().unless_unjudged_under(&default, &checks),
            BodyEnd::Passed
        );
        let release = Gate::resolve(GateProfile::Release, None, &[], "kind");
        let refused = end.unless_unjudged_under(&release, &checks);
        assert!(
            refused.outcome() == Outcome::Failed
                && refused
                    .reason()
                    .is_some_and(|r| r.contains("a::x/unseen (no host engine)")),
            "{refused:?}"
        );
    }

    /// A check the backend's lack of a capability left unjudged says so in the report, and
    /// the release gate excuses it where the backend cannot have the capability (local lacks
    /// a cluster), as it does a skipped scenario's lack; where it can (kind), it fails.
    #[test]
    fn a_check_unjudged_for_a_lack_is_excused_only_where_the_gate_does_not_require_it() {
        const LABELS: Check = Check {
            id: "labels",
            promise: "labels",
            twin: Twin::Exempt("test"),
        };
        fn run(_: &mut Ctx) -> crate::runner::ScenarioFuture<'_> {
            Box::pin(async { Ok(Verdict::Passed) })
        }
        let scenario = Scenario {
            name: "a::x",
            promise: "p",
            timeout: Duration::from_secs(1),
            starts_first: false,
            checks: &[LABELS],
            run,
        };
        let judged = Judged {
            held: vec!["labels"],
            not_judged: vec![("labels", "only the harness labels them here".into())],
            lacking: vec![("labels", Capability::Cluster)],
        };
        let checks = check_reports(&scenario, &judged, None);
        assert_eq!(checks[0].outcome, CheckOutcome::NotJudged);
        assert_eq!(checks[0].lacking, Some(Capability::Cluster));
        let on_local = Gate::resolve(GateProfile::Release, None, &[], "local");
        assert_eq!(
            BodyEnd::Passed.unless_unjudged_under(&on_local, &checks),
            BodyEnd::Passed
        );
        let on_kind = Gate::resolve(GateProfile::Release, None, &[], "kind");
        assert_eq!(
            BodyEnd::Passed
                .unless_unjudged_under(&on_kind, &checks)
                .outcome(),
            Outcome::Failed
        );
    }

    #[test]
    fn the_release_gate_fails_what_was_left_unjudged() {
        let release = Gate::resolve(GateProfile::Release, None, &[], "kind");
        let default = Gate::resolve(GateProfile::Default, Some(&[]), &[], "kind");
        let incompatible = || BodyEnd::Incompatible("empty_dir".into());
        let ended = incompatible().by_gate(&release);
        assert!(
            ended.outcome() == Outcome::Failed
                && ended
                    .reason()
                    .is_some_and(|why| why.contains("unjudged: empty_dir")),
            "{ended:?}"
        );
        assert_eq!(incompatible().by_gate(&default), incompatible());
        let lacks = BodyEnd::Lacks(Capability::NodeView, "no node view".into());
        assert_eq!(lacks.clone().by_gate(&release).outcome(), Outcome::Failed);
        assert_eq!(
            lacks.clone().by_gate(&default),
            BodyEnd::Skipped("no node view".into())
        );
        assert_eq!(lacks.lacking(), Some(Capability::NodeView));
    }

    #[test]
    fn a_local_release_skips_what_needs_a_cluster_and_a_cluster_release_fails_it() {
        let no_cluster = || BodyEnd::Lacks(Capability::Cluster, "no API server".into());
        let local = Gate::resolve(GateProfile::Release, None, &[], "local");
        assert_eq!(
            no_cluster().by_gate(&local),
            BodyEnd::Skipped("no API server".into())
        );
        let kube = Gate::resolve(GateProfile::Release, None, &[], "kube");
        assert_eq!(no_cluster().by_gate(&kube).outcome(), Outcome::Failed);
        let asked = Gate::resolve(
            GateProfile::Default,
            Some(&[Capability::Cluster]),
            &[],
            "local",
        );
        assert_eq!(no_cluster().by_gate(&asked).outcome(), Outcome::Failed);
    }
}
