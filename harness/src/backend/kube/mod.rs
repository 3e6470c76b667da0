//! The `kube` backend: the composed Pod on a real API server through kube-rs, with Kandev's
//! own checks — admission comparison after every create (a mutated Pod is deleted by its
//! exact UID), deletes with UID and resourceVersion preconditions followed by a wait until
//! the object is gone, PVCs deleted only when the run created them.
//!
//! The client it holds acts as the session identity (the run's service account bound to a
//! Role mirroring Kandev's executor permissions, see [`cluster`]), so every call a scenario
//! makes is one Kandev's least privilege allows.
//!
//! The [`Backend`] impl below is the one place to read what the backend does; each operation
//! lives with its API area: `pods` (and `status`, what a Pod's status says), `claims`,
//! `streams` (exec and port-forward), `evidence` (the operator's reads), `deletes` (exact
//! deletes), `sweeps` (label sweeps), `connection` (Kandev's connection test of the executor
//! identity), `errors`; `backend` holds the value and its identities.

pub mod cluster;
pub mod inspector;
pub mod kind;
mod kind_cgroup;
pub mod launch;
pub mod platform;
pub mod pull_secrets;
pub mod setup;
pub mod warm_up;

mod backend;
pub mod capacity;
mod claims;
mod connection;
mod deletes;
mod errors;
mod evidence;
mod placement;
mod pods;
mod status;
mod streams;
mod sweeps;

pub use crate::pod::admission::AdmissionMutated;
pub use backend::{FIELD_MANAGER, KEEPALIVE, KubeBackend, ManagedPvc};
pub use claims::compare_pvc;
pub use deletes::DeletePolicy;
pub use kind_cgroup::cgroup_v1_refusal;
pub use pods::CLAIM_GRACE;
pub use status::{CannotStart, Scheduling};
pub use streams::{ContainerUnreachable, EXEC_DEADLINE, KubeletLacksPod, StreamBroke};
pub use sweeps::{label_selector, list_labelled, remove_labelled};

use crate::backend::{
    Backend, ConnectionTest, ContainerState, ExecOutput, ExecRequest, HostSharing, PodRef, Result,
    WorkspaceRef,
};
use crate::pod::template::WorkspaceMode;
use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

#[async_trait]
impl Backend for KubeBackend {
    fn name(&self) -> &'static str {
        self.kind
    }

    fn keep_hint(&self, pod: &PodRef, container: &str) -> String {
        format!(
            "kubectl exec -it -n {} {} -c {container} -- sh",
            pod.namespace, pod.name
        )
    }

    fn platform(&self) -> crate::pod::compose::Arch {
        self.arch
            .unwrap_or_else(crate::pod::compose::Arch::of_this_machine)
    }

    async fn create_workspace(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<WorkspaceRef> {
        claims::create(self, name, labels, annotations).await
    }

    async fn delete_workspace(&self, workspace: &WorkspaceRef) -> Result<()> {
        claims::delete(self, workspace).await
    }

    async fn get_workspace(&self, name: &str) -> Result<Option<WorkspaceRef>> {
        claims::get(self, name).await
    }

    async fn workspace_labels(&self, name: &str) -> Result<Option<BTreeMap<String, String>>> {
        claims::labels(self, name).await
    }

    async fn create_helper_pod(&self, pod: &Pod) -> Result<PodRef> {
        pods::create_helper(self, pod).await
    }

    async fn create_pod(&self, pod: &Pod) -> Result<PodRef> {
        pods::create(self, pod).await
    }

    async fn wait_running(&self, pod: &PodRef, container: &str, timeout: Duration) -> Result<()> {
        pods::wait_running(self, pod, container, timeout).await
    }

    async fn container_states(&self, pod: &PodRef) -> Result<Vec<ContainerState>> {
        pods::container_states(self, pod).await
    }

    async fn exec(&self, pod: &PodRef, request: ExecRequest) -> Result<ExecOutput> {
        streams::exec(self, pod, request).await
    }

    async fn port_exchange(
        &self,
        pod: &PodRef,
        _container: &str,
        port: u16,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        streams::port_exchange(self, pod, port, request, timeout).await
    }

    async fn logs(&self, pod: &PodRef, container: &str) -> Result<String> {
        evidence::logs(self, pod, container).await
    }

    async fn diagnostics(&self, pod: &PodRef) -> Vec<(String, String)> {
        evidence::diagnostics(self, pod).await
    }

    async fn delete_pod(&self, pod: &PodRef) -> Result<()> {
        pods::delete(self, pod).await
    }

    async fn pod_uid(&self, namespace: &str, name: &str) -> Result<Option<String>> {
        pods::uid(self, namespace, name).await
    }

    async fn pod_labels(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        pods::labels(self, namespace, name).await
    }

    async fn host_sharing(&self, pod: &PodRef) -> Result<HostSharing> {
        pods::host_sharing(self, pod).await
    }

    async fn restricted_identity(&self) -> Result<Option<(String, Arc<dyn Backend>)>> {
        backend::restricted_identity(self).await
    }

    async fn connection_test(&self, mode: WorkspaceMode) -> Result<Option<ConnectionTest>> {
        connection::connection_test(self, mode).await
    }

    async fn pod_object(&self, pod: &PodRef) -> Result<Option<Pod>> {
        pods::object(self, pod).await
    }

    async fn pod_exposures(&self, pod: &PodRef) -> Result<Vec<String>> {
        evidence::exposures(self, pod).await
    }

    async fn pod_ip(&self, pod: &PodRef) -> Result<Option<String>> {
        pods::ip(self, pod).await
    }

    async fn list_labelled(&self, selector: &[(&str, &str)]) -> Result<Vec<String>> {
        list_labelled(&self.admin, &self.namespace, selector).await
    }

    async fn remove_labelled(
        &self,
        selector: &[(&str, &str)],
        dry_run: bool,
    ) -> Result<Vec<String>> {
        remove_labelled(
            &self.admin,
            &self.namespace,
            selector,
            dry_run,
            &self.delete_policy(),
        )
        .await
    }
}
