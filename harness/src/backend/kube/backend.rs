//! The `kube` backend value: its two identities (the executor's client for every session call,
//! the operator's for evidence and sweeps), its namespace and workspace shape, the API handles
//! its operations share, and the same backend acting as an identity Kandev's Role omits.

use super::cluster::{ClientBounds, client_of};
use super::deletes::DeletePolicy;
use super::errors::other;
use crate::backend::connection::AuthMode;
use crate::backend::{Backend, Result};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::Client;
use kube::api::{Api, PostParams};
use std::sync::Arc;
use std::time::Duration;

/// How often a silent exec or port-forward pings the API server by default: a third of the
/// commonest load-balancer idle cut (60 s).
pub const KEEPALIVE: Duration = Duration::from_secs(20);

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

/// The composed Pod on a real API server (see the module docs of [`super`]).
pub struct KubeBackend {
    /// The executor identity: every call a session makes.
    pub(super) client: Client,
    /// The operator's identity: evidence (logs, events) and label sweeps (`list`), which
    /// Kandev's Role does not grant and a session never needs.
    pub(super) admin: Client,
    pub(super) namespace: String,
    pub(super) kind: &'static str,
    pub(super) main_container: String,
    pub(super) workspace: ManagedPvc,
    /// How long a delete waits until the object is gone.
    pub delete_timeout: Duration,
    /// Grace period of Pod deletes (Kandev's probes use 0; the companion gets a moment).
    pub delete_grace_seconds: i64,
    /// How long a delete waits on finalizers alone ([`DeletePolicy::finalizer_patience`]).
    pub delete_finalizer_patience: Duration,
    /// The operator's client configuration, for clients acting as other identities.
    pub(super) config: Option<kube::Config>,
    /// Who the run set the sessions up to run as, when it did (the connection test compares
    /// it with who the API server says they are); None in the cluster (the Pod's own).
    pub(super) executor: Option<String>,
    /// How the sessions' client authenticates (the connection test's `auth_mode`).
    pub(super) auth_mode: AuthMode,
    /// The architecture the run's Pods are pinned to (`platform::resolve`); None: this
    /// machine's (a backend made outside a run's preparation).
    pub(super) arch: Option<crate::pod::compose::Arch>,
    /// How often a silent exec or port-forward pings the API server (default [`KEEPALIVE`]).
    pub keepalive: Duration,
    /// The image pull secrets every Pod this backend creates carries besides its own
    /// (`--image-pull-secret`, copied into the namespace: [`super::pull_secrets`]).
    pub(super) pull_secrets: Vec<super::pull_secrets::Planned>,
}

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
            delete_finalizer_patience: super::deletes::FINALIZER_PATIENCE,
            config: None,
            executor: None,
            auth_mode: AuthMode::Kubeconfig,
            arch: None,
            keepalive: KEEPALIVE,
            pull_secrets: Vec::new(),
        }
    }

    /// Every Pod this backend creates (task and helper) carries `planned` in its
    /// `imagePullSecrets` besides its own: the run's copies of `--image-pull-secret`.
    pub fn with_pull_secrets(mut self, planned: Vec<super::pull_secrets::Planned>) -> Self {
        self.pull_secrets = planned;
        self
    }

    /// Pins the sessions' Pods to `arch` (the cluster's, see `platform`).
    pub fn with_platform(mut self, arch: crate::pod::compose::Arch) -> Self {
        self.arch = Some(arch);
        self
    }

    /// Who the sessions run as (`executor`: None when the run did not set the identity up)
    /// and how their client authenticates, for the connection test.
    pub fn with_executor(mut self, executor: Option<String>, auth_mode: AuthMode) -> Self {
        self.executor = executor;
        self.auth_mode = auth_mode;
        self
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

    pub(super) fn delete_policy(&self) -> DeletePolicy {
        DeletePolicy {
            timeout: self.delete_timeout,
            grace_seconds: self.delete_grace_seconds,
            finalizer_patience: self.delete_finalizer_patience,
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub(super) fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub(super) fn pvcs(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub(super) fn admin_pods(&self) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), &self.namespace)
    }

    pub(super) fn post_params() -> PostParams {
        PostParams {
            dry_run: false,
            field_manager: Some(FIELD_MANAGER.into()),
        }
    }
}

/// [`Backend::restricted_identity`]: this backend acting as the namespace's `default`
/// service account.
pub(super) async fn restricted_identity(
    backend: &KubeBackend,
) -> Result<Option<(String, Arc<dyn Backend>)>> {
    // The namespace's `default` service account: every namespace has one, and Kandev's
    // Role is bound to the executor's account only, so it may not create Pods. A
    // TokenRequest creates nothing that would need removing.
    let Some(config) = backend.config.clone() else {
        return Ok(None);
    };
    let account = "default";
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(backend.admin.clone(), &backend.namespace);
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
    let client = client_of(restricted, ClientBounds::default())
        .map_err(|e| other("the restricted identity's client", e))?;
    let acting = KubeBackend {
        client,
        admin: backend.admin.clone(),
        namespace: backend.namespace.clone(),
        kind: backend.kind,
        main_container: backend.main_container.clone(),
        workspace: backend.workspace.clone(),
        delete_timeout: backend.delete_timeout,
        delete_grace_seconds: backend.delete_grace_seconds,
        delete_finalizer_patience: backend.delete_finalizer_patience,
        config: None,
        executor: None,
        auth_mode: backend.auth_mode,
        arch: backend.arch,
        keepalive: backend.keepalive,
        pull_secrets: backend.pull_secrets.clone(),
    };
    Ok(Some((
        format!(
            "system:serviceaccount:{}:{account} (no Role of the run binds it)",
            backend.namespace
        ),
        Arc::new(acting),
    )))
}
