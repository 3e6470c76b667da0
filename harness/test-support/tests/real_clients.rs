//! The cluster double refereed by two clients its authors did not write: `kubectl` (v1.32 on
//! these machines) and the official Kubernetes Python client (Debian's python3-kubernetes),
//! each driven through an operator's session against a running double, through the
//! kubeconfig it writes and nothing else. Where they disagree with the double, the double is
//! wrong (issue 26).
//!
//! Without the engine (Pods are stored and stay Pending): discovery, namespaces,
//! ServiceAccounts, Roles and RoleBindings through kubectl's typed commands (protobuf bodies)
//! and `kubectl apply -f` (JSON, strategic merge patches), a claim through `apply -f` (stored
//! `Pending`, listed, deleted with `--wait`), `auth can-i` as the admin and as
//! an executor token from `kubectl create token`, `auth whoami`, `get -w` events, content
//! negotiation (406, 415), and the same session through the Python client. With Pods on
//! the engine (`#[ignore]`d): `kubectl exec`, `kubectl logs`, `kubectl delete --wait`,
//! `kubectl port-forward` (SPDY tunnelled through a websocket, and the plain SPDY fallback),
//! and `kubectl apply -f` of a harness-composed task Pod with its workspace claim.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kandev_harness::backend::kube::cluster::{self, executor_role};
use kandev_harness::pod::template::WorkspaceMode;
use kandev_test_support::cluster_double::{self, KubeDouble};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// kubectl against the double: its kubeconfig and context, a discovery cache of its own.
struct Kubectl {
    kubeconfig: PathBuf,
    context: String,
    cache: tempfile::TempDir,
}

impl Kubectl {
    fn new(double: &KubeDouble) -> Self {
        Self {
            kubeconfig: double.kubeconfig.clone(),
            context: double.context.clone(),
            cache: tempfile::tempdir().unwrap(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("kubectl");
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(["--context", &self.context, "--cache-dir"])
            .arg(self.cache.path())
            .args(args);
        command
    }

    fn output(&self, args: &[&str]) -> Output {
        self.command(args)
            .output()
            .unwrap_or_else(|e| panic!("run kubectl: {e} (these machines have kubectl v1.32)"))
    }

    /// Its stdout; panics with stderr unless it succeeded.
    fn run(&self, args: &[&str]) -> String {
        let out = self.output(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "kubectl {}: {stderr}", args.join(" "));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Its stderr; panics unless it failed.
    fn fails(&self, args: &[&str]) -> String {
        let out = self.output(args);
        assert!(
            !out.status.success(),
            "kubectl {} succeeded: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }
}

fn lines(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect()
}

/// A multi-document YAML manifest of `objects`, as an operator writes one.
fn manifest(folder: &Path, name: &str, objects: &[Value]) -> String {
    let path = folder.join(name);
    let text: Vec<String> = objects
        .iter()
        .map(|o| serde_yaml::to_string(o).unwrap())
        .collect();
    std::fs::write(&path, text.join("\n---\n")).unwrap();
    path.display().to_string()
}

/// The harness's executor objects in `ns` (what `Cluster::set_up` creates), as manifests.
fn executor_objects(ns: &str) -> Vec<Value> {
    let labels = cluster::run_labels("real-clients");
    let role = serde_json::to_value(executor_role(ns, WorkspaceMode::ManagedPvc, &labels)).unwrap();
    vec![
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": cluster::EXECUTOR, "namespace": ns, "labels": labels}}),
        role,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": cluster::EXECUTOR, "namespace": ns, "labels": labels},
            "subjects": [{"kind": "ServiceAccount", "name": cluster::EXECUTOR, "namespace": ns}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": cluster::EXECUTOR}}),
    ]
}

fn wait_gone(kubectl: &Kubectl, args: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = kubectl.output(args);
        if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NotFound") {
            return;
        }
        assert!(Instant::now() < deadline, "still there: {args:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drives_an_operators_session_on_the_double() {
    let double = cluster_double::start(None).await.unwrap();
    let folder = tempfile::tempdir().unwrap();
    let folder_path = folder.path().to_owned();
    let kubectl = Kubectl::new(&double);
    let state = double.state.clone();
    tokio::task::spawn_blocking(move || {
        let k = &kubectl;
        // Discovery: the server's version, the resources with kubectl's short names.
        let version: Value = serde_json::from_str(&k.run(&["version", "-o", "json"])).unwrap();
        assert_eq!(version["serverVersion"]["gitVersion"], "v1.36.0-kube-double");
        let resources = k.run(&["api-resources", "-o", "wide"]);
        for (name, short) in [
            ("namespaces", "ns"),
            ("serviceaccounts", "sa"),
            ("pods", "po"),
            ("persistentvolumeclaims", "pvc"),
        ] {
            assert!(
                resources
                    .lines()
                    .any(|l| l.starts_with(name) && l.split_whitespace().nth(1) == Some(short)),
                "{name} ({short}) in\n{resources}"
            );
        }
        assert!(resources.contains("rbac.authorization.k8s.io/v1"), "{resources}");
        assert!(resources.contains("selfsubjectaccessreviews"), "{resources}");

        // Namespaces (`create ns` is a typed command: a protobuf body).
        assert_eq!(
            lines(&k.run(&["get", "ns", "-o", "name"])),
            ["namespace/default", "namespace/kube-system"]
        );
        assert_eq!(lines(&k.run(&["create", "ns", "op"])), ["namespace/op created"]);
        assert_eq!(
            lines(&k.run(&["-n", "op", "get", "sa", "-o", "name"])),
            ["serviceaccount/default"]
        );

        // Typed creates of a ServiceAccount, Role and RoleBinding, read back and deleted.
        k.run(&["-n", "op", "create", "sa", "typed"]);
        k.run(&[
            "-n", "op", "create", "role", "typed", "--verb=get,watch", "--resource=pods,pods/log",
        ]);
        k.run(&[
            "-n", "op", "create", "rolebinding", "typed", "--role=typed", "--serviceaccount=op:typed",
        ]);
        let role: Value =
            serde_json::from_str(&k.run(&["-n", "op", "get", "role", "typed", "-o", "json"])).unwrap();
        assert_eq!(
            role["rules"],
            json!([{"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get", "watch"]}])
        );
        let binding: Value = serde_json::from_str(&k.run(&[
            "-n", "op", "get", "rolebinding", "typed", "-o", "json",
        ]))
        .unwrap();
        assert_eq!(
            binding["subjects"],
            json!([{"kind": "ServiceAccount", "name": "typed", "namespace": "op"}])
        );
        assert_eq!(binding["roleRef"]["name"], "typed");
        assert_eq!(
            lines(&k.run(&["-n", "op", "delete", "rolebinding/typed", "role/typed", "sa/typed"])).len(),
            3
        );
        k.fails(&["-n", "op", "get", "sa", "typed"]);

        // `kubectl apply -f` of the harness's executor objects: created, unchanged, then a
        // changed Role configured (a strategic merge patch).
        let mut objects = executor_objects("op");
        let file = manifest(&folder_path, "executor.yaml", &objects);
        let applied = k.run(&["apply", "-f", &file]);
        assert_eq!(lines(&applied).len(), 3, "{applied}");
        assert!(lines(&applied).iter().all(|l| l.ends_with(" created")), "{applied}");
        let again = k.run(&["apply", "-f", &file]);
        assert!(lines(&again).iter().all(|l| l.ends_with(" unchanged")), "{again}");
        objects[1]["rules"][0]["verbs"] = json!(["get", "create", "delete", "watch", "list"]);
        let file = manifest(&folder_path, "executor.yaml", &objects);
        let changed = k.run(&["apply", "-f", &file]);
        assert!(
            changed.contains(&format!("role.rbac.authorization.k8s.io/{} configured", cluster::EXECUTOR)),
            "{changed}"
        );
        let rules = k.run(&["-n", "op", "get", "role", cluster::EXECUTOR, "-o", "jsonpath={.rules[0].verbs}"]);
        assert_eq!(rules, r#"["get","create","delete","watch","list"]"#);
        objects[1]["rules"][0]["verbs"] = json!(["get", "create", "delete", "watch"]);
        let file = manifest(&folder_path, "executor.yaml", &objects);
        k.run(&["apply", "-f", &file]);
        // Server-side apply is not served: refused with 415, in kubectl's own words.
        let refused = k.fails(&["apply", "--server-side", "-f", &file]);
        assert!(refused.contains("UnsupportedMediaType") || refused.contains("unknown format"), "{refused}");

        // auth can-i as the admin and as the executor's token (a TokenRequest).
        assert_eq!(k.run(&["-n", "op", "auth", "can-i", "create", "pods"]).trim(), "yes");
        let whoami: Value = serde_json::from_str(&k.run(&["auth", "whoami", "-o", "json"])).unwrap();
        assert_eq!(whoami["status"]["userInfo"]["username"], "kube-double-admin");
        let token = k.run(&["-n", "op", "create", "token", cluster::EXECUTOR]);
        let token = token.trim();
        assert!(!token.is_empty());
        let as_executor = |args: &[&str]| -> Output {
            let mut all = vec!["--token", token, "-n", "op"];
            all.extend_from_slice(args);
            k.output(&all)
        };
        let yes = as_executor(&["auth", "can-i", "create", "pods"]);
        assert_eq!(String::from_utf8_lossy(&yes.stdout).trim(), "yes");
        for (verb, resource) in [("list", "pods"), ("get", "secrets"), ("patch", "pods")] {
            let no = as_executor(&["auth", "can-i", verb, resource]);
            assert_eq!(String::from_utf8_lossy(&no.stdout).trim(), "no", "{verb} {resource}");
            assert!(!no.status.success());
        }
        let listed = as_executor(&["get", "pods"]);
        let stderr = String::from_utf8_lossy(&listed.stderr);
        assert!(!listed.status.success());
        assert!(
            stderr.contains("Forbidden")
                && stderr.contains(&format!("system:serviceaccount:op:{}", cluster::EXECUTOR)),
            "{stderr}"
        );
        let whoami = as_executor(&["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"]);
        assert_eq!(
            String::from_utf8_lossy(&whoami.stdout),
            format!("system:serviceaccount:op:{}", cluster::EXECUTOR)
        );

        // A watch: `get pods -w` (a list, then a watch from its resourceVersion) sees a Pod
        // added, changed and deleted. The Pod is applied once the watch request has reached
        // the double (a Pod applied before the list would be in it, and not an event).
        let mut watching = k
            .command(&[
                "-n", "op", "get", "pods", "--watch-only", "--output-watch-events",
                "-o", "json", "--request-timeout=60s",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while !state.requests().iter().any(|r| r.watch && r.uri.contains("/namespaces/op/pods")) {
            assert!(Instant::now() < deadline, "kubectl's watch never reached the double");
            std::thread::sleep(Duration::from_millis(50));
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "watched", "namespace": "op"},
            "spec": {"containers": [{"name": "main", "image": "debian:bookworm"}]}});
        let file = manifest(&folder_path, "pod.yaml", &[pod]);
        k.run(&["apply", "-f", &file]);
        k.run(&["-n", "op", "label", "pod", "watched", "step=two"]);
        // No runtime: the Pod is gone at once, and --wait (a watch on it) returns.
        k.run(&["-n", "op", "delete", "pod", "watched", "--wait", "--timeout=20s"]);
        // Events until the deletion (or the watch's 60 s request timeout), then it is stopped.
        let mut events: Vec<String> = Vec::new();
        let stream = watching.stdout.take().unwrap();
        for event in serde_json::Deserializer::from_reader(stream).into_iter::<Value>() {
            let e = event.unwrap();
            events.push(format!("{} {}", e["type"].as_str().unwrap(), e["object"]["metadata"]["name"].as_str().unwrap()));
            if e["type"] == "DELETED" {
                break;
            }
        }
        let _ = watching.kill();
        let watched = watching.wait_with_output().unwrap();
        assert_eq!(
            events,
            // The second MODIFIED: the deletion's own change (deletionTimestamp set,
            // generation bumped) before DELETED, as kube-apiserver v1.37 sends it
            // (real_api_server's corpus compares the two).
            [
                "ADDED watched",
                "MODIFIED watched",
                "MODIFIED watched",
                "DELETED watched"
            ],
            "{}",
            String::from_utf8_lossy(&watched.stderr)
        );

        // A claim through `apply -f`: created Pending (no storage class, no runtime to
        // provision it: nothing binds it), listed, deleted with --wait, then NotFound.
        let claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "op-claim", "namespace": "op"},
            "spec": {"accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}});
        let file = manifest(&folder_path, "claim.yaml", &[claim]);
        assert_eq!(
            lines(&k.run(&["-n", "op", "apply", "-f", &file])),
            ["persistentvolumeclaim/op-claim created"]
        );
        let stored: Value =
            serde_json::from_str(&k.run(&["-n", "op", "get", "pvc", "op-claim", "-o", "json"])).unwrap();
        assert_eq!(stored["kind"], "PersistentVolumeClaim");
        assert_eq!(stored["metadata"]["name"], "op-claim");
        assert_eq!(stored["spec"]["accessModes"], json!(["ReadWriteOnce"]));
        assert_eq!(stored["spec"]["resources"]["requests"]["storage"], "1Gi");
        assert_eq!(stored["spec"]["volumeMode"], "Filesystem");
        assert_eq!(stored["status"], json!({"phase": "Pending"}));
        let listed = k.run(&["-n", "op", "get", "pvc"]);
        assert!(lines(&listed).iter().any(|l| l.starts_with("op-claim ")), "{listed}");
        assert_eq!(
            lines(&k.run(&["-n", "op", "get", "pvc", "-o", "name"])),
            ["persistentvolumeclaim/op-claim"]
        );
        assert_eq!(
            lines(&k.run(&["-n", "op", "delete", "pvc", "op-claim", "--wait", "--timeout=20s"])),
            [r#"persistentvolumeclaim "op-claim" deleted"#]
        );
        let gone = k.fails(&["-n", "op", "get", "pvc", "op-claim"]);
        assert!(gone.contains("NotFound"), "{gone}");

        // Deleted as they were applied; the namespace deleted and gone.
        let deleted = k.run(&["delete", "-f", &manifest(&folder_path, "executor.yaml", &objects)]);
        assert_eq!(lines(&deleted).len(), 3, "{deleted}");
        k.run(&["delete", "ns", "op", "--wait", "--timeout=30s"]);
        wait_gone(k, &["get", "ns", "op"]);
    })
    .await
    .unwrap();
    // kubectl's typed commands sent protobuf, its apply JSON and patches.
    let requests = double.state.requests();
    let sent = |kind: &str| {
        requests.iter().any(|r| {
            r.content_type
                .as_deref()
                .is_some_and(|c| c.starts_with(kind))
        })
    };
    assert!(sent("application/vnd.kubernetes.protobuf"));
    assert!(sent("application/json"));
    assert!(sent("application/strategic-merge-patch+json"));
    assert!(requests.iter().any(|r| r.watch));
}

/// The Leases a run holds (issue 34) as kubectl sees them: discovery lists the resource in
/// coordination.k8s.io/v1, the harness's own Lease (taken by `Cluster::set_up`) is listed by
/// its run label and read back, `kubectl apply -f` stores an operator's, and one the API
/// server refuses (`leaseDurationSeconds: 0`, `ValidateLeaseSpec`) is refused with the field
/// named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_reads_the_runs_leases_on_the_double() {
    let double = cluster_double::start(None).await.unwrap();
    let reached = cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap();
    let run = "real-clients-lease";
    let cluster = cluster::Cluster::set_up(reached, None, None, WorkspaceMode::EmptyDir, run)
        .await
        .unwrap();
    let ns = cluster.namespace.clone();
    let folder = tempfile::tempdir().unwrap();
    let folder_path = folder.path().to_owned();
    let kubectl = Kubectl::new(&double);
    tokio::task::spawn_blocking(move || {
        let k = &kubectl;
        let resources = k.run(&["api-resources", "--api-group", "coordination.k8s.io"]);
        assert!(
            resources
                .lines()
                .any(|l| l.starts_with("leases") && l.contains("coordination.k8s.io/v1")),
            "{resources}"
        );
        let selector = format!("acceptance.kandev.ai/run={run}");
        let listed = k.run(&["-n", &ns, "get", "leases", "-l", &selector, "-o", "name"]);
        let name = cluster::lease_name(run, cluster::Holder::Run);
        assert_eq!(
            lines(&listed),
            [format!("lease.coordination.k8s.io/{name}")]
        );
        let lease: Value =
            serde_json::from_str(&k.run(&["-n", &ns, "get", "lease", &name, "-o", "json"]))
                .unwrap();
        assert_eq!(
            lease["spec"]["leaseDurationSeconds"],
            cluster::LEASE_SECONDS
        );
        assert!(lease["spec"]["renewTime"].is_string(), "{lease}");
        let lease = |seconds: i32| {
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "operators", "namespace": ns},
                "spec": {"holderIdentity": "an operator", "leaseDurationSeconds": seconds}})
        };
        let good = manifest(&folder_path, "lease.yaml", &[lease(30)]);
        k.run(&["apply", "-f", &good]);
        let refused = manifest(&folder_path, "bad-lease.yaml", &[lease(0)]);
        let err = k.fails(&["apply", "-f", &refused]);
        assert!(err.contains("spec.leaseDurationSeconds"), "{err}");
    })
    .await
    .unwrap();
    cluster.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_client_drives_an_operators_session_on_the_double() {
    // The Python that has the client: `python3`, else Debian's own (a pyenv python3 first on
    // PATH does not see Debian's packages).
    let python = ["python3", "/usr/bin/python3"]
        .into_iter()
        .find(|p| {
            Command::new(p)
                .args(["-c", "import kubernetes"])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .unwrap_or_else(|| {
            panic!("no python3 with the Kubernetes client: apt-get install python3-kubernetes (harness/scripts/ensure-test-deps.sh)")
        });
    let double = cluster_double::start(None).await.unwrap();
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real_clients/operator_session.py");
    let out = tokio::process::Command::new(python)
        .arg(script)
        .arg(&double.kubeconfig)
        .args([double.context.as_str(), "py-op"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        // The patch's MODIFIED, then the deletion's own (as kube-apiserver v1.37 sends it).
        stdout.contains("watch events ADDED MODIFIED MODIFIED DELETED"),
        "{stdout}"
    );
    assert!(
        stdout.contains("deleted; namespace py-op deleted"),
        "{stdout}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while double.state.object("namespaces", "", "py-op").is_some() {
        assert!(Instant::now() < deadline, "namespace py-op left");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let requests = double.state.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.watch && r.uri.contains("watch=True"))
    );
}

/// What the double answers to a raw request (status, body).
async fn raw(
    double: &KubeDouble,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Value, String) {
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&double.kubeconfig).unwrap(),
        &kube::config::KubeConfigOptions {
            context: Some(double.context.clone()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let mut request = http::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    let answer = client
        .send(
            request
                .body(kube::client::Body::from(body.to_vec()))
                .unwrap(),
        )
        .await
        .unwrap();
    let code = answer.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(answer.into_body())
        .await
        .unwrap()
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    )
}

#[tokio::test]
async fn content_is_negotiated_as_an_api_server_does() {
    let double = cluster_double::start(None).await.unwrap();
    let protobuf = "application/vnd.kubernetes.protobuf";
    // Only protobuf accepted: 406 with a Status; protobuf or JSON: JSON.
    let (code, status, _) = raw(
        &double,
        "GET",
        "/api/v1/namespaces",
        &[("accept", protobuf)],
        b"",
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (406, Some("NotAcceptable")),
        "{status}"
    );
    let (code, list, _) = raw(
        &double,
        "GET",
        "/api/v1/namespaces",
        &[(
            "accept",
            "application/vnd.kubernetes.protobuf,application/json",
        )],
        b"",
    )
    .await;
    assert_eq!((code, list["kind"].as_str()), (200, Some("NamespaceList")));
    // A Table asked for with no plain JSON fallback: not served, 406.
    let (code, _, _) = raw(
        &double,
        "GET",
        "/api/v1/namespaces",
        &[("accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
        b"",
    )
    .await;
    assert_eq!(code, 406);
    // Aggregated discovery asked for first: the legacy document, as plain JSON.
    let (code, groups, _) = raw(
        &double,
        "GET",
        "/apis",
        &[(
            "accept",
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json",
        )],
        b"",
    )
    .await;
    assert_eq!((code, groups["kind"].as_str()), (200, Some("APIGroupList")));
    // A body the double does not decode: 415, never misread.
    for (content_type, body) in [
        ("application/cbor", &b"\xa0"[..]),
        (protobuf, b"k8s\0\n\x0f\n\x02v1\x12\tConfigMap\x12\0"),
    ] {
        let (code, status, _) = raw(
            &double,
            "POST",
            "/api/v1/namespaces/default/serviceaccounts",
            &[("content-type", content_type)],
            body,
        )
        .await;
        assert_eq!(
            (code, status["reason"].as_str()),
            (415, Some("UnsupportedMediaType")),
            "{content_type}: {status}"
        );
    }
    let (code, status, _) = raw(
        &double,
        "PATCH",
        "/api/v1/namespaces/default/serviceaccounts/default",
        &[("content-type", "application/apply-patch+yaml")],
        b"metadata: {}",
    )
    .await;
    assert_eq!(
        (code, status["reason"].as_str()),
        (415, Some("UnsupportedMediaType"))
    );
    // A YAML body is decoded as the API server decodes it.
    let (code, created, _) = raw(
        &double,
        "POST",
        "/api/v1/namespaces/default/serviceaccounts",
        &[("content-type", "application/yaml")],
        b"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: from-yaml\n",
    )
    .await;
    assert_eq!(
        (code, created["metadata"]["name"].as_str()),
        (201, Some("from-yaml"))
    );
    // A list asked as a watch is a watch (events), never a list: `watch=1` with a timeout
    // streams an ADDED per object, then ends.
    let started = Instant::now();
    let (code, _, text) = raw(
        &double,
        "GET",
        "/api/v1/namespaces/default/serviceaccounts?watch=1&timeoutSeconds=1",
        &[],
        b"",
    )
    .await;
    assert_eq!(code, 200);
    assert!(started.elapsed() >= Duration::from_secs(1));
    let events: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let names: Vec<(&str, &str)> = events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap(),
                e["object"]["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [("ADDED", "default"), ("ADDED", "from-yaml")],
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn kubectl_execs_reads_logs_and_deletes_a_pod_running_on_the_engine() {
    let (double, images) = kandev_test_support::engine::engine_double().await;
    let folder = tempfile::tempdir().unwrap();
    let folder_path = folder.path().to_owned();
    let kubectl = Kubectl::new(&double);
    // Pod names are shared by the one engine across namespaces: one of its own.
    let name = format!(
        "kubectl-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let state = double.state.clone();
    tokio::task::spawn_blocking(move || {
        let k = &kubectl;
        k.run(&["create", "ns", "eng"]);
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "eng"},
            "spec": {"containers": [{"name": "work", "image": images.daemon,
                "command": ["sh", "-c", "echo started; exec sleep 3600"]}]}});
        k.run(&["apply", "-f", &manifest(&folder_path, "pod.yaml", &[pod])]);
        // Ready as a kubelet's status update reports it (a watch event).
        k.run(&[
            "-n",
            "eng",
            "wait",
            "--for=condition=Ready",
            &format!("pod/{name}"),
            "--timeout=120s",
        ]);
        let uid = state.object("pods", "eng", &name).unwrap()["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_owned();

        // exec over websockets: stdout and stderr apart, the exit code, stdin.
        let out = k.output(&[
            "-n",
            "eng",
            "exec",
            &name,
            "-c",
            "work",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");
        let failed = k.output(&["-n", "eng", "exec", &name, "--", "sh", "-c", "exit 3"]);
        assert_eq!(
            failed.status.code(),
            Some(3),
            "{}",
            String::from_utf8_lossy(&failed.stderr)
        );
        assert!(
            String::from_utf8_lossy(&failed.stderr).contains("command terminated with exit code 3")
        );
        let mut cat = k
            .command(&["-n", "eng", "exec", "-i", &name, "--", "cat"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            let mut stdin = cat.stdin.take().unwrap();
            stdin.write_all(b"through stdin\n").unwrap();
        }
        let cat = cat.wait_with_output().unwrap();
        assert!(
            cat.status.success(),
            "{}",
            String::from_utf8_lossy(&cat.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&cat.stdout), "through stdin\n");

        // logs.
        assert_eq!(
            k.run(&["-n", "eng", "logs", &name, "-c", "work"]),
            "started\n"
        );

        // delete --wait: returns once the Pod is gone, its containers removed from the engine.
        k.run(&[
            "-n",
            "eng",
            "delete",
            "pod",
            &name,
            "--wait",
            "--timeout=60s",
        ]);
        assert!(state.object("pods", "eng", &name).is_none());
        assert!(state.runtime_pod(&uid).is_none());
        k.fails(&["-n", "eng", "get", "pod", &name]);
        k.run(&["delete", "ns", "eng", "--wait", "--timeout=60s"]);
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn kubectl_applies_a_composed_task_pod_and_its_claim_on_the_engine() {
    let engine = kandev_test_support::engine::FixtureEngine::start().await;
    let runtime = engine.local_backend();
    let double = cluster_double::start(Some(runtime.clone())).await.unwrap();
    let folder = tempfile::tempdir().unwrap();
    let folder_path = folder.path().to_owned();
    let kubectl = Kubectl::new(&double);
    // Claim (workspace volume) and Pod names are shared by the one engine: its own claim.
    let claim = format!("ws-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let pod = cluster_double::recorded::composed_task_pod(
        "task",
        Some(&claim),
        &engine.images.worker,
        &engine.images.daemon,
    )
    .unwrap();
    let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
    let state = double.state.clone();
    let claim_name = claim.clone();
    let (pod_name, worker, daemon) = (
        name.clone(),
        engine.images.worker.clone(),
        engine.images.daemon.clone(),
    );
    let uid = tokio::task::spawn_blocking(move || {
        let (k, claim, name) = (&kubectl, claim_name.as_str(), pod_name.as_str());
        k.run(&["create", "ns", "task"]);
        // The workspace claim first: provisioned on the engine at once, then bound.
        let manifest_of_claim = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": "task"},
            "spec": {"accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}});
        k.run(&[
            "apply",
            "-f",
            &manifest(&folder_path, "claim.yaml", &[manifest_of_claim]),
        ]);
        let bound: Value =
            serde_json::from_str(&k.run(&["-n", "task", "get", "pvc", claim, "-o", "json"]))
                .unwrap();
        assert_eq!(bound["status"]["phase"], "Bound", "{bound}");
        assert_eq!(bound["status"]["capacity"]["storage"], "1Gi");

        // The composed task Pod, applied as JSON (the harness's own create, through kubectl).
        let file = folder_path.join("task-pod.json");
        std::fs::write(&file, serde_json::to_string_pretty(&pod).unwrap()).unwrap();
        let applied = k.run(&["apply", "-f", &file.display().to_string()]);
        assert_eq!(lines(&applied), [format!("pod/{name} created")]);
        let stored: Value =
            serde_json::from_str(&k.run(&["-n", "task", "get", "pod", name, "-o", "json"]))
                .unwrap();
        // Labels as composed; annotations as composed plus apply's last-applied record.
        assert_eq!(stored["metadata"]["labels"], pod["metadata"]["labels"]);
        let annotations = stored["metadata"]["annotations"].as_object().unwrap();
        for (key, value) in pod["metadata"]["annotations"].as_object().unwrap() {
            assert_eq!(annotations.get(key), Some(value), "{key}");
        }
        assert!(annotations.contains_key("kubectl.kubernetes.io/last-applied-configuration"));
        let containers: Vec<(&str, &str)> = stored["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["name"].as_str().unwrap(), c["image"].as_str().unwrap()))
            .collect();
        assert_eq!(
            containers,
            [
                ("kandev-agent", worker.as_str()),
                ("docker-engine", daemon.as_str())
            ]
        );
        assert_eq!(
            stored["spec"]["volumes"][4]["persistentVolumeClaim"]["claimName"],
            claim
        );

        // Both containers running (the privileged docker-engine companion too): Ready.
        k.run(&[
            "-n",
            "task",
            "wait",
            "--for=condition=Ready",
            &format!("pod/{name}"),
            "--timeout=60s",
        ]);
        let uid = state.object("pods", "task", name).unwrap()["metadata"]["uid"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(state.runtime_pod(&uid).is_some());

        // Deleted with --wait: gone from the double and its containers from the engine; then
        // the claim, and the namespace.
        k.run(&[
            "-n",
            "task",
            "delete",
            "pod",
            name,
            "--wait",
            "--timeout=60s",
        ]);
        assert!(state.object("pods", "task", name).is_none());
        assert!(state.runtime_pod(&uid).is_none());
        k.fails(&["-n", "task", "get", "pod", name]);
        k.run(&[
            "-n",
            "task",
            "delete",
            "pvc",
            claim,
            "--wait",
            "--timeout=60s",
        ]);
        let gone = k.fails(&["-n", "task", "get", "pvc", claim]);
        assert!(gone.contains("NotFound"), "{gone}");
        k.run(&["delete", "ns", "task", "--wait", "--timeout=60s"]);
        uid
    })
    .await
    .unwrap();
    // The claim's volume removed from the engine (the double retries while it is in use).
    let deadline = Instant::now() + Duration::from_secs(60);
    while runtime.get_workspace(&claim).await.unwrap().is_some() {
        assert!(
            Instant::now() < deadline,
            "workspace {claim} left on the engine"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(double.state.runtime_pod(&uid).is_none());
    // And no container of the Pod's left on the engine (the local backend names them
    // `<pod>-<container>`, `<pod>-infra`).
    let filters =
        std::collections::HashMap::from([("name".to_owned(), vec![format!("^/{name}-")])]);
    let left = engine
        .docker
        .list_containers(Some(
            bollard::query_parameters::ListContainersOptionsBuilder::default()
                .all(true)
                .filters(&filters)
                .build(),
        ))
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
}

/// A free port on 127.0.0.1 (free when asked: kubectl binds it right after).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `kubectl port-forward` running, once it says it listens (its stdout a file: kubectl
/// writes a line per connection there).
fn port_forward(k: &Kubectl, env: &[(&str, &str)], pod: &str, ports: &str) -> std::process::Child {
    let out = tempfile::NamedTempFile::new().unwrap();
    let mut command = k.command(&["-n", "pf", "port-forward", &format!("pod/{pod}"), ports]);
    command
        .envs(env.iter().copied())
        .stdout(out.reopen().unwrap())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(out.path()).unwrap();
        if text.contains("Forwarding from 127.0.0.1:") {
            break;
        }
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let failed = child.wait_with_output().unwrap();
            panic!(
                "kubectl port-forward: {text} {}",
                String::from_utf8_lossy(&failed.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// One HTTP/1.0 exchange through the forwarded local port: the whole response.
fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut socket = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    socket
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: pod\r\n\r\n").as_bytes())
        .unwrap();
    let mut response = Vec::new();
    match socket.read_to_end(&mut response) {
        Ok(_) => String::from_utf8_lossy(&response).into_owned(),
        Err(e) => format!("(reading: {e}) {}", String::from_utf8_lossy(&response)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn kubectl_port_forwards_to_a_pod_running_on_the_engine() {
    const PORT: u16 = 8080;
    let (double, images) = kandev_test_support::engine::engine_double().await;
    let folder = tempfile::tempdir().unwrap();
    let folder_path = folder.path().to_owned();
    let kubectl = Kubectl::new(&double);
    // On the engine its containers carry this process's run id (`engine_double`): what a
    // killed run of this test leaves, `gc --run <id>` removes (tests/leftovers.rs).
    let name = format!("pf-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    tokio::task::spawn_blocking(move || {
        let k = &kubectl;
        k.run(&["create", "ns", "pf"]);
        // An HTTP server on 127.0.0.1 in the Pod's network namespace only.
        let serve = format!(
            "mkdir -p /tmp/site && echo through-the-tunnel > /tmp/site/hello.txt && cd /tmp/site \
             && exec python3 -u -m http.server {PORT} --bind 127.0.0.1"
        );
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "pf"},
            "spec": {"containers": [{"name": "web", "image": images.worker,
                "command": ["sh", "-c", serve]}]}});
        k.run(&["apply", "-f", &manifest(&folder_path, "pod.yaml", &[pod])]);
        k.run(&[
            "-n",
            "pf",
            "wait",
            "--for=condition=Ready",
            &format!("pod/{name}"),
            "--timeout=120s",
        ]);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !k
            .run(&["-n", "pf", "logs", &name])
            .contains("Serving HTTP")
        {
            assert!(Instant::now() < deadline, "the HTTP server never listened");
            std::thread::sleep(Duration::from_millis(200));
        }

        // kubectl 1.32 asks for SPDY tunnelled through a websocket first; with the
        // websockets turned off it upgrades to SPDY/3.1 itself. Both are served: two
        // connections (two request ids) through each.
        for env in [&[][..], &[("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false")][..]] {
            let local = free_port();
            let mut forward = port_forward(k, env, &name, &format!("{local}:{PORT}"));
            for _ in 0..2 {
                let response = http_get(local, "/hello.txt");
                if !response.starts_with("HTTP/1.0 200") {
                    forward.kill().unwrap();
                    let out = forward.wait_with_output().unwrap();
                    panic!("{env:?}: {response}: {}", String::from_utf8_lossy(&out.stderr));
                }
                assert!(response.ends_with("through-the-tunnel\n"), "{env:?}: {response}");
            }
            forward.kill().unwrap();
            let out = forward.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!stderr.contains("error"), "{env:?}: {stderr}");
        }

        // A port nothing listens on: the connection is refused in the Pod, and kubectl
        // reports the kubelet's error from the error stream.
        let local = free_port();
        let mut forward = port_forward(k, &[], &name, &format!("{local}:{}", PORT + 1));
        let response = http_get(local, "/");
        assert_eq!(response, "");
        let deadline = Instant::now() + Duration::from_secs(30);
        while forward.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = forward.kill();
        let out = forward.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "an error occurred forwarding {local} -> {}: error forwarding port {} to pod {name}",
                PORT + 1,
                PORT + 1
            )),
            "{stderr}"
        );

        k.run(&["-n", "pf", "delete", "pod", &name, "--wait", "--timeout=60s"]);
        k.run(&["delete", "ns", "pf", "--wait", "--timeout=60s"]);
    })
    .await
    .unwrap();
}
