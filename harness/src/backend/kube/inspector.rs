//! The node view through an inspector: a privileged helper Pod on the session's node, with
//! the node's PID namespace and its cgroup tree mounted read-only at `/host/cgroup`. Clusters
//! whose nodes the harness cannot see from its own host use it when the operator opts in
//! (`--node-inspector`); it is the same view as [`crate::node::HostNode`], read over exec.
//!
//! Cgroup files are copied out (only the ones the reader needs) into a temporary tree laid
//! out like the node's, and read there with the same [`CgroupFs`] code as on this host.
//!
//! On a cgroup v2 node the inspector container has its own cgroup namespace, in which
//! `/proc/<pid>/cgroup` shows paths relative to the inspector's cgroup
//! (`0::/../../kubelet-kubepods-…`). Process cgroups are therefore read in the node's
//! namespace (`nsenter -t 1 -C`); where nsenter is missing or refused, they are read in the
//! inspector's own and resolved from its place in the node's tree ([`CgroupReader`],
//! [`node_cgroup_path`]), and the view's description says so.

use crate::backend::{Backend, ExecRequest, PodRef};
use crate::node::{
    CgroupFs, NESTED_CGROUP_DEPTH, NodeProcess, NodeView, POD_CGROUP_DEPTH, PodCgroupReading,
};
use anyhow::{Context, bail};
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Where the inspector mounts the node's `/sys/fs/cgroup`.
pub const HOST_CGROUP: &str = "/host/cgroup";

/// The files [`CgroupFs::read_pod`] reads (v1 and v2).
const CGROUP_FILES: [&str; 17] = [
    "cgroup.procs",
    "cpu.max",
    "cpu.stat",
    "cpuacct.usage",
    "cpu.cfs_period_us",
    "cpu.cfs_quota_us",
    "memory.current",
    "memory.events",
    "memory.failcnt",
    "memory.limit_in_bytes",
    "memory.max",
    "memory.max_usage_in_bytes",
    "memory.oom_control",
    "memory.peak",
    "memory.usage_in_bytes",
    "pids.current",
    "pids.max",
];

/// One node seen through an exec-capable helper container.
pub struct ExecNode {
    pub backend: Arc<dyn Backend>,
    pub pod: PodRef,
    pub container: String,
    pub description: String,
    /// How `/proc/<pid>/cgroup` is read there (found out on first use).
    reader: tokio::sync::OnceCell<CgroupReader>,
}

fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

fn pod_cgroup_patterns(pod_uid: &str) -> [String; 2] {
    [
        format!("pod{pod_uid}"),
        format!("*pod{}.slice", pod_uid.replace('-', "_")),
    ]
}

impl ExecNode {
    pub fn new(
        backend: Arc<dyn Backend>,
        pod: PodRef,
        container: &str,
        description: impl Into<String>,
    ) -> Self {
        Self {
            backend,
            pod,
            container: container.to_owned(),
            description: description.into(),
            reader: tokio::sync::OnceCell::new(),
        }
    }

    async fn sh(&self, script: &str) -> anyhow::Result<String> {
        self.run(&[], script).await
    }

    /// How this inspector reads `/proc/<pid>/cgroup` (probed once).
    async fn reader(&self) -> anyhow::Result<&CgroupReader> {
        self.reader
            .get_or_try_init(|| async {
                let reader = cgroup_reader(&self.sh(READER_PROBE).await?);
                if let CgroupReader::Own { why, root } = &reader {
                    tracing::warn!(
                        inspector = %self.pod.name,
                        "reading process cgroups in the inspector's own cgroup namespace ({why}); its root in the node's tree: {root:?}"
                    );
                }
                Ok(reader)
            })
            .await
    }

    /// Runs `script` where `/proc/<pid>/cgroup` shows the node's paths: in the node's cgroup
    /// namespace when the inspector can enter it, else in its own (the reader says which).
    async fn sh_reading_cgroups(&self, script: &str) -> anyhow::Result<(String, &CgroupReader)> {
        let reader = self.reader().await?;
        let text = match reader {
            CgroupReader::Node => {
                self.run(&["nsenter", "-t", "1", "-C", "--"], script)
                    .await?
            }
            CgroupReader::Own { .. } => self.sh(script).await?,
        };
        Ok((text, reader))
    }

    /// `sh -c script` in the inspector, behind `prefix` (a command that runs its arguments).
    async fn run(&self, prefix: &[&str], script: &str) -> anyhow::Result<String> {
        // Processes vanish while the loops read /proc: only the scripts' output counts.
        let script = format!("{script}\nexit 0");
        let mut argv = prefix.to_vec();
        argv.extend(["sh", "-c", &script]);
        let request = ExecRequest::new(&self.container, &argv).timeout(Duration::from_secs(60));
        let out = self
            .backend
            .exec(&self.pod, request)
            .await
            .with_context(|| format!("node inspector {}", self.pod.name))?;
        if !out.success() {
            bail!(
                "node inspector {} ended with {}: {}",
                self.pod.name,
                out.exit_text(),
                out.stderr_text().trim()
            );
        }
        Ok(out.stdout_text())
    }

    /// The hierarchy folders below `/host/cgroup` (v2: the root itself, as "").
    const HIERARCHIES: &str = r#"if [ -f /host/cgroup/cgroup.controllers ]; then set -- ""; else set --; for h in /host/cgroup/*/; do [ -L "${h%/}" ] || set -- "$@" "$(basename "$h")"; done; fi"#;
}

/// Parses `=== <key>` sections.
fn sections(text: &str) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(key) = line.strip_prefix("=== ") {
            found.push((key.to_owned(), String::new()));
        } else if let Some((_, body)) = found.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    found
}

/// `/proc/<pid>/cgroup` lines into the map [`NodeProcess`] keeps.
fn cgroup_map(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
        })
        .collect()
}

/// In whose cgroup namespace the inspector reads `/proc/<pid>/cgroup`: the kernel shows each
/// path relative to the reader's namespace root, and a container on a cgroup v2 node runs in
/// its own (`0::/../../kubelet-kubepods-…` for a process in another Pod).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupReader {
    /// In the node's namespace (`nsenter -t 1 -C`, PID 1's): paths are the node's.
    Node,
    /// In the inspector's own namespace (`why`: nsenter is missing or not permitted): paths
    /// are relative to its root, found at `root` in the node's tree (None: not found, paths
    /// stay as read).
    Own { why: String, root: Option<String> },
}

/// A cgroup path as `reader` read it, as the node's tree has it: the inspector's place in
/// the node's tree joined with what it read, `..` climbing from there (never above the root).
pub fn node_cgroup_path(read: &str, reader: &CgroupReader) -> String {
    let CgroupReader::Own {
        root: Some(root), ..
    } = reader
    else {
        return read.to_owned();
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in root.split('/').chain(read.split('/')) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            name => parts.push(name),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Finds out how the inspector reads `/proc/<pid>/cgroup`: in the node's cgroup namespace
/// (PID 1's, through `nsenter`) when it can; otherwise in its own, and then where its own
/// namespace root lies in the node's tree (the folder whose `cgroup.procs` lists this shell:
/// host PID namespace), and where its own cgroup is inside its namespace.
const READER_PROBE: &str = r#"if ! command -v nsenter >/dev/null 2>&1; then why='nsenter is missing'
elif ! nsenter -t 1 -C -- true 2>/dev/null; then why='nsenter -t 1 -C is refused'
else echo '=== reader node'; exit 0; fi
echo '=== reader own'; echo "why $why"
if [ -f /host/cgroup/cgroup.controllers ]; then v2=1; base=/host/cgroup; else v2=; base=/host/cgroup/memory; fi
own=
while IFS=: read -r id ctl path; do
  if [ -n "$v2" ]; then [ "$id" = 0 ] && own=$path
  else case ",$ctl," in *,memory,*) own=$path ;; esac; fi
done < /proc/self/cgroup
echo "self $own"
echo "base $base"
echo "at $(grep -rlx --include=cgroup.procs "$$" "$base" 2>/dev/null | head -n 1)""#;

/// The reader that `READER_PROBE`'s output describes.
pub fn cgroup_reader(probe: &str) -> CgroupReader {
    let parsed = sections(probe);
    let Some((key, body)) = parsed.first() else {
        return CgroupReader::Own {
            why: format!("the probe answered {:?}", probe.trim()),
            root: None,
        };
    };
    if key == "reader node" {
        return CgroupReader::Node;
    }
    let field = |name: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .map(str::trim)
            .unwrap_or_default()
            .to_owned()
    };
    let (own, base, at) = (field("self"), field("base"), field("at"));
    // Where this shell's cgroup lies in the node's tree, then its namespace's root above it.
    let placed = at
        .strip_prefix(base.as_str())
        .and_then(|p| p.strip_suffix("cgroup.procs"))
        .filter(|_| !base.is_empty())
        .map(|p| p.trim_end_matches('/'));
    let root = placed.and_then(|placed| {
        let own = own.trim_end_matches('/');
        let root = placed.strip_suffix(own)?;
        Some(if root.is_empty() {
            "/".to_owned()
        } else {
            root.to_owned()
        })
    });
    CgroupReader::Own {
        why: Some(field("why"))
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| "nsenter cannot be used".into()),
        root,
    }
}

/// The `processes_matching` script's output (`=== <pid> <cmdline>` and the process's
/// `/proc/<pid>/cgroup`) as `reader` read it, with the node's cgroup paths.
fn parse_processes(text: &str, reader: &CgroupReader) -> Vec<NodeProcess> {
    let mut found: Vec<NodeProcess> = sections(text)
        .into_iter()
        .filter_map(|(head, body)| {
            let (pid, cmdline) = head.split_once(' ').unwrap_or((&head, ""));
            Some(NodeProcess {
                pid: pid.parse().ok()?,
                cmdline: cmdline.trim().to_owned(),
                cgroups: node_cgroup_map(&body, reader),
            })
        })
        .collect();
    found.sort_by_key(|p| p.pid);
    found
}

/// `/proc/<pid>/cgroup` text as `reader` read it, into the map [`NodeProcess`] keeps, with
/// node-absolute paths.
pub fn node_cgroup_map(text: &str, reader: &CgroupReader) -> BTreeMap<String, String> {
    cgroup_map(text)
        .into_iter()
        .map(|(controllers, path)| (controllers, node_cgroup_path(&path, reader)))
        .collect()
}

#[async_trait]
impl NodeView for ExecNode {
    fn describe(&self) -> String {
        match self.reader.get() {
            Some(CgroupReader::Own { why, root }) => format!(
                "{} (process cgroups read in the inspector's own cgroup namespace, {why}: {})",
                self.description,
                match root {
                    Some(root) => format!("resolved from its place {root} in the node's tree"),
                    None => "left as read, its place in the node's tree was not found".into(),
                }
            ),
            _ => self.description.clone(),
        }
    }

    fn settle_time(&self) -> Duration {
        crate::node::KUBELET_SETTLE
    }

    async fn pod_cgroup(&self, pod_uid: &str) -> anyhow::Result<Option<String>> {
        let [plain, slice] = pod_cgroup_patterns(pod_uid);
        let script = format!(
            "{}\nfor h in \"$@\"; do d=$(find \"/host/cgroup/$h\" -maxdepth {} -type d \\( -name {} -o -name {} \\) -print 2>/dev/null | head -n 1); if [ -n \"$d\" ]; then echo \"${{d#/host/cgroup/$h}}\"; exit 0; fi; done",
            ExecNode::HIERARCHIES,
            POD_CGROUP_DEPTH,
            quote(&plain),
            quote(&slice)
        );
        let found = self.sh(&script).await?;
        let path = found.trim();
        Ok((!path.is_empty()).then(|| format!("/{}", path.trim_start_matches('/'))))
    }

    async fn read_cgroup(&self, path: &str) -> anyhow::Result<PodCgroupReading> {
        // The path goes into a shell script: cgroup paths are plain names.
        if !path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/-_.:@".contains(c))
            || path.contains("..")
        {
            bail!("not a cgroup path: {path:?}");
        }
        let names: Vec<String> = CGROUP_FILES.iter().map(|f| format!("-name {f}")).collect();
        let script = format!(
            "{}\n[ -f /host/cgroup/cgroup.controllers ] && echo '=== file cgroup.controllers'\nfor h in \"$@\"; do base=\"/host/cgroup/$h\"; [ -d \"$base{path}\" ] || continue; find \"$base{path}\" -type d | while read -r d; do echo \"=== dir ${{d#/host/cgroup/}}\"; done; find \"$base{path}\" -type f \\( {} \\) | while read -r f; do echo \"=== file ${{f#/host/cgroup/}}\"; cat \"$f\" 2>/dev/null; done; done",
            ExecNode::HIERARCHIES,
            names.join(" -o ")
        );
        let text = self.sh(&script).await?;
        let tree = tempfile::tempdir().context("a folder for the inspector's cgroup copy")?;
        for (key, body) in sections(&text) {
            let (kind, relative) = key.split_once(' ').unwrap_or(("", ""));
            if relative.contains("..") {
                continue;
            }
            let target = tree.path().join(relative);
            match kind {
                "dir" => std::fs::create_dir_all(&target)?,
                "file" => {
                    if let Some(parent) = target.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::write(&target, body)?;
                }
                _ => {}
            }
        }
        let cgroups = CgroupFs::at(tree.path())?;
        Ok(cgroups.read_pod(path.trim_start_matches('/')))
    }

    async fn processes_matching(&self, needle: &str) -> anyhow::Result<Vec<NodeProcess>> {
        let script = format!(
            "needle={}\nfor p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < \"$p/cmdline\" 2>/dev/null) || continue; case \"$c\" in *\"$needle\"*) ;; *) continue ;; esac; case \"$c\" in *'needle='*) continue ;; esac; echo \"=== ${{p#/proc/}} $c\"; cat \"$p/cgroup\" 2>/dev/null; done",
            quote(needle)
        );
        let (text, reader) = self.sh_reading_cgroups(&script).await?;
        Ok(parse_processes(&text, reader))
    }

    async fn kernel_memcg_ooms(&self, path: &str) -> Option<Vec<String>> {
        let log = self.sh("dmesg").await.ok()?;
        Some(crate::node::memcg_ooms_in(&log, path))
    }

    async fn pod_remains(
        &self,
        pod_name: &str,
        pod_uid: &str,
        nested_ids: &[String],
    ) -> anyhow::Result<Vec<String>> {
        let [plain, slice] = pod_cgroup_patterns(pod_uid);
        let mut needles = vec![plain.clone(), slice.trim_start_matches('*').to_owned()];
        needles.extend(nested_ids.iter().filter(|i| !i.is_empty()).cloned());
        let cases = needles
            .iter()
            .map(|n| format!("*{}*", n.replace('\'', "")))
            .collect::<Vec<_>>()
            .join("|");
        let mut names = vec![
            format!("-name {}", quote(&plain)),
            format!("-name {}", quote(&slice)),
        ];
        names.extend(
            nested_ids
                .iter()
                .filter(|i| !i.is_empty())
                .map(|i| format!("-name {}", quote(&format!("*{i}*")))),
        );
        let script = format!(
            "host={}\nfor p in /proc/[0-9]*; do cg=$(cat \"$p/cgroup\" 2>/dev/null) || continue; hit=; case \"$cg\" in {cases}) hit=1 ;; esac; if [ -z \"$hit\" ] && tr '\\0' '\\n' < \"$p/environ\" 2>/dev/null | grep -qx \"$host\"; then hit=1; fi; [ -n \"$hit\" ] && echo \"process/${{p#/proc/}} \\`$(tr '\\0' ' ' < \"$p/cmdline\" 2>/dev/null)\\`\"; done\nfind /host/cgroup -maxdepth {} -type d \\( {} \\) 2>/dev/null | sed 's#^/host/cgroup/#cgroup/#'",
            quote(&format!("HOSTNAME={pod_name}")),
            // One more level on v1: the hierarchy's folder.
            NESTED_CGROUP_DEPTH + 1,
            names.join(" -o ")
        );
        // Matched by the names in the path, which a relative path read in the inspector's
        // own namespace has too; in the node's namespace when possible all the same.
        let (text, _) = self.sh_reading_cgroups(&script).await?;
        let mut remains: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        remains.sort();
        remains.dedup();
        Ok(remains)
    }
}

/// `--node-inspector` on a cluster: one inspector Pod per node a session landed on, created
/// on first use with the operator's identity (it is harness tooling, not a session), pinned
/// to the node by `nodeName`, removed when the run ends.
pub struct ClusterInspector {
    backend: Arc<crate::backend::kube::KubeBackend>,
    admin: kube::Client,
    namespace: String,
    image: String,
    run_id: String,
    nodes: tokio::sync::Mutex<BTreeMap<String, Arc<ExecNode>>>,
    pod_nodes: std::sync::Mutex<BTreeMap<String, String>>,
}

impl ClusterInspector {
    pub fn new(admin: kube::Client, namespace: &str, image: &str, run_id: &str) -> Self {
        Self {
            backend: Arc::new(crate::backend::kube::KubeBackend::new(
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
        }
    }

    /// The inspector Pod for `node`.
    pub fn inspector_pod(&self, node: &str) -> k8s_openapi::api::core::v1::Pod {
        let name = format!(
            "kandev-acceptance-inspector-{}",
            &crate::pod::identity::short_digest(node)
        );
        let mut labels = crate::backend::kube::cluster::run_labels(&self.run_id);
        labels.insert(
            crate::pod::identity::LABEL_ROLE.into(),
            "node-inspector".into(),
        );
        serde_json::from_value(serde_json::json!({
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
                    "volumeMounts": [{"name": "node-cgroup", "mountPath": HOST_CGROUP, "readOnly": true}],
                }],
                "volumes": [{"name": "node-cgroup", "hostPath": {"path": "/sys/fs/cgroup", "type": "Directory"}}],
            },
        }))
        .unwrap_or_default()
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
        self.backend
            .wait_running(&pod, "inspector", Duration::from_secs(120))
            .await?;
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

    const INSPECTOR: &str = "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod7e57_1a5b.slice/cri-containerd-1a5b.scope";
    const NESTED: &str = "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod1111_2222.slice/cri-containerd-c0ffee02.scope/docker/9c8b7a6f";

    /// A v1 node: runtimes keep the host's cgroup namespace, the paths are the node's.
    #[test]
    fn v1_lines_are_the_nodes_paths() {
        let text = "12:pids:/kubepods/burstable/pod1111-2222/c0ffee02/docker/9c8b7a6f\n5:cpu,cpuacct:/kubepods/burstable/pod1111-2222/c0ffee02/docker/9c8b7a6f\n4:memory:/kubepods/burstable/pod1111-2222/c0ffee02/docker/9c8b7a6f\n1:name=systemd:/kubepods/burstable/pod1111-2222/c0ffee02/docker/9c8b7a6f\n0::/\n";
        let expected = "/kubepods/burstable/pod1111-2222/c0ffee02/docker/9c8b7a6f";
        for reader in [
            CgroupReader::Node,
            CgroupReader::Own {
                why: "nsenter is missing".into(),
                root: Some("/".into()),
            },
        ] {
            let map = node_cgroup_map(text, &reader);
            for controllers in ["pids", "cpu,cpuacct", "memory", "name=systemd"] {
                assert_eq!(
                    map.get(controllers).map(String::as_str),
                    Some(expected),
                    "{reader:?}"
                );
            }
        }
    }

    /// v2 read in the node's namespace (through nsenter): the node's paths, as read.
    #[test]
    fn v2_read_in_the_nodes_namespace_is_the_nodes_path() {
        let map = node_cgroup_map(&format!("0::{NESTED}\n"), &CgroupReader::Node);
        assert_eq!(map.get("").map(String::as_str), Some(NESTED));
    }

    /// v2 read in the inspector's own namespace: `/../..` climbs from the inspector's cgroup
    /// to the common ancestor; the node's path is that, from where the inspector sits.
    #[test]
    fn v2_relative_paths_are_resolved_from_the_inspectors_place() {
        let reader = CgroupReader::Own {
            why: "nsenter is missing".into(),
            root: Some(INSPECTOR.into()),
        };
        let read = "0::/../../../kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod1111_2222.slice/cri-containerd-c0ffee02.scope/docker/9c8b7a6f\n";
        let map = node_cgroup_map(read, &reader);
        assert_eq!(map.get("").map(String::as_str), Some(NESTED));
        // The inspector's own processes, and a climb to the root and past it.
        assert_eq!(node_cgroup_path("/", &reader), INSPECTOR);
        assert_eq!(
            node_cgroup_path("/../../../../../init.scope", &reader),
            "/init.scope"
        );
        assert_eq!(node_cgroup_path("/../../../../../../../x", &reader), "/x");
        // Where the inspector sits is unknown: the path stays as read.
        let unknown = CgroupReader::Own {
            why: "nsenter is missing".into(),
            root: None,
        };
        assert_eq!(
            node_cgroup_path("/../../x.slice", &unknown),
            "/../../x.slice"
        );
    }

    /// The probe's recorded answers: through nsenter; without it on v2, placed by the
    /// `cgroup.procs` that lists the probing shell; without it and not placed.
    #[test]
    fn the_reader_probe_says_where_paths_are_relative_to() {
        assert_eq!(cgroup_reader("=== reader node\n"), CgroupReader::Node);
        let own = format!(
            "=== reader own\nwhy nsenter is missing\nself /\nbase /host/cgroup\nat /host/cgroup{INSPECTOR}/cgroup.procs\n"
        );
        assert_eq!(
            cgroup_reader(&own),
            CgroupReader::Own {
                why: "nsenter is missing".into(),
                root: Some(INSPECTOR.into())
            }
        );
        // The shell sits in a sub-cgroup of its namespace's root.
        let nested = format!(
            "=== reader own\nwhy nsenter -t 1 -C is refused\nself /sub\nbase /host/cgroup\nat /host/cgroup{INSPECTOR}/sub/cgroup.procs\n"
        );
        assert_eq!(
            cgroup_reader(&nested),
            CgroupReader::Own {
                why: "nsenter -t 1 -C is refused".into(),
                root: Some(INSPECTOR.into())
            }
        );
        // v1, host namespace: the memory hierarchy's root cgroup.
        let v1 = "=== reader own\nwhy nsenter is missing\nself /\nbase /host/cgroup/memory\nat /host/cgroup/memory/cgroup.procs\n";
        assert!(matches!(cgroup_reader(v1), CgroupReader::Own { root: Some(r), .. } if r == "/"));
        let lost = "=== reader own\nwhy nsenter is missing\nself /\nbase /host/cgroup\nat \n";
        assert!(matches!(
            cgroup_reader(lost),
            CgroupReader::Own { root: None, .. }
        ));
        assert!(matches!(
            cgroup_reader(""),
            CgroupReader::Own { root: None, .. }
        ));
    }

    /// What `processes_matching` makes of the inspector's output: recorded in its own
    /// namespace on a v2 Kind node, each process's cgroup is the node's path below the Pod's.
    #[test]
    fn processes_read_in_the_inspectors_namespace_get_the_nodes_paths() {
        let text = "=== 5001 sleep 600 kandev-nested\n0::/../../../kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod1111_2222.slice/cri-containerd-c0ffee02.scope/docker/9c8b7a6f\n=== 77 sleep 600 kandev-nested\n0::/\n";
        let reader = CgroupReader::Own {
            why: "nsenter is missing".into(),
            root: Some(INSPECTOR.into()),
        };
        let found = parse_processes(text, &reader);
        assert_eq!(
            found.iter().map(|p| p.pid).collect::<Vec<_>>(),
            vec![77, 5001]
        );
        assert_eq!(found[1].cgroup_of("memory"), Some(NESTED));
        assert_eq!(found[0].cgroup_of("memory"), Some(INSPECTOR));
        let pod = "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod1111_2222.slice";
        assert!(
            found[1]
                .cgroup_of("pids")
                .is_some_and(|p| p.starts_with(&format!("{pod}/")))
        );
    }

    #[test]
    fn the_reader_probe_is_valid_shell() {
        let checked = std::process::Command::new("sh")
            .args(["-n", "-c", READER_PROBE])
            .status()
            .unwrap();
        assert!(checked.success());
    }

    #[test]
    fn sections_and_cgroup_lines_parse() {
        let parsed = sections(
            "=== 12 sleep 600 kandev-x\n4:memory:/kubepods/pod1\n0::/kubepods/pod1\n=== 13 sh\n",
        );
        assert_eq!(parsed.len(), 2);
        let map = cgroup_map(&parsed[0].1);
        assert_eq!(
            map.get("memory").map(String::as_str),
            Some("/kubepods/pod1")
        );
        assert_eq!(map.get("").map(String::as_str), Some("/kubepods/pod1"));
        assert_eq!(quote("it's"), "'it'\\''s'");
    }
}
