//! `--node-inspector`: the inspector Pods on the nodes a session may be placed on (made at the
//! run's start) and on those the sessions landed on, each an [`ExecNode`], together one
//! [`NodeView`].

use super::exec_node::ExecNode;
use super::script::HOST_CGROUP;
use crate::backend::Backend;
use crate::backend::kube::backend::KubeBackend;
use crate::node::{CgroupFolder, NodeFolders, NodeProcess, NodeView, PodCgroupReading};
use crate::pod::compose::Arch;
use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, PodSpec};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What the inspector's container requests and may use at most.
static INSPECTOR_RESOURCES: std::sync::LazyLock<serde_json::Value> =
    std::sync::LazyLock::new(|| {
        serde_json::json!({"requests": {"cpu": "10m", "memory": "32Mi"},
            "limits": {"cpu": "500m", "memory": "256Mi"}})
    });

/// `--node-inspector` on a cluster: one inspector Pod per node a session may be placed on,
/// made at the run's start ([`start`](Self::start)) so that the leak ledger lists every such
/// node's cgroup folders before the first scenario, and one on any other node a session
/// landed on, made on first use; each created with the operator's identity (it is harness
/// tooling, not a session), pinned to the node by `nodeName`, removed when the run ends.
pub struct ClusterInspector {
    backend: Arc<KubeBackend>,
    admin: kube::Client,
    namespace: String,
    image: String,
    run_id: String,
    nodes: tokio::sync::Mutex<BTreeMap<String, Arc<ExecNode>>>,
    pod_nodes: std::sync::Mutex<BTreeMap<String, String>>,
    /// The nodes a session may be placed on, each with why its inspector did not start (None:
    /// it did), as [`start`](Self::start) found them; Err: why they are not known.
    placeable: std::sync::OnceLock<Result<BTreeMap<String, Option<String>>, String>>,
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
            placeable: std::sync::OnceLock::new(),
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

    /// The inspector on `node`, made now if there is none.
    async fn on(&self, node: &str) -> anyhow::Result<Arc<ExecNode>> {
        let mut nodes = self.nodes.lock().await;
        if let Some(found) = nodes.get(node) {
            return Ok(found.clone());
        }
        let view = self.launch(node).await?;
        nodes.insert(node.to_owned(), view.clone());
        Ok(view)
    }

    /// Creates the inspector Pod on `node` and waits until it runs.
    async fn launch(&self, node: &str) -> anyhow::Result<Arc<ExecNode>> {
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
        Ok(Arc::new(ExecNode::new(
            self.backend.clone(),
            pod,
            "inspector",
            format!("inspector Pod on node {node}"),
        )))
    }

    /// At the run's start: an inspector on every node the task Pod of `template` (pinned to
    /// `arch`) may be placed on, judged as the warm-up judges them
    /// ([`targets`](crate::backend::kube::warm_up::targets)), all at once. A node whose
    /// inspector does not start is named with why, and its cgroup folders are not compared;
    /// nodes that cannot be listed leave every node's not compared, saying why. Its evidence
    /// (the `node_inspector` set-up step).
    pub async fn start(&self, template: &PodSpec, arch: Arch) -> serde_json::Value {
        let listed = kube::Api::<Node>::all(self.admin.clone())
            .list(&kube::api::ListParams::default())
            .await;
        let nodes = match listed {
            Ok(list) => list.items,
            Err(e) => {
                let why = format!(
                    "the nodes a session may be placed on could not be listed at the run's start ({e}): grant your identity list on nodes to have their cgroup folders compared"
                );
                let evidence = serde_json::json!({"why": why});
                let _ = self.placeable.set(Err(why));
                return evidence;
            }
        };
        let (targets, left_out) = crate::backend::kube::warm_up::targets(&nodes, template, arch);
        let launched =
            futures_util::future::join_all(targets.iter().map(|target| self.launch(&target.node)))
                .await;
        let mut placeable = BTreeMap::new();
        let mut evidence = Vec::new();
        let mut running = self.nodes.lock().await;
        for (target, launched) in targets.iter().zip(launched) {
            let node = target.node.clone();
            match launched {
                Ok(view) => {
                    evidence.push(serde_json::json!({"node": node, "inspector": view.pod.name}));
                    running.insert(node.clone(), view);
                    placeable.insert(node, None);
                }
                Err(e) => {
                    let why = format!("its inspector Pod did not start: {e:#}");
                    evidence.push(serde_json::json!({"node": node, "why": why}));
                    placeable.insert(node, Some(why));
                }
            }
        }
        let _ = self.placeable.set(if placeable.is_empty() {
            Err("no node a session may be placed on was found at the run's start".into())
        } else {
            Ok(placeable)
        });
        serde_json::json!({"nodes": evidence, "left_out": left_out})
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
        "inspector Pods on the nodes a session may be placed on (--node-inspector)".into()
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

    /// Every node a session may be placed on, keyed by its name, each listed by its own
    /// inspector; a node whose inspector did not start is not listed, saying why.
    async fn cgroup_folders(&self) -> Result<NodeFolders, String> {
        let placeable = match self.placeable.get() {
            Some(Ok(placeable)) => placeable,
            Some(Err(why)) => return Err(why.clone()),
            None => return Err("the inspectors were not started at the run's start".into()),
        };
        let running = self.nodes.lock().await.clone();
        let listings = futures_util::future::join_all(placeable.iter().map(|(node, why)| {
            let view = running.get(node).cloned();
            async move {
                let listing = match (view, why) {
                    (Some(view), _) => view.list_cgroup_folders().await,
                    (None, Some(why)) => Err(why.clone()),
                    (None, None) => Err("its inspector Pod is gone".into()),
                };
                (node.clone(), listing)
            }
        }))
        .await;
        Ok(listings.into_iter().collect())
    }

    async fn cgroup_folder(&self, node: &str, folder: &str) -> Option<CgroupFolder> {
        let view = self.nodes.lock().await.get(node).cloned()?;
        view.read_cgroup_folder(folder).await
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
