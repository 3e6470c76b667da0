//! The `kind` and `kube` backends from the command line where no cluster can run (these
//! machines): bad input and an unreachable cluster fail fast, name the cause and the fix,
//! and create nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kandev_report::Report;
use std::time::{Duration, Instant};

fn kubeconfig(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    // Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: dead\n  cluster: {server: 'https://127.0.0.1:9'}\ncontexts:\n- name: dead\n  context: {cluster: dead, user: dead}\ncurrent-context: dead\nusers:\n- name: dead\n  user: {token: not-a-token}\n",
    )
    .unwrap();
    path
}

fn acceptance(args: &[&str]) -> (Option<i32>, String, Duration) {
    let started = Instant::now();
    let out = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        started.elapsed(),
    )
}

#[test]
fn an_unreachable_cluster_fails_fast_with_the_cause_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path());
    let reports = dir.path().join("reports");
    let (code, text, took) = acceptance(&[
        "run",
        "--backend",
        "kube",
        "--kubeconfig",
        config.to_str().unwrap(),
        "--context",
        "dead",
        "--worker-image",
        "registry.example/worker:1",
        "--daemon-image",
        "registry.example/dind:1",
        "--report",
        reports.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(3), "{text}");
    assert!(took < Duration::from_secs(60), "{took:?}");
    assert!(
        text.contains("the API server of context dead (https://127.0.0.1:9/) does not answer"),
        "{text}"
    );
    assert!(text.contains("nothing was created"), "{text}");
    assert!(
        !text.contains("ERROR kube_client"),
        "one message, not the client's log: {text}"
    );
    // The report says so: the cluster step errored, no scenario ran.
    let run = std::fs::read_dir(&reports)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let report: Report =
        serde_json::from_slice(&std::fs::read(run.join("report.json")).unwrap()).unwrap();
    assert_eq!(report.backend, "kube");
    assert!(report.scenarios.is_empty());
    let step = report.setup.iter().find(|s| s.name == "cluster").unwrap();
    assert!(
        step.error
            .as_deref()
            .unwrap_or_default()
            .contains("does not answer")
    );
    assert!(
        report.teardown.is_empty(),
        "nothing to tear down: nothing was created"
    );
}

#[test]
fn the_current_context_is_never_used_implicitly() {
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path());
    let (code, text, _) = acceptance(&[
        "run",
        "--backend",
        "kube",
        "--kubeconfig",
        config.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("needs --context"), "{text}");
    let (code, text, _) = acceptance(&[
        "gc",
        "--backend",
        "kube",
        "--kubeconfig",
        config.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("--run ID") && text.contains("--all"),
        "{text}"
    );
    let (code, text, _) = acceptance(&[
        "gc",
        "--backend",
        "kube",
        "--kubeconfig",
        config.to_str().unwrap(),
        "--all",
    ]);
    assert_eq!(code, Some(3), "{text}");
    assert!(text.contains("needs an explicit --context"), "{text}");
    assert!(
        text.contains("[\"dead\"]"),
        "the contexts there are listed: {text}"
    );
}

#[test]
fn a_remote_cluster_needs_images_it_can_pull() {
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path());
    let reports = dir.path().join("reports");
    let (code, text, _) = acceptance(&[
        "run",
        "--backend",
        "kube",
        "--kubeconfig",
        config.to_str().unwrap(),
        "--context",
        "dead",
        "--report",
        reports.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{text}");
    assert!(!reports.exists(), "refused before any run started");
    assert!(
        text.contains("pass --worker-image and --daemon-image"),
        "{text}"
    );
}

#[test]
fn kind_without_the_kind_binary_names_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let reports = dir.path().join("reports");
    let (code, text, _) = acceptance(&[
        "run",
        "--backend",
        "kind",
        "--kind-bin",
        "/nonexistent/kind",
        "--report",
        reports.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(3), "{text}");
    assert!(
        text.contains("the kind binary `/nonexistent/kind` cannot be run"),
        "{text}"
    );
    assert!(text.contains("install kind"), "{text}");
    assert!(
        text.contains(kandev_harness::backend::kube::kind::KIND_VERSION),
        "the pinned Kind release: {text}"
    );
}

#[test]
fn an_executor_role_file_that_is_no_role_with_rules_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path());
    let reports = dir.path().join("reports");
    let cluster_role = dir.path().join("cluster-role.yaml");
    std::fs::write(
        &cluster_role,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nrules: []\n",
    )
    .unwrap();
    let no_rules = dir.path().join("no-rules.yaml");
    std::fs::write(
        &no_rules,
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: x}\n",
    )
    .unwrap();
    for (file, problem) in [
        (&cluster_role, "is a ClusterRole"),
        (&no_rules, "has no rules"),
    ] {
        let file = file.to_str().unwrap();
        let (code, text, _) = acceptance(&[
            "run",
            "--backend",
            "kube",
            "--kubeconfig",
            config.to_str().unwrap(),
            "--context",
            "dead",
            "--worker-image",
            "registry.example/worker:1",
            "--daemon-image",
            "registry.example/dind:1",
            "--executor-role",
            file,
            "--report",
            reports.to_str().unwrap(),
        ]);
        // Refused before the cluster is reached (the dead one would be exit 3).
        assert_eq!(code, Some(2), "{text}");
        assert!(
            text.contains(&format!("the executor Role {file} {problem}"))
                && text.contains("fix: pass a file holding one rbac.authorization.k8s.io/v1 Role"),
            "{text}"
        );
        assert!(!reports.exists(), "refused before any run started");
    }
    // The local engine has no RBAC to bind it in; --in-cluster binds none.
    let (code, text, _) = acceptance(&[
        "run",
        "--executor-role",
        no_rules.to_str().unwrap(),
        "--report",
        reports.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("use --backend kind or kube"), "{text}");
    let (code, text, _) = acceptance(&[
        "run",
        "--backend",
        "kube",
        "--in-cluster",
        "--executor-role",
        no_rules.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("cannot be used with"), "{text}");
}

/// With `HTTPS_PROXY` set, as on many corporate workstations, a cluster on loopback (Kind's
/// API server, here the cluster double) is reached directly, as kubectl reaches it (Go never
/// proxies loopback). Before, kube was built without proxy support and every client failed
/// with ProxyProtocolDisabled; and kube-rs alone would send loopback through the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_cluster_is_reached_directly_whatever_https_proxy_says() {
    let double = kandev_test_support::cluster_double::start(None)
        .await
        .unwrap();
    let proxy = kandev_test_support::connect_proxy::start().await;
    let out = tokio::process::Command::from(kandev_test_support::harness_env::harness(env!(
        "CARGO_BIN_EXE_kandev-acceptance"
    )))
    .args([
        "gc",
        "--backend",
        "kube",
        "--all",
        "--dry-run",
        "--kubeconfig",
    ])
    .arg(&double.kubeconfig)
    .args(["--context", &double.context])
    .env("HTTPS_PROXY", &proxy.url)
    .env_remove("NO_PROXY")
    .env_remove("no_proxy")
    .output()
    .await
    .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(proxy.targets().is_empty(), "{:?}", proxy.targets());
    // The proxy works: a client that uses it is seen there (a positive control).
    let dir = tempfile::tempdir().unwrap();
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&double.kubeconfig).unwrap()).unwrap();
    config["clusters"][0]["cluster"]["proxy-url"] = serde_json::json!(proxy.url);
    let through = dir.path().join("kubeconfig");
    std::fs::write(&through, serde_json::to_vec(&config).unwrap()).unwrap();
    let out = tokio::process::Command::from(kandev_test_support::harness_env::harness(env!(
        "CARGO_BIN_EXE_kandev-acceptance"
    )))
    .args([
        "gc",
        "--backend",
        "kube",
        "--all",
        "--dry-run",
        "--kubeconfig",
    ])
    .arg(&through)
    .args(["--context", &double.context])
    .output()
    .await
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // Seen there, and only for the double (the client may open more than one connection).
    let server = double.server.trim_start_matches("https://").to_owned();
    let targets = proxy.targets();
    assert!(
        !targets.is_empty() && targets.iter().all(|t| *t == server),
        "{targets:?}"
    );
}

/// `NO_PROXY` with an empty entry (`a,,b` or a trailing comma, as shells and `.env` files
/// leave it) is read as kubectl reads it, skipping the entry; kube-rs alone refused it
/// ("comma-separated value is empty") whenever a proxy was set, and every client failed.
/// An entry the client cannot read at all is named, with the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_proxy_with_an_empty_entry_is_read_as_kubectl_reads_it() {
    let double = kandev_test_support::cluster_double::start(None)
        .await
        .unwrap();
    let proxy = kandev_test_support::connect_proxy::start().await;
    let gc = |no_proxy: &str| {
        tokio::process::Command::from(kandev_test_support::harness_env::harness(env!(
            "CARGO_BIN_EXE_kandev-acceptance"
        )))
        .args([
            "gc",
            "--backend",
            "kube",
            "--all",
            "--dry-run",
            "--kubeconfig",
        ])
        .arg(&double.kubeconfig)
        .args(["--context", &double.context])
        .env("HTTPS_PROXY", &proxy.url)
        .env("NO_PROXY", no_proxy)
        .env_remove("no_proxy")
        .output()
    };
    let out = gc("example.invalid,,10.0.0.0/8,").await.unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains("NO_PROXY"), "{text}");
    assert!(proxy.targets().is_empty(), "{:?}", proxy.targets());
    let out = gc("example.invalid,exa mple.com").await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("NO_PROXY (or no_proxy) has an entry the Kubernetes client cannot read")
            && stderr.contains("exa mple.com")
            && stderr.contains("fix: correct or remove that entry"),
        "{stderr}"
    );
}

/// `launch` runs on kube only: it needs no `--backend` (it reaches the cluster, which here
/// does not answer: exit 3 with the cause), and refuses another backend, naming the fix.
#[test]
fn launch_needs_no_backend() {
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path());
    let reports = dir.path().join("reports");
    let launch = |backend: &[&str]| {
        let mut args = vec![
            "launch",
            "--harness-image",
            "registry.example/harness:1",
            "--kubeconfig",
            config.to_str().unwrap(),
            "--context",
            "dead",
            "--worker-image",
            "registry.example/worker:1",
            "--daemon-image",
            "registry.example/dind:1",
            "--report",
            reports.to_str().unwrap(),
        ];
        args.extend_from_slice(backend);
        acceptance(&args)
    };
    let (code, text, _) = launch(&[]);
    assert_eq!(code, Some(3), "{text}");
    assert!(text.contains("does not answer"), "{text}");
    let (code, text, _) = launch(&["--backend", "local"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("drop --backend"), "{text}");
}
