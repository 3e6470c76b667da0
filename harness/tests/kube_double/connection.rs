//! The `kube` backend's connection to an API server as a real one's path treats it, against
//! the wire-level cluster double: proxies (a kubeconfig `proxy-url`), the faults a control
//! plane produces (429 with Retry-After, 500 and 503, connection resets on any request and in
//! the middle of an exec and a port-forward, 410 Gone), token lifetimes a cluster caps, and a
//! load balancer's idle cuts.
//!
//! Without a runtime (no engine needed) unless `#[ignore]`d: the engine tests need
//! `bash harness/scripts/ensure-engine.sh`, then `cargo test --workspace -- --include-ignored`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kandev_harness::backend::kube::cluster::{self, Cluster};
use kandev_harness::backend::kube::{KubeBackend, ManagedPvc};
use kandev_harness::backend::{Backend, ExecRequest, PodRef};
use kandev_harness::host::images::ImageSet;
use kandev_harness::pod::identity::random_hex;
use kandev_test_support::cluster_double::{self, Fault, KubeDouble};
use kandev_test_support::connect_proxy;
use kandev_test_support::engine::engine_double;
use kandev_test_support::on_double::{
    can_i, client_with, executor_token_requests, set_up, set_up_sessions,
};
use kube::api::{Api, ListParams};
use serde_json::Value;
use std::time::Duration;

/// A copy of the double's kubeconfig whose cluster has `proxy-url: proxy`.
fn kubeconfig_through(
    double: &KubeDouble,
    proxy: &str,
    dir: &std::path::Path,
) -> std::path::PathBuf {
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(&double.kubeconfig).unwrap()).unwrap();
    config["clusters"][0]["cluster"]["proxy-url"] = Value::String(proxy.into());
    let path = dir.join("kubeconfig");
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    path
}

/// The double reached through `proxy` named as the kubeconfig's `proxy-url`: the server
/// answers, and the proxy carried the connection to the double's port.
async fn assert_reached_through(double: &KubeDouble, proxy: &connect_proxy::ConnectProxy) {
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig_through(double, &proxy.url, dir.path());
    let reached = cluster::open(Some(&config), Some(&double.context))
        .await
        .unwrap_or_else(|e| panic!("{}", kandev_harness::error_chain(&e)));
    assert!(reached.server_version.starts_with('v'));
    let port = double.server.rsplit(':').next().unwrap();
    assert_eq!(
        proxy.targets().first().map(String::as_str),
        Some(&*format!("127.0.0.1:{port}"))
    );
}

/// A kubeconfig cluster's `socks5://` proxy-url is used too (kube's `socks5` feature).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_is_reached_through_a_socks5_proxy_url() {
    let double = cluster_double::start(None).await.unwrap();
    assert_reached_through(&double, &connect_proxy::start_socks5().await).await;
}

/// A kubeconfig cluster's `proxy-url` is used (kube was built without `http-proxy`: every
/// client failed with ProxyProtocolDisabled), and the API server is reached through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_is_reached_through_a_kubeconfig_proxy_url() {
    let double = cluster_double::start(None).await.unwrap();
    assert_reached_through(&double, &connect_proxy::start().await).await;
}

/// The faults that fired, asserted to be `expected` of them.
fn fired(double: &KubeDouble, expected: usize) -> Vec<String> {
    let injected = double.state.faults().injected();
    assert_eq!(injected.len(), expected, "{injected:#?}");
    injected
}

/// One connection reset on any request ended the run with exit 3 ("ServiceError: client error
/// (SendRequest) ... peer closed connection without sending TLS close_notify"). Now a request
/// safe to repeat is sent again: a review and a read cut before they were served, and the
/// executor's RoleBinding create cut after it was served (its answer lost): the repeat is
/// answered 409, the binding read back carries the run's labels, so it is the run's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_safe_to_repeat_are_sent_again_after_a_connection_reset() {
    let double = cluster_double::start(None).await.unwrap();
    let faults = double.state.faults();
    faults.inject(Some("POST"), "/rolebindings", Fault::ResetAfterServing, 1);
    faults.inject(Some("POST"), "/token", Fault::Reset, 1);
    faults.inject(
        Some("POST"),
        "/serviceaccounts",
        Fault::ResetAfterServing,
        1,
    );
    let cluster = set_up(&double, "faults").await.unwrap();
    let injected = fired(&double, 3);
    assert!(
        injected[0].contains("POST /api/v1/namespaces/"),
        "{injected:?}"
    );
    // Exactly one binding, the run's.
    let bindings: Api<RoleBinding> = Api::namespaced(cluster.admin.clone(), &cluster.namespace);
    let listed = bindings.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.len(), 1, "{listed:?}");
    // And the executor's token works: the token request cut before it was served was sent
    // again.
    let executor = can_i(&cluster.session, &cluster.namespace, "create", "pods").await;
    assert_eq!(executor, Ok(true));
    // Reads and reviews cut before they were served.
    faults.inject(Some("GET"), "/namespaces/", Fault::Reset, 2);
    faults.inject(None, "selfsubjectaccessreviews", Fault::Reset, 1);
    let namespaces: Api<Namespace> = Api::all(cluster.admin.clone());
    assert!(namespaces.get(&cluster.namespace).await.is_ok());
    let review = can_i(&cluster.session, &cluster.namespace, "list", "pods").await;
    assert_eq!(review, Ok(false));
    fired(&double, 6);
    cluster.teardown().await;
}

/// A request that is not safe to repeat (here a replace) is not sent again after a reset:
/// the error names the lost connection, the request and the fix, not only
/// "client error (SendRequest)".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_on_a_request_not_safe_to_repeat_is_named_with_its_fix() {
    let double = cluster_double::start(None).await.unwrap();
    let cluster = set_up(&double, "faults").await.unwrap();
    let namespaces: Api<Namespace> = Api::all(cluster.admin.clone());
    let mut ns = namespaces.get(&cluster.namespace).await.unwrap();
    ns.metadata
        .labels
        .get_or_insert_default()
        .insert("touched".into(), "yes".into());
    double
        .state
        .faults()
        .inject(Some("PUT"), "/namespaces/", Fault::Reset, 1);
    let error = namespaces
        .replace(&cluster.namespace, &Default::default(), &ns)
        .await
        .map(|_| ())
        .map_err(|e| kandev_harness::error_chain(&e))
        .unwrap_err();
    fired(&double, 1);
    assert!(
        error.contains("the connection to the API server was lost during PUT /api/v1/namespaces/")
            && error.contains("not safe to repeat")
            && error.contains("fix:"),
        "{error}"
    );
    cluster.teardown().await;
}

/// The set-up of a cluster whose API server answers `code` (with `Retry-After` seconds when
/// given) to the first create of `path`: it comes through, and the fault fired.
async fn set_up_through(code: u16, retry_after: Option<u64>, path: &str) {
    let double = cluster_double::start(None).await.unwrap();
    double
        .state
        .faults()
        .inject(Some("POST"), path, Fault::Status { code, retry_after }, 1);
    let cluster = set_up(&double, "faults").await.unwrap();
    let injected = fired(&double, 1);
    assert!(
        injected[0].contains(&format!("code: {code}")),
        "{injected:?}"
    );
    cluster.teardown().await;
}

/// 429 with Retry-After (API Priority and Fairness throttling) is waited out (`resilience`,
/// as kube-rs's own retry policy would).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_is_waited_out() {
    set_up_through(429, Some(1), "/namespaces?").await;
}

/// 503 (an API server restarting, or its aggregated API unavailable) is retried
/// (`resilience`, as kube-rs's own retry policy would).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_from_a_restarting_api_server_is_retried() {
    set_up_through(503, None, "/roles?").await;
}

/// A set-up create answered 504 (the API server's request timeout: the write may have been
/// done) is sent again, and the repeat's 409 AlreadyExists is resolved as after a lost
/// connection: the run's namespace, made by the first attempt (the double answers a fault
/// without serving the request, so it is created beforehand, as that attempt would have),
/// carries the create's labels, so it is the run's. Before, kube-rs repeated the create below
/// the harness's layers and the set-up failed on the 409. A namespace of that name without
/// them (someone else's) leaves the 409 standing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_up_create_answered_504_then_409_is_taken_when_the_object_is_the_runs() {
    use kandev_harness::pod::template::WorkspaceMode;
    use kube::api::PostParams;
    let double = cluster_double::start(None).await.unwrap();
    let admin = cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap()
        .admin;
    let namespaces: Api<Namespace> = Api::all(admin);
    let set_up_after_504 = |run: String, labels: std::collections::BTreeMap<String, String>| {
        let (double, namespaces) = (&double, namespaces.clone());
        async move {
            let mut made = Namespace::default();
            made.metadata.name = Some(cluster::run_namespace(&run));
            made.metadata.labels = Some(labels);
            namespaces
                .create(&PostParams::default(), &made)
                .await
                .unwrap();
            double.state.faults().inject(
                Some("POST"),
                "/namespaces?",
                Fault::Status {
                    code: 504,
                    retry_after: None,
                },
                1,
            );
            let reached = cluster::open(Some(&double.kubeconfig), Some(&double.context))
                .await
                .unwrap();
            Cluster::set_up(reached, None, None, WorkspaceMode::EmptyDir, &run).await
        }
    };
    let privileged = || {
        (
            "pod-security.kubernetes.io/enforce".to_owned(),
            "privileged".to_owned(),
        )
    };

    let run = format!("t504-{}", random_hex(4));
    let mut labels = cluster::run_labels(&run);
    labels.extend([privileged()]);
    let cluster = set_up_after_504(run.clone(), labels).await.unwrap();
    assert_eq!(cluster.namespace, cluster::run_namespace(&run));
    fired(&double, 1);
    cluster.teardown().await;

    let other = format!("t504-{}", random_hex(4));
    let refused = set_up_after_504(other, [privileged()].into())
        .await
        .err()
        .map(|e| kandev_harness::error_chain(&e))
        .unwrap_or_default();
    assert!(refused.contains("already exists"), "{refused}");
}

/// 500 with Retry-After (an API server shutting down says when to come back) is retried as
/// client-go's `checkWait` retries it; kube-rs's policy does not (it failed the set-up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_with_retry_after_is_retried_as_client_go_does() {
    set_up_through(500, Some(1), "/rolebindings?").await;
}

/// A 500 without Retry-After is the server's answer: the set-up stops naming it, and what it
/// had created is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_internal_error_without_retry_after_stops_the_set_up_naming_it() {
    let double = cluster_double::start(None).await.unwrap();
    double.state.faults().inject(
        Some("POST"),
        "/rolebindings",
        Fault::Status {
            code: 500,
            retry_after: None,
        },
        1,
    );
    let error = set_up(&double, "faults").await.err().unwrap_or_default();
    assert!(
        error.contains("create role binding") && error.contains("apiserver is shutting down"),
        "{error}"
    );
    // Nothing of the run's is left: its namespace was removed (it goes once the double has
    // removed what was in it).
    let mut left = Vec::new();
    for _ in 0..40 {
        left = double
            .state
            .objects("namespaces")
            .iter()
            .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_owned))
            .filter(|n| n.starts_with("kandev-acceptance-"))
            .collect::<Vec<_>>();
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    assert!(left.is_empty(), "{left:?}");
}

/// 410 Gone on a read (an expired `continue` or `resourceVersion`) is read again from
/// scratch, as client-go's pager and reflector do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_answered_gone_is_read_again_from_scratch() {
    let double = cluster_double::start(None).await.unwrap();
    let admin = cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap()
        .admin;
    double.state.faults().inject(
        Some("GET"),
        "/api/v1/namespaces",
        Fault::Status {
            code: 410,
            retry_after: None,
        },
        1,
    );
    let namespaces: Api<Namespace> = Api::all(admin);
    let listed = namespaces
        .list(&ListParams::default().limit(1).continue_token("expired"))
        .await
        .unwrap();
    assert!(!listed.items.is_empty());
    let injected = fired(&double, 1);
    assert!(injected[0].contains("continue=expired"), "{injected:?}");
    let again = double.state.requests();
    let last = again.last().unwrap();
    assert!(!last.uri.contains("continue="), "{}", last.uri);
}

/// A cluster that caps token lifetimes (`--service-account-max-token-expiration`; here a few
/// seconds) grants the executor's TokenRequest less than the 4 h asked; the harness reads the
/// expiry it was granted and renews the token before it, so the session client never meets
/// a 401 however long the run. Before, it ignored the expiry and every call after it was
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executors_token_is_renewed_before_the_expiry_the_cluster_grants() {
    use k8s_openapi::api::core::v1::Pod;
    const CAP: std::time::Duration = std::time::Duration::from_secs(3);
    let double = cluster_double::start(None).await.unwrap();
    double.state.faults().set_max_token_expiration(Some(CAP));
    let cluster = set_up(&double, "faults").await.unwrap();
    let pods: Api<Pod> = Api::namespaced(cluster.session.clone(), &cluster.namespace);
    let started = std::time::Instant::now();
    let mut calls = 0;
    // Three lifetimes of session calls: each one the executor may make (get pods).
    while started.elapsed() < CAP * 3 {
        let got = pods.get_opt("none-such").await;
        assert!(
            matches!(got, Ok(None)),
            "after {:?}: {got:?}",
            started.elapsed()
        );
        calls += 1;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(double.state.faults().expired_refusals(), 0);
    let tokens = executor_token_requests(&double);
    assert!(tokens >= 3, "{tokens} TokenRequests in {calls} calls");
    // The double refuses an expired token (a positive control: the cap is enforced).
    let stale = {
        let cap = std::time::Duration::from_millis(500);
        double.state.faults().set_max_token_expiration(Some(cap));
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(cluster.admin.clone(), &cluster.namespace);
        let answer = accounts
            .create_token_request(
                "kandev-acceptance-executor",
                &Default::default(),
                &Default::default(),
            )
            .await
            .unwrap();
        tokio::time::sleep(cap * 2).await;
        answer.status.unwrap().token.unwrap()
    };
    let client = client_with(&double.server, &double.ca_pem, &stale).await;
    let refused = Api::<Pod>::namespaced(client, &cluster.namespace)
        .get_opt("none-such")
        .await;
    assert!(
        matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 401),
        "{refused:?}"
    );
    assert_eq!(double.state.faults().expired_refusals(), 1);
    cluster.teardown().await;
}

/// The mock agent's bootstrap nonce in [`agent_pod`].
const NONCE: &str = "connection-test-nonce";
const AGENT_PORT: u16 = 39431;

/// The double's cluster set up, and the backend of its sessions pinging every `keepalive`.
async fn backend_on(double: &KubeDouble, keepalive: Duration) -> (Cluster, KubeBackend) {
    let (cluster, mut backend) = set_up_sessions(double, "faults").await;
    backend.keepalive = keepalive;
    (cluster, backend)
}

/// A running Pod: `work` (the daemon image, a shell) and `agent` (the mock agent serving on
/// 127.0.0.1:AGENT_PORT, its bootstrap nonce [`NONCE`]).
async fn agent_pod(backend: &KubeBackend, images: &ImageSet) -> PodRef {
    let name = format!("conn-{}", random_hex(4));
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {
            "acceptance.kandev.ai/managed": "true", "acceptance.kandev.ai/run": "kube-connection-test"}},
        "spec": {"containers": [
            {"name": "work", "image": images.daemon, "command": ["sleep", "3600"]},
            {"name": "agent", "image": images.mock_agent,
             "command": ["/kandev-mock-agent", "serve"],
             "env": [{"name": "AGENTCTL_LISTEN_HOST", "value": "127.0.0.1"},
                     {"name": "AGENTCTL_PORT", "value": AGENT_PORT.to_string()},
                     {"name": "AGENTCTL_BOOTSTRAP_NONCE", "value": NONCE}]},
        ]},
    }))
    .unwrap();
    let created = backend.create_helper_pod(&pod).await.unwrap();
    for container in ["work", "agent"] {
        backend
            .wait_running(&created, container, Duration::from_secs(120))
            .await
            .unwrap();
    }
    created
}

fn shell(script: &str) -> ExecRequest {
    ExecRequest {
        container: "work".into(),
        argv: vec!["sh".into(), "-c".into(), script.into()],
        stdin: None,
        timeout: Some(Duration::from_secs(120)),
    }
}

fn http_post(path: &str, token: Option<&str>, body: &str) -> Vec<u8> {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    format!(
        "POST {path} HTTP/1.1\r\nHost: agent\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The agent's control token (its one-shot handshake).
async fn agent_token(backend: &KubeBackend, pod: &PodRef) -> String {
    let answer = backend
        .port_exchange(
            pod,
            "agent",
            AGENT_PORT,
            &http_post(
                "/auth/handshake",
                None,
                &format!("{{\"nonce\":\"{NONCE}\"}}"),
            ),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&answer);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str::<Value>(body).unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// An agent call that stays silent for `seconds` (the agent runs `sleep` before it answers).
fn silent_call(token: &str, seconds: u64) -> Vec<u8> {
    http_post(
        "/api/v1/exec",
        Some(token),
        &format!("{{\"argv\":[\"/kandev-mock-agent\",\"sleep\",\"{seconds}\"]}}"),
    )
}

/// A load balancer in front of the API server cuts connections idle for a while (60 s is
/// common; the double's idle cut here 3 s). An agent call through a port-forward and an exec
/// that stay silent longer than that come through: the harness pings every `keepalive` (here
/// 1 s; 20 s by default). The same calls without pings (a keepalive past the cut, as before:
/// kube-rs's port-forward never pinged, its exec once a minute) are cut, and each failure
/// names the broken stream, not a short answer read as whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn silent_streams_outlive_a_load_balancers_idle_cut() {
    let (double, images) = engine_double().await;
    let (cluster, backend) = backend_on(&double, Duration::from_secs(1)).await;
    let pod = agent_pod(&backend, &images).await;
    let token = agent_token(&backend, &pod).await;
    double
        .state
        .faults()
        .set_idle_cut(Some(Duration::from_secs(3)));

    let exec = backend
        .exec(&pod, shell("sleep 7; echo done"))
        .await
        .unwrap();
    assert_eq!(exec.exit_code, Some(0), "{}", exec.stderr_text());
    assert_eq!(exec.stdout_text(), "done\n");
    let answer = backend
        .port_exchange(
            &pod,
            "agent",
            AGENT_PORT,
            &silent_call(&token, 7),
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("\"exit_code\":0"), "{text}");

    // Without pings: cut, and named.
    let mut quiet = KubeBackend::new(
        cluster.session.clone(),
        &cluster.namespace,
        "kube",
        "work",
        ManagedPvc::default(),
    );
    quiet.keepalive = Duration::from_secs(600);
    let cuts = double.state.faults().idle_cuts();
    let cut_exec = quiet
        .exec(&pod, shell("sleep 7; echo done"))
        .await
        .map(|o| o.stdout_text())
        .map_err(|e| kandev_harness::error_chain(&e));
    let error = cut_exec.unwrap_err();
    assert!(
        error.contains("exec stream") && error.contains("fix:"),
        "{error}"
    );
    let cut_call = quiet
        .port_exchange(
            &pod,
            "agent",
            AGENT_PORT,
            &silent_call(&token, 7),
            Duration::from_secs(60),
        )
        .await
        .map(|a| String::from_utf8_lossy(&a).into_owned())
        .map_err(|e| kandev_harness::error_chain(&e));
    let error = cut_call.unwrap_err();
    assert!(
        error.contains("port-forward") && error.contains("fix:"),
        "{error}"
    );
    assert!(double.state.faults().idle_cuts() >= cuts + 2);

    double.state.faults().set_idle_cut(None);
    backend.delete_pod(&pod).await.unwrap();
    cluster.teardown().await;
}

/// A connection reset in the middle of an exec (a restarting API server): the exec is not
/// repeated (its command may have run); it fails naming the broken stream and the fix.
/// Before, kube-rs's exec ended as if the command had ended, with no exit code.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_reset_in_the_middle_of_an_exec_is_named() {
    let (double, images) = engine_double().await;
    let (cluster, backend) = backend_on(&double, Duration::from_secs(20)).await;
    let pod = agent_pod(&backend, &images).await;
    double.state.faults().inject(
        Some("GET"),
        "/exec",
        Fault::ResetAfter(Duration::from_secs(2)),
        1,
    );
    let error = backend
        .exec(&pod, shell("echo started; sleep 6; echo done"))
        .await
        .map(|o| format!("exit {:?}: {}", o.exit_code, o.stdout_text()))
        .map_err(|e| kandev_harness::error_chain(&e))
        .unwrap_err();
    assert!(
        error.contains("exec stream") && error.contains("fix:"),
        "{error}"
    );
    fired(&double, 1);
    // The Pod is fine afterwards: a fresh exec answers.
    let after = backend.exec(&pod, shell("echo again")).await.unwrap();
    assert_eq!(after.stdout_text(), "again\n");
    backend.delete_pod(&pod).await.unwrap();
    cluster.teardown().await;
}

/// A connection reset in the middle of a port-forward's exchange with the agent: it fails
/// naming the broken stream and the fix. Before, kube-rs's port-forward returned the bytes
/// so far (here none) as the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_reset_in_the_middle_of_a_port_forward_is_named() {
    let (double, images) = engine_double().await;
    let (cluster, backend) = backend_on(&double, Duration::from_secs(20)).await;
    let pod = agent_pod(&backend, &images).await;
    let token = agent_token(&backend, &pod).await;
    double.state.faults().inject(
        Some("GET"),
        "/portforward",
        Fault::ResetAfter(Duration::from_secs(2)),
        1,
    );
    let error = backend
        .port_exchange(
            &pod,
            "agent",
            AGENT_PORT,
            &silent_call(&token, 6),
            Duration::from_secs(60),
        )
        .await
        .map(|a| String::from_utf8_lossy(&a).into_owned())
        .map_err(|e| kandev_harness::error_chain(&e))
        .unwrap_err();
    assert!(
        error.contains("port-forward") && error.contains("fix:"),
        "{error}"
    );
    fired(&double, 1);
    backend.delete_pod(&pod).await.unwrap();
    cluster.teardown().await;
}

/// A restarted kubelet answers exec and port-forward with its own plain-text 404 ("pod does
/// not exist") until it has read its Pods back (real Kind's kubelet-restart fault ended a run
/// so): both are asked again, a second apart, and come through once it serves. A kubelet that
/// never serves the Pod is named as the node's, with the fix, not as a missing Pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_restarted_kubelet_that_lacks_the_pod_is_waited_out_else_named() {
    let (double, images) = engine_double().await;
    let (cluster, backend) = backend_on(&double, Duration::from_secs(20)).await;
    let pod = agent_pod(&backend, &images).await;
    let faults = double.state.faults();
    faults.inject(Some("GET"), "/exec", Fault::KubeletLacksPod, 3);
    faults.inject(Some("GET"), "/portforward", Fault::KubeletLacksPod, 3);
    let served = backend.exec(&pod, shell("echo served")).await.unwrap();
    assert_eq!(served.stdout_text(), "served\n");
    let token = agent_token(&backend, &pod).await;
    assert!(!token.is_empty());
    fired(&double, 6);

    faults.inject(Some("GET"), "/exec", Fault::KubeletLacksPod, 1000);
    let error = backend
        .exec(&pod, shell("echo never"))
        .await
        .map(|o| o.stdout_text())
        .map_err(|e| kandev_harness::error_chain(&e))
        .unwrap_err();
    assert!(
        error.contains("the kubelet of the Pod's node") && error.contains("fix:"),
        "{error}"
    );
    backend.delete_pod(&pod).await.unwrap();
    cluster.teardown().await;
}

/// An API server 1.30+ takes a v5 exec to a node that does not take websockets itself
/// through its stream translator, which upgrades the client first and dials the kubelet
/// after: a kubelet that lacks the Pod, or one it cannot reach, is told on the status
/// channel, not as the upgrade's answer. Both are asked again, a second apart, and come
/// through once the kubelet serves; a kubelet that never does is named as the node's fault
/// (a platform fault: the check that met it judged nothing), not as the command's failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_kubelet_refusal_told_on_the_status_channel_is_waited_out_else_named() {
    let (double, images) = engine_double().await;
    let (cluster, backend) = backend_on(&double, Duration::from_secs(20)).await;
    let pod = agent_pod(&backend, &images).await;
    let faults = double.state.faults();
    let lacks = "unable to upgrade connection: pod does not exist";
    let unreachable =
        "error sending request: dial tcp 172.18.0.2:10250: connect: connection refused";
    faults.inject(
        Some("GET"),
        "/exec",
        Fault::TranslatedRefusal(lacks.into()),
        2,
    );
    faults.inject(
        Some("GET"),
        "/exec",
        Fault::TranslatedRefusal(unreachable.into()),
        2,
    );
    let served = backend
        .exec(
            &pod,
            ExecRequest {
                stdin: Some(b"fed once\n".to_vec()),
                ..shell("cat")
            },
        )
        .await
        .unwrap();
    assert_eq!(served.exit_code, Some(0));
    assert_eq!(served.stdout_text(), "fed once\n");
    fired(&double, 4);

    for (cause, named) in [
        (lacks, "the kubelet of the Pod's node kept answering"),
        (unreachable, "the exec never reached the container"),
    ] {
        faults.inject(
            Some("GET"),
            "/exec",
            Fault::TranslatedRefusal(cause.into()),
            1000,
        );
        let error = backend
            .exec(&pod, shell("echo never"))
            .await
            .map(|o| o.stdout_text())
            .map_err(anyhow::Error::new)
            .unwrap_err();
        assert!(
            kandev_harness::backend::is_platform_fault(&error),
            "{error:#}"
        );
        let chain = format!("{error:#}");
        assert!(chain.contains(named) && chain.contains("fix:"), "{chain}");
        faults.clear();
    }
    backend.delete_pod(&pod).await.unwrap();
    cluster.teardown().await;
}

/// An API server that stays unavailable (503 on every try) exhausts the client's answer
/// bound, retries included; the error says so and what to check, not "deadline has elapsed".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_that_stays_unavailable_is_named_when_the_answer_bound_runs_out() {
    let double = cluster_double::start(None).await.unwrap();
    let bounds = cluster::ClientBounds {
        answer: Duration::from_secs(2),
        ..Default::default()
    };
    let (client, _, _) =
        cluster::client_for_bounded(Some(&double.kubeconfig), Some(&double.context), bounds)
            .await
            .unwrap();
    double.state.faults().inject(
        Some("GET"),
        "/api/v1/namespaces",
        Fault::Status {
            code: 503,
            retry_after: None,
        },
        1000,
    );
    let error = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
        .map(|_| ())
        .map_err(|e| kandev_harness::error_chain(&e))
        .unwrap_err();
    assert!(
        error.contains("gave no answer within 2s") && error.contains("fix:"),
        "{error}"
    );
    assert!(double.state.faults().injected().len() > 1, "retried");
}
