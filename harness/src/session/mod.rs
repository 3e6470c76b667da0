//! One Kandev task session: workspace + Pod, launched through Kandev's stages.
//!
//! 1. `storage`: the managed workspace claim (nonce-stamped), unless the mode is `empty_dir`
//!    or a workspace is reused (replacement Pod).
//! 2. `pod_ready`: compose, create (nonce-stamped), wait for the main container.
//! 3. `bootstrap` over exec into the main container: upload the agent binary to
//!    `/opt/kandev/agentctl`, write `runtime.env`, `prepare.sh` and `auth.env` (umask 077,
//!    temp + rename, symlinks refused with exit 73), run the prepare script, then write the
//!    `prepared` and `start` markers.
//! 4. `agentctl_connect`: poll `/health`, then the one-shot nonce handshake.

pub mod agent;
pub mod cleanup;
pub mod snapshot;
pub mod timing;

use crate::backend::{Backend, ExecOutput, ExecRequest, PodRef, WorkspaceRef};
use crate::pod::compose::{Arch, ComposeInput, WorkspaceSource, compose_pod};
use crate::pod::identity::{ANNOTATION_CREATE_NONCE, SessionIdentity, create_nonce};
use crate::pod::template::WorkspaceMode;
use crate::session::agent::{AgentClient, AgentExec, AgentExecResult};
use crate::session::cleanup::{CleanupStack, CleanupTarget};
use crate::session::snapshot::LaunchSnapshot;
use crate::session::timing::{LaunchLog, LaunchTiming};
use anyhow::{Context, anyhow, bail};
use k8s_openapi::api::core::v1::{Pod, PodTemplate};
use kandev_report::SessionRecord;
use sha2::Digest;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bound on the prepare script's captured output (as Kandev: 256 KiB).
const MAX_PREPARE_OUTPUT: usize = 256 * 1024;

/// What every session of a run shares.
#[derive(Clone)]
pub struct LaunchSettings {
    pub backend: Arc<dyn Backend>,
    pub namespace: String,
    pub template: PodTemplate,
    pub main_container: String,
    pub daemon_container: String,
    pub prepare_script: String,
    pub agent_binary: Arc<Vec<u8>>,
    pub pod_ready_timeout: Duration,
    pub prepare_timeout: Duration,
    pub connect_timeout: Duration,
    /// Profile environment written to `auth.env` (e.g. `DOCKER_READY_TIMEOUT_SECONDS`).
    pub profile_env: BTreeMap<String, String>,
    /// The claim `existing_claim` mode mounts (`--workspace-claim`).
    pub existing_claim: Option<String>,
    /// Where fresh launches write their timing records (Kandev's backend log).
    pub launch_log: LaunchLog,
}

/// Per-session choices.
#[derive(Clone, Default)]
pub struct SessionOptions {
    pub workspace_mode: Option<WorkspaceMode>,
    /// Mount this workspace instead of creating one (a replacement Pod).
    pub reuse_workspace: Option<WorkspaceRef>,
    /// A variant of the run's template for this session only.
    pub template: Option<PodTemplate>,
    /// Extra profile environment for this session.
    pub profile_env: BTreeMap<String, String>,
    /// Keep this identity (a replacement Pod keeps the task's identity).
    pub identity: Option<SessionIdentity>,
    /// Labels stamped on the Pod besides Kandev's (as a foreign actor or policy might add).
    pub extra_labels: BTreeMap<String, String>,
    /// The profile's platform (default: this machine's).
    pub arch: Option<Arch>,
}

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

/// The labels Kandev owns ([`crate::pod::template::is_owned_label`]).
pub fn owned_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| crate::pod::template::is_owned_label(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
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

/// The worker image lacks a tool the Docker-workloads recipe needs: the scenario cannot be
/// judged on this image (reported `incompatible`, with the fix).
#[derive(Debug, thiserror::Error)]
#[error(
    "the worker image {image} has no `{tool}` on the agent's PATH\n  fix: use a worker image with the Docker CLI (Kandev's full-worker recipe), or pass one with --worker-image"
)]
pub struct WorkerImageLacks {
    pub image: String,
    pub tool: String,
}

/// A launch that failed in the prepare script: the agent was never started.
#[derive(Debug, thiserror::Error)]
#[error(
    "kubernetes lifecycle: prepare script failed ({} after {:.1} s): {output}",
    crate::backend::exit_text(*.exit_code),
    .elapsed.as_secs_f64()
)]
pub struct PrepareFailed {
    pub exit_code: Option<i64>,
    pub elapsed: Duration,
    pub output: String,
}

/// What Kandev's reconnect ([`Session::reconnect`], [`Session::reattach`]) found.
#[derive(Debug, Clone)]
pub struct Reconnected {
    /// agentctl's `/health` answer once it was back.
    pub health: serde_json::Value,
    /// What agentctl made of the recorded control token.
    pub token: RecordedToken,
    /// The session's agent process agentctl no longer runs (it died with the container).
    pub instance_lost: Option<String>,
}

/// What agentctl made of the recorded control token when Kandev reached it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordedToken {
    /// Accepted: the same agentctl; no new handshake.
    Accepted,
    /// Refused (a restarted agentctl has issued none yet): a new handshake with the bootstrap
    /// nonce was made.
    Refused,
    /// None was recorded: a new handshake with the bootstrap nonce was made.
    Absent,
}

/// What Kandev's database keeps of a running session (its executor's runtime metadata): the
/// exact Pod and claim with Kandev's labels, the control token and the bootstrap nonce, the
/// session's agent process, the launch snapshot and the session's environment (and, for the
/// harness's report only, the launch's stage durations). A backend restart keeps this and
/// nothing else of the session; [`Session::reattach`] reaches the Pod from it alone.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SessionInventory {
    pub identity: SessionIdentity,
    pub pod: PodRef,
    pub owned_labels: BTreeMap<String, String>,
    pub workspace: Option<WorkspaceRef>,
    pub bootstrap_nonce: String,
    pub token: Option<String>,
    pub instance: Option<String>,
    pub snapshot: LaunchSnapshot,
    pub session_env: BTreeMap<String, String>,
    pub stages: Vec<(String, u64)>,
}

/// Kandev's reconnect found no Pod by the recorded name: only the replacement path
/// ([`Session::replace_missing`]) can go on.
#[derive(Debug, thiserror::Error)]
#[error("kubernetes lifecycle: the recorded Pod {namespace}/{name} is missing")]
pub struct RecordedPodMissing {
    pub namespace: String,
    pub name: String,
}

/// A session that joined a task's Pod ([`Session::join`]): its identity, its own connection to
/// the Pod's agentctl (with its environment file) and its agent process.
pub struct SessionHandle {
    pub identity: SessionIdentity,
    agent: AgentClient,
    instance: Option<String>,
}

impl SessionHandle {
    /// The session's own home, `/run/kandev/sessions/<hash>/home`.
    pub fn home(&self) -> String {
        session_home(&self.identity.session_id)
    }

    pub fn agent(&self) -> &AgentClient {
        &self.agent
    }

    /// The session's agent process (its agentctl instance id) while it runs.
    pub fn instance(&self) -> Option<&str> {
        self.instance.as_deref()
    }

    /// Kandev's Stop of this session: its agent process ended through agentctl (agentctl,
    /// the Pod and the sibling sessions stay). Returns what agentctl answered.
    pub async fn stop(&mut self) -> anyhow::Result<Option<serde_json::Value>> {
        match self.instance.take() {
            Some(id) => Ok(Some(
                self.agent
                    .stop_instance(&id)
                    .await
                    .context("stop: end the session's agent process")?,
            )),
            None => Ok(None),
        }
    }

    /// `sh -c script` as the agent user in `/workspace`, with this session's environment.
    pub async fn agent_sh(
        &self,
        script: &str,
        timeout: Duration,
    ) -> anyhow::Result<AgentExecResult> {
        self.agent.exec(&AgentExec::sh(script, timeout)).await
    }
}

pub struct Session {
    pub identity: SessionIdentity,
    pub pod: PodRef,
    pub pod_spec: Pod,
    pub workspace: Option<WorkspaceRef>,
    pub bootstrap_nonce: String,
    pub stages: Vec<(String, u64)>,
    /// The profile this session was launched with, as Kandev records it for a replacement.
    pub snapshot: LaunchSnapshot,
    agent: Option<AgentClient>,
    /// The session's agent process agentctl runs (its instance id), if one was started.
    instance: Option<String>,
    settings: LaunchSettings,
    session_env: BTreeMap<String, String>,
}

fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "'\\''"))
}

/// A session's agent process: the agent CLI (here the mock agent's `session` role) through
/// the agent user's login shell.
const SESSION_PROCESS: [&str; 3] = ["sh", "-lc", "/opt/kandev/agentctl session"];

/// The agent's own HOME in the main container (not a session's).
pub const AGENT_HOME: &str = "/run/kandev/home";

/// A session's home in a task-owned Pod (Kandev's `kubernetesSessionHome`).
pub fn session_home(session_id: &str) -> String {
    let digest = sha2::Sha256::digest(session_id.as_bytes());
    format!(
        "/run/kandev/sessions/{}/home",
        hex::encode(digest.get(..16).unwrap_or_default())
    )
}

/// `put DEST MODE`: stdin to DEST as Kandev writes files into a Pod: every folder on the
/// path checked (a symlink or a non-folder is refused with exit 73, a missing one created),
/// DEST itself neither a symlink nor a folder, written to a temporary file beside it and
/// renamed into place.
const PUT: &str = r#"put() {
  dest=$1; mode=$2; dir=${1%/*}; cur=
  old_ifs=$IFS; IFS=/; set -- $dir; IFS=$old_ifs
  for part in "$@"; do
    [ -n "$part" ] || continue
    cur="$cur/$part"
    [ ! -L "$cur" ] || exit 73
    if [ -e "$cur" ]; then [ -d "$cur" ] || exit 73; else mkdir "$cur"; fi
  done
  [ ! -L "$dest" ] || exit 73
  [ ! -d "$dest" ] || exit 73
  tmp=$(mktemp "$dir/.kandev-upload.XXXXXX")
  cat > "$tmp"
  chmod "$mode" "$tmp"
  mv -f "$tmp" "$dest"
}"#;

fn env_file(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={}\n", shell_quote(v)))
        .collect()
}

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

    async fn create_timed(
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
            let arch = options.arch.unwrap_or_else(Arch::of_this_machine);
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

    /// All four stages; a failing prepare script is a [`PrepareFailed`] error.
    pub async fn launch(
        settings: &LaunchSettings,
        cleanup: &CleanupStack,
        identity: SessionIdentity,
        options: &SessionOptions,
    ) -> anyhow::Result<Self> {
        let mut timing = LaunchTiming::start(&identity);
        let launched = async {
            let mut session =
                Self::create_timed(settings, cleanup, identity, options, &mut timing).await?;
            session.bootstrap_and_connect(&mut timing).await?;
            Ok(session)
        }
        .await;
        settings
            .launch_log
            .write(timing.complete(launched.as_ref().map(|_| ())));
        launched
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
            return Err(snapshot::SnapshotRefused::EmptyDir.into());
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

    /// Stages `bootstrap` and `agentctl_connect` of a created session.
    async fn bootstrap_and_connect(&mut self, timing: &mut LaunchTiming) -> anyhow::Result<()> {
        let started = Instant::now();
        let bootstrapped = self.bootstrap().await;
        timing.stage("bootstrap", started, &bootstrapped);
        bootstrapped?;
        let started = Instant::now();
        let connected = self.connect().await;
        timing.stage("agentctl_connect", started, &connected);
        connected?;
        self.stages = timing.stage_durations();
        Ok(())
    }

    /// Stage `bootstrap`: the files, the prepare script (its failure is [`PrepareFailed`]),
    /// the markers that start agentctl.
    async fn bootstrap(&self) -> anyhow::Result<()> {
        self.write_bootstrap_files().await?;
        let output = self.run_prepare().await?;
        if output.exit_code != Some(0) {
            return Err(PrepareFailed {
                exit_code: output.exit_code,
                elapsed: output.duration,
                output: format!("{}{}", output.stdout_text(), output.stderr_text())
                    .trim()
                    .to_owned(),
            }
            .into());
        }
        self.mark_prepared_and_start().await
    }

    async fn main_exec(
        &self,
        argv: &[&str],
        stdin: Option<Vec<u8>>,
        timeout: Duration,
    ) -> anyhow::Result<ExecOutput> {
        let mut request = ExecRequest::new(&self.settings.main_container, argv).timeout(timeout);
        request.stdin = stdin;
        Ok(self.settings.backend.exec(&self.pod, request).await?)
    }

    /// Uploads the agent to `/opt/kandev/agentctl` and writes `runtime.env`, `prepare.sh`, the
    /// home and `auth.env` as Kandev does (umask 077, a symlinked path refused with exit 73,
    /// temporary file then rename), in one exec: the binary comes on stdin, the text files as
    /// arguments (exact bytes). Ends by checking that the worker has the `docker` CLI, which
    /// the prepare gate and every scenario need.
    pub async fn write_bootstrap_files(&self) -> anyhow::Result<()> {
        // Kandev's task-owned layout (executor_kubernetes_bootstrap.go): the agent binary and
        // runtime files under /opt/kandev; the session's own environment in its home under
        // /run/kandev/sessions/<hash>/home/auth.env; the shared /run/kandev/auth.env with the
        // profile environment, the nonce and the session's HOME for the prepare script (it
        // is reduced to the nonce once preparation is done).
        let script = format!(
            r#"set -e
umask 077
{PUT}
head -c "$1" | put /opt/kandev/agentctl 0755
printf '%s' "$2" | put /opt/kandev/runtime.env 0600
printf '%s' "$3" | put /opt/kandev/prepare.sh 0600
mkdir -p /run/kandev/home
chmod 0700 /run/kandev/home
printf '%s' "$4" | put "$6/auth.env" 0600
printf '%s' "$5" | put /run/kandev/auth.env 0600
command -v docker >/dev/null 2>&1 || exit 69"#
        );
        let id = &self.identity;
        let runtime = env_file(&[
            ("AGENTCTL_LISTEN_HOST", "127.0.0.1"),
            ("AGENTCTL_PORT", "8765"),
            ("AGENTCTL_INSTANCE_PORT_BASE", "41001"),
            ("AGENTCTL_INSTANCE_PORT_MAX", "41100"),
            ("KANDEV_INSTANCE_ID", &id.environment_id),
            ("KANDEV_TASK_ID", &id.task_id),
            ("KANDEV_TASK_ENVIRONMENT_ID", &id.environment_id),
        ]);
        let home = self.home();
        let profile: Vec<(&str, &str)> = self
            .session_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut session = profile.clone();
        session.extend([
            ("HOME", home.as_str()),
            ("KANDEV_SESSION_ID", id.session_id.as_str()),
            ("KANDEV_TASK_ID", id.task_id.as_str()),
            ("KANDEV_INSTANCE_ID", id.environment_id.as_str()),
            ("KANDEV_TASK_ENVIRONMENT_ID", id.environment_id.as_str()),
        ]);
        let mut shared = profile;
        shared.extend([
            ("AGENTCTL_BOOTSTRAP_NONCE", self.bootstrap_nonce.as_str()),
            ("HOME", home.as_str()),
        ]);
        let (session, shared) = (env_file(&session), env_file(&shared));
        let size = self.settings.agent_binary.len().to_string();
        let argv = [
            "sh",
            "-c",
            &script,
            "sh",
            &size,
            &runtime,
            &self.settings.prepare_script,
            &session,
            &shared,
            &home,
        ];
        let out = self
            .main_exec(
                &argv,
                Some(self.settings.agent_binary.to_vec()),
                Duration::from_secs(120),
            )
            .await?;
        match out.exit_code {
            Some(0) => Ok(()),
            Some(69) => {
                let image = self
                    .pod_spec
                    .spec
                    .as_ref()
                    .and_then(|s| {
                        s.containers
                            .iter()
                            .find(|c| c.name == self.settings.main_container)
                    })
                    .and_then(|c| c.image.clone())
                    .unwrap_or_default();
                Err(WorkerImageLacks {
                    image,
                    tool: "docker".into(),
                }
                .into())
            }
            Some(73) => bail!(
                "bootstrap: a path under /opt/kandev or /run/kandev is a symlink (or not a folder); refused"
            ),
            code => bail!(
                "bootstrap: write the runtime files: {}: {}",
                crate::backend::exit_text(code),
                out.stderr_text().trim()
            ),
        }
    }

    /// Runs `/opt/kandev/prepare.sh` with the runtime and auth environment; returns its output
    /// (bounded) whatever its exit code.
    pub async fn run_prepare(&self) -> anyhow::Result<ExecOutput> {
        let script = "set -a; . /opt/kandev/runtime.env; . /run/kandev/auth.env; set +a; exec sh /opt/kandev/prepare.sh";
        let mut out = self
            .main_exec(&["sh", "-c", script], None, self.settings.prepare_timeout)
            .await?;
        out.stdout.truncate(MAX_PREPARE_OUTPUT);
        out.stderr.truncate(MAX_PREPARE_OUTPUT);
        Ok(out)
    }

    /// After preparation: the shared auth.env keeps only the control environment (the
    /// nonce, the agent's own HOME), as Kandev rewrites it for task-owned Pods; then the
    /// `prepared` and `start` markers.
    pub async fn mark_prepared_and_start(&self) -> anyhow::Result<()> {
        let control = env_file(&[
            ("AGENTCTL_BOOTSTRAP_NONCE", self.bootstrap_nonce.as_str()),
            ("HOME", AGENT_HOME),
        ]);
        let script = format!(
            r#"set -e
umask 077
{PUT}
printf '%s' "$1" | put /run/kandev/auth.env 0600
: > /opt/kandev/prepared
: > /opt/kandev/start"#
        );
        let out = self
            .main_exec(
                &["sh", "-c", &script, "sh", &control],
                None,
                Duration::from_secs(30),
            )
            .await?;
        if !out.success() {
            bail!(
                "bootstrap: reduce auth.env and write the start markers: {}: {}",
                out.exit_text(),
                out.stderr_text().trim()
            );
        }
        Ok(())
    }

    /// The session's own home, `/run/kandev/sessions/<first 16 bytes of SHA-256 of the
    /// session id, hex>/home`, as Kandev derives it for task-owned Pods.
    pub fn home(&self) -> String {
        session_home(&self.identity.session_id)
    }

    /// Polls `/health` until the agent answers, then hands over the nonce.
    pub async fn connect(&mut self) -> anyhow::Result<()> {
        let mut client = self.session_client(None);
        self.await_health(&client, "agentctl_connect").await?;
        client
            .handshake(&self.bootstrap_nonce)
            .await
            .context("agentctl_connect: handshake")?;
        self.agent = Some(client);
        Ok(())
    }

    /// A control-API client for this session's environment file, with `token` if given.
    fn session_client(&self, token: Option<String>) -> AgentClient {
        self.client_for(token, format!("{}/auth.env", self.home()))
    }

    /// A control-API client whose commands load `env_file`, with `token` if given.
    fn client_for(&self, token: Option<String>, env_file: String) -> AgentClient {
        let (backend, pod) = (self.settings.backend.clone(), self.pod.clone());
        let container = &self.settings.main_container;
        match token {
            Some(token) => AgentClient::with_token(backend, pod, container, token),
            None => AgentClient::new(backend, pod, container),
        }
        .for_session(env_file)
    }

    /// Polls agentctl's `/health` until it answers (its answer), within the connect bound.
    async fn await_health(
        &self,
        client: &AgentClient,
        step: &str,
    ) -> anyhow::Result<serde_json::Value> {
        let started = Instant::now();
        loop {
            match client.health().await {
                Ok(health) => return Ok(health),
                Err(e) if started.elapsed() >= self.settings.connect_timeout => {
                    return Err(e.context(format!(
                        "{step}: /health did not answer within {:?}",
                        self.settings.connect_timeout
                    )));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    /// agentctl reached with the task's recorded control token, or, when agentctl refuses it
    /// (a restarted agentctl has issued none yet), through a new handshake with the bootstrap
    /// nonce the Pod still holds (agentctl issues a new token). `for_env` is the environment
    /// file the client's commands load. Returns the client and what became of the token.
    async fn reauthorized(
        &self,
        for_env: String,
        step: &str,
    ) -> anyhow::Result<(AgentClient, RecordedToken)> {
        let recorded = self
            .agent
            .as_ref()
            .and_then(|a| a.token().map(str::to_owned));
        if let Some(token) = &recorded {
            let client = self.client_for(Some(token.clone()), for_env.clone());
            if client
                .authorized()
                .await
                .with_context(|| format!("{step}: reattach with the recorded token"))?
            {
                return Ok((client, RecordedToken::Accepted));
            }
        }
        let mut client = self.client_for(None, for_env);
        client
            .handshake(&self.bootstrap_nonce)
            .await
            .with_context(|| format!("{step}: handshake with the bootstrap nonce"))?;
        let token = match recorded {
            Some(_) => RecordedToken::Refused,
            None => RecordedToken::Absent,
        };
        Ok((client, token))
    }

    /// Starts the session's agent process through agentctl: the agent CLI run through the
    /// agent user's login shell (its profile applies) in `/workspace` with the session's
    /// environment. Returns the instance id, which [`Session::stop`] ends.
    pub async fn start_agent_process(&mut self) -> anyhow::Result<String> {
        let id = self
            .agent()?
            .start_instance(&SESSION_PROCESS)
            .await
            .context("start the session's agent process")?;
        self.instance = Some(id.clone());
        Ok(id)
    }

    /// Kandev's ordinary Stop: end the session's agent process through the control API
    /// (agentctl stays) and close the connection to the agent; the Pod, its daemon and the
    /// nested containers stay. Returns the recorded token for [`Session::resume`] and what
    /// agentctl answered for the ended process.
    pub async fn stop(&mut self) -> anyhow::Result<(Option<String>, Option<serde_json::Value>)> {
        let ended = match (&self.agent, self.instance.take()) {
            (Some(agent), Some(id)) => Some(
                agent
                    .stop_instance(&id)
                    .await
                    .context("stop: end the session's agent process")?,
            ),
            _ => None,
        };
        let token = self.agent.take().and_then(|a| a.token().map(str::to_owned));
        Ok((token, ended))
    }

    /// Reattaches to the same agent process with the recorded token (into a new session:
    /// [`Session::start_agent_process`] starts its process).
    pub async fn resume(&mut self, token: String) -> anyhow::Result<()> {
        let client = self.session_client(Some(token));
        client
            .identity()
            .await
            .context("resume: reattach with the recorded token")?;
        self.agent = Some(client);
        Ok(())
    }

    /// The session's agent process agentctl runs (its instance id), if one was started.
    pub fn instance(&self) -> Option<&str> {
        self.instance.as_deref()
    }

    /// Kandev's reconnect to the session's Pod (after its main container restarted, or from
    /// [`Session::reattach`]): wait for `/health`, reattach with the recorded token, and when
    /// agentctl refuses it (a restarted agentctl issued no token yet) do a new control
    /// handshake with the bootstrap nonce the Pod still holds in `/run/kandev/auth.env`
    /// (agentctl issues a new token). When agentctl no longer runs the session's agent
    /// process (it died with the container) the recorded instance is forgotten, and
    /// [`Session::start_agent_process`] starts a new one (Kandev's get-or-create of the
    /// session's instance).
    pub async fn reconnect(&mut self) -> anyhow::Result<Reconnected> {
        let health = self
            .await_health(&self.session_client(None), "reconnect")
            .await?;
        let (client, token) = self
            .reauthorized(format!("{}/auth.env", self.home()), "reconnect")
            .await?;
        let instances = client.instances().await.context("reconnect: instances")?;
        let lost = self.instance.take_if(|id| {
            !instances
                .get("instances")
                .and_then(serde_json::Value::as_array)
                .is_some_and(|list| {
                    list.iter().any(|i| {
                        i.get("id").and_then(serde_json::Value::as_str) == Some(id.as_str())
                            && i.get("running") == Some(&serde_json::Value::Bool(true))
                    })
                })
        });
        self.agent = Some(client);
        Ok(Reconnected {
            health,
            token,
            instance_lost: lost,
        })
    }

    /// A further session of this task joining its Pod, as Kandev's executor adds a session to
    /// a task-owned Pod (`connectSharedKubernetesAgentctl`): no new Pod, claim or
    /// preparation; the session's own environment is written to its home,
    /// `/run/kandev/sessions/<hash>/home/auth.env` (umask 077, mode 0600, a symlinked path
    /// refused with exit 73, temporary file then rename); agentctl is reached with the task's
    /// control token (a new handshake with the bootstrap nonce when agentctl refuses it); and
    /// the session's own agent process is started through agentctl with that environment.
    pub async fn join(&self, session_id: &str) -> anyhow::Result<SessionHandle> {
        let mut identity = self.identity.clone();
        identity.session_id = session_id.to_owned();
        let home = session_home(session_id);
        let mut env: Vec<(&str, &str)> = self
            .session_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        env.extend([
            ("HOME", home.as_str()),
            ("KANDEV_SESSION_ID", identity.session_id.as_str()),
            ("KANDEV_TASK_ID", identity.task_id.as_str()),
            ("KANDEV_INSTANCE_ID", identity.environment_id.as_str()),
            (
                "KANDEV_TASK_ENVIRONMENT_ID",
                identity.environment_id.as_str(),
            ),
        ]);
        let script = format!(
            r#"set -e
umask 077
{PUT}
printf '%s' "$1" | put "$2/auth.env" 0600"#
        );
        let out = self
            .main_exec(
                &["sh", "-c", &script, "sh", &env_file(&env), &home],
                None,
                Duration::from_secs(30),
            )
            .await?;
        match out.exit_code {
            Some(0) => {}
            Some(73) => bail!(
                "join: {home}/auth.env refused: a path under /run/kandev/sessions is a symlink (or not a folder)"
            ),
            code => bail!(
                "join: write {home}/auth.env: {}: {}",
                crate::backend::exit_text(code),
                out.stderr_text().trim()
            ),
        }
        self.session_client(None)
            .health()
            .await
            .context("join: agentctl's /health")?;
        if self.agent.as_ref().and_then(AgentClient::token).is_none() {
            bail!("join: the task's session is not connected to agentctl");
        }
        let (agent, _) = self
            .reauthorized(format!("{home}/auth.env"), "join")
            .await?;
        let instance = agent
            .start_instance(&SESSION_PROCESS)
            .await
            .context("join: start the session's agent process")?;
        Ok(SessionHandle {
            identity,
            agent,
            instance: Some(instance),
        })
    }

    pub fn agent(&self) -> anyhow::Result<&AgentClient> {
        self.agent
            .as_ref()
            .ok_or_else(|| anyhow!("the agent of {} is not connected", self.pod.name))
    }

    /// `sh -c script` as the agent user in `/workspace`.
    pub async fn agent_sh(
        &self,
        script: &str,
        timeout: Duration,
    ) -> anyhow::Result<AgentExecResult> {
        self.agent()?.exec(&AgentExec::sh(script, timeout)).await
    }

    /// A command in the `docker-engine` companion (as its user, root).
    pub async fn in_daemon(&self, argv: &[&str], timeout: Duration) -> anyhow::Result<ExecOutput> {
        let request = ExecRequest::new(&self.settings.daemon_container, argv).timeout(timeout);
        Ok(self.settings.backend.exec(&self.pod, request).await?)
    }

    /// A command in the main container, outside the agent (bootstrap-like access).
    pub async fn in_main(&self, argv: &[&str], timeout: Duration) -> anyhow::Result<ExecOutput> {
        self.main_exec(argv, None, timeout).await
    }

    pub fn daemon_container(&self) -> &str {
        &self.settings.daemon_container
    }

    pub fn main_container(&self) -> &str {
        &self.settings.main_container
    }

    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.settings.backend
    }

    /// What Kandev's database holds of this session ([`SessionInventory`]).
    pub fn inventory(&self) -> SessionInventory {
        let recorded = self.recorded();
        SessionInventory {
            identity: self.identity.clone(),
            pod: recorded.pod,
            owned_labels: recorded.owned_labels,
            workspace: recorded.workspace,
            bootstrap_nonce: self.bootstrap_nonce.clone(),
            token: self
                .agent
                .as_ref()
                .and_then(|a| a.token().map(str::to_owned)),
            instance: self.instance.clone(),
            snapshot: self.snapshot.clone(),
            session_env: self.session_env.clone(),
            stages: self.stages.clone(),
        }
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

    /// What Kandev records for the terminal cleanup: the Pod's UID and Kandev's own labels.
    pub fn recorded(&self) -> RecordedSession {
        RecordedSession {
            pod: self.pod.clone(),
            owned_labels: owned_labels(&self.identity.kandev_labels()),
            workspace: self.workspace.clone(),
            // The harness's profile has no cleanup script.
            cleanup: None,
        }
    }

    pub fn record(&self) -> SessionRecord {
        SessionRecord {
            pod_name: self.pod.name.clone(),
            pod_uid: self.pod.uid.clone(),
            namespace: self.pod.namespace.clone(),
            task_id: self.identity.task_id.clone(),
            session_id: self.identity.session_id.clone(),
            workspace: self
                .workspace
                .as_ref()
                .map(|w| w.name.clone())
                .unwrap_or_else(|| "emptyDir".into()),
            launch_stages_ms: self.stages.clone(),
            template_sha256: self.snapshot.template_hash.clone(),
        }
    }
}
