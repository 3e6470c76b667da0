//! The node seen from outside the Pods: the [`NodeView`] trait and the host's own view.

mod cgroup;
mod process;

pub use cgroup::{CgroupFs, CgroupLimits, CgroupVersion, PodCgroupReading};
pub use process::{
    NodeProcess, kernel_memcg_ooms, memcg_ooms_in, pod_processes, pod_tree, processes_matching,
};

use process::process_dirs;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long a node may still show a deleted Pod before what is left counts: a local engine
/// removes a container's cgroup with the container, and its processes die within moments.
pub const ENGINE_SETTLE: Duration = Duration::from_secs(3);
/// How long a Kubernetes node may still show a deleted Pod: the kubelet removes the Pod's
/// cgroup in its housekeeping, seconds after the Pod object is gone from the API.
pub const KUBELET_SETTLE: Duration = Duration::from_secs(30);

/// The node as seen from outside the Pods: the scenarios' evidence of processes, cgroups and
/// kernel records, and the leak ledger's inventory. Paths are cgroup paths as the node's
/// processes show them in `/proc/<pid>/cgroup`.
#[async_trait::async_trait]
pub trait NodeView: Send + Sync {
    /// What this view reads (for evidence), e.g. `this host` or `Kind node kandev-...`.
    fn describe(&self) -> String;
    /// The Pod's cgroup (`pod<uid>`, or the systemd driver's `...pod<u_i_d>.slice`); None
    /// when the node has none.
    async fn pod_cgroup(&self, pod_uid: &str) -> anyhow::Result<Option<String>>;
    /// Limits, usage, descendants and member processes of a cgroup.
    async fn read_cgroup(&self, path: &str) -> anyhow::Result<PodCgroupReading>;
    /// Processes of the node whose command line contains `needle`: on a per-node view, of
    /// the nodes it knows a Pod on ([`track_pod`](Self::track_pod), [`pod_cgroup`](Self::pod_cgroup)).
    async fn processes_matching(&self, needle: &str) -> anyhow::Result<Vec<NodeProcess>>;
    /// Every process of the Pod named `pod_name` on the node, wherever its cgroups are: the
    /// Pod's containers' processes (the `HOSTNAME=<pod name>` every container runtime gives a
    /// container's processes) and all their descendants (the companion's containerd, shims
    /// and nested containers, whose own `HOSTNAME` is theirs): a process cannot leave the
    /// process tree of its PID namespace, whatever cgroup it moves to. An error when this view
    /// cannot enumerate them (the scenario then leaves what needs it not judged).
    async fn pod_processes(&self, pod_name: &str) -> anyhow::Result<Vec<NodeProcess>> {
        anyhow::bail!(
            "{} cannot enumerate a Pod's processes (pod {pod_name})",
            self.describe()
        )
    }
    /// The kernel's memcg OOM records at or below `path` (None: the log is not readable).
    async fn kernel_memcg_ooms(&self, path: &str) -> Option<Vec<String>>;
    /// What the node still holds of a deleted Pod (`kind/what` lines; empty when nothing).
    async fn pod_remains(
        &self,
        pod_name: &str,
        pod_uid: &str,
        nested_ids: &[String],
    ) -> anyhow::Result<Vec<String>>;
    /// Every cgroup folder of each node this view sees ([`NodeFolders`]), a few levels deep,
    /// leaving out Pods' cgroups (`pod<uid>`, `*-pod<u_i_d>.slice`) and the folder Pods are
    /// made under (a host view's scope), with what is below them: the leak ledger compares it
    /// before a scenario and after its teardown. Err: this view lists none, and why.
    async fn cgroup_folders(&self) -> Result<NodeFolders, String> {
        Err(format!("{} lists no cgroup folders", self.describe()))
    }
    /// One cgroup folder of `node` (a key of [`NodeFolders`]) as
    /// [`cgroup_folders`](Self::cgroup_folders) names it: when it was made and its processes'
    /// `HOSTNAME`s. None when it is gone (or cannot be read).
    async fn cgroup_folder(&self, _node: &str, _folder: &str) -> Option<CgroupFolder> {
        None
    }
    /// How long this node may still show a deleted Pod (its processes dying, its cgroup
    /// being removed) before what is left of it counts: polled that long, not longer.
    fn settle_time(&self) -> Duration;
    /// A Pod the scenario created, seen before it is torn down (so that a view that works
    /// per node knows where to look afterwards).
    async fn track_pod(&self, _pod_uid: &str) {}
    /// Removes what the view itself runs (inspector Pods); called once, when the run ends.
    async fn shutdown(&self) {}
}

/// The harness's own host as the node: the local backend's engine, or a Kind node container
/// on this host's engine, whose cgroups and processes the host sees (`scope` is then the
/// node container's cgroup).
pub struct HostNode {
    pub cgroups: CgroupFs,
    pub proc_root: PathBuf,
    /// Where Pod cgroups are searched (`kandev-acceptance` locally; a Kind node's cgroup).
    pub scope: String,
    pub description: String,
    /// [`NodeView::settle_time`].
    pub settle: Duration,
    /// Which cgroup folders the leak ledger compares.
    pub ledger: LedgerFolders,
}

/// Which of the host's cgroup folders the leak ledger compares (Pods' own cgroups, checked
/// by their UIDs, are always left out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerFolders {
    /// The whole host but the scope, the folder the local backend makes its Pods in: the
    /// local engine's companions run on this host, so a cgroup one makes outside its Pod is
    /// anywhere on it.
    HostButScope,
    /// The node's own tree (a Kind node container's): on cgroup v2, below the scope (the
    /// node container's cgroup), since a companion that escapes its Pod makes its cgroup
    /// inside the node (the node's cgroup namespace is its root) and what the host runs
    /// beside the node is not the run's; on v1, where a container has no cgroup namespace
    /// and the node shares the host's root, the whole host, the node's tree included (a
    /// nested engine's `/docker/<id>` lands at the host's root).
    WithinScope,
}

/// How many levels below the hierarchy root (or below a node's scope) a Pod's cgroup folder
/// is searched. Kind on a cgroup v2 host puts it 6 levels down (`system.slice/
/// docker-<id>.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-<qos>.slice/
/// kubelet-kubepods-<qos>-pod<u_i_d>.slice`; guaranteed Pods one less), the cgroupfs driver
/// as deep (`docker/<id>/kubelet/kubepods/<qos>/pod<uid>`); the rest is room for an engine
/// whose containers sit deeper (rootless: `user.slice/user-<uid>.slice/user@<uid>.service/…`).
pub const POD_CGROUP_DEPTH: usize = 10;
/// How many levels below the hierarchy root a nested container's cgroup is searched: 3 below
/// its Pod's (`cri-containerd-<id>.scope/docker/<64 hex>`, 9 on Kind on v2), and room for a
/// nested daemon's own sub-cgroups.
pub const NESTED_CGROUP_DEPTH: usize = 14;

/// How deep the leak ledger lists the node's cgroup folders: a companion that made a cgroup
/// outside its Pod made it where it could write, at the top of a hierarchy or a few levels
/// down (a Kind node's own cgroup is 2 levels down on a v2 host).
pub const LEDGER_CGROUP_DEPTH: usize = 6;

/// One listing of a node view's cgroup folders, each node's apart so that two nodes' folders
/// never merge: per node (`""` for a view of one node, else the node's name), its folders
/// (`<hierarchy>:<path>` on v1, `<path>` on v2), or why they could not be listed this time.
pub type NodeFolders =
    std::collections::BTreeMap<String, Result<std::collections::BTreeSet<String>, String>>;

/// A cgroup folder of a Pod (the cgroupfs driver's `pod<uid>`, the systemd driver's
/// `...-pod<u_i_d>.slice`): the ledger checks each Pod's own cgroups by its UID.
pub fn is_pod_cgroup(name: &str) -> bool {
    let uid_like = |s: &str| {
        s.len() >= 32
            && s.chars()
                .all(|c| c.is_ascii_hexdigit() || c == '-' || c == '_')
    };
    name.strip_prefix("pod").is_some_and(uid_like)
        || name
            .strip_suffix(".slice")
            .and_then(|n| n.rsplit_once("-pod"))
            .is_some_and(|(_, uid)| uid_like(uid))
}

/// One cgroup folder of the node as the leak ledger judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupFolder {
    pub path: String,
    /// When it was made (its folder's time), if the filesystem says.
    pub created: Option<std::time::SystemTime>,
    pub pids: Vec<u32>,
    /// Each process's `HOSTNAME` (empty when it has none or cannot be read), as `pids`.
    pub hostnames: Vec<String>,
}

fn pod_cgroup_names(pod_uid: &str) -> Vec<String> {
    vec![
        format!("pod{pod_uid}"),
        format!("pod{}", pod_uid.replace('-', "_")),
    ]
}

#[async_trait::async_trait]
impl NodeView for HostNode {
    fn describe(&self) -> String {
        self.description.clone()
    }

    fn settle_time(&self) -> Duration {
        self.settle
    }

    async fn pod_cgroup(&self, pod_uid: &str) -> anyhow::Result<Option<String>> {
        Ok(self
            .cgroups
            .find(&self.scope, &pod_cgroup_names(pod_uid), POD_CGROUP_DEPTH))
    }

    async fn read_cgroup(&self, path: &str) -> anyhow::Result<PodCgroupReading> {
        Ok(self.cgroups.read_pod(path.trim_start_matches('/')))
    }

    async fn processes_matching(&self, needle: &str) -> anyhow::Result<Vec<NodeProcess>> {
        Ok(processes_matching(&self.proc_root, needle))
    }

    async fn pod_processes(&self, pod_name: &str) -> anyhow::Result<Vec<NodeProcess>> {
        Ok(pod_processes(&self.proc_root, pod_name))
    }

    async fn cgroup_folders(&self) -> Result<NodeFolders, String> {
        let scope = self.scope.trim_matches('/').to_owned();
        // Err when the tree cannot be read: the ledger tells that from "nothing new".
        let listed = match self.ledger {
            LedgerFolders::HostButScope => self
                .cgroups
                .folders("", LEDGER_CGROUP_DEPTH, &|relative, name| {
                    is_pod_cgroup(name) || (!scope.is_empty() && relative == scope)
                })
                .map_err(|e| format!("the cgroup tree could not be read: {e}")),
            LedgerFolders::WithinScope if self.cgroups.version() == CgroupVersion::V1 => self
                .cgroups
                .folders("", LEDGER_CGROUP_DEPTH, &|_, name| is_pod_cgroup(name))
                .map_err(|e| format!("the cgroup tree could not be read: {e}")),
            // A node whose tree is in no hierarchy is not listed: no evidence.
            LedgerFolders::WithinScope if !self.cgroups.exists(&scope) => Err(format!(
                "the node's cgroup {scope} is in no hierarchy of this host's cgroup tree"
            )),
            LedgerFolders::WithinScope => self
                .cgroups
                .folders(&scope, LEDGER_CGROUP_DEPTH, &|_, name| is_pod_cgroup(name))
                .map_err(|e| format!("the node's cgroup tree could not be read: {e}")),
        };
        Ok(NodeFolders::from([(String::new(), listed)]))
    }

    async fn cgroup_folder(&self, _node: &str, folder: &str) -> Option<CgroupFolder> {
        let (created, pids) = self.cgroups.folder(folder)?;
        let hostnames = pids
            .iter()
            .map(|pid| {
                std::fs::read(self.proc_root.join(pid.to_string()).join("environ"))
                    .ok()
                    .and_then(|env| {
                        env.split(|b| *b == 0).find_map(|v| {
                            v.strip_prefix(b"HOSTNAME=")
                                .map(|h| String::from_utf8_lossy(h).into_owned())
                        })
                    })
                    .unwrap_or_default()
            })
            .collect();
        Some(CgroupFolder {
            path: folder.to_owned(),
            created,
            pids,
            hostnames,
        })
    }

    async fn kernel_memcg_ooms(&self, path: &str) -> Option<Vec<String>> {
        kernel_memcg_ooms(path)
    }

    async fn pod_remains(
        &self,
        pod_name: &str,
        pod_uid: &str,
        nested_ids: &[String],
    ) -> anyhow::Result<Vec<String>> {
        Ok(pod_remains(
            &self.cgroups,
            &self.proc_root,
            pod_uid,
            pod_name,
            nested_ids,
        ))
    }
}

/// What the node still holds of a Pod after it was deleted: its processes (by cgroup path —
/// the Pod's `pod<uid>` or a nested container's ID — or by the `HOSTNAME=<pod name>` every
/// container runtime gives the Pod's processes, which also finds processes that left the Pod's
/// cgroups), and cgroup folders of the Pod (`pod<uid>`, the systemd driver's `pod<u_i_d>`) or
/// of its nested containers. Empty when the Pod is gone without a trace.
pub fn pod_remains(
    cgroups: &CgroupFs,
    proc_root: &Path,
    pod_uid: &str,
    pod_name: &str,
    nested_ids: &[String],
) -> Vec<String> {
    let pod_dirs = pod_cgroup_names(pod_uid);
    let hostname = format!("HOSTNAME={pod_name}");
    let mut remains = Vec::new();
    for (pid, dir) in process_dirs(proc_root) {
        let cgroup = std::fs::read_to_string(dir.join("cgroup")).unwrap_or_default();
        let by_cgroup = pod_dirs.iter().any(|d| cgroup.contains(d.as_str()))
            || nested_ids
                .iter()
                .any(|id| !id.is_empty() && cgroup.contains(id.as_str()));
        let by_hostname = std::fs::read(dir.join("environ"))
            .map(|env| env.split(|b| *b == 0).any(|v| v == hostname.as_bytes()))
            .unwrap_or(false);
        if by_cgroup || by_hostname {
            let cmdline = std::fs::read(dir.join("cmdline"))
                .map(|raw| {
                    String::from_utf8_lossy(&raw)
                        .replace('\0', " ")
                        .trim()
                        .to_owned()
                })
                .unwrap_or_default();
            let cgroup_line = cgroup
                .lines()
                .find(|l| l.contains(":memory:") || l.starts_with("0::"))
                .unwrap_or_default()
                .to_owned();
            remains.push(format!("process/{pid} `{cmdline}` ({cgroup_line})"));
        }
    }
    remains.extend(
        cgroups
            .dirs_named(&pod_dirs, POD_CGROUP_DEPTH)
            .into_iter()
            .map(|dir| format!("cgroup/{dir}")),
    );
    remains.extend(
        cgroups
            .dirs_named(nested_ids, NESTED_CGROUP_DEPTH)
            .into_iter()
            .map(|dir| format!("cgroup/{dir} (a nested container's)")),
    );
    remains.sort();
    remains.dedup();
    remains
}
