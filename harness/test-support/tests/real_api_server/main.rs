//! The harness and the cluster double held to a real API server: kube-apiserver v1.37 with
//! etcd, its controller manager and scheduler, built here from their Go modules by
//! `harness/scripts/ensure-kind.sh` and started once for this binary
//! ([`kandev_test_support::real_api_server::shared`]); each test works in namespaces of its
//! own. Every test name says `real_api_server`.
//!
//! - `admission`: every fixture template's composed Pod, dry-run created under each Pod
//!   Security level (AC-001.3), the harness's admission comparison on the real defaulting,
//!   and the double's answers to the same requests.
//! - `claims`: the harness's wait on the real scheduler and PV controller (no kubelet, the
//!   test as provisioner): capacity waited on then placed, a selector or a missing claim
//!   fatal, claims bound `Immediate` or for their first consumer, the default class.
//! - `executor`: the executor the harness sets up, refused what Kandev's Role does not grant.
//! - `finalizers`: a Pod a finalizer holds, the harness's exact delete naming it, its
//!   namespace `Terminating` until the finalizer is removed.
//! - `gc`: `gc` against live Leases (a run set up and its Lease renewed and released, an
//!   expired run's namespace removed, a young one spared).
//! - `jobs`: a Job's defaulting, its end (its Pod's phase, its deadline), the delete
//!   policies and TTL after finished; the ServiceAccount admission and TokenRequests.
//! - `launch`: the Job, Roles and RoleBinding `launch` creates, dry-run created (with
//!   controls: a Job and a Role the API server refuses).
//! - `names`: every scenario's task Pod and claim at ordinal 99 with the longest run id, and
//!   the run's namespace, admitted (with controls one byte over).
//! - `operator`: an operator's identity bound to one namespace: the preflight refuses, naming
//!   the one grant missing (a Role's rule, a pull secret's read in another namespace), before
//!   anything is made, and says what it goes without.
//! - `quota`: the Pods the harness creates (task, inspector, peer, warm-up) under a
//!   ResourceQuota that constrains CPU and memory and beside a LimitRange, with controls.
//! - `start`: the control plane's own refusals (a missing program, a taken port).

// A test file: failing loudly with unwrap/panic is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod admission;
mod claims;
mod corpus;
mod executor;
mod finalizers;
mod gc;
mod jobs;
mod launch;
mod names;
mod operator;
mod quota;
mod scheduling;
mod start;

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, PostParams};
use serde_json::json;
use std::time::{Duration, Instant};

/// Held by a test while a Node it registered exists: the scheduler's messages count the
/// nodes, and a Pod may land on another test's node.
pub static NODES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Creates namespace `name` with `labels` and waits until the controller manager has made its
/// `default` ServiceAccount (the ServiceAccount admission refuses every Pod before that).
pub async fn namespace(client: &kube::Client, name: &str, labels: serde_json::Value) {
    let namespace: Namespace = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels}
    }))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), name);
    let start = Instant::now();
    while accounts.get_opt("default").await.unwrap().is_none() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "namespace {name} has no default ServiceAccount after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
