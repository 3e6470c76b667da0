//! The local backend value: the engine and host cgroup tree it runs Pods on, the infra image,
//! the Pods' network and pids limit, their port-forward tunnels, and each Pod as it was given.

use super::attach::PodStreams;
use super::engine::verified_container;
use super::objects::LocalObjects;
use super::tunnel::Tunnels;
use crate::backend::{PodRef, Result};
use crate::node::CgroupFs;
use bollard::Docker;
use k8s_openapi::api::core::v1::Pod;
use std::collections::HashMap;

/// Namespace name the local backend reports (it has no namespaces).
pub const LOCAL_NAMESPACE: &str = "local";

/// A composed Pod on a Docker engine, with Pod semantics (see the module docs of [`super`]).
pub struct LocalBackend {
    pub(super) objects: LocalObjects,
    pub(super) infra_image: String,
    /// Port-forward tunnels into the Pods, one per Pod.
    pub(super) tunnels: Tunnels,
    pub(super) pod_pids_limit: i64,
    /// The engine network Pods join (`bridge` unless [`LocalBackend::on_network`]).
    pub(super) pod_network: String,
    /// Each Pod as it was given (by UID), for
    /// [`Backend::pod_object`](crate::backend::Backend::pod_object).
    pub(super) given: std::sync::Mutex<HashMap<String, Pod>>,
    /// The UIDs of Pods whose create stopped half way, its future dropped (Ctrl-C, a
    /// scenario's timeout) after the Pod's cgroup or first objects may have been made, with
    /// the Pod's labels: the sweep of those labels removes them (`remove_labelled`), since a
    /// cgroup carries no labels and nothing else records the UID.
    pub(super) abandoned: std::sync::Mutex<
        std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    >,
}

impl LocalBackend {
    /// `infra_image` runs `infra_command` (`pause`) and applies fsGroup (`fsgroup`).
    pub fn new(docker: Docker, infra_image: String, pod_pids_limit: i64) -> Self {
        Self {
            objects: LocalObjects::new(docker),
            infra_image,
            tunnels: Tunnels::default(),
            pod_pids_limit,
            pod_network: "bridge".into(),
            given: std::sync::Mutex::default(),
            abandoned: std::sync::Mutex::default(),
        }
    }

    /// Pods join the engine network `name` (a run's network with the Pod MTU) instead of the
    /// engine's default bridge.
    pub fn on_network(mut self, name: &str) -> Self {
        name.clone_into(&mut self.pod_network);
        self
    }

    pub fn cgroups(&self) -> Option<&CgroupFs> {
        self.objects.cgroups.as_ref()
    }

    /// Streams into this backend's Pods (see [`PodStreams`]).
    pub fn streams(&self) -> PodStreams {
        PodStreams::new(self.objects.docker.clone())
    }

    /// The engine name of `container` of `pod`, once it is verified to carry the Pod's UID
    /// (never act on a look-alike).
    pub(super) async fn verified_name(&self, pod: &PodRef, container: &str) -> Result<String> {
        verified_container(&self.objects.docker, pod, container).await
    }
}
