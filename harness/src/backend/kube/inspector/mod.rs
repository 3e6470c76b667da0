//! The node view through an inspector: a privileged helper Pod on the session's node, with
//! the node's PID namespace and its cgroup tree mounted read-only at `/host/cgroup`. Clusters
//! whose nodes the harness cannot see from its own host use it when the operator opts in
//! (`--node-inspector`); it is the same view as [`crate::node::HostNode`], read over exec.
//!
//! Cgroup files are copied out (only the ones the reader needs) into a temporary tree laid
//! out like the node's, and read there with the same [`CgroupFs`](crate::node::CgroupFs) code
//! as on this host.
//!
//! On a cgroup v2 node the inspector container has its own cgroup namespace, in which
//! `/proc/<pid>/cgroup` shows paths relative to the inspector's cgroup
//! (`0::/../../kubelet-kubepods-…`). Process cgroups are therefore read in the node's
//! namespace (`nsenter -t 1 -C`); where nsenter is missing or refused, they are read in the
//! inspector's own and resolved from its place in the node's tree ([`CgroupReader`],
//! [`node_cgroup_path`]), and the view's description says so.
//!
//! Here: `exec_node` (one node seen through an exec-capable helper container),
//! `cluster_inspector` (the inspector Pods of `--node-inspector`, one per node), and `script`
//! (the scripts' text: quoting, the reader probe, parsing what they print).

mod cluster_inspector;
mod exec_node;
mod script;

pub use cluster_inspector::ClusterInspector;
pub use exec_node::ExecNode;
pub use script::{CgroupReader, HOST_CGROUP, cgroup_reader, node_cgroup_map, node_cgroup_path};
