//! Where the `kube` backend's cluster comes from and what the run sets up in it.
//!
//! - `--backend kind`: a Kind cluster from `kind/cluster.yaml` (single node, node image pinned
//!   by digest), the locally built images loaded with `docker save` + `kind load
//!   image-archive`, deleted at the end unless kept. Its node is a container on this host's
//!   engine, so the node view reads the node's processes and cgroups from this host.
//! - `--backend kube`: a kubeconfig and a context the operator names (never the ambient
//!   current context), in a namespace the operator names or one the run creates and removes.
//!
//! In both, the run applies a namespaced Role mirroring Kandev's executor permissions
//! (kandev-contract.md §7; or the operator's, `--executor-role FILE`), binds it to a service
//! account, and every session call goes
//! through a client holding that account's token: the suite proves the recipe works with
//! Kandev's least privilege. The operator's own identity only sets up, reads evidence (logs,
//! events: not in Kandev's Role) and cleans up.
//!
//! Here: `connect` (kubeconfig, context, clients, reaching the API server), `executor` (the
//! Role and the permissions Kandev needs), `run` (the run's [`Cluster`]: set up, torn down),
//! `preflight`, `operator` (what the operator's own identity must be allowed, asked before
//! anything is created), `kind_node` (the node view of a Kind node), `lease` (the run's liveness, which
//! `gc` respects), `gc`, `settings` (the command line's cluster settings as these backends
//! read them), `proxy` (which proxy a client goes through, as kubectl decides) and
//! `resilience` (the retries every client makes).

mod connect;
mod executor;
mod gc;
mod kind_node;
mod lease;
mod operator;
mod preflight;
mod proxy;
pub mod resilience;
mod run;
mod settings;

pub use super::errors::{ClusterError, GRANTED_CHECK};
pub use connect::{
    ClientBounds, IN_CLUSTER, NoAnswer, REACH_TIMEOUT, Reached, RefreshedToken, client_for,
    client_for_bounded, client_of, client_with_token, open, open_in_cluster, open_with, reach,
};
pub(super) use executor::can_i;
pub use executor::{EXECUTOR, NOT_NEEDED, executor_role, executor_role_file, required_access};
pub use gc::{GcScope, gc};
pub use kind_node::{kind_node, node_cgroup_scope};
pub use lease::{
    Holder, Judged, LEASE_SECONDS, RENEW_EVERY, RunLease, judge, lease_name, leases_in,
};
pub use operator::{Need, bookkeeper_rules, operator_needs, operator_preflight};
pub use proxy::{ProxySource, proxy_for, tolerant_no_proxy};
pub use run::{Cluster, SETTLE, run_labels, run_namespace};
