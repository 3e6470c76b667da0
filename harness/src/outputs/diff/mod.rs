//! `report diff OLD NEW`: what changed between two runs — scenarios newly failing, fixed or
//! flaky, checks whose outcome changed, durations (per scenario and per launch stage) beyond
//! the noise threshold, and the environment (engine, kernel, images, template, gate).
//!
//! Something *regressed* when a scenario that was acceptable in OLD (or absent from it) is
//! not in NEW, or a check that passed in OLD failed, was not reached or was not judged in
//! NEW: then the exit code is [`exit::REGRESSED`]. A check that held and is now not judged
//! regresses even when its scenario still passes: the new report no longer vouches for that
//! promise, and a green that stopped judging is exactly the vacuous pass a diff must show. Slower durations and environment changes are reported, not judged:
//! timings on shared CI machines are too noisy to fail a job on.

pub mod text;

use kandev_report::{CheckKind, CheckOutcome, CheckSummary, Outcome, Report, ScenarioReport, exit};
use serde::Serialize;
use std::collections::BTreeMap;

/// A duration change is reported only beyond both of these: the larger of 2 s and 25 % of the
/// old duration. 2 s: on the 2-core reference machine the same scenario's duration varies by
/// up to about a second between runs (the engine is shared by the parallel scenarios); 25 %:
/// long scenarios vary in proportion (image pulls, nested builds).
pub const NOISE_FLOOR_MS: u64 = 2_000;
/// See [`NOISE_FLOOR_MS`].
pub const NOISE_PERCENT: u64 = 25;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diff {
    pub old_run: String,
    pub new_run: String,
    /// True when something regressed (the exit code is then [`exit::REGRESSED`]).
    pub regressed: bool,
    /// How duration changes are judged.
    pub threshold: String,
    /// Acceptable (or absent) in OLD, not acceptable in NEW.
    pub newly_failing: Vec<OutcomeChange>,
    /// Not acceptable in OLD, acceptable in NEW.
    pub fixed: Vec<OutcomeChange>,
    /// Passed in NEW only after a retry.
    pub flaky: Vec<String>,
    /// Any other change of outcome (passed → skipped, failed → errored, ...).
    pub other_outcome_changes: Vec<OutcomeChange>,
    /// Scenarios only OLD ran.
    pub removed: Vec<String>,
    /// Checks judged in both runs whose outcome changed.
    pub checks: Vec<CheckChange>,
    /// The catalogue's own changes between the two harnesses, reported apart from regressions:
    /// checks only one report has, and checks whose kind changed (never a change of the
    /// system under test; a release pins its catalogue through `gate`).
    pub catalogue_changes: Vec<CheckChange>,
    /// The checks of OLD and NEW, counted by kind: a green proves only its system checks about
    /// the cluster, template, images and prepare script.
    pub old_checks: CheckSummary,
    pub new_checks: CheckSummary,
    pub durations: Vec<DurationChange>,
    pub environment: Vec<EnvironmentChange>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OutcomeChange {
    pub scenario: String,
    /// None: OLD did not run it.
    pub old: Option<Outcome>,
    pub new: Outcome,
    /// NEW's diagnosis.
    pub diagnosis: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckChange {
    pub id: String,
    /// Its kind in NEW (in OLD when NEW does not have it).
    pub kind: CheckKind,
    /// Its kind in OLD when that differs (a check re-classified between the two harnesses).
    pub old_kind: Option<CheckKind>,
    /// None: the check was not in that report (a new check, or a report from before checks).
    pub old: Option<CheckOutcome>,
    pub new: Option<CheckOutcome>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DurationChange {
    /// `<scenario>`, `<scenario> CPU time` (its Pods') or `<scenario> launch stage <stage>`
    /// (mean over its sessions).
    pub what: String,
    pub old_ms: u64,
    pub new_ms: u64,
    /// `new - old`.
    pub delta_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnvironmentChange {
    pub what: String,
    pub old: String,
    pub new: String,
}

/// Whether `old → new` is beyond the noise threshold.
pub fn beyond_noise(old_ms: u64, new_ms: u64) -> bool {
    let threshold = NOISE_FLOOR_MS.max(old_ms * NOISE_PERCENT / 100);
    old_ms.abs_diff(new_ms) > threshold
}

/// Each launch stage's mean duration over a scenario's sessions.
fn stage_means(s: &ScenarioReport) -> BTreeMap<String, u64> {
    let mut sums: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for session in &s.sessions {
        for (stage, ms) in &session.launch_stages_ms {
            let entry = sums.entry(stage.clone()).or_default();
            entry.0 += ms;
            entry.1 += 1;
        }
    }
    sums.into_iter()
        .map(|(stage, (sum, n))| (stage, sum / n.max(1)))
        .collect()
}

fn text(value: Option<impl ToString>) -> String {
    value.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn environment(old: &Report, new: &Report) -> Vec<EnvironmentChange> {
    let (o, n) = (&old.environment, &new.environment);
    let gate = |r: &Report| {
        format!(
            "{} requires [{}]",
            r.gate.profile.name(),
            r.gate
                .requires
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let mut pairs = vec![
        ("backend", old.backend.clone(), new.backend.clone()),
        (
            "harness version",
            old.harness_version.clone(),
            new.harness_version.clone(),
        ),
        (
            "engine version",
            text(o.engine_version.as_ref()),
            text(n.engine_version.as_ref()),
        ),
        (
            "engine API version",
            text(o.engine_api_version.as_ref()),
            text(n.engine_api_version.as_ref()),
        ),
        (
            "kubernetes version",
            text(o.kubernetes_version.as_ref()),
            text(n.kubernetes_version.as_ref()),
        ),
        ("kernel", text(o.kernel.as_ref()), text(n.kernel.as_ref())),
        (
            "operating system",
            text(o.operating_system.as_ref()),
            text(n.operating_system.as_ref()),
        ),
        (
            "architecture",
            text(o.architecture.as_ref()),
            text(n.architecture.as_ref()),
        ),
        (
            "cgroup version",
            text(o.cgroup_version),
            text(n.cgroup_version),
        ),
        (
            "cgroup driver",
            text(o.cgroup_driver.as_ref()),
            text(n.cgroup_driver.as_ref()),
        ),
        (
            "template digest",
            text(o.template.as_ref().map(|t| &t.sha256)),
            text(n.template.as_ref().map(|t| &t.sha256)),
        ),
        (
            "template file digest",
            text(o.template.as_ref().and_then(|t| t.source_sha256.as_ref())),
            text(n.template.as_ref().and_then(|t| t.source_sha256.as_ref())),
        ),
        (
            "template path",
            text(o.template.as_ref().map(|t| &t.path)),
            text(n.template.as_ref().map(|t| &t.path)),
        ),
        ("gate", gate(old), gate(new)),
        (
            "configuration digest",
            old.configuration.sha256.clone(),
            new.configuration.sha256.clone(),
        ),
    ]
    .into_iter()
    .map(|(what, old, new)| (what.to_owned(), old, new))
    .collect::<Vec<_>>();
    let image = |r: &Report, role: &str| {
        r.environment
            .images
            .iter()
            .find(|i| i.role == role)
            .map(|i| format!("{} {}", i.reference, text(i.id.as_ref())))
            .unwrap_or_else(|| "-".into())
    };
    let mut roles: Vec<&str> = o
        .images
        .iter()
        .chain(&n.images)
        .map(|i| i.role.as_str())
        .collect();
    roles.sort_unstable();
    roles.dedup();
    for role in roles {
        pairs.push((format!("image {role}"), image(old, role), image(new, role)));
    }
    // Each setting that changed, by name (`setting cluster.namespace`), so a changed
    // configuration digest says why.
    let (old_settings, new_settings) = (
        flat_settings(&old.configuration.settings),
        flat_settings(&new.configuration.settings),
    );
    let names: std::collections::BTreeSet<&String> =
        old_settings.keys().chain(new_settings.keys()).collect();
    for name in names {
        let value = |settings: &std::collections::BTreeMap<String, String>| {
            settings.get(name).cloned().unwrap_or_else(|| "-".into())
        };
        pairs.push((
            format!("setting {name}"),
            value(&old_settings),
            value(&new_settings),
        ));
    }
    pairs
        .into_iter()
        .filter(|(_, o, n)| o != n)
        .map(|(what, old, new)| EnvironmentChange { what, old, new })
        .collect()
}

/// A report's recorded settings as `name: value` pairs (`cluster.namespace`), but those that
/// name where files lie (the report folder, the kubeconfig, the template's path: their
/// contents are compared apart, as the configuration digest counts them).
fn flat_settings(settings: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    fn walk(
        value: &serde_json::Value,
        name: String,
        out: &mut std::collections::BTreeMap<String, String>,
    ) {
        match value {
            serde_json::Value::Object(fields) => {
                for (key, field) in fields {
                    let child = if name.is_empty() {
                        key.clone()
                    } else {
                        format!("{name}.{key}")
                    };
                    walk(field, child, out);
                }
            }
            other => {
                out.insert(name, other.to_string());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(settings, String::new(), &mut out);
    for name in crate::runner::assemble::path_setting_names() {
        out.remove(&name);
    }
    out
}

/// What changed from `old` to `new`.
pub fn diff(old: &Report, new: &Report) -> Diff {
    let mut d = Diff {
        old_run: old.run_id.clone(),
        new_run: new.run_id.clone(),
        regressed: false,
        threshold: format!(
            "max({} s, {} %) of the old duration",
            NOISE_FLOOR_MS / 1000,
            NOISE_PERCENT
        ),
        newly_failing: Vec::new(),
        fixed: Vec::new(),
        flaky: Vec::new(),
        other_outcome_changes: Vec::new(),
        removed: Vec::new(),
        checks: Vec::new(),
        catalogue_changes: Vec::new(),
        old_checks: old.summary.checks.clone(),
        new_checks: new.summary.checks.clone(),
        durations: Vec::new(),
        environment: environment(old, new),
    };
    let before: BTreeMap<&str, &ScenarioReport> =
        old.scenarios.iter().map(|s| (s.name.as_str(), s)).collect();
    for s in &new.scenarios {
        let previous = before.get(s.name.as_str()).copied();
        let change = OutcomeChange {
            scenario: s.name.clone(),
            old: previous.map(|p| p.outcome),
            new: s.outcome,
            diagnosis: s.diagnosis.clone(),
        };
        let was_acceptable = previous.is_none_or(|p| p.outcome.is_acceptable());
        if s.flaky {
            d.flaky.push(s.name.clone());
        }
        match (was_acceptable, s.outcome.is_acceptable()) {
            (true, false) => d.newly_failing.push(change),
            (false, true) => d.fixed.push(change),
            _ if change.old.is_some_and(|o| o != s.outcome) => d.other_outcome_changes.push(change),
            _ => {}
        }
        let old_checks: BTreeMap<&str, (CheckOutcome, CheckKind)> = previous
            .map(|p| {
                p.checks
                    .iter()
                    .map(|c| (c.id.as_str(), (c.outcome, c.kind)))
                    .collect()
            })
            .unwrap_or_default();
        for c in &s.checks {
            if previous.is_none_or(|p| p.checks.is_empty()) {
                continue;
            }
            let Some(&(was_outcome, was_kind)) = old_checks.get(c.id.as_str()) else {
                d.catalogue_changes.push(CheckChange {
                    id: c.id.clone(),
                    kind: c.kind,
                    old_kind: None,
                    old: None,
                    new: Some(c.outcome),
                });
                continue;
            };
            let old_kind = Some(was_kind).filter(|k| *k != c.kind);
            let change = CheckChange {
                id: c.id.clone(),
                kind: c.kind,
                old_kind,
                old: Some(was_outcome),
                new: Some(c.outcome),
            };
            if was_outcome != c.outcome {
                d.checks.push(change);
            } else if old_kind.is_some() {
                d.catalogue_changes.push(change);
            }
        }
        if let Some(p) = previous {
            for c in &p.checks {
                if !s.checks.iter().any(|n| n.id == c.id) && !s.checks.is_empty() {
                    d.catalogue_changes.push(CheckChange {
                        id: c.id.clone(),
                        kind: c.kind,
                        old_kind: None,
                        old: Some(c.outcome),
                        new: None,
                    });
                }
            }
            // Durations mean something only when both runs judged the scenario the same way.
            if p.outcome == s.outcome {
                let mut changes = vec![(s.name.clone(), p.duration_ms, s.duration_ms)];
                if let (Some(o), Some(n)) = (&p.resources, &s.resources) {
                    changes.push((format!("{} CPU time", s.name), o.cpu_ms, n.cpu_ms));
                }
                let (old_stages, new_stages) = (stage_means(p), stage_means(s));
                for (stage, new_ms) in &new_stages {
                    if let Some(old_ms) = old_stages.get(stage) {
                        changes.push((
                            format!("{} launch stage {stage}", s.name),
                            *old_ms,
                            *new_ms,
                        ));
                    }
                }
                d.durations.extend(
                    changes
                        .into_iter()
                        .filter(|(_, o, n)| beyond_noise(*o, *n))
                        .map(|(what, old_ms, new_ms)| DurationChange {
                            what,
                            old_ms,
                            new_ms,
                            delta_ms: new_ms as i64 - old_ms as i64,
                        }),
                );
            }
        }
    }
    d.removed = old
        .scenarios
        .iter()
        .filter(|o| !new.scenarios.iter().any(|n| n.name == o.name))
        .map(|o| o.name.clone())
        .collect();
    // A check that held and now fails, is not reached or is not judged (a newly vacuous
    // pass: the new report stops vouching for it), and a scenario no longer run, are
    // regressions too; the catalogue's own changes are not.
    d.regressed = !d.newly_failing.is_empty()
        || !d.removed.is_empty()
        || d.checks.iter().any(|c| {
            c.old == Some(CheckOutcome::Passed)
                && matches!(
                    c.new,
                    Some(CheckOutcome::Failed | CheckOutcome::NotReached | CheckOutcome::NotJudged)
                )
        });
    d
}

/// The exit code of `report diff`.
pub fn exit_code(diff: &Diff) -> u8 {
    if diff.regressed {
        exit::REGRESSED
    } else {
        exit::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::html::tests::{report, scenario};
    use kandev_report::{ImageRecord, TemplateRecord};
    use text::human;

    fn pair() -> (Report, Report) {
        let old = report(vec![
            scenario("a::one", Outcome::Passed, None),
            scenario("b::two", Outcome::Failed, Some("b::two/first: broke")),
            scenario("c::three", Outcome::Passed, None),
        ]);
        let mut new = old.clone();
        new.run_id = "r2".into();
        (old, new)
    }

    #[test]
    fn a_changed_setting_is_named_and_where_reports_go_is_not() {
        let (mut old, mut new) = pair();
        old.configuration.settings = serde_json::json!({"report_dir": "/a/reports", "cluster": {"namespace": "x"}, "retries": 0});
        new.configuration.settings = serde_json::json!({"report_dir": "/b/reports", "cluster": {"namespace": "y"}, "retries": 0});
        let changed: Vec<(String, String, String)> = diff(&old, &new)
            .environment
            .into_iter()
            .map(|c| (c.what, c.old, c.new))
            .collect();
        assert_eq!(
            changed,
            vec![(
                "setting cluster.namespace".to_owned(),
                "\"x\"".to_owned(),
                "\"y\"".to_owned()
            )]
        );
    }

    #[test]
    fn the_same_report_has_no_changes() {
        let (old, new) = pair();
        let d = diff(&old, &new);
        assert!(!d.regressed);
        assert!(d.newly_failing.is_empty() && d.fixed.is_empty() && d.checks.is_empty());
        assert!(d.durations.is_empty() && d.environment.is_empty());
        assert_eq!(exit_code(&d), exit::SUCCESS);
    }

    #[test]
    fn pass_to_fail_regresses_and_fail_to_pass_is_fixed() {
        let (old, mut new) = pair();
        new.scenarios[0] = scenario("a::one", Outcome::Failed, Some("a::one/first: now broken"));
        new.scenarios[1] = scenario("b::two", Outcome::Passed, None);
        let d = diff(&old, &new);
        assert!(d.regressed);
        assert_eq!(exit_code(&d), exit::REGRESSED);
        assert_eq!(d.newly_failing.len(), 1);
        assert_eq!(d.newly_failing[0].scenario, "a::one");
        assert_eq!(d.newly_failing[0].old, Some(Outcome::Passed));
        assert_eq!(d.fixed.len(), 1);
        assert_eq!(d.fixed[0].scenario, "b::two");
        let changes: Vec<_> = d
            .checks
            .iter()
            .map(|c| (c.id.as_str(), c.old, c.new))
            .collect();
        assert!(changes.contains(&(
            "a::one/first",
            Some(CheckOutcome::Passed),
            Some(CheckOutcome::Failed)
        )));
        assert!(changes.contains(&(
            "b::two/second",
            Some(CheckOutcome::NotReached),
            Some(CheckOutcome::Passed)
        )));
        let text = human(&d);
        assert!(text.contains("REGRESSED"), "{text}");
        assert!(
            text.contains(
                "a::one                       passed -> failed: a::one/first: now broken"
            ),
            "{text}"
        );
        // Only fixes: no regression.
        let only_fixed = {
            let mut fixed = old.clone();
            fixed.scenarios[1] = scenario("b::two", Outcome::Passed, None);
            diff(&old, &fixed)
        };
        assert!(!only_fixed.regressed);
        assert_eq!(exit_code(&only_fixed), exit::SUCCESS);
    }

    #[test]
    fn a_check_that_held_and_now_fails_regresses_while_the_scenario_stays_failed() {
        let (mut old, mut new) = pair();
        // OLD: b::two's first check held, its second failed.
        old.scenarios[1].checks[0].outcome = CheckOutcome::Passed;
        old.scenarios[1].checks[1].outcome = CheckOutcome::Failed;
        let d = diff(&old, &new);
        assert!(d.newly_failing.is_empty(), "b::two failed in both");
        assert!(d.regressed, "b::two/first held and now fails: {d:?}");
        // A check that never held (not reached -> failed) is no regression.
        new.scenarios[1].checks[0].outcome = CheckOutcome::Passed;
        new.scenarios[1].checks[1].outcome = CheckOutcome::Failed;
        old.scenarios[1].checks[0].outcome = CheckOutcome::Passed;
        old.scenarios[1].checks[1].outcome = CheckOutcome::NotReached;
        let d = diff(&old, &new);
        assert_eq!(d.checks.len(), 1);
        assert!(!d.regressed, "{d:?}");
    }

    #[test]
    fn a_check_that_held_and_is_now_not_judged_regresses_and_the_reverse_does_not() {
        let (old, mut new) = pair();
        new.scenarios[0].checks[0].outcome = CheckOutcome::NotJudged;
        new.scenarios[0].checks[0].reason = Some("no host engine".into());
        new.summary = kandev_report::Summary::of(&new.scenarios);
        let d = diff(&old, &new);
        assert!(d.newly_failing.is_empty(), "a::one still passes");
        assert!(d.regressed, "{d:?}");
        let text = human(&d);
        assert!(
            text.contains("a::one/first                             system passed -> not judged"),
            "{text}"
        );
        assert!(text.contains("1 not judged"), "{text}");
        let back = diff(&new, &old);
        assert!(!back.regressed, "not judged -> passed is a fix: {back:?}");
    }

    #[test]
    fn the_catalogues_own_changes_are_reported_apart_and_do_not_regress() {
        let (mut old, mut new) = pair();
        // NEW's harness no longer has a::one/first and calls a::one/second a system check.
        old.scenarios[0].checks[1].kind = CheckKind::Mirror;
        old.summary = kandev_report::Summary::of(&old.scenarios);
        new.scenarios[0].checks.remove(0);
        new.scenarios[0].checks[0].kind = CheckKind::System;
        new.summary = kandev_report::Summary::of(&new.scenarios);
        let d = diff(&old, &new);
        assert!(!d.regressed, "{d:?}");
        assert!(d.checks.is_empty(), "{d:?}");
        let changes: Vec<_> = d
            .catalogue_changes
            .iter()
            .map(|c| (c.id.as_str(), c.old_kind, c.new))
            .collect();
        assert_eq!(
            changes,
            [
                (
                    "a::one/second",
                    Some(CheckKind::Mirror),
                    Some(CheckOutcome::Passed)
                ),
                ("a::one/first", None, None),
            ]
        );
        assert!(human(&d).contains("catalogue changes"), "{}", human(&d));
    }

    #[test]
    fn durations_beyond_the_threshold_only() {
        assert!(!beyond_noise(1_000, 2_900), "under 2 s");
        assert!(beyond_noise(1_000, 3_100));
        assert!(!beyond_noise(20_000, 24_900), "under 25 %");
        assert!(beyond_noise(20_000, 25_100));
        assert!(beyond_noise(20_000, 14_000), "faster counts too");
        let (old, mut new) = pair();
        new.scenarios[0].duration_ms = 4_000 + 1_900;
        new.scenarios[2].duration_ms = 4_000 + 2_500;
        new.scenarios[2].sessions[0].launch_stages_ms[1].1 = 4_000;
        let d = diff(&old, &new);
        let what: Vec<_> = d.durations.iter().map(|c| c.what.as_str()).collect();
        assert_eq!(what, vec!["c::three", "c::three launch stage pod_ready"]);
        assert_eq!(d.durations[0].delta_ms, 2_500);
        assert!(!d.regressed, "slower is reported, not judged");
        assert!(human(&d).contains("+2.5 s, slower"), "{}", human(&d));
    }

    #[test]
    fn environment_changes_are_listed() {
        let (mut old, mut new) = pair();
        old.environment.kernel = Some("6.1".into());
        new.environment.kernel = Some("6.8".into());
        old.environment.template = Some(TemplateRecord {
            path: "t.yaml".into(),
            sha256: "sha256:aaa".into(),
            source_sha256: None,
        });
        new.environment.template = Some(TemplateRecord {
            path: "t.yaml".into(),
            sha256: "sha256:bbb".into(),
            source_sha256: None,
        });
        new.environment.images.push(ImageRecord {
            role: "worker".into(),
            reference: "w:1".into(),
            id: Some("sha256:1".into()),
            built: false,
            ran: Vec::new(),
        });
        new.gate.profile = kandev_report::GateProfile::Release;
        let d = diff(&old, &new);
        let what: Vec<_> = d.environment.iter().map(|c| c.what.as_str()).collect();
        assert_eq!(
            what,
            vec!["kernel", "template digest", "gate", "image worker"]
        );
        assert!(!d.regressed);
        assert!(human(&d).contains("template digest: sha256:aaa -> sha256:bbb"));
    }

    #[test]
    fn a_report_from_before_checks_diffs_by_outcome() {
        let (mut old, new) = pair();
        for s in &mut old.scenarios {
            s.checks.clear();
        }
        let d = diff(&old, &new);
        assert!(d.checks.is_empty(), "no check is new for lack of history");
        assert!(!d.regressed);
    }
}
