//! Issue 32, defect 5: a cluster run pins its Pods to the cluster's architecture, not the
//! harness host's. Through `run --backend kube` against the cluster double whose one node is
//! relabelled to the other architecture (as an amd64 laptop driving an arm64 cluster sees
//! it): the Pods would follow the node's `kubernetes.io/arch`, where the mock agent built
//! here cannot run, so the run is refused before any Pod, naming the fix; `--platform` naming this
//! machine's architecture pins them where no node is (the scheduler's refusal names the
//! selector); nodes that disagree refuse the run before anything is created, naming
//! `--platform`. Needs a reachable engine, so it is `#[ignore]`d.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::kube::{Run, run};
use k8s_openapi::api::core::v1::Node;
use kandev_harness::backend::kube::cluster;
use kandev_harness::pod::compose::Arch;
use kandev_report::Outcome;
use kandev_test_support::cluster_double;
use kandev_test_support::engine::engine_double;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn pods_are_pinned_to_the_clusters_architecture_not_the_hosts() {
    let (double, images) = engine_double().await;
    let here = Arch::of_this_machine();
    let other = match here {
        Arch::Amd64 => Arch::Arm64,
        Arch::Arm64 => Arch::Amd64,
    };
    let admin = cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap()
        .admin;
    let nodes = Api::<Node>::all(admin.clone());
    nodes
        .patch(
            cluster_double::NODE,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "kubernetes.io/arch": other.as_str(), "beta.kubernetes.io/arch": other.as_str()}}})),
        )
        .await
        .unwrap();

    // The nodes' architecture is chosen, and the mock agent built here cannot run there
    // (the double's runtime would run it anyway; a real node fails every session with "exec
    // format error"): refused before any Pod, naming the way out, nothing left.
    let Run {
        code, report, text, ..
    } = run(&double, &images, &["--exact", "launch::contract"]).await;
    assert_eq!(
        code,
        Some(i32::from(kandev_report::exit::ENVIRONMENT)),
        "{text}"
    );
    assert!(
        text.contains("exec format error")
            && text.contains(&format!("pinned to linux/{} (from nodes)", other.as_str()))
            && text.contains(&format!("--platform linux/{}", here.as_str())),
        "{text}"
    );
    assert!(
        report
            .scenarios
            .iter()
            .all(|s| s.outcome != Outcome::Passed),
        "{text}"
    );
    assert!(
        double.state.objects("pods").is_empty(),
        "a Pod was created: {text}"
    );

    // --platform this machine's: pinned where no node is, refused naming the selector.
    let flag = format!("linux/{}", here.as_str());
    let Run { report, text, .. } = run(
        &double,
        &images,
        &["--exact", "launch::contract", "--platform", &flag],
    )
    .await;
    assert_ne!(report.scenarios[0].outcome, Outcome::Passed, "{text}");
    let diagnosis = report.scenarios[0].diagnosis.clone().unwrap_or_default();
    assert!(
        diagnosis.contains(&format!("kubernetes.io/arch={}", here.as_str()))
            && diagnosis.contains("Unschedulable"),
        "{diagnosis}\n{text}"
    );

    // Two nodes that disagree: refused before anything is created, naming --platform.
    double.state.create_object(
        "nodes",
        "",
        json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "second-node", "labels": {"kubernetes.io/arch": here.as_str(), "kubernetes.io/os": "linux"}},
            "spec": {}}),
    );
    let Run { code, text, .. } = run(&double, &images, &["--exact", "launch::contract"]).await;
    assert_eq!(
        code,
        Some(i32::from(kandev_report::exit::ENVIRONMENT)),
        "{text}"
    );
    assert!(
        text.contains("no one architecture") && text.contains("--platform linux/amd64"),
        "{text}"
    );
}
