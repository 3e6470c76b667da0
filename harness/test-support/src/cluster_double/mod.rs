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
//! A request goes through `routing` (recorded, authenticated, negotiated, RBAC's gate) to
//! the verbs on stored objects (`objects`, `watch`, `rbac`'s reviews and tokens, each on a
//! `request::Ctx`) or to the exec and port-forward streams (`streams`, `spdy`, `tunnel`);
//! `runtime` runs the stored Pods, `store` holds the state, `route` and `status` read
//! requests and write answers. The modules use each other one way only (no import circles).
//!
//! [`LocalBackend`]: kandev_harness::backend::local::LocalBackend

mod defaults;
pub(crate) mod discovery;
mod negotiation;
mod objects;
mod patch;
mod protobuf;
mod rbac;
pub mod recorded;
mod request;
pub(crate) mod route;
mod routing;
mod runtime;
mod spdy;
mod status;
pub(crate) mod store;
mod streams;
mod tunnel;
mod watch;

pub use runtime::{NODE, node_labels};
pub use store::{Deletion, DoubleState, Identity, PodMutator, Refusal, Seen};

use anyhow::Context;
use base64::Engine;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use kandev_harness::backend::Backend;
use kandev_harness::backend::local::attach::PodStreams;
use kandev_harness::host::connect_engine;
use serde_json::json;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use store::Store;
use tokio::net::TcpListener;

/// The context (and cluster and user) name in the kubeconfig [`start`] writes.
pub const CONTEXT: &str = "kube-double";

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
            store::create_namespace_objects(&mut store, ns);
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
                    async move { Ok::<_, std::convert::Infallible>(routing::handle(state, req).await) }
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
