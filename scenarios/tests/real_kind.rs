//! The whole catalogue on a real Kind cluster: kind v0.33.0 and a node image of Kubernetes
//! v1.37.2 built on this machine from their Go modules (`harness/scripts/ensure-kind.sh`,
//! which the README's test command runs), a real API server, scheduler and kubelet. Every
//! test name says `on_real_kind`; none of them reads as passed unless it ran.

// A test file: failing loudly with unwrap/panic is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::real_kind::{built, clusters_of, one_cluster_at_a_time};
use common::root;
use kandev_report::{CheckOutcome, Outcome};

/// What real Kind on these machines shows that is not a pass, each an open finding with the
/// words its diagnosis must carry (docs/development.md, "What real Kind found"). A finding
/// that no longer shows fails this test as surely as a new failure: the list only shrinks
/// by being fixed, and never stands in for a pass (the run's verdict and exit code say
/// failed).
const OPEN_FINDINGS: &[(&str, Outcome, &str)] = &[
    // None open: the two real Kind found (dockerd the nested hog's OOM victim, a scenario
    // holding three Pods on a node with room for two) are fixed (docs/development.md).
];

/// The checks real Kind leaves not judged, each with words of its reason: exactly these, so
/// a check that stops being judged fails this test, and one that comes to be judged takes
/// itself off the list.
const NOT_JUDGED_ON_KIND: &[(&str, &str)] = &[
    // The node's container runtime holds the Pods' images; this host's engine is not it.
    (
        "image::build_run/image_local",
        "whose images are not readable from here",
    ),
];

#[test]
fn the_whole_catalogue_on_real_kind() {
    let _one = one_cluster_at_a_time();
    let pins = built();
    let run = common::run(&["--backend", "kind"]);
    let report = &run.report;
    let mut wrong = Vec::new();
    for (name, outcome, words) in OPEN_FINDINGS {
        let seen = report.scenarios.iter().find(|s| s.name == *name);
        if !seen.is_some_and(|s| {
            s.outcome == *outcome && s.diagnosis.as_deref().is_some_and(|d| d.contains(words))
        }) {
            wrong.push(format!(
                "{name}: the open finding ({outcome:?}, \"{words}\") did not show; it may be fixed: take it off OPEN_FINDINGS and docs/development.md ({:?})",
                seen.map(|s| (s.outcome, s.diagnosis.clone()))
            ));
        }
    }
    for scenario in &report.scenarios {
        let open = OPEN_FINDINGS.iter().any(|(n, _, _)| *n == scenario.name);
        if scenario.outcome != Outcome::Passed && !open {
            wrong.push(format!(
                "{} {:?}: {}",
                scenario.name,
                scenario.outcome,
                scenario.diagnosis.clone().unwrap_or_default()
            ));
        }
        for check in &scenario.checks {
            let listed = NOT_JUDGED_ON_KIND.iter().find(|(id, _)| *id == check.id);
            let reason = check.reason.as_deref().unwrap_or_default();
            match (check.outcome, listed) {
                (CheckOutcome::NotJudged, Some((_, words))) if reason.contains(words) => {}
                (CheckOutcome::NotJudged, _) => {
                    wrong.push(format!("{}: not judged: {reason:?}", check.id));
                }
                (outcome, Some(_)) => wrong.push(format!(
                    "{}: {outcome:?}, listed as not judged on Kind: take it off NOT_JUDGED_ON_KIND",
                    check.id
                )),
                _ => {}
            }
        }
    }
    let checks: Vec<&str> = report
        .scenarios
        .iter()
        .flat_map(|s| s.checks.iter().map(|c| c.id.as_str()))
        .collect();
    for (id, _) in NOT_JUDGED_ON_KIND {
        if !checks.contains(id) {
            wrong.push(format!("{id}: no such check in the report"));
        }
    }
    assert!(
        wrong.is_empty(),
        "on real Kind:\n{}\n{}",
        wrong.join("\n"),
        run.output
    );
    // The open findings fail the run: exit 1 (a scenario failed), never 0.
    let expected = if OPEN_FINDINGS.is_empty() { 0 } else { 1 };
    assert_eq!(run.code, expected, "{}", run.output);
    assert_eq!(report.scenarios.len(), 22, "the whole catalogue");

    // The report says which cluster gave the verdict.
    let environment = &report.environment;
    assert_eq!(
        environment.kubernetes_version.as_deref(),
        Some(pins.kubernetes.as_str())
    );
    assert_eq!(
        environment.kind_node_image.as_deref(),
        Some(pins.node_image().as_str())
    );
    assert!(
        environment
            .kind_version
            .as_deref()
            .is_some_and(|v| v.contains(&pins.kind)),
        "{:?}",
        environment.kind_version
    );

    // Nothing the run created is left: its ledger, its cluster, and gc finds nothing.
    assert!(report.leftovers.is_empty(), "{:?}", report.leftovers);
    assert_eq!(clusters_of(&pins, &report.run_id), Vec::<String>::new());
    let gc = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["gc", "--backend", "kind", "--run", &report.run_id])
        .env("KANDEV_ACCEPTANCE_ROOT", root())
        .output()
        .unwrap();
    let text = common::output_text(&gc);
    assert!(gc.status.success(), "{text}");
}

/// A cluster that does not come up (here: a kubelet configuration kubeadm cannot read) is
/// deleted with its node's logs kept in the report's folder (`kind export logs`), the error
/// names both, and the run's verdict is the environment's failure, never a pass of nothing.
#[test]
fn a_cluster_that_does_not_come_up_leaves_its_logs_and_nothing_else_on_real_kind() {
    let _one = one_cluster_at_a_time();
    let pins = built();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cluster.yaml");
    let good = std::fs::read_to_string(root().join("kind/cluster.yaml")).unwrap();
    let pids = "    podPidsLimit: 4096\n";
    assert!(good.contains(pids), "kind/cluster.yaml changed: {good}");
    std::fs::write(
        &config,
        good.replace(pids, &format!("{pids}    maxPods: many\n")),
    )
    .unwrap();
    let run = common::run(&[
        "--backend",
        "kind",
        "--kind-config",
        config.to_str().unwrap(),
        "--exact",
        "template::grant_rules",
    ]);
    assert_eq!(run.code, 3, "{}", run.output);
    let verdict = run.report.verdict.as_ref().unwrap();
    assert!(
        !verdict.passed && verdict.exit_code == 3,
        "{verdict:?}\n{}",
        run.output
    );
    let step = run
        .report
        .setup
        .iter()
        .find(|s| s.name == "cluster_setup")
        .unwrap_or_else(|| panic!("no cluster_setup step: {}", run.output));
    let error = step.error.clone().unwrap_or_default();
    let logs = run.report_path.with_file_name("kind-logs");
    assert!(
        error.contains("maxPods")
            && error.contains(&logs.display().to_string())
            && error.contains("the cluster was deleted"),
        "{error}"
    );
    let node = format!("kandev-acc-{}-control-plane", run.report.run_id);
    for file in ["kubelet.log", "journal.log", "containerd.log"] {
        assert!(
            logs.join(&node).join(file).is_file(),
            "{file} not in {}: {:?}",
            logs.display(),
            std::fs::read_dir(&logs).map(|d| d.count())
        );
    }
    assert_eq!(clusters_of(&pins, &run.report.run_id), Vec::<String>::new());
}
