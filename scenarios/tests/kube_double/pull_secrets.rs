//! Issue 40, item 7 (private registries): `--image-pull-secret NAME` is read from the
//! kubeconfig context's namespace (the double's context names none: `default`), copied,
//! run-labelled, into the run's namespace under a name of the run's own before any Pod,
//! carried by every Pod the run creates (the warm-up's, the task Pods, the MTU peer), and
//! removed with the run; a Secret that does not exist, or is of another type, is refused
//! before any Pod, naming the fix. The Pods are
//! seen as the harness sent them (the double's Pod hook reads each create's body, changing
//! nothing). Needs a reachable engine, so it is `#[ignore]`d.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::kube::{Run, left_in_double, run};
use k8s_openapi::api::core::v1::Secret;
use kandev_harness::backend::kube::{cluster, pull_secrets};
use kandev_report::Outcome;
use kandev_test_support::engine::engine_double;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// The Pods created so far: (name, the names in its `imagePullSecrets`).
type Seen = Arc<Mutex<Vec<(String, Vec<String>)>>>;

fn secret(name: &str, kind: &str) -> Secret {
    let config = r#"{"auths":{"registry.example:5000":{"auth":"dTpw"}}}"#;
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name}, "type": kind,
        "stringData": {".dockerconfigjson": config}}))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn pull_secrets_are_copied_carried_by_every_pod_and_removed_on_kube_double() {
    let (double, images) = engine_double().await;
    let admin = cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap()
        .admin;
    let in_default: Api<Secret> = Api::namespaced(admin.clone(), "default");
    in_default
        .create(
            &PostParams::default(),
            &secret("regcred", "kubernetes.io/dockerconfigjson"),
        )
        .await
        .unwrap();
    in_default
        .create(&PostParams::default(), &secret("opaque-cred", "Opaque"))
        .await
        .unwrap();
    let seen: Seen = Arc::default();
    let record = seen.clone();
    double
        .state
        .set_pod_mutator(Some(Box::new(move |pod: &mut Value| {
            let names = pod["spec"]["imagePullSecrets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["name"].as_str().map(str::to_owned))
                .collect();
            let name = pod["metadata"]["name"].as_str().unwrap_or("?").to_owned();
            record.lock().unwrap().push((name, names));
        })));

    // An existing namespace (`--namespace`): the copy is removed one by one, not with it.
    let namespace = "kandev-agents-private";
    double.state.create_namespace(
        namespace,
        &[("pod-security.kubernetes.io/enforce", "privileged")],
    );
    let Run { report, text, .. } = run(
        &double,
        &images,
        &[
            "--namespace",
            namespace,
            "--image-pull-secret",
            "regcred",
            "--exact",
            "network::mtu",
        ],
    )
    .await;
    assert_eq!(report.scenarios.len(), 1, "{text}");
    assert_eq!(report.scenarios[0].outcome, Outcome::Passed, "{text}");
    let copy = pull_secrets::copy_name("regcred", &report.run_id);
    let step = report
        .setup
        .iter()
        .find(|s| s.name == "pull_secrets")
        .unwrap_or_else(|| panic!("no pull_secrets step: {text}"));
    assert_eq!(
        step.evidence,
        json!([{"name": "regcred", "named_by": "--image-pull-secret",
            "type": "kubernetes.io/dockerconfigjson", "read_from": "default",
            "copied": true, "copied_to": namespace, "copy": copy}]),
        "{text}"
    );
    let pods = seen.lock().unwrap().clone();
    let kinds = ["warm-up", "peer", "task"];
    for kind in kinds {
        let of_kind: Vec<_> = pods
            .iter()
            .filter(|(name, _)| match kind {
                "task" => !name.contains("-warm-up-") && !name.contains("-peer-"),
                _ => name.contains(&format!("-{kind}-")),
            })
            .collect();
        assert!(!of_kind.is_empty(), "no {kind} Pod was created: {pods:?}");
        for (name, carried) in of_kind {
            assert_eq!(carried, std::slice::from_ref(&copy), "{kind} Pod {name}");
        }
    }
    // Gone after the run; the operator's own Secret stays.
    assert!(
        double.state.object("secrets", namespace, &copy).is_none(),
        "the copy was left in {namespace}"
    );
    assert!(
        report
            .teardown
            .iter()
            .any(|c| c.object == format!("secret/{copy}") && c.error.is_none()),
        "{text}"
    );
    assert!(
        double
            .state
            .object("secrets", "default", "regcred")
            .is_some()
    );
    assert!(left_in_double(&double, &report.run_id).await.is_empty());

    // A Secret that does not exist, and one of another type: refused before any Pod.
    for (flag, said) in [
        (
            "absent-cred",
            "image pull secret absent-cred (--image-pull-secret) does not exist in namespace default",
        ),
        (
            "opaque-cred",
            "image pull secret default/opaque-cred (--image-pull-secret) is of type Opaque, not kubernetes.io/dockerconfigjson",
        ),
    ] {
        seen.lock().unwrap().clear();
        let Run {
            code, text, report, ..
        } = run(
            &double,
            &images,
            &["--image-pull-secret", flag, "--exact", "network::mtu"],
        )
        .await;
        assert_eq!(
            code,
            Some(i32::from(kandev_report::exit::ENVIRONMENT)),
            "{text}"
        );
        assert!(text.contains(said) && text.contains("fix: "), "{text}");
        assert!(seen.lock().unwrap().is_empty(), "a Pod was created: {text}");
        assert!(left_in_double(&double, &report.run_id).await.is_empty());
    }
    double.state.set_pod_mutator(None);
}

/// `launch --image-pull-secret NAME`: launch copies the Secret into the namespace it creates
/// (before its Job, whose Pod carries it: `launch::objects`' unit test), the run inside
/// carries the name on every Pod it creates without reading Secrets (the executor's Role
/// grants none), and the copy goes with the launch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn launch_copies_the_pull_secret_and_the_run_inside_carries_it_on_kube_double() {
    let (double, images, harness) = super::in_cluster_double().await;
    let admin = cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap()
        .admin;
    Api::<Secret>::namespaced(admin, "default")
        .create(
            &PostParams::default(),
            &secret("regcred", "kubernetes.io/dockerconfigjson"),
        )
        .await
        .unwrap();
    let seen: Seen = Arc::default();
    let record = seen.clone();
    double
        .state
        .set_pod_mutator(Some(Box::new(move |pod: &mut Value| {
            let names = pod["spec"]["imagePullSecrets"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|r| r["name"].as_str().map(str::to_owned))
                .collect();
            let meta = &pod["metadata"];
            let name = meta["name"]
                .as_str()
                .or(meta["generateName"].as_str())
                .unwrap_or("?")
                .to_owned();
            record.lock().unwrap().push((name, names));
        })));
    // The operator's namespace: the copy is deleted by name there, not with a namespace.
    let namespace = "operators-private";
    double.state.create_namespace(namespace, &[]);
    let launched = common::kube::launch(
        &double,
        &images,
        &harness,
        &[
            "--namespace",
            namespace,
            "--image-pull-secret",
            "regcred",
            "--exact",
            "launch::contract",
        ],
    )
    .await;
    assert_eq!(launched.code, Some(0), "{}", launched.text);
    // The Job is pinned to the harness image's architecture, read from the engine holding it;
    // an image the engine does not hold pins none, saying why.
    let arch = kandev_harness::pod::compose::Arch::of_this_machine().as_str();
    let pinned = format!("the harness image is linux/{arch}: the Job runs on such nodes only");
    assert!(launched.text.contains(&pinned), "{}", launched.text);
    let unread = kandev_harness::backend::kube::launch::harness_image_arch("registry.invalid/h:1");
    let why = unread.await.err().unwrap_or_default();
    assert!(why.contains("does not hold it"), "{why}");
    let (_, report) = launched.report();
    let step = report
        .setup
        .iter()
        .find(|s| s.name == "pull_secrets")
        .unwrap_or_else(|| panic!("no pull_secrets step: {}", launched.text));
    assert_eq!(step.evidence[0]["copied"], false, "{}", launched.text);
    let pods = seen.lock().unwrap().clone();
    let task_pods: Vec<_> = pods
        .iter()
        .filter(|(name, _)| !name.contains("-warm-up-"))
        .collect();
    assert!(!task_pods.is_empty(), "no Pod was created: {pods:?}");
    // Launch's copy, under the run's own name: the Job's Pod and the run's carry it.
    let copy = pull_secrets::copy_name("regcred", &launched.run_id);
    for (name, carried) in &pods {
        assert_eq!(carried, std::slice::from_ref(&copy), "Pod {name}");
    }
    assert!(
        left_in_double(&double, &launched.run_id).await.is_empty(),
        "the copy (or more) was left"
    );
    // Launch made the copy (it was there to delete) and removed it; the source stays.
    let deleted: Vec<_> = double
        .state
        .deletions()
        .into_iter()
        .filter(|d| d.resource.ends_with("secrets") && d.namespace == namespace)
        .map(|d| d.name)
        .collect();
    assert!(
        deleted.contains(&copy) && !deleted.iter().any(|n| n == "regcred"),
        "{deleted:?}: {}",
        launched.text
    );
    assert!(double.state.object("secrets", namespace, &copy).is_none());
    assert!(
        double
            .state
            .object("secrets", "default", "regcred")
            .is_some()
    );
    double.state.set_pod_mutator(None);
}
