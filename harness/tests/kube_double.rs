//! The `kube` backend against the wire-level cluster double (`kandev_test_support::cluster_double`):
//! an API server over HTTPS that the harness reaches only through a kubeconfig, as it reaches
//! a real cluster. The cluster is opened and set up as `--backend kube` does it
//! (`cluster::open` + `Cluster::set_up`: namespace, ServiceAccount, Role, RoleBinding, a
//! TokenRequest), so every session call uses the executor's real token and RBAC.
//!
//! Without a runtime (no engine needed): the executor is refused what Kandev's Role does not
//! grant, and a Pod mutated by an admission hook is rolled back by its exact UID. With Pods on
//! the local engine (`#[ignore]`d: `bash harness/scripts/ensure-engine.sh`, then
//! `cargo test --workspace -- --include-ignored`): exec over websockets answering after more
//! than 60 s, exec with a large stdin and stdout, and a port-forward exchange.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Pod;
use kandev_harness::backend::kube::cluster::{self, Cluster};
use kandev_harness::backend::kube::{KubeBackend, ManagedPvc};
use kandev_harness::backend::local::LocalBackend;
use kandev_harness::backend::{Backend, ExecRequest, PodRef};
use kandev_harness::host::connect_engine;
use kandev_harness::host::images::{ImageConfig, ImageSet, ensure_images, mock_agent_binary};
use kandev_harness::pod::compose::{Arch, ComposeInput, WorkspaceSource, compose_pod};
use kandev_harness::pod::identity::{SessionIdentity, create_nonce, random_hex};
use kandev_harness::pod::template::WorkspaceMode;
use kandev_test_support::cluster_double::{self, KubeDouble};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The double's cluster set up as `--backend kube` sets it up, and the backend of its sessions.
async fn set_up(double: &KubeDouble) -> (Cluster, KubeBackend) {
    let reached = cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap();
    assert!(reached.server.starts_with("https://127.0.0.1:"));
    let run = format!("double-{}", random_hex(4));
    let cluster = Cluster::set_up(reached, None, None, WorkspaceMode::EmptyDir, &run)
        .await
        .unwrap();
    let backend = KubeBackend::new(
        cluster.session.clone(),
        &cluster.namespace,
        "kube",
        "work",
        ManagedPvc::default(),
    )
    .with_admin(cluster.admin.clone());
    (cluster, backend)
}

fn pod(name: &str, spec: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {
            "acceptance.kandev.ai/managed": "true", "acceptance.kandev.ai/run": "kube-double-test"}},
        "spec": spec,
    }))
    .unwrap()
}

async fn can_i(client: &kube::Client, ns: &str, verb: &str, resource: &str) -> bool {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(ns.into()),
                verb: Some(verb.into()),
                resource: Some(resource.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap()
        .allowed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_is_refused_what_kandevs_role_does_not_grant() {
    let double = cluster_double::start(None).await.unwrap();
    let (cluster, _) = set_up(&double).await;
    let ns = cluster.namespace.as_str();
    // The Role grants get/create/delete/watch on pods, not list: refused with 403.
    let listed = Api::<Pod>::namespaced(cluster.session.clone(), ns)
        .list(&ListParams::default())
        .await;
    match listed {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403, "{status:?}");
            assert!(
                status
                    .message
                    .contains(&format!("system:serviceaccount:{ns}:{}", cluster::EXECUTOR)),
                "{}",
                status.message
            );
        }
        other => panic!("the executor listed pods: {other:?}"),
    }
    // The operator's identity may.
    Api::<Pod>::namespaced(cluster.admin.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    // SelfSubjectAccessReview answers from the same Roles.
    assert!(can_i(&cluster.session, ns, "create", "pods").await);
    assert!(!can_i(&cluster.session, ns, "list", "pods").await);
    assert!(!can_i(&cluster.session, ns, "get", "secrets").await);
    assert!(!can_i(&cluster.session, "default", "create", "pods").await);
    assert!(can_i(&cluster.admin, ns, "list", "pods").await);
    let refusals = double.state.refusals();
    assert!(
        refusals
            .iter()
            .any(|r| r.verb == "list" && r.resource == "pods"),
        "{refusals:?}"
    );
    // The teardown removes the namespace it created.
    cluster.teardown().await;
    assert!(double.state.object("namespaces", "", ns).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_double_answers_with_kubernetes_status_codes_and_selectors() {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{DeleteParams, Preconditions};
    let double = cluster_double::start(None).await.unwrap();
    let reached = cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap();
    assert_eq!(reached.server_version, "v1.36.0-kube-double");
    let admin = reached.admin.clone();
    let code = |e: kube::Error| match e {
        kube::Error::Api(status) => status.code,
        other => panic!("not an API status: {other:?}"),
    };
    let pods = Api::<Pod>::namespaced(admin.clone(), "default");
    let spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
    let mut a = pod("a", spec.clone());
    a.metadata
        .labels
        .get_or_insert_default()
        .insert("tier".into(), "one".into());
    let created = pods.create(&PostParams::default(), &a).await.unwrap();
    pods.create(&PostParams::default(), &pod("b", spec.clone()))
        .await
        .unwrap();
    assert_eq!(
        code(pods.create(&PostParams::default(), &a).await.unwrap_err()),
        409
    );
    assert_eq!(code(pods.get("missing").await.unwrap_err()), 404);
    let selected = pods
        .list(&ListParams::default().labels("tier=one"))
        .await
        .unwrap();
    assert_eq!(selected.items.len(), 1);
    let not_one = pods
        .list(&ListParams::default().labels("tier!=one"))
        .await
        .unwrap();
    assert_eq!(not_one.items.len(), 1);
    // A namespace that does not exist; a resource the double does not serve.
    let elsewhere = Api::<Pod>::namespaced(admin.clone(), "nowhere");
    assert_eq!(
        code(
            elsewhere
                .create(&PostParams::default(), &a)
                .await
                .unwrap_err()
        ),
        404
    );
    assert_eq!(
        code(
            Api::<ConfigMap>::namespaced(admin.clone(), "default")
                .list(&ListParams::default())
                .await
                .unwrap_err()
        ),
        404
    );
    // DELETE preconditions: a stale resourceVersion or another UID is a 409.
    let uid = created.metadata.uid.clone().unwrap();
    let rv = created.metadata.resource_version.clone().unwrap();
    let with = |uid: &str, rv: &str| DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.into()),
            resource_version: Some(rv.into()),
        }),
        ..Default::default()
    };
    assert_eq!(
        code(pods.delete("a", &with("other", &rv)).await.unwrap_err()),
        409
    );
    assert_eq!(
        code(pods.delete("a", &with(&uid, "1")).await.unwrap_err()),
        409
    );
    pods.delete("a", &with(&uid, &rv)).await.unwrap();
    assert_eq!(code(pods.get("a").await.unwrap_err()), 404);
    // An unknown token is a 401.
    let mut config = reached.config.clone();
    config.auth_info = serde_json::from_value(json!({"token": "not-issued"})).unwrap();
    let stranger = kube::Client::try_from(config).unwrap();
    assert_eq!(
        code(
            Api::<Pod>::namespaced(stranger, "default")
                .get("b")
                .await
                .unwrap_err()
        ),
        401
    );
}

/// A Pod composed from the default template as a session composes it (main container
/// `kandev-agent`), in `namespace`.
fn composed(namespace: &str, session: &str) -> Pod {
    let text = std::fs::read_to_string(kandev_harness::paths::default_template()).unwrap();
    let rendered = kandev_harness::pod::template::render(
        &text,
        "kandev-acceptance/worker:0",
        "kandev-acceptance/daemon:0",
    );
    let template = kandev_harness::pod::template::parse(&rendered.text).unwrap();
    let identity = SessionIdentity::new("20261130t000000-abcdef", session, 1);
    let mut pod = compose_pod(&ComposeInput {
        template: &template,
        identity: &identity,
        namespace,
        main_container: "kandev-agent",
        arch: Arch::Amd64,
        workspace: WorkspaceSource::EmptyDir,
        create_nonce: &create_nonce(),
    })
    .unwrap();
    pod.metadata
        .labels
        .get_or_insert_default()
        .extend(identity.harness_labels());
    pod
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_mutated_by_admission_is_rolled_back_by_its_exact_uid() {
    let double = cluster_double::start(None).await.unwrap();
    let (cluster, _) = set_up(&double).await;
    let ns = cluster.namespace.clone();
    let backend = KubeBackend::new(
        cluster.session.clone(),
        &ns,
        "kube",
        "kandev-agent",
        ManagedPvc::default(),
    )
    .with_admin(cluster.admin.clone());

    // Unmutated: admitted as sent (and the executor's dry run passes), then deleted with
    // preconditions.
    let first = composed(&ns, "lifecycle::kept");
    let dry_run = PostParams {
        dry_run: true,
        field_manager: None,
    };
    Api::<Pod>::namespaced(cluster.session.clone(), &ns)
        .create(&dry_run, &first)
        .await
        .unwrap();
    let name = first.metadata.name.clone().unwrap();
    assert!(
        double.state.object("pods", &ns, &name).is_none(),
        "a dry run stores nothing"
    );
    let kept = backend.create_pod(&first).await.unwrap();
    assert_eq!(
        double.state.object("pods", &ns, &name).unwrap()["metadata"]["uid"],
        json!(kept.uid)
    );
    backend.delete_pod(&kept).await.unwrap();
    assert!(double.state.object("pods", &ns, &name).is_none());
    let deleted = double.state.deletions();
    assert_eq!(
        deleted.last().unwrap().precondition_uid.as_deref(),
        Some(kept.uid.as_str())
    );

    double
        .state
        .set_pod_mutator(Some(Box::new(|pod: &mut Value| {
            pod["metadata"]["annotations"]["kandev.ai/injected-by-webhook"] = json!("yes");
        })));
    let mutated = composed(&ns, "lifecycle::mutated");
    let name = mutated.metadata.name.clone().unwrap();
    let refused = backend.create_pod(&mutated).await;
    let message = format!("{:#}", anyhow::Error::from(refused.unwrap_err()));
    assert!(
        message.contains("kandev.ai/injected-by-webhook"),
        "{message}"
    );
    assert!(double.state.object("pods", &ns, &name).is_none());
    let deletions = double.state.deletions();
    let rolled_back = deletions
        .iter()
        .find(|d| d.resource == "pods" && d.name == name)
        .expect("the mutated pod was deleted");
    assert_eq!(
        rolled_back.precondition_uid.as_deref(),
        Some(rolled_back.uid.as_str()),
        "the rollback named the exact UID: {rolled_back:?}"
    );
    assert!(message.contains(&rolled_back.uid), "{message}");
    cluster.teardown().await;
}

/// The fixture images, and the double with Pods on the local engine.
async fn engine_double() -> (KubeDouble, ImageSet) {
    let docker = connect_engine().await.unwrap();
    let root = kandev_harness::paths::workspace_root();
    let binary = mock_agent_binary(&root).await.unwrap();
    let images = ensure_images(
        &docker,
        &ImageConfig {
            base_image: "debian:bookworm".into(),
            worker_image: None,
            daemon_image: None,
            images_dir: root.join("fixtures/images"),
            mock_agent_binary: binary,
        },
        &indicatif::MultiProgress::with_draw_target(indicatif::ProgressDrawTarget::hidden()),
    )
    .await
    .unwrap();
    let runtime: Arc<dyn Backend> = Arc::new(LocalBackend::new(
        docker,
        images.mock_agent.clone(),
        vec!["/kandev-mock-agent".into(), "bridge".into()],
        4096,
    ));
    (cluster_double::start(Some(runtime)).await.unwrap(), images)
}

/// A running Pod: `work` (the daemon image, a shell) and `agent` (the mock agent serving
/// HTTP on 127.0.0.1:39429).
async fn running_pod(backend: &KubeBackend, images: &ImageSet) -> PodRef {
    let name = format!("double-{}", random_hex(4));
    // A helper Pod: not composed by Kandev, so not compared on admission.
    let created = backend
        .create_helper_pod(&pod(
            &name,
            json!({"containers": [
                {"name": "work", "image": images.daemon, "command": ["sleep", "3600"]},
                {"name": "agent", "image": images.mock_agent,
                 "command": ["/kandev-mock-agent", "serve"],
                 "env": [{"name": "AGENTCTL_LISTEN_HOST", "value": "127.0.0.1"},
                         {"name": "AGENTCTL_PORT", "value": "39429"}],
                 "ports": [{"containerPort": 39429}]},
            ]}),
        ))
        .await
        .unwrap();
    backend
        .wait_running(&created, "work", Duration::from_secs(120))
        .await
        .unwrap();
    backend
        .wait_running(&created, "agent", Duration::from_secs(60))
        .await
        .unwrap();
    created
}

fn exec(argv: &[&str], stdin: Option<Vec<u8>>) -> ExecRequest {
    ExecRequest {
        container: "work".into(),
        argv: argv.iter().map(|a| (*a).to_owned()).collect(),
        stdin,
        timeout: Some(Duration::from_secs(180)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn an_exec_over_the_doubles_websocket_answers_after_more_than_60_seconds() {
    let (double, images) = engine_double().await;
    let (cluster, backend) = set_up(&double).await;
    let pod = running_pod(&backend, &images).await;
    let failed = backend
        .exec(
            &pod,
            exec(&["sh", "-c", "echo out; echo err >&2; exit 3"], None),
        )
        .await
        .unwrap();
    assert_eq!(failed.exit_code, Some(3));
    assert_eq!(failed.stdout_text(), "out\n");
    assert_eq!(failed.stderr_text(), "err\n");
    let started = Instant::now();
    let late = backend
        .exec(&pod, exec(&["sh", "-c", "sleep 65; echo late"], None))
        .await
        .unwrap();
    assert!(started.elapsed() > Duration::from_secs(65));
    assert_eq!(late.exit_code, Some(0), "{}", late.stderr_text());
    assert_eq!(late.stdout_text(), "late\n");
    backend.delete_pod(&pod).await.unwrap();
    cluster.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn an_exec_over_the_doubles_websocket_carries_a_large_stdin_and_stdout() {
    let (double, images) = engine_double().await;
    let (cluster, backend) = set_up(&double).await;
    let pod = running_pod(&backend, &images).await;
    // 6 MiB in, many websocket frames on channel 0, ended by v5's close frame. (Not echoed
    // back with `cat`: the local runtime writes all of stdin before it reads the output.)
    let input: Vec<u8> = (0..(6u32 << 20)).map(|i| (i * 31 % 251) as u8).collect();
    let digest = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(&input))
    };
    let summed = backend
        .exec(&pod, exec(&["wc", "-c"], Some(input.clone())))
        .await
        .unwrap();
    assert_eq!(summed.exit_code, Some(0), "{}", summed.stderr_text());
    assert_eq!(summed.stdout_text().trim(), input.len().to_string());
    let hashed = backend
        .exec(&pod, exec(&["sha256sum"], Some(input.clone())))
        .await
        .unwrap();
    assert!(
        hashed.stdout_text().starts_with(&digest),
        "{}",
        hashed.stdout_text()
    );
    // 6 MiB out on channel 1, in many frames.
    let large = backend
        .exec(
            &pod,
            exec(
                &["sh", "-c", "head -c 6291456 /dev/zero | tr '\\0' a"],
                None,
            ),
        )
        .await
        .unwrap();
    assert_eq!(large.exit_code, Some(0), "{}", large.stderr_text());
    assert_eq!(large.stdout.len(), 6 << 20);
    assert!(large.stdout.iter().all(|b| *b == b'a'));
    backend.delete_pod(&pod).await.unwrap();
    cluster.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_port_forward_over_the_doubles_websocket_exchanges_http() {
    let (double, images) = engine_double().await;
    let (cluster, backend) = set_up(&double).await;
    let pod = running_pod(&backend, &images).await;
    let response = backend
        .port_exchange(
            &pod,
            "agent",
            39429,
            b"GET /health HTTP/1.1\r\nHost: agent\r\nContent-Length: 0\r\n\r\n",
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("\"status\":\"ok\""), "{text}");
    // The agent's logs through pods/log (the operator's identity).
    let logs = backend.logs(&pod, "agent").await.unwrap();
    assert!(logs.contains("listening on 127.0.0.1:39429"), "{logs}");
    backend.delete_pod(&pod).await.unwrap();
    cluster.teardown().await;
}
