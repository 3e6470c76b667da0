//! Issue 40 (private registries in an operator's namespace): runs sharing one `--namespace`
//! each copy the image pull secret under a name of their own, carry it, and remove only it,
//! by the UID its create returned; another run's copy there (under its own name, or under the
//! Secret's, as a copy was named before) is neither used nor removed. `gc --run` removes a
//! killed run's copy there and nothing else. Two runs cannot overlap in one namespace (the
//! executor's account, Role and binding have fixed names), so the run going on elsewhere is
//! its copies, made as it would have made them. A template's own `imagePullSecrets` are read
//! from that `--namespace`, where its Pods run, and used as they are. Needs a reachable engine,
//! so it is `#[ignore]`d.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::fixture;

use common::kube::{Run, command, left_in_double, run, run_command};
use k8s_openapi::api::core::v1::Secret;
use kandev_harness::backend::kube::{cluster, pull_secrets};
use kandev_harness::pod::identity::{LABEL_MANAGED, LABEL_RUN};
use kandev_report::Outcome;
use kandev_test_support::cluster_double::KubeDouble;
use kandev_test_support::engine::engine_double;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

/// Per Pod created: its run and the names it carries.
type Seen = Arc<Mutex<Vec<(String, Vec<String>)>>>;

/// A registry Secret named `name` in `namespace`, labelled `labels`.
async fn put_secret(double: &KubeDouble, namespace: &str, name: &str, labels: Value) -> String {
    let admin = cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap()
        .admin;
    let config = r#"{"auths":{"registry.example:5000":{"auth":"dTpw"}}}"#;
    let secret: Secret = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "labels": labels}, "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": config}}))
    .unwrap();
    Api::<Secret>::namespaced(admin, namespace)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap()
}

/// Records, per Pod the double is asked to create, its run and the names it carries (the
/// double's Pod hook reads each create's body, changing nothing).
fn record_carried(double: &KubeDouble) -> Seen {
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
            let run = pod["metadata"]["labels"][LABEL_RUN]
                .as_str()
                .unwrap_or("?")
                .to_owned();
            record.lock().unwrap().push((run, names));
        })));
    seen
}

/// The Secrets deleted in `namespace` so far, by name.
fn deleted_secrets(double: &KubeDouble, namespace: &str) -> Vec<String> {
    double
        .state
        .deletions()
        .into_iter()
        .filter(|d| d.resource.ends_with("secrets") && d.namespace == namespace)
        .map(|d| d.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn runs_sharing_a_namespace_each_copy_and_remove_their_own_pull_secret_on_kube_double() {
    let (double, images) = engine_double().await;
    put_secret(&double, "default", "regcred", json!({})).await;
    let shared = "team-private";
    double.state.create_namespace(
        shared,
        &[("pod-security.kubernetes.io/enforce", "privileged")],
    );
    // Another run's copies, as a run going on made them: never used, never removed.
    let other_copy = pull_secrets::copy_name("regcred", "run-elsewhere");
    let mut others = Vec::new();
    for name in [other_copy.as_str(), "regcred"] {
        let labels = json!({LABEL_MANAGED: "true", LABEL_RUN: "run-elsewhere"});
        let uid = put_secret(&double, shared, name, labels).await;
        others.push((name.to_owned(), uid));
    }
    let seen = record_carried(&double);
    let args = [
        "--namespace",
        shared,
        "--image-pull-secret",
        "regcred",
        "--exact",
        "network::mtu",
    ];
    let first = run(&double, &images, &args).await;
    let second = run(&double, &images, &args).await;
    let mut copies = Vec::new();
    for Run { report, text, .. } in [&first, &second] {
        assert_eq!(report.scenarios.len(), 1, "{text}");
        assert_eq!(report.scenarios[0].outcome, Outcome::Passed, "{text}");
        let copy = pull_secrets::copy_name("regcred", &report.run_id);
        let carried: Vec<_> = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(run, _)| run == &report.run_id)
            .map(|(_, names)| names.clone())
            .collect();
        assert!(!carried.is_empty(), "no Pod of {}: {text}", report.run_id);
        for names in carried {
            assert_eq!(names, std::slice::from_ref(&copy), "{text}");
        }
        assert!(
            report
                .teardown
                .iter()
                .any(|c| c.object == format!("secret/{copy}") && c.error.is_none()),
            "{text}"
        );
        assert!(left_in_double(&double, &report.run_id).await.is_empty());
        copies.push(copy);
    }
    assert_ne!(copies[0], copies[1]);
    let mut deleted = deleted_secrets(&double, shared);
    deleted.sort();
    copies.sort();
    assert_eq!(deleted, copies, "each run removed its own copy, once");
    for (name, uid) in others {
        let stays = double.state.object("secrets", shared, &name).unwrap();
        assert_eq!(stays["metadata"]["uid"], uid.as_str(), "{name}");
    }
    assert!(
        double
            .state
            .object("secrets", "default", "regcred")
            .is_some()
    );
    double.state.set_pod_mutator(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn gc_removes_a_killed_runs_pull_secret_copy_in_a_shared_namespace_on_kube_double() {
    let (double, images) = engine_double().await;
    put_secret(&double, "default", "regcred", json!({})).await;
    let shared = "team-private";
    double.state.create_namespace(
        shared,
        &[("pod-security.kubernetes.io/enforce", "privileged")],
    );
    let other_copy = pull_secrets::copy_name("regcred", "run-elsewhere");
    put_secret(
        &double,
        shared,
        &other_copy,
        json!({LABEL_MANAGED: "true", LABEL_RUN: "run-elsewhere"}),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut child = run_command(
        &double,
        &images,
        dir.path(),
        &[
            "--namespace",
            shared,
            "--image-pull-secret",
            "regcred",
            "--exact",
            "network::mtu",
        ],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    // Killed once its copy exists.
    let started = std::time::Instant::now();
    let (id, copy) = loop {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(300),
            "the run never copied its pull secret"
        );
        let id = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .next()
            .map(|e| e.file_name().to_string_lossy().into_owned());
        if let Some(id) = id {
            let copy = pull_secrets::copy_name("regcred", &id);
            if double.state.object("secrets", shared, &copy).is_some() {
                break (id, copy);
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    child.kill().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(double.state.object("secrets", shared, &copy).is_some());
    // Its Lease is live for a minute yet: --force.
    let gc = command(&double, "gc")
        .args(["--namespace", shared, "--run", &id, "--force"])
        .output()
        .await
        .unwrap();
    let text = common::output_text(&gc);
    assert!(gc.status.success(), "{text}");
    assert!(text.contains(&format!("secret/{copy}")), "{text}");
    assert!(left_in_double(&double, &id).await.is_empty(), "{text}");
    assert!(
        double
            .state
            .object("secrets", shared, &other_copy)
            .is_some(),
        "gc --run removed another run's copy: {text}"
    );
    assert_eq!(deleted_secrets(&double, shared), [copy], "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_templates_pull_secret_is_read_from_the_namespace_its_pods_run_in_on_kube_double() {
    let (double, images) = engine_double().await;
    let shared = "team-private";
    double.state.create_namespace(
        shared,
        &[("pod-security.kubernetes.io/enforce", "privileged")],
    );
    // Only in the operator's namespace, as a kubelet reads a Pod's references from its own
    // namespace; the context's (`default`) holds none of that name.
    let uid = put_secret(&double, shared, "team-cred", json!({})).await;
    let worker = std::fs::read_to_string(fixture("templates/full-worker.yaml")).unwrap();
    let mut template: Value = serde_yaml::from_str(&worker).unwrap();
    template["template"]["spec"]["imagePullSecrets"] = json!([{"name": "team-cred"}]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("with-pull-secret.yaml");
    std::fs::write(&path, serde_yaml::to_string(&template).unwrap()).unwrap();
    let seen = record_carried(&double);
    let Run { report, text, .. } = run(
        &double,
        &images,
        &[
            "--namespace",
            shared,
            "--template",
            &path.display().to_string(),
            "--exact",
            "network::mtu",
        ],
    )
    .await;
    double.state.set_pod_mutator(None);
    assert_eq!(report.scenarios.len(), 1, "{text}");
    assert_eq!(report.scenarios[0].outcome, Outcome::Passed, "{text}");
    let carried = seen.lock().unwrap().clone();
    assert!(!carried.is_empty(), "no Pod was created: {text}");
    for (_, names) in carried {
        assert_eq!(
            names,
            ["team-cred"],
            "the namespace's own, by its name: {text}"
        );
    }
    // Used as it is: neither copied nor removed.
    assert_eq!(deleted_secrets(&double, shared), Vec::<String>::new());
    let stays = double.state.object("secrets", shared, "team-cred").unwrap();
    assert_eq!(stays["metadata"]["uid"], uid.as_str());
    let copy = pull_secrets::copy_name("team-cred", &report.run_id);
    assert!(
        double.state.object("secrets", shared, &copy).is_none(),
        "{text}"
    );
    assert!(left_in_double(&double, &report.run_id).await.is_empty());
}
