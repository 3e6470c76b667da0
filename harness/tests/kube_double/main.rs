//! The `kube` backend against the wire-level cluster double (`kandev_test_support::cluster_double`):
//! an API server over HTTPS that the harness reaches only through a kubeconfig, as it reaches
//! a real cluster. The cluster is opened and set up as `--backend kube` does it
//! (`cluster::open` + `Cluster::set_up`: namespace, ServiceAccount, Role, RoleBinding, a
//! TokenRequest), so every session call uses the executor's real token and RBAC.
//!
//! Without a runtime (no engine needed): a Pod mutated by an admission hook is rolled back by
//! its exact UID (the executor refused what Kandev's Role does not grant is the real API
//! server's: `real_api_server/executor.rs`; the double's own tests are beside it,
//! `harness/test-support/tests/cluster_double.rs`). With Pods on
//! the local engine (`#[ignore]`d: `bash harness/scripts/ensure-engine.sh`, then
//! `cargo test --workspace -- --include-ignored`): exec over websockets answering after more
//! than 60 s, exec with a large stdin and stdout, exec output streamed while the command runs,
//! a port-forward HTTP exchange, and a port-forward carrying 64 MiB each way (SHA-256 checked
//! on both ends).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The connection's faults, in one binary with these: their tests mostly wait (on a Pod, a
// bound, an idle cut), and libtest runs the tests of one binary side by side.
mod connection;

use k8s_openapi::api::core::v1::Pod;
use kandev_harness::backend::kube::KubeBackend;
use kandev_harness::backend::kube::cluster::{self, Cluster};
use kandev_harness::backend::{Backend, ExecRequest, PodRef};
use kandev_harness::host::images::ImageSet;
use kandev_harness::pod::identity::{SessionIdentity, random_hex};
use kandev_harness::pod::template::WorkspaceMode;
use kandev_test_support::cluster_double::{self, KubeDouble};
use kandev_test_support::engine::engine_double;
use kandev_test_support::on_double::{
    admin_client, create_namespace, session_backend, set_up_sessions, typed,
};
use kandev_test_support::pod::{TaskPod, task_pod};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn pod(name: &str, spec: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {
            "acceptance.kandev.ai/managed": "true", "acceptance.kandev.ai/run": "kube-double-test"}},
        "spec": spec,
    }))
    .unwrap()
}

/// What the harness asked of the double: JSON bodies (the double answers YAML, protobuf and
/// every patch type but JSON merge patch 415), JSON accepted, and no watch (Kandev's executor
/// Role grants watch for Kandev's own use; the harness polls).
fn assert_the_harness_asked_plain_json(double: &KubeDouble) {
    let requests = double.state.requests();
    assert!(!requests.is_empty());
    for r in &requests {
        let what = format!(
            "{} {} ({:?}, accepting {:?})",
            r.method, r.uri, r.content_type, r.accept
        );
        assert!(!r.watch, "the harness watched: {what}");
        if let Some(sent) = &r.content_type {
            assert!(sent.starts_with("application/json"), "{what}");
        }
        if let Some(accept) = &r.accept {
            assert!(
                accept.contains("application/json") || accept.contains("*/*"),
                "{what}"
            );
            assert!(!accept.contains("protobuf"), "{what}");
        }
    }
}

/// A Pod composed from the default template as a session composes it (main container
/// `kandev-agent`), in `namespace`.
fn composed(namespace: &str, session: &str) -> Pod {
    let identity = SessionIdentity::new("20261130t000000-abcdef", session, 1);
    task_pod(TaskPod::new(namespace, &identity)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_mutated_by_admission_is_rolled_back_by_its_exact_uid() {
    let double = cluster_double::start(None).await.unwrap();
    let (cluster, _) = set_up_sessions(&double, "double").await;
    let ns = cluster.namespace.clone();
    let backend = session_backend(&cluster, "kandev-agent");

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
    assert_the_harness_asked_plain_json(&double);
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
    let (cluster, backend) = set_up_sessions(&double, "double").await;
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
    let (cluster, backend) = set_up_sessions(&double, "double").await;
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
    let (cluster, backend) = set_up_sessions(&double, "double").await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn an_exec_over_the_doubles_websocket_streams_output_while_the_command_runs() {
    use kube::api::AttachParams;
    use tokio::io::AsyncReadExt;
    let (double, images) = engine_double().await;
    let (cluster, backend) = set_up_sessions(&double, "double").await;
    let pod = running_pod(&backend, &images).await;
    // The executor's own exec (kube-rs over the double's websocket): one line, a wait for a
    // gate file the test creates once it holds that line, another line, and a marker file
    // written as the command's last act.
    let marker = format!("/tmp/ended-{}", random_hex(4));
    let gate = format!("/tmp/gate-{}", random_hex(4));
    let script =
        format!("echo first; until [ -e {gate} ]; do sleep 0.1; done; echo second; touch {marker}");
    let pods = Api::<Pod>::namespaced(cluster.session.clone(), &cluster.namespace);
    let params = AttachParams::default()
        .container("work")
        .stdin(false)
        .stdout(true)
        .stderr(false);
    let started = Instant::now();
    let mut attached = pods
        .exec(&pod.name, ["sh", "-c", script.as_str()], &params)
        .await
        .unwrap();
    let mut stdout = attached.stdout().unwrap();
    let status = attached.take_status().unwrap();
    let mut seen = Vec::new();
    let mut buffer = [0u8; 1024];
    // A double that sends output only when the command ends never sends it: the command waits
    // for the gate.
    tokio::time::timeout(Duration::from_secs(60), async {
        while !seen.ends_with(b"\n") {
            let n = stdout.read(&mut buffer).await.unwrap();
            assert!(n > 0, "stdout ended before the first line: {seen:?}");
            seen.extend_from_slice(&buffer[..n]);
        }
    })
    .await
    .expect("the first line, while the command runs, within 60 s");
    let first_line = started.elapsed();
    assert_eq!(seen, b"first\n");
    // The first line is in the client's hands while the command still runs: its end marker is
    // not there yet (a double that sends output when the command ends fails here).
    let running = backend
        .exec(&pod, exec(&["test", "!", "-e", &marker], None))
        .await
        .unwrap();
    assert_eq!(
        running.exit_code,
        Some(0),
        "the first line arrived only once the command had ended"
    );
    let opened = backend
        .exec(&pod, exec(&["touch", &gate], None))
        .await
        .unwrap();
    assert_eq!(opened.exit_code, Some(0), "the gate file is created");
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).await.unwrap();
    let status = status.await.expect("an exit status");
    let exit_status = started.elapsed();
    assert_eq!(rest, b"second\n");
    assert_eq!(status.status.as_deref(), Some("Success"), "{status:?}");
    let ended = backend
        .exec(&pod, exec(&["test", "-e", &marker], None))
        .await
        .unwrap();
    assert_eq!(ended.exit_code, Some(0), "the command wrote its end marker");
    assert!(first_line < exit_status);
    eprintln!("streamed exec: first line after {first_line:?}, exit status after {exit_status:?}");
    attached.join().await.unwrap();
    backend.delete_pod(&pod).await.unwrap();
    cluster.teardown().await;
}

/// A TCP server on 127.0.0.1:`argv[1]` (Python, in the worker image). Per connection: a
/// length line, then that many bytes, whose count and SHA-256 it logs and answers with (a
/// line), and then it sends the same bytes back and closes. One direction at a time: kube-rs
/// 5's port-forwarder relays both directions in one loop, so a client writing and reading a
/// large echo at once stalls once the buffers on the way are full (against any server).
const DIGEST_SERVER: &str = r#"
import hashlib, socket, sys
server = socket.create_server(("127.0.0.1", int(sys.argv[1])))
print("listening", flush=True)
while True:
    conn, _ = server.accept()
    with conn, conn.makefile("rb") as reader:
        data = reader.read(int(reader.readline()))
        digest = hashlib.sha256(data).hexdigest()
        print("received", len(data), digest, flush=True)
        conn.sendall(digest.encode() + b"\n")
        conn.sendall(data)
"#;

/// `size` bytes of a fixed pseudo-random sequence, `chunk` at a time.
fn pseudo_random_chunks(size: usize, chunk: usize) -> impl Iterator<Item = Vec<u8>> {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    (0..size.div_ceil(chunk)).map(move |i| {
        let len = chunk.min(size - i * chunk);
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_port_forward_over_the_doubles_websocket_carries_64_mib_each_way() {
    use sha2::Digest;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const SIZE: usize = 64 << 20;
    const PORT: u16 = 39431;
    let (double, images) = engine_double().await;
    let (cluster, backend) = set_up_sessions(&double, "double").await;
    let name = format!("double-{}", random_hex(4));
    let pod = backend
        .create_helper_pod(&pod(
            &name,
            json!({"containers": [
                {"name": "echo", "image": images.worker,
                 "command": ["python3", "-c", DIGEST_SERVER, PORT.to_string()],
                 "ports": [{"containerPort": PORT}]},
            ]}),
        ))
        .await
        .unwrap();
    backend
        .wait_running(&pod, "echo", Duration::from_secs(120))
        .await
        .unwrap();
    let listening = async {
        while !backend
            .logs(&pod, "echo")
            .await
            .unwrap()
            .contains("listening")
        {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(60), listening)
        .await
        .expect("the echo server listens");

    // The executor's own port-forward (kube-rs over the double's websocket): 64 MiB to the
    // Pod, its digest back, then the same 64 MiB back.
    let pods = Api::<Pod>::namespaced(cluster.session.clone(), &cluster.namespace);
    let mut forwarder = pods.portforward(&pod.name, &[PORT]).await.unwrap();
    let mut stream = forwarder.take_stream(PORT).unwrap();
    let transfer = async {
        let started = Instant::now();
        let mut digest = sha2::Sha256::new();
        stream
            .write_all(format!("{SIZE}\n").as_bytes())
            .await
            .unwrap();
        for chunk in pseudo_random_chunks(SIZE, 1 << 20) {
            digest.update(&chunk);
            stream.write_all(&chunk).await.unwrap();
        }
        let sent = hex::encode(digest.finalize());
        let mut line = vec![0u8; 65];
        stream.read_exact(&mut line).await.unwrap();
        let uploaded = started.elapsed();
        let (mut digest, mut size) = (sha2::Sha256::new(), 0usize);
        let mut buffer = vec![0u8; 1 << 16];
        loop {
            let n = stream.read(&mut buffer).await.unwrap();
            if n == 0 {
                break;
            }
            digest.update(&buffer[..n]);
            size += n;
        }
        let downloaded = started.elapsed() - uploaded;
        let line = String::from_utf8_lossy(&line).trim().to_owned();
        (
            sent,
            line,
            size,
            hex::encode(digest.finalize()),
            uploaded,
            downloaded,
        )
    };
    let (sent, answered, received, returned, uploaded, downloaded) =
        tokio::time::timeout(Duration::from_secs(600), transfer)
            .await
            .expect("64 MiB each way within 10 minutes");
    assert_eq!(answered, sent, "the server's digest of what it received");
    assert_eq!(
        received, SIZE,
        "the bytes sent back, until the Pod side closed"
    );
    assert_eq!(returned, sent, "the bytes sent back differ from those sent");
    // The Pod side closed, so the double closed the socket (the read above ended), and the
    // forwarder ends. (kube-rs 5 then still sends its own close and reports that it could
    // not: `SendAfterClosing`, as it would against a kubelet, which also closes first.)
    drop(stream);
    let joined = tokio::time::timeout(Duration::from_secs(60), forwarder.join())
        .await
        .expect("the forwarder ends once the double has closed the port-forward");
    if let Err(e) = joined {
        assert!(format!("{e:?}").contains("SendAfterClosing"), "{e:?}");
    }
    let logs = backend.logs(&pod, "echo").await.unwrap();
    assert!(logs.contains(&format!("received {SIZE} {sent}")), "{logs}");
    eprintln!(
        "port-forward: 64 MiB to the Pod in {uploaded:?}, the same 64 MiB back in {downloaded:?} (sha256 {sent})"
    );

    // A port nothing listens on: the error channel says so.
    let mut refused = pods.portforward(&pod.name, &[PORT + 1]).await.unwrap();
    let error = refused.take_error(PORT + 1).unwrap();
    let message = tokio::time::timeout(Duration::from_secs(60), error)
        .await
        .expect("an error on the port's error channel")
        .unwrap_or_default();
    assert!(
        message.contains(&format!("error forwarding port {}", PORT + 1))
            && message.contains("refused"),
        "{message}"
    );
    refused.abort();
    backend.delete_pod(&pod).await.unwrap();
    cluster.teardown().await;
}

/// In an operator's namespace (`--namespace`) the runs' objects are swept one by one: those
/// of a run whose Lease expired go (its Lease with them), those of a live run stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_in_an_operators_namespace_spares_a_live_runs_objects() {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    let double = cluster_double::start(None).await.unwrap();
    let admin = admin_client(&double).await;
    let ns = "operators";
    create_namespace(&admin, ns).await;
    let reached = cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap();
    let live = Cluster::set_up(reached, None, Some(ns), WorkspaceMode::EmptyDir, "live-run")
        .await
        .unwrap();
    // A killed run's leftovers: its executor account and its expired Lease.
    let labels =
        json!({"acceptance.kandev.ai/managed": "true", "acceptance.kandev.ai/run": "dead-run"});
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "dead-run-account", "labels": labels}})),
        )
        .await
        .unwrap();
    let old =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(3600);
    Api::<Lease>::namespaced(admin.clone(), ns)
        .create(
            &PostParams::default(),
            &typed(
                json!({"metadata": {"name": "kandev-acceptance-run-dead-run", "labels": labels},
                "spec": {"leaseDurationSeconds": 60,
                    "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(old)}}),
            ),
        )
        .await
        .unwrap();
    // Pull-secret copies in the namespace (`pull_secrets::copy_name`: NAME-<digest>): the
    // killed run's goes with it, the live run's stays.
    for (name, run) in [("regcred-dead", "dead-run"), ("regcred-live", "live-run")] {
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(admin.clone(), ns)
            .create(
                &PostParams::default(),
                &typed(json!({"metadata": {"name": name, "labels":
                    {"acceptance.kandev.ai/managed": "true", "acceptance.kandev.ai/run": run}},
                    "type": "kubernetes.io/dockerconfigjson",
                    "data": {".dockerconfigjson": "e30="}})),
            )
            .await
            .unwrap();
    }
    // Another run's namespace (made without --namespace): not this sweep's to list or remove.
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "kandev-acceptance-other-run", "labels":
                {"acceptance.kandev.ai/managed": "true", "acceptance.kandev.ai/run": "other-run"}}})),
        )
        .await
        .unwrap();
    let outcome = cluster::gc(
        &admin,
        &cluster::GcScope {
            namespace: Some(ns),
            run: None,
            dry_run: false,
            force: false,
        },
    )
    .await
    .unwrap();
    let mut removed = outcome.removed.clone();
    removed.sort();
    assert_eq!(
        removed,
        vec![
            "lease/kandev-acceptance-run-dead-run".to_owned(),
            "secret/regcred-dead".to_owned(),
            "serviceaccount/dead-run-account".to_owned(),
        ]
    );
    assert_eq!(outcome.spared.len(), 1, "{:?}", outcome.spared);
    assert_eq!(outcome.spared[0].run, "live-run");
    // gc --namespace lists no namespaces (a namespace-bound identity may not): the other
    // run's namespace is neither removed nor listed.
    assert!(
        double
            .state
            .objects("namespaces")
            .iter()
            .any(|n| n["metadata"]["name"] == "kandev-acceptance-other-run")
    );
    assert!(
        !double
            .state
            .requests()
            .iter()
            .any(|r| r.method == "GET" && r.uri.starts_with("/api/v1/namespaces?")),
        "gc --namespace listed namespaces cluster-wide"
    );
    // The live run's executor objects and Lease are all still there.
    for (resource, name) in [
        ("serviceaccounts", "kandev-acceptance-executor"),
        ("roles", "kandev-acceptance-executor"),
        ("leases", "kandev-acceptance-run-live-run"),
        ("secrets", "regcred-live"),
    ] {
        assert!(
            double.state.object(resource, ns, name).is_some(),
            "{resource}/{name} of the live run was removed"
        );
    }
    live.teardown().await;
}

/// Two runs cannot share one `--namespace` at once: the executor's objects have one name
/// there. The second is refused naming the first run and the fix, and removes nothing of the
/// first's: its teardown deletes only what its own creates returned, by UID (it once deleted
/// the live run's binding, Role and account by name).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_in_a_live_runs_namespace_is_refused_and_removes_nothing_of_it() {
    let double = cluster_double::start(None).await.unwrap();
    let admin = admin_client(&double).await;
    let ns = "operators";
    create_namespace(&admin, ns).await;
    let reach = || cluster::open(Some(&double.kubeconfig), Some(&double.context));
    let first = Cluster::set_up(
        reach().await.unwrap(),
        None,
        Some(ns),
        WorkspaceMode::EmptyDir,
        "first-run",
    )
    .await
    .unwrap();
    let executor = ["serviceaccounts", "roles", "rolebindings"];
    let uids = |double: &KubeDouble| {
        executor.map(|resource| {
            double
                .state
                .object(resource, ns, "kandev-acceptance-executor")
                .map(|o| o["metadata"]["uid"].clone())
        })
    };
    let before = uids(&double);
    assert!(before.iter().all(Option::is_some), "{before:?}");
    let error = Cluster::set_up(
        reach().await.unwrap(),
        None,
        Some(ns),
        WorkspaceMode::EmptyDir,
        "second-run",
    )
    .await
    .map(|_| ())
    .map_err(|e| kandev_harness::error_chain(&e))
    .unwrap_err();
    assert!(
        error.contains("run first-run's")
            && error.contains("--namespace of its own")
            && error.contains("gc --namespace operators --run first-run"),
        "{error}"
    );
    assert_eq!(
        uids(&double),
        before,
        "the first run's executor objects were touched"
    );
    assert!(
        double
            .state
            .object("leases", ns, "kandev-acceptance-run-second-run")
            .is_none(),
        "the refused run left its Lease"
    );
    // The first run's teardown still removes its own, by the UIDs its creates returned.
    first.teardown().await;
    assert_eq!(uids(&double), [None, None, None]);
}
