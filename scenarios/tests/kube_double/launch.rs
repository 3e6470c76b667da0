//! `launch::causal_failures`, `launch::contract` (and `launch::connection`) through `--backend kube` against the
//! cluster double: every failure case, the restricted identity included, is judged there (not
//! reported "not applicable"), each names its cause as the API server and scheduler word it,
//! and the contract reads the Pod and the namespace's Services back through the API.
//! And `image::recipe` from outside, which the whole catalogue's run from inside the cluster
//! skips. Needs a reachable engine, so it is `#[ignore]`d.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::kube::{Run, run};
use kandev_report::Outcome;
use kandev_test_support::engine::engine_double;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn launch_scenarios_judge_every_case_on_kube_double() {
    let (double, images) = engine_double().await;
    let Run { report, text, .. } = run(&double, &images, &["launch::"]).await;
    let launch = kandev_scenarios::registry()
        .iter()
        .filter(|s| s.name.starts_with("launch::"))
        .count();
    assert_eq!(report.scenarios.len(), launch, "{text}");
    for scenario in &report.scenarios {
        assert_eq!(scenario.outcome, Outcome::Passed, "{text}");
    }
    let causal = report
        .scenarios
        .iter()
        .find(|s| s.name == "launch::causal_failures")
        .unwrap();
    let cases: Vec<Value> = causal
        .steps
        .iter()
        .find_map(|s| s.evidence.get("cases").cloned())
        .and_then(|c| serde_json::from_value(c).ok())
        .unwrap();
    let case = |name: &str| {
        cases
            .iter()
            .find(|c| c["case"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no case {name}: {cases:?}"))
    };
    let message = |name: &str| case(name)["message"].as_str().unwrap().to_owned();
    assert!(message("image").contains("ErrImagePull"), "{cases:?}");
    assert!(
        message("node_selector").contains("Unschedulable"),
        "{cases:?}"
    );
    assert!(message("missing_claim").contains("not found"), "{cases:?}");
    let restricted = case("restricted_identity");
    assert_eq!(restricted["judged"], true, "{cases:?}");
    assert!(
        restricted["message"]
            .as_str()
            .unwrap()
            .contains("cannot create resource \"pods\""),
        "{cases:?}"
    );
    for name in ["image", "node_selector", "missing_claim"] {
        // Surfaced from the status, long before the pod_ready bound.
        assert!(
            case(name)["elapsed_ms"].as_u64().unwrap() < 30_000,
            "{cases:?}"
        );
    }
}

/// `image::recipe` from outside the cluster, where this host's engine holds the images the
/// double's Pods run (from inside the cluster it is skipped: no engine there holds them, see
/// `catalogue_in_cluster_on_kube_double`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn image_recipe_reads_the_images_from_outside_on_kube_double() {
    let (double, images) = engine_double().await;
    let Run {
        report, text, code, ..
    } = run(&double, &images, &["--exact", "image::recipe"]).await;
    assert_eq!(report.scenarios.len(), 1, "{text}");
    assert_eq!(report.scenarios[0].outcome, Outcome::Passed, "{text}");
    assert_eq!(code, Some(0), "{text}");
}
