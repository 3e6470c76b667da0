//! The `local` backend: a Docker engine (bollard) runs a composed Pod with Pod semantics.
//! See [`plan`] for the mapping; this module talks to the engine and the host cgroup tree.
//!
//! The [`Backend`] impl below is the one place to read what the backend does; each operation
//! lives with its area: `create` (a Pod's engine objects, in the kubelet's order), `pods` (a
//! running Pod read back, waited on, deleted), `workspaces` (the claims' volumes), `exec`
//! (exec and port-forward), `objects` (what it leaves in the engine, found by label or UID:
//! sweeps and `gc`), `lease` (the run's liveness, which `gc` respects), `engine` (container
//! names and the UID check); `backend` holds the value.

pub mod attach;
pub mod lease;
pub mod objects;
pub mod plan;
pub mod setup;

mod backend;
mod create;
mod engine;
mod exec;
mod pods;
mod tunnel;
mod workspaces;

pub use backend::{LOCAL_NAMESPACE, LocalBackend};

use crate::backend::{
    Backend, ContainerState, ExecOutput, ExecRequest, HostSharing, PodRef, Result, WorkspaceRef,
};
use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a request the engine received from a dropped Pod create takes to land (a
/// container create or start: well under this on a loaded host).
const ABANDONED_SETTLE: Duration = Duration::from_secs(1);

impl LocalBackend {
    /// What a dropped create made of the Pod with this UID, removed until it stays removed:
    /// a request the engine was still carrying out (a container's start makes its cgroup
    /// below the Pod's) can make it again after one removal.
    async fn remove_abandoned(&self, uid: &str) -> Result<Vec<String>> {
        let mut removed = Vec::new();
        for _ in 0..10 {
            removed.extend(self.objects.remove_pod_objects(uid).await?);
            tokio::time::sleep(ABANDONED_SETTLE / 4).await;
            if !self.objects.pod_objects_left(uid).await? {
                return Ok(removed);
            }
        }
        Err(crate::backend::BackendError::Delete {
            what: "pod",
            name: format!("uid {uid}"),
            source: anyhow::anyhow!("what an interrupted create made came back after 10 removals"),
        })
    }
}

#[async_trait]
impl Backend for LocalBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    fn keep_hint(&self, pod: &PodRef, container: &str) -> String {
        format!("docker exec -it {} sh", engine::engine_name(pod, container))
    }

    fn unenforced(&self, pod: &Pod) -> Vec<String> {
        plan::unenforced(pod)
    }

    fn plumbing_listeners(&self) -> Vec<(String, &'static str)> {
        if self.pod_network == "bridge" {
            return Vec::new();
        }
        // The engine's embedded DNS resolver serves every user-defined network from inside
        // the container's namespace; on a cluster, DNS is outside the Pod.
        vec![(
            "127.0.0.11".to_owned(),
            "the engine's embedded DNS resolver of the run's Pod network",
        )]
    }

    async fn create_workspace(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<WorkspaceRef> {
        workspaces::create(self, name, labels, annotations).await
    }

    async fn delete_workspace(&self, workspace: &WorkspaceRef) -> Result<()> {
        workspaces::delete(self, workspace).await
    }

    async fn get_workspace(&self, name: &str) -> Result<Option<WorkspaceRef>> {
        workspaces::get(self, name).await
    }

    async fn workspace_labels(&self, name: &str) -> Result<Option<BTreeMap<String, String>>> {
        workspaces::labels(self, name).await
    }

    async fn create_helper_pod(&self, pod: &Pod) -> Result<PodRef> {
        create::create_helper(self, pod).await
    }

    async fn create_pod(&self, pod: &Pod) -> Result<PodRef> {
        create::create(self, pod).await
    }

    async fn wait_running(&self, pod: &PodRef, container: &str, timeout: Duration) -> Result<()> {
        pods::wait_running(self, pod, container, timeout).await
    }

    async fn container_states(&self, pod: &PodRef) -> Result<Vec<ContainerState>> {
        pods::container_states(self, pod).await
    }

    async fn exec(&self, pod: &PodRef, request: ExecRequest) -> Result<ExecOutput> {
        exec::exec(self, pod, request).await
    }

    async fn port_exchange(
        &self,
        pod: &PodRef,
        container: &str,
        port: u16,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        exec::port_exchange(self, pod, container, port, request, timeout).await
    }

    async fn logs(&self, pod: &PodRef, container: &str) -> Result<String> {
        pods::logs(self, pod, container).await
    }

    async fn delete_pod(&self, pod: &PodRef) -> Result<()> {
        pods::delete(self, pod).await
    }

    /// The local backend has one namespace ([`LOCAL_NAMESPACE`]).
    async fn pod_uid(&self, _namespace: &str, name: &str) -> Result<Option<String>> {
        pods::uid(self, name).await
    }

    async fn pod_labels(
        &self,
        _namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        pods::labels(self, name).await
    }

    async fn host_sharing(&self, pod: &PodRef) -> Result<HostSharing> {
        pods::host_sharing(self, pod).await
    }

    async fn pod_object(&self, pod: &PodRef) -> Result<Option<Pod>> {
        pods::object(self, pod).await
    }

    async fn pod_exposures(&self, pod: &PodRef) -> Result<Vec<String>> {
        pods::exposures(self, pod).await
    }

    async fn pod_ip(&self, pod: &PodRef) -> Result<Option<String>> {
        pods::ip(self, pod).await
    }

    async fn list_labelled(&self, selector: &[(&str, &str)]) -> Result<Vec<String>> {
        self.objects.list_labelled(selector).await
    }

    /// Also every Pod of these labels whose create was dropped half way, by UID: its cgroup
    /// carries no labels, and its containers may not exist yet.
    async fn remove_labelled(
        &self,
        selector: &[(&str, &str)],
        dry_run: bool,
    ) -> Result<Vec<String>> {
        if dry_run {
            return self.objects.remove_labelled(selector, dry_run).await;
        }
        let abandoned: Vec<(String, BTreeMap<String, String>)> = {
            let mut all = self.abandoned.lock().unwrap_or_else(|p| p.into_inner());
            let selected: Vec<String> = all
                .iter()
                .filter(|(_, labels)| {
                    selector
                        .iter()
                        .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
                })
                .map(|(uid, _)| uid.clone())
                .collect();
            selected
                .into_iter()
                .filter_map(|uid| all.remove_entry(&uid))
                .collect()
        };
        if !abandoned.is_empty() {
            // An engine request sent before the create was dropped (a container's create
            // or start) is still carried out: swept once it has landed, or the sweep finds
            // a volume in use by a container it did not list.
            tokio::time::sleep(ABANDONED_SETTLE).await;
        }
        let keep = |left: &mut dyn Iterator<Item = (String, BTreeMap<String, String>)>| {
            // For the next sweep.
            self.abandoned
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(left);
        };
        let mut removed = match self.objects.remove_labelled(selector, dry_run).await {
            Ok(removed) => removed,
            Err(e) => {
                keep(&mut abandoned.into_iter());
                return Err(e);
            }
        };
        let mut left = abandoned.into_iter();
        while let Some((uid, labels)) = left.next() {
            match self.remove_abandoned(&uid).await {
                Ok(gone) => removed.extend(gone),
                Err(e) => {
                    keep(&mut std::iter::once((uid, labels)).chain(left));
                    return Err(e);
                }
            }
        }
        removed.sort();
        removed.dedup();
        Ok(removed)
    }
}
