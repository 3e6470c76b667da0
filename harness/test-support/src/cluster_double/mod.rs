//! A wire-level Kubernetes cluster double: an API server over HTTPS on 127.0.0.1 (a random
//! port) that a client reaches only through the kubeconfig file [`start`] writes, exactly as
//! it reaches a real cluster (TLS against the double's own CA, a bearer token per identity).
//!
//! **This is a double, not a cluster.** What it proves: the harness's `kube` backend speaks the
//! API server's wire protocol as kube-rs 5 does with a real one — TLS and kubeconfig loading,
//! JSON `Status` errors and their codes, UIDs, resourceVersions, DELETE preconditions (409),
//! label selectors, `dryRun=All`, Pods stored as an API server defaults them (a v1.36's
//! defaulting and the `Priority` and `DefaultTolerationSeconds` plugins, written from the API
//! server's rules and compared with a real one's answers where [`recorded`] has recordings,
//! so a client compares what it asked for against a defaulted Pod), the TokenRequest and RBAC path (the executor's
//! token only gets what the Roles bound to its service account grant, and
//! SelfSubjectAccessReviews are answered from the same Roles), pods/log, and **pods/exec and
//! pods/portforward over websockets** (`v5.channel.k8s.io` / `v4.channel.k8s.io` framing, the
//! exit code in the status channel, no client read timeout on long commands): an exec's
//! output is streamed as the command writes it, and a port-forward is a byte tunnel, both ways
//! and flow-controlled, to the port in the Pod's network namespace. Pods run on the local
//! Docker engine through the harness's local backend (a [`LocalBackend`] given to [`start`]),
//! with the UID the double assigned, bound after their create to one node ([`NODE`]); claims
//! are volumes there.
//!
//! Refereed by clients its authors did not write (`tests/real_clients.rs`: kubectl 1.32 and
//! the official Python client): legacy discovery (`/version`, `/api`, `/apis`, each group
//! version's resources, the OpenAPI v3 stubs kubectl's validation asks for), content
//! negotiation (JSON answered, 406 for a client accepting only what the double does not
//! write, 415 for a body it does not decode; protobuf bodies decoded for the kinds
//! kubectl's typed commands send), watches streamed from the store's changes, PUT and
//! PATCH (JSON, merge and strategic merge patches), `kubectl exec` and `logs`, and `kubectl
//! port-forward` (SPDY/3.1 as a kubelet serves it, tunnelled through a websocket or over a
//! plain upgrade: `spdy.rs`).
//!
//! What only a real cluster (Kind) proves: a kubelet's behaviour (image pulls, cgroup layout,
//! `podPidsLimit`, housekeeping timing, restarts), real admission plugins (Pod Security, the
//! ServiceAccount plugin's token volume), ClusterRoles, the apiserver's own exec/port-forward
//! translation (SPDY towards the kubelet, the kubelet's CRI streaming server), Table output,
//! server-side apply, namespaces as isolation (Pod names share the one local engine), and
//! storage classes (a claim is created `Pending`; with a runtime it is bound at once to a
//! volume there, without one it stays `Pending`).
//!
//! [`LocalBackend`]: kandev_harness::backend::local::LocalBackend

mod api;
mod defaults;
mod discovery;
mod patch;
mod protobuf;
pub mod recorded;
mod spdy;
mod streams;

use anyhow::Context;
use base64::Engine;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use kandev_harness::backend::local::attach::PodStreams;
use kandev_harness::backend::{Backend, PodRef};
use kandev_harness::host::connect_engine;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::net::TcpListener;

/// The context (and cluster and user) name in the kubeconfig [`start`] writes.
pub const CONTEXT: &str = "kube-double";

/// The double's one node: every Pod's `spec.nodeName` (its Pods run on this host's engine).
pub const NODE: &str = "kube-double-node";

/// The labels the double's node carries (what its scheduler matches `nodeSelector` against),
/// as a kubelet registers them.
pub fn node_labels() -> BTreeMap<String, String> {
    let arch = kandev_harness::pod::compose::Arch::of_this_machine().as_str();
    BTreeMap::from([
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), arch.to_owned()),
        ("kubernetes.io/hostname".to_owned(), NODE.to_owned()),
        ("beta.kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("beta.kubernetes.io/arch".to_owned(), arch.to_owned()),
    ])
}

/// Who a request is from (its bearer token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The kubeconfig's user: may do everything (a cluster admin).
    Admin,
    /// A token from `serviceaccounts/<name>/token`: only what Roles bound to it grant.
    ServiceAccount { namespace: String, name: String },
}

impl Identity {
    pub fn user_name(&self) -> String {
        match self {
            Identity::Admin => "kube-double-admin".into(),
            Identity::ServiceAccount { namespace, name } => {
                format!("system:serviceaccount:{namespace}:{name}")
            }
        }
    }
}

/// A DELETE the double carried out, with the preconditions it came with.
#[derive(Debug, Clone)]
pub struct Deletion {
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
}

/// A request refused with 403.
#[derive(Debug, Clone)]
pub struct Refusal {
    pub user: String,
    pub verb: String,
    pub resource: String,
    pub namespace: Option<String>,
}

/// A request as it reached the double (authenticated or not): what a test asserts about
/// how a client speaks to the API server.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// Path and query.
    pub uri: String,
    pub content_type: Option<String>,
    pub accept: Option<String>,
    /// A list asked as a watch (`watch` set and not `0`/`false`).
    pub watch: bool,
}

/// A mutating admission hook: changes a Pod (as JSON) before it is stored.
pub type PodMutator = Box<dyn Fn(&mut Value) + Send + Sync>;

/// Where a stored Pod's containers are on the runtime.
#[derive(Debug, Clone)]
pub(crate) enum Running {
    Creating,
    Ready(PodRef),
    Failed(String),
    /// Never bound to the node: the scheduler's message (`PodScheduled` False, reason
    /// `Unschedulable`), as a v1.36 scheduler words it.
    Unschedulable(String),
    /// The node cannot pull this container's image: the kubelet's `ErrImagePull`.
    PullFailed {
        container: String,
        image: String,
    },
}

/// (resource key `group/resource`, namespace or "", name)
pub(crate) type Key = (String, String, String);

/// A change to the stored objects, as a watch reports it.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    /// The store's `resourceVersion` once the change was made.
    pub resource_version: u64,
    pub key: Key,
    /// Before the change (None: it was created).
    pub before: Option<Value>,
    /// After the change (None: it was deleted).
    pub after: Option<Value>,
}

/// How many changes the store keeps for watches; a watch from an older `resourceVersion`
/// is 410 Gone, as from an API server whose watch cache has moved on.
pub(crate) const KEPT_CHANGES: usize = 10_000;

#[derive(Default)]
pub(crate) struct Store {
    /// Read freely; written only through [`Store::put`] and [`Store::delete`] (which
    /// record the [`Change`] a watch reports).
    pub objects: BTreeMap<Key, Value>,
    /// The latest changes, oldest first (at most [`KEPT_CHANGES`]).
    pub changes: std::collections::VecDeque<Change>,
    pub resource_version: u64,
    pub tokens: HashMap<String, Identity>,
    /// By the double's Pod UID.
    pub running: HashMap<String, Running>,
    /// The runtime's volume behind each claim, by the double's claim UID.
    pub volumes: HashMap<String, kandev_harness::backend::WorkspaceRef>,
    pub deletions: Vec<Deletion>,
    pub refusals: Vec<Refusal>,
    pub seen: Vec<Seen>,
}

impl Store {
    pub fn next_version(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    fn record(&mut self, key: Key, before: Option<Value>, after: Option<Value>) {
        if self.changes.len() >= KEPT_CHANGES {
            self.changes.pop_front();
        }
        self.changes.push_back(Change {
            resource_version: self.resource_version,
            key,
            before,
            after,
        });
    }

    /// Stores `object` (created or changed; its `resourceVersion` is the caller's).
    pub fn put(&mut self, key: Key, object: Value) {
        let before = self.objects.insert(key.clone(), object.clone());
        self.record(key, before, Some(object));
    }

    /// Removes an object (its deletion gets a `resourceVersion` of its own, as from an
    /// API server).
    pub fn delete(&mut self, key: &Key) -> Option<Value> {
        let before = self.objects.remove(key)?;
        self.next_version();
        self.record(key.clone(), Some(before.clone()), None);
        Some(before)
    }

    /// Removes every object `gone` selects.
    pub fn delete_where(&mut self, gone: impl Fn(&Key) -> bool) {
        let keys: Vec<Key> = self.objects.keys().filter(|k| gone(k)).cloned().collect();
        for key in keys {
            self.delete(&key);
        }
    }
}

/// What the double holds; tests read it (and set an admission hook) through [`KubeDouble::state`].
pub struct DoubleState {
    pub(crate) store: Mutex<Store>,
    pub(crate) runtime: Option<Arc<dyn Backend>>,
    /// exec and port-forward streams into the runtime's Pods (on the engine `DOCKER_HOST`
    /// names, where the local backend runs them).
    pub(crate) streams: Option<PodStreams>,
    pub(crate) mutator: Mutex<Option<PodMutator>>,
}

impl DoubleState {
    pub(crate) fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets (or with `None` removes) the mutating admission hook applied to every Pod create.
    pub fn set_pod_mutator(&self, mutator: Option<PodMutator>) {
        *self.mutator.lock().unwrap_or_else(|p| p.into_inner()) = mutator;
    }

    /// A stored object: `resource` is `pods`, `roles`, ... (core or the group's own name).
    pub fn object(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        let store = self.store();
        store
            .objects
            .iter()
            .find(|((r, ns, n), _)| {
                r.rsplit('/').next() == Some(resource) && ns == namespace && n == name
            })
            .map(|(_, v)| v.clone())
    }

    /// Every stored object of `resource` (`pods`, `namespaces`, ...), in every namespace.
    pub fn objects(&self, resource: &str) -> Vec<Value> {
        self.store()
            .objects
            .iter()
            .filter(|((r, _, _), _)| r.rsplit('/').next() == Some(resource))
            .map(|(_, v)| v.clone())
            .collect()
    }

    /// Creates a Namespace with `labels` (as another client of the API server would), with
    /// its `default` ServiceAccount.
    pub fn create_namespace(&self, name: &str, labels: &[(&str, &str)]) {
        let mut store = self.store();
        api::create_namespace_objects(&mut store, name);
        let key: Key = ("/namespaces".into(), String::new(), name.into());
        if let Some(mut namespace) = store.objects.get(&key).cloned() {
            for (k, v) in labels {
                namespace["metadata"]["labels"][*k] = json!(v);
            }
            // Labelled after its create: a change of its own, as an API server versions it.
            namespace["metadata"]["resourceVersion"] = json!(store.next_version());
            store.put(key, namespace);
        }
    }

    /// Stores `object` of core `resource` (`services`, ...) in `namespace` as another client
    /// of the API server would create it (UID, resourceVersion and creationTimestamp set): a
    /// cluster's own objects beside the harness's, for tests that break the cluster.
    pub fn create_object(&self, resource: &str, namespace: &str, mut object: Value) {
        let mut store = self.store();
        let Some(name) = object["metadata"]["name"].as_str().map(str::to_owned) else {
            panic!("create_object: the {resource} object has no metadata.name");
        };
        object["metadata"]["namespace"] = json!(namespace);
        object["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
        object["metadata"]["resourceVersion"] = json!(store.next_version());
        object["metadata"]["creationTimestamp"] = json!(api::now());
        store.put((format!("/{resource}"), namespace.to_owned(), name), object);
    }

    /// Every DELETE carried out so far.
    pub fn deletions(&self) -> Vec<Deletion> {
        self.store().deletions.clone()
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Seen> {
        self.store().seen.clone()
    }

    /// Every request refused with 403 so far.
    pub fn refusals(&self) -> Vec<Refusal> {
        self.store().refusals.clone()
    }

    /// The runtime's Pod behind the double's Pod `uid`, once it is created there.
    pub fn runtime_pod(&self, uid: &str) -> Option<PodRef> {
        match self.store().running.get(uid) {
            Some(Running::Ready(pod)) => Some(pod.clone()),
            _ => None,
        }
    }
}

/// A running double: its kubeconfig (in a temporary folder removed on drop) and state.
pub struct KubeDouble {
    pub kubeconfig: PathBuf,
    pub context: String,
    pub server: String,
    pub admin_token: String,
    pub state: Arc<DoubleState>,
    _folder: tempfile::TempDir,
    server_task: tokio::task::JoinHandle<()>,
}

impl Drop for KubeDouble {
    fn drop(&mut self) {
        self.server_task.abort();
    }
}

/// Starts the double on 127.0.0.1 (a random port) with a fresh CA and server certificate,
/// and writes its kubeconfig (context [`CONTEXT`]). Pods run on `runtime` when given (a
/// [`LocalBackend`](kandev_harness::backend::local::LocalBackend) on the engine
/// `DOCKER_HOST` names: pods/exec and pods/portforward stream into its containers there);
/// without one they are stored and stay `Pending`.
pub async fn start(runtime: Option<Arc<dyn Backend>>) -> anyhow::Result<KubeDouble> {
    let streams = match &runtime {
        Some(_) => Some(PodStreams::new(
            connect_engine()
                .await
                .context("the engine the double's Pods run on")?,
        )),
        None => None,
    };
    let (ca_pem, cert_der, key_der) = certificates()?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_no_client_auth()
        .with_single_cert(
            vec![rustls::pki_types::CertificateDer::from(cert_der)],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key_der.into()),
        )
        .context("the server certificate")?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let address = listener.local_addr()?;
    let server = format!("https://{address}");

    let admin_token = format!("double-admin-{}", uuid::Uuid::new_v4().simple());
    let state = Arc::new(DoubleState {
        store: Mutex::new(Store::default()),
        runtime,
        streams,
        mutator: Mutex::new(None),
    });
    {
        let mut store = state.store();
        store.tokens.insert(admin_token.clone(), Identity::Admin);
        for ns in ["default", "kube-system"] {
            api::create_namespace_objects(&mut store, ns);
        }
    }

    let folder = tempfile::tempdir()?;
    let kubeconfig = folder.path().join("kubeconfig");
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT, "cluster": {
            "server": server,
            "certificate-authority-data": base64::engine::general_purpose::STANDARD.encode(ca_pem),
        }}],
        "users": [{"name": CONTEXT, "user": {"token": admin_token}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT}}],
    });
    std::fs::write(&kubeconfig, serde_json::to_vec_pretty(&config)?)?;

    let serving = state.clone();
    let server_task = tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, state) = (acceptor.clone(), serving.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                    let state = state.clone();
                    async move { Ok::<_, std::convert::Infallible>(api::handle(state, req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .with_upgrades()
                    .await;
            });
        }
    });
    Ok(KubeDouble {
        kubeconfig,
        context: CONTEXT.into(),
        server,
        admin_token,
        state,
        _folder: folder,
        server_task,
    })
}

/// A CA (its PEM) and a server certificate for 127.0.0.1 and localhost signed by it (DER,
/// with its PKCS#8 key).
fn certificates() -> anyhow::Result<(String, Vec<u8>, Vec<u8>)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "kube-double CA");
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(vec!["localhost".to_owned()])?;
    params
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    params
        .distinguished_name
        .push(DnType::CommonName, "kube-double apiserver");
    let cert = params.signed_by(&key, &issuer)?;
    Ok((ca_cert.pem(), cert.der().to_vec(), key.serialize_der()))
}
