//! The run's cluster: the operator's and the executor's clients and what the run created
//! there; set up (the namespace, the run's Lease, the executor's service account, Role,
//! binding and token) and torn down, newest first (the Lease last: `gc` spares the run until
//! everything else is gone).

use super::connect::{ClientBounds, Reached, RefreshedToken, client_with_token, open};
use super::executor::{EXECUTOR, executor_role, executor_role_file, who_am_i};
use super::lease::{Holder, RunLease};
use super::operator::operator_preflight;
use crate::backend::kube::deletes::delete_recorded;
use crate::backend::kube::errors::{ClusterError, namespace_create, setup};
use crate::backend::kube::kind::{KindCluster, KindOptions};
use crate::backend::kube::pull_secrets::Wanted;
use crate::pod::identity::{LABEL_MANAGED, LABEL_RUN};
use crate::pod::template::WorkspaceMode;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding, RoleRef, Subject};
use kandev_report::CleanupRecord;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams, Preconditions};
use kube::{Client, Config};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long the preflight waits for a fresh namespace to settle ([`Cluster::settle`]).
pub const SETTLE: Duration = Duration::from_secs(10);

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
    /// Who the sessions run as (`system:serviceaccount:<namespace>:<name>`).
    pub executor: String,
    /// Whether the run creates the executor's account, Role and binding (not in-cluster:
    /// there the Pod's own account is the executor, and whoever launched it removes it).
    pub created_executor: bool,
    /// What the run made of the executor's, by the UID each create returned: teardown
    /// removes these and nothing else of their names (in a `--namespace` another run may
    /// hold objects of the same names).
    pub executor_objects: Vec<Made>,
    /// The run's Lease (`gc` spares the run while it is renewed), released at teardown.
    pub lease: std::sync::Mutex<Option<RunLease>>,
    /// What the operator's identity was asked before set-up ([`super::operator_preflight`]).
    pub operator_access: serde_json::Value,
    /// The image pull secrets the run copied into an existing namespace (`--namespace`),
    /// removed at teardown; a namespace the run created takes its copies with it.
    pub pull_secret_copies: Vec<crate::backend::kube::pull_secrets::Copy>,
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

impl Cluster {
    /// Brings the Kind cluster up, reaches its API server, then prepares the namespace, the
    /// executor Role (Kandev's, or `role_file`'s rules), its service account and binding, and
    /// the executor's client.
    pub async fn connect_kind(
        options: &KindOptions,
        namespace: Option<&str>,
        mode: WorkspaceMode,
        role_file: Option<&Path>,
        run_id: &str,
        pull_secrets: &[Wanted],
    ) -> Result<Self, ClusterError> {
        let kind = KindCluster::up(options.clone())?;
        let context = format!("kind-{}", options.name);
        let reached = open(Some(&options.kubeconfig), Some(&context)).await?;
        Self::set_up_with_role(
            reached,
            Some(kind),
            namespace,
            mode,
            role_file,
            false,
            run_id,
            pull_secrets,
        )
        .await
    }

    /// With the API server reached: the namespace and the executor, bound to Kandev's Role.
    pub async fn set_up(
        reached: Reached,
        kind: Option<KindCluster>,
        namespace: Option<&str>,
        mode: WorkspaceMode,
        run_id: &str,
    ) -> Result<Self, ClusterError> {
        Self::set_up_with_role(reached, kind, namespace, mode, None, false, run_id, &[]).await
    }

    /// [`Cluster::set_up`], the executor bound to `role_file`'s rules when given
    /// (`--executor-role`), else to Kandev's ([`executor_role`]). Before anything is created,
    /// the operator's identity is asked for all the run will do with it
    /// ([`super::operator_preflight`]; `node_inspector`: it also runs the inspector's Pods;
    /// `pull_secrets`: it also reads and copies them).
    #[allow(clippy::too_many_arguments)]
    pub async fn set_up_with_role(
        reached: Reached,
        kind: Option<KindCluster>,
        namespace: Option<&str>,
        mode: WorkspaceMode,
        role_file: Option<&Path>,
        node_inspector: bool,
        run_id: &str,
        pull_secrets: &[Wanted],
    ) -> Result<Self, ClusterError> {
        let Reached {
            admin,
            config,
            context,
            server,
            server_version,
        } = reached;
        let labels = run_labels(run_id);
        // Read before anything is created (the provider's check read it too, but the file is
        // the operator's and may have changed since); its namespace is set below.
        let mut role = match role_file {
            Some(path) => executor_role_file(path, "", &labels)?,
            None => executor_role("", mode, &labels),
        };

        let target = namespace.map_or_else(|| run_namespace(run_id), str::to_owned);
        let planned = crate::backend::kube::pull_secrets::plan(
            pull_secrets,
            &config.default_namespace,
            &target,
            namespace.is_some(),
            run_id,
        );
        let operator_access = operator_preflight(
            &admin,
            &target,
            namespace.is_some(),
            node_inspector,
            &role,
            &planned,
        )
        .await?;

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
                let name = target;
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
                    .map_err(namespace_create(name.clone()))?;
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
            executor: format!("system:serviceaccount:{namespace}:{EXECUTOR}"),
            created_executor: true,
            executor_objects: Vec::new(),
            lease: Default::default(),
            operator_access,
            pull_secret_copies: Vec::new(),
        };
        // From here on the run owns objects: a failure tears them down before returning.
        // The Lease first: `gc` lists a run's objects before its Leases, so any object it
        // sees was made while the Lease already existed.
        match RunLease::take(&admin, &namespace, run_id, Holder::Run).await {
            Ok(lease) => cluster.hold(lease),
            Err(e) => {
                cluster.teardown().await;
                return Err(e);
            }
        }
        role.metadata.namespace = Some(namespace.clone());
        match cluster.set_up_executor(&config, role, &labels).await {
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

    /// Inside the cluster (`--in-cluster`): the session client is the Pod's own service
    /// account, which someone else (`launch`, or the operator's own Job) bound to Kandev's
    /// executor Role; the run creates no namespace and no identity, so its teardown removes
    /// only what its sessions created (they clean up after themselves). The namespace is
    /// `--namespace`, else the one the service account's mounted namespace file names; it is
    /// not read here (no Role grants a namespace's `get`): the preflight's dry run names a
    /// missing one.
    pub async fn in_cluster(
        reached: Reached,
        session: Client,
        namespace: Option<&str>,
        run_id: &str,
    ) -> Result<Self, ClusterError> {
        let Reached {
            admin,
            config,
            context,
            server,
            server_version,
        } = reached;
        let namespace = match namespace {
            Some(name) => name.to_owned(),
            None => kube::Config::incluster()
                .map(|c| c.default_namespace)
                .map_err(|e| ClusterError::NotInCluster {
                    cause: crate::error_chain(&e),
                })?,
        };
        let executor = who_am_i(&session)
            .await
            .unwrap_or_else(|| "the Pod's service account (SelfSubjectReview not served)".into());
        // With `launch`'s bookkeeper the run holds its Lease; the executor alone cannot (Kandev's
        // Role grants nothing on Leases, and needs nothing new for this): then only the
        // launch's own Lease tells `gc` the run is alive, and only while `launch` follows it.
        let lease = match RunLease::take(&admin, &namespace, run_id, Holder::Run).await {
            Ok(lease) => Some(lease),
            Err(e) => {
                eprintln!(
                    "warning: the run holds no lease, so `gc --all` cannot tell it is alive: {}",
                    crate::error_chain(&e)
                );
                None
            }
        };
        Ok(Self {
            admin,
            session,
            namespace,
            created_namespace: false,
            context,
            server,
            server_version,
            kind: None,
            run_id: run_id.to_owned(),
            access: BTreeMap::new(),
            config: Some(config),
            settle: SETTLE,
            executor,
            created_executor: false,
            executor_objects: Vec::new(),
            lease: std::sync::Mutex::new(lease),
            operator_access: serde_json::json!({"checked": false, "why": "in the cluster, the bookkeeper's Role is what launch granted it"}),
            pull_secret_copies: Vec::new(),
        })
    }

    fn hold(&self, lease: RunLease) {
        if let Ok(mut held) = self.lease.lock() {
            *held = Some(lease);
        }
    }

    /// Deletes the run's Lease (once; absent is fine): the run removed what it created.
    /// None when it held none.
    pub async fn release_lease(&self) -> Option<CleanupRecord> {
        let lease = self.lease.lock().ok()?.take()?;
        let started = Instant::now();
        let object = format!("lease/{}", lease.name);
        let result = lease.release().await;
        Some(CleanupRecord::timed(object, started, result))
    }

    /// Gives the run's Lease up (once) and leaves it for `gc`: what the run kept (`--keep`,
    /// an abort) is then `gc`'s to collect at once. A record only when that failed (the
    /// Lease stays, and `gc` spares the run until it runs out).
    pub async fn give_up_lease(&self) -> Option<CleanupRecord> {
        let lease = self.lease.lock().ok()?.take()?;
        let started = Instant::now();
        let object = format!("lease/{} (giving it up)", lease.name);
        let result = lease.give_up().await;
        result
            .is_err()
            .then(|| CleanupRecord::timed(object, started, result))
    }

    fn made(&mut self, kind: MadeKind, uid: Option<String>) {
        if let Some(uid) = uid {
            self.executor_objects.push(Made { kind, uid });
        }
    }

    /// The executor's account exists already: whose it is, and the fix. Two runs cannot
    /// share one `--namespace` at once (the executor's objects have one name there).
    async fn executor_taken(&self, accounts: &Api<ServiceAccount>) -> ClusterError {
        let ns = &self.namespace;
        let gc = |run: &str| {
            format!(
                "`{} gc --namespace {ns} --run {run}` (with this run's --backend, --kubeconfig and --context)",
                crate::paths::command()
            )
        };
        let whose = match accounts.get_opt(EXECUTOR).await {
            Ok(Some(account)) => match account
                .metadata
                .labels
                .and_then(|l| l.get(LABEL_RUN).cloned())
            {
                Some(run) => format!(
                    "run {run}'s. Wait for that run to end; if it was killed, {} removes what it left once its Lease has run out",
                    gc(&run)
                ),
                None => format!(
                    "not a run's (no {LABEL_RUN} label): someone else's account of that name"
                ),
            },
            // Gone since, or unreadable: its owner is not known, so nothing is offered to remove.
            Ok(None) => "gone again since (a run that just ended): rerun".to_owned(),
            Err(e) => format!("whose could not be read ({})", crate::error_chain(&e)),
        };
        ClusterError::Setup {
            what: format!("create service account {EXECUTOR}"),
            source: anyhow::anyhow!(
                "namespace {ns} already holds the executor's service account {EXECUTOR}: two runs cannot share one --namespace at once, and this run created nothing of the executor's and removes nothing of it\n  fix: give this run a --namespace of its own; the account is {whose}"
            ),
        }
    }

    /// Records the object of `name` a create that ended in `error` may have made all the same
    /// (a connection lost after it was served): read back, it is the run's when it carries
    /// the run's label. Teardown then removes it by its UID.
    async fn made_despite<K>(&mut self, kind: MadeKind, api: &Api<K>, error: &kube::Error)
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        if matches!(error, kube::Error::Api(_)) {
            return;
        }
        if let Ok(Some(object)) = api.get_opt(EXECUTOR).await
            && object
                .meta()
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_RUN))
                .is_some_and(|run| *run == self.run_id)
        {
            self.made(kind, object.meta().uid.clone());
        }
    }

    async fn set_up_executor(
        &mut self,
        config: &Config,
        role: Role,
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
        let account = match accounts
            .create(
                &pp,
                &ServiceAccount {
                    metadata: meta(),
                    automount_service_account_token: Some(false),
                    ..Default::default()
                },
            )
            .await
        {
            Ok(account) => account,
            // Not after a lost connection of ours (the client takes that 409 when the
            // object carries this run's labels): another's, most likely another run's in
            // this `--namespace`.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                return Err(self.executor_taken(&accounts).await);
            }
            Err(e) => {
                self.made_despite(MadeKind::ServiceAccount, &accounts, &e)
                    .await;
                return Err(setup(format!("create service account {EXECUTOR}"))(e));
            }
        };
        self.made(MadeKind::ServiceAccount, account.metadata.uid);
        let roles = Api::<Role>::namespaced(self.admin.clone(), &ns);
        match roles.create(&pp, &role).await {
            Ok(role) => self.made(MadeKind::Role, role.metadata.uid),
            Err(e) => {
                self.made_despite(MadeKind::Role, &roles, &e).await;
                return Err(setup(format!("create role {EXECUTOR}"))(e));
            }
        }
        let bindings = Api::<RoleBinding>::namespaced(self.admin.clone(), &ns);
        let binding = bindings
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
            .await;
        match binding {
            Ok(binding) => self.made(MadeKind::RoleBinding, binding.metadata.uid),
            Err(e) => {
                self.made_despite(MadeKind::RoleBinding, &bindings, &e)
                    .await;
                return Err(setup(format!("create role binding {EXECUTOR}"))(e));
            }
        }
        // The executor's token, renewed before the expiry the API server grants (which may
        // be far below the 4 h asked: `--service-account-max-token-expiration`), so a long
        // run never meets a 401.
        let (token, lifetime) = executor_token(accounts.clone()).await?;
        let renewing = RefreshedToken::start(token, lifetime, move || {
            let accounts = accounts.clone();
            async move {
                match executor_token(accounts).await {
                    Ok(renewed) => Ok(Some(renewed)),
                    // The account is gone (the run tore it down): nothing left to renew.
                    Err(ClusterError::Setup { source, .. })
                        if source
                            .downcast_ref::<kube::Error>()
                            .is_some_and(|e| matches!(e, kube::Error::Api(s) if s.code == 404)) =>
                    {
                        Ok(None)
                    }
                    Err(e) => Err(crate::error_chain(&e)),
                }
            }
        });
        // The executor's client: same server and CA, the service account's token only.
        client_with_token(config.clone(), ClientBounds::default(), renewing).map_err(|e| {
            ClusterError::Setup {
                what: "the executor's client".into(),
                source: e.into(),
            }
        })
    }

    /// Removes what the run created, newest first: the namespace it created (which takes
    /// everything inside), otherwise its Role, binding and service account; then its Lease
    /// (until everything else is gone `gc` must see the run as alive); then the Kind cluster
    /// it created unless kept (the Lease lives in it).
    pub async fn teardown(&self) -> Vec<CleanupRecord> {
        let mut records = Vec::new();
        let (admin, ns) = (&self.admin, self.namespace.as_str());
        if self.created_namespace {
            let started = Instant::now();
            let result = delete_if_present(Api::<Namespace>::all(admin.clone()), ns).await;
            records.push(CleanupRecord::timed(
                format!("namespace/{ns}"),
                started,
                result,
            ));
        } else {
            records.extend(
                crate::backend::kube::pull_secrets::remove(admin, ns, &self.pull_secret_copies)
                    .await,
            );
        }
        if !self.created_namespace {
            // Newest first: the binding, the Role, the account; by the UID each create
            // returned, never another's of the same name.
            for made in self.executor_objects.iter().rev() {
                let started = Instant::now();
                let result = match made.kind {
                    MadeKind::RoleBinding => {
                        delete_recorded(
                            &Api::<RoleBinding>::namespaced(admin.clone(), ns),
                            EXECUTOR,
                            Some(made.uid.clone()),
                        )
                        .await
                    }
                    MadeKind::Role => {
                        delete_recorded(
                            &Api::<Role>::namespaced(admin.clone(), ns),
                            EXECUTOR,
                            Some(made.uid.clone()),
                        )
                        .await
                    }
                    MadeKind::ServiceAccount => {
                        delete_recorded(
                            &Api::<ServiceAccount>::namespaced(admin.clone(), ns),
                            EXECUTOR,
                            Some(made.uid.clone()),
                        )
                        .await
                    }
                };
                records.push(CleanupRecord::timed(
                    format!("{}/{EXECUTOR}", made.kind.name()),
                    started,
                    result.map(|_gone| ()),
                ));
            }
        }
        records.extend(self.release_lease().await);
        if let Some(kind) = &self.kind
            && kind.created
            && !kind.options.keep
        {
            let started = Instant::now();
            let result = kind.delete().map_err(|e| e.to_string());
            records.push(CleanupRecord::timed(
                format!("kind-cluster/{}", kind.options.name),
                started,
                result,
            ));
        }
        records
    }
}

/// How long the executor's token is asked to last (a cluster may grant less: the answer's
/// `expirationTimestamp` is what counts).
const EXECUTOR_TOKEN_ASKED: Duration = Duration::from_secs(4 * 3600);

/// A TokenRequest for the executor's service account: the token and how long the API server
/// says it lasts (from its `expirationTimestamp`; what was asked when it says nothing).
async fn executor_token(accounts: Api<ServiceAccount>) -> Result<(String, Duration), ClusterError> {
    let answer = accounts
        .create_token_request(
            EXECUTOR,
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec {
                    audiences: Some(Vec::new()),
                    expiration_seconds: Some(EXECUTOR_TOKEN_ASKED.as_secs() as i64),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .map_err(setup(format!("request a token for {EXECUTOR}")))?;
    let status = answer.status.unwrap_or_default();
    let Some(token) = status.token.filter(|t| !t.is_empty()) else {
        return Err(ClusterError::Setup {
            what: format!("request a token for {EXECUTOR}"),
            source: anyhow::anyhow!("the TokenRequest's answer holds no token"),
        });
    };
    let lifetime = status
        .expiration_timestamp
        .as_ref()
        .and_then(|expires| granted_lifetime(expires, k8s_openapi::jiff::Timestamp::now()))
        .unwrap_or(EXECUTOR_TOKEN_ASKED);
    Ok((token, lifetime))
}

/// How long a token expiring at `expires` lasts from `now` (None when it has no expiry or
/// has expired already).
fn granted_lifetime(
    expires: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    now: k8s_openapi::jiff::Timestamp,
) -> Option<Duration> {
    let left = expires.0.duration_since(now);
    (left.is_positive() && expires.0 > k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
        .then(|| Duration::try_from(left).ok())
        .flatten()
}

/// One of the executor's objects the run made: its kind and the UID its create returned
/// (its name is [`EXECUTOR`]).
#[derive(Debug, Clone)]
pub struct Made {
    pub kind: MadeKind,
    pub uid: String,
}

/// The kinds of the executor's objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MadeKind {
    ServiceAccount,
    Role,
    RoleBinding,
}

impl MadeKind {
    /// As `kubectl` names it.
    pub fn name(self) -> &'static str {
        match self {
            Self::ServiceAccount => "serviceaccount",
            Self::Role => "role",
            Self::RoleBinding => "rolebinding",
        }
    }
}

/// Deletes `name` by its UID (read first: a precondition makes the delete safe to repeat
/// after a lost connection, and never removes a same-name object made since); absent is
/// success (the error text otherwise).
async fn delete_if_present<K>(api: Api<K>, name: &str) -> Result<(), String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let uid = match api.get_opt(name).await {
        Ok(Some(object)) => object.meta().uid.clone(),
        Ok(None) => return Ok(()),
        Err(e) => return Err(crate::error_chain(&e)),
    };
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(crate::error_chain(&e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tokens_lifetime_is_what_the_api_server_granted() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        use k8s_openapi::jiff::{SignedDuration, Timestamp};
        let now = Timestamp::now();
        let at = |secs: i64| {
            Time(
                now.checked_add(SignedDuration::from_secs(secs))
                    .unwrap_or(now),
            )
        };
        assert_eq!(
            granted_lifetime(&at(3600), now),
            Some(Duration::from_secs(3600))
        );
        assert_eq!(granted_lifetime(&at(-5), now), None, "expired already");
        assert_eq!(granted_lifetime(&Time(Timestamp::UNIX_EPOCH), now), None);
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
