//! Issue 40, item 4: a managed-pvc run on a cluster with no default StorageClass (EKS 1.30+,
//! kubeadm) is refused in its preflight, before any session, naming `--storage-class` and
//! `--workspace-mode empty-dir`, and leaves nothing; so is a `--storage-class` that does not
//! exist. The double starts with a default class, as Kind does (the positive control: the
//! same run passes with it, and with `--workspace-mode empty-dir` without it). Needs a
//! reachable engine, so it is `#[ignore]`d.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::kube::{Run, left_in_double, run};
use k8s_openapi::api::storage::v1::StorageClass;
use kandev_harness::backend::kube::cluster;
use kandev_report::Outcome;
use kandev_test_support::cluster_double;
use kandev_test_support::engine::engine_double;
use kube::api::{Api, DeleteParams};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_cluster_without_a_default_storage_class_is_refused_naming_the_fix() {
    let (double, images) = engine_double().await;
    let scenario = ["--exact", "workspace::shared"];
    // With the default class: the preflight records it and the run passes.
    let Run { report, text, .. } = run(&double, &images, &scenario).await;
    assert_eq!(report.scenarios.len(), 1, "{text}");
    assert_eq!(report.scenarios[0].outcome, Outcome::Passed, "{text}");
    let step = report
        .setup
        .iter()
        .find(|s| s.name == "storage_class")
        .unwrap_or_else(|| panic!("no storage_class step: {text}"));
    assert_eq!(
        step.evidence["default"][0],
        cluster_double::DEFAULT_STORAGE_CLASS,
        "{text}"
    );

    // A --storage-class the cluster does not have.
    let mut args = scenario.to_vec();
    args.extend(["--storage-class", "fast-ssd"]);
    let Run {
        code, text, report, ..
    } = run(&double, &images, &args).await;
    assert_eq!(
        code,
        Some(i32::from(kandev_report::exit::ENVIRONMENT)),
        "{text}"
    );
    assert!(
        text.contains("StorageClass fast-ssd (--storage-class) does not exist")
            && text.contains("fix: pass --storage-class NAME"),
        "{text}"
    );
    assert!(left_in_double(&double, &report.run_id).await.is_empty());

    // No default class at all: refused, naming both ways out.
    let admin = cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap()
        .admin;
    Api::<StorageClass>::all(admin)
        .delete(
            cluster_double::DEFAULT_STORAGE_CLASS,
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    let Run {
        code, text, report, ..
    } = run(&double, &images, &scenario).await;
    assert_eq!(
        code,
        Some(i32::from(kandev_report::exit::ENVIRONMENT)),
        "{text}"
    );
    assert!(
        text.contains("the cluster has no default StorageClass and no available PersistentVolume")
            && text.contains("--storage-class NAME")
            && text.contains("--workspace-mode empty-dir"),
        "{text}"
    );
    assert!(
        double.state.objects("persistentvolumeclaims").is_empty(),
        "a claim was created: {text}"
    );
    assert!(left_in_double(&double, &report.run_id).await.is_empty());
    // empty-dir needs no class.
    let mut args = scenario.to_vec();
    args.extend(["--workspace-mode", "empty-dir"]);
    let Run { report, text, .. } = run(&double, &images, &args).await;
    assert_eq!(report.scenarios[0].outcome, Outcome::Passed, "{text}");
}
