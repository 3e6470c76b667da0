//! The `kube` backend: the composed Pod on a real API server through kube-rs, with Kandev's
//! own checks — admission comparison after every create (a mutated Pod is deleted by its
//! exact UID), deletes with UID and resourceVersion preconditions followed by a wait until
//! the object is gone, PVCs deleted only when the run created them.
//!
//! The client it holds acts as the session identity (the run's service account bound to a
//! Role mirroring Kandev's executor permissions, see [`cluster`]), so every call a scenario
//! makes is one Kandev's least privilege allows.

pub mod cluster;
pub mod inspector;
pub mod kind;
pub mod setup;

use super::{
    Backend, BackendError, ContainerState, ExecOutput, ExecRequest, HostSharing, PodRef, Result,
    WorkspaceRef,
};
use crate::pod::admission::{self, AdmissionMismatch};
use crate::pod::identity::{ANNOTATION_CREATE_NONCE, LABEL_MANAGED};
use crate::pod::template::is_owned_label;
use crate::wait::{self, WaitTimedOut};
use anyhow::anyhow;
use async_trait::async_trait;
use k8s_openapi::api::core::v1::{
    Event, PersistentVolumeClaim, PersistentVolumeClaimSpec, Pod, Service,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{
    Api, AttachParams, DeleteParams, ListParams, LogParams, ObjectMeta, PostParams, Preconditions,
};
use kube::{Client, ResourceExt};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How often waits read the object again (Kandev polls every 100 ms; this is gentler).
const POLL: Duration = Duration::from_millis(250);

/// The deadline of an exec whose request names none. The client has no read timeout (it would
/// cut exec and port-forward streams), so every exec is bounded by its own deadline.
pub const EXEC_DEADLINE: Duration = Duration::from_secs(600);

/// The deadline of a log read (the evidence of a failed scenario).
const LOGS_DEADLINE: Duration = Duration::from_secs(60);

/// The field manager every write carries (visible in `managedFields`).
pub const FIELD_MANAGER: &str = "kandev-acceptance";

/// A managed workspace claim's shape (the profile's `workspace.size`, `access_modes`,
/// `storage_class`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedPvc {
    pub size: String,
    pub access_modes: Vec<String>,
    pub storage_class: Option<String>,
}

impl Default for ManagedPvc {
    fn default() -> Self {
        Self {
            size: "10Gi".into(),
            access_modes: vec!["ReadWriteOnce".into()],
            storage_class: None,
        }
    }
}

pub struct KubeBackend {
    /// The executor identity: every call a session makes.
    client: Client,
    /// The operator's identity: evidence (logs, events) and label sweeps (`list`), which
    /// Kandev's Role does not grant and a session never needs.
    admin: Client,
    namespace: String,
    kind: &'static str,
    main_container: String,
    workspace: ManagedPvc,
    /// How long a delete waits until the object is gone.
    pub delete_timeout: Duration,
    /// Grace period of Pod deletes (Kandev's probes use 0; the companion gets a moment).
    pub delete_grace_seconds: i64,
    /// The operator's client configuration, for clients acting as other identities.
    config: Option<kube::Config>,
}

fn other(operation: impl Into<String>, e: impl Into<anyhow::Error>) -> BackendError {
    BackendError::Other {
        operation: operation.into(),
        source: e.into(),
    }
}

fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == code)
}

pub use crate::pod::admission::AdmissionMutated;

impl KubeBackend {
    /// `kind` is `kind` or `kube` (how the cluster came about, for the report).
    pub fn new(
        client: Client,
        namespace: &str,
        kind: &'static str,
        main_container: &str,
        workspace: ManagedPvc,
    ) -> Self {
        Self {
            admin: client.clone(),
            client,
            namespace: namespace.to_owned(),
            kind,
            main_container: main_container.to_owned(),
            workspace,
            delete_timeout: Duration::from_secs(120),
            delete_grace_seconds: 2,
            config: None,
        }
    }

    /// The operator's client configuration (server and CA), from which
    /// [`Backend::restricted_identity`] makes its client.
    pub fn with_config(mut self, config: Option<kube::Config>) -> Self {
        self.config = config;
        self
    }

    /// Evidence and sweeps go through `admin` (the sessions' client stays the executor).
    pub fn with_admin(mut self, admin: Client) -> Self {
        self.admin = admin;
        self
    }

    fn delete_policy(&self) -> DeletePolicy {
        DeletePolicy {
            timeout: self.delete_timeout,
            grace_seconds: self.delete_grace_seconds,
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn pvcs(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn admin_pods(&self) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), &self.namespace)
    }

    fn post_params() -> PostParams {
        PostParams {
            dry_run: false,
            field_manager: Some(FIELD_MANAGER.into()),
        }
    }

    /// Why `container` is not running yet (waiting reason and message), for timeouts.
    fn waiting_reason(pod: &Pod, container: &str) -> String {
        let statuses = pod
            .status
            .as_ref()
            .map(|s| {
                s.init_container_statuses
                    .iter()
                    .flatten()
                    .chain(s.container_statuses.iter().flatten())
                    .map(|c| {
                        let state = c.state.as_ref();
                        let detail = state
                            .and_then(|s| s.waiting.as_ref())
                            .map(|w| {
                                format!(
                                    "waiting: {} {}",
                                    w.reason.clone().unwrap_or_default(),
                                    w.message.clone().unwrap_or_default()
                                )
                            })
                            .or_else(|| {
                                state.and_then(|s| s.terminated.as_ref()).map(|t| {
                                    format!(
                                        "terminated: exit {} {}",
                                        t.exit_code,
                                        t.reason.clone().unwrap_or_default()
                                    )
                                })
                            })
                            .unwrap_or_else(|| "running".into());
                        format!("{}: {}", c.name, detail.trim())
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_else(|| "Unknown".into());
        let conditions: Vec<String> = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.status != "True")
            .map(|c| format!("{} ({})", c.type_, c.message.unwrap_or_default()))
            .collect();
        format!(
            "phase {phase}; {container} not running; containers: [{}]; conditions: [{}]",
            statuses.join(", "),
            conditions.join(", ")
        )
    }

    /// Why the Pod will not start as it is, when the API server's status already says so: a
    /// container waiting on an image it cannot pull (`ErrImagePull`, `ImagePullBackOff`,
    /// `InvalidImageName`, `ErrImageNeverPull`) or on a configuration it cannot create
    /// (`CreateContainerConfigError`), or a Pod the scheduler cannot place (`PodScheduled`
    /// False with reason `Unschedulable`: a node selector no node carries, a claim that does
    /// not exist). Other waiting reasons (`ContainerCreating`, `PodInitializing`) are progress.
    pub fn cannot_start(pod: &Pod) -> Option<String> {
        const FATAL: [&str; 5] = [
            "ErrImagePull",
            "ImagePullBackOff",
            "InvalidImageName",
            "ErrImageNeverPull",
            "CreateContainerConfigError",
        ];
        let status = pod.status.as_ref()?;
        for c in status
            .init_container_statuses
            .iter()
            .flatten()
            .chain(status.container_statuses.iter().flatten())
        {
            let Some(waiting) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
                continue;
            };
            let reason = waiting.reason.clone().unwrap_or_default();
            if FATAL.contains(&reason.as_str()) {
                return Some(format!(
                    "container {} (image {}) is waiting: {reason}: {}",
                    c.name,
                    c.image,
                    waiting.message.clone().unwrap_or_default()
                ));
            }
        }
        status
            .conditions
            .iter()
            .flatten()
            .find(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
            .map(|c| {
                // The scheduler's message counts nodes, never naming the selector: name it.
                let selector = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_selector.clone())
                    .unwrap_or_default();
                let selector = if selector.is_empty() {
                    String::new()
                } else {
                    let pairs: Vec<String> =
                        selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    format!(" (the Pod's nodeSelector: {})", pairs.join(", "))
                };
                format!(
                    "the scheduler cannot place it (Unschedulable): {}{selector}",
                    c.message.clone().unwrap_or_default()
                )
            })
    }

    fn container_running(pod: &Pod, uid: &str, container: &str) -> bool {
        pod.metadata.uid.as_deref() == Some(uid)
            && pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|statuses| {
                    statuses.iter().any(|c| {
                        c.name == container
                            && c.state.as_ref().and_then(|s| s.running.as_ref()).is_some()
                    })
                })
    }

    /// The PVC Kandev would create for `name`.
    pub fn managed_pvc(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> PersistentVolumeClaim {
        let mut labels = labels.clone();
        labels.insert(LABEL_MANAGED.into(), "true".into());
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(self.namespace.clone()),
                labels: Some(labels),
                annotations: Some(annotations.clone()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(self.workspace.access_modes.clone()),
                volume_mode: Some("Filesystem".into()),
                storage_class_name: self.workspace.storage_class.clone(),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_owned(),
                        Quantity(self.workspace.size.clone()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// Kandev's `ValidateAdmittedPVC`: what admission may not change on a managed claim.
pub fn compare_pvc(
    desired: &PersistentVolumeClaim,
    admitted: &PersistentVolumeClaim,
) -> Vec<AdmissionMismatch> {
    let mut found = Vec::new();
    let mut mismatch = |field: &str, what: String| {
        found.push(AdmissionMismatch {
            path: field.to_owned(),
            message: what,
        })
    };
    let owned =
        |m: &Option<BTreeMap<String, String>>, annotations: bool| -> BTreeMap<String, String> {
            m.iter()
                .flatten()
                .filter(|(k, _)| {
                    if annotations {
                        k.starts_with("kandev.ai/")
                    } else {
                        is_owned_label(k)
                    }
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
    for (field, annotations, d, a) in [
        (
            "metadata.labels",
            false,
            &desired.metadata.labels,
            &admitted.metadata.labels,
        ),
        (
            "metadata.annotations",
            true,
            &desired.metadata.annotations,
            &admitted.metadata.annotations,
        ),
    ] {
        let (d, a) = (owned(d, annotations), owned(a, annotations));
        if d != a {
            mismatch(field, format!("owned entries {d:?} became {a:?}"));
        }
    }
    if admitted.metadata.name != desired.metadata.name {
        mismatch(
            "metadata.name",
            admission::value_or_unset(&admitted.metadata.name),
        );
    }
    if admitted
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| !o.is_empty())
    {
        mismatch(
            "metadata.ownerReferences",
            "owner references were added".into(),
        );
    }
    let extra_finalizers: Vec<&String> = admitted
        .metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| f.as_str() != "kubernetes.io/pvc-protection")
        .collect();
    if !extra_finalizers.is_empty() {
        mismatch(
            "metadata.finalizers",
            format!("{extra_finalizers:?} were added"),
        );
    }
    let (d, a) = (
        desired.spec.clone().unwrap_or_default(),
        admitted.spec.clone().unwrap_or_default(),
    );
    let set = |v: &Option<Vec<String>>| -> std::collections::BTreeSet<String> {
        v.iter().flatten().cloned().collect()
    };
    let list = |v: &Option<Vec<String>>| match v.as_deref() {
        None | Some([]) => "(unset)".to_owned(),
        Some(items) => items.join(", "),
    };
    if set(&d.access_modes) != set(&a.access_modes) {
        mismatch(
            "spec.accessModes",
            format!("{} became {}", list(&d.access_modes), list(&a.access_modes)),
        );
    }
    if d.volume_mode != a.volume_mode
        && !(d.volume_mode.is_none() && a.volume_mode.as_deref() == Some("Filesystem"))
    {
        mismatch(
            "spec.volumeMode",
            format!(
                "{} became {}",
                d.volume_mode.as_deref().unwrap_or("(unset)"),
                a.volume_mode.as_deref().unwrap_or("(unset)")
            ),
        );
    }
    // Compared by value, as upstream's `sameResourceList` (`Quantity.Cmp`): an API server
    // may write `5Gi` back as `5120Mi`. An absent list equals an empty one.
    let (dr, ar) = (
        d.resources.clone().unwrap_or_default(),
        a.resources.clone().unwrap_or_default(),
    );
    for (list, want, got) in [
        ("requests", dr.requests, ar.requests),
        ("limits", dr.limits, ar.limits),
    ] {
        let (want, got) = (want.unwrap_or_default(), got.unwrap_or_default());
        let names: std::collections::BTreeSet<&String> = want.keys().chain(got.keys()).collect();
        for name in names {
            let (w, g) = (want.get(name), got.get(name));
            let same = match (w, g) {
                (Some(w), Some(g)) => crate::pod::quantity::same(&w.0, &g.0),
                _ => false,
            };
            if !same {
                let show = |q: Option<&Quantity>| q.map_or("nothing".to_owned(), |q| q.0.clone());
                mismatch(
                    &format!("spec.resources.{list}[{name}]"),
                    format!("{} became {}", show(w), show(g)),
                );
            }
        }
    }
    // A default storage class being filled in is allowed; an explicit one must stay.
    if d.storage_class_name.is_some() && d.storage_class_name != a.storage_class_name {
        mismatch(
            "spec.storageClassName",
            format!(
                "{} became {}",
                admission::value_or_unset(&d.storage_class_name),
                admission::value_or_unset(&a.storage_class_name)
            ),
        );
    }
    if d.volume_attributes_class_name != a.volume_attributes_class_name {
        mismatch(
            "spec.volumeAttributesClassName",
            format!(
                "{} became {}",
                admission::value_or_unset(&d.volume_attributes_class_name),
                admission::value_or_unset(&a.volume_attributes_class_name)
            ),
        );
    }
    if d.selector != a.selector {
        mismatch("spec.selector", "changed".into());
    }
    if d.data_source != a.data_source || d.data_source_ref != a.data_source_ref {
        mismatch("spec.dataSource", "changed".into());
    }
    found
}

/// Reads one HTTP/1.x response from `stream`: up to the end of its body when it has a
/// `Content-Length`, otherwise until the stream ends (a port-forward stream may stay open
/// after the server closed its side).
async fn read_http_response<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
) -> std::io::Result<Vec<u8>> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if let Some(length) = length
                && buffer.len() >= end + 4 + length
            {
                buffer.truncate(end + 4 + length);
                return Ok(buffer);
            }
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(buffer);
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// The exit code an exec's final status reports (`Success` is 0; failures carry the code
/// as the `ExitCode` cause).
fn exit_code(status: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Status) -> Option<i64> {
    if status.status.as_deref() == Some("Success") {
        return Some(0);
    }
    status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|causes| {
            causes
                .iter()
                .find(|c| c.reason.as_deref() == Some("ExitCode"))
                .and_then(|c| c.message.as_ref())
                .and_then(|m| m.parse().ok())
        })
}

#[async_trait]
impl Backend for KubeBackend {
    fn name(&self) -> &'static str {
        self.kind
    }

    fn keep_hint(&self, pod: &PodRef, container: &str) -> String {
        format!(
            "kubectl exec -it -n {} {} -c {container} -- sh",
            pod.namespace, pod.name
        )
    }

    async fn create_workspace(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<WorkspaceRef> {
        let desired = self.managed_pvc(name, labels, annotations);
        let admitted = self
            .pvcs()
            .create(&Self::post_params(), &desired)
            .await
            .map_err(|e| BackendError::Create {
                what: "workspace claim",
                name: name.into(),
                source: e.into(),
            })?;
        let uid = admitted.uid().unwrap_or_default();
        let mismatches = compare_pvc(&desired, &admitted);
        if !mismatches.is_empty() {
            let _ = delete_exact(
                &self.delete_policy(),
                &self.pvcs(),
                "workspace claim",
                name,
                &uid,
            )
            .await;
            return Err(other(
                "admission of the workspace claim",
                AdmissionMutated {
                    what: "workspace claim",
                    name: name.into(),
                    uid,
                    mismatches,
                },
            ));
        }
        Ok(WorkspaceRef {
            name: name.into(),
            uid,
            created_by_run: true,
        })
    }

    async fn delete_workspace(&self, workspace: &WorkspaceRef) -> Result<()> {
        // Existing claims are never deleted, whatever else holds.
        if !workspace.created_by_run {
            return Ok(());
        }
        delete_exact(
            &self.delete_policy(),
            &self.pvcs(),
            "workspace claim",
            &workspace.name,
            &workspace.uid,
        )
        .await
        .map(|_| ())
    }

    async fn get_workspace(&self, name: &str) -> Result<Option<WorkspaceRef>> {
        let found = self
            .pvcs()
            .get_opt(name)
            .await
            .map_err(|e| other(format!("get workspace claim {name}"), e))?;
        Ok(found.map(|pvc| WorkspaceRef {
            name: name.to_owned(),
            uid: pvc.uid().unwrap_or_default(),
            created_by_run: false,
        }))
    }

    async fn workspace_labels(&self, name: &str) -> Result<Option<BTreeMap<String, String>>> {
        self.pvcs()
            .get_opt(name)
            .await
            .map(|pvc| pvc.map(|pvc| pvc.labels().clone()))
            .map_err(|e| other(format!("get workspace claim {name}"), e))
    }

    /// Created as requested, with no admission comparison (a helper has no main container
    /// or Kandev labels to compare); an ambiguous create is not retried by name, since a
    /// helper carries no create nonce to prove the object is this create's.
    async fn create_helper_pod(&self, pod: &Pod) -> Result<PodRef> {
        super::check_helper_labels(pod)?;
        let name = pod.metadata.name.clone().unwrap_or_default();
        let created = self
            .pods()
            .create(&Self::post_params(), pod)
            .await
            .map_err(|e| BackendError::Create {
                what: "helper pod",
                name: name.clone(),
                source: e.into(),
            })?;
        Ok(PodRef {
            namespace: self.namespace.clone(),
            name,
            uid: created.uid().unwrap_or_default(),
        })
    }

    async fn create_pod(&self, pod: &Pod) -> Result<PodRef> {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let admitted = match self.pods().create(&Self::post_params(), pod).await {
            Ok(admitted) => admitted,
            Err(e) if is_status(&e, 409) => {
                return Err(BackendError::Create {
                    what: "pod",
                    name,
                    source: anyhow!("a Pod of that name already exists: {e}"),
                });
            }
            Err(e) => {
                // An ambiguous create (timeout, 5xx): the exact name is ours only if it
                // carries this create's nonce.
                let nonce = pod.annotations().get(ANNOTATION_CREATE_NONCE);
                match self.pods().get_opt(&name).await {
                    Ok(Some(found))
                        if nonce.is_some()
                            && found.annotations().get(ANNOTATION_CREATE_NONCE) == nonce =>
                    {
                        found
                    }
                    _ => {
                        return Err(BackendError::Create {
                            what: "pod",
                            name,
                            source: e.into(),
                        });
                    }
                }
            }
        };
        let uid = admitted.uid().unwrap_or_default();
        let mismatches = admission::compare(pod, &admitted, &self.main_container);
        if !mismatches.is_empty() {
            // Roll back only the exact object this create made; no labels needed.
            let _ = delete_exact(&self.delete_policy(), &self.pods(), "pod", &name, &uid).await;
            return Err(other(
                "admission of the Pod",
                AdmissionMutated {
                    what: "pod",
                    name,
                    uid,
                    mismatches,
                },
            ));
        }
        Ok(PodRef {
            namespace: self.namespace.clone(),
            name,
            uid,
        })
    }

    async fn wait_running(&self, pod: &PodRef, container: &str, timeout: Duration) -> Result<()> {
        // Polled GETs (bounded): Kandev's Role grants no `list`, which a watch starts with.
        // The last reason seen names why the container is not running when time runs out.
        let why = std::sync::Mutex::new(String::new());
        let started = Instant::now();
        // Some(true): running; Some(false): the Pod is gone, and will not start.
        let fatal = std::sync::Mutex::new(None::<String>);
        let ended = wait::until("the Pod", timeout, POLL, || async {
            let found = self
                .pods()
                .get_opt(&pod.name)
                .await
                .map_err(|e| other(format!("get pod {}", pod.name), e))?;
            let reason = match &found {
                Some(p) if Self::container_running(p, &pod.uid, container) => {
                    return Ok(Some(true));
                }
                Some(p) if p.uid().as_deref() != Some(pod.uid.as_str()) => {
                    "a Pod of that name with another UID replaced it".to_owned()
                }
                Some(p) => {
                    if let Some(cause) = Self::cannot_start(p) {
                        if let Ok(mut fatal) = fatal.lock() {
                            *fatal = Some(cause);
                        }
                        return Ok(Some(false));
                    }
                    Self::waiting_reason(p, container)
                }
                None => "the Pod is gone".to_owned(),
            };
            if let Ok(mut why) = why.lock() {
                *why = reason;
            }
            Ok(found.is_none().then_some(false))
        })
        .await;
        if let Some(cause) = fatal.lock().ok().and_then(|f| f.clone()) {
            return Err(BackendError::CannotStart {
                pod: pod.name.clone(),
                cause,
            });
        }
        match ended {
            Ok(true) => Ok(()),
            Ok(false) | Err(BackendError::WaitTimedOut(_)) => Err(WaitTimedOut {
                what: format!(
                    "container {container} of pod {} to run: {}",
                    pod.name,
                    why.lock().map(|w| w.clone()).unwrap_or_default()
                ),
                waited: started.elapsed(),
            }
            .into()),
            Err(e) => Err(e),
        }
    }

    async fn container_states(&self, pod: &PodRef) -> Result<Vec<ContainerState>> {
        let found = self
            .pods()
            .get_opt(&pod.name)
            .await
            .map_err(|e| other(format!("get pod {}", pod.name), e))?;
        let Some(found) = found.filter(|p| p.uid().as_deref() == Some(pod.uid.as_str())) else {
            return Ok(Vec::new());
        };
        Ok(found
            .status
            .into_iter()
            .flat_map(|s| {
                s.init_container_statuses
                    .into_iter()
                    .flatten()
                    .chain(s.container_statuses.into_iter().flatten())
            })
            .map(|c| ContainerState {
                running: c.state.as_ref().and_then(|s| s.running.as_ref()).is_some(),
                exit_code: c
                    .state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .map(|t| i64::from(t.exit_code)),
                restarts: u32::try_from(c.restart_count).unwrap_or(0),
                name: c.name,
            })
            .collect())
    }

    async fn exec(&self, pod: &PodRef, request: ExecRequest) -> Result<ExecOutput> {
        let started = Instant::now();
        let error = |source: anyhow::Error| BackendError::Exec {
            pod: pod.name.clone(),
            container: request.container.clone(),
            argv: request.argv.clone(),
            source,
        };
        let params = AttachParams::default()
            .container(request.container.clone())
            .stdin(request.stdin.is_some())
            .stdout(true)
            .stderr(true);
        let run = async {
            let mut attached = self
                .pods()
                .exec(&pod.name, request.argv.clone(), &params)
                .await
                .map_err(|e| error(e.into()))?;
            let status = attached.take_status();
            let mut stdout = attached.stdout();
            let mut stderr = attached.stderr();
            let feed = async {
                if let (Some(bytes), Some(mut stdin)) = (&request.stdin, attached.stdin()) {
                    stdin.write_all(bytes).await?;
                    stdin.shutdown().await?;
                }
                std::io::Result::Ok(())
            };
            let read = |reader: Option<Box<dyn tokio::io::AsyncRead + Unpin + Send>>| async move {
                let mut out = Vec::new();
                if let Some(mut reader) = reader {
                    reader.read_to_end(&mut out).await?;
                }
                std::io::Result::Ok(out)
            };
            let (fed, out, err) = tokio::join!(
                feed,
                read(
                    stdout
                        .take()
                        .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>)
                ),
                read(
                    stderr
                        .take()
                        .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>)
                ),
            );
            fed.map_err(|e| error(e.into()))?;
            let (out, err) = (
                out.map_err(|e| error(e.into()))?,
                err.map_err(|e| error(e.into()))?,
            );
            let status = match status {
                Some(status) => status.await,
                None => None,
            };
            let _ = attached.join().await;
            Ok(ExecOutput {
                exit_code: status.as_ref().and_then(exit_code),
                stdout: out,
                stderr: err,
                duration: started.elapsed(),
            })
        };
        let limit = request.timeout.unwrap_or(EXEC_DEADLINE);
        tokio::time::timeout(limit, run).await.map_err(|_| {
            BackendError::from(WaitTimedOut {
                what: format!(
                    "exec {:?} in {}/{}",
                    request.argv, pod.name, request.container
                ),
                waited: limit,
            })
        })?
    }

    async fn port_exchange(
        &self,
        pod: &PodRef,
        _container: &str,
        port: u16,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        let exchange = async {
            let mut forwarder = self
                .pods()
                .portforward(&pod.name, &[port])
                .await
                .map_err(|e| other(format!("port-forward to {}:{port}", pod.name), e))?;
            let mut stream = forwarder.take_stream(port).ok_or_else(|| {
                other(
                    format!("port-forward to {}:{port}", pod.name),
                    anyhow!("no stream"),
                )
            })?;
            stream
                .write_all(request)
                .await
                .map_err(|e| other("port-forward write", e))?;
            let response = read_http_response(&mut stream)
                .await
                .map_err(|e| other("port-forward read", e))?;
            drop(stream);
            forwarder.abort();
            Ok(response)
        };
        tokio::time::timeout(timeout, exchange).await.map_err(|_| {
            BackendError::from(WaitTimedOut {
                what: format!("an answer from {}:{port} through port-forward", pod.name),
                waited: timeout,
            })
        })?
    }

    async fn logs(&self, pod: &PodRef, container: &str) -> Result<String> {
        let (pods, params) = (
            self.admin_pods(),
            LogParams {
                container: Some(container.to_owned()),
                limit_bytes: Some(1 << 20),
                ..Default::default()
            },
        );
        let read = pods.logs(&pod.name, &params);
        tokio::time::timeout(LOGS_DEADLINE, read)
            .await
            .map_err(|_| {
                BackendError::from(WaitTimedOut {
                    what: format!("the logs of {}/{container}", pod.name),
                    waited: LOGS_DEADLINE,
                })
            })?
            .map_err(|e| other(format!("logs of {}/{container}", pod.name), e))
    }

    async fn diagnostics(&self, pod: &PodRef) -> Vec<(String, String)> {
        let mut files = Vec::new();
        if let Ok(Some(mut found)) = self.admin_pods().get_opt(&pod.name).await {
            found.metadata.managed_fields = None;
            let mut names: Vec<String> = Vec::new();
            if let Some(spec) = &found.spec {
                names.extend(
                    spec.init_containers
                        .iter()
                        .flatten()
                        .map(|c| c.name.clone()),
                );
                names.extend(spec.containers.iter().map(|c| c.name.clone()));
            }
            for name in names {
                let previous = LogParams {
                    container: Some(name.clone()),
                    previous: true,
                    limit_bytes: Some(1 << 20),
                    ..Default::default()
                };
                let pods = self.admin_pods();
                let read = pods.logs(&pod.name, &previous);
                if let Ok(Ok(text)) = tokio::time::timeout(LOGS_DEADLINE, read).await {
                    files.push((format!("{name}.previous.log"), text));
                }
            }
            files.push((
                "pod.yaml".into(),
                serde_yaml::to_string(&found).unwrap_or_default(),
            ));
        }
        let events: Api<Event> = Api::namespaced(self.admin.clone(), &self.namespace);
        let selector = ListParams::default().fields(&format!("involvedObject.uid={}", pod.uid));
        match events.list(&selector).await {
            Ok(list) => {
                let lines: Vec<String> = list
                    .items
                    .iter()
                    .map(|e| {
                        format!(
                            "{} {} {} x{}: {}",
                            e.last_timestamp
                                .as_ref()
                                .map(|t| t.0.to_string())
                                .unwrap_or_default(),
                            e.type_.clone().unwrap_or_default(),
                            e.reason.clone().unwrap_or_default(),
                            e.count.unwrap_or(1),
                            e.message.clone().unwrap_or_default()
                        )
                    })
                    .collect();
                files.push(("events.txt".into(), lines.join("\n")));
            }
            // Kandev's Role grants no events; the run's setup identity may read them.
            Err(e) => files.push(("events.txt".into(), format!("(events not readable: {e})"))),
        }
        files
    }

    async fn delete_pod(&self, pod: &PodRef) -> Result<()> {
        delete_exact(
            &self.delete_policy(),
            &self.pods(),
            "pod",
            &pod.name,
            &pod.uid,
        )
        .await
        .map(|_| ())
    }

    async fn pod_uid(&self, namespace: &str, name: &str) -> Result<Option<String>> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        api.get_opt(name)
            .await
            .map(|p| p.and_then(|p| p.uid()))
            .map_err(|e| other(format!("get pod {name}"), e))
    }

    async fn pod_labels(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        api.get_opt(name)
            .await
            .map(|p| p.map(|p| p.labels().clone()))
            .map_err(|e| other(format!("get pod {name}"), e))
    }

    async fn host_sharing(&self, pod: &PodRef) -> Result<HostSharing> {
        let found = self
            .pods()
            .get_opt(&pod.name)
            .await
            .map_err(|e| other(format!("get pod {}", pod.name), e))?
            .filter(|p| p.uid().as_deref() == Some(pod.uid.as_str()))
            .ok_or_else(|| other(format!("get pod {}", pod.name), anyhow!("it is gone")))?;
        let spec = found.spec.unwrap_or_default();
        let mut sharing = HostSharing::default();
        for c in spec
            .init_containers
            .iter()
            .flatten()
            .chain(spec.containers.iter())
        {
            for m in c.volume_mounts.iter().flatten() {
                let host_path = spec
                    .volumes
                    .iter()
                    .flatten()
                    .find(|v| v.name == m.name)
                    .and_then(|v| v.host_path.as_ref());
                if let Some(h) = host_path {
                    sharing.host_paths.push(format!("{}: {}", c.name, h.path));
                }
            }
        }
        for (ns, set) in [
            ("network", spec.host_network),
            ("pid", spec.host_pid),
            ("ipc", spec.host_ipc),
        ] {
            if set == Some(true) {
                sharing.host_namespaces.push(format!("pod: {ns}"));
            }
        }
        Ok(sharing)
    }

    async fn restricted_identity(&self) -> Result<Option<(String, std::sync::Arc<dyn Backend>)>> {
        // The namespace's `default` service account: every namespace has one, and Kandev's
        // Role is bound to the executor's account only, so it may not create Pods. A
        // TokenRequest creates nothing that would need removing.
        let Some(config) = self.config.clone() else {
            return Ok(None);
        };
        let account = "default";
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(self.admin.clone(), &self.namespace);
        let request = k8s_openapi::api::authentication::v1::TokenRequest {
            spec: Some(k8s_openapi::api::authentication::v1::TokenRequestSpec {
                audiences: Some(Vec::new()),
                expiration_seconds: Some(600),
                ..Default::default()
            }),
            ..Default::default()
        };
        let token = accounts
            .create_token_request(account, &PostParams::default(), &request)
            .await
            .map_err(|e| other(format!("request a token for service account {account}"), e))?
            .status
            .map(|s| s.token)
            .unwrap_or_default();
        let mut restricted = config;
        restricted.auth_info = serde_json::from_value(serde_json::json!({ "token": token }))
            .map_err(|e| other("the restricted identity's credentials", e))?;
        let client = cluster::client_of(restricted, cluster::ClientBounds::default())
            .map_err(|e| other("the restricted identity's client", e))?;
        let backend = KubeBackend {
            client,
            admin: self.admin.clone(),
            namespace: self.namespace.clone(),
            kind: self.kind,
            main_container: self.main_container.clone(),
            workspace: self.workspace.clone(),
            delete_timeout: self.delete_timeout,
            delete_grace_seconds: self.delete_grace_seconds,
            config: None,
        };
        Ok(Some((
            format!(
                "system:serviceaccount:{}:{account} (no Role of the run binds it)",
                self.namespace
            ),
            std::sync::Arc::new(backend),
        )))
    }

    async fn pod_object(&self, pod: &PodRef) -> Result<Option<Pod>> {
        Ok(self
            .pods()
            .get_opt(&pod.name)
            .await
            .map_err(|e| other(format!("get pod {}", pod.name), e))?
            .filter(|p| p.uid().as_deref() == Some(pod.uid.as_str())))
    }

    async fn pod_exposures(&self, pod: &PodRef) -> Result<Vec<String>> {
        // Kandev's Role grants no Services at all: seen with the operator's identity.
        let labels = self
            .pod_object(pod)
            .await?
            .and_then(|p| p.metadata.labels)
            .unwrap_or_default();
        let services: Api<Service> = Api::namespaced(self.admin.clone(), &self.namespace);
        let listed = services
            .list(&ListParams::default())
            .await
            .map_err(|e| other("list services", e))?;
        Ok(listed
            .items
            .iter()
            .filter_map(|s| {
                let selector = s.spec.as_ref()?.selector.clone()?;
                let selects =
                    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v));
                // A Service labelled with the Pod's task is Kandev's too, selector or not.
                let task = "kandev.ai/task-id";
                let labelled = labels.get(task).is_some_and(|t| {
                    s.metadata.labels.as_ref().and_then(|l| l.get(task)) == Some(t)
                });
                (selects || labelled)
                    .then(|| format!("service/{}: selector {selector:?}", s.name_any()))
            })
            .collect())
    }

    async fn pod_ip(&self, pod: &PodRef) -> Result<Option<String>> {
        let found = self
            .pods()
            .get_opt(&pod.name)
            .await
            .map_err(|e| other(format!("get pod {}", pod.name), e))?;
        Ok(found.and_then(|p| p.status).and_then(|s| s.pod_ip))
    }

    async fn list_labelled(&self, selector: &[(&str, &str)]) -> Result<Vec<String>> {
        list_labelled(&self.admin, &self.namespace, selector).await
    }

    async fn remove_labelled(
        &self,
        selector: &[(&str, &str)],
        dry_run: bool,
    ) -> Result<Vec<String>> {
        remove_labelled(
            &self.admin,
            &self.namespace,
            selector,
            dry_run,
            &self.delete_policy(),
        )
        .await
    }
}

/// `k=v,...` plus the harness's managed label: only objects the harness labelled match.
pub fn label_selector(selector: &[(&str, &str)]) -> String {
    selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .chain(std::iter::once(format!("{LABEL_MANAGED}=true")))
        .collect::<Vec<_>>()
        .join(",")
}

/// Every harness-managed Pod and claim in `namespace` carrying the `selector` labels, seen
/// with the operator's identity (Kandev's Role grants no `list`).
pub async fn list_labelled(
    admin: &Client,
    namespace: &str,
    selector: &[(&str, &str)],
) -> Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), namespace);
    let params = ListParams::default().labels(&label_selector(selector));
    let mut objects: Vec<String> = pods
        .list(&params)
        .await
        .map_err(|e| other("list pods", e))?
        .items
        .iter()
        .map(|p| format!("pod/{}", p.name_any()))
        .collect();
    objects.extend(
        pvcs.list(&params)
            .await
            .map_err(|e| other("list persistentvolumeclaims", e))?
            .items
            .iter()
            .map(|p| format!("persistentvolumeclaim/{}", p.name_any())),
    );
    objects.sort();
    Ok(objects)
}

/// Deletes (each by its UID) every harness-managed Pod and claim in `namespace` carrying
/// the `selector` labels; returns what was (or, with `dry_run`, would be) removed.
pub async fn remove_labelled(
    admin: &Client,
    namespace: &str,
    selector: &[(&str, &str)],
    dry_run: bool,
    policy: &DeletePolicy,
) -> Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), namespace);
    let params = ListParams::default().labels(&label_selector(selector));
    let mut removed = Vec::new();
    let listed = pods
        .list(&params)
        .await
        .map_err(|e| other("list pods", e))?;
    for pod in listed.items {
        let (name, uid) = (pod.name_any(), pod.uid().unwrap_or_default());
        if !dry_run {
            delete_exact(policy, &pods, "pod", &name, &uid).await?;
        }
        removed.push(format!("pod/{name}"));
    }
    let claims = pvcs
        .list(&params)
        .await
        .map_err(|e| other("list persistentvolumeclaims", e))?;
    for claim in claims.items {
        let (name, uid) = (claim.name_any(), claim.uid().unwrap_or_default());
        if !dry_run {
            delete_exact(policy, &pvcs, "workspace claim", &name, &uid).await?;
        }
        removed.push(format!("persistentvolumeclaim/{name}"));
    }
    Ok(removed)
}

/// How deletes wait and how long a Pod's containers get to stop.
#[derive(Debug, Clone)]
pub struct DeletePolicy {
    /// How long a delete waits until the object is gone.
    pub timeout: Duration,
    /// Grace period of Pod deletes.
    pub grace_seconds: i64,
}

impl Default for DeletePolicy {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(120),
            grace_seconds: 2,
        }
    }
}

/// Deletes the object `name` only while it still has `uid`, with the resourceVersion
/// read just before as a second precondition (a concurrent change makes the API server
/// refuse, and the identity is checked again); then waits until it is gone.
async fn delete_exact<K>(
    policy: &DeletePolicy,
    api: &Api<K>,
    what: &'static str,
    name: &str,
    uid: &str,
) -> Result<bool>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut deleted = false;
    for _attempt in 0..5 {
        let current = api
            .get_opt(name)
            .await
            .map_err(|e| other(format!("get {what} {name}"), e))?;
        let Some(current) = current else {
            return Ok(deleted);
        };
        let found = current.meta().uid.clone().unwrap_or_default();
        if found != uid {
            if deleted {
                // Gone, and a new object of that name exists: not ours to touch.
                return Ok(true);
            }
            return Err(BackendError::UidMismatch {
                what,
                name: name.to_owned(),
                expected: uid.to_owned(),
                found,
            });
        }
        if current.meta().deletion_timestamp.is_some() {
            deleted = true;
            break;
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: current.meta().resource_version.clone(),
            }),
            grace_period_seconds: (what == "pod")
                .then_some(u32::try_from(policy.grace_seconds).unwrap_or(0)),
            ..Default::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {
                deleted = true;
                break;
            }
            Err(e) if is_status(&e, 404) => return Ok(deleted),
            // The resourceVersion moved (status updates): read again, check again.
            Err(e) if is_status(&e, 409) => continue,
            Err(e) => {
                return Err(BackendError::Delete {
                    what,
                    name: name.to_owned(),
                    source: e.into(),
                });
            }
        }
    }
    if !deleted {
        return Err(BackendError::Delete {
            what,
            name: name.to_owned(),
            source: anyhow!("its resourceVersion kept changing; gave up after 5 attempts"),
        });
    }
    // Polled GETs, as Kandev waits: its Role grants no `list`, which a watch starts with.
    let gone = format!("{what} {name} (uid {uid}) to be gone");
    wait::until(&gone, policy.timeout, POLL, || async {
        let current = api
            .get_opt(name)
            .await
            .map_err(|e| other(format!("wait until {what} {name} is gone"), e))?;
        Ok(current
            .is_none_or(|c| c.meta().uid.as_deref() != Some(uid))
            .then_some(true))
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::KubeBackend;
    use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
    use std::collections::BTreeMap;

    fn pod_with_status(file: &str, selector: &[(&str, &str)]) -> Pod {
        let path = crate::paths::workspace_root()
            .join("fixtures/kube")
            .join(file);
        let status: PodStatus =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        Pod {
            spec: Some(PodSpec {
                node_selector: (!selector.is_empty()).then(|| {
                    selector
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect::<BTreeMap<_, _>>()
                }),
                ..Default::default()
            }),
            status: Some(status),
            ..Default::default()
        }
    }

    #[test]
    fn a_failed_pull_names_the_image_and_the_reason() {
        for file in [
            "pod-status-err-image-pull.json",
            "pod-status-image-pull-backoff.json",
        ] {
            let cause = KubeBackend::cannot_start(&pod_with_status(file, &[])).unwrap();
            assert!(cause.contains("ImagePull"), "{cause}");
        }
        let cause =
            KubeBackend::cannot_start(&pod_with_status("pod-status-err-image-pull.json", &[]))
                .unwrap();
        assert!(
            cause.contains("registry.invalid/kandev-acceptance/absent:never")
                && cause.contains("kandev-agent"),
            "{cause}"
        );
    }

    #[test]
    fn an_unschedulable_pod_names_the_selector_or_the_claim() {
        let cause = KubeBackend::cannot_start(&pod_with_status(
            "pod-status-unschedulable-node-selector.json",
            &[("kandev.ai/e2e-never", "true")],
        ))
        .unwrap();
        assert!(
            cause.contains("Unschedulable") && cause.contains("kandev.ai/e2e-never=true"),
            "{cause}"
        );
        let cause = KubeBackend::cannot_start(&pod_with_status(
            "pod-status-unschedulable-missing-claim.json",
            &[],
        ))
        .unwrap();
        assert!(
            cause.contains("persistentvolumeclaim \"kandev-e2e-missing-claim\" not found"),
            "{cause}"
        );
    }

    #[test]
    fn progress_is_not_a_failure() {
        assert_eq!(
            KubeBackend::cannot_start(&pod_with_status("pod-status-running.json", &[])),
            None
        );
        let mut creating = pod_with_status("pod-status-image-pull-backoff.json", &[]);
        if let Some(statuses) = creating
            .status
            .as_mut()
            .and_then(|s| s.container_statuses.as_mut())
        {
            statuses.retain(|c| c.name == "kandev-agent");
        }
        assert_eq!(KubeBackend::cannot_start(&creating), None);
    }
}
