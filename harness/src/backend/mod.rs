//! Backends run a composed Pod. Each owns everything about itself in its folder: how a run
//! prepares it (engine or cluster, images, node view, environment facts), what the run tears
//! down at its end, `gc`, and its Pod operations behind the [`Backend`] trait. The runner and
//! the command line reach a backend only through [`provider`], its one
//! registration.

pub mod connection;
pub mod kube;
pub mod local;
pub mod on_this_host;
pub mod setup_steps;

use crate::config::RunConfig;
use crate::host::HostEngine;
use crate::host::images::ImageSet;
use crate::node::NodeView;
use crate::pod::template::{TemplateFile, WorkspaceMode};
use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kandev_report::{CleanupRecord, Environment};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use crate::config::BackendKind;
pub use connection::ConnectionTest;
pub use setup_steps::SetupSteps;

/// The one place a backend is registered: its provider (preparation, teardown, `gc`).
pub fn provider(kind: BackendKind) -> &'static dyn Provider {
    match kind {
        BackendKind::Local => &local::setup::LocalProvider,
        BackendKind::Kind => &kube::setup::KindProvider,
        BackendKind::Kube => &kube::setup::KubeProvider,
    }
}

/// What a backend's run preparation gets from the runner.
pub struct PrepareInput<'a> {
    pub run_id: &'a str,
    pub config: &'a RunConfig,
    /// `reports/<run>/`: where a backend may keep run files (Kind's kubeconfig).
    pub report_folder: &'a Path,
    /// The static mock agent, built on first use ([`PrepareInput::mock_agent_binary`]).
    pub mock_agent: tokio::sync::OnceCell<PathBuf>,
    /// Run-level set-up steps, recorded in the report.
    pub setup: &'a dyn SetupSteps,
    /// Image builds show their progress here.
    pub progress: &'a indicatif::MultiProgress,
    /// The run's template, parsed once; a preflight puts the images the backend will run into
    /// it ([`TemplateFile::with_images`]).
    pub template: &'a TemplateFile,
    /// Set when the run is stopped (Ctrl-C, SIGTERM, `--deadline`): a long preparation step
    /// (the cluster warm-up) ends on it and removes what it made.
    pub stopped: &'a std::sync::atomic::AtomicBool,
}

impl PrepareInput<'_> {
    /// The static mock agent binary (built once, recorded as the `mock_agent_binary` step):
    /// uploaded into every session, and the local backend's infra image is built from it.
    pub async fn mock_agent_binary(&self) -> anyhow::Result<PathBuf> {
        self.mock_agent
            .get_or_try_init(|| async {
                let started = std::time::Instant::now();
                let built = crate::host::images::mock_agent_binary().await;
                self.setup.step(
                    "mock_agent_binary",
                    started,
                    built,
                    |p| serde_json::json!({ "path": p }),
                )
            })
            .await
            .cloned()
    }
}

/// A backend ready for sessions, and what the run must undo at its end.
pub struct Prepared {
    pub backend: Arc<dyn Backend>,
    /// The namespace sessions run in.
    pub namespace: String,
    pub images: ImageSet,
    /// The node seen from outside the Pods, when the backend has one.
    pub node: Option<Arc<dyn NodeView>>,
    /// This host's engine, when the backend uses one (images are built there; scenarios check
    /// that nested images never land in it).
    pub host_engine: Option<HostEngine>,
    /// Engine, cluster, kernel and cgroup facts (the runner adds the template).
    pub environment: Environment,
    /// What the run set up beyond its sessions (a namespace, executor objects, a cluster).
    pub teardown: Option<Box<dyn RunTeardown>>,
    /// How many scenarios to run at once, derived from what the cluster can hold when the
    /// operator did not say (`jobs` set-up step); None: as given, or the host's default.
    pub jobs: Option<usize>,
}

/// What a run set up beyond its sessions, removed when the run ends.
#[async_trait]
pub trait RunTeardown: Send + Sync {
    async fn teardown(&self) -> Vec<CleanupRecord>;
    /// What `--keep` left in place and how to remove it later: `gc` is the exact `gc`
    /// command of the run ([`RunConfig::gc_command`]).
    fn kept_hint(&self, gc: &str) -> String;
    /// The run is over but `--keep` leaves what it set up: the run stops holding its lease,
    /// so that `gc` no longer spares it (returns the release's record, if any).
    async fn release(&self) -> Vec<CleanupRecord> {
        Vec::new()
    }
}

/// What `gc` is asked to remove.
#[derive(Debug, Clone)]
pub struct GcRequest {
    /// Only what this run created; otherwise everything the harness labelled (`--all`).
    pub run: Option<String>,
    pub dry_run: bool,
    /// Remove runs that are still alive too (their lease live).
    pub force: bool,
    /// Orphaned node state younger than this is left alone (a run may be creating it).
    pub older_than: Duration,
    pub cluster: crate::config::ClusterSettings,
}

/// What `gc` did: what it removed (or, in a dry run, would remove), and the runs it spared
/// because they are alive.
#[derive(Debug, Clone, Default)]
pub struct GcOutcome {
    pub removed: Vec<String>,
    pub spared: Vec<Spared>,
    /// Objects whose deletion was requested before (a run's namespace its own teardown
    /// deleted, still terminating): left to the cluster, neither removed again nor alive.
    pub being_removed: Vec<String>,
    /// Orphaned node state left because it is younger than `--older-than` (a Pod being
    /// created may own it), with its age: a later `gc` removes it.
    pub too_young: Vec<(String, Duration)>,
    /// What could not be searched, with why and the fix (a kind the identity may not list).
    pub not_searched: Vec<String>,
}

/// A run `gc` left alone because it is alive, and the evidence (its lease).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spared {
    pub run: String,
    pub evidence: String,
}

/// A backend's run-level knowledge: checks of the command line, preparation, `gc`.
#[async_trait]
pub trait Provider: Send + Sync {
    /// What the command line lacks for this backend (nothing is created); `Err` is the
    /// message, naming the fix.
    fn check(&self, config: &RunConfig) -> Result<(), String>;
    /// Whether the run prepares the backend before any trial (a cluster: an unreachable one
    /// stops the run at once, before anything is created).
    fn prepare_first(&self) -> bool {
        false
    }
    async fn prepare(&self, input: &PrepareInput<'_>) -> anyhow::Result<Prepared>;
    /// Removes what killed runs left (by label), sparing runs that are alive unless
    /// `force`; returns what was (or would be) removed and who was spared.
    async fn gc(&self, request: &GcRequest) -> anyhow::Result<GcOutcome>;
}

/// A Pod the backend created: the UID is what every later delete checks.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// A workspace volume (claim) the backend holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    /// The exec's deadline (the `kube` backend applies its `EXEC_DEADLINE` when none is
    /// given: its client has no read timeout, so nothing else would end a hung exec).
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

/// How a process ended, as diagnoses say it: `exit 1`, or `no exit status` (killed, or the
/// stream closed before it said).
pub fn exit_text(code: Option<impl std::fmt::Display>) -> String {
    code.map_or_else(|| "no exit status".to_owned(), |c| format!("exit {c}"))
}

impl ExecOutput {
    pub fn success(&self) -> bool {
        self.exit_code == Some(0)
    }
    /// `exit 1`, or `no exit status`.
    pub fn exit_text(&self) -> String {
        exit_text(self.exit_code)
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
    /// The image as the container names it (the Pod's `image`, as the runtime reports it).
    pub image: String,
    /// The image it runs, as the runtime identifies it: the engine's container `Image`
    /// (`sha256:<hex>`) locally, the kubelet's `imageID` on a cluster. None until the runtime
    /// says (a container the kubelet has not created yet).
    pub image_id: Option<String>,
}

/// What a running Pod shares with its node, read back from what runs (not from the Pod that
/// was requested).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct HostSharing {
    /// `container: host path` for each host path mounted into the Pod.
    pub host_paths: Vec<String>,
    /// `container: network|pid|ipc` for each host namespace the Pod joins.
    pub host_namespaces: Vec<String>,
}

/// Refuses a helper Pod that teardown, the label sweep and `gc` could not find.
pub fn check_helper_labels(pod: &Pod) -> Result<()> {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let missing: Vec<&str> = [
        crate::pod::identity::LABEL_MANAGED,
        crate::pod::identity::LABEL_RUN,
    ]
    .into_iter()
    .filter(|key| !labels.contains_key(*key))
    .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(BackendError::Create {
        what: "helper pod",
        name: pod.metadata.name.clone().unwrap_or_default(),
        source: anyhow::anyhow!(
            "it lacks the labels {missing:?}: nothing could find it to remove it"
        ),
    })
}

/// Whether `error` came from the platform under the Pod rather than from the Pod: the API
/// server's connection lost past the client's retries or silent past its answer bound, an
/// exec's or port-forward's stream broken in transit, or the node's kubelet not knowing the
/// Pod or out of the API server's reach. Such an error is the cluster's, named with its fix;
/// a check that meets it judged nothing (the run ends errored, exit 3), however far into the
/// check it came (real Kind's containerd restarted mid-run cut the API server off for about
/// 20 s). None of them is an answer about the Pod, so no broken Pod produces one.
pub fn is_platform_fault(error: &anyhow::Error) -> bool {
    error.chain().any(is_platform_cause)
}

/// Whether one cause of an error's chain is the platform's ([`is_platform_fault`]).
pub fn is_platform_cause(cause: &(dyn std::error::Error + 'static)) -> bool {
    cause.is::<kube::cluster::resilience::ConnectionLost>()
        || cause.is::<kube::cluster::NoAnswer>()
        || cause.is::<kube::StreamBroke>()
        || cause.is::<kube::KubeletLacksPod>()
        || cause.is::<kube::ContainerUnreachable>()
}

/// Errors of backend operations, each naming the operation and the object.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
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
    #[error(transparent)]
    WaitTimedOut(#[from] crate::wait::WaitTimedOut),
    /// The Pod will not start as it is, and the cluster (or engine) said why: an image that
    /// cannot be pulled, a Pod no node can take (a node selector no node carries, a claim that
    /// does not exist). Surfaced as soon as it is seen, not at the wait's bound.
    #[error("pod {pod} cannot start: {cause}")]
    CannotStart { pod: String, cause: String },
    /// A deleted object that stays: its deletion was requested and its grace period is over
    /// (a Pod's containers stopped), but finalizers hold it, and only the controllers that
    /// own them may remove them.
    #[error(
        "{what} {name} (uid {uid}) is still there {waited:?} after its delete: the finalizers {finalizers:?} hold it and the controllers that own them have not removed them\n  fix: find the controller that owns each finalizer and why it does not finish (removing a finalizer by hand skips that controller's cleanup)"
    )]
    DeleteHeld {
        what: &'static str,
        name: String,
        uid: String,
        finalizers: Vec<String>,
        waited: std::time::Duration,
    },
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
    /// How a person gets into a Pod kept with `--keep`.
    fn keep_hint(&self, pod: &PodRef, container: &str) -> String;
    /// The architecture a session's Pod is pinned to (`nodeSelector kubernetes.io/arch`):
    /// the cluster's on `kube` and `kind`, this machine's on the local engine.
    fn platform(&self) -> crate::pod::compose::Arch {
        crate::pod::compose::Arch::of_this_machine()
    }
    /// What the backend accepts in `pod` without enforcing it as a kubelet would (findings).
    fn unenforced(&self, _pod: &Pod) -> Vec<String> {
        Vec::new()
    }
    /// Addresses the backend's own plumbing listens on inside every Pod's network namespace
    /// (not the Pod's: a kubelet adds none), with why; a scenario that counts the Pod's
    /// listeners leaves these out and says so.
    fn plumbing_listeners(&self) -> Vec<(String, &'static str)> {
        Vec::new()
    }
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
    /// The labels of the workspace (claim) of that name (None when absent), for fail-closed
    /// checks before a terminal cleanup.
    async fn workspace_labels(&self, name: &str) -> Result<Option<BTreeMap<String, String>>>;
    /// Creates a Kandev task Pod and starts it (the local backend also creates its
    /// emptyDirs); on Kubernetes the admitted Pod is compared with the requested one.
    async fn create_pod(&self, pod: &Pod) -> Result<PodRef>;
    /// Creates one of the harness's own Pods (a transfer peer, a node inspector). It is no
    /// task Pod, so Kandev's admission comparison does not apply; it must carry the harness's
    /// managed and run labels, so that teardown, the label sweep and `gc` find it.
    async fn create_helper_pod(&self, pod: &Pod) -> Result<PodRef>;
    /// Waits until `container` is running.
    async fn wait_running(&self, pod: &PodRef, container: &str, timeout: Duration) -> Result<()>;
    async fn container_states(&self, pod: &PodRef) -> Result<Vec<ContainerState>>;
    /// Runs a command in a container as that container's user.
    async fn exec(&self, pod: &PodRef, request: ExecRequest) -> Result<ExecOutput>;
    /// One request/response exchange with a TCP port inside the Pod (port-forward; locally a
    /// connection through the Pod's tunnel, one long-lived exec in its infra container).
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
    /// What the running Pod shares with its node: locally the engine's view of its
    /// containers (bind mounts, host namespace modes); on Kubernetes the Pod object as the API
    /// server returns it.
    async fn host_sharing(&self, pod: &PodRef) -> Result<HostSharing>;
    /// The running Pod read back whole, as the backend holds it (Kubernetes: a GET of the
    /// object the API server stores; locally: the Pod it was given, its labels as the engine
    /// carries them); None when it is gone.
    async fn pod_object(&self, _pod: &PodRef) -> Result<Option<Pod>> {
        Err(BackendError::Other {
            operation: "read back the Pod".into(),
            source: anyhow::anyhow!("the {} backend cannot read a Pod back", self.name()),
        })
    }
    /// What exposes the Pod beyond the port-forward, as `kind/name: detail`: on Kubernetes
    /// every Service in the namespace whose selector matches the Pod's labels (seen with the
    /// operator's identity); locally every port the engine publishes from the Pod's containers
    /// (the local backend has no Services).
    async fn pod_exposures(&self, _pod: &PodRef) -> Result<Vec<String>> {
        Err(BackendError::Other {
            operation: "list what exposes the Pod".into(),
            source: anyhow::anyhow!("the {} backend cannot list exposures", self.name()),
        })
    }
    /// The same backend acting as an identity Kandev's executor Role does not cover (it may
    /// not create Pods), with who that is; None where the backend has no access control (the
    /// local engine).
    async fn restricted_identity(&self) -> Result<Option<(String, Arc<dyn Backend>)>> {
        Ok(None)
    }
    /// Kandev's connection test (foundation 14) of the identity the sessions run as, with the
    /// sessions' own client: the API server answers, names the identity, and says what it
    /// may do (access reviews of what Kandev needs in `mode` and of what it must not need,
    /// and a rules review of the namespace). None where there is no API server (the local
    /// engine): the run lacks the `cluster` capability.
    async fn connection_test(&self, _mode: WorkspaceMode) -> Result<Option<ConnectionTest>> {
        Ok(None)
    }
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
