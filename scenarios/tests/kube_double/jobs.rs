//! Issue 32, defect 2 (`--jobs`): when `--jobs` is not given, a cluster run starts no more
//! scenarios at once than the cluster can hold task Pods: the cluster double's one node
//! declares 1 CPU allocatable, the default template's Pod requests 500m, so 2 sessions fit,
//! and the run records how it derived that (the `jobs` set-up step: per node, allocatable,
//! requested, sessions). `--jobs` given is used as given. Needs a reachable engine, so it is
//! `#[ignore]`d.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::kube::{Run, run};
use kandev_report::Outcome;
use kandev_test_support::engine::engine_double;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn jobs_follow_what_the_cluster_can_hold_unless_given() {
    let (double, images) = engine_double().await;
    double.state.set_node_allocatable("1", "64Gi", "110");

    let Run { report, text, .. } = run(&double, &images, &["--exact", "launch::contract"]).await;
    assert_eq!(report.scenarios[0].outcome, Outcome::Passed, "{text}");
    let jobs = report
        .setup
        .iter()
        .find(|s| s.name == "jobs")
        .unwrap_or_else(|| panic!("no jobs step: {text}"));
    assert_eq!(jobs.evidence["sessions"], 2, "{}", jobs.evidence);
    // Two sessions fit; a scenario may hold two Pods at once: one scenario at a time.
    assert_eq!(jobs.evidence["pods_per_scenario"], 2, "{}", jobs.evidence);
    assert_eq!(jobs.evidence["jobs"], 1, "{}", jobs.evidence);
    assert_eq!(
        jobs.evidence["per_session"]["cpu_millis"], 500,
        "{}",
        jobs.evidence
    );
    assert_eq!(
        jobs.evidence["nodes"][0]["allocatable"]["cpu_millis"], 1000,
        "{}",
        jobs.evidence
    );
    assert!(text.contains("jobs: 1"), "{text}");

    let Run { report, text, .. } = run(
        &double,
        &images,
        &["--exact", "launch::contract", "--jobs", "3"],
    )
    .await;
    let jobs = report.setup.iter().find(|s| s.name == "jobs").unwrap();
    assert_eq!(jobs.evidence["from"], "--jobs", "{text}");
    assert_eq!(jobs.evidence["jobs"], 3, "{text}");
}
