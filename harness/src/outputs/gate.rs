//! What `kandev-acceptance gate` holds a report to, and every reason a report does not gate
//! a release. The pass/fail rule is kandev-report's `judge` (the same that gave the run its
//! exit code and the report its verdict), under the release profile; the gate adds only what
//! a report cannot know: this harness's catalogue, the artefacts the release ships, the age.

use kandev_report::{
    Capability, CheckKind, CheckOutcome, GateProfile, ImageRecord, Outcome, Report, Rules, judge,
    unix_ms,
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
    /// `sha256:<hex>` of the prepare script the release ships, if it is gated too.
    pub prepare_script_sha256: Option<String>,
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
/// the recorded image is (the same reference, or the digest as the reference's or as the
/// engine's image id: images built locally have only the latter), and every image the role's
/// containers ran is too (by the engine's or the kubelet's image id). A report that records
/// nothing the role's containers ran cannot vouch for the image.
fn same_image(report: &Report, role: &str, expected: &str) -> Vec<String> {
    let Some(image) = report.environment.images.iter().find(|i| i.role == role) else {
        return vec![format!("the report records no {role} image")];
    };
    let digest = expected
        .split_once("@sha256:")
        .map(|(_, d)| format!("sha256:{d}"))
        .unwrap_or_default();
    let matches = image.reference == expected
        || (!digest.is_empty()
            && (image.reference.ends_with(&format!("@{digest}"))
                || image.id.as_deref() == Some(digest.as_str())));
    if !matches {
        return vec![format!(
            "the run used {role} image {} (id {}), not {expected}",
            image.reference,
            image.id.as_deref().unwrap_or("unknown")
        )];
    }
    if image.ran.is_empty() {
        return vec![format!(
            "the report records no image id the {role} containers ran (written by harness {}): it cannot vouch that they ran {expected}",
            report.harness_version
        )];
    }
    let gated = ImageRecord {
        reference: expected.to_owned(),
        id: Some(digest),
        ..image.clone()
    };
    gated
        .disagreements()
        .into_iter()
        .map(|ran| {
            format!(
                "the {role} containers ran {} (id {}), not {expected}",
                ran.image, ran.image_id
            )
        })
        .collect()
}

/// What a passing gate says it proves, counted by kind from the report's own checks:
/// "62 system checks judged against the system (58 with a twin) and 10 mirror checks passed".
pub fn passed_line(report: &Report) -> String {
    // The report's own counts, never the catalogue's: a PASS says what this run judged.
    let passed = report
        .scenarios
        .iter()
        .flat_map(|s| &s.checks)
        .filter(|c| c.outcome == CheckOutcome::Passed);
    let system = passed.clone().filter(|c| c.kind == CheckKind::System);
    let mut line = format!(
        "{} judged against the system ({} with a twin) and {} (which judge only the harness's mirror of Kandev) passed",
        counted(system.clone().count(), "system check"),
        system.filter(|c| kandev_report::has_twin(&c.twin)).count(),
        counted(
            passed.filter(|c| c.kind == CheckKind::Mirror).count(),
            "mirror check"
        ),
    );
    let unjudged: Vec<String> = report
        .scenarios
        .iter()
        .flat_map(|s| s.checks.iter().map(move |c| (s, c)))
        .filter(|(_, c)| c.outcome != CheckOutcome::Passed)
        .map(|(s, c)| format!("{}/{} {}", s.name, c.id, c.outcome.as_str()))
        .collect();
    if !unjudged.is_empty() {
        line.push_str(&format!("; not passed: {}", unjudged.join(", ")));
    }
    line
}

/// The report's own scenarios by outcome, never the catalogue's: `22 scenarios run: 21
/// passed, 1 skipped`.
pub fn scenarios_line(report: &Report) -> String {
    let mut by_outcome: Vec<(&str, usize)> = Vec::new();
    for s in &report.scenarios {
        match by_outcome
            .iter_mut()
            .find(|(o, _)| *o == s.outcome.as_str())
        {
            Some((_, n)) => *n += 1,
            None => by_outcome.push((s.outcome.as_str(), 1)),
        }
    }
    let parts: Vec<String> = by_outcome.iter().map(|(o, n)| format!("{n} {o}")).collect();
    format!(
        "{} run: {}",
        counted(report.scenarios.len(), "scenario"),
        parts.join(", ")
    )
}

/// `1 reason`, `2 reasons`: a count with its noun in the number English wants.
pub fn counted(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// Every reason `report` does not gate a release under `expect` (empty: it does): the run
/// must have been judged by the release gate; the report must pass kandev-report's one rule
/// under the release profile ([`judge`]: what the run's own verdict says, with the
/// capabilities this gate requires and nothing excused as kept); and it must be this
/// harness's whole catalogue, on exactly the artefacts the release ships, recent enough.
pub fn refusals(report: &Report, expect: &Expectations) -> Vec<String> {
    let mut reasons = Vec::new();
    if report.gate.profile != GateProfile::Release {
        reasons.push(format!(
            "the run was judged by the {} gate, not the release gate (run it with --gate-profile release)",
            report.gate.profile.name()
        ));
    }
    reasons.extend(judge(report, &Rules::release(expect.requires.clone())).reasons);
    for (name, checks) in &expect.catalogue {
        let Some(scenario) = report.scenarios.iter().find(|s| &s.name == name) else {
            reasons.push(format!(
                "{name} was not run (a release needs the whole catalogue)"
            ));
            continue;
        };
        // A scenario that did not pass is a reason already; its checks add nothing.
        if scenario.outcome != Outcome::Passed {
            continue;
        }
        for (id, kind) in checks {
            match scenario.checks.iter().find(|c| &c.id == id) {
                Some(c) if c.kind != *kind => reasons.push(format!(
                    "check {id} is a {} check in the report, a {} check in this harness: run this harness's catalogue",
                    c.kind.as_str(),
                    kind.as_str()
                )),
                // Its outcome is the rule's (a check of a passed scenario not passed).
                Some(_) => {}
                None => reasons.push(format!(
                    "check {id} is not in the report (written by harness {}): run this harness's catalogue",
                    report.harness_version
                )),
            }
        }
    }
    for (role, expected) in [
        ("worker", &expect.worker_image),
        ("daemon", &expect.daemon_image),
    ] {
        reasons.extend(same_image(report, role, expected));
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
    if let Some(expected) = &expect.prepare_script_sha256 {
        match &report.environment.prepare_script {
            Some(ran) if &ran.sha256 == expected => {}
            Some(ran) => reasons.push(format!(
                "the run's sessions ran prepare script {} ({}), not the gated one ({expected})",
                ran.path, ran.sha256
            )),
            None => reasons.push(
                "the report records no prepare script (a report from before it was recorded): it cannot vouch for the gated one"
                    .to_owned(),
            ),
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
            "schema_version": 2, "run_id": "r", "harness_version": "0",
            "started_at": "2026-11-30T10:00:00.000Z", "finished_at": "2026-11-30T10:01:00.000Z",
            "duration_ms": 0, "interrupted": false, "deadline_exceeded": false, "backend": "local",
            "gate": {"profile": "release", "requires": ["docker", "compose", "browser", "node-view"], "source": "release profile"},
            "environment": {"engine_version": null, "engine_api_version": null,
            "kubernetes_version": null, "kernel": null, "operating_system": null,
            "architecture": null, "cgroup_version": null, "cgroup_driver": null, "node_mtu": null,
            "images": [
                {"role": "worker", "reference": "k/worker:abc", "id": format!("sha256:{}", "1".repeat(64)), "built": true,
                 "ran": [{"image": "k/worker:abc", "image_id": format!("sha256:{}", "1".repeat(64)), "containers": 2}]},
                {"role": "daemon", "reference": format!("r/daemon@sha256:{}", "2".repeat(64)), "id": null, "built": false,
                 "ran": [{"image": "r/daemon", "image_id": format!("r/daemon@sha256:{}", "2".repeat(64)), "containers": 2}]}],
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
            prepare_script_sha256: None,
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
    fn a_gated_prepare_script_must_be_the_one_the_sessions_ran() {
        let mut r = report("passed", "passed", None);
        let mut e = expect();
        e.prepare_script_sha256 = Some("sha256:gated".into());
        assert_eq!(
            refusals(&r, &e),
            vec![
                "the report records no prepare script (a report from before it was recorded): it cannot vouch for the gated one"
            ]
        );
        r.environment.prepare_script = Some(kandev_report::PrepareScriptRecord {
            path: "fixtures/prepare/x.sh".into(),
            sha256: "sha256:other".into(),
        });
        assert_eq!(
            refusals(&r, &e),
            vec![
                "the run's sessions ran prepare script fixtures/prepare/x.sh (sha256:other), not the gated one (sha256:gated)"
            ]
        );
        if let Some(ran) = r.environment.prepare_script.as_mut() {
            ran.sha256 = "sha256:gated".into();
        }
        assert_eq!(refusals(&r, &e), Vec::<String>::new());
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
            passed_line(&report("passed", "passed", None)),
            "1 system check judged against the system (0 with a twin) and 0 mirror checks (which judge only the harness's mirror of Kandev) passed"
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

    #[test]
    fn a_check_not_judged_a_filtered_run_and_an_image_that_did_not_run_refuse() {
        let mut r = report("passed", "not_judged", None);
        r.scenarios[0].checks[0].reason = Some("no host engine beside the cluster".into());
        r.selection = Some(kandev_report::Selection {
            filtered: true,
            left_out: vec!["b::y".into()],
            ..Default::default()
        });
        r.environment.images[0].ran[0].image_id = format!("sha256:{}", "9".repeat(64));
        r.environment.images[1].ran.clear();
        let refused = refusals(&r, &expect());
        assert_eq!(
            refused,
            vec![
                "the run was filtered (FILTER, --skip or --exact) and left out b::y: a release needs the whole catalogue".to_owned(),
                "check a::x/holds not judged: no host engine beside the cluster".to_owned(),
                format!(
                    "the worker containers ran k/worker:abc (id sha256:{}), not the worker image the report records (k/worker:abc, id sha256:{})",
                    "9".repeat(64),
                    "1".repeat(64)
                ),
                format!(
                    "the worker containers ran k/worker:abc (id sha256:{}), not r/worker@sha256:{}",
                    "9".repeat(64),
                    "1".repeat(64)
                ),
                format!(
                    "the report records no image id the daemon containers ran (written by harness 0): it cannot vouch that they ran r/daemon@sha256:{}",
                    "2".repeat(64)
                ),
            ]
        );
    }
}
