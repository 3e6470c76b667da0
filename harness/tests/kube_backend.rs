//! The `kube` backend's flows against a fake API server (tower-test): create with the
//! admission comparison, a mutated Pod or claim rolled back by its exact UID, deletes with
//! UID and resourceVersion preconditions, PVC ownership, fail-closed terminal cleanup, the
//! bounded readiness wait, and the label sweep. What is asserted is the fake cluster's state
//! afterwards and the preconditions each DELETE carried.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, Pod, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kandev_harness::backend::kube::{KubeBackend, ManagedPvc, compare_pvc};
use kandev_harness::backend::{Backend, BackendError, PodRef};
use kandev_harness::pod::compose::{Arch, WorkspaceSource};
use kandev_harness::pod::identity::{SessionIdentity, create_nonce};
use kandev_harness::session::{RecordMismatch, RecordedSession, owned_labels, terminal_cleanup};
use kandev_test_support::fake_apiserver;
use kandev_test_support::pod::{TaskPod, task_pod};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

const NS: &str = "kandev-acceptance-test";

fn composed(identity: &SessionIdentity, claim: &str) -> Pod {
    task_pod(TaskPod {
        workspace: WorkspaceSource::Claim(claim.into()),
        ..TaskPod::new(NS, identity)
    })
    .unwrap()
}

fn backend(client: kube::Client) -> KubeBackend {
    let mut backend = KubeBackend::new(client, NS, "kube", "kandev-agent", ManagedPvc::default());
    backend.delete_timeout = Duration::from_secs(5);
    backend
}

fn identity() -> SessionIdentity {
    SessionIdentity::new("20261130t000000-abcdef", "lifecycle::teardown_exact", 1)
}

#[tokio::test]
async fn a_created_pod_is_admitted_as_composed_and_keeps_its_nonce() {
    let (client, state) = fake_apiserver::start(NS);
    let backend = backend(client);
    let id = identity();
    let pod = composed(&id, &id.workspace_claim_name());
    let created = backend.create_pod(&pod).await.unwrap();
    let state = state.lock().unwrap();
    let stored = state.get("pods", &created.name).unwrap();
    assert_eq!(stored["metadata"]["uid"], json!(created.uid));
    assert_eq!(
        stored["metadata"]["annotations"]["kandev.ai/create-nonce"],
        json!(pod.metadata.annotations.as_ref().unwrap()["kandev.ai/create-nonce"])
    );
    assert!(
        state.deletes("pods", &created.name).is_empty(),
        "nothing rolled back"
    );
}

#[tokio::test]
async fn a_pod_whose_grant_admission_removed_is_deleted_by_its_exact_uid() {
    let (client, state) = fake_apiserver::start(NS);
    // A policy strips the companion's workspace mount and adds an unrelated label (allowed).
    state.lock().unwrap().mutate_pod = Some(Box::new(|pod: &mut Value| {
        pod["metadata"]["labels"]["policy.example/audited"] = json!("true");
        for c in pod["spec"]["containers"].as_array_mut().unwrap() {
            if c["name"] == "docker-engine" {
                let mounts = c["volumeMounts"].as_array_mut().unwrap();
                mounts.retain(|m| m["name"] != "kandev-workspace");
            }
        }
    }));
    let backend = backend(client);
    let id = identity();
    let pod = composed(&id, &id.workspace_claim_name());
    let error = backend.create_pod(&pod).await.unwrap_err();
    let text = kandev_harness::error_chain(&error);
    assert!(
        text.contains("admission changed what Kandev owns"),
        "{text}"
    );
    assert!(
        text.contains("docker-engine"),
        "the grant's container is named: {text}"
    );
    assert!(
        !text.contains("policy.example"),
        "an unrelated label is no mismatch: {text}"
    );
    let state = state.lock().unwrap();
    let name = pod.metadata.name.clone().unwrap();
    assert!(
        state.get("pods", &name).is_none(),
        "the mutated Pod is gone"
    );
    let deletes = state.deletes("pods", &name);
    assert_eq!(deletes.len(), 1, "{deletes:?}");
    assert_eq!(
        deletes[0]["preconditions"]["uid"],
        json!("00000000-0000-4000-8000-000000000001"),
        "deleted by the exact UID the create returned"
    );
}

#[tokio::test]
async fn an_owned_label_changed_by_admission_fails_the_create() {
    let (client, state) = fake_apiserver::start(NS);
    state.lock().unwrap().mutate_pod = Some(Box::new(|pod: &mut Value| {
        pod["metadata"]["labels"]["kandev.ai/task-id"] = json!("someone-else");
    }));
    let backend = backend(client);
    let id = identity();
    let pod = composed(&id, &id.workspace_claim_name());
    let text = kandev_harness::error_chain(&backend.create_pod(&pod).await.unwrap_err());
    assert!(text.contains("kandev.ai/task-id"), "{text}");
    assert!(
        state
            .lock()
            .unwrap()
            .get("pods", &pod.metadata.name.clone().unwrap())
            .is_none()
    );
}

#[tokio::test]
async fn delete_carries_uid_and_resource_version_and_rereads_after_a_conflict() {
    let (client, state) = fake_apiserver::start(NS);
    let backend = backend(client);
    let id = identity();
    let pod = composed(&id, &id.workspace_claim_name());
    let created = backend.create_pod(&pod).await.unwrap();
    // A status update lands between the first read and the delete.
    state.lock().unwrap().bump_after_gets = Some(0);
    backend.delete_pod(&created).await.unwrap();
    let state = state.lock().unwrap();
    assert!(state.get("pods", &created.name).is_none());
    let deletes = state.deletes("pods", &created.name);
    assert_eq!(
        deletes.len(),
        2,
        "refused once (stale resourceVersion), then deleted: {deletes:?}"
    );
    for delete in &deletes {
        assert_eq!(delete["preconditions"]["uid"], json!(created.uid));
        assert!(
            delete["preconditions"]["resourceVersion"].is_string(),
            "{delete}"
        );
    }
    assert_ne!(
        deletes[0]["preconditions"]["resourceVersion"],
        deletes[1]["preconditions"]["resourceVersion"],
        "the second delete used the resourceVersion read again"
    );
}

#[tokio::test]
async fn a_same_name_pod_with_another_uid_is_never_deleted() {
    let (client, state) = fake_apiserver::start(NS);
    let backend = backend(client);
    let id = identity();
    let name = id.pod_name();
    let foreign = state.lock().unwrap().insert(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS}}),
    );
    let ours = PodRef {
        namespace: NS.into(),
        name: name.clone(),
        uid: "00000000-0000-4000-8000-0000000000ff".into(),
    };
    let error = backend.delete_pod(&ours).await.unwrap_err();
    assert!(matches!(error, BackendError::UidMismatch { .. }), "{error}");
    let state = state.lock().unwrap();
    assert_eq!(
        state.get("pods", &name).unwrap()["metadata"]["uid"],
        json!(foreign)
    );
    assert!(state.deletes("pods", &name).is_empty());
}

#[tokio::test]
async fn claims_are_deleted_only_when_the_run_created_them() {
    let (client, state) = fake_apiserver::start(NS);
    let backend = backend(client);
    let id = identity();
    let labels = id.all_labels();
    let annotations = BTreeMap::from([("kandev.ai/create-nonce".to_owned(), create_nonce())]);
    let managed = backend
        .create_workspace(&id.workspace_claim_name(), &labels, &annotations)
        .await
        .unwrap();
    assert!(managed.created_by_run);
    {
        let state = state.lock().unwrap();
        let pvc = state.get("persistentvolumeclaims", &managed.name).unwrap();
        assert_eq!(pvc["spec"]["accessModes"], json!(["ReadWriteOnce"]));
        assert_eq!(
            pvc["spec"]["resources"]["requests"]["storage"],
            json!("10Gi")
        );
        assert_eq!(pvc["spec"]["volumeMode"], json!("Filesystem"));
        assert!(
            pvc["metadata"]["ownerReferences"].is_null(),
            "no owner reference to a Pod"
        );
    }
    // An operator's existing claim: found, mounted, never deleted.
    let existing_uid = state.lock().unwrap().insert(
        "persistentvolumeclaims",
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "team-cache", "namespace": NS}}),
    );
    let existing = backend.get_workspace("team-cache").await.unwrap().unwrap();
    assert_eq!(
        (existing.uid.as_str(), existing.created_by_run),
        (existing_uid.as_str(), false)
    );
    backend.delete_workspace(&existing).await.unwrap();
    backend.delete_workspace(&managed).await.unwrap();
    let state = state.lock().unwrap();
    assert!(state.get("persistentvolumeclaims", "team-cache").is_some());
    assert!(
        state
            .deletes("persistentvolumeclaims", "team-cache")
            .is_empty()
    );
    assert!(state.get("persistentvolumeclaims", &managed.name).is_none());
    assert_eq!(
        state.deletes("persistentvolumeclaims", &managed.name)[0]["preconditions"]["uid"],
        json!(managed.uid)
    );
}

#[tokio::test]
async fn a_claim_whose_storage_class_admission_changed_is_rolled_back() {
    let (client, state) = fake_apiserver::start(NS);
    state.lock().unwrap().mutate_pvc = Some(Box::new(|pvc: &mut Value| {
        pvc["spec"]["storageClassName"] = json!("slow");
        pvc["spec"]["accessModes"] = json!(["ReadWriteMany"]);
    }));
    let client_backend = KubeBackend::new(
        client,
        NS,
        "kube",
        "kandev-agent",
        ManagedPvc {
            size: "5Gi".into(),
            access_modes: vec!["ReadWriteOnce".into()],
            storage_class: Some("fast".into()),
        },
    );
    let id = identity();
    let error = client_backend
        .create_workspace(
            &id.workspace_claim_name(),
            &id.all_labels(),
            &BTreeMap::new(),
        )
        .await
        .unwrap_err();
    let text = kandev_harness::error_chain(&error);
    assert!(
        text.contains("spec.storageClassName") && text.contains("spec.accessModes"),
        "{text}"
    );
    assert!(
        state
            .lock()
            .unwrap()
            .get("persistentvolumeclaims", &id.workspace_claim_name())
            .is_none()
    );
}

fn claim(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> PersistentVolumeClaim {
    let list = |entries: &[(&str, &str)]| {
        (!entries.is_empty()).then(|| {
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                .collect()
        })
    };
    PersistentVolumeClaim {
        spec: Some(PersistentVolumeClaimSpec {
            resources: Some(VolumeResourceRequirements {
                requests: list(requests),
                limits: list(limits),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Upstream `sameResourceList` compares claim resources with `Quantity.Cmp`: an API server
/// that writes a size back in another unit changed nothing; `1G` is not `1Gi`.
#[test]
fn claim_sizes_are_compared_as_quantities() {
    let paths = |desired: &PersistentVolumeClaim, admitted: &PersistentVolumeClaim| {
        compare_pvc(desired, admitted)
            .into_iter()
            .map(|m| m.path)
            .collect::<Vec<_>>()
    };
    let want = claim(&[("storage", "1Gi")], &[("storage", "2Gi")]);
    assert_eq!(
        paths(
            &want,
            &claim(&[("storage", "1024Mi")], &[("storage", "2048Mi")])
        ),
        Vec::<String>::new()
    );
    assert_eq!(
        paths(
            &want,
            &claim(&[("storage", "1073741824")], &[("storage", "2Gi")])
        ),
        Vec::<String>::new()
    );
    assert_eq!(
        paths(&want, &claim(&[("storage", "1G")], &[("storage", "2Gi")])),
        vec!["spec.resources.requests[storage]"]
    );
    assert_eq!(
        paths(&want, &claim(&[("storage", "1Gi")], &[])),
        vec!["spec.resources.limits[storage]"]
    );
    assert_eq!(
        paths(
            &want,
            &claim(
                &[("storage", "1Gi"), ("example.com/iops", "100")],
                &[("storage", "2Gi")]
            )
        ),
        vec!["spec.resources.requests[example.com/iops]"]
    );
}

#[tokio::test]
async fn a_claim_whose_size_admission_rewrote_in_another_unit_is_kept() {
    let (client, state) = fake_apiserver::start(NS);
    state.lock().unwrap().mutate_pvc = Some(Box::new(|pvc: &mut Value| {
        pvc["spec"]["resources"]["requests"]["storage"] = json!("5120Mi");
    }));
    let backend = KubeBackend::new(
        client,
        NS,
        "kube",
        "kandev-agent",
        ManagedPvc {
            size: "5Gi".into(),
            access_modes: vec!["ReadWriteOnce".into()],
            storage_class: None,
        },
    );
    let id = identity();
    let created = backend
        .create_workspace(
            &id.workspace_claim_name(),
            &id.all_labels(),
            &BTreeMap::new(),
        )
        .await
        .unwrap();
    let state = state.lock().unwrap();
    assert!(
        state
            .deletes("persistentvolumeclaims", &created.name)
            .is_empty()
    );
}

#[tokio::test]
async fn terminal_cleanup_fails_closed_on_a_foreign_uid_or_an_extra_kandev_label() {
    let (client, state) = fake_apiserver::start(NS);
    let backend = backend(client);
    let id = identity();
    let pod = composed(&id, &id.workspace_claim_name());
    let created = backend.create_pod(&pod).await.unwrap();
    let recorded = RecordedSession {
        pod: created.clone(),
        owned_labels: owned_labels(&id.kandev_labels()),
        workspace: None,
        cleanup: None,
    };
    // Someone stamps a kandev.ai label Kandev did not set: the identity no longer matches.
    edit_stored(&state, "pods", &created.name, |pod| {
        pod["metadata"]["labels"]["kandev.ai/foreign"] = json!("x")
    });
    let refused = terminal_cleanup(&backend, &recorded).await.unwrap_err();
    assert!(
        refused.downcast_ref::<RecordMismatch>().is_some(),
        "{refused:#}"
    );
    assert!(state.lock().unwrap().get("pods", &created.name).is_some());

    // A same-name Pod with another UID.
    let mut other = recorded.clone();
    other.pod.uid = "00000000-0000-4000-8000-0000000000aa".into();
    edit_stored(&state, "pods", &created.name, |pod| {
        pod["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("kandev.ai/foreign");
    });
    let refused = terminal_cleanup(&backend, &other).await.unwrap_err();
    assert!(
        matches!(
            refused.downcast_ref::<RecordMismatch>(),
            Some(RecordMismatch::UidMismatch { .. })
        ),
        "{refused:#}"
    );
    {
        let state_now = state.lock().unwrap();
        assert!(state_now.get("pods", &created.name).is_some());
        assert!(
            state_now.deletes("pods", &created.name).is_empty(),
            "nothing was deleted"
        );
    }

    // The recorded identity, intact: deleted.
    terminal_cleanup(&backend, &recorded).await.unwrap();
    assert!(state.lock().unwrap().get("pods", &created.name).is_none());
}

#[tokio::test]
async fn the_readiness_wait_is_bounded_and_names_why_the_pod_is_not_running() {
    let (client, state) = fake_apiserver::start(NS);
    state.lock().unwrap().pod_status = Some(fake_apiserver::image_pull_backoff_status());
    let backend = backend(client);
    let id = identity();
    let created = backend
        .create_pod(&composed(&id, &id.workspace_claim_name()))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let error = backend
        .wait_running(&created, "kandev-agent", Duration::from_millis(800))
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    let text = error.to_string();
    assert!(
        text.contains("ImagePullBackOff") && text.contains("docker-engine"),
        "{text}"
    );

    state.lock().unwrap().pod_status = Some(fake_apiserver::running_status());
    let running = backend
        .create_pod(&composed(&identity(), "other-claim"))
        .await
        .unwrap();
    backend
        .wait_running(&running, "kandev-agent", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(
        backend.pod_ip(&running).await.unwrap().as_deref(),
        Some("10.244.0.17")
    );
    let states = backend.container_states(&running).await.unwrap();
    assert!(states.iter().all(|s| s.running), "{states:?}");
}

/// A Pod someone else deletes before it runs will not start: the wait says so at once (no
/// timeout), and that its status, whatever it said, went with it.
#[tokio::test]
async fn a_pod_deleted_before_it_runs_ends_the_wait_at_once_as_unable_to_start() {
    let (client, _state) = fake_apiserver::start(NS);
    let backend = backend(client);
    let id = identity();
    let created = backend
        .create_pod(&composed(&id, &id.workspace_claim_name()))
        .await
        .unwrap();
    backend.delete_pod(&created).await.unwrap();
    let error = backend
        .wait_running(&created, "kandev-agent", Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, BackendError::CannotStart { cause, .. }
            if cause.contains("deleted before container kandev-agent ran")),
        "{error}"
    );
}

#[tokio::test]
async fn the_label_sweep_removes_only_what_carries_the_run_and_managed_labels() {
    let (client, state) = fake_apiserver::start(NS);
    let backend = backend(client);
    let id = identity();
    let ours = backend
        .create_pod(&composed(&id, &id.workspace_claim_name()))
        .await
        .unwrap();
    let ws = backend
        .create_workspace(
            &id.workspace_claim_name(),
            &id.all_labels(),
            &BTreeMap::new(),
        )
        .await
        .unwrap();
    // Same run label, but not marked managed by the harness: never touched.
    state.lock().unwrap().insert(
        "pods",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "unmanaged", "namespace": NS,
            "labels": {"acceptance.kandev.ai/run": "20261130t000000-abcdef"}}}),
    );
    let selector = [("acceptance.kandev.ai/run", "20261130t000000-abcdef")];
    let listed = backend.list_labelled(&selector).await.unwrap();
    assert_eq!(
        listed,
        vec![
            format!("persistentvolumeclaim/{}", ws.name),
            format!("pod/{}", ours.name)
        ]
    );
    let dry = backend.remove_labelled(&selector, true).await.unwrap();
    assert_eq!(dry.len(), 2);
    assert!(
        state.lock().unwrap().get("pods", &ours.name).is_some(),
        "a dry run removes nothing"
    );
    backend.remove_labelled(&selector, false).await.unwrap();
    let state = state.lock().unwrap();
    assert!(state.get("pods", &ours.name).is_none());
    assert!(state.get("persistentvolumeclaims", &ws.name).is_none());
    assert!(state.get("pods", "unmanaged").is_some());
}

fn cluster(client: kube::Client) -> kandev_harness::backend::kube::cluster::Cluster {
    kandev_harness::backend::kube::cluster::Cluster {
        admin: client.clone(),
        session: client,
        namespace: NS.into(),
        created_namespace: false,
        context: "kind-test".into(),
        server: "https://127.0.0.1:6443".into(),
        server_version: "v1.33.4".into(),
        kind: None,
        run_id: "20261130t000000-abcdef".into(),
        access: BTreeMap::new(),
        settle: Duration::from_millis(600),
        config: None,
        executor: format!("system:serviceaccount:{NS}:kandev-acceptance-executor"),
        created_executor: true,
        executor_objects: Vec::new(),
        lease: Default::default(),
        operator_access: serde_json::Value::Null,
        pull_secret_copies: Vec::new(),
    }
}

fn grant_kandev_role(state: &std::sync::Mutex<fake_apiserver::State>) {
    use kandev_harness::backend::kube::cluster::required_access;
    use kandev_harness::pod::template::WorkspaceMode;
    state.lock().unwrap().allowed = required_access(WorkspaceMode::ManagedPvc)
        .into_iter()
        .map(|(verb, resource)| format!("{verb} {resource}"))
        .collect();
}

#[tokio::test]
async fn preflight_passes_with_kandevs_role_and_an_admitting_namespace() {
    let (client, state) = fake_apiserver::start(NS);
    grant_kandev_role(&state);
    let mut cluster = cluster(client);
    let id = identity();
    let evidence = cluster
        .preflight(
            &composed(&id, "c"),
            kandev_harness::pod::template::WorkspaceMode::ManagedPvc,
        )
        .await
        .unwrap();
    assert_eq!(evidence["executor_access"]["create pods/exec"], json!(true));
    assert_eq!(
        evidence["executor_granted_more_than_kandev_needs"],
        json!([])
    );
    // The dry run created nothing.
    assert!(state.lock().unwrap().objects("pods").is_empty());
}

#[tokio::test]
async fn preflight_names_each_missing_permission() {
    let (client, state) = fake_apiserver::start(NS);
    grant_kandev_role(&state);
    state
        .lock()
        .unwrap()
        .allowed
        .retain(|a| a != "create pods/exec" && a != "delete persistentvolumeclaims");
    let error = cluster(client)
        .preflight(
            &composed(&identity(), "c"),
            kandev_harness::pod::template::WorkspaceMode::ManagedPvc,
        )
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("create pods/exec") && text.contains("delete persistentvolumeclaims"),
        "{text}"
    );
}

#[tokio::test]
async fn preflight_reports_a_namespace_that_refuses_the_privileged_companion() {
    let (client, state) = fake_apiserver::start(NS);
    grant_kandev_role(&state);
    state.lock().unwrap().reject_privileged = true;
    let error = cluster(client)
        .preflight(
            &composed(&identity(), "c"),
            kandev_harness::pod::template::WorkspaceMode::ManagedPvc,
        )
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("violates PodSecurity"), "{text}");
    assert!(
        text.contains("pod-security.kubernetes.io/enforce=privileged"),
        "the fix is named: {text}"
    );
}

#[tokio::test]
async fn the_node_inspector_is_pinned_privileged_and_reads_the_node_read_only() {
    let (client, _) = fake_apiserver::start(NS);
    let inspector =
        kandev_harness::backend::kube::inspector::ClusterInspector::new(client, NS, "dind:1", "r1");
    let pod = inspector.inspector_pod("worker-7");
    let spec = pod.spec.unwrap();
    assert_eq!(spec.node_name.as_deref(), Some("worker-7"));
    assert_eq!(spec.host_pid, Some(true));
    let container = &spec.containers[0];
    assert_eq!(
        container.security_context.as_ref().unwrap().privileged,
        Some(true)
    );
    let mount = &container.volume_mounts.as_ref().unwrap()[0];
    assert_eq!(
        (mount.mount_path.as_str(), mount.read_only),
        ("/host/cgroup", Some(true))
    );
    let labels = pod.metadata.labels.unwrap();
    assert_eq!(labels["acceptance.kandev.ai/run"], "r1");
    assert_eq!(labels["acceptance.kandev.ai/managed"], "true");
    // Stable per node, distinct across nodes.
    assert_eq!(
        inspector.inspector_pod("worker-7").metadata.name,
        pod.metadata.name
    );
    assert_ne!(
        inspector.inspector_pod("worker-8").metadata.name,
        pod.metadata.name
    );
}

#[tokio::test]
async fn cluster_setup_creates_the_labelled_namespace_and_kandevs_executor_then_removes_them() {
    use kandev_harness::backend::kube::cluster::{Cluster, EXECUTOR, open_with, run_namespace};
    use kandev_harness::pod::template::WorkspaceMode;
    let (client, state) = fake_apiserver::start(NS);
    let config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    let run = "20261130t000000-abcdef";
    let reached = open_with(client, config, "kind-test".into()).await.unwrap();
    let cluster = Cluster::set_up(reached, None, None, WorkspaceMode::ExistingClaim, run)
        .await
        .unwrap();
    assert_eq!(cluster.server_version, "v1.33.4");
    let ns = run_namespace(run);
    assert_eq!(cluster.namespace, ns);
    assert!(cluster.created_namespace);
    {
        let state = state.lock().unwrap();
        let namespace = state.get("namespaces", &ns).unwrap();
        assert_eq!(
            namespace["metadata"]["labels"]["acceptance.kandev.ai/run"],
            json!(run)
        );
        assert_eq!(
            namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
            json!("privileged"),
            "the run's namespace admits the privileged companion"
        );
        let role = state.get("roles", EXECUTOR).unwrap();
        let rules = role["rules"].as_array().unwrap();
        assert!(
            rules
                .iter()
                .any(|r| r["resources"] == json!(["persistentvolumeclaims"])
                    && r["verbs"] == json!(["get"])),
            "existing_claim: claims get only: {rules:?}"
        );
        assert!(
            !rules
                .iter()
                .any(|r| r["verbs"].as_array().unwrap().contains(&json!("list"))),
            "no list: {rules:?}"
        );
        let binding = state.get("rolebindings", EXECUTOR).unwrap();
        assert_eq!(binding["subjects"][0]["name"], json!(EXECUTOR));
        assert_eq!(binding["roleRef"]["name"], json!(EXECUTOR));
        let account = state.get("serviceaccounts", EXECUTOR).unwrap();
        assert_eq!(account["automountServiceAccountToken"], json!(false));
        assert_eq!(
            state.tokens,
            vec![EXECUTOR.to_owned()],
            "the sessions use the account's token"
        );
    }
    let records = cluster.teardown().await;
    assert!(records.iter().all(|r| r.error.is_none()), "{records:?}");
    assert!(
        state.lock().unwrap().get("namespaces", &ns).is_none(),
        "the run's namespace is gone"
    );
}

#[tokio::test]
async fn a_named_namespace_must_exist_and_only_the_executor_objects_are_removed_from_it() {
    use kandev_harness::backend::kube::cluster::{Cluster, ClusterError, EXECUTOR, open_with};
    use kandev_harness::pod::template::WorkspaceMode;
    let (client, state) = fake_apiserver::start(NS);
    let config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    let reached = open_with(client.clone(), config.clone(), "c".into())
        .await
        .unwrap();
    let missing = Cluster::set_up(
        reached,
        None,
        Some("absent"),
        WorkspaceMode::ManagedPvc,
        "r",
    )
    .await
    .err()
    .unwrap();
    assert!(
        matches!(missing, ClusterError::NamespaceMissing { .. }),
        "{missing}"
    );
    assert!(state.lock().unwrap().is_empty(), "nothing was created");

    state.lock().unwrap().insert(
        "namespaces",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kandev-agents"}}),
    );
    let reached = open_with(client, config, "c".into()).await.unwrap();
    let cluster = Cluster::set_up(
        reached,
        None,
        Some("kandev-agents"),
        WorkspaceMode::ManagedPvc,
        "r",
    )
    .await
    .unwrap();
    assert!(!cluster.created_namespace);
    cluster.teardown().await;
    let state = state.lock().unwrap();
    assert!(
        state.get("namespaces", "kandev-agents").is_some(),
        "the operator's namespace stays"
    );
    for kind in ["roles", "rolebindings", "serviceaccounts"] {
        assert!(state.get(kind, EXECUTOR).is_none(), "{kind} removed");
    }
}

#[tokio::test]
async fn the_client_has_no_read_timeout_that_would_cut_exec_and_port_forward_streams() {
    use kandev_harness::backend::kube::cluster::client_for;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:6443'}\ncontexts:\n- name: c\n  context: {cluster: c, user: u}\ncurrent-context: c\nusers:\n- name: u\n  user: {token: t}\n",
    )
    .unwrap();
    let (_client, config, _) = client_for(Some(&path), Some("c")).await.unwrap();
    // kube's read timeout wraps the socket, which exec and port-forward keep after the
    // upgrade: a command answering after it would be cut. Each call has its own deadline.
    assert_eq!(config.read_timeout, None);
    let connect = config.connect_timeout.unwrap();
    assert!(
        connect <= std::time::Duration::from_secs(10),
        "an unreachable cluster still fails fast: {connect:?}"
    );
}

#[tokio::test]
async fn a_request_the_api_server_never_answers_ends_at_the_answer_bound() {
    use kandev_harness::backend::kube::cluster::{ClientBounds, client_for_bounded};
    // Accepts connections and never answers (a hung API server).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(
        &path,
        format!("apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: 'http://127.0.0.1:{port}'}}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\nusers:\n- name: u\n  user: {{token: t}}\n"),
    )
    .unwrap();
    let bounds = ClientBounds {
        connect: Duration::from_secs(2),
        answer: Duration::from_millis(300),
    };
    let (client, config, _) = client_for_bounded(Some(&path), Some("c"), bounds)
        .await
        .unwrap();
    assert_eq!(config.read_timeout, None);
    let started = std::time::Instant::now();
    let answered = tokio::time::timeout(Duration::from_secs(10), client.apiserver_version()).await;
    assert!(
        matches!(answered, Ok(Err(_))),
        "the request fails by itself: {answered:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn preflight_waits_until_a_just_created_role_binding_is_effective() {
    use kandev_harness::backend::kube::cluster::required_access;
    use kandev_harness::pod::template::WorkspaceMode;
    let (client, state) = fake_apiserver::start(NS);
    grant_kandev_role(&state);
    // The authorizer has not seen the binding yet: two whole rounds of reviews say no.
    state.lock().unwrap().ssar_denials = 2 * required_access(WorkspaceMode::ManagedPvc).len();
    let mut cluster = cluster(client);
    cluster.settle = Duration::from_secs(10);
    let evidence = cluster
        .preflight(&composed(&identity(), "c"), WorkspaceMode::ManagedPvc)
        .await
        .unwrap();
    for (verb, resource) in required_access(WorkspaceMode::ManagedPvc) {
        assert_eq!(
            evidence["executor_access"][format!("{verb} {resource}")],
            json!(true),
            "{evidence}"
        );
    }
    let state = state.lock().unwrap();
    assert_eq!(state.ssar_denials, 0, "the denials were asked through");
    assert!(
        state
            .requests
            .iter()
            .any(|(m, p, _)| m == "POST" && p.contains("/pods?") && p.contains("dryRun=All")),
        "the dry run followed"
    );
}

#[tokio::test]
async fn preflight_reports_a_permission_still_refused_after_the_bound_as_forbidden() {
    use kandev_harness::backend::kube::cluster::ClusterError;
    use kandev_harness::pod::template::WorkspaceMode;
    let (client, state) = fake_apiserver::start(NS);
    grant_kandev_role(&state);
    state
        .lock()
        .unwrap()
        .allowed
        .retain(|a| a != "create pods/portforward");
    let mut cluster = cluster(client);
    let started = std::time::Instant::now();
    let error = cluster
        .preflight(&composed(&identity(), "c"), WorkspaceMode::ManagedPvc)
        .await
        .unwrap_err();
    let waited = started.elapsed();
    match &error {
        ClusterError::Forbidden { missing, .. } => {
            assert_eq!(
                missing,
                &vec!["create pods/portforward".to_owned()],
                "{error}"
            );
        }
        other => panic!("not Forbidden: {other}"),
    }
    assert!(
        waited >= cluster.settle && waited < Duration::from_secs(5),
        "refused after the bound, not at once and not forever: {waited:?}"
    );
    assert!(
        !state
            .lock()
            .unwrap()
            .requests
            .iter()
            .any(|(m, p, _)| m == "POST" && p.contains("dryRun=All")),
        "no dry run without the permissions"
    );
}

#[tokio::test]
async fn preflight_waits_for_the_namespaces_default_service_account_before_the_dry_run() {
    use kandev_harness::pod::template::WorkspaceMode;
    let (client, state) = fake_apiserver::start(NS);
    grant_kandev_role(&state);
    // A namespace just created: the service-account controller has not made `default` yet.
    state.lock().unwrap().default_service_account_missing_gets = 1;
    let mut cluster = cluster(client);
    cluster.settle = Duration::from_secs(10);
    cluster
        .preflight(&composed(&identity(), "c"), WorkspaceMode::ManagedPvc)
        .await
        .unwrap();
    let state = state.lock().unwrap();
    let sa_reads: Vec<usize> = state
        .requests
        .iter()
        .enumerate()
        .filter(|(_, (m, p, _))| m == "GET" && p.contains("/serviceaccounts/default"))
        .map(|(i, _)| i)
        .collect();
    let dry_run = state
        .requests
        .iter()
        .position(|(m, p, _)| m == "POST" && p.contains("dryRun=All"))
        .expect("the dry run ran");
    assert_eq!(sa_reads.len(), 2, "one 404, then found: {sa_reads:?}");
    assert!(
        sa_reads.iter().all(|i| *i < dry_run),
        "the dry run follows the service account"
    );
}

fn claim_uid(state: &std::sync::Mutex<fake_apiserver::State>, name: &str) -> Value {
    state
        .lock()
        .unwrap()
        .get("persistentvolumeclaims", name)
        .unwrap()["metadata"]["uid"]
        .clone()
}

/// Changes the fake API server's stored `resource` object `name` behind the backend's back
/// (as an admission hook, a controller or another actor would).
fn edit_stored(
    state: &std::sync::Mutex<fake_apiserver::State>,
    resource: &str,
    name: &str,
    edit: impl FnOnce(&mut Value),
) {
    state.lock().unwrap().edit(resource, name, edit);
}

fn edit_claim(
    state: &std::sync::Mutex<fake_apiserver::State>,
    name: &str,
    edit: impl FnOnce(&mut Value),
) {
    edit_stored(state, "persistentvolumeclaims", name, edit);
}

/// The position of the first request matching, in the fake's log.
fn first_request(
    state: &fake_apiserver::State,
    what: impl Fn(&str, &str) -> bool,
) -> Option<usize> {
    state.requests.iter().position(|(m, p, _)| what(m, p))
}

#[tokio::test]
async fn terminal_cleanup_deletes_nothing_when_the_claim_has_a_foreign_uid() {
    use kandev_harness::session::CleanupScript;
    let (client, state) = fake_apiserver::start(NS);
    let backend = backend(client);
    let id = identity();
    let annotations = BTreeMap::from([("kandev.ai/create-nonce".to_owned(), create_nonce())]);
    let workspace = backend
        .create_workspace(&id.workspace_claim_name(), &id.all_labels(), &annotations)
        .await
        .unwrap();
    let pod = backend
        .create_pod(&composed(&id, &workspace.name))
        .await
        .unwrap();
    let recorded = RecordedSession {
        pod: pod.clone(),
        owned_labels: owned_labels(&id.kandev_labels()),
        workspace: Some(workspace.clone()),
        cleanup: Some(CleanupScript {
            container: "kandev-agent".into(),
            script: "rm -rf /workspace/.cache".into(),
            timeout: Duration::from_secs(5),
        }),
    };
    let exec = |m: &str, p: &str| {
        let _ = m;
        p.contains(&format!("/pods/{}/exec", pod.name))
    };
    // The claim of that name is another object now (deleted and re-created by someone else).
    let ours = claim_uid(&state, &workspace.name);
    edit_claim(&state, &workspace.name, |c| {
        c["metadata"]["uid"] = json!("00000000-0000-4000-8000-0000000000cc")
    });
    let refused = terminal_cleanup(&backend, &recorded).await.unwrap_err();
    {
        let state = state.lock().unwrap();
        assert!(
            state.get("pods", &pod.name).is_some(),
            "the Pod is NOT deleted either ({refused:#})"
        );
        assert!(
            matches!(
                refused.downcast_ref::<RecordMismatch>(),
                Some(RecordMismatch::WorkspaceUidMismatch { .. })
            ),
            "a refusal naming the claim, not a failed delete: {refused:#}"
        );
        assert!(
            state.deletes("pods", &pod.name).is_empty(),
            "no Pod delete was sent"
        );
        assert!(
            state
                .deletes("persistentvolumeclaims", &workspace.name)
                .is_empty(),
            "no claim delete was sent"
        );
        assert_eq!(first_request(&state, exec), None, "no cleanup script ran");
    }

    // Our claim again, but stamped with a kandev.ai label Kandev did not set.
    edit_claim(&state, &workspace.name, |c| {
        c["metadata"]["uid"] = ours.clone();
        c["metadata"]["labels"]["kandev.ai/foreign-owner"] = json!("someone-else");
    });
    let refused = terminal_cleanup(&backend, &recorded).await.unwrap_err();
    assert!(
        matches!(
            refused.downcast_ref::<RecordMismatch>(),
            Some(RecordMismatch::WorkspaceLabelsDiffer { .. })
        ),
        "{refused:#}"
    );
    assert!(
        format!("{refused:#}").contains("kandev.ai/foreign-owner"),
        "{refused:#}"
    );
    {
        let state = state.lock().unwrap();
        assert!(state.get("pods", &pod.name).is_some());
        assert!(state.deletes("pods", &pod.name).is_empty());
        assert_eq!(first_request(&state, exec), None, "no cleanup script ran");
    }

    // The recorded identity, intact: verify both, run the cleanup step, then delete.
    edit_claim(&state, &workspace.name, |c| {
        c["metadata"]["labels"]
            .as_object_mut()
            .unwrap()
            .remove("kandev.ai/foreign-owner");
    });
    let verified_from = state.lock().unwrap().requests.len();
    terminal_cleanup(&backend, &recorded).await.unwrap();
    let state = state.lock().unwrap();
    assert!(state.get("pods", &pod.name).is_none());
    assert!(
        state
            .get("persistentvolumeclaims", &workspace.name)
            .is_none()
    );
    let position = |what: &dyn Fn(&str, &str) -> bool| {
        state
            .requests
            .iter()
            .enumerate()
            .skip(verified_from)
            .find(|(_, (m, p, _))| what(m, p))
            .map(|(i, _)| i)
            .unwrap()
    };
    let claim_read = position(&|m, p| {
        m == "GET" && p.contains(&format!("/persistentvolumeclaims/{}", workspace.name))
    });
    let script = position(&exec);
    let pod_delete = position(&|m, p| m == "DELETE" && p.contains(&format!("/pods/{}", pod.name)));
    let claim_delete = position(&|m, p| {
        m == "DELETE" && p.contains(&format!("/persistentvolumeclaims/{}", workspace.name))
    });
    assert!(
        claim_read < script && script < pod_delete && pod_delete < claim_delete,
        "verify the claim, run the cleanup step, delete the Pod, then the claim: {claim_read} {script} {pod_delete} {claim_delete}"
    );
}

/// A Pod of the harness itself (the shape of `network::mtu`'s HTTPS peer): no main
/// container, no Kandev labels.
fn helper_pod(name: &str, labels: Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {"restartPolicy": "Never", "automountServiceAccountToken": false,
            "containers": [{"name": "peer", "image": "kandev-acceptance/daemon:0",
                "command": ["/bin/sh", "-c", "exec sleep 600"]}]},
    }))
    .unwrap()
}

#[tokio::test]
async fn helper_pods_are_not_compared_as_task_pods_and_must_be_findable() {
    let (client, state) = fake_apiserver::start(NS);
    let backend = backend(client);
    let labels = json!({"acceptance.kandev.ai/managed": "true",
        "acceptance.kandev.ai/run": "20261130t000000-abcdef",
        "acceptance.kandev.ai/scenario": "network.mtu"});
    // As a task Pod it could never pass Kandev's comparison: it has no main container.
    let as_task = backend
        .create_pod(&helper_pod("kandev-acceptance-peer-0a1b", labels.clone()))
        .await;
    let text = kandev_harness::error_chain(&as_task.unwrap_err());
    assert!(
        text.contains("admission changed what Kandev owns"),
        "{text}"
    );
    assert!(
        state
            .lock()
            .unwrap()
            .get("pods", "kandev-acceptance-peer-0a1b")
            .is_none(),
        "rolled back"
    );
    // As a helper it is created as requested, and stays.
    let created = backend
        .create_helper_pod(&helper_pod("kandev-acceptance-peer-0a1b", labels))
        .await
        .unwrap();
    {
        let state = state.lock().unwrap();
        let stored = state.get("pods", &created.name).unwrap();
        assert_eq!(stored["metadata"]["uid"], json!(created.uid));
        assert_eq!(
            stored["metadata"]["labels"]["acceptance.kandev.ai/run"],
            json!("20261130t000000-abcdef")
        );
    }
    // One that teardown, the sweep and gc could not find is refused before any write.
    let unlabelled = helper_pod("kandev-acceptance-peer-9z9z", json!({"app": "peer"}));
    let refused = backend.create_helper_pod(&unlabelled).await.unwrap_err();
    let text = kandev_harness::error_chain(&refused);
    assert!(text.contains("acceptance.kandev.ai/managed"), "{text}");
    assert!(
        state
            .lock()
            .unwrap()
            .get("pods", "kandev-acceptance-peer-9z9z")
            .is_none(),
        "refused before it reached the API server"
    );
}

fn launch_settings(client: kube::Client) -> kandev_harness::session::LaunchSettings {
    let text = std::fs::read_to_string(kandev_harness::paths::default_template()).unwrap();
    let rendered = kandev_harness::pod::template::render(&text, "w:0", "d:0");
    kandev_harness::session::LaunchSettings {
        backend: std::sync::Arc::new(backend(client)),
        namespace: NS.into(),
        template: kandev_harness::pod::template::parse(&rendered.text).unwrap(),
        main_container: "kandev-agent".into(),
        daemon_container: "docker-engine".into(),
        prepare_script: String::new(),
        agent_binary: std::sync::Arc::new(Vec::new()),
        pod_ready_timeout: Duration::from_millis(800),
        prepare_timeout: Duration::from_secs(1),
        connect_timeout: Duration::from_secs(1),
        profile_env: BTreeMap::new(),
        existing_claim: None,
        launch_log: Default::default(),
    }
}

/// Kandev's `rollbackAfterFailure`: a launch whose Pod never runs deletes the Pod and the
/// claim it created, by UID, and fails naming why the Pod did not run; its timing records
/// say so (the storage stage a success, pod_ready an error, the completed record naming it).
#[tokio::test]
async fn a_launch_that_fails_at_pod_ready_rolls_back_its_pod_and_claim() {
    use kandev_harness::session::cleanup::CleanupStack;
    use kandev_harness::session::timing::{COMPLETED_RECORD, Outcome};
    use kandev_harness::session::{Session, SessionOptions};
    let (client, state) = fake_apiserver::start(NS);
    state.lock().unwrap().pod_status = Some(fake_apiserver::image_pull_backoff_status());
    let settings = launch_settings(client);
    let id = identity();
    let error = Session::launch(
        &settings,
        &CleanupStack::default(),
        id.clone(),
        &SessionOptions::default(),
    )
    .await
    .err()
    .unwrap();
    let text = format!("{error:#}");
    assert!(
        text.contains("pod_ready") && text.contains("ImagePullBackOff"),
        "{text}"
    );
    let records = settings.launch_log.for_session(&id.task_id, &id.session_id);
    let seen: Vec<(Option<&str>, Outcome)> = records
        .iter()
        .map(|r| (r.stage.as_deref(), r.outcome))
        .collect();
    assert_eq!(
        seen,
        [
            (Some("storage"), Outcome::Success),
            (Some("pod_ready"), Outcome::Error),
            (None, Outcome::Error)
        ]
    );
    let completed = records.last().unwrap();
    assert_eq!(completed.msg, COMPLETED_RECORD);
    assert_eq!(completed.failed_stage.as_deref(), Some("pod_ready"));
    let state = state.lock().unwrap();
    assert!(
        state.get("pods", &id.pod_name()).is_none(),
        "the Pod was not rolled back"
    );
    assert_eq!(state.deletes("pods", &id.pod_name()).len(), 1);
    assert!(
        state
            .get("persistentvolumeclaims", &id.workspace_claim_name())
            .is_none(),
        "the claim the launch created was not rolled back"
    );
}

/// Kandev's reconnect after a backend restart reaches a Pod only through its recorded
/// identity: a foreign `kandev.ai` label or another UID under the recorded name fails closed,
/// so does a claim with another UID or none at all; a missing Pod is the replacement path's
/// case; none of them deletes or changes anything.
#[tokio::test]
async fn reconnect_from_the_inventory_fails_closed_on_a_foreign_pod_and_names_a_missing_one() {
    use kandev_harness::pod::template::WorkspaceMode;
    use kandev_harness::session::snapshot::LaunchSnapshot;
    use kandev_harness::session::{RecordedPodMissing, Session, SessionInventory};
    let (client, state) = fake_apiserver::start(NS);
    let settings = launch_settings(client);
    let id = identity();
    let created = settings
        .backend
        .create_pod(&composed(&id, &id.workspace_claim_name()))
        .await
        .unwrap();
    let claim = settings
        .backend
        .create_workspace(
            &id.workspace_claim_name(),
            &id.all_labels(),
            &BTreeMap::new(),
        )
        .await
        .unwrap();
    let row = SessionInventory {
        identity: id.clone(),
        pod: created.clone(),
        owned_labels: owned_labels(&id.kandev_labels()),
        workspace: Some(claim.clone()),
        bootstrap_nonce: create_nonce(),
        token: Some("t".into()),
        instance: None,
        snapshot: LaunchSnapshot::record(
            &settings.template,
            "kandev-agent",
            WorkspaceMode::ManagedPvc,
            Arch::Amd64,
        )
        .unwrap(),
        session_env: BTreeMap::new(),
        stages: Vec::new(),
    };
    let labels = |state: &std::sync::Mutex<fake_apiserver::State>| {
        state.lock().unwrap().get("pods", &created.name).unwrap()["metadata"]["labels"].clone()
    };
    let before = labels(&state);

    edit_stored(&state, "pods", &created.name, |pod| {
        pod["metadata"]["labels"]["kandev.ai/foreign-owner"] = json!("true")
    });
    let refused = Session::reattach(&settings, row.clone())
        .await
        .err()
        .unwrap();
    assert!(
        matches!(
            refused.downcast_ref::<RecordMismatch>(),
            Some(RecordMismatch::LabelsDiffer { .. })
        ),
        "{refused:#}"
    );
    edit_stored(&state, "pods", &created.name, |pod| {
        pod["metadata"]["labels"] = before.clone()
    });

    let mut foreign = row.clone();
    foreign.pod.uid = "00000000-0000-4000-8000-0000000000aa".into();
    let refused = Session::reattach(&settings, foreign).await.err().unwrap();
    assert!(
        matches!(
            refused.downcast_ref::<RecordMismatch>(),
            Some(RecordMismatch::UidMismatch { .. })
        ),
        "{refused:#}"
    );
    assert_eq!(labels(&state), before, "nothing was changed");
    assert!(
        state
            .lock()
            .unwrap()
            .deletes("pods", &created.name)
            .is_empty()
    );

    let mut other_claim = row.clone();
    other_claim.workspace.as_mut().unwrap().uid = "00000000-0000-4000-8000-0000000000bb".into();
    let refused = Session::reattach(&settings, other_claim)
        .await
        .err()
        .unwrap();
    assert!(
        matches!(
            refused.downcast_ref::<RecordMismatch>(),
            Some(RecordMismatch::WorkspaceUidMismatch { .. })
        ),
        "{refused:#}"
    );
    settings.backend.delete_workspace(&claim).await.unwrap();
    let refused = Session::reattach(&settings, row.clone())
        .await
        .err()
        .unwrap();
    assert!(
        format!("{refused:#}").contains("recorded workspace claim"),
        "{refused:#}"
    );
    assert!(
        state
            .lock()
            .unwrap()
            .deletes("pods", &created.name)
            .is_empty()
    );

    settings.backend.delete_pod(&created).await.unwrap();
    let missing = Session::reattach(&settings, row).await.err().unwrap();
    assert!(
        missing.downcast_ref::<RecordedPodMissing>().is_some(),
        "{missing:#}"
    );
}

/// Issue 40, item 9: a create the API server answered 504 (its request timeout: the write may
/// have been done) is sent again by the harness's retry policy (`cluster::resilience`), and the
/// repeat is answered 409 AlreadyExists. The object of that
/// name carries this create's nonce, so this create made it: taken as created, for the task
/// Pod and for the workspace claim. One without it (someone else's) leaves the 409 standing.
/// The double answers a fault without serving the request, so the object the first attempt
/// made is created beforehand, from the same body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_answered_504_then_409_is_taken_when_the_object_carries_its_nonce() {
    use kandev_harness::backend::kube::cluster::{self, Cluster};
    use kandev_harness::pod::template::WorkspaceMode;
    use kandev_test_support::cluster_double::{self, Fault};
    use kandev_test_support::on_double::session_backend;
    use kube::ResourceExt;
    use kube::api::{Api, PostParams};

    let double = cluster_double::start(None).await.unwrap();
    // Set up as a managed-claim run (the executor may create claims).
    let reached = cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap();
    let run = format!("nonce-{}", kandev_harness::pod::identity::random_hex(4));
    let cluster = Cluster::set_up(reached, None, None, WorkspaceMode::ManagedPvc, &run)
        .await
        .unwrap();
    let ns = cluster.namespace.clone();
    let backend = session_backend(&cluster, "kandev-agent");
    let faults = double.state.faults();
    let timeout = || Fault::Status {
        code: 504,
        retry_after: None,
    };
    let id = SessionIdentity::new("20261130t000000-abcdef", "lifecycle::nonce", 1);

    // The claim.
    let claim = id.workspace_claim_name();
    let annotations = BTreeMap::from([("kandev.ai/create-nonce".to_owned(), create_nonce())]);
    let desired = backend.managed_pvc(&claim, &id.all_labels(), &annotations);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(cluster.admin.clone(), &ns);
    let made = claims
        .create(&PostParams::default(), &desired)
        .await
        .unwrap();
    faults.inject(
        Some("POST"),
        "/persistentvolumeclaims?&fieldManager",
        timeout(),
        1,
    );
    let workspace = backend
        .create_workspace(&claim, &id.all_labels(), &annotations)
        .await
        .unwrap();
    assert_eq!(Some(workspace.uid.clone()), made.uid());
    assert!(workspace.created_by_run);

    // The task Pod.
    let pod = task_pod(TaskPod::new(&ns, &id)).unwrap();
    let pods: Api<Pod> = Api::namespaced(cluster.admin.clone(), &ns);
    let made = pods.create(&PostParams::default(), &pod).await.unwrap();
    faults.inject(Some("POST"), "/pods?&fieldManager", timeout(), 1);
    let created = backend.create_pod(&pod).await.unwrap();
    assert_eq!(Some(created.uid.clone()), made.uid());

    // Someone else's Pod of the name (another nonce): the 409 stands.
    let other = SessionIdentity::new("20261130t000000-abcdef", "lifecycle::other", 1);
    let pod = task_pod(TaskPod::new(&ns, &other)).unwrap();
    let mut theirs = pod.clone();
    theirs
        .annotations_mut()
        .insert("kandev.ai/create-nonce".into(), create_nonce());
    pods.create(&PostParams::default(), &theirs).await.unwrap();
    faults.inject(Some("POST"), "/pods?&fieldManager", timeout(), 1);
    let refused = kandev_harness::error_chain(&backend.create_pod(&pod).await.unwrap_err());
    assert!(
        refused.contains("already exists (without this create's nonce)"),
        "{refused}"
    );

    // Each create was answered 504 once, and sent again.
    let fired: Vec<String> = faults
        .injected()
        .into_iter()
        .filter(|f| f.contains("code: 504"))
        .collect();
    assert_eq!(fired.len(), 3, "{fired:?}");
    cluster.teardown().await;
}
