//! The row Kandev's database keeps of a running session ([`SessionInventory`]): what a
//! backend restart leaves, and all [`Session::reattach`] starts from.

use super::Session;
use super::snapshot::LaunchSnapshot;
use crate::backend::{PodRef, WorkspaceRef};
use crate::pod::identity::SessionIdentity;
use std::collections::BTreeMap;

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

impl Session {
    /// What Kandev's database holds of this session ([`SessionInventory`]).
    pub fn inventory(&self) -> SessionInventory {
        SessionInventory {
            identity: self.identity.clone(),
            pod: self.pod.clone(),
            owned_labels: self.owned_labels(),
            workspace: self.workspace.clone(),
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
}
