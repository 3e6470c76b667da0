//! Issue 32, defect 8, on a real API server: every Pod the harness creates (the task Pod of
//! the default full-worker template, the node inspector's Pod, `network::mtu`'s peer and the
//! warm-up Pod) declares the requests and limits a namespace's ResourceQuota constrains, so
//! the ResourceQuota admission plugin admits it, and stays inside a LimitRange's bounds, so
//! LimitRanger has nothing to fill in. Moved here from the cluster double (issue 39: its
//! `quota.rs` imitated both plugins; the real ones decide now).
//!
//! Each Pod is created with `dryRun=All`, as the harness's preflight asks: quota admission
//! runs on a dry run, it only skips writing the quota's usage (kubernetes v1.37.2,
//! `staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota/controller.go`,
//! `checkQuotas`: `checkRequest`, which refuses "failed quota ... must specify" and
//! "exceeded quota", runs first; then "Don't update quota for admissionAttributes that
//! correspond to dry-run requests"). The controls: the same Pods without their resources are
//! refused 403 naming every container, and in a namespace with a LimitRange they are admitted
//! only because it filled its defaults in (its `kubernetes.io/limit-ranger` annotation).

use crate::namespace;
use k8s_openapi::api::core::v1::{LimitRange, Pod, ResourceQuota};
use kandev_harness::backend::kube::inspector::ClusterInspector;
use kandev_harness::backend::kube::warm_up::{Target, images_of, warm_up_pod};
use kandev_harness::pod::identity::{SessionIdentity, random_hex};
use kandev_scenarios::network::mtu::peer_pod_for;
use kandev_test_support::pod::{DAEMON_IMAGE, TaskPod, task_pod};
use kandev_test_support::real_api_server;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// What the quota's hard limits constrain: CPU and memory, requests and limits, and a count.
fn roomy_quota() -> Value {
    json!({"requests.cpu": "8", "requests.memory": "16Gi",
        "limits.cpu": "16", "limits.memory": "32Gi", "pods": "10"})
}

/// The LimitRange operators set beside a quota: per container at least a little, at most
/// a node's worth (its `max` also becomes the default limit, and so the default request:
/// `SetDefaults_LimitRangeItem`, `pkg/apis/core/v1/defaults.go`).
fn limit_range() -> Value {
    json!({"metadata": {"name": "bounds"}, "spec": {"limits": [{"type": "Container",
        "min": {"cpu": "5m", "memory": "8Mi"}, "max": {"cpu": "4", "memory": "8Gi"}}]}})
}

/// Namespace `name` with ResourceQuota `compute` of `hard` (and `range`, if any), once the
/// quota controller has written the quota's status: admission judges by `status.hard`, and
/// refuses with "status unknown for quota" a quota whose usage is not counted yet
/// (`checkRequest`, `hasUsageStats`).
async fn quota_namespace(client: &kube::Client, name: &str, hard: Value, range: Option<Value>) {
    namespace(client, name, json!({})).await;
    let pp = PostParams::default();
    if let Some(range) = range {
        Api::<LimitRange>::namespaced(client.clone(), name)
            .create(&pp, &serde_json::from_value(range).unwrap())
            .await
            .unwrap();
    }
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), name);
    let quota = json!({"metadata": {"name": "compute"}, "spec": {"hard": hard}});
    quotas
        .create(&pp, &serde_json::from_value(quota).unwrap())
        .await
        .unwrap();
    let wanted: BTreeSet<String> = hard.as_object().unwrap().keys().cloned().collect();
    let start = Instant::now();
    loop {
        let status = quotas
            .get("compute")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        let counted: BTreeSet<String> = status.used.unwrap_or_default().into_keys().collect();
        if counted == wanted {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the quota controller has not counted {name}'s quota after 60 s: {counted:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The Pods the harness creates in a run's namespace, by what makes them.
fn harness_pods(client: &kube::Client, ns: &str) -> Vec<(&'static str, Pod)> {
    let run_id = format!("quota-{}", random_hex(3));
    let identity = SessionIdentity::new(&run_id, "network::mtu", 1);
    let task = task_pod(TaskPod::new(ns, &identity)).unwrap();
    let task_spec = task.spec.clone().unwrap();
    let target = Target {
        node: "node-a".into(),
        hostname: "node-a".into(),
    };
    vec![
        ("the task Pod (full-worker.yaml)", task),
        (
            "the inspector Pod",
            ClusterInspector::new(client.clone(), ns, DAEMON_IMAGE, &run_id)
                .inspector_pod(&target.node),
        ),
        (
            "network::mtu's peer Pod",
            peer_pod_for(&run_id, "network::mtu", DAEMON_IMAGE),
        ),
        (
            "the warm-up Pod",
            warm_up_pod(&run_id, ns, &target, &task_spec, &images_of(&task_spec)),
        ),
    ]
}

/// `pod` with every container's (and init container's) requests and limits removed.
fn without_resources(mut pod: Pod) -> Pod {
    let spec = pod.spec.as_mut().unwrap();
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        c.resources = None;
    }
    pod
}

/// The ResourceQuota plugin's words for `pod` without any resources under a quota of
/// [`roomy_quota`]: each constrained resource, sorted, with the sorted names of the
/// containers and init containers that do not set it (`podEvaluator.Constraints`,
/// `pkg/quota/v1/evaluator/core/pods.go`).
fn must_specify(pod: &Pod) -> String {
    let spec = pod.spec.as_ref().unwrap();
    let names: BTreeSet<&str> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| c.name.as_str())
        .collect();
    let names = names.into_iter().collect::<Vec<_>>().join(",");
    let parts: Vec<String> = [
        "limits.cpu",
        "limits.memory",
        "requests.cpu",
        "requests.memory",
    ]
    .iter()
    .map(|r| format!("{r} for: {names}"))
    .collect();
    format!(
        "pods \"{}\" is forbidden: failed quota: compute: must specify {}",
        pod.metadata.name.as_deref().unwrap(),
        parts.join("; ")
    )
}

/// Every container's resources, by name (what admission may have changed).
fn resources(pod: &Pod) -> BTreeMap<String, Value> {
    let spec = pod.spec.as_ref().unwrap();
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .map(|c| (c.name.clone(), json!(c.resources)))
        .collect()
}

async fn dry_run(pods: &Api<Pod>, pod: &Pod) -> Result<Pod, Box<kube::core::Status>> {
    let params = PostParams {
        dry_run: true,
        field_manager: None,
    };
    match pods.create(&params, pod).await {
        Ok(admitted) => Ok(admitted),
        Err(kube::Error::Api(status)) => Err(status),
        Err(e) => panic!("dry run of {:?}: {e}", pod.metadata.name),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_harness_pods_are_admitted_under_a_quota_and_a_limit_range_on_a_real_api_server() {
    let real = real_api_server::shared();
    let client = real.admin_client().await;
    let suffix = random_hex(4);
    let (quota_only, with_range, tight) = (
        format!("quota-{suffix}"),
        format!("quota-range-{suffix}"),
        format!("quota-tight-{suffix}"),
    );
    quota_namespace(&client, &quota_only, roomy_quota(), None).await;
    quota_namespace(&client, &with_range, roomy_quota(), Some(limit_range())).await;
    // Room for anything but the task Pod's two 2-CPU limits.
    let mut small = roomy_quota();
    small["limits.cpu"] = json!("3");
    quota_namespace(&client, &tight, small, None).await;

    // Under the quota alone: admitted as the harness makes them; without their resources,
    // refused naming every container (the control: the quota is in force for each Pod).
    let pods = Api::<Pod>::namespaced(client.clone(), &quota_only);
    for (what, pod) in harness_pods(&client, &quota_only) {
        if let Err(status) = dry_run(&pods, &pod).await {
            panic!("{what} refused under the quota: {status:?}");
        }
        let status = dry_run(&pods, &without_resources(pod.clone()))
            .await
            .map(|admitted| admitted.metadata.name)
            .expect_err(&format!("{what} admitted without resources"));
        assert_eq!(
            (status.code, status.reason.as_str(), status.message.as_str()),
            (403, "Forbidden", must_specify(&pod).as_str()),
            "{what}"
        );
    }

    // Beside a LimitRange: admitted with their own resources untouched (LimitRanger filled
    // nothing in: no annotation), where the control gets the range's defaults.
    let pods = Api::<Pod>::namespaced(client.clone(), &with_range);
    for (what, pod) in harness_pods(&client, &with_range) {
        let admitted = dry_run(&pods, &pod)
            .await
            .unwrap_or_else(|s| panic!("{what} refused beside the LimitRange: {s:?}"));
        let annotations = admitted.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            annotations.get("kubernetes.io/limit-ranger"),
            None,
            "{what}: the LimitRange filled in what the harness left out"
        );
        assert_eq!(resources(&admitted), resources(&pod), "{what}");
        let defaulted = dry_run(&pods, &without_resources(pod))
            .await
            .unwrap_or_else(|s| panic!("{what} without resources, beside the range: {s:?}"));
        let note = defaulted.metadata.annotations.unwrap_or_default();
        assert!(
            note.get("kubernetes.io/limit-ranger")
                .is_some_and(|n| n.starts_with("LimitRanger plugin set:")),
            "{what}: the control was not defaulted by the LimitRange: {note:?}"
        );
    }

    // A dry run is judged against the quota's room too, as the harness's preflight relies on.
    let pods = Api::<Pod>::namespaced(client.clone(), &tight);
    let (what, task) = harness_pods(&client, &tight).remove(0);
    let status = dry_run(&pods, &task)
        .await
        .map(|admitted| admitted.metadata.name)
        .expect_err(&format!("{what} admitted beyond the quota's limits.cpu"));
    assert_eq!(status.code, 403, "{status:?}");
    assert_eq!(
        status.message,
        format!(
            "pods \"{}\" is forbidden: exceeded quota: compute, requested: limits.cpu=4, used: limits.cpu=0, limited: limits.cpu=3",
            task.metadata.name.as_deref().unwrap()
        )
    );
}
