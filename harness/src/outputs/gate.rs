//! What `kandev-acceptance gate` holds a report to, and every reason a report does not gate
//! a release (the words, capabilities and profiles, are kandev-report's).

use kandev_report::{
    Capability, CheckKind, CheckOutcome, CleanupOutcome, GateProfile, Outcome, Report, unix_ms,
};

/// What `kandev-acceptance gate` holds a report to: exactly these artefacts, this
/// catalogue, these capabilities, this recent.
#[derive(Debug, Clone, Default)]
pub struct Expectations {
    /// `name@sha256:<digest>` of the worker and daemon images the release ships.
    pub worker_image: String,
    pub daemon_image: String,
    /// SHA-256 (hex) of the template file the release ships, if it is gated too.
    pub template_sha256: Option<String>,
    /// How old (since the run finished) the report may be, in milliseconds.
    pub max_age_ms: Option<u64>,
    /// Capabilities whose lack fails (the release profile: all).
    pub requires: Vec<Capability>,
    /// Every scenario of this harness's catalogue with its check ids and their kinds.
    pub catalogue: Vec<(String, Vec<(String, CheckKind)>)>,
    /// Now, in milliseconds since the epoch.
    pub now_ms: u64,
}

/// Whether the image the report ran as `role` is exactly `expected` (`name@sha256:<digest>`):
/// the same reference, or the digest as the reference's or as the engine's image id (images
/// built locally have only the latter).
fn same_image(report: &Report, role: &str, expected: &str) -> Result<(), String> {
    let Some(image) = report.environment.images.iter().find(|i| i.role == role) else {
        return Err(format!("the report records no {role} image"));
    };
    let digest = expected
        .split_once("@sha256:")
        .map(|(_, d)| format!("sha256:{d}"))
        .unwrap_or_default();
    let matches = image.reference == expected
        || (!digest.is_empty()
            && (image.reference.ends_with(&format!("@{digest}"))
                || image.id.as_deref() == Some(digest.as_str())));
    if matches {
        Ok(())
    } else {
        Err(format!(
            "the run used {role} image {} (id {}), not {expected}",
            image.reference,
            image.id.as_deref().unwrap_or("unknown")
        ))
    }
}

/// What a passing gate says it proves, counted by kind from the catalogue and the report:
/// "62 system checks (58 with a twin) and 10 mirror checks passed".
pub fn passed_line(report: &Report, expect: &Expectations) -> String {
    let kinds = expect.catalogue.iter().flat_map(|(_, checks)| checks);
    let system = kinds
        .clone()
        .filter(|(_, k)| *k == CheckKind::System)
        .count();
    let mirror = kinds.filter(|(_, k)| *k == CheckKind::Mirror).count();
    let with_twin = report.summary.checks.with_twin;
    format!(
        "{system} system checks ({with_twin} with a twin) and {mirror} mirror checks (which judge only the harness's mirror of Kandev) passed"
    )
}

/// Every reason `report` does not gate a release under `expect` (empty: it does).
pub fn refusals(report: &Report, expect: &Expectations) -> Vec<String> {
    let mut reasons = Vec::new();
    if report.gate.profile != GateProfile::Release {
        reasons.push(format!(
            "the run was judged by the {} gate, not the release gate (run it with --gate-profile release)",
            report.gate.profile.name()
        ));
    }
    if report.interrupted {
        reasons.push("the run was interrupted before every scenario finished".to_owned());
    }
    if report.deadline_exceeded {
        reasons.push("the run's --deadline passed before every scenario finished".to_owned());
    }
    for (name, checks) in &expect.catalogue {
        let Some(scenario) = report.scenarios.iter().find(|s| &s.name == name) else {
            reasons.push(format!(
                "{name} was not run (a release needs the whole catalogue)"
            ));
            continue;
        };
        let excused = matches!(scenario.outcome, Outcome::Skipped | Outcome::Incompatible)
            && scenario
                .lacking
                .is_some_and(|c| !expect.requires.contains(&c));
        if excused {
            continue;
        }
        if scenario.flaky {
            reasons.push(format!(
                "{name} passed only on attempt {} (flaky)",
                scenario.attempts
            ));
        }
        if scenario.outcome != Outcome::Passed {
            reasons.push(format!(
                "{name} {}: {}",
                scenario.outcome.as_str(),
                scenario.diagnosis.as_deref().unwrap_or("no diagnosis")
            ));
            continue;
        }
        for (id, kind) in checks {
            match scenario.checks.iter().find(|c| &c.id == id) {
                Some(c) if c.kind != *kind => reasons.push(format!(
                    "check {id} is a {} check in the report, a {} check in this harness: run this harness's catalogue",
                    c.kind.as_str(),
                    kind.as_str()
                )),
                Some(c) if c.outcome == CheckOutcome::Passed => {}
                Some(c) => reasons.push(format!("check {id} {}", c.outcome.as_str())),
                None => reasons.push(format!(
                    "check {id} is not in the report (written by harness {}): run this harness's catalogue",
                    report.harness_version
                )),
            }
        }
    }
    if !report.leftovers.is_empty() {
        reasons.push(format!("the run left {}", report.leftovers.join(", ")));
    }
    for record in report
        .teardown
        .iter()
        .filter(|r| r.outcome == CleanupOutcome::Failed)
    {
        reasons.push(format!(
            "the run's teardown failed to remove {}: {}",
            record.object,
            record.error.as_deref().unwrap_or("no error recorded")
        ));
    }
    for (role, expected) in [
        ("worker", &expect.worker_image),
        ("daemon", &expect.daemon_image),
    ] {
        if let Err(reason) = same_image(report, role, expected) {
            reasons.push(reason);
        }
    }
    if let Some(expected) = &expect.template_sha256 {
        let recorded = report.environment.template.as_ref();
        let matches = recorded.is_some_and(|t| {
            t.source_sha256.as_deref() == Some(expected.as_str()) || &t.sha256 == expected
        });
        if !matches {
            reasons.push(format!(
                "the run used template {} (sha256 {}), not the gated one (sha256 {expected})",
                recorded.map_or("none", |t| t.path.as_str()),
                recorded
                    .and_then(|t| t.source_sha256.clone())
                    .unwrap_or_else(|| recorded.map(|t| t.sha256.clone()).unwrap_or_default())
            ));
        }
    }
    if let Some(max_age) = expect.max_age_ms {
        match unix_ms(&report.finished_at) {
            Some(finished) if expect.now_ms.saturating_sub(finished) <= max_age => {}
            Some(finished) => reasons.push(format!(
                "the report is {} h old (finished {}); the limit is {} h",
                expect.now_ms.saturating_sub(finished) / 3_600_000,
                report.finished_at,
                max_age / 3_600_000
            )),
            None => reasons.push(format!(
                "the report's finished_at {:?} is not a time",
                report.finished_at
            )),
        }
    }
    reasons
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(outcome: &str, check: &str, lacking: Option<&str>) -> Report {
        let scenario = serde_json::json!({
            "name": "a::x", "promise": "p", "outcome": outcome, "diagnosis": "why",
            "checks": [{"id": "a::x/holds", "promise": "p", "outcome": check, "twin": "t"}],
            "lacking": lacking, "started_at": "", "duration_ms": 1, "steps": [], "findings": [],
            "sessions": [], "cleanup": [], "artifacts": [], "attempts": 1, "flaky": false,
            "previous_attempts": [], "nested_inventory": [], "leaks": []
        });
        serde_json::from_value(serde_json::json!({
            "schema_version": 1, "run_id": "r", "harness_version": "0",
            "started_at": "2026-11-30T10:00:00.000Z", "finished_at": "2026-11-30T10:01:00.000Z",
            "duration_ms": 0, "interrupted": false, "deadline_exceeded": false, "backend": "local",
            "gate": {"profile": "release", "requires": ["docker", "compose", "browser", "node-view"], "source": "release profile"},
            "environment": {"engine_version": null, "engine_api_version": null,
            "kubernetes_version": null, "kernel": null, "operating_system": null,
            "architecture": null, "cgroup_version": null, "cgroup_driver": null, "node_mtu": null,
            "images": [
                {"role": "worker", "reference": "k/worker:abc", "id": format!("sha256:{}", "1".repeat(64)), "built": true},
                {"role": "daemon", "reference": format!("r/daemon@sha256:{}", "2".repeat(64)), "id": null, "built": false}],
            "template": {"path": "t.yaml", "sha256": "sha256:rendered", "source_sha256": "sha256:source"}},
            "configuration": {"sha256": "", "settings": null},
            "summary": {"total": 1, "passed": 1, "failed": 0, "errored": 0, "timed_out": 0,
            "cancelled": 0, "skipped": 0, "incompatible": 0, "leaked": 0, "flaky": 0},
            "setup": [], "scenarios": [scenario], "leftovers": [], "teardown": []
        }))
        .unwrap_or_else(|e| unreachable!("{e}"))
    }

    fn expect() -> Expectations {
        Expectations {
            worker_image: format!("r/worker@sha256:{}", "1".repeat(64)),
            daemon_image: format!("r/daemon@sha256:{}", "2".repeat(64)),
            template_sha256: Some("sha256:source".into()),
            max_age_ms: Some(3_600_000),
            requires: Capability::ALL.to_vec(),
            catalogue: vec![(
                "a::x".into(),
                vec![("a::x/holds".into(), CheckKind::System)],
            )],
            now_ms: unix_ms("2026-11-30T10:30:00.000Z").unwrap_or_default(),
        }
    }

    #[test]
    fn a_complete_run_on_exactly_these_artefacts_gates_the_release() {
        assert_eq!(
            refusals(&report("passed", "passed", None), &expect()),
            Vec::<String>::new()
        );
    }

    #[test]
    fn every_reason_to_refuse_is_named() {
        let mut r = report("passed", "not_reached", None);
        r.interrupted = true;
        r.gate.profile = GateProfile::Default;
        let mut e = expect();
        e.worker_image = format!("r/worker@sha256:{}", "9".repeat(64));
        e.template_sha256 = Some("sha256:other".into());
        e.now_ms += 2 * 3_600_000;
        e.catalogue.push(("b::y".into(), vec![]));
        let reasons = refusals(&r, &e).join("\n");
        for expected in [
            "interrupted",
            "check a::x/holds not reached",
            "b::y was not run",
            "the run used worker image k/worker:abc",
            "not the gated one",
            "h old",
            "not the release gate",
        ] {
            assert!(reasons.contains(expected), "{expected}: {reasons}");
        }
        assert_eq!(refusals(&r, &e).len(), 7, "{reasons}");
    }

    #[test]
    fn a_check_whose_kind_differs_from_the_catalogue_refuses_and_a_pass_counts_kinds_apart() {
        let mut e = expect();
        e.catalogue[0].1[0].1 = CheckKind::Mirror;
        let refused = refusals(&report("passed", "passed", None), &e);
        assert_eq!(
            refused,
            vec![
                "check a::x/holds is a system check in the report, a mirror check in this harness: run this harness's catalogue"
            ]
        );
        assert_eq!(
            passed_line(&report("passed", "passed", None), &expect()),
            "1 system checks (0 with a twin) and 0 mirror checks (which judge only the harness's mirror of Kandev) passed"
        );
    }

    #[test]
    fn a_lacking_capability_is_excused_only_when_not_required() {
        let skipped = report("skipped", "not_reached", Some("node-view"));
        let refused = refusals(&skipped, &expect());
        assert!(
            refused.iter().any(|r| r.starts_with("a::x skipped")),
            "{refused:?}"
        );
        let mut lenient = expect();
        lenient.requires = vec![Capability::Docker];
        assert_eq!(refusals(&skipped, &lenient), Vec::<String>::new());
    }
}
