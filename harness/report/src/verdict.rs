//! The one pass/fail rule of a report: what a run's exit code says, what report.json's own
//! `verdict` records, and what `kandev-acceptance gate` holds a report to before it compares
//! the artefacts a release ships (the gate adds only those: the catalogue, the images, the
//! template, the age). Every reason is named; the exit code is the most severe class among
//! them.

use crate::exit::{ENVIRONMENT, INTERRUPTED, LEAKED, SCENARIO_FAILED, SUCCESS};
use crate::gate::{Capability, GateProfile};
use crate::run::{Report, Verdict};
use crate::scenario::{CheckOutcome, CleanupOutcome, Outcome, StepOutcome};

/// What a report is judged by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// The release profile adds its own reasons: a filtered run, a skipped scenario lacking a
    /// required capability, a flaky pass, a check of a passed scenario not judged (or not
    /// reached), an image the Pods ran that is not the one recorded.
    pub profile: GateProfile,
    /// Under the release profile: the capabilities whose lack a skipped or incompatible
    /// scenario may not plead.
    pub requires: Vec<Capability>,
    /// The run was told to keep its Pods (`--keep`): what it left is not a leak.
    pub kept: bool,
}

impl Rules {
    /// The rules the report's own run was judged by: its gate, and its `--keep`.
    pub fn of_run(report: &Report) -> Self {
        Self {
            profile: report.gate.profile,
            requires: report.gate.requires.clone(),
            kept: crate::exit::kept(report),
        }
    }

    /// The release gate's rules (`kandev-acceptance gate`): `requires` as the gate resolves
    /// them, nothing excused as kept.
    pub fn release(requires: Vec<Capability>) -> Self {
        Self {
            profile: GateProfile::Release,
            requires,
            kept: false,
        }
    }
}

/// Exit codes from the most to the least severe.
const SEVERITY: [u8; 4] = [INTERRUPTED, SCENARIO_FAILED, ENVIRONMENT, LEAKED];

/// Judges `report` by `rules`: every reason it does not pass, and the exit code they map to.
pub fn judge(report: &Report, rules: &Rules) -> Verdict {
    let release = rules.profile == GateProfile::Release;
    let mut found: Vec<(u8, String)> = Vec::new();
    if report.interrupted {
        found.push((
            INTERRUPTED,
            "the run was interrupted before every scenario finished".into(),
        ));
    }
    if report.deadline_exceeded {
        found.push((
            SCENARIO_FAILED,
            "the run's --deadline passed before every scenario finished".into(),
        ));
    }
    if release && let Some(selection) = report.selection.as_ref().filter(|s| s.filtered) {
        found.push((
            SCENARIO_FAILED,
            format!(
                "the run was filtered (FILTER, --skip or --exact) and left out {}: a release needs the whole catalogue",
                selection.left_out.join(", ")
            ),
        ));
    }
    // A set-up step that did not pass stopped the run before its scenarios (a Kind cluster
    // that did not come up, an engine that did not answer): never a pass, whatever ran.
    for step in report
        .setup
        .iter()
        .filter(|s| matches!(s.outcome, StepOutcome::Errored | StepOutcome::Failed))
    {
        let error = step.error.as_deref().unwrap_or("no error recorded");
        found.push((
            ENVIRONMENT,
            format!(
                "the run's set-up step {} did not pass: {}",
                step.name,
                error.lines().next().unwrap_or_default()
            ),
        ));
    }
    for s in &report.scenarios {
        let said = || {
            format!(
                "{} {}: {}",
                s.name,
                s.outcome.as_str(),
                s.diagnosis.as_deref().unwrap_or("no diagnosis")
            )
        };
        match s.outcome {
            Outcome::Passed => {}
            Outcome::Failed | Outcome::TimedOut => found.push((SCENARIO_FAILED, said())),
            Outcome::Errored | Outcome::Cancelled => found.push((ENVIRONMENT, said())),
            Outcome::Leaked if s.leaks.is_empty() => found.push((LEAKED, said())),
            Outcome::Leaked => {
                found.push((LEAKED, format!("{} leaked {}", s.name, s.leaks.join(", "))))
            }
            Outcome::Skipped | Outcome::Incompatible => {
                let excused = s.lacking.is_some_and(|c| !rules.requires.contains(&c));
                if release && !excused {
                    found.push((SCENARIO_FAILED, said()));
                }
            }
        }
        if !release || s.outcome != Outcome::Passed {
            continue;
        }
        if s.flaky {
            found.push((
                SCENARIO_FAILED,
                format!("{} passed only on attempt {} (flaky)", s.name, s.attempts),
            ));
        }
        // A check the backend could not judge for want of a capability the gate does not
        // require is excused, as a skipped scenario's lack is; the verdict's lines name it.
        let excused = |c: &&crate::CheckReport| {
            c.outcome == CheckOutcome::NotJudged
                && c.lacking.is_some_and(|cap| !rules.requires.contains(&cap))
        };
        for c in s
            .checks
            .iter()
            .filter(|c| c.outcome != CheckOutcome::Passed && !excused(c))
        {
            let why = c
                .reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            found.push((
                SCENARIO_FAILED,
                format!("check {} {}{why}", c.id, c.outcome.as_str()),
            ));
        }
    }
    if release {
        for image in &report.environment.images {
            for ran in image.disagreements() {
                found.push((
                    SCENARIO_FAILED,
                    format!(
                        "the {} containers ran {} (id {}), not the {} image the report records ({}, id {})",
                        image.role,
                        ran.image,
                        ran.image_id,
                        image.role,
                        image.reference,
                        image.id.as_deref().unwrap_or("unknown")
                    ),
                ));
            }
        }
    }
    if !report.leftovers.is_empty() && !rules.kept {
        found.push((
            LEAKED,
            format!("the run left {}", report.leftovers.join(", ")),
        ));
    }
    for record in report
        .teardown
        .iter()
        .filter(|r| r.outcome == CleanupOutcome::Failed)
    {
        found.push((
            LEAKED,
            format!(
                "the run's teardown failed to remove {}: {}",
                record.object,
                record.error.as_deref().unwrap_or("no error recorded")
            ),
        ));
    }
    let severity = |code: u8| SEVERITY.iter().position(|s| *s == code);
    found.sort_by_key(|(code, _)| severity(*code));
    let exit_code = found.first().map_or(SUCCESS, |(code, _)| *code);
    Verdict {
        profile: rules.profile,
        passed: found.is_empty(),
        exit_code,
        reasons: found.into_iter().map(|(_, reason)| reason).collect(),
    }
}

/// The report's own verdict when it carries one, else (a report before schema 2) the one
/// [`judge`] gives it by its run's rules.
pub fn verdict_of(report: &Report) -> Verdict {
    report
        .verdict
        .clone()
        .unwrap_or_else(|| judge(report, &Rules::of_run(report)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{ImageRecord, RanImage, Selection};
    use crate::scenario::{CheckReport, CleanupRecord, ScenarioReport, StepReport};
    use crate::summary::Summary;

    fn scenario(name: &str, outcome: Outcome) -> ScenarioReport {
        ScenarioReport {
            name: name.into(),
            outcome,
            diagnosis: (outcome != Outcome::Passed).then(|| format!("{name} broke")),
            checks: vec![CheckReport {
                id: format!("{name}/holds"),
                promise: "p".into(),
                kind: Default::default(),
                outcome: CheckOutcome::Passed,
                reason: None,
                lacking: None,
                twin: "t".into(),
            }],
            ..Default::default()
        }
    }

    fn report(scenarios: Vec<ScenarioReport>) -> Report {
        Report {
            summary: Summary::of(&scenarios),
            scenarios,
            ..Default::default()
        }
    }

    fn default_rules() -> Rules {
        Rules {
            profile: GateProfile::Default,
            requires: Vec::new(),
            kept: false,
        }
    }

    #[test]
    fn a_clean_report_passes_under_either_profile() {
        let r = report(vec![scenario("a::x", Outcome::Passed)]);
        for rules in [default_rules(), Rules::release(Capability::ALL.to_vec())] {
            let v = judge(&r, &rules);
            assert!(
                v.passed && v.exit_code == SUCCESS && v.reasons.is_empty(),
                "{v:?}"
            );
            assert_eq!(v.profile, rules.profile);
        }
    }

    /// A run whose set-up stopped it (the Kind cluster did not come up) judged no scenario:
    /// its verdict is the environment's failure, not a pass of nothing.
    #[test]
    fn a_set_up_step_that_did_not_pass_fails_the_run() {
        let mut r = report(Vec::new());
        r.setup = vec![StepReport {
            name: "cluster_setup".into(),
            outcome: StepOutcome::Errored,
            offset_ms: 0,
            duration_ms: 1,
            evidence: serde_json::Value::Null,
            error: Some("kind create cluster c failed: kubeadm init\nmore".into()),
        }];
        let v = judge(&r, &default_rules());
        assert!(!v.passed && v.exit_code == ENVIRONMENT, "{v:?}");
        assert_eq!(
            v.reasons,
            vec![
                "the run's set-up step cluster_setup did not pass: kind create cluster c failed: kubeadm init"
                    .to_owned()
            ]
        );
    }

    #[test]
    fn every_reason_is_named_and_the_most_severe_class_is_the_exit_code() {
        let mut leaked = scenario("c::leaks", Outcome::Leaked);
        leaked.leaks = vec!["pod/p".into()];
        let mut r = report(vec![
            scenario("a::x", Outcome::Errored),
            scenario("b::y", Outcome::Failed),
            leaked,
        ]);
        r.leftovers = vec!["volume/v".into()];
        r.teardown = vec![CleanupRecord {
            object: "namespace/n".into(),
            outcome: CleanupOutcome::Failed,
            duration_ms: 1,
            error: Some("busy".into()),
        }];
        let v = judge(&r, &default_rules());
        assert_eq!(v.exit_code, SCENARIO_FAILED);
        assert_eq!(
            v.reasons,
            [
                "b::y failed: b::y broke",
                "a::x errored: a::x broke",
                "c::leaks leaked pod/p",
                "the run left volume/v",
                "the run's teardown failed to remove namespace/n: busy",
            ]
        );
        assert_eq!(v.brief(), "failed (exit 1, 5 reasons)");
        r.interrupted = true;
        let v = judge(&r, &default_rules());
        assert_eq!(v.exit_code, INTERRUPTED);
        assert_eq!(
            v.reasons[0],
            "the run was interrupted before every scenario finished"
        );
        // --keep excuses the run's leftovers, never a scenario's leak.
        let kept = Rules {
            kept: true,
            ..default_rules()
        };
        let only_leaks = report(vec![{
            let mut s = scenario("c::leaks", Outcome::Leaked);
            s.leaks = vec!["pod/p".into()];
            s
        }]);
        assert_eq!(judge(&only_leaks, &kept).exit_code, LEAKED);
        let mut left = report(vec![scenario("a::x", Outcome::Passed)]);
        left.leftovers = vec!["pod/kept".into()];
        assert_eq!(judge(&left, &kept).exit_code, SUCCESS);
        assert_eq!(judge(&left, &default_rules()).exit_code, LEAKED);
    }

    #[test]
    fn the_release_profile_fails_what_a_default_run_lets_pass() {
        let mut unjudged = scenario("a::x", Outcome::Passed);
        unjudged.checks[0].outcome = CheckOutcome::NotJudged;
        unjudged.checks[0].reason = Some("no host engine".into());
        let mut flaky = scenario("b::y", Outcome::Passed);
        flaky.flaky = true;
        flaky.attempts = 2;
        let mut skipped = scenario("c::z", Outcome::Skipped);
        skipped.lacking = Some(Capability::NodeView);
        let mut excused = scenario("d::w", Outcome::Skipped);
        excused.lacking = Some(Capability::Cluster);
        // A check a lacking cluster left unjudged is excused as the skipped scenario is; one
        // a lacking node view left so is not (the release requires the node view).
        let mut lacked = scenario("f::u", Outcome::Passed);
        lacked.checks[0].outcome = CheckOutcome::NotJudged;
        lacked.checks[0].reason = Some("only the harness labels them here".into());
        lacked.checks[0].lacking = Some(Capability::Cluster);
        let mut required = scenario("g::t", Outcome::Passed);
        required.checks[0].outcome = CheckOutcome::NotJudged;
        required.checks[0].reason = Some("no node view".into());
        required.checks[0].lacking = Some(Capability::NodeView);
        let mut r = report(vec![unjudged, flaky, skipped, excused, lacked, required]);
        r.selection = Some(Selection {
            filtered: true,
            left_out: vec!["e::v".into()],
            ..Default::default()
        });
        r.environment.images = vec![ImageRecord {
            role: "worker".into(),
            reference: "k/worker:abc".into(),
            id: Some("sha256:aaa".into()),
            built: true,
            ran: vec![
                RanImage {
                    image: "k/worker:abc".into(),
                    image_id: "sha256:aaa".into(),
                    containers: 3,
                },
                RanImage {
                    image: "r/other:1".into(),
                    image_id: "sha256:bbb".into(),
                    containers: 1,
                },
            ],
        }];
        let lenient = judge(&r, &default_rules());
        assert!(lenient.passed, "{lenient:?}");
        let release = judge(&r, &Rules::release(vec![Capability::NodeView]));
        assert_eq!(release.exit_code, SCENARIO_FAILED);
        assert_eq!(
            release.reasons,
            [
                "the run was filtered (FILTER, --skip or --exact) and left out e::v: a release needs the whole catalogue",
                "check a::x/holds not judged: no host engine",
                "b::y passed only on attempt 2 (flaky)",
                "c::z skipped: c::z broke",
                "check g::t/holds not judged: no node view",
                "the worker containers ran r/other:1 (id sha256:bbb), not the worker image the report records (k/worker:abc, id sha256:aaa)",
            ]
        );
    }

    #[test]
    fn an_image_ran_is_the_recorded_one_by_id_digest_or_kind_loaded_reference() {
        let record = ImageRecord {
            role: "daemon".into(),
            reference: "kandev-acceptance/daemon:abc".into(),
            id: Some("sha256:aaa".into()),
            built: true,
            ran: Vec::new(),
        };
        let ran = |image: &str, id: &str| RanImage {
            image: image.into(),
            image_id: id.into(),
            containers: 1,
        };
        assert!(record.is(&ran("kandev-acceptance/daemon:abc", "sha256:aaa")));
        assert!(record.is(&ran("x", "docker-pullable://x@sha256:aaa")));
        assert!(record.is(&ran(
            "docker.io/kandev-acceptance/daemon:abc",
            "docker.io/kandev-acceptance/daemon@sha256:fff"
        )));
        assert!(!record.is(&ran("kandev-acceptance/daemon:abc", "sha256:bbb")));
        assert!(!record.is(&ran("r/other:1", "r/other@sha256:fff")));
        let pinned = ImageRecord {
            reference: "r/daemon@sha256:ddd".into(),
            id: None,
            ..record.clone()
        };
        assert!(pinned.is(&ran("r/daemon@sha256:ddd", "r/daemon@sha256:ddd")));
        assert!(!pinned.is(&ran("r/daemon@sha256:ddd", "sha256:eee")));
        // A reference the cluster resolves, its id unknown to the run: by reference.
        let resolved = ImageRecord {
            reference: "registry.example/dind:1".into(),
            id: None,
            ..record
        };
        assert!(resolved.is(&ran("registry.example/dind:1", "sha256:fff")));
        assert!(!resolved.is(&ran("registry.example/other:1", "sha256:fff")));
    }

    #[test]
    fn a_report_without_a_verdict_is_judged_by_its_runs_rules() {
        let r = report(vec![scenario("a::x", Outcome::Failed)]);
        let v = verdict_of(&r);
        assert_eq!((v.passed, v.exit_code), (false, SCENARIO_FAILED));
        let carried = Report {
            verdict: Some(Verdict {
                profile: GateProfile::Release,
                passed: true,
                exit_code: 0,
                reasons: Vec::new(),
            }),
            ..r
        };
        assert!(
            verdict_of(&carried).passed,
            "the report's own verdict is shown as it is"
        );
    }
}
