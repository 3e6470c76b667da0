//! Kandev's connection test (foundation 14) of the `kube` backend's executor identity, asked
//! with the sessions' own client, as Kandev's backend asks it with its own (`testConnection`:
//! configuration, discovery, rbac), plus who the identity is (a SelfSubjectReview) and all it
//! may do in the namespace (a SelfSubjectRulesReview). Admission and streaming, the rest of
//! Kandev's steps, are what every session of the run does (the admission comparison, exec
//! and port-forward). It only asks: the scenario judges the answers.

use super::KubeBackend;
use super::cluster::{NOT_NEEDED, can_i, required_access};
use super::errors::{is_status, other};
use crate::backend::Result;
use crate::backend::connection::{AccessAnswer, AuthMode, ConnectionStep, ConnectionTest};
use crate::pod::template::WorkspaceMode;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::authorization::v1::{SelfSubjectRulesReview, SelfSubjectRulesReviewSpec};
use kube::api::{Api, PostParams};
use std::time::Instant;

/// A step that began at `started` and ended now: its detail, or its error.
fn step(key: &str, started: Instant, ended: std::result::Result<String, String>) -> ConnectionStep {
    let duration_ms = started.elapsed().as_millis() as u64;
    let success = ended.is_ok();
    let (detail, error) = match ended {
        Ok(detail) => (detail, None),
        Err(error) => (format!("{key} failed"), Some(error)),
    };
    ConnectionStep {
        key: key.into(),
        success,
        duration_ms,
        detail,
        error,
    }
}

/// The SelfSubjectAccessReviews of `permissions` in the backend's namespace.
async fn access(backend: &KubeBackend, permissions: &[(&str, &str)]) -> Result<Vec<AccessAnswer>> {
    let mut answers = Vec::new();
    for (verb, resource) in permissions {
        let allowed = can_i(&backend.client, &backend.namespace, verb, resource)
            .await
            .map_err(|e| other(format!("SelfSubjectAccessReview {verb} {resource}"), e))?;
        answers.push(AccessAnswer {
            verb: (*verb).into(),
            resource: (*resource).into(),
            allowed,
        });
    }
    Ok(answers)
}

pub(super) async fn connection_test(
    backend: &KubeBackend,
    mode: WorkspaceMode,
) -> Result<Option<ConnectionTest>> {
    let client = &backend.client;
    let namespace = backend.namespace.clone();
    let mut steps = vec![step(
        "configuration",
        Instant::now(),
        Ok(format!(
            "{} credentials of the sessions' client, namespace {namespace}",
            match backend.auth_mode {
                AuthMode::InCluster => "the Pod's service account (in cluster)",
                AuthMode::Kubeconfig => "kubeconfig",
            }
        )),
    )];

    let started = Instant::now();
    let version = client
        .apiserver_version()
        .await
        .map(|info| info.git_version)
        .map_err(|e| crate::error_chain(&e));
    steps.push(step("discovery", started, version.clone()));

    // Who the API server says the client is. Not served before 1.28: then unnamed, not
    // failed; refused, it fails (every authenticated user may ask it).
    let started = Instant::now();
    let review = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await;
    let (identity, named) = match review {
        Ok(review) => {
            let name = review.status.and_then(|s| s.user_info?.username);
            let named = match (&name, &backend.executor) {
                (None, _) => Err("the SelfSubjectReview names no user".to_owned()),
                (Some(name), Some(expected)) if name != expected => Err(format!(
                    "the sessions' client is {name}, not the executor the run set up ({expected})"
                )),
                (Some(name), _) => Ok(format!("SelfSubjectReview: {name}")),
            };
            (name, named)
        }
        Err(e) if is_status(&e, 404) => (
            None,
            Ok(
                "SelfSubjectReview not served (Kubernetes before 1.28): the identity is unnamed"
                    .into(),
            ),
        ),
        Err(e) => (None, Err(crate::error_chain(&e))),
    };
    steps.push(step("identity", started, named));

    let started = Instant::now();
    let required = access(backend, &required_access(mode)).await?;
    let missing: Vec<String> = required
        .iter()
        .filter(|a| !a.allowed)
        .map(AccessAnswer::permission)
        .collect();
    steps.push(step(
        "rbac",
        started,
        if missing.is_empty() {
            Ok(format!(
                "SelfSubjectAccessReview allows all {} permissions Kandev needs",
                required.len()
            ))
        } else {
            Err(format!("denied: {}", missing.join(", ")))
        },
    ));
    let not_needed = access(backend, &NOT_NEEDED).await?;

    // All the identity may do in the namespace, from every authorizer that can list it.
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(namespace.clone()),
        },
        ..Default::default()
    };
    let (rules, rules_unavailable) = match Api::<SelfSubjectRulesReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
    {
        Ok(review) => (review.status, None),
        Err(e) if is_status(&e, 404) => (None, Some("SelfSubjectRulesReview not served".into())),
        Err(e) => (
            None,
            Some(format!(
                "SelfSubjectRulesReview: {}",
                crate::error_chain(&e)
            )),
        ),
    };

    Ok(Some(ConnectionTest {
        success: steps.iter().all(|s| s.success),
        auth_mode: backend.auth_mode,
        server_version: version.ok(),
        namespace,
        executor: backend.executor.clone(),
        identity,
        steps,
        required,
        not_needed,
        rules,
        rules_unavailable,
    }))
}
