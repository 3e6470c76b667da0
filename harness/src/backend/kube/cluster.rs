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
//! (kandev-contract.md §7), binds it to a service account, and every session call goes
//! through a client holding that account's token: the suite proves the recipe works with
//! Kandev's least privilege. The operator's own identity only sets up, reads evidence (logs,
//! events: not in Kandev's Role) and cleans up.

use super::kind::{KindCluster, KindOptions, run_kind_cluster};
use crate::config::ClusterSettings;
use crate::node::{CgroupFs, HostNode, NodeView};
use crate::pod::identity::{LABEL_MANAGED, LABEL_RUN};
use crate::pod::template::WorkspaceMode;
use crate::wait::{self, WaitTimedOut};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kandev_report::{CleanupOutcome, CleanupRecord};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The service account, Role and RoleBinding the sessions run as.
pub const EXECUTOR: &str = "kandev-acceptance-executor";
/// How long the preflight waits for a fresh namespace to settle ([`Cluster::settle`]).
pub const SETTLE: Duration = Duration::from_secs(10);
/// How often the preflight asks again while a fresh namespace settles.
const SETTLE_POLL: Duration = Duration::from_millis(250);
/// How long the first answer of the API server may take before the run gives up.
pub const REACH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the cluster cannot be used; each names the cause and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "the kind binary `{bin}` cannot be run (`kind` is not on PATH?)\n  fix: install kind (https://kind.sigs.k8s.io, v0.32.0 is what Kandev's e2e pins) or pass --kind-bin PATH"
    )]
    KindMissing { bin: String },
    #[error(
        "kind {step} failed: {output}\n  fix: check that this host's Docker engine can run Kind nodes (`kind create cluster` by hand shows the same)"
    )]
    Kind { step: String, output: String },
    #[error(
        "docker {step} failed: {output}\n  fix: loading images into Kind needs the docker CLI of this host's engine on PATH"
    )]
    Docker { step: String, output: String },
    #[error(
        "read the kubeconfig {path}: {cause}\n  fix: pass --kubeconfig FILE (or set KUBECONFIG)"
    )]
    Kubeconfig {
        path: String,
        /// In the message (the fix follows it), so not a `source`: printed once.
        cause: String,
    },
    #[error(
        "--backend kube needs an explicit --context (the ambient current context is never used); contexts in the kubeconfig: {available:?}"
    )]
    NoContext { available: Vec<String> },
    #[error(
        "the kubeconfig has no context {context:?}; it has {available:?}\n  fix: pass one of those to --context"
    )]
    ContextMissing {
        context: String,
        available: Vec<String>,
    },
    #[error(
        "the API server of context {context} ({server}) does not answer: {reason}\n  fix: check that the cluster is up and reachable from here (VPN, firewall, `kubectl --context {context} version`); nothing was created"
    )]
    Unreachable {
        context: String,
        server: String,
        reason: String,
    },
    #[error(
        "namespace {namespace} does not exist\n  fix: create it (Kandev never creates namespaces), or omit --namespace so the run creates and removes its own"
    )]
    NamespaceMissing { namespace: String },
    #[error(
        "the executor identity lacks permissions Kandev needs in namespace {namespace}: {missing:?}\n  fix: the run's Role grants them; an admission policy or RBAC webhook is denying them"
    )]
    Forbidden {
        namespace: String,
        missing: Vec<String>,
    },
    #[error(
        "the API server rejects the privileged docker-engine companion in namespace {namespace} (server-side dry run): {message}\n  fix: allow privileged Pods there, e.g. label the namespace pod-security.kubernetes.io/enforce=privileged, or exempt it from your policy engine"
    )]
    PrivilegedRejected { namespace: String, message: String },
    #[error(
        "the service account {account} of the task Pods does not exist in namespace {namespace} (waited {waited:?}; the service-account controller creates `default` in every namespace)\n  fix: check that the controller manager runs, or create the account the template names"
    )]
    ServiceAccountMissing {
        namespace: String,
        account: String,
        waited: Duration,
    },
    /// A bounded wait of the set-up ran out (mapped to the error it means where it ends).
    #[error(transparent)]
    TimedOut(#[from] WaitTimedOut),
    #[error("{what}")]
    Setup {
        what: String,
        #[source]
        source: anyhow::Error,
    },
}

fn setup(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ClusterError {
    let what = what.into();
    move |e| ClusterError::Setup {
        what,
        source: e.into(),
    }
}

impl ClusterSettings {
    /// The Kind cluster of `--backend kind` (None for other backends).
    pub fn kind_options(&self, run_id: &str, report_folder: &Path) -> Option<KindOptions> {
        let kind = self.kind.as_ref()?;
        Some(KindOptions {
            kind_bin: kind.kind_bin.clone(),
            name: kind
                .cluster
                .clone()
                .unwrap_or_else(|| run_kind_cluster(run_id)),
            config: kind.config.clone(),
            node_image: kind.node_image.clone(),
            keep: kind.keep_cluster,
            kubeconfig: report_folder.join("kind.kubeconfig"),
            docker_bin: PathBuf::from("docker"),
        })
    }

    pub fn managed_pvc(&self) -> super::ManagedPvc {
        super::ManagedPvc {
            size: self.workspace_size.clone(),
            access_modes: self.workspace_access_modes.clone(),
            storage_class: self.storage_class.clone(),
        }
    }
}

/// How a client bounds its calls. Deliberately no read timeout: kube's `read_timeout` wraps
/// the socket, and an exec or a port-forward keeps that socket after the upgrade, so any
/// command answering after it would be cut (kube 5 leaves it unset for that reason). Each
/// exec and port-forward is bounded by its own deadline instead (as Kandev bounds each exec by
/// its context), and every request by how long the API server may take to start answering.
#[derive(Debug, Clone, Copy)]
pub struct ClientBounds {
    /// Establishing the connection (an unreachable cluster fails fast).
    pub connect: Duration,
    /// Until the response head arrives (for exec and port-forward: the upgrade), retries
    /// included; the stream after an upgrade is not bounded by it.
    pub answer: Duration,
}

impl Default for ClientBounds {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(5),
            answer: Duration::from_secs(60),
        }
    }
}

/// The client of `config`, every request bounded by `bounds.answer` (a tower timeout around
/// the request future, which ends at the response head).
pub fn client_of(config: Config, bounds: ClientBounds) -> Result<Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&tower::timeout::TimeoutLayer::new(bounds.answer))
        .build())
}

/// The kubeconfig client of an explicitly named context, with the default [`ClientBounds`].
pub async fn client_for(
    path: Option<&Path>,
    context: Option<&str>,
) -> Result<(Client, Config, String), ClusterError> {
    client_for_bounded(path, context, ClientBounds::default()).await
}

/// [`client_for`] with explicit bounds.
pub async fn client_for_bounded(
    path: Option<&Path>,
    context: Option<&str>,
    bounds: ClientBounds,
) -> Result<(Client, Config, String), ClusterError> {
    let shown = path
        .map(|p| p.display().to_string())
        .or_else(|| std::env::var("KUBECONFIG").ok())
        .unwrap_or_else(|| "~/.kube/config".into());
    let kubeconfig = match path {
        Some(p) => Kubeconfig::read_from(p),
        None => Kubeconfig::read(),
    }
    .map_err(|e| ClusterError::Kubeconfig {
        path: shown.clone(),
        cause: crate::error_chain(&e),
    })?;
    let available: Vec<String> = kubeconfig.contexts.iter().map(|c| c.name.clone()).collect();
    let Some(context) = context else {
        return Err(ClusterError::NoContext { available });
    };
    if !available.iter().any(|c| c == context) {
        return Err(ClusterError::ContextMissing {
            context: context.into(),
            available,
        });
    }
    let options = KubeConfigOptions {
        context: Some(context.into()),
        ..Default::default()
    };
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| ClusterError::Kubeconfig {
            path: shown,
            cause: crate::error_chain(&e),
        })?;
    config.connect_timeout = Some(bounds.connect);
    let client = client_of(config.clone(), bounds).map_err(|e| ClusterError::Setup {
        what: format!("a client for context {context}"),
        source: e.into(),
    })?;
    Ok((client, config, context.to_owned()))
}

/// The API server's version, or [`ClusterError::Unreachable`] within [`REACH_TIMEOUT`].
pub async fn reach(client: &Client, context: &str, server: &str) -> Result<String, ClusterError> {
    let unreachable = |reason: String| ClusterError::Unreachable {
        context: context.into(),
        server: server.into(),
        reason,
    };
    match tokio::time::timeout(REACH_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(info)) => Ok(info.git_version),
        Ok(Err(e)) => Err(unreachable(crate::error_chain(&e))),
        Err(_) => Err(unreachable(format!("no answer within {REACH_TIMEOUT:?}"))),
    }
}

/// A cluster whose API server answered: the operator's client and what it answered.
pub struct Reached {
    pub admin: Client,
    pub config: Config,
    pub context: String,
    pub server: String,
    pub server_version: String,
}

/// The client of an explicitly named context, with the API server reached (fast failure).
pub async fn open(path: Option<&Path>, context: Option<&str>) -> Result<Reached, ClusterError> {
    let (admin, config, context) = client_for(path, context).await?;
    open_with(admin, config, context).await
}

/// [`open`] with a client in hand.
pub async fn open_with(
    admin: Client,
    config: Config,
    context: String,
) -> Result<Reached, ClusterError> {
    let server = config.cluster_url.to_string();
    let server_version = reach(&admin, &context, &server).await?;
    Ok(Reached {
        admin,
        config,
        context,
        server,
        server_version,
    })
}

/// The run's cluster: the operator's client (setup, evidence, cleanup), the executor's client
/// (sessions), and what the run created there.
pub struct Cluster {
    pub admin: Client,
    pub session: Client,
    pub namespace: String,
    pub created_namespace: bool,
    pub context: String,
    pub server: String,
    pub server_version: String,
    pub kind: Option<KindCluster>,
    pub run_id: String,
    /// Permission checks of the executor identity (`verb resource`: allowed).
    pub access: BTreeMap<String, bool>,
    /// The operator's client configuration (server and CA), from which clients acting as
    /// other identities are made (a restricted one, for `launch::causal_failures`).
    pub config: Option<Config>,
    /// How long the preflight waits for what a fresh namespace settles into: a RoleBinding
    /// just created becoming effective, the namespace's `default` ServiceAccount.
    pub settle: Duration,
}

/// Labels of everything the run creates in the cluster (for `gc`).
pub fn run_labels(run_id: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED.to_owned(), "true".to_owned()),
        (LABEL_RUN.to_owned(), run_id.to_owned()),
    ])
}

/// The namespace a run creates when the operator names none.
pub fn run_namespace(run_id: &str) -> String {
    let name = format!("kandev-acceptance-{run_id}");
    name.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches('-')
        .to_owned()
}

/// The Role mirroring Kandev's executor permissions (kandev-contract.md §7): pods get,
/// create, delete, watch; exec and port-forward; claims as the workspace mode needs them.
/// Deliberately not: list, patch, logs, events, secrets, configmaps, namespaces.
pub fn executor_role(
    namespace: &str,
    mode: WorkspaceMode,
    labels: &BTreeMap<String, String>,
) -> Role {
    let rule = |resources: &[&str], verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..Default::default()
    };
    let mut rules = vec![
        rule(&["pods"], &["get", "create", "delete", "watch"]),
        rule(&["pods/exec", "pods/portforward"], &["get", "create"]),
    ];
    match mode {
        WorkspaceMode::ManagedPvc => rules.push(rule(
            &["persistentvolumeclaims"],
            &["get", "create", "delete"],
        )),
        WorkspaceMode::ExistingClaim => rules.push(rule(&["persistentvolumeclaims"], &["get"])),
        WorkspaceMode::EmptyDir => {}
    }
    Role {
        metadata: ObjectMeta {
            name: Some(EXECUTOR.into()),
            namespace: Some(namespace.into()),
            labels: Some(labels.clone()),
            ..Default::default()
        },
        rules: Some(rules),
    }
}

/// What the executor identity must be allowed (`verb resource[/subresource]`).
pub fn required_access(mode: WorkspaceMode) -> Vec<(&'static str, &'static str)> {
    let mut needed = vec![
        ("get", "pods"),
        ("create", "pods"),
        ("delete", "pods"),
        ("watch", "pods"),
        ("create", "pods/exec"),
        ("get", "pods/exec"),
        ("create", "pods/portforward"),
        ("get", "pods/portforward"),
    ];
    match mode {
        WorkspaceMode::ManagedPvc => needed.extend([
            ("get", "persistentvolumeclaims"),
            ("create", "persistentvolumeclaims"),
            ("delete", "persistentvolumeclaims"),
        ]),
        WorkspaceMode::ExistingClaim => needed.push(("get", "persistentvolumeclaims")),
        WorkspaceMode::EmptyDir => {}
    }
    needed
}

/// What Kandev's executor must NOT need (recorded: a broader grant is a finding, not an error).
pub const NOT_NEEDED: [(&str, &str); 6] = [
    ("list", "pods"),
    ("patch", "pods"),
    ("get", "pods/log"),
    ("list", "events"),
    ("get", "secrets"),
    ("list", "namespaces"),
];

async fn can_i(
    client: &Client,
    namespace: &str,
    verb: &str,
    resource: &str,
) -> Result<bool, ClusterError> {
    let (resource, subresource) = match resource.split_once('/') {
        Some((r, s)) => (r, Some(s.to_owned())),
        None => (resource, None),
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.into()),
                verb: Some(verb.into()),
                resource: Some(resource.into()),
                subresource,
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(setup(format!("SelfSubjectAccessReview {verb} {resource}")))?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

impl Cluster {
    /// Brings the Kind cluster up, reaches its API server, then prepares the namespace, the
    /// executor Role, its service account and binding, and the executor's client.
    pub async fn connect_kind(
        options: &KindOptions,
        namespace: Option<&str>,
        mode: WorkspaceMode,
        run_id: &str,
    ) -> Result<Self, ClusterError> {
        let kind = KindCluster::up(options.clone())?;
        let context = format!("kind-{}", options.name);
        let reached = open(Some(&options.kubeconfig), Some(&context)).await?;
        Self::set_up(reached, Some(kind), namespace, mode, run_id).await
    }

    /// With the API server reached: the namespace and the executor.
    pub async fn set_up(
        reached: Reached,
        kind: Option<KindCluster>,
        namespace: Option<&str>,
        mode: WorkspaceMode,
        run_id: &str,
    ) -> Result<Self, ClusterError> {
        let Reached {
            admin,
            config,
            context,
            server,
            server_version,
        } = reached;
        let labels = run_labels(run_id);

        let namespaces: Api<Namespace> = Api::all(admin.clone());
        let (namespace, created_namespace) = match namespace {
            Some(name) => {
                let found = namespaces
                    .get_opt(name)
                    .await
                    .map_err(setup(format!("get namespace {name}")))?;
                if found.is_none() {
                    return Err(ClusterError::NamespaceMissing {
                        namespace: name.into(),
                    });
                }
                (name.to_owned(), false)
            }
            None => {
                let name = run_namespace(run_id);
                let mut ns_labels = labels.clone();
                // The companion is privileged by design: the run's own namespace admits it.
                ns_labels.insert(
                    "pod-security.kubernetes.io/enforce".into(),
                    "privileged".into(),
                );
                let ns = Namespace {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        labels: Some(ns_labels),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                namespaces
                    .create(&PostParams::default(), &ns)
                    .await
                    .map_err(setup(format!("create namespace {name}")))?;
                (name, true)
            }
        };
        let mut cluster = Self {
            admin: admin.clone(),
            session: admin.clone(),
            namespace: namespace.clone(),
            created_namespace,
            context,
            server,
            server_version,
            kind,
            run_id: run_id.to_owned(),
            access: BTreeMap::new(),
            settle: SETTLE,
            config: Some(config.clone()),
        };
        // From here on the run owns objects: a failure tears them down before returning.
        match cluster.set_up_executor(&config, mode, &labels).await {
            Ok(session) => {
                cluster.session = session;
                Ok(cluster)
            }
            Err(e) => {
                cluster.teardown().await;
                Err(e)
            }
        }
    }

    async fn set_up_executor(
        &mut self,
        config: &Config,
        mode: WorkspaceMode,
        labels: &BTreeMap<String, String>,
    ) -> Result<Client, ClusterError> {
        let ns = self.namespace.clone();
        let meta = || ObjectMeta {
            name: Some(EXECUTOR.into()),
            namespace: Some(ns.clone()),
            labels: Some(labels.clone()),
            ..Default::default()
        };
        let pp = PostParams::default();
        let accounts: Api<ServiceAccount> = Api::namespaced(self.admin.clone(), &ns);
        accounts
            .create(
                &pp,
                &ServiceAccount {
                    metadata: meta(),
                    automount_service_account_token: Some(false),
                    ..Default::default()
                },
            )
            .await
            .map_err(setup(format!("create service account {EXECUTOR}")))?;
        Api::<Role>::namespaced(self.admin.clone(), &ns)
            .create(&pp, &executor_role(&ns, mode, labels))
            .await
            .map_err(setup(format!("create role {EXECUTOR}")))?;
        Api::<RoleBinding>::namespaced(self.admin.clone(), &ns)
            .create(
                &pp,
                &RoleBinding {
                    metadata: meta(),
                    role_ref: RoleRef {
                        api_group: Some("rbac.authorization.k8s.io".into()),
                        kind: "Role".into(),
                        name: EXECUTOR.into(),
                    },
                    subjects: Some(vec![Subject {
                        kind: "ServiceAccount".into(),
                        name: EXECUTOR.into(),
                        namespace: Some(ns.clone()),
                        ..Default::default()
                    }]),
                },
            )
            .await
            .map_err(setup(format!("create role binding {EXECUTOR}")))?;
        let token = accounts
            .create_token_request(
                EXECUTOR,
                &pp,
                &TokenRequest {
                    spec: Some(TokenRequestSpec {
                        audiences: Some(Vec::new()),
                        expiration_seconds: Some(4 * 3600),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )
            .await
            .map_err(setup(format!("request a token for {EXECUTOR}")))?
            .status
            .map(|s| s.token)
            .unwrap_or_default();
        // The executor's client: same server and CA, the service account's token only.
        let mut session_config = config.clone();
        session_config.auth_info =
            serde_json::from_value(json!({ "token": token })).map_err(|e| ClusterError::Setup {
                what: "the executor's credentials".into(),
                source: e.into(),
            })?;
        client_of(session_config, ClientBounds::default()).map_err(|e| ClusterError::Setup {
            what: "the executor's client".into(),
            source: e.into(),
        })
    }

    /// Polls SelfSubjectAccessReviews (as the executor) until every permission Kandev needs
    /// is allowed: a RoleBinding just created takes a moment to reach the authorizer. A
    /// permission still refused after [`Cluster::settle`] is a genuine refusal.
    async fn await_executor_access(&mut self, mode: WorkspaceMode) -> Result<(), ClusterError> {
        let needed = required_access(mode);
        let access = std::sync::Mutex::new(std::mem::take(&mut self.access));
        let (session, namespace) = (&self.session, self.namespace.as_str());
        let settled = wait::until(
            "the executor's permissions to take effect",
            self.settle,
            SETTLE_POLL,
            || async {
                let mut all = true;
                for (verb, resource) in &needed {
                    let key = format!("{verb} {resource}");
                    let known = access
                        .lock()
                        .map(|a| a.get(&key) == Some(&true))
                        .unwrap_or(false);
                    if known {
                        continue;
                    }
                    let allowed = can_i(session, namespace, verb, resource).await?;
                    if let Ok(mut a) = access.lock() {
                        a.insert(key, allowed);
                    }
                    all &= allowed;
                }
                Ok::<_, ClusterError>(all.then_some(()))
            },
        )
        .await;
        self.access = access.into_inner().unwrap_or_default();
        match settled {
            Ok(()) => Ok(()),
            Err(ClusterError::TimedOut(_)) => Err(ClusterError::Forbidden {
                namespace: self.namespace.clone(),
                missing: needed
                    .iter()
                    .map(|(verb, resource)| format!("{verb} {resource}"))
                    .filter(|key| self.access.get(key) != Some(&true))
                    .collect(),
            }),
            Err(e) => Err(e),
        }
    }

    /// Waits (with the operator's identity: Kandev's Role reads no service accounts) until the
    /// service account `pod` runs as exists: the controller creates a namespace's `default`
    /// a moment after the namespace, and until then the ServiceAccount admission refuses
    /// every Pod, dry runs included. Returns its name.
    async fn await_service_account(&self, pod: &Pod) -> Result<String, ClusterError> {
        let account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let accounts: Api<ServiceAccount> = Api::namespaced(self.admin.clone(), &self.namespace);
        let found = wait::until(
            &format!("service account {account} in {}", self.namespace),
            self.settle,
            SETTLE_POLL,
            || async {
                match accounts.get_opt(&account).await {
                    Ok(found) => Ok(found.map(|_| ())),
                    // Not readable with this identity: the dry run will say what it lacks.
                    Err(kube::Error::Api(status)) if status.code == 403 => Ok(Some(())),
                    Err(e) => Err(setup(format!("get service account {account}"))(e)),
                }
            },
        )
        .await;
        match found {
            Ok(()) => Ok(account),
            Err(ClusterError::TimedOut(_)) => Err(ClusterError::ServiceAccountMissing {
                namespace: self.namespace.clone(),
                account,
                waited: self.settle,
            }),
            Err(e) => Err(e),
        }
    }

    /// Before any session: the executor may do what Kandev needs (SelfSubjectAccessReview as
    /// the executor), and the API server admits the privileged companion (server-side dry run
    /// of a composed Pod, as the executor). Returns the evidence.
    pub async fn preflight(
        &mut self,
        pod: &Pod,
        mode: WorkspaceMode,
    ) -> Result<Value, ClusterError> {
        let started = Instant::now();
        self.await_executor_access(mode).await?;
        let access_effective_ms = started.elapsed().as_millis() as u64;
        let mut broader = Vec::new();
        for (verb, resource) in NOT_NEEDED {
            if can_i(&self.session, &self.namespace, verb, resource).await? {
                broader.push(format!("{verb} {resource}"));
            }
        }
        let account = self.await_service_account(pod).await?;
        let dry_run = PostParams {
            dry_run: true,
            field_manager: Some(super::FIELD_MANAGER.into()),
        };
        Api::<Pod>::namespaced(self.session.clone(), &self.namespace)
            .create(&dry_run, pod)
            .await
            .map_err(|e| ClusterError::PrivilegedRejected {
                namespace: self.namespace.clone(),
                message: crate::error_chain(&e),
            })?;
        Ok(json!({
            "context": self.context,
            "server": self.server,
            "server_version": self.server_version,
            "namespace": self.namespace,
            "namespace_created_by_run": self.created_namespace,
            "executor": format!("system:serviceaccount:{}:{EXECUTOR}", self.namespace),
            "executor_access": self.access,
            "executor_access_effective_after_ms": access_effective_ms,
            "pod_service_account": account,
            "executor_granted_more_than_kandev_needs": broader,
            "privileged_companion_admitted": "server-side dry run passed",
        }))
    }

    /// The node view: a Kind node is a container on this host's engine, whose cgroups and
    /// processes this host sees. Other clusters have none here.
    pub async fn node_view(&self, docker: Option<&bollard::Docker>) -> Option<Arc<dyn NodeView>> {
        let kind = self.kind.as_ref()?;
        let docker = docker?;
        let node = kind.node_container();
        let pid = docker
            .inspect_container(
                &node,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
            .ok()?
            .state?
            .pid?;
        let init_cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let view = kind_node(
            CgroupFs::host().ok()?,
            PathBuf::from("/proc"),
            &node,
            &init_cgroup,
        )?;
        Some(Arc::new(view))
    }

    /// Removes what the run created, newest first: the namespace it created (which takes
    /// everything inside), otherwise its Role, binding and service account; then the Kind
    /// cluster it created unless kept.
    pub async fn teardown(&self) -> Vec<CleanupRecord> {
        let mut records = Vec::new();
        let mut record = |object: String, started: Instant, result: Result<(), String>| {
            records.push(CleanupRecord {
                object,
                outcome: if result.is_ok() {
                    CleanupOutcome::Removed
                } else {
                    CleanupOutcome::Failed
                },
                duration_ms: started.elapsed().as_millis() as u64,
                error: result.err(),
            })
        };
        let (admin, ns) = (&self.admin, self.namespace.as_str());
        if self.created_namespace {
            let started = Instant::now();
            let result = delete_if_present(Api::<Namespace>::all(admin.clone()), ns).await;
            record(format!("namespace/{ns}"), started, result);
        } else {
            let started = Instant::now();
            let result =
                delete_if_present(Api::<RoleBinding>::namespaced(admin.clone(), ns), EXECUTOR)
                    .await;
            record(format!("rolebinding/{EXECUTOR}"), started, result);
            let started = Instant::now();
            let result =
                delete_if_present(Api::<Role>::namespaced(admin.clone(), ns), EXECUTOR).await;
            record(format!("role/{EXECUTOR}"), started, result);
            let started = Instant::now();
            let result = delete_if_present(
                Api::<ServiceAccount>::namespaced(admin.clone(), ns),
                EXECUTOR,
            )
            .await;
            record(format!("serviceaccount/{EXECUTOR}"), started, result);
        }
        if let Some(kind) = &self.kind
            && kind.created
            && !kind.options.keep
        {
            let started = Instant::now();
            let result = kind.delete().map_err(|e| e.to_string());
            record(
                format!("kind-cluster/{}", kind.options.name),
                started,
                result,
            );
        }
        records
    }
}

/// Deletes `name`; absent is success (the error text otherwise).
async fn delete_if_present<K>(api: Api<K>, name: &str) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// A Kind node container seen from this host: its cgroups below the node container's
/// (from its PID 1's `/proc/<pid>/cgroup` text, `init_cgroup`), its processes in `proc_root`.
pub fn kind_node(
    cgroups: CgroupFs,
    proc_root: PathBuf,
    node_container: &str,
    init_cgroup: &str,
) -> Option<HostNode> {
    Some(HostNode {
        cgroups,
        proc_root,
        scope: node_cgroup_scope(init_cgroup)?,
        description: format!("Kind node {node_container} (read from this host)"),
        settle: crate::node::KUBELET_SETTLE,
    })
}

/// The node container's cgroup as this host sees it, from its init's `/proc/<pid>/cgroup`:
/// on v1 (and hybrid hosts, which also list the unified hierarchy) the memory hierarchy's
/// path, on v2 the unified line's. Kind's entrypoint moves the node's processes into
/// `init.scope` on v2 (`…/docker-<id>.scope/init.scope`) while the kubelet puts its Pods in the
/// sibling `kubelet.slice`: the node's cgroup is the folder above `init.scope`.
pub fn node_cgroup_scope(proc_cgroup: &str) -> Option<String> {
    let memory = proc_cgroup.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        controllers
            .split(',')
            .any(|c| c == "memory")
            .then_some(path)
    });
    let path = memory.or_else(|| proc_cgroup.lines().find_map(|l| l.strip_prefix("0::")))?;
    let path = path.trim();
    let root = match path.strip_suffix("/init.scope") {
        Some("") => "/",
        Some(parent) => parent,
        None => path,
    };
    Some(root.to_owned())
}

/// `gc` in a cluster: namespaces the harness created (by label, optionally of one run) are
/// deleted whole; in a namespace the operator named, the run's Pods, claims and executor
/// objects are removed. Returns what was (or would be) removed.
pub async fn gc(
    admin: &Client,
    namespace: Option<&str>,
    run: Option<&str>,
    dry_run: bool,
) -> Result<Vec<String>, ClusterError> {
    let mut selector = format!("{LABEL_MANAGED}=true");
    if let Some(run) = run {
        selector.push_str(&format!(",{LABEL_RUN}={run}"));
    }
    let params = ListParams::default().labels(&selector);
    let mut removed = Vec::new();
    let dp = DeleteParams::default();
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    for ns in namespaces
        .list(&params)
        .await
        .map_err(setup("list namespaces"))?
        .items
    {
        let name = ns.metadata.name.unwrap_or_default();
        if !dry_run {
            namespaces
                .delete(&name, &dp)
                .await
                .map_err(setup(format!("delete namespace {name}")))?;
        }
        removed.push(format!("namespace/{name}"));
    }
    if let Some(ns) = namespace {
        let run_selector: Vec<(&str, &str)> = run.map(|r| vec![(LABEL_RUN, r)]).unwrap_or_default();
        removed.extend(
            super::remove_labelled(
                admin,
                ns,
                &run_selector,
                dry_run,
                &super::DeletePolicy::default(),
            )
            .await
            .map_err(|e| ClusterError::Setup {
                what: format!("remove labelled objects in {ns}"),
                source: e.into(),
            })?,
        );
        macro_rules! sweep {
            ($kind:ty, $label:expr) => {{
                let api: Api<$kind> = Api::namespaced(admin.clone(), ns);
                for item in api
                    .list(&params)
                    .await
                    .map_err(setup(format!("list {}", $label)))?
                    .items
                {
                    let name = item.metadata.name.clone().unwrap_or_default();
                    if !dry_run {
                        api.delete(&name, &dp)
                            .await
                            .map_err(setup(format!("delete {} {name}", $label)))?;
                    }
                    removed.push(format!("{}/{name}", $label));
                }
            }};
        }
        sweep!(RoleBinding, "rolebinding");
        sweep!(Role, "role");
        sweep!(ServiceAccount, "serviceaccount");
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_role_mirrors_kandevs_executor_permissions_per_workspace_mode() {
        let labels = run_labels("r");
        let rules = |mode| {
            executor_role("ns", mode, &labels)
                .rules
                .unwrap_or_default()
                .into_iter()
                .flat_map(|r| {
                    let verbs = r.verbs.clone();
                    r.resources
                        .unwrap_or_default()
                        .into_iter()
                        .flat_map(move |res| {
                            verbs
                                .iter()
                                .map(move |v| format!("{v} {res}"))
                                .collect::<Vec<_>>()
                        })
                })
                .collect::<std::collections::BTreeSet<String>>()
        };
        let managed = rules(WorkspaceMode::ManagedPvc);
        for needed in required_access(WorkspaceMode::ManagedPvc) {
            assert!(
                managed.contains(&format!("{} {}", needed.0, needed.1)),
                "{needed:?}"
            );
        }
        for not in NOT_NEEDED {
            assert!(
                !managed.contains(&format!("{} {}", not.0, not.1)),
                "{not:?}"
            );
        }
        assert!(
            !rules(WorkspaceMode::EmptyDir)
                .iter()
                .any(|r| r.contains("persistentvolumeclaims"))
        );
        let existing = rules(WorkspaceMode::ExistingClaim);
        assert!(existing.contains("get persistentvolumeclaims"));
        assert!(
            !existing.contains("delete persistentvolumeclaims"),
            "existing claims are never deleted"
        );
    }

    #[test]
    fn the_node_scope_comes_from_the_node_containers_cgroup() {
        assert_eq!(
            node_cgroup_scope("0::/system.slice/docker-abc.scope\n").as_deref(),
            Some("/system.slice/docker-abc.scope")
        );
        assert_eq!(
            node_cgroup_scope(
                "12:pids:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n"
            )
            .as_deref(),
            Some("/docker/abc")
        );
        assert_eq!(node_cgroup_scope(""), None);
    }

    /// Kind on a cgroup v2 host: the node's PID 1 sits in `…/docker-<id>.scope/init.scope`;
    /// the node's cgroup (where its Pods are searched) is the `docker-<id>.scope` folder.
    #[test]
    fn the_node_scope_of_kind_on_v2_is_the_docker_scope_not_its_init_scope() {
        use crate::node::testing::{Driver, KindNode};
        let node = KindNode::new(true, Driver::Systemd);
        let init = node.init_cgroup();
        assert!(init.trim_end().ends_with(".scope/init.scope"), "{init}");
        let scope = node_cgroup_scope(&init);
        assert_eq!(scope.as_deref(), Some(node.node_cgroup.as_str()));
        let folder = node
            .cgroup_root()
            .join(scope.unwrap_or_default().trim_start_matches('/'));
        assert!(
            folder.is_dir()
                && folder
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("docker-")),
            "{}",
            folder.display()
        );
        // cgroupfs driver on v2: `/docker/<id>/init.scope`.
        assert_eq!(
            node_cgroup_scope("0::/docker/abc/init.scope\n").as_deref(),
            Some("/docker/abc")
        );
        // A hybrid (v1) host also lists the unified hierarchy: the memory hierarchy's path
        // is the one a v1 tree is searched by.
        assert_eq!(
            node_cgroup_scope("4:memory:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n")
                .as_deref(),
            Some("/docker/abc")
        );
    }

    /// The Kind node view as `node_view` builds it (the scope from the node's PID 1) finds
    /// every Pod's cgroup, its limits and what is left of it, on each driver and version.
    #[tokio::test]
    async fn the_kind_node_view_from_the_nodes_init_finds_pods_on_v1_and_v2() {
        use crate::node::testing::{Driver, assert_kind_view, kind_node_with_pods};
        for (v2, driver) in [
            (true, Driver::Systemd),
            (true, Driver::Cgroupfs),
            (false, Driver::Systemd),
            (false, Driver::Cgroupfs),
        ] {
            let node = kind_node_with_pods(v2, driver);
            let view = kind_node(
                CgroupFs::at(&node.cgroup_root()).unwrap(),
                node.proc_root(),
                &format!("(v2 {v2}, {driver:?})"),
                &node.init_cgroup(),
            )
            .unwrap();
            assert_kind_view(&node, &view).await;
        }
    }

    #[test]
    fn a_run_namespace_is_a_dns_label() {
        let ns = run_namespace("20261130t003536-abc123");
        assert!(
            ns.len() <= 63
                && ns
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        );
        assert!(!ns.ends_with('-'));
    }
}
