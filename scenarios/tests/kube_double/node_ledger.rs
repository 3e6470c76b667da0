//! Issue 41, item 5 on `--backend kube --node-inspector`: the leak ledger compares the
//! cgroup folders of every node a session may be placed on, each through the inspector
//! made there at the run's start (the double's one node; its Pods are containers on this
//! host's engine, so the node's tree is this host's `/sys/fs/cgroup`). A companion that
//! makes a cgroup folder of its own outside its Pod's
//! (`fixtures/templates/broken/daemon-leaves-cgroup.yaml`) has every check hold and nothing
//! of its Pod left, and the scenario is `leaked` (exit 4), naming the folder and the node.
//! Before, the inspectors were made on first use, after the scenario's baseline, and the
//! ledger said it did not compare. Needs a reachable engine, so it is `#[ignore]`d.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::fixture;
use common::kube::{Run, run};
use kandev_report::{CheckOutcome, Outcome};
use kandev_test_support::cluster_double::NODE;
use kandev_test_support::engine::engine_double;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_cgroup_left_on_a_node_is_reported_through_its_inspector() {
    let (double, images) = engine_double().await;
    let template = fixture("templates/broken/daemon-leaves-cgroup.yaml");
    let Run {
        report, text, code, ..
    } = run(
        &double,
        &images,
        &[
            "--node-inspector",
            "--template",
            &template,
            "--exact",
            "workspace::shared",
        ],
    )
    .await;
    let scenario = report
        .scenarios
        .first()
        .unwrap_or_else(|| panic!("no scenario ran: {text}"));
    // The fixture's folders are on this host's tree: removed before anything is asserted.
    let folders: Vec<String> = scenario
        .sessions
        .iter()
        .map(|s| format!("kandev-acceptance-left-{}", s.pod_name))
        .collect();
    for hierarchy in ["/sys/fs/cgroup/memory", "/sys/fs/cgroup"] {
        for folder in &folders {
            let _ = std::fs::remove_dir(std::path::Path::new(hierarchy).join(folder));
        }
    }
    let started = report
        .setup
        .iter()
        .find(|s| s.name == "node_inspector")
        .unwrap_or_else(|| panic!("no node_inspector step: {text}"));
    assert_eq!(
        started.evidence["nodes"][0]["node"], NODE,
        "{}",
        started.evidence
    );
    assert!(
        started.evidence["nodes"][0]["inspector"].is_string(),
        "{}",
        started.evidence
    );
    assert_eq!(
        scenario.outcome,
        Outcome::Leaked,
        "{:?}\n{text}",
        scenario.diagnosis
    );
    assert!(
        scenario
            .checks
            .iter()
            .all(|c| c.outcome == CheckOutcome::Passed),
        "{:?}",
        scenario.checks
    );
    assert!(
        scenario.leaks.iter().any(|l| l.starts_with("node: cgroup ")
            && l.contains(&format!(" on node {NODE} "))
            && folders.iter().any(|f| l.contains(f.as_str()))),
        "{:#?}",
        scenario.leaks
    );
    assert!(
        !scenario
            .findings
            .iter()
            .any(|f| f.code == "ledger.cgroups_not_compared"),
        "{:#?}",
        scenario.findings
    );
    assert_eq!(code, Some(4), "{text}");
}
