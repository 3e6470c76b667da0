//! `--node-inspector`: the inspector Pods on the nodes the sessions landed on, each an
//! [`ExecNode`], together one [`NodeView`].

use super::exec_node::{ExecNode, HOST_CGROUP};
use crate::backend::Backend;
use crate::backend::kube::backend::KubeBackend;
use crate::node::{NodeProcess, NodeView, PodCgroupReading};
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What the inspector's container requests and may use at most.
static INSPECTOR_RESOURCES: std::sync::LazyLock<serde_json::Value> =
    std::sync::LazyLock::new(|| {
        serde_json::json!({"requests": {"cpu": "10m", "memory": "32Mi"},
            "limits": {"cpu": "500m", "memory": "256Mi"}})
    });

/// `--node-inspector` on a cluster: one inspector Pod per node a session landed on, created
/// on first use with the operator's identity (it is harness tooling, not a session), pinned
/// to the node by `nodeName`, removed when the run ends.
pub struct ClusterInspector {
    backend: Arc<KubeBackend>,
    admin: kube::Client,
    namespace: String,
    image: String,
    run_id: String,
    nodes: tokio::sync::Mutex<BTreeMap<String, Arc<ExecNode>>>,
    pod_nodes: std::sync::Mutex<BTreeMap<String, String>>,
    /// The run's image pull secrets: the inspector runs the daemon image.
    pull_secrets: Vec<String>,
}

impl ClusterInspector {
    pub fn new(admin: kube::Client, namespace: &str, image: &str, run_id: &str) -> Self {
        Self {
            backend: Arc::new(KubeBackend::new(
                admin.clone(),
                namespace,
                "kube",
                "inspector",
                Default::default(),
            )),
            admin,
            namespace: namespace.to_owned(),
            image: image.to_owned(),
            run_id: run_id.to_owned(),
            nodes: tokio::sync::Mutex::new(BTreeMap::new()),
            pod_nodes: std::sync::Mutex::new(BTreeMap::new()),
            pull_secrets: Vec::new(),
        }
    }

    /// The inspector Pods carry `names` in their `imagePullSecrets` (the run's copies).
    pub fn with_pull_secrets(mut self, names: Vec<String>) -> Self {
        self.pull_secrets = names;
        self
    }

    /// The inspector Pod for `node`, named for the run and the node: two runs sharing a
    /// namespace (`--namespace`), or a run beside what a killed one left, never ask for the
    /// same name.
    pub fn inspector_pod(&self, node: &str) -> k8s_openapi::api::core::v1::Pod {
        let name = format!(
            "kandev-acceptance-inspector-{}",
            &crate::pod::identity::short_digest(&format!("{}/{node}", self.run_id))
        );
        let mut labels = crate::backend::kube::cluster::run_labels(&self.run_id);
        labels.insert(
            crate::pod::identity::LABEL_ROLE.into(),
            "node-inspector".into(),
        );
        let mut pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": self.namespace, "labels": labels},
            "spec": {
                "nodeName": node,
                "hostPID": true,
                "automountServiceAccountToken": false,
                "terminationGracePeriodSeconds": 0,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{
                    "name": "inspector",
                    "image": self.image,
                    "command": ["sh", "-c", "while :; do sleep 3600; done"],
                    "securityContext": {"privileged": true},
                    // Declared, so that a namespace whose ResourceQuota constrains CPU and
                    // memory admits it (the quota plugin wants each set by every container);
                    // small, since it only reads the node's cgroup and process files.
                    "resources": INSPECTOR_RESOURCES.clone(),
                    "volumeMounts": [{"name": "node-cgroup", "mountPath": HOST_CGROUP, "readOnly": true}],
                }],
                "volumes": [{"name": "node-cgroup", "hostPath": {"path": "/sys/fs/cgroup", "type": "Directory"}}],
            },
        }))
        .unwrap_or_default();
        crate::backend::kube::pull_secrets::carry(&mut pod, &self.pull_secrets);
        pod
    }

    async fn node_of(&self, pod_uid: &str) -> anyhow::Result<Option<String>> {
        if let Some(node) = self
            .pod_nodes
            .lock()
            .ok()
            .and_then(|m| m.get(pod_uid).cloned())
        {
            return Ok(Some(node));
        }
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(self.admin.clone(), &self.namespace);
        let found = pods
            .list(&kube::api::ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|p| p.metadata.uid.as_deref() == Some(pod_uid))
            .and_then(|p| p.spec.and_then(|s| s.node_name));
        if let (Some(node), Ok(mut map)) = (&found, self.pod_nodes.lock()) {
            map.insert(pod_uid.to_owned(), node.clone());
        }
        Ok(found)
    }

    async fn on(&self, node: &str) -> anyhow::Result<Arc<ExecNode>> {
        let mut nodes = self.nodes.lock().await;
        if let Some(found) = nodes.get(node) {
            return Ok(found.clone());
        }
        let pod = self
            .backend
            .create_helper_pod(&self.inspector_pod(node))
            .await?;
        if let Err(e) = self
            .backend
            .wait_running(&pod, "inspector", Duration::from_secs(120))
            .await
        {
            // Not kept for a later try: removed now, so the run leaves none behind and the
            // next use creates it afresh.
            let _ = self.backend.delete_pod(&pod).await;
            return Err(e.into());
        }
        let view = Arc::new(ExecNode::new(
            self.backend.clone(),
            pod,
            "inspector",
            format!("inspector Pod on node {node}"),
        ));
        nodes.insert(node.to_owned(), view.clone());
        Ok(view)
    }

    async fn all(&self) -> Vec<Arc<ExecNode>> {
        self.nodes.lock().await.values().cloned().collect()
    }

    async fn for_pod(&self, pod_uid: &str) -> anyhow::Result<Option<Arc<ExecNode>>> {
        match self.node_of(pod_uid).await? {
            Some(node) => Ok(Some(self.on(&node).await?)),
            None => Ok(None),
        }
    }
}

#[async_trait]
impl NodeView for ClusterInspector {
    fn describe(&self) -> String {
        "inspector Pods on the sessions' nodes (--node-inspector)".into()
    }

    fn settle_time(&self) -> Duration {
        crate::node::KUBELET_SETTLE
    }

    async fn track_pod(&self, pod_uid: &str) {
        let _ = self.for_pod(pod_uid).await;
    }

    async fn pod_cgroup(&self, pod_uid: &str) -> anyhow::Result<Option<String>> {
        match self.for_pod(pod_uid).await? {
            Some(node) => node.pod_cgroup(pod_uid).await,
            None => Ok(None),
        }
    }

    async fn read_cgroup(&self, path: &str) -> anyhow::Result<PodCgroupReading> {
        let mut last = PodCgroupReading::default();
        for node in self.all().await {
            last = node.read_cgroup(path).await?;
            if last.exists {
                break;
            }
        }
        Ok(last)
    }

    async fn processes_matching(&self, needle: &str) -> anyhow::Result<Vec<NodeProcess>> {
        let mut found = Vec::new();
        for node in self.all().await {
            found.extend(node.processes_matching(needle).await?);
        }
        Ok(found)
    }

    async fn pod_processes(&self, pod_name: &str) -> anyhow::Result<Vec<NodeProcess>> {
        let mut found = Vec::new();
        for node in self.all().await {
            found.extend(node.pod_processes(pod_name).await?);
        }
        Ok(found)
    }

    async fn kernel_memcg_ooms(&self, path: &str) -> Option<Vec<String>> {
        let mut found = Vec::new();
        for node in self.all().await {
            found.extend(node.kernel_memcg_ooms(path).await?);
        }
        Some(found)
    }

    async fn pod_remains(
        &self,
        pod_name: &str,
        pod_uid: &str,
        nested_ids: &[String],
    ) -> anyhow::Result<Vec<String>> {
        let known = self
            .pod_nodes
            .lock()
            .ok()
            .and_then(|m| m.get(pod_uid).cloned());
        let nodes = match known {
            Some(node) => vec![self.on(&node).await?],
            None => self.all().await,
        };
        let mut remains = Vec::new();
        for node in nodes {
            remains.extend(node.pod_remains(pod_name, pod_uid, nested_ids).await?);
        }
        Ok(remains)
    }

    async fn shutdown(&self) {
        for node in self.all().await {
            let _ = self.backend.delete_pod(&node.pod).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 40, item 7: the inspector runs the daemon image, so it pulls it with the run's
    /// pull secrets; without any, it carries none.
    #[tokio::test]
    async fn the_inspector_carries_the_runs_pull_secrets() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap_or_default());
        let Ok(client) = kube::Client::try_from(config) else {
            panic!("a client needs no server to be made");
        };
        let carried = |inspector: &ClusterInspector| -> Vec<String> {
            let spec = inspector.inspector_pod("worker-1").spec.unwrap_or_default();
            spec.image_pull_secrets
                .unwrap_or_default()
                .into_iter()
                .map(|r| r.name)
                .collect()
        };
        let bare = ClusterInspector::new(client.clone(), "ns", "dind:1", "r1");
        assert!(carried(&bare).is_empty());
        let with = ClusterInspector::new(client, "ns", "dind:1", "r1")
            .with_pull_secrets(vec!["regcred".into()]);
        assert_eq!(carried(&with), ["regcred"]);
    }
}
