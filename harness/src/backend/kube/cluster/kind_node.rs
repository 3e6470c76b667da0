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

    /// Kind on a cgroup v2 host: the node's PID 1 sits in `…/docker-<id>.scope/init.scope`;
    /// the node's cgroup (where its Pods are searched) is the `docker-<id>.scope` folder.
    #[test]
    fn the_node_scope_of_kind_on_v2_is_the_docker_scope_not_its_init_scope() {
        use crate::node::testing::{Driver, KindNode};
        let node = KindNode::new(true, Driver::Systemd);
        let init = node.init_cgroup();
        assert!(init.trim_end().ends_with(".scope/init.scope"), "{init}");
        let scope = node_cgroup_scope(&init);
        assert_eq!(scope.as_deref(), Some(node.node_cgroup.as_str()));
        let folder = node
            .cgroup_root()
            .join(scope.unwrap_or_default().trim_start_matches('/'));
        assert!(
            folder.is_dir()
                && folder
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("docker-")),
            "{}",
            folder.display()
        );
        // cgroupfs driver on v2: `/docker/<id>/init.scope`.
        assert_eq!(
            node_cgroup_scope("0::/docker/abc/init.scope\n").as_deref(),
            Some("/docker/abc")
        );
        // A hybrid (v1) host also lists the unified hierarchy: the memory hierarchy's path
        // is the one a v1 tree is searched by.
        assert_eq!(
            node_cgroup_scope("4:memory:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n")
                .as_deref(),
            Some("/docker/abc")
        );
    }

    /// The Kind node view as `node_view` builds it (the scope from the node's PID 1) finds
    /// every Pod's cgroup, its limits and what is left of it, on each driver and version.
    #[tokio::test]
    async fn the_kind_node_view_from_the_nodes_init_finds_pods_on_v1_and_v2() {
        use crate::node::testing::{Driver, assert_kind_view, kind_node_with_pods};
        for (v2, driver) in [
            (true, Driver::Systemd),
            (true, Driver::Cgroupfs),
            (false, Driver::Systemd),
            (false, Driver::Cgroupfs),
        ] {
            let node = kind_node_with_pods(v2, driver);
            let view = kind_node(
                CgroupFs::at(&node.cgroup_root()).unwrap(),
                node.proc_root(),
                &format!("(v2 {v2}, {driver:?})"),
                &node.init_cgroup(),
            )
            .unwrap();
            assert_kind_view(&node, &view).await;
        }
    }
}
