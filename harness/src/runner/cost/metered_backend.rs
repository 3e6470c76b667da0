//! A backend that counts and times every call it forwards, by kind, for the report's cost
//! section: what the harness asks of the engine or the cluster. It also records what each
//! task Pod's containers ran ([`RanImages`]): read once the Pod's main container runs, and
//! again before the Pod is deleted when a container had no image id yet.

use super::{CallMeter, metered};
use crate::backend::{
    Backend, ConnectionTest, ContainerState, ExecOutput, ExecRequest, HostSharing, PodRef, Result,
    WorkspaceRef,
};
use crate::pod::template::WorkspaceMode;
use crate::runner::ran_images::RanImages;
use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub struct MeteredBackend {
    inner: Arc<dyn Backend>,
    meter: CallMeter,
    ran: RanImages,
}

impl MeteredBackend {
    pub fn new(inner: Arc<dyn Backend>, meter: CallMeter, ran: RanImages) -> Self {
        Self { inner, meter, ran }
    }

    /// Reads what task Pod `pod`'s containers run into [`RanImages`] (a failed read is left:
    /// the report then lacks the Pod, and says what it saw).
    async fn read_images(&self, pod: &PodRef) {
        if let Ok(states) = metered(&self.meter, "get", self.inner.container_states(pod)).await {
            self.ran.saw(pod, &states);
        }
    }
}

#[async_trait]
impl Backend for MeteredBackend {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn keep_hint(&self, pod: &PodRef, container: &str) -> String {
        self.inner.keep_hint(pod, container)
    }
    fn platform(&self) -> crate::pod::compose::Arch {
        self.inner.platform()
    }
    fn unenforced(&self, pod: &Pod) -> Vec<String> {
        self.inner.unenforced(pod)
    }
    fn plumbing_listeners(&self) -> Vec<(String, &'static str)> {
        self.inner.plumbing_listeners()
    }
    async fn pod_object(&self, pod: &PodRef) -> Result<Option<Pod>> {
        metered(&self.meter, "get", self.inner.pod_object(pod)).await
    }
    async fn restricted_identity(&self) -> Result<Option<(String, Arc<dyn Backend>)>> {
        self.inner.restricted_identity().await
    }
    async fn connection_test(&self, mode: WorkspaceMode) -> Result<Option<ConnectionTest>> {
        metered(
            &self.meter,
            "connection_test",
            self.inner.connection_test(mode),
        )
        .await
    }
    async fn pod_exposures(&self, pod: &PodRef) -> Result<Vec<String>> {
        metered(&self.meter, "list", self.inner.pod_exposures(pod)).await
    }
    async fn create_workspace(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<WorkspaceRef> {
        let call = self.inner.create_workspace(name, labels, annotations);
        metered(&self.meter, "create_workspace", call).await
    }
    async fn delete_workspace(&self, workspace: &WorkspaceRef) -> Result<()> {
        metered(
            &self.meter,
            "delete_workspace",
            self.inner.delete_workspace(workspace),
        )
        .await
    }
    async fn get_workspace(&self, name: &str) -> Result<Option<WorkspaceRef>> {
        metered(&self.meter, "get", self.inner.get_workspace(name)).await
    }
    async fn workspace_labels(&self, name: &str) -> Result<Option<BTreeMap<String, String>>> {
        metered(&self.meter, "get", self.inner.workspace_labels(name)).await
    }
    async fn create_pod(&self, pod: &Pod) -> Result<PodRef> {
        let created = metered(&self.meter, "create_pod", self.inner.create_pod(pod)).await?;
        self.ran.task_pod(&created);
        Ok(created)
    }
    async fn create_helper_pod(&self, pod: &Pod) -> Result<PodRef> {
        metered(&self.meter, "create_pod", self.inner.create_helper_pod(pod)).await
    }
    async fn wait_running(&self, pod: &PodRef, container: &str, timeout: Duration) -> Result<()> {
        let call = self.inner.wait_running(pod, container, timeout);
        metered(&self.meter, "wait_running", call).await?;
        if self.ran.is_task_pod(pod) {
            self.read_images(pod).await;
        }
        Ok(())
    }
    async fn container_states(&self, pod: &PodRef) -> Result<Vec<ContainerState>> {
        let states = metered(&self.meter, "get", self.inner.container_states(pod)).await?;
        self.ran.saw(pod, &states);
        Ok(states)
    }
    async fn exec(&self, pod: &PodRef, request: ExecRequest) -> Result<ExecOutput> {
        metered(&self.meter, "exec", self.inner.exec(pod, request)).await
    }
    async fn port_exchange(
        &self,
        pod: &PodRef,
        container: &str,
        port: u16,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        let call = self
            .inner
            .port_exchange(pod, container, port, request, timeout);
        metered(&self.meter, "port_exchange", call).await
    }
    async fn logs(&self, pod: &PodRef, container: &str) -> Result<String> {
        metered(&self.meter, "logs", self.inner.logs(pod, container)).await
    }
    async fn diagnostics(&self, pod: &PodRef) -> Vec<(String, String)> {
        metered(&self.meter, "diagnostics", self.inner.diagnostics(pod)).await
    }
    async fn delete_pod(&self, pod: &PodRef) -> Result<()> {
        // A companion the kubelet had not created when the main container ran: read now.
        if self.ran.incomplete(pod) {
            self.read_images(pod).await;
        }
        metered(&self.meter, "delete_pod", self.inner.delete_pod(pod)).await
    }
    async fn pod_uid(&self, namespace: &str, name: &str) -> Result<Option<String>> {
        metered(&self.meter, "get", self.inner.pod_uid(namespace, name)).await
    }
    async fn pod_labels(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        metered(&self.meter, "get", self.inner.pod_labels(namespace, name)).await
    }
    async fn host_sharing(&self, pod: &PodRef) -> Result<HostSharing> {
        metered(&self.meter, "get", self.inner.host_sharing(pod)).await
    }
    async fn pod_ip(&self, pod: &PodRef) -> Result<Option<String>> {
        metered(&self.meter, "get", self.inner.pod_ip(pod)).await
    }
    async fn list_labelled(&self, selector: &[(&str, &str)]) -> Result<Vec<String>> {
        metered(&self.meter, "list", self.inner.list_labelled(selector)).await
    }
    async fn remove_labelled(
        &self,
        selector: &[(&str, &str)],
        dry_run: bool,
    ) -> Result<Vec<String>> {
        let call = self.inner.remove_labelled(selector, dry_run);
        metered(&self.meter, "remove_labelled", call).await
    }
}
