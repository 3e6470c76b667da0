//! One Kandev task session: workspace + Pod, launched through Kandev's stages, and what
//! Kandev does with it afterwards. One file for each part:
//!
//! - `create.rs`: stages `storage` (the managed workspace claim, nonce-stamped, unless the
//!   mode is `empty_dir` or a workspace is reused: a replacement Pod) and `pod_ready`
//!   (compose, create nonce-stamped, wait for the main container; a failure rolled back).
//! - `bootstrap.rs`: stage `bootstrap` over exec into the main container: upload the agent
//!   binary to `/opt/kandev/agentctl`, write `runtime.env`, `prepare.sh` and `auth.env`
//!   (umask 077, temp + rename, symlinks refused with exit 73), run the prepare script, then
//!   write the `prepared` and `start` markers.
//! - `connect.rs`: stage `agentctl_connect` (poll `/health`, then the one-shot nonce
//!   handshake), and Kandev's reconnect to a running Pod.
//! - `launch.rs`: a fresh launch, the four stages in order with Kandev's timing records.
//! - `agent_process.rs`: the session's agent process through agentctl (start, Stop,
//!   resume), and further sessions of the task joining its Pod ([`SessionHandle`]).
//! - `recovery.rs`: what Kandev records of a session ([`RecordedSession`]) and its checks of
//!   it, the terminal cleanup, the replacement of a missing Pod and the reattach after a
//!   backend restart.
//! - `inventory.rs`: the row Kandev's database keeps of a session ([`SessionInventory`]).
//!
//! Beside them: [`agent`] (the control API client), [`cleanup`] (the cleanup stack),
//! [`snapshot`] (the launch snapshot) and [`timing`] (the launch timing records). This file
//! holds what they all share: the settings, the [`Session`] and its small accessors.

pub mod agent;
mod agent_process;
mod bootstrap;
pub mod cleanup;
mod connect;
mod create;
mod inventory;
mod launch;
mod recovery;
pub mod snapshot;
pub mod timing;

pub use agent_process::SessionHandle;
pub use bootstrap::{PrepareFailed, WorkerImageLacks};
pub use connect::{Reconnected, RecordedToken};
pub use inventory::SessionInventory;
pub use recovery::{
    CleanupScript, RecordMismatch, RecordedPodMissing, RecordedPresent, RecordedSession,
    terminal_cleanup, verify_recorded,
};

use crate::backend::{Backend, ExecOutput, ExecRequest, PodRef, WorkspaceRef};
use crate::pod::compose::Arch;
use crate::pod::identity::SessionIdentity;
use crate::pod::template::WorkspaceMode;
use agent::{AgentClient, AgentExec, AgentExecResult};
use anyhow::anyhow;
use k8s_openapi::api::core::v1::{Pod, PodTemplate};
use kandev_report::SessionRecord;
use sha2::Digest;
use snapshot::LaunchSnapshot;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use timing::LaunchLog;

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

/// A launched session: its identity, Pod and workspace, what Kandev records of its launch,
/// and its connection to agentctl (the stage files add the rest of its methods).
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

/// The labels Kandev owns ([`crate::pod::template::is_owned_label`]).
pub fn owned_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| crate::pod::template::is_owned_label(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

impl Session {
    /// Kandev's own labels of this session's Pod (and of a claim it created): what it records
    /// to verify them later.
    fn owned_labels(&self) -> BTreeMap<String, String> {
        owned_labels(&self.identity.kandev_labels())
    }

    /// The session's own home, `/run/kandev/sessions/<first 16 bytes of SHA-256 of the
    /// session id, hex>/home`, as Kandev derives it for task-owned Pods.
    pub fn home(&self) -> String {
        session_home(&self.identity.session_id)
    }

    /// A command in the main container as its user (the stages' exec), `stdin` fed to it.
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

    /// The connection to agentctl (after `agentctl_connect`, until [`Session::stop`]).
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

    /// The session's agent process agentctl runs (its instance id), if one was started.
    pub fn instance(&self) -> Option<&str> {
        self.instance.as_deref()
    }

    /// The session as the report lists it.
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
