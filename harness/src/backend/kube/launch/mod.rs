//! `launch`: the harness run from inside the cluster, as Sonobuoy runs conformance. With the
//! operator's identity it creates the namespace (or uses `--namespace`), the executor's and
//! the bookkeeper's service accounts, Roles and bindings, a Secret with the run's inputs and
//! the bookkeeper's token, and a Job running the harness image with `run --in-cluster`; it
//! follows the Job's Pod's log, copies the report folder out of the finished run (which holds
//! until then), removes everything it created — also after Ctrl-C — and exits with the run's
//! own code.
//!
//! Here: `objects` (what is created, as plain objects), `follow` (the Pod's start, its log,
//! the holding line), `retrieve` (the report folder out of the Pod), and this file (create,
//! drive, remove).

mod follow;
mod objects;
mod retrieve;

pub use follow::Interrupts;
pub use objects::{
    GRANT_NAMESPACE, INPUTS, LaunchPlan, TEARDOWN_MARGIN, harness_image_arch, run_deadline,
};

use objects::{BOOKKEEPER, TOKEN_KEY};

use super::cluster::{EXECUTOR, Holder, RunLease};
use super::errors::ClusterError;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kandev_report::exit;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams, PropagationPolicy};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The line the run inside the Pod logs once its report is published and held (followed by
/// the run id, `exit N`, `report.json sha256 H`): `launch`'s cue to retrieve it.
pub const HOLDING: &str = "kandev-acceptance: holding run";

/// The file holding a held run's exit code, beside its report folder.
pub fn exit_file(report_dir: &Path, run_id: &str) -> PathBuf {
    report_dir.join(format!("{run_id}.exit"))
}

/// The file whose appearance ends a run's hold (`launch` has the folder), beside it.
pub fn retrieved_file(report_dir: &Path, run_id: &str) -> PathBuf {
    report_dir.join(format!("{run_id}.retrieved"))
}

/// Why a launch ended without the run's own exit code; each names the cause and the fix.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// An image pull secret that is missing, of another type, or not copied.
    #[error(transparent)]
    PullSecret(#[from] super::pull_secrets::Refused),
    #[error("{what}: {message}\n  fix: {fix}")]
    Create {
        what: String,
        /// The API server's HTTP status.
        code: u16,
        message: String,
        fix: String,
    },
    #[error("the harness image {image} cannot start: {reason}\n  fix: {fix}")]
    ImageCannotStart {
        image: String,
        reason: String,
        fix: String,
    },
    #[error(
        "the Job's Pod did not start within {waited:?}: {state}\n  fix: raise --start-timeout for a slow image pull, or see `kubectl -n {namespace} describe job,pod` (quota, admission, scheduling)"
    )]
    StartTimedOut {
        waited: Duration,
        state: String,
        namespace: String,
    },
    #[error(
        "the run did not finish within the Job's deadline ({timeout:?}: --job-timeout and --hold): {state}\n  fix: raise --job-timeout, or select fewer scenarios"
    )]
    JobTimedOut { timeout: Duration, state: String },
    #[error(
        "the harness in the Pod ended without a report to retrieve ({ended}); its last lines:\n{tail}\n  fix: what its last lines name; the same run from outside the cluster (`run --backend kube --context ...`) shows it on this terminal"
    )]
    HarnessEnded {
        ended: String,
        code: Option<i32>,
        tail: String,
    },
    #[error(
        "the Pod's log cannot be read: {0}\n  fix: your identity needs get on pods/log in the namespace (launch follows the run through it)"
    )]
    LogUnreadable(String),
    #[error(
        "retrieve the report folder from the Pod: {0}\n  fix: your identity needs create on pods/exec in the namespace; the folder stays in the Pod until --hold ends"
    )]
    Retrieve(String),
    #[error("interrupted before the run in the Pod started: what the launch created is removed")]
    Interrupted,
    #[error(
        "interrupted, and the run in the Pod did not stop and hold its report within {waited:?}: what the launch created is removed without it\n  fix: none needed; the Pod's log above shows where the run was"
    )]
    StopTimedOut { waited: Duration },
}

impl LaunchError {
    /// The exit code: bad input 2 (a Role the API server refuses as invalid, or what the
    /// harness in the Pod refused as such), nothing selected 5 (the Pod's run said so), the
    /// cluster, the image or a bound 3, interrupted 130.
    pub fn code(&self) -> u8 {
        match self {
            Self::Interrupted | Self::StopTimedOut { .. } => exit::INTERRUPTED,
            Self::Create { code: 422, .. } => exit::USAGE,
            Self::HarnessEnded { code: Some(c), .. }
                if [i32::from(exit::USAGE), i32::from(exit::NOTHING_SELECTED)].contains(c) =>
            {
                *c as u8
            }
            _ => exit::ENVIRONMENT,
        }
    }

    /// A failed create, named with the fix its HTTP status points to (`gc_where`: the
    /// launch's `gc` command without `--run`/`--all`).
    fn create(what: String, gc_where: &str) -> impl FnOnce(kube::Error) -> Self {
        let gc_where = gc_where.to_owned();
        move |e| {
            let (code, message) = match &e {
                kube::Error::Api(status) => (status.code, status.message.clone()),
                other => (0, crate::error_chain(other)),
            };
            let fix = match code {
                // The executor's and bookkeeper's objects have fixed names: another launch
                // in the namespace holds them, or a killed one left them (`gc --all` removes
                // only what no live run holds).
                409 => format!(
                    "another launch in this namespace holds it, or a killed one left it: wait for the other to end, or remove what killed runs left: {gc_where} --all"
                ),
                403 => "your identity must create namespaces (or name one with --namespace), Leases (coordination.k8s.io), service accounts and their tokens, Roles and RoleBindings (holding every rule they grant), Secrets and Jobs there, and with --node-inspector a ClusterRole and ClusterRoleBinding to read nodes (holding get and list on nodes yourself) (docs/operators.md: RBAC, `launch`: your identity and the bookkeeper)".into(),
                422 => "the API server refuses the object as invalid: correct what it names (for the executor's Role: --executor-role)".into(),
                _ => "check that the cluster answers (`kubectl --context C get ns`)".into(),
            };
            Self::Create {
                what,
                code,
                message,
                fix,
            }
        }
    }
}

/// One object the launch created, removed newest first.
#[derive(Debug, Clone)]
enum Created {
    Namespace(String),
    ServiceAccount(String),
    Role(String),
    RoleBinding(String),
    /// Cluster-scoped (`--node-inspector`'s node reads): removed even when the namespace is.
    ClusterRole(String),
    ClusterRoleBinding(String),
    Secret(String),
    /// An image pull secret's copy, removed by its UID ([`super::pull_secrets::remove`]).
    PullSecretCopy(super::pull_secrets::Copy),
    Job(String),
}

/// What `launch` ends with: the run's exit code (or the launch's own), and what it removed.
pub struct Ended {
    pub code: u8,
    /// `kind/name: removed` or `kind/name: <error>`, newest first.
    pub cleanup: Vec<(String, Result<(), String>)>,
}

/// Creates the launch's objects, drives the run to its end, retrieves the report folder
/// into `report_dir/<run id>/`, and removes what it created.
pub async fn launch(
    admin: Client,
    plan: &LaunchPlan,
    report_dir: &Path,
    interrupts: &Interrupts,
) -> Result<Ended, (LaunchError, Ended)> {
    let mut created = Vec::new();
    let mut lease = None;
    let result = async {
        create(&admin, plan, &mut created, &mut lease).await?;
        if interrupts.count() > 0 {
            // Interrupted before the run began: there is nothing to wait for.
            return Err(LaunchError::Interrupted);
        }
        let held = follow::follow(&admin, plan, interrupts).await?;
        let code = retrieve::retrieve(&admin, plan, &held, report_dir).await?;
        // Interrupted meanwhile: the run's own code says so (it stopped on SIGTERM).
        Ok(code)
    }
    .await;
    let mut cleanup = remove(&admin, plan, &created).await;
    // Last: until what the launch created is gone, `gc` must see the launch as alive.
    if let Some(lease) = lease {
        cleanup.push((format!("lease/{}", lease.name), lease.release().await));
    }
    match result {
        Ok(code) => Ok(Ended { code, cleanup }),
        Err(e) => {
            let code = e.code();
            Err((e, Ended { code, cleanup }))
        }
    }
}

async fn create(
    admin: &Client,
    plan: &LaunchPlan,
    created: &mut Vec<Created>,
    lease: &mut Option<RunLease>,
) -> Result<(), LaunchError> {
    let ns = plan.namespace();
    let pp = PostParams::default();
    let failed = |what: String| LaunchError::create(what, &plan.gc_where);
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    match &plan.namespace {
        Some(name) => {
            if namespaces
                .get_opt(name)
                .await
                .map_err(failed(format!("get namespace {name}")))?
                .is_none()
            {
                return Err(ClusterError::NamespaceMissing {
                    namespace: name.clone(),
                }
                .into());
            }
        }
        None => {
            namespaces
                .create(&pp, &plan.namespace_object())
                .await
                .map_err(failed(format!("create namespace {ns}")))?;
            created.push(Created::Namespace(ns.clone()));
        }
    }
    // The launch's Lease before anything else in the namespace: `gc` spares the run from
    // here on, also while its Pod is not running yet (the run's own Lease comes later).
    *lease = Some(RunLease::take(admin, &ns, &plan.run_id, Holder::Launch).await?);
    // The pull secrets before any Pod: the Job's Pod and the run's carry them. A bare NAME
    // is read from the kubeconfig context's namespace (the client's default).
    let planned = plan.planned_pull_secrets(admin.default_namespace());
    if !planned.is_empty() {
        let copied = super::pull_secrets::copy(admin, &ns, &plan.labels(), &planned).await;
        let (copies, refused) = match copied {
            Ok(made) => (made.copies, None),
            Err((refused, copies)) => (copies, Some(refused)),
        };
        created.extend(copies.into_iter().map(Created::PullSecretCopy));
        if let Some(refused) = refused {
            return Err(refused.into());
        }
    }
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), &ns);
    let roles: Api<Role> = Api::namespaced(admin.clone(), &ns);
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), &ns);
    for (name, role) in [
        (EXECUTOR, plan.executor_role()),
        (BOOKKEEPER, plan.bookkeeper_role()),
    ] {
        accounts
            .create(&pp, &plan.service_account(name))
            .await
            .map_err(failed(format!("create service account {name}")))?;
        created.push(Created::ServiceAccount(name.into()));
        roles
            .create(&pp, &role)
            .await
            .map_err(failed(format!("create role {name}")))?;
        created.push(Created::Role(name.into()));
        bindings
            .create(&pp, &plan.binding(name))
            .await
            .map_err(failed(format!("create role binding {name}")))?;
        created.push(Created::RoleBinding(name.into()));
    }
    if plan.node_inspector {
        let name = plan.nodes_grant_name();
        Api::<ClusterRole>::all(admin.clone())
            .create(&pp, &plan.nodes_cluster_role())
            .await
            .map_err(failed(format!("create cluster role {name}")))?;
        created.push(Created::ClusterRole(name.clone()));
        Api::<ClusterRoleBinding>::all(admin.clone())
            .create(&pp, &plan.nodes_cluster_binding())
            .await
            .map_err(failed(format!("create cluster role binding {name}")))?;
        created.push(Created::ClusterRoleBinding(name));
    }
    // The Secret first: the bookkeeper's token is bound to it, so that it stops
    // authenticating once the Secret is deleted (not only when it expires).
    let job = plan.job_name();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    let mut secret = secrets
        .create(&pp, &plan.inputs_secret())
        .await
        .map_err(failed(format!("create secret {job}")))?;
    created.push(Created::Secret(job.clone()));
    let status = accounts
        .create_token_request(
            BOOKKEEPER,
            &pp,
            &TokenRequest {
                spec: Some(TokenRequestSpec {
                    audiences: Some(Vec::new()),
                    expiration_seconds: Some(plan.token_seconds()),
                    bound_object_ref: Some(BoundObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Secret".into()),
                        name: Some(job.clone()),
                        uid: secret.metadata.uid.clone(),
                    }),
                }),
                ..Default::default()
            },
        )
        .await
        .map_err(failed(format!("request a token for {BOOKKEEPER}")))?
        .status
        .unwrap_or_default();
    // A cluster may cap a token's lifetime below what was asked: the run would then meet
    // 401s once it ends, so say so now.
    if let Some(expires) = &status.expiration_timestamp {
        let lasts = expires.0.as_second() - now_seconds();
        if lasts + 60 < plan.token_seconds() {
            eprintln!(
                "launch: warning: the cluster gave the bookkeeper's token {lasts} s, not the {} s asked for: a run longer than that loses its evidence and sweeps (lower --job-timeout)",
                plan.token_seconds()
            );
        }
    }
    let token = status
        .token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| ClusterError::Setup {
            what: format!("request a token for {BOOKKEEPER}"),
            source: anyhow::anyhow!("the API server answered without a token"),
        })?;
    // Replaced at the resourceVersion just created: a concurrent change is refused (409).
    secret.data.get_or_insert_default().insert(
        TOKEN_KEY.into(),
        k8s_openapi::ByteString(token.into_bytes()),
    );
    secrets
        .replace(&job, &pp, &secret)
        .await
        .map_err(failed(format!(
            "put the bookkeeper's token into secret {job}"
        )))?;
    Api::<Job>::namespaced(admin.clone(), &ns)
        .create(&pp, &plan.job(admin.default_namespace()))
        .await
        .map_err(failed(format!("create job {job}")))?;
    created.push(Created::Job(job));
    Ok(())
}

/// Removes what the launch created, newest first. A namespace it created takes everything
/// inside with it; the Job takes its Pod (background propagation, as kubectl deletes).
async fn remove(
    admin: &Client,
    plan: &LaunchPlan,
    created: &[Created],
) -> Vec<(String, Result<(), String>)> {
    let ns = plan.namespace();
    let background = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..Default::default()
    };
    let namespace_created = created.iter().any(|c| matches!(c, Created::Namespace(_)));
    let mut records = Vec::new();
    for object in created.iter().rev() {
        // Inside a namespace the launch created, deleting the namespace is enough.
        let cluster_scoped = matches!(
            object,
            Created::Namespace(_) | Created::ClusterRole(_) | Created::ClusterRoleBinding(_)
        );
        if namespace_created && !cluster_scoped {
            continue;
        }
        let (shown, result) = match object {
            Created::Namespace(name) => (
                format!("namespace/{name}"),
                gone(
                    Api::<Namespace>::all(admin.clone())
                        .delete(name, &background)
                        .await,
                ),
            ),
            Created::ServiceAccount(name) => (
                format!("serviceaccount/{name}"),
                gone(
                    Api::<ServiceAccount>::namespaced(admin.clone(), &ns)
                        .delete(name, &background)
                        .await,
                ),
            ),
            Created::Role(name) => (
                format!("role/{name}"),
                gone(
                    Api::<Role>::namespaced(admin.clone(), &ns)
                        .delete(name, &background)
                        .await,
                ),
            ),
            Created::RoleBinding(name) => (
                format!("rolebinding/{name}"),
                gone(
                    Api::<RoleBinding>::namespaced(admin.clone(), &ns)
                        .delete(name, &background)
                        .await,
                ),
            ),
            Created::ClusterRole(name) => (
                format!("clusterrole/{name}"),
                gone(
                    Api::<ClusterRole>::all(admin.clone())
                        .delete(name, &background)
                        .await,
                ),
            ),
            Created::ClusterRoleBinding(name) => (
                format!("clusterrolebinding/{name}"),
                gone(
                    Api::<ClusterRoleBinding>::all(admin.clone())
                        .delete(name, &background)
                        .await,
                ),
            ),
            Created::Secret(name) => (
                format!("secret/{name}"),
                gone(
                    Api::<Secret>::namespaced(admin.clone(), &ns)
                        .delete(name, &background)
                        .await,
                ),
            ),
            Created::PullSecretCopy(copy) => {
                let removed = super::pull_secrets::remove(admin, &ns, std::slice::from_ref(copy))
                    .await
                    .into_iter()
                    .next();
                match removed {
                    Some(record) => (record.object, record.error.map_or(Ok(()), Err)),
                    None => continue,
                }
            }
            Created::Job(name) => (
                format!("job/{name}"),
                gone(
                    Api::<Job>::namespaced(admin.clone(), &ns)
                        .delete(name, &background)
                        .await,
                ),
            ),
        };
        let job_removed = matches!(object, Created::Job(_)) && result.is_ok();
        records.push((shown, result));
        if job_removed && !namespace_created {
            // In the operator's namespace nothing removes what a run stopped mid-way (its
            // deadline, a second Ctrl-C) left: once the Job's Pod is gone, sweep the run's.
            records.extend(sweep_run(admin, plan).await);
        }
    }
    records
}

/// How long the Job's Pod may take to go before the run's objects are swept anyway.
const POD_GONE: Duration = Duration::from_secs(120);

/// Waits (bounded) until the Job's Pod is gone, then removes every Pod and claim labelled
/// with the run's id, each by its UID, and the run's Lease.
async fn sweep_run(admin: &Client, plan: &LaunchPlan) -> Vec<(String, Result<(), String>)> {
    let ns = plan.namespace();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(admin.clone(), &ns);
    let selector =
        kube::api::ListParams::default().labels(&format!("job-name={}", plan.job_name()));
    let started = std::time::Instant::now();
    while started.elapsed() < POD_GONE {
        match pods.list(&selector).await {
            Ok(list) if list.items.is_empty() => break,
            Ok(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            Err(e) => return vec![("the Job's Pod".into(), Err(crate::error_chain(&e)))],
        }
    }
    let swept = super::remove_labelled(
        admin,
        &ns,
        &[(crate::pod::identity::LABEL_RUN, plan.run_id.as_str())],
        false,
        &super::DeletePolicy::default(),
    )
    .await;
    let mut records: Vec<(String, Result<(), String>)> = match swept {
        Ok(removed) => removed
            .into_iter()
            .map(|object| (format!("{object} (left by the run)"), Ok(())))
            .collect(),
        Err(e) => vec![(
            format!("the run's Pods and claims in {ns}"),
            Err(crate::error_chain(&e)),
        )],
    };
    // The run's Lease too: its process is gone with the Job's Pod, so nothing renews it, and
    // a Lease left would only make `gc` wait out its expiry.
    let lease = crate::backend::kube::cluster::lease_name(
        &plan.run_id,
        crate::backend::kube::cluster::Holder::Run,
    );
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(admin.clone(), &ns);
    match leases.delete(&lease, &Default::default()).await {
        Ok(_) => records.push((format!("lease/{lease} (left by the run)"), Ok(()))),
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(e) => records.push((format!("lease/{lease}"), Err(crate::error_chain(&e)))),
    }
    records
}

/// Seconds since the epoch, now.
fn now_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// A delete's answer: absent already is success.
fn gone<T>(answer: Result<T, kube::Error>) -> Result<(), String> {
    match answer {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(crate::error_chain(&e)),
    }
}
