//! The node view of a Kind cluster: its node is a container on this host's engine, whose
//! processes and cgroups (below the node container's) this host reads.

use super::run::Cluster;
use crate::node::{CgroupFs, HostNode, NodeView};
use std::path::PathBuf;
use std::sync::Arc;

impl Cluster {
    /// The node view: a Kind node is a container on this host's engine, whose cgroups and
    /// processes this host sees. Other clusters have none here.
    pub async fn node_view(&self, docker: Option<&bollard::Docker>) -> Option<Arc<dyn NodeView>> {
        let kind = self.kind.as_ref()?;
        let docker = docker?;
        let node = kind.node_container();
        let pid = docker
            .inspect_container(
                &node,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
            .ok()?
            .state?
            .pid?;
        let init_cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let view = kind_node(
            CgroupFs::host().ok()?,
            PathBuf::from("/proc"),
            &node,
            &init_cgroup,
        )?;
        Some(Arc::new(view))
    }
}

/// A Kind node container seen from this host: its cgroups below the node container's
/// (from its PID 1's `/proc/<pid>/cgroup` text, `init_cgroup`), its processes in `proc_root`.
pub fn kind_node(
    cgroups: CgroupFs,
    proc_root: PathBuf,
    node_container: &str,
    init_cgroup: &str,
) -> Option<HostNode> {
    Some(HostNode {
        cgroups,
        proc_root,
        scope: node_cgroup_scope(init_cgroup)?,
        description: format!("Kind node {node_container} (read from this host)"),
        settle: crate::node::KUBELET_SETTLE,
        ledger: crate::node::LedgerFolders::WithinScope,
    })
}

/// The node container's cgroup as this host sees it, from its init's `/proc/<pid>/cgroup`:
/// on v1 (and hybrid hosts, which also list the unified hierarchy) the memory hierarchy's
/// path, on v2 the unified line's. Kind's entrypoint moves the node's processes into
/// `init.scope` on v2 (`…/docker-<id>.scope/init.scope`) while the kubelet puts its Pods in the
/// sibling `kubelet.slice`: the node's cgroup is the folder above `init.scope`.
pub fn node_cgroup_scope(proc_cgroup: &str) -> Option<String> {
    let memory = proc_cgroup.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then_some(path)
    });
    let path = memory.or_else(|| proc_cgroup.lines().find_map(|l| l.strip_prefix("0::")))?;
    let path = path.trim();
    let root = match path.strip_suffix("/init.scope") {
        Some("") => "/",
        Some(parent) => parent,
        None => path,
    };
    Some(root.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_scope_comes_from_the_node_containers_cgroup() {
        assert_eq!(
            node_cgroup_scope("0::/system.slice/docker-abc.scope\n").as_deref(),
            Some("/system.slice/docker-abc.scope")
        );
        assert_eq!(
            node_cgroup_scope(
                "12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n"
            )
            .as_deref(),
            Some("/docker/abc")
        );
        assert_eq!(node_cgroup_scope(""), None);
    }
}
