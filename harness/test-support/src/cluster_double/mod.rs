//! A wire-level Kubernetes cluster double: an API server over HTTPS on 127.0.0.1 (a random
//! port) that a client reaches only through the kubeconfig file [`start`] writes, exactly as
//! it reaches a real cluster (TLS against the double's own CA, a bearer token per identity).
//!
//! **This is a double, not a cluster.** What it proves: the harness's `kube` backend speaks the
//! API server's wire protocol as kube-rs 5 does with a real one — TLS and kubeconfig loading,
//! JSON `Status` errors and their codes, UIDs, resourceVersions, DELETE preconditions (409),
//! label selectors (set-based too) and each resource's field selectors, `dryRun=All`, Pods stored as an API server defaults them (a v1.36's
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
//! with the UID the double assigned, once its scheduler (`scheduler`) has bound them to its
//! one node ([`NODE`], a Node object with labels, capacity and allocatable): a Pod whose
//! selector the node does not match, whose claim is missing or unbound, or whose requests do
//! not fit beside the Pods already there stays `Pending`, `PodScheduled=False`
//! `Unschedulable` in a v1.36 scheduler's words, until it fits. Claims are volumes there,
//! bound `Immediate` or `WaitForFirstConsumer` by their StorageClass (`storage`). Names and
//! labels are not validated (the real API server is their referee:
//! `tests/real_api_server/names.rs`); Pods are defaulted as an API server defaults them,
//! and run as stored (the local node accepts the defaulted fields,
//! and records what it does not do as a kubelet would as `NotEnforced` Events).
//!
//! **In the cluster** (for a harness that runs as a Job Pod with kube-rs's
//! `Config::incluster()`): with a runtime the double also listens on the engine's `bridge`
//! gateway ([`KubeDouble::pod_address`], in the server certificate's IP SANs), and a Pod is
//! admitted as the `ServiceAccount` plugin admits it (`serviceaccount`: its account must
//! exist; an automounted token is the projected `kube-api-access-<5>` volume mounted
//! read-only at `/var/run/secrets/kubernetes.io/serviceaccount`). What the runtime runs is a
//! copy (`mounts`) in which, as a kubelet prepares them, that volume and every `secret`
//! volume are read-only host folders holding a fresh token bound to the Pod (it
//! authenticates as the ServiceAccount, through the same RBAC, until the Pod is gone), the
//! double's CA, the namespace and a Secret's decoded data (modes and owners as the kubelet
//! sets them); a missing Secret keeps the Pod `ContainerCreating` with a `FailedMount` Event
//! until it exists. Every container gets `KUBERNETES_SERVICE_HOST`/`_PORT` (and the other
//! `kubernetes` Service variables) naming the Pod address. Pods end `Succeeded` or `Failed`
//! by their containers' exit codes and restart policy (the kubelet's `getPhase`), with each
//! container's `terminated` state and times read from the engine (`containers`); pods/log is
//! streamed with `follow=true` until the container ends (`tailLines`, `timestamps`,
//! `sinceSeconds`, `limitBytes`). Secrets (`secrets`: `stringData` merged into `data`; no token
//! controller), batch/v1
//! Jobs with a minimal Job controller, the TTL-after-finished controller and the garbage
//! collector's cascade (`jobs`: one Pod per Job, `backoffLimit`, `activeDeadlineSeconds`,
//! `ttlSecondsAfterFinished`, propagation policies with batch/v1's orphaning default),
//! RBAC's `resourceNames` and Role validation, SelfSubjectRulesReviews and
//! SelfSubjectReviews (`rbac`), coordination.k8s.io/v1 Leases stored as any object is (what
//! a run holds while it is alive, which `gc` spares; their validation is the real API
//! server's, which the harness's own Leases meet in `tests/real_api_server/operator.rs`),
//! and finalizers
//! (`finalizers`: a DELETE marks an object that has some and keeps it,
//! `deletionGracePeriodSeconds` 0 once a Pod's kubelet is done; no new one while it is being
//! deleted; the update that removes the last deletes it; a namespace waits `Terminating`,
//! saying which remain).
//!
//! Held to a real kube-apiserver, request for request, by `tests/real_api_server/corpus.rs`
//! (names and labels at their limits, immutable fields, conflicts, dry runs, merge patches,
//! selectors): what it still answers otherwise is listed there, each with the upstream reason.
//!
//! **It serves the harness's own client** (kube-rs, JSON), not every client: `/version` is
//! its one discovery document (`/api`, `/apis` and OpenAPI are 404, so kubectl's typed
//! commands find nothing; `--raw` requests work), request bodies are JSON and patches JSON
//! merge patches (YAML, protobuf, JSON Patch, strategic merge patch and server-side apply
//! are 415; an `Accept` without JSON is 406), exec and port-forward are websockets (SPDY
//! is 400), and nothing is watched (the harness polls with GETs; a watch is 405
//! `MethodNotAllowed`). Each refusal's `Status` says so. Third-party clients (kubectl, the Python client)
//! no longer referee it: the real API server does. The in-Pod path is refereed by Python's
//! `ssl` and `urllib` in a Pod (the mounted CA, the IP SAN and the token,
//! `tests/kube_double/main.rs` of the harness).
//!
//! What only a real cluster (Kind) proves: a kubelet's behaviour (image pulls, cgroup layout,
//! `podPidsLimit`, housekeeping timing, restart backoff), real admission plugins (Pod
//! Security), tokens as JWTs (the double's are opaque strings with no audience; a
//! TokenRequest's expires at the lifetime it granted, capped as
//! `--service-account-max-token-expiration` caps it, but a Pod's projected token and a token
//! Secret's never do, and a kubelet rotates the file, the double writes it once), Secret volumes updated
//! when their Secret changes, the `kube-root-ca.crt` ConfigMap and ConfigMaps at all, the
//! `kubernetes.default.svc` name (the Pod address is an IP: `Config::incluster_dns()` finds
//! nothing), ClusterRoles and RBAC's escalation checks, the rest of the Job controller
//! (parallel and indexed Jobs, pod failure and success policies, suspension, the
//! `batch.kubernetes.io/job-tracking` finalizer), garbage collection beyond a Job's Pods, the
//! apiserver's own exec/port-forward translation (SPDY towards the kubelet,
//! the kubelet's CRI streaming server), Table output, server-side apply, namespaces as
//! isolation (Pod names share the one local engine), more than one node (and so the
//! scheduler's spreading, taints and preemption), the kubelet's own admission of what it is
//! asked to run (`OutOfcpu`), real provisioners (a claim of no StorageClass is bound at once to
//! a volume on the runtime, as no cluster without a provisioner would), and ResourceQuotas and
//! LimitRanges (not served: their admission is judged on the real API server,
//! `harness/test-support/tests/real_api_server/quota.rs`).
//!
//! **What a test switches on** (`DoubleState::enable`, none by default: `behaviours`, carried
//! out by `controllers`): what an operator's cluster may do beside the API server's rules, so
//! that the catalogue's checks only a cluster can break have twins: a controller that
//! relabels running Pods, a stuck node agent whose finalizer is never removed, a registry the
//! node cannot reach (its pulls hang, `ContainerCreating`), a controller that deletes Pods
//! whose image cannot be pulled before their status is read.
//!
//! **Faults and limits** a test switches on (`faults`, [`DoubleState::faults`]): answers a
//! control plane gives under load or while restarting (429 with `Retry-After`, 500, 503,
//! 410), connections cut before or after a request is served or a while into an exec or
//! port-forward (a socket shutdown, no TLS `close_notify`, as from a load balancer), an idle
//! cut of connections silent for a while, and a token lifetime cap; each that fires is
//! recorded.
//!
//! A request goes through `faults` (the connection's activity watched, a fault applied),
//! then `routing` (recorded, authenticated, negotiated, RBAC's gate) to
//! the verbs on stored objects (`objects`, `rbac`'s reviews and tokens, `jobs`'
//! create and delete, each on a `request::Ctx`; names, labels, the request's options, bodies
//! of another kind or namespace and fields an update may not change are the real API
//! server's to refuse, and so are a label selector's keys and values:
//! `tests/real_api_server/`; `serviceaccount` and `secrets` admit what is written) or to the exec and
//! port-forward streams (`streams`); `runtime` runs the stored Pods once
//! `scheduler` binds them (`storage` provisions their claims, `mounts` prepares their volumes,
//! `containers` reads their state and logs from the engine), `jobs` runs the Job controller,
//! `store` holds the state, `route`
//! and `status` read requests and write answers. The modules use each other one way only (no
//! import circles).
//!
//! [`LocalBackend`]: kandev_harness::backend::local::LocalBackend

mod behaviours;
mod containers;
mod controllers;
mod defaults;
pub(crate) mod discovery;
mod faults;
mod finalizers;
mod jobs;
mod mounts;
mod negotiation;
mod objects;
mod patch;
mod rbac;
pub mod recorded;
mod request;
pub(crate) mod route;
mod routing;
mod runtime;
mod scheduler;
mod secrets;
mod serviceaccount;
mod status;
mod storage;
pub(crate) mod store;
mod streams;

pub use behaviours::Behaviour;
pub use faults::{Fault, Faults};
pub use scheduler::{DEFAULT_ALLOCATABLE, NODE, node_labels};

/// The double's default StorageClass (created with it; a test may delete it).
pub const DEFAULT_STORAGE_CLASS: &str = "standard";
pub use storage::PROVISIONING_SECONDS;
pub use store::{Deletion, DoubleState, Identity, PodMutator, Refusal, Seen};

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
    let docker = match &runtime {
        Some(_) => Some(
            connect_engine()
                .await
                .context("the engine the double's Pods run on")?,
        ),
        None => None,
    };
    let streams = docker.clone().map(PodStreams::new);
    let gateway = match &docker {
        Some(docker) => Some(bridge_gateway(docker).await?),
        None => None,
    };
    let certificate = crate::tls::server_certificate(
        "kube-double CA",
        "kube-double apiserver",
        &[],
        gateway.as_slice(),
    )?;
    let (ca_pem, cert_der, key_der) = (
        certificate.ca_pem,
        certificate.cert.der().to_vec(),
        certificate.key.serialize_der(),
    );
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
    let pod_listener = match gateway {
        Some(ip) => Some(listen_beside(ip, address.port()).await?),
        None => None,
    };
    let pod_address = match &pod_listener {
        Some(l) => Some(l.local_addr()?),
        None => None,
    };

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
        // A default StorageClass, as Kind ships `standard` (the double's binds at once, as
        // claims without a class always did here; Kind's waits for the first consumer). A
        // test deletes it to be a cluster with none (EKS 1.30+, kubeadm).
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

    let mut server_tasks = vec![serve(listener, acceptor.clone(), state.clone())];
    if let Some(listener) = pod_listener {
        server_tasks.push(serve(listener, acceptor, state.clone()));
    }
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
