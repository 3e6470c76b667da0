//! Kandev's launch stages `storage` (the workspace the Pod mounts) and `pod_ready` (the Pod
//! composed, created and running), and the rollback of a launch that failed in them.

use super::cleanup::{CleanupStack, CleanupTarget};
use super::snapshot::LaunchSnapshot;
use super::timing::LaunchTiming;
use super::{LaunchSettings, Session, SessionOptions};
use crate::backend::{Backend, PodRef, WorkspaceRef};
use crate::pod::compose::{ComposeInput, WorkspaceSource, compose_pod};
use crate::pod::identity::{ANNOTATION_CREATE_NONCE, SessionIdentity, create_nonce};
use crate::pod::template::WorkspaceMode;
use anyhow::{Context, bail};
use std::collections::BTreeMap;
use std::time::Instant;

impl Session {
    /// Stages `storage` and `pod_ready` (no timing records: the caller drives the rest).
    /// Every object is on `cleanup` before this returns.
    pub async fn create(
        settings: &LaunchSettings,
        cleanup: &CleanupStack,
        identity: SessionIdentity,
        options: &SessionOptions,
    ) -> anyhow::Result<Self> {
        let mut timing = LaunchTiming::start(&identity);
        Self::create_timed(settings, cleanup, identity, options, &mut timing).await
    }

    /// [`Session::create`], each stage recorded in `timing` (a fresh launch's, or a
    /// replacement's, which is not logged).
    pub(super) async fn create_timed(
        settings: &LaunchSettings,
        cleanup: &CleanupStack,
        identity: SessionIdentity,
        options: &SessionOptions,
        timing: &mut LaunchTiming,
    ) -> anyhow::Result<Self> {
        let backend = &settings.backend;
        let mode = options.workspace_mode.unwrap_or(WorkspaceMode::ManagedPvc);

        let started = Instant::now();
        let workspace = Self::storage(settings, cleanup, &identity, options, mode).await;
        timing.stage("storage", started, &workspace);
        let workspace = workspace?;

        let started = Instant::now();
        let pod_ready = async {
            let template = options.template.as_ref().unwrap_or(&settings.template);
            let arch = options.arch.unwrap_or_else(|| backend.platform());
            let snapshot = LaunchSnapshot::record(template, &settings.main_container, mode, arch)?;
            let nonce = create_nonce();
            let mut pod_spec = compose_pod(&ComposeInput {
                template,
                identity: &identity,
                namespace: &settings.namespace,
                main_container: &settings.main_container,
                arch,
                workspace: match &workspace {
                    Some(ws) => WorkspaceSource::Claim(ws.name.clone()),
                    None => WorkspaceSource::EmptyDir,
                },
                create_nonce: &nonce,
            })?;
            if !options.extra_labels.is_empty() {
                pod_spec
                    .metadata
                    .labels
                    .get_or_insert_default()
                    .extend(options.extra_labels.clone());
            }
            // A launch that fails here is rolled back as Kandev's `rollbackAfterFailure` does:
            // the Pod it created and a claim it created, by UID (a reused or existing claim
            // stays).
            let created_claim = workspace
                .as_ref()
                .filter(|ws| ws.created_by_run && options.reuse_workspace.is_none());
            let pod = match backend.create_pod(&pod_spec).await {
                Ok(pod) => pod,
                Err(e) => {
                    let error = anyhow::Error::from(e).context("pod_ready: create the Pod");
                    return Err(rolled_back(backend.as_ref(), error, None, created_claim).await);
                }
            };
            cleanup.push(CleanupTarget::Pod(pod.clone()));
            if let Err(e) = backend
                .wait_running(&pod, &settings.main_container, settings.pod_ready_timeout)
                .await
            {
                let error =
                    anyhow::Error::from(e).context("pod_ready: wait for the main container");
                return Err(rolled_back(backend.as_ref(), error, Some(&pod), created_claim).await);
            }
            Ok((snapshot, pod_spec, pod))
        }
        .await;
        timing.stage("pod_ready", started, &pod_ready);
        let (snapshot, pod_spec, pod) = pod_ready?;

        let mut session_env = settings.profile_env.clone();
        session_env.extend(options.profile_env.clone());
        Ok(Self {
            identity,
            pod,
            pod_spec,
            workspace,
            bootstrap_nonce: create_nonce(),
            stages: timing.stage_durations(),
            snapshot,
            agent: None,
            instance: None,
            settings: settings.clone(),
            session_env,
        })
    }

    /// Stage `storage`: the workspace the Pod mounts (None: an emptyDir).
    async fn storage(
        settings: &LaunchSettings,
        cleanup: &CleanupStack,
        identity: &SessionIdentity,
        options: &SessionOptions,
        mode: WorkspaceMode,
    ) -> anyhow::Result<Option<WorkspaceRef>> {
        let backend = &settings.backend;
        Ok(match (&options.reuse_workspace, mode) {
            (Some(ws), _) => Some(ws.clone()),
            (None, WorkspaceMode::EmptyDir) => None,
            (None, WorkspaceMode::ManagedPvc) => {
                let annotations =
                    BTreeMap::from([(ANNOTATION_CREATE_NONCE.to_owned(), create_nonce())]);
                let ws = backend
                    .create_workspace(
                        &identity.workspace_claim_name(),
                        &identity.all_labels(),
                        &annotations,
                    )
                    .await
                    .context("storage: create the managed workspace")?;
                cleanup.push(CleanupTarget::Workspace(ws.clone()));
                Some(ws)
            }
            (None, WorkspaceMode::ExistingClaim) => {
                // Kandev GETs the claim and mounts it; it never creates, relabels or deletes it.
                let Some(claim) = &settings.existing_claim else {
                    bail!("existing_claim mode needs a claim: pass --workspace-claim NAME");
                };
                let ws = backend
                    .get_workspace(claim)
                    .await
                    .context("storage: get the existing claim")?
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "storage: the existing claim {claim} does not exist in namespace {}",
                            settings.namespace
                        )
                    })?;
                Some(ws)
            }
        })
    }
}

/// Kandev's rollback of a launch that failed before the Pod ran: the Pod it created and the
/// claim it created, deleted by UID; `error` with whatever the rollback could not delete
/// (what is left stays on the cleanup stack for the scenario's teardown).
async fn rolled_back(
    backend: &dyn Backend,
    error: anyhow::Error,
    pod: Option<&PodRef>,
    claim: Option<&WorkspaceRef>,
) -> anyhow::Error {
    let mut failures = Vec::new();
    if let Some(pod) = pod
        && let Err(e) = backend.delete_pod(pod).await
    {
        failures.push(format!("delete Pod {}: {e}", pod.name));
    }
    if let Some(claim) = claim
        && let Err(e) = backend.delete_workspace(claim).await
    {
        failures.push(format!("delete claim {}: {e}", claim.name));
    }
    if failures.is_empty() {
        error
    } else {
        error.context(format!(
            "rollback of the failed launch: {}",
            failures.join("; ")
        ))
    }
}
