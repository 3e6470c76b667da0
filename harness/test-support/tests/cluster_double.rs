//! The cluster double's own tests, beside it: what it answers and how its node runs Pods,
//! where the harness's tests (`harness/tests/kube_double/`, `scenarios/tests/kube_double/`)
//! use it. Without a runtime: the status codes and selectors a client meets, and how it
//! stores Secrets and runs a Job's Pod. With Pods on the local engine (`#[ignore]`d: `bash
//! harness/scripts/ensure-engine.sh`, then `--include-ignored`): a Pod's token reaching the
//! double from inside the Pod, Pods ending by their exit codes, and a Job's Pod followed to its
//! end and stopped by its deadline. What a real API server decides is not here:
//! `tests/real_api_server/` holds the double to it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::api::core::v1::Pod;
use kandev_harness::backend::kube::cluster;
use kandev_harness::pod::identity::random_hex;
use kandev_test_support::cluster_double;
use kandev_test_support::engine::engine_double;
use kandev_test_support::on_double::{
    admin_client, client_with, create_namespace, eventually, refusal, typed,
};
use kube::api::{Api, ListParams, PostParams};
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
    // pods/exec without a websocket upgrade (SPDY) is refused saying so.
    let spdy = http::Request::post("/api/v1/namespaces/default/pods/b/exec?command=true")
        .body(Vec::new())
        .unwrap();
    match admin.request_text(spdy).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 400, "{status:?}");
            assert!(
                status.message.contains("websockets only"),
                "{}",
                status.message
            );
        }
        other => panic!("SPDY exec not refused: {other:?}"),
    }
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

/// Creates the namespace `ns` and, in it, the ServiceAccount `account` bound to a Role
/// holding `rules`.
async fn account_with_rules(admin: &kube::Client, ns: &str, account: &str, rules: Value) {
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let pp = PostParams::default();
    if Api::<Namespace>::all(admin.clone())
        .get_opt(ns)
        .await
        .unwrap()
        .is_none()
    {
        Api::<Namespace>::all(admin.clone())
            .create(&pp, &typed(json!({"metadata": {"name": ns}})))
            .await
            .unwrap();
    }
    Api::<ServiceAccount>::namespaced(admin.clone(), ns)
        .create(&pp, &typed(json!({"metadata": {"name": account}})))
        .await
        .unwrap();
    Api::<Role>::namespaced(admin.clone(), ns)
        .create(
            &pp,
            &typed(json!({"metadata": {"name": account}, "rules": rules})),
        )
        .await
        .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(
            &pp,
            &typed(json!({"metadata": {"name": account},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account}})),
        )
        .await
        .unwrap();
}

/// The user `client` authenticates as (a SelfSubjectReview).
async fn who(client: &kube::Client) -> k8s_openapi::api::authentication::v1::UserInfo {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap()
        .status
        .unwrap()
        .user_info
        .unwrap()
}

/// Runs `argv` in `pod`'s first container through pods/exec (kube-rs, websocket): its
/// stdout, and its stderr with the exit status.
async fn exec_in(pods: &Api<Pod>, pod: &str, argv: &[&str]) -> (String, String) {
    use kube::api::AttachParams;
    use tokio::io::AsyncReadExt;
    let mut attached = pods
        .exec(pod, argv.iter().copied(), &AttachParams::default())
        .await
        .unwrap();
    let (mut stdout, mut stderr) = (attached.stdout().unwrap(), attached.stderr().unwrap());
    let status = attached.take_status().unwrap();
    let (mut out, mut err) = (String::new(), String::new());
    let (read_out, read_err) = tokio::join!(
        stdout.read_to_string(&mut out),
        stderr.read_to_string(&mut err)
    );
    read_out.unwrap();
    read_err.unwrap();
    let status = status.await.unwrap();
    attached.join().await.unwrap();
    (out, format!("{err}{status:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_stored_as_the_api_server_stores_them_and_a_job_makes_its_pod() {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::{Namespace, Secret};
    use kube::api::DeleteParams;
    let double = cluster_double::start(None).await.unwrap();
    let admin = admin_client(&double).await;
    let ns = "stored";
    create_namespace(&admin, ns).await;
    let pp = PostParams::default();

    // A Secret's stringData is merged into data (base64) and never stored.
    let secrets = Api::<Secret>::namespaced(admin.clone(), ns);
    secrets
        .create(
            &pp,
            &typed(json!({"metadata": {"name": "s"},
            "data": {"kept": "a2VwdA=="}, "stringData": {"token": "s3cret"}})),
        )
        .await
        .unwrap();
    let stored = double.state.object("secrets", ns, "s").unwrap();
    assert_eq!(
        stored["data"],
        json!({"kept": "a2VwdA==", "token": "czNjcmV0"})
    );
    assert_eq!(stored["type"], "Opaque");
    assert!(stored.get("stringData").is_none(), "{stored}");
    let read = secrets.get("s").await.unwrap();
    assert_eq!(read.data.unwrap()["token"].0, b"s3cret");
    assert_eq!(
        secrets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );

    // A Job: its Pod made by the controller (stored, Pending: no runtime), found as launch
    // finds it. The Job's defaulting, its status and the other delete policies are the real
    // API server's (`harness/test-support/tests/real_api_server/jobs.rs`).
    let jobs = Api::<Job>::namespaced(admin.clone(), ns);
    let job: Job = typed(
        json!({"metadata": {"name": "run"}, "spec": {"backoffLimit": 0,
        "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox", "command": ["true"]}]}}}}),
    );
    let created = jobs.create(&pp, &job).await.unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    let labels = json!({"batch.kubernetes.io/controller-uid": uid,
        "batch.kubernetes.io/job-name": "run", "controller-uid": uid, "job-name": "run"});
    let pods = Api::<Pod>::namespaced(admin.clone(), ns);
    let pod = eventually("the Job's Pod", Duration::from_secs(10), || async {
        pods.list(&ListParams::default().labels("job-name=run"))
            .await
            .unwrap()
            .items
            .into_iter()
            .next()
    })
    .await;
    let name = pod.metadata.name.clone().unwrap();
    assert!(name.starts_with("run-") && name.len() == 9, "{name}");
    let pod_json = serde_json::to_value(&pod).unwrap();
    assert_eq!(pod_json["metadata"]["labels"], labels);
    assert_eq!(
        pod_json["metadata"]["ownerReferences"],
        json!([{"apiVersion": "batch/v1", "kind": "Job", "name": "run", "uid": uid,
            "controller": true, "blockOwnerDeletion": true}])
    );
    // A Job the API server refuses (a template restarting Always) is the real API server's
    // to judge: `harness/test-support/tests/real_api_server/launch.rs`.
    // Deleted as launch deletes it (Background): the Job, then its Pod.
    jobs.delete("run", &DeleteParams::background())
        .await
        .unwrap();
    assert!(jobs.get_opt("run").await.unwrap().is_none());
    eventually("the Job's Pod gone", Duration::from_secs(10), || async {
        pods.get_opt(&name).await.unwrap().is_none().then_some(())
    })
    .await;
    // Deleting the namespace removes the Secret and what is left.
    Api::<Namespace>::all(admin.clone())
        .delete(ns, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the namespace gone", Duration::from_secs(10), || async {
        double
            .state
            .object("namespaces", "", ns)
            .is_none()
            .then_some(())
    })
    .await;
    assert!(double.state.object("secrets", ns, "s").is_none());
    assert!(double.state.objects("pods").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_pods_token_reaches_the_double_from_inside_the_pod() {
    let started = Instant::now();
    let (double, images) = engine_double().await;
    let admin = admin_client(&double).await;
    let ns = "in-cluster";
    account_with_rules(
        &admin,
        ns,
        "reader",
        json!([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]),
    )
    .await;
    let address = double
        .pod_address
        .expect("a runtime gives the double a Pod address");
    assert_ne!(address.ip(), std::net::IpAddr::from([127, 0, 0, 1]));
    let pods = Api::<Pod>::namespaced(admin.clone(), ns);
    // Pod names share the one engine: unique ones.
    let name = format!("reader-{}", random_hex(4));
    let name = name.as_str();
    // From inside the Pod: kube-rs's in-cluster config's inputs (the env and the three
    // files), TLS checked against the mounted CA and the IP SAN, the token's identity asked.
    let script = r#"
import json, os, ssl, urllib.request
d = "/var/run/secrets/kubernetes.io/serviceaccount"
ctx = ssl.create_default_context(cafile=d + "/ca.crt")
host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
review = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
req = urllib.request.Request("https://%s:%s/apis/authentication.k8s.io/v1/selfsubjectreviews" % (host, port),
    data=review.encode(), method="POST", headers={"Content-Type": "application/json",
    "Authorization": "Bearer " + open(d + "/token").read()})
user = json.load(urllib.request.urlopen(req, context=ctx))["status"]["userInfo"]["username"]
print(user, open(d + "/namespace").read(), os.getuid())
"#;
    pods.create(
        &PostParams::default(),
        &pod(
            name,
            json!({"serviceAccountName": "reader", "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "work", "image": images.worker, "command": ["sleep", "3600"]}]}),
        ),
    )
    .await
    .unwrap();
    // Stored as the ServiceAccount plugin admits it.
    let stored = double.state.object("pods", ns, name).unwrap();
    let volume = stored["spec"]["volumes"][0].clone();
    let volume_name = volume["name"].as_str().unwrap().to_owned();
    assert!(volume_name.starts_with("kube-api-access-"), "{volume}");
    assert_eq!(volume["projected"]["defaultMode"], 420);
    assert_eq!(
        stored["spec"]["containers"][0]["volumeMounts"],
        json!([{"name": volume_name, "readOnly": true,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}])
    );
    eventually("the Pod running", Duration::from_secs(60), || async {
        let pod = pods.get(name).await.unwrap();
        (pod.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    let (inside, stderr) = exec_in(&pods, name, &["python3", "-c", script]).await;
    assert_eq!(
        inside.trim(),
        "system:serviceaccount:in-cluster:reader in-cluster 1000",
        "{stderr}"
    );
    // The same files read through exec make a working client on the host, at the address the
    // Pod reached.
    let dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    let (token, _) = exec_in(&pods, name, &["cat", &format!("{dir}/token")]).await;
    let (ca, _) = exec_in(&pods, name, &["cat", &format!("{dir}/ca.crt")]).await;
    assert_eq!(ca, double.ca_pem);
    let (env, _) = exec_in(
        &pods,
        name,
        &[
            "sh",
            "-c",
            "echo $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT",
        ],
    )
    .await;
    assert_eq!(env.trim(), address.to_string());
    let (written, _) = exec_in(
        &pods,
        name,
        &["sh", "-c", &format!("touch {dir}/x 2>&1 || echo refused")],
    )
    .await;
    assert!(
        written.contains("refused"),
        "the token volume is read-only: {written}"
    );
    let from_host = client_with(&format!("https://{address}"), &ca, &token).await;
    assert_eq!(
        from_host.apiserver_version().await.unwrap().git_version,
        "v1.36.0-kube-double"
    );
    assert_eq!(
        who(&from_host).await.username.as_deref(),
        Some("system:serviceaccount:in-cluster:reader")
    );
    Api::<Pod>::namespaced(from_host.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    // The token is bound to the Pod: once the Pod is gone it no longer authenticates.
    pods.delete(name, &Default::default()).await.unwrap();
    eventually("the Pod gone", Duration::from_secs(30), || async {
        pods.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
    assert_eq!(
        refusal(
            Api::<Pod>::namespaced(from_host, ns)
                .list(&ListParams::default())
                .await
        )
        .code,
        401
    );
    eprintln!("in-Pod token test: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn pods_that_end_succeed_or_fail_by_their_exit_codes() {
    let started = Instant::now();
    let (double, images) = engine_double().await;
    let admin = admin_client(&double).await;
    let pods = Api::<Pod>::namespaced(admin.clone(), "default");
    // Pod names share the one engine: unique ones.
    let (zero, three) = (
        format!("ends-0-{}", random_hex(4)),
        format!("ends-3-{}", random_hex(4)),
    );
    for (name, code) in [(&zero, 0), (&three, 3)] {
        let script = format!("echo ran; exit {code}");
        pods.create(
            &PostParams::default(),
            &pod(name, json!({"restartPolicy": "Never", "automountServiceAccountToken": false,
                "containers": [{"name": "c", "image": images.daemon, "command": ["sh", "-c", script]}]})),
        )
        .await
        .unwrap();
    }
    for (name, phase, code, reason) in [
        (&zero, "Succeeded", 0, "Completed"),
        (&three, "Failed", 3, "Error"),
    ] {
        let status = eventually(
            &format!("{name} ended"),
            Duration::from_secs(60),
            || async {
                let status = pods.get(name).await.unwrap().status?;
                matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")).then_some(status)
            },
        )
        .await;
        assert_eq!(status.phase.as_deref(), Some(phase), "{name}: {status:?}");
        let container = &status.container_statuses.unwrap()[0];
        let terminated = container
            .state
            .as_ref()
            .unwrap()
            .terminated
            .clone()
            .unwrap();
        assert_eq!(terminated.exit_code, code, "{name}");
        assert_eq!(terminated.reason.as_deref(), Some(reason), "{name}");
        assert!(
            terminated.started_at.is_some() && terminated.finished_at.is_some(),
            "{terminated:?}"
        );
        assert_eq!(
            container.restart_count, 0,
            "restartPolicy Never: not restarted"
        );
        assert_eq!(pods.logs(name, &Default::default()).await.unwrap(), "ran\n");
    }
    // Not automounted: no token volume.
    let stored = double.state.object("pods", "default", &zero).unwrap();
    assert!(stored["spec"]["volumes"].is_null(), "{stored}");
    for name in [&zero, &three] {
        pods.delete(name, &Default::default()).await.unwrap();
    }
    eventually("the Pods gone", Duration::from_secs(30), || async {
        double.state.objects("pods").is_empty().then_some(())
    })
    .await;
    eprintln!("phases test: {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_jobs_pod_runs_to_its_end_with_its_logs_followed_and_a_deadline_fails_one() {
    use futures_util::AsyncBufReadExt;
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::{Namespace, Secret};
    use kube::api::{DeleteParams, LogParams};
    let started = Instant::now();
    let (double, images) = engine_double().await;
    let admin = admin_client(&double).await;
    let ns = "launch";
    create_namespace(&admin, ns).await;
    let jobs = Api::<Job>::namespaced(admin.clone(), ns);
    let pods = Api::<Pod>::namespaced(admin.clone(), ns);
    let job = |name: &str, extra: Value, pod: Value| -> Job {
        let mut spec = json!({"backoffLimit": 0, "template": {"spec": pod}});
        for (k, v) in extra.as_object().unwrap() {
            spec[k.as_str()] = v.clone();
        }
        typed(json!({"metadata": {"name": name}, "spec": spec}))
    };
    // The deadline Job first (it runs beside the other). A Job's completion, its TTL and
    // its defaulting are the real API server's (`real_api_server/jobs.rs` of
    // kandev-test-support): launch reads none of them.
    jobs.create(
        &PostParams::default(),
        &job(
            "deadline",
            json!({"activeDeadlineSeconds": 2}),
            json!({"restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": images.daemon, "command": ["sleep", "60"]}]}),
        ),
    )
    .await
    .unwrap();
    // The Secret it mounts does not exist yet: its Pod waits, as a kubelet's FailedMount.
    let script = "echo start; sleep 1; cat /etc/launch/token; echo; \
        touch /etc/launch/x 2>/dev/null && echo writable || echo read-only; id -u; echo end";
    jobs.create(
        &PostParams::default(),
        &job("run", json!({}), json!({"restartPolicy": "Never",
            "securityContext": {"runAsUser": 65532, "runAsGroup": 65532},
            "volumes": [{"name": "launch", "secret": {"secretName": "launch-token"}}],
            "containers": [{"name": "harness", "image": images.daemon, "command": ["sh", "-c", script],
                "volumeMounts": [{"name": "launch", "mountPath": "/etc/launch", "readOnly": true}]}]})),
    )
    .await
    .unwrap();
    let waiting = eventually(
        "the Job's Pod waiting for its Secret",
        Duration::from_secs(30),
        || async {
            let pod = pods
                .list(&ListParams::default().labels("job-name=run"))
                .await
                .unwrap()
                .items
                .into_iter()
                .next()?;
            let status = pod.status.clone()?;
            let message = status.container_statuses?[0]
                .state
                .clone()?
                .waiting?
                .message?;
            message
                .contains("secret \"launch-token\" not found")
                .then_some(pod)
        },
    )
    .await;
    assert_eq!(waiting.status.unwrap().phase.as_deref(), Some("Pending"));
    let name = waiting.metadata.name.clone().unwrap();
    let events = double.state.objects("events");
    assert!(
        events
            .iter()
            .any(|e| e["reason"] == "FailedMount" && e["involvedObject"]["name"] == name.as_str()),
        "{events:?}"
    );
    Api::<Secret>::namespaced(admin.clone(), ns)
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": "launch-token"},
            "stringData": {"token": "s3cret"}})),
        )
        .await
        .unwrap();
    // Followed from the container's start to its end (kube-rs's log_stream).
    let follow = LogParams {
        follow: true,
        ..Default::default()
    };
    let stream = eventually(
        "the log to be readable",
        Duration::from_secs(30),
        || async { pods.log_stream(&name, &follow).await.ok() },
    )
    .await;
    let mut lines = stream.lines();
    let mut seen = Vec::new();
    let mut phase_at_first_line = None;
    while let Some(line) = futures_util::TryStreamExt::try_next(&mut lines)
        .await
        .unwrap()
    {
        if phase_at_first_line.is_none() {
            let status = pods.get(&name).await.unwrap().status.unwrap_or_default();
            phase_at_first_line = Some(status.phase);
        }
        seen.push(line);
    }
    assert_eq!(seen, ["start", "s3cret", "read-only", "65532", "end"]);
    assert_eq!(
        phase_at_first_line,
        Some(Some("Running".into())),
        "the first line came while the Pod ran"
    );
    let pod = eventually(
        "the Job's Pod succeeded",
        Duration::from_secs(30),
        || async {
            let pod = pods.get(&name).await.unwrap();
            (pod.status.as_ref()?.phase.as_deref() == Some("Succeeded")).then_some(pod)
        },
    )
    .await;
    let labels = pod.metadata.labels.unwrap();
    let uid = jobs.get("run").await.unwrap().metadata.uid.unwrap();
    assert_eq!(labels["job-name"], "run");
    assert_eq!(labels["batch.kubernetes.io/job-name"], "run");
    assert_eq!(labels["controller-uid"], uid);
    assert_eq!(labels["batch.kubernetes.io/controller-uid"], uid);
    let owner = &pod.metadata.owner_references.unwrap()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.uid.as_str(),
            owner.controller,
            owner.block_owner_deletion
        ),
        ("Job", uid.as_str(), Some(true), Some(true))
    );
    // The deadline: its Pod deleted, the Job failed.
    let failed = eventually(
        "the deadline Job failed",
        Duration::from_secs(30),
        || async {
            let status = jobs.get("deadline").await.unwrap().status?;
            status
                .conditions
                .clone()?
                .iter()
                .any(|c| c.type_ == "Failed")
                .then_some(status)
        },
    )
    .await;
    // What launch reads: `FailureTarget`, then `Failed`, both for the deadline.
    let conditions: Vec<(String, String)> = failed
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.reason.unwrap_or_default()))
        .collect();
    assert_eq!(
        conditions,
        [
            ("FailureTarget".into(), "DeadlineExceeded".into()),
            ("Failed".into(), "DeadlineExceeded".into())
        ]
    );
    assert!(
        pods.list(&ListParams::default().labels("job-name=deadline"))
            .await
            .unwrap()
            .items
            .is_empty()
    );
    // Deleting the Job (Background, as launch does) removes its Pod.
    jobs.delete("run", &DeleteParams::background())
        .await
        .unwrap();
    eventually("the Job's Pod gone", Duration::from_secs(30), || async {
        pods.get_opt(&name).await.unwrap().is_none().then_some(())
    })
    .await;
    Api::<Namespace>::all(admin.clone())
        .delete(ns, &DeleteParams::default())
        .await
        .unwrap();
    eventually("the namespace gone", Duration::from_secs(30), || async {
        double
            .state
            .object("namespaces", "", ns)
            .is_none()
            .then_some(())
    })
    .await;
    eprintln!("Job test: {:?}", started.elapsed());
}
