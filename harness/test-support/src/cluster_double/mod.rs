//! A wire-level Kubernetes cluster double: an API server over HTTPS on 127.0.0.1 (a random
//! port, its own CA, a bearer token per identity) that a client reaches only through the
//! kubeconfig [`start`] writes, as it reaches a real cluster.
//!
//! **What it is for.** What a real control plane here cannot give the harness's tests: Pods
//! that run on the local Docker engine (a [`LocalBackend`] given to [`start`]) under one
//! node ([`NODE`]) whose labels and allocatable a test sets; pods/exec, pods/log and
//! pods/portforward streamed into them; faults a test switches on (429, 5xx, cut and idle
//! connections, a token lifetime cap: `faults`); and an operator's cluster misbehaving
//! (`behaviours`, carried out by `controllers`), so that the catalogue's cluster checks have
//! twins. With a runtime it also listens on the engine's `bridge` gateway, so that a harness
//! running as a Job Pod reaches it in-cluster (mounted token, CA and namespace).
//!
//! **What it serves.** The harness's own client (kube-rs, JSON) and no other: the verbs on
//! stored objects with UIDs, resourceVersions, preconditions, dry runs, JSON merge patches
//! and selectors; Pods admitted (an ordered admission list: `objects`) and bound to its one
//! node unless their selector or claim rules it out; claims bound at once, ServiceAccounts
//! and their tokens, Secrets, RBAC, Leases, finalizers, and a one-Pod Job controller. Other
//! bodies, patch types, discovery beyond `/version` and watches are refused, each `Status`
//! saying so; what its node does not run (init containers, env `valueFrom`, volume kinds no
//! harness Pod mounts) is refused naming it.
//!
//! **What it leaves to others.** Validation, defaulting, admission, quota and the API's exact
//! answers, capacity, preemption and claim binding modes are the real control plane's
//! (`tests/real_api_server/`, `scheduling.rs` and `claims.rs` for the scheduler's words and
//! the PV controller): `corpus.rs` sends both the
//! same requests and lists every difference the double keeps, with its upstream reason. A
//! kubelet's own behaviour (pulls, cgroups, restarts, token rotation), real provisioners,
//! more than one node and namespaces as isolation are Kind's (`real_kind` tests).
//! docs/development.md ("The cluster double") has the longer account.
//!
//! **The map.** A request goes through `faults`, then `routing` (the API server's handler
//! chain: recorded, authenticated, resolved, RBAC's gate) to the one handler of its resource
//! in `objects`, `rbac`, `jobs` (each on a `request::Ctx`) or to `streams`; `runtime` runs
//! the Pods `scheduler` binds (`storage` provisions claims, `mounts` prepares volumes,
//! `containers` reads the engine); `store` holds the state, and `route` and `status` read
//! requests and write answers. The modules use each other one way only (no import circles).
//!
//! [`LocalBackend`]: kandev_harness::backend::local::LocalBackend

mod behaviours;
mod containers;
mod controllers;
pub(crate) mod discovery;
mod faults;
mod finalizers;
mod jobs;
mod mounts;
mod negotiation;
mod objects;
mod patch;
mod rbac;
mod request;
pub(crate) mod route;
mod routing;
mod runtime;
mod scheduler;
mod serviceaccount;
mod status;
mod storage;
pub(crate) mod store;
mod streams;

pub use behaviours::Behaviour;
pub use faults::{Fault, Faults};
pub use scheduler::{NODE, scheduler_says};

/// The double's default StorageClass (created with it; a test may delete it).
pub const DEFAULT_STORAGE_CLASS: &str = "standard";
pub use store::{Deletion, DoubleState, Identity, PodMutator, Seen};

use anyhow::Context;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use kandev_harness::backend::Backend;
use kandev_harness::backend::local::attach::PodStreams;
use kandev_harness::host::connect_engine;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
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
    /// `https://127.0.0.1:<port>`: where the host reaches it (the kubeconfig's server).
    pub server: String,
    /// The address its Pods reach it at (with a runtime): the engine's `bridge` network
    /// gateway, which is in the server certificate's IP SANs, and the double's port. A Pod's
    /// containers get it as `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`, as a
    /// kubelet sets them for the `kubernetes` Service. None without a runtime.
    pub pod_address: Option<SocketAddr>,
    /// The CA that signed the server certificate (PEM): the kubeconfig's
    /// `certificate-authority-data` and every Pod's `ca.crt`.
    pub ca_pem: String,
    pub admin_token: String,
    pub state: Arc<DoubleState>,
    _folder: tempfile::TempDir,
    server_tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for KubeDouble {
    fn drop(&mut self) {
        for task in &self.server_tasks {
            task.abort();
        }
    }
}

/// Starts the double on 127.0.0.1 (a random port) with a fresh CA and server certificate,
/// and writes its kubeconfig (context [`CONTEXT`]). Pods run on `runtime` when given (a
/// [`LocalBackend`](kandev_harness::backend::local::LocalBackend) on the engine
/// `DOCKER_HOST` names: pods/exec and pods/portforward stream into its containers there);
/// without one they are stored and stay `Pending`. With a runtime the double also listens on
/// the engine's `bridge` gateway ([`KubeDouble::pod_address`]), where its Pods reach it.
pub async fn start(runtime: Option<Arc<dyn Backend>>) -> anyhow::Result<KubeDouble> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    let address = listener.local_addr()?;
    let server = format!("https://{address}");
    // With a runtime: the engine, and a second listener where its Pods reach the double.
    let (docker, pod_listener) = match &runtime {
        Some(_) => {
            let docker = connect_engine()
                .await
                .context("the engine the double's Pods run on")?;
            let gateway = bridge_gateway(&docker).await?;
            (
                Some(docker),
                Some(listen_beside(gateway, address.port()).await?),
            )
        }
        None => (None, None),
    };
    let streams = docker.clone().map(PodStreams::new);
    let pod_address = pod_listener
        .as_ref()
        .map(TcpListener::local_addr)
        .transpose()?;
    let gateway: Vec<IpAddr> = pod_address.iter().map(SocketAddr::ip).collect();
    let certificate =
        crate::tls::server_certificate("kube-double CA", "kube-double apiserver", &[], &gateway)?;
    let ca_pem = certificate.ca_pem;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS versions")?
        .with_no_client_auth()
        .with_single_cert(
            vec![certificate.cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(certificate.key.serialize_der().into()),
        )
        .context("the server certificate")?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));

    let folder = tempfile::tempdir()?;
    let pod_files = folder.path().join("pods");
    std::fs::create_dir(&pod_files)?;
    let admin_token = format!("double-admin-{}", uuid::Uuid::new_v4().simple());
    let state = Arc::new(DoubleState {
        store: Mutex::new(Store::default()),
        runtime,
        streams,
        docker,
        pod_address,
        ca_pem: ca_pem.clone(),
        pod_files,
        mutator: Mutex::new(None),
        behaviours: Default::default(),
        faults: Default::default(),
    });
    {
        let mut store = state.store();
        store.tokens.insert(admin_token.clone(), Identity::Admin);
        for ns in ["default", "kube-system"] {
            store::create_namespace_objects(&mut store, ns);
        }
        scheduler::register_node(&mut store);
        // A default StorageClass, as Kind ships `standard`, for the run's preflight to find
        // (every claim binds at once here, whatever its class: `storage`). A test deletes it
        // to be a cluster with none (EKS 1.30+, kubeadm).
        store.create(
            (
                "storage.k8s.io/storageclasses".into(),
                String::new(),
                DEFAULT_STORAGE_CLASS.into(),
            ),
            serde_json::json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": DEFAULT_STORAGE_CLASS, "annotations":
                    {"storageclass.kubernetes.io/is-default-class": "true"}},
                "provisioner": "kube-double", "reclaimPolicy": "Delete",
                "volumeBindingMode": "Immediate"}),
        );
    }

    let kubeconfig = folder.path().join("kubeconfig");
    let config = crate::tls::kubeconfig(CONTEXT, &server, &ca_pem, &admin_token);
    std::fs::write(&kubeconfig, serde_json::to_vec_pretty(&config)?)?;

    let server_tasks = std::iter::once(listener)
        .chain(pod_listener)
        .map(|listener| serve(listener, acceptor.clone(), state.clone()))
        .collect();
    Ok(KubeDouble {
        kubeconfig,
        context: CONTEXT.into(),
        server,
        pod_address,
        ca_pem,
        admin_token,
        state,
        _folder: folder,
        server_tasks,
    })
}

/// Serves the API on every connection `listener` accepts.
fn serve(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    state: Arc<DoubleState>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let (acceptor, state) = (acceptor.clone(), state.clone());
            tokio::spawn(async move {
                // The socket kept aside to cut it (`faults`), its activity watched.
                let Ok((connection, tcp)) = faults::Connection::accept(tcp) else {
                    return;
                };
                connection.watch_idle(state.faults());
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                    let (state, connection) = (state.clone(), connection.clone());
                    async move {
                        let (method, uri) = (req.method().to_string(), req.uri().to_string());
                        let reply = match faults::before(state.faults(), &connection, &method, &uri)
                        {
                            faults::Before::Serve => routing::handle(state, req).await,
                            faults::Before::ServeThenCut => {
                                let reply = routing::handle(state, req).await;
                                connection.cut();
                                reply
                            }
                            faults::Before::Answer(reply) => reply,
                            faults::Before::Translated(cause) => {
                                streams::translated_refusal(req, &cause)
                            }
                            // Never delivered: the socket is shut.
                            faults::Before::Cut => hyper::Response::new(status::full("")),
                        };
                        Ok::<_, std::convert::Infallible>(reply)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .with_upgrades()
                    .await;
            });
        }
    })
}

/// The gateway of the engine's default `bridge` network: the host's address on the network
/// the local backend's Pods join (their route out), so the one a process in a Pod reaches
/// the double at.
async fn bridge_gateway(docker: &bollard::Docker) -> anyhow::Result<IpAddr> {
    let network = docker
        .inspect_network(
            "bridge",
            None::<bollard::query_parameters::InspectNetworkOptions>,
        )
        .await
        .context("inspecting the engine's `bridge` network (where the double's Pods run) for its gateway")?;
    let configs: Vec<(Option<String>, Option<String>)> = network
        .ipam
        .and_then(|ipam| ipam.config)
        .into_iter()
        .flatten()
        .map(|config| (config.gateway, config.subnet))
        .collect();
    ipv4_gateway(&configs).with_context(|| {
        format!(
            "the engine's `bridge` network has no IPv4 gateway or subnet in its IPAM configuration (gateway, subnet: {configs:?}): the double's Pods could not reach it"
        )
    })
}

/// The IPv4 gateway of a network's IPAM configurations (gateway, subnet): the one named, else
/// the subnet's first address, which the engine's IPAM gives the bridge when none is named
/// (dockerd 20.10 leaves it out of the default bridge's configuration on some starts).
fn ipv4_gateway(configs: &[(Option<String>, Option<String>)]) -> Option<IpAddr> {
    let named = configs
        .iter()
        .filter_map(|(gateway, _)| gateway.as_deref()?.parse::<IpAddr>().ok())
        .find(IpAddr::is_ipv4);
    named.or_else(|| {
        configs.iter().find_map(|(_, subnet)| {
            let (address, prefix) = subnet.as_deref()?.split_once('/')?;
            let (address, prefix) = (
                address.parse::<std::net::Ipv4Addr>().ok()?,
                prefix.parse::<u32>().ok().filter(|p| *p < 31)?,
            );
            let network = u32::from(address) & (u32::MAX.checked_shl(32 - prefix).unwrap_or(0));
            Some(IpAddr::V4((network + 1).into()))
        })
    })
}

/// Listens on `ip` at `port` (the host-side port, so that both addresses differ only in
/// their host), or at a random port when that one is taken there.
async fn listen_beside(ip: IpAddr, port: u16) -> anyhow::Result<TcpListener> {
    match TcpListener::bind((ip, port)).await {
        Ok(listener) => Ok(listener),
        Err(_) => TcpListener::bind((ip, 0)).await.with_context(|| {
            format!(
                "listening on the engine's `bridge` gateway {ip} (where the double's Pods reach it): is the engine on another host?"
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::ipv4_gateway;

    fn config(gateway: Option<&str>, subnet: Option<&str>) -> (Option<String>, Option<String>) {
        (gateway.map(str::to_owned), subnet.map(str::to_owned))
    }

    #[test]
    fn the_gateway_is_the_named_one_else_the_subnets_first_address() {
        let named = [config(Some("172.18.0.254"), Some("172.18.0.0/16"))];
        assert_eq!(ipv4_gateway(&named), Some("172.18.0.254".parse().unwrap()));
        let unnamed = [config(None, Some("172.17.0.0/16"))];
        assert_eq!(ipv4_gateway(&unnamed), Some("172.17.0.1".parse().unwrap()));
        let ipv6_only = [config(Some("fd00::1"), Some("fd00::/64"))];
        assert_eq!(ipv4_gateway(&ipv6_only), None);
        assert_eq!(ipv4_gateway(&[]), None);
    }
}
