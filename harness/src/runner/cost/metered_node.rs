//! A node view that counts and times every read it forwards, by kind, for the report's cost
//! section: node scans (every process's command line, a cgroup tree) are the dearest reads.

use super::{CallMeter, metered};
use crate::node::{NodeProcess, NodeView, PodCgroupReading};
use std::sync::Arc;
use std::time::Duration;

pub struct MeteredNode {
    inner: Arc<dyn NodeView>,
    meter: CallMeter,
}

impl MeteredNode {
    pub fn new(inner: Arc<dyn NodeView>, meter: CallMeter) -> Self {
        Self { inner, meter }
    }
}

#[async_trait::async_trait]
impl NodeView for MeteredNode {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn pod_cgroup(&self, pod_uid: &str) -> anyhow::Result<Option<String>> {
        metered(
            &self.meter,
            "node_cgroup_find",
            self.inner.pod_cgroup(pod_uid),
        )
        .await
    }
    async fn read_cgroup(&self, path: &str) -> anyhow::Result<PodCgroupReading> {
        metered(
            &self.meter,
            "node_cgroup_read",
            self.inner.read_cgroup(path),
        )
        .await
    }
    async fn processes_matching(&self, needle: &str) -> anyhow::Result<Vec<NodeProcess>> {
        let call = self.inner.processes_matching(needle);
        metered(&self.meter, "node_process_scan", call).await
    }
    async fn pod_processes(&self, pod_name: &str) -> anyhow::Result<Vec<NodeProcess>> {
        let call = self.inner.pod_processes(pod_name);
        metered(&self.meter, "node_process_scan", call).await
    }
    async fn cgroup_folders(&self) -> Result<crate::node::NodeFolders, String> {
        self.inner.cgroup_folders().await
    }
    async fn cgroup_folder(&self, node: &str, folder: &str) -> Option<crate::node::CgroupFolder> {
        self.inner.cgroup_folder(node, folder).await
    }
    async fn kernel_memcg_ooms(&self, path: &str) -> Option<Vec<String>> {
        metered(
            &self.meter,
            "node_kernel_log",
            self.inner.kernel_memcg_ooms(path),
        )
        .await
    }
    async fn pod_remains(
        &self,
        pod_name: &str,
        pod_uid: &str,
        nested_ids: &[String],
    ) -> anyhow::Result<Vec<String>> {
        let call = self.inner.pod_remains(pod_name, pod_uid, nested_ids);
        metered(&self.meter, "node_remains_scan", call).await
    }
    fn settle_time(&self) -> Duration {
        self.inner.settle_time()
    }
    async fn track_pod(&self, pod_uid: &str) {
        self.inner.track_pod(pod_uid).await;
    }
    async fn shutdown(&self) {
        self.inner.shutdown().await;
    }
}
