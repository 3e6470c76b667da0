//! What Kandev records of a session and does with that record: the identity checks of the
//! recorded Pod and claim, the terminal cleanup, the replacement of a missing Pod (from the
//! launch snapshot) and the reattach after a backend restart (from the inventory row).

use super::cleanup::CleanupStack;
use super::connect::Reconnected;
use super::inventory::SessionInventory;
use super::snapshot::SnapshotRefused;
use super::timing::LaunchTiming;
use super::{LaunchSettings, Session, SessionOptions, owned_labels};
use crate::backend::{Backend, ExecRequest, PodRef, WorkspaceRef};
use anyhow::{Context, bail};
use std::collections::BTreeMap;
use std::time::Duration;

/// What Kandev records of a session to tear it down later: the exact Pod (UID), its owned
/// labels, the workspace (UID, and whether the run created it), and the profile's cleanup
/// script.
#[derive(Debug, Clone)]
pub struct RecordedSession {
    pub pod: PodRef,
    pub owned_labels: BTreeMap<String, String>,
    pub workspace: Option<WorkspaceRef>,
    /// Run in the verified Pod before anything is deleted (Kandev's profile cleanup script).
    pub cleanup: Option<CleanupScript>,
}

/// A profile's cleanup script: run with `sh -c` in `container` of the verified Pod, bounded by
/// `timeout` (Kandev: one minute); its failure is recorded, never fatal.
#[derive(Debug, Clone)]
pub struct CleanupScript {
    pub container: String,
    pub script: String,
    pub timeout: Duration,
}

impl CleanupScript {
    /// Kandev's bound on the cleanup script.
    pub const TIMEOUT: Duration = Duration::from_secs(60);
}

/// A recorded Pod or claim that is not the recorded one any more: Kandev's terminal cleanup
/// then deletes nothing and its reconnect refuses the Pod (both fail closed).
#[derive(Debug, thiserror::Error)]
pub enum RecordMismatch {
    #[error("Pod {name} is not the recorded one (recorded uid {recorded}, found {found})")]
    UidMismatch {
        name: String,
        recorded: String,
        found: String,
    },
    #[error("Pod {name}'s owned labels differ from the recorded ones ({difference})")]
    LabelsDiffer { name: String, difference: String },
    #[error(
        "workspace claim {name} is not the recorded one (recorded uid {recorded}, found {found})"
    )]
    WorkspaceUidMismatch {
        name: String,
        recorded: String,
        found: String,
    },
    #[error("workspace claim {name}'s owned labels differ from the recorded ones ({difference})")]
    WorkspaceLabelsDiffer { name: String, difference: String },
}

/// `found` against `recorded` owned labels: what differs, or None.
fn label_difference(
    found: &BTreeMap<String, String>,
    recorded: &BTreeMap<String, String>,
) -> Option<String> {
    let owned = owned_labels(found);
    if &owned == recorded {
        return None;
    }
    let mut difference: Vec<String> = owned
        .iter()
        .filter(|(k, v)| recorded.get(*k) != Some(*v))
        .map(|(k, v)| format!("found {k}={v}"))
        .collect();
    difference.extend(
        recorded
            .keys()
            .filter(|k| !owned.contains_key(*k))
            .map(|k| format!("missing {k}")),
    );
    Some(difference.join(", "))
}

/// What of a recorded session is still there, each verified to be the recorded one.
#[derive(Debug, Clone, Copy)]
pub struct RecordedPresent {
    pub pod: bool,
    pub workspace: bool,
}

/// Kandev's identity checks of a recorded session, shared by its terminal cleanup and its
/// reconnect: the recorded Pod, if it exists, must have the recorded UID and exactly the
/// recorded owned labels (no extra `kandev.ai/*` label); the recorded claim, if it exists,
/// the recorded UID, and for a claim the run created, exactly the recorded owned labels.
/// Any mismatch is a [`RecordMismatch`].
pub async fn verify_recorded(
    backend: &dyn Backend,
    recorded: &RecordedSession,
) -> anyhow::Result<RecordedPresent> {
    let pod = &recorded.pod;
    let pod_present = match backend.pod_labels(&pod.namespace, &pod.name).await? {
        None => false,
        Some(labels) => {
            let found = backend
                .pod_uid(&pod.namespace, &pod.name)
                .await?
                .unwrap_or_default();
            if found != pod.uid {
                return Err(RecordMismatch::UidMismatch {
                    name: pod.name.clone(),
                    recorded: pod.uid.clone(),
                    found,
                }
                .into());
            }
            if let Some(difference) = label_difference(&labels, &recorded.owned_labels) {
                return Err(RecordMismatch::LabelsDiffer {
                    name: pod.name.clone(),
                    difference,
                }
                .into());
            }
            true
        }
    };
    let mut workspace_present = false;
    if let Some(workspace) = &recorded.workspace
        && let Some(found) = backend.get_workspace(&workspace.name).await?
    {
        workspace_present = true;
        if found.uid != workspace.uid {
            return Err(RecordMismatch::WorkspaceUidMismatch {
                name: workspace.name.clone(),
                recorded: workspace.uid.clone(),
                found: found.uid,
            }
            .into());
        }
        // Ownership labels are Kandev's only on a claim it created; an existing claim is
        // the operator's (checked by UID only, and never deleted).
        if workspace.created_by_run {
            let labels = backend
                .workspace_labels(&workspace.name)
                .await?
                .unwrap_or_default();
            if let Some(difference) = label_difference(&labels, &recorded.owned_labels) {
                return Err(RecordMismatch::WorkspaceLabelsDiffer {
                    name: workspace.name.clone(),
                    difference,
                }
                .into());
            }
        }
    }
    Ok(RecordedPresent {
        pod: pod_present,
        workspace: workspace_present,
    })
}

/// Kandev's terminal cleanup, in its order (`StopInstance` in kdlbs/kandev
/// `apps/backend/internal/agent/runtime/lifecycle/executor_kubernetes_cleanup.go`):
///
/// 1. verify the recorded Pod, if it exists: its UID and its exact owned label set (no extra
///    `kandev.ai/*` label);
/// 2. verify the recorded workspace claim, if there is one and it exists: its UID, and for a
///    claim the run created its exact owned label set;
/// 3. run the cleanup script in the verified Pod (bounded; a failure is logged, not fatal);
/// 4. delete the Pod by UID, then the claim only if the run created it.
///
/// A missing Pod or claim is success; any mismatch fails closed before anything runs or is
/// deleted ([`RecordMismatch`]).
pub async fn terminal_cleanup(
    backend: &dyn Backend,
    recorded: &RecordedSession,
) -> anyhow::Result<()> {
    let found = verify_recorded(backend, recorded).await.map_err(|e| {
        e.context("terminal cleanup: the recorded identity did not verify; nothing was deleted")
    })?;
    let (pod, pod_present) = (&recorded.pod, found.pod);
    if pod_present && let Some(cleanup) = &recorded.cleanup {
        let request = ExecRequest::new(&cleanup.container, &["sh", "-c", &cleanup.script])
            .timeout(cleanup.timeout);
        match backend.exec(pod, request).await {
            Ok(out) if out.success() => {}
            Ok(out) => tracing::warn!(
                pod = %pod.name,
                exit_code = ?out.exit_code,
                stderr = %out.stderr_text().trim(),
                "the cleanup script failed; deleting anyway"
            ),
            Err(e) => tracing::warn!(
                pod = %pod.name,
                error = %crate::error_chain(&e),
                "the cleanup script failed; deleting anyway"
            ),
        }
    }
    if pod_present {
        backend.delete_pod(pod).await?;
    }
    if let Some(workspace) = &recorded.workspace {
        backend.delete_workspace(workspace).await?;
    }
    Ok(())
}

/// Kandev's reconnect found no Pod by the recorded name: only the replacement path
/// ([`Session::replace_missing`]) can go on.
#[derive(Debug, thiserror::Error)]
#[error("kubernetes lifecycle: the recorded Pod {namespace}/{name} is missing")]
pub struct RecordedPodMissing {
    pub namespace: String,
    pub name: String,
}

impl Session {
    /// What Kandev records for the terminal cleanup: the Pod's UID and Kandev's own labels.
    pub fn recorded(&self) -> RecordedSession {
        RecordedSession {
            pod: self.pod.clone(),
            owned_labels: self.owned_labels(),
            workspace: self.workspace.clone(),
            // The harness's profile has no cleanup script.
            cleanup: None,
        }
    }

    /// Kandev's replacement of a Pod that went missing (`recreateMissingKubernetesPod`): the
    /// **recorded** snapshot composed again with the same Pod name, identity and claim, and
    /// bootstrapped with the recorded nonce. `current` is the profile as it is now: only its
    /// executor settings (backend, namespace, agent binary, prepare script, bounds) are used,
    /// never its template. Refused, before anything is created, when the snapshot does not
    /// verify, the workspace was an emptyDir, the recorded Pod still exists or the claim is not
    /// the recorded one (name and UID).
    pub async fn replace_missing(
        &self,
        current: &LaunchSettings,
        cleanup: &CleanupStack,
    ) -> anyhow::Result<Self> {
        let (profile, template) = self.snapshot.verified()?;
        let Some(workspace) = &self.workspace else {
            return Err(SnapshotRefused::EmptyDir.into());
        };
        let backend = &current.backend;
        if let Some(uid) = backend.pod_uid(&self.pod.namespace, &self.pod.name).await? {
            bail!(
                "kubernetes lifecycle: the recorded Pod {} still exists (uid {uid}); a replacement is only for a missing Pod",
                self.pod.name
            );
        }
        match backend.get_workspace(&workspace.name).await? {
            Some(found) if found.uid == workspace.uid => {}
            found => bail!(
                "kubernetes lifecycle: PVC UID or name does not match recorded inventory (claim {}, recorded uid {}, found {})",
                workspace.name,
                workspace.uid,
                found.map_or_else(|| "no such claim".to_owned(), |f| format!("uid {}", f.uid))
            ),
        }
        let mut settings = current.clone();
        settings.main_container = profile.main_container.clone();
        settings.profile_env = self.session_env.clone();
        let options = SessionOptions {
            workspace_mode: Some(profile.workspace_mode),
            reuse_workspace: Some(workspace.clone()),
            template: Some(template),
            identity: Some(self.identity.clone()),
            arch: Some(profile.arch()?),
            ..Default::default()
        };
        // Kandev writes no fresh-launch records for a replacement: its timing is not logged.
        let mut timing = LaunchTiming::start(&self.identity);
        let mut replacement = Self::create_timed(
            &settings,
            cleanup,
            self.identity.clone(),
            &options,
            &mut timing,
        )
        .await?;
        // The recorded snapshot stays the session's record (the replacement's is the same
        // profile), and the recorded nonce bootstraps it.
        replacement.snapshot = self.snapshot.clone();
        replacement.bootstrap_nonce = self.bootstrap_nonce.clone();
        replacement.bootstrap_and_connect(&mut timing).await?;
        Ok(replacement)
    }

    /// Kandev's reconnect after a backend restart, from the session's inventory row alone:
    /// GET the exact Pod (missing: [`RecordedPodMissing`], the replacement path's case);
    /// verify its UID and complete owned label set and the recorded claim's UID (and labels,
    /// for a claim Kandev created), failing closed with a [`RecordMismatch`]; then
    /// [`Session::reconnect`]. `settings` supplies only the executor's plumbing (backend,
    /// containers, bounds), never the profile's current template. The session's Pod spec is
    /// the Pod as read back (on Kubernetes a GET; the local backend, whose object outlives the
    /// session, rebuilds it from what it created).
    pub async fn reattach(
        settings: &LaunchSettings,
        row: SessionInventory,
    ) -> anyhow::Result<(Self, Reconnected)> {
        let backend = &settings.backend;
        let recorded = RecordedSession {
            pod: row.pod.clone(),
            owned_labels: row.owned_labels.clone(),
            workspace: row.workspace.clone(),
            cleanup: None,
        };
        let present = verify_recorded(backend.as_ref(), &recorded)
            .await
            .context("reconnect: the recorded identity did not verify")?;
        let missing = || RecordedPodMissing {
            namespace: row.pod.namespace.clone(),
            name: row.pod.name.clone(),
        };
        if !present.pod {
            return Err(missing().into());
        }
        if let Some(workspace) = &row.workspace
            && !present.workspace
        {
            bail!(
                "reconnect: the recorded workspace claim {} (uid {}) is missing",
                workspace.name,
                workspace.uid
            );
        }
        let pod_spec = backend
            .pod_object(&row.pod)
            .await
            .context("reconnect: read the recorded Pod")?
            .ok_or_else(missing)?;
        let profile = row.snapshot.profile()?;
        let mut settings = settings.clone();
        settings.main_container = profile.main_container;
        let mut session = Self {
            identity: row.identity,
            pod: row.pod,
            pod_spec,
            workspace: row.workspace,
            bootstrap_nonce: row.bootstrap_nonce,
            stages: row.stages,
            snapshot: row.snapshot,
            agent: None,
            instance: row.instance,
            settings,
            session_env: row.session_env,
        };
        session.agent = row.token.map(|token| session.session_client(Some(token)));
        let reconnected = session.reconnect().await?;
        Ok((session, reconnected))
    }
}
