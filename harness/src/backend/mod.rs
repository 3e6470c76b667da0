//! Backends run a composed Pod. `local` (a Docker engine, the embedded default) is here; the
//! `kube` backend implements the same trait against an API server.

pub mod kube;
pub mod local;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;
use std::time::Duration;

/// A Pod the backend created: the UID is what every later delete checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// A workspace volume (claim) the backend holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceRef {
    pub name: String,
    pub uid: String,
    /// Only volumes this run created are ever deleted.
    pub created_by_run: bool,
}

/// One command in one container of a Pod.
#[derive(Debug, Clone, Default)]
pub struct ExecRequest {
    pub container: String,
    pub argv: Vec<String>,
    pub stdin: Option<Vec<u8>>,
    pub timeout: Option<Duration>,
}

impl ExecRequest {
    pub fn new(container: &str, argv: &[&str]) -> Self {
        Self {
            container: container.to_owned(),
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            ..Default::default()
        }
    }
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

#[derive(Debug, Clone, Default)]
pub struct ExecOutput {
    pub exit_code: Option<i64>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub duration: Duration,
}

impl ExecOutput {
    pub fn success(&self) -> bool {
        self.exit_code == Some(0)
    }
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// State of one container as the backend reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerState {
    pub name: String,
    pub running: bool,
    pub restarts: u32,
    pub exit_code: Option<i64>,
}

/// Errors of backend operations, each naming the operation and the object.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error(
        "no container engine answers at {endpoint}: {source}\n  fix: start one (bash harness/scripts/ensure-engine.sh) or set DOCKER_HOST"
    )]
    EngineUnreachable {
        endpoint: String,
        source: bollard::errors::Error,
    },
    #[error("the local backend cannot honour {field}: {reason}")]
    UnsupportedField { field: String, reason: String },
    #[error(
        "image {image} is not present in the engine\n  fix: build or load it first; this harness never pulls from a registry"
    )]
    ImageMissing { image: String },
    #[error("create {what} {name}")]
    Create {
        what: &'static str,
        name: String,
        #[source]
        source: anyhow::Error,
    },
    #[error("delete {what} {name}")]
    Delete {
        what: &'static str,
        name: String,
        #[source]
        source: anyhow::Error,
    },
    #[error("exec {argv:?} in {pod}/{container}")]
    Exec {
        pod: String,
        container: String,
        argv: Vec<String>,
        #[source]
        source: anyhow::Error,
    },
    #[error("timed out after {waited:?} waiting for {what}")]
    WaitTimedOut { what: String, waited: Duration },
    #[error(
        "{what} {name} is not the one this run created (expected uid {expected}, found {found})"
    )]
    UidMismatch {
        what: &'static str,
        name: String,
        expected: String,
        found: String,
    },
    #[error("{operation}")]
    Other {
        operation: String,
        #[source]
        source: anyhow::Error,
    },
}

pub type Result<T, E = BackendError> = std::result::Result<T, E>;

/// What runs a composed Pod.
#[async_trait]
pub trait Backend: Send + Sync {
    /// `local`, `kind` or `kube`.
    fn name(&self) -> &'static str;
    /// Creates a workspace claim (managed mode) with the given labels and annotations.
    async fn create_workspace(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<WorkspaceRef>;
    /// Deletes a workspace the run created, checking its UID; absent is success.
    async fn delete_workspace(&self, workspace: &WorkspaceRef) -> Result<()>;
    /// The workspace (claim) of that name, if it exists; the run did not create it
    /// (`existing_claim` mode, and checks that a deleted workspace is gone).
    async fn get_workspace(&self, name: &str) -> Result<Option<WorkspaceRef>>;
    /// Creates the Pod and starts it (the local backend also creates its emptyDirs).
    async fn create_pod(&self, pod: &Pod) -> Result<PodRef>;
    /// Waits until `container` is running.
    async fn wait_running(&self, pod: &PodRef, container: &str, timeout: Duration) -> Result<()>;
    async fn container_states(&self, pod: &PodRef) -> Result<Vec<ContainerState>>;
    /// Runs a command in a container as that container's user.
    async fn exec(&self, pod: &PodRef, request: ExecRequest) -> Result<ExecOutput>;
    /// One request/response exchange with a TCP port inside the Pod (port-forward; locally an
    /// exec bridge through `bridge_binary` in `container`).
    async fn port_exchange(
        &self,
        pod: &PodRef,
        container: &str,
        port: u16,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>>;
    async fn logs(&self, pod: &PodRef, container: &str) -> Result<String>;
    /// Backend-specific evidence of a Pod for a failed scenario, as (file name suffix, text):
    /// on Kubernetes the Pod object, its events and previous container logs.
    async fn diagnostics(&self, _pod: &PodRef) -> Vec<(String, String)> {
        Vec::new()
    }
    /// Deletes the Pod whose UID is `pod.uid` and waits until it is gone; absent is success.
    async fn delete_pod(&self, pod: &PodRef) -> Result<()>;
    /// Whether a Pod of that name exists, and its UID.
    async fn pod_uid(&self, namespace: &str, name: &str) -> Result<Option<String>>;
    /// The labels of the Pod of that name (None when absent), for fail-closed checks.
    async fn pod_labels(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>>;
    /// The Pod's IP address on the node network.
    async fn pod_ip(&self, pod: &PodRef) -> Result<Option<String>>;
    /// Every harness-managed object carrying all `selector` labels, as `kind/name`.
    async fn list_labelled(&self, selector: &[(&str, &str)]) -> Result<Vec<String>>;
    /// Removes every harness-managed object carrying all `selector` labels (and orphaned
    /// node state); returns what was (or, with `dry_run`, would be) removed.
    async fn remove_labelled(
        &self,
        selector: &[(&str, &str)],
        dry_run: bool,
    ) -> Result<Vec<String>>;
}
