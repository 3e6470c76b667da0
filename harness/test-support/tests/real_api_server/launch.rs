//! What `launch` creates, judged by a real API server (issue 39: the double no longer
//! validates a Job, kubernetes `pkg/apis/batch/validation` on the real server decides): the
//! launch plan's Job, Roles and RoleBinding dry-run created in a namespace of the test's own
//! are admitted. The controls, so that the test can fail: a template whose `restartPolicy`
//! is `Always`, a negative `backoffLimit` and a template without containers are refused 422
//! `Invalid` naming the field, and so is each Role rule `executor_role_file` refuses before
//! anything is created (without verbs, with nonResourceURLs, without `apiGroups` or
//! resources: the harness's check is the real API server's, not stricter, not laxer).

use crate::namespace;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kandev_harness::backend::kube::cluster::{EXECUTOR, executor_role, executor_role_file};
use kandev_harness::backend::kube::launch::LaunchPlan;
use kandev_harness::pod::identity::new_run_id;
use kandev_harness::pod::template::WorkspaceMode;
use kandev_test_support::real_api_server;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

fn dry() -> PostParams {
    PostParams {
        dry_run: true,
        field_manager: None,
    }
}

/// The refusal `result` must be, 422 `Invalid`: its message.
fn invalid<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> String {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(
                (status.code, status.reason.as_str()),
                (422, "Invalid"),
                "{}",
                status.message
            );
            status.message
        }
        other => panic!("expected a 422, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launchs_job_and_roles_are_admitted_by_a_real_api_server() {
    let client = real_api_server::shared().admin_client().await;
    let run_id = new_run_id();
    let ns = format!("kandev-launch-{run_id}");
    namespace(&client, &ns, json!({})).await;
    // No pull secrets: the context namespace the Job names for them is not read.
    let plan = LaunchPlan {
        run_id: run_id.clone(),
        namespace: Some(ns.clone()),
        harness_image: "kandev-acceptance/harness:test".into(),
        harness_arch: Some(kandev_harness::pod::compose::Arch::of_this_machine()),
        executor_role: executor_role(&ns, WorkspaceMode::ManagedPvc, &BTreeMap::new()),
        node_inspector: true,
        job_timeout: Duration::from_secs(3600),
        start_timeout: Duration::from_secs(300),
        hold: Duration::from_secs(600),
        inputs: Vec::new(),
        gc_where: "kandev-acceptance gc --backend kube".into(),
        run_args: vec!["--exact".into(), "daemon::socket_only".into()],
        pull_secrets: Vec::new(),
    };

    let jobs = Api::<Job>::namespaced(client.clone(), &ns);
    let roles = Api::<Role>::namespaced(client.clone(), &ns);
    let bindings = Api::<RoleBinding>::namespaced(client.clone(), &ns);
    if let Err(e) = jobs.create(&dry(), &plan.job("default")).await {
        panic!("launch's Job: {e}");
    }
    for role in [plan.executor_role(), plan.bookkeeper_role()] {
        if let Err(e) = roles.create(&dry(), &role).await {
            panic!("launch's Role {:?}: {e}", role.metadata.name);
        }
    }
    if let Err(e) = bindings.create(&dry(), &plan.binding(EXECUTOR)).await {
        panic!("launch's RoleBinding: {e}");
    }

    // The controls.
    let with_spec = |change: &dyn Fn(&mut serde_json::Value)| -> Job {
        let mut job = serde_json::to_value(plan.job("default")).unwrap();
        change(&mut job["spec"]);
        serde_json::from_value(job).unwrap()
    };
    let always = with_spec(&|spec| spec["template"]["spec"]["restartPolicy"] = json!("Always"));
    let message = invalid(jobs.create(&dry(), &always).await);
    assert!(
        message.contains("spec.template.spec.restartPolicy: Required value"),
        "{message}"
    );
    let negative = with_spec(&|spec| spec["backoffLimit"] = json!(-1));
    let message = invalid(jobs.create(&dry(), &negative).await);
    assert!(
        message.contains("spec.backoffLimit: Invalid value: -1"),
        "{message}"
    );
    let empty = with_spec(&|spec| spec["template"]["spec"]["containers"] = json!([]));
    let message = invalid(jobs.create(&dry(), &empty).await);
    assert!(
        message.contains("spec.template.spec.containers: Required value"),
        "{message}"
    );
    // Each rule the harness refuses in an operator's Role file, the real API server refuses
    // too, naming the same field (and the launch plan's own rules above, it admits).
    for (rule, field) in [
        (
            "{apiGroups: [''], resources: [pods], verbs: []}",
            "rules[0].verbs",
        ),
        (
            "{nonResourceURLs: [/metrics], verbs: [get]}",
            "rules[0].nonResourceURLs",
        ),
        (
            "{resources: [pods], verbs: [get, create]}",
            "rules[0].apiGroups",
        ),
        ("{apiGroups: [''], verbs: [get]}", "rules[0].resources"),
    ] {
        let text = format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: x}}\nrules:\n- {rule}\n"
        );
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), &text).unwrap();
        let refused = executor_role_file(file.path(), &ns, &plan.labels());
        assert!(refused.is_err(), "the harness admitted {rule}");
        let mut role: Role = serde_yaml::from_str(&text).unwrap();
        role.metadata.name = Some(EXECUTOR.into());
        let message = invalid(roles.create(&dry(), &role).await);
        assert!(message.contains(&format!("{field}: ")), "{rule}: {message}");
    }

    Api::<k8s_openapi::api::core::v1::Namespace>::all(client)
        .delete(&ns, &DeleteParams::default())
        .await
        .unwrap();
}
