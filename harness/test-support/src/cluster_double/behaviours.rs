//! What a cluster's own components may do beside the API server's rules, switched on per
//! double by a test ([`DoubleState::enable`](super::DoubleState::enable)): a controller
//! that relabels running Pods, a node agent whose finalizer is never removed, a registry the
//! node cannot reach, a controller that deletes Pods whose image cannot be pulled. None is
//! on by default, and none is anything the harness could see or switch: each is a
//! cluster's behaviour, as an operator's controllers and nodes have them, with which a test
//! breaks a promise the harness checks (the cluster twins of
//! `scenarios/tests/kube_double/main.rs`).
//! `controllers` carries them out.

use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// One behaviour of the cluster's own components.
#[derive(Debug, Clone, PartialEq)]
pub enum Behaviour {
    /// A controller (a policy engine's mutate-existing rule, an inventory controller) that
    /// patches the metadata of every Pod whose labels carry all of `selector` once the Pod
    /// runs on the node: `patch` is a JSON merge patch (RFC 7386) of `metadata` (labels,
    /// annotations), applied as the controller's own update (a resourceVersion of its own),
    /// after admission, so nothing at create time shows it.
    RelabelRunningPods {
        selector: BTreeMap<String, String>,
        patch: Value,
    },
    /// A node agent (a storage or network plugin keeping node-local state) that puts
    /// `finalizer` on every Pod that reaches the node, as its own update, and is stuck: it
    /// never removes it, so every delete of such a Pod is held (see `finalizers`) until
    /// someone removes it by hand.
    StuckNodeFinalizer { finalizer: String },
    /// The node's container runtime cannot reach the registry `host` (the first component
    /// of an image reference): a pull from it gets no answer and makes no progress, so the
    /// Pod's containers stay `waiting: ContainerCreating` (as a kubelet shows a pull under
    /// way) and never fail: containerd's `image_pull_progress_timeout` (5 minutes by
    /// default) is longer than any wait a client makes. An image the node already holds is
    /// not pulled.
    UnreachableRegistry { host: String },
    /// A cleanup controller that deletes, at once (grace period 0), every Pod one of whose
    /// containers cannot pull its image (`ErrImagePull`), before any client reads that
    /// status: the cause is left only in the Events of the Pod that is gone.
    ReapUnpullablePods,
}

/// The behaviours switched on in one double.
#[derive(Debug, Default)]
pub(crate) struct Behaviours(Mutex<Vec<Behaviour>>);

impl Behaviours {
    pub fn push(&self, behaviour: Behaviour) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(behaviour);
    }

    /// What is switched on now (a copy: callers may hold the store's lock meanwhile).
    pub fn all(&self) -> Vec<Behaviour> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// The registry host of an image reference, as a container runtime resolves it: the first
/// path component when it names a host (holds a `.` or a `:`, or is `localhost`), else
/// Docker Hub's.
pub(crate) fn registry_host(image: &str) -> &str {
    match image.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first,
        _ => "docker.io",
    }
}

#[cfg(test)]
mod tests {
    use super::registry_host;

    #[test]
    fn the_registry_host_is_the_first_component_only_when_it_names_one() {
        assert_eq!(
            registry_host("registry.invalid/kandev-acceptance/absent:never"),
            "registry.invalid"
        );
        assert_eq!(registry_host("localhost:5000/x"), "localhost:5000");
        assert_eq!(registry_host("localhost/x"), "localhost");
        assert_eq!(registry_host("kandev-acceptance/worker:abc"), "docker.io");
        assert_eq!(registry_host("busybox"), "docker.io");
    }
}
