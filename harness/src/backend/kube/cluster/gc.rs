//! `gc` in a cluster: what killed runs left, found by the harness's labels, and never what a
//! run still going uses.
//!
//! Order is what makes it safe. Everything `gc` may remove is listed first (the namespaces
//! the harness created; in `--namespace`, the runs' objects); then the runs' Leases are read
//! ([`super::lease`]). A run takes its Lease before it creates anything in a namespace, so
//! every object listed was made while its run's Lease already existed: a run whose Lease is
//! live is spared whole. The one object made before its Lease is the namespace a run creates
//! (the Lease lives in it): a namespace younger than a Lease's duration whose run holds no
//! Lease there yet is being set up, and spared too. `--force` removes live runs as well.

use super::lease::{LEASE_SECONDS, leases_in};
use crate::backend::kube::deletes::{DeletePolicy, delete_exact};
use crate::backend::kube::errors::{ClusterError, setup};
use crate::backend::kube::launch::GRANT_NAMESPACE;
use crate::backend::{GcOutcome, Spared};
use crate::pod::identity::{LABEL_LAUNCH, LABEL_MANAGED, LABEL_RUN};
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Preconditions, PropagationPolicy};
use kube::{Client, Resource};
use std::collections::{BTreeMap, BTreeSet};

/// What `gc` is asked to do in a cluster.
#[derive(Debug, Clone, Copy)]
pub struct GcScope<'a> {
    /// The operator's namespace the runs used (`--namespace`), swept object by object.
    pub namespace: Option<&'a str>,
    /// Only what this run created; None: every run's (`--all`).
    pub run: Option<&'a str>,
    pub dry_run: bool,
    /// Remove live runs too.
    pub force: bool,
}

/// The kinds `gc` removes inside an operator's namespace, in the order it removes them: a
/// launch's Job (with its Pod) first, the runs' Pods and claims, what `launch` and the runs
/// created for their identities, and the Leases of runs that are over last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Namespace,
    Job,
    Pod,
    Claim,
    Secret,
    RoleBinding,
    Role,
    ServiceAccount,
    Lease,
    /// `launch --node-inspector`'s grant to read nodes: cluster-scoped, listed apart.
    ClusterRoleBinding,
    ClusterRole,
}

impl Kind {
    const ALL: [Self; 8] = [
        Self::Job,
        Self::Pod,
        Self::Claim,
        Self::Secret,
        Self::RoleBinding,
        Self::Role,
        Self::ServiceAccount,
        Self::Lease,
    ];

    fn name(self) -> &'static str {
        match self {
            Self::Namespace => "namespace",
            Self::Job => "job",
            Self::Pod => "pod",
            Self::Claim => "persistentvolumeclaim",
            Self::Secret => "secret",
            Self::RoleBinding => "rolebinding",
            Self::Role => "role",
            Self::ServiceAccount => "serviceaccount",
            Self::Lease => "lease",
            Self::ClusterRoleBinding => "clusterrolebinding",
            Self::ClusterRole => "clusterrole",
        }
    }
}

/// One object `gc` may remove: its kind, name, UID, the run it belongs to (its run label,
/// or a launch's Job Pod's launch label) and when it was created.
#[derive(Debug, Clone)]
struct Found {
    kind: Kind,
    name: String,
    uid: String,
    run: Option<String>,
    created: Option<Timestamp>,
    /// Its deletion was requested already (`metadata.deletionTimestamp`).
    deleting: bool,
}

impl Found {
    fn of<K: Resource>(kind: Kind, object: &K) -> Self {
        let meta = object.meta();
        let labels = meta.labels.clone().unwrap_or_default();
        Self {
            kind,
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            run: labels
                .get(LABEL_RUN)
                .or_else(|| labels.get(LABEL_LAUNCH))
                .cloned(),
            created: meta.creation_timestamp.as_ref().map(|t| t.0),
            deleting: meta.deletion_timestamp.is_some(),
        }
    }

    fn shown(&self) -> String {
        format!("{}/{}", self.kind.name(), self.name)
    }
}

/// `gc` in a cluster: with no namespace named, namespaces the harness created (by label,
/// optionally of one run) are deleted whole; in a namespace the operator named (and only
/// there), the runs' Pods, claims, executor
/// objects, what `launch` created there (its Job with its Pod, its Secret, the bookkeeper's
/// account, Role and binding) and the Leases of runs that are over. Runs that are alive
/// (module doc) are spared unless `force`. Returns what was (or would be) removed and who
/// was spared.
pub async fn gc(admin: &Client, scope: &GcScope<'_>) -> Result<GcOutcome, ClusterError> {
    // What may be removed, listed before any Lease is read.
    let mut selector = format!("{LABEL_MANAGED}=true");
    if let Some(run) = scope.run {
        selector.push_str(&format!(",{LABEL_RUN}={run}"));
    }
    // With a namespace named, only that namespace is swept: an operator identity bound to
    // one namespace (a RoleBinding, no ClusterRole) may not list namespaces at all, and the
    // run namespaces other runs created are plain `gc`'s to remove.
    let namespaces: Vec<Found> = match scope.namespace {
        Some(_) => Vec::new(),
        None => Api::<Namespace>::all(admin.clone())
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(setup("list namespaces"))?
            .items
            .iter()
            .map(|ns| Found::of(Kind::Namespace, ns))
            .collect(),
    };
    let mut inside = Vec::new();
    if let Some(ns) = scope.namespace {
        // A run's objects; a launch's Job Pod carries the launch's label instead.
        let selectors: Vec<String> = match scope.run {
            Some(r) => vec![
                format!("{LABEL_MANAGED}=true,{LABEL_RUN}={r}"),
                format!("{LABEL_MANAGED}=true,{LABEL_LAUNCH}={r}"),
            ],
            None => vec![format!("{LABEL_MANAGED}=true")],
        };
        for kind in Kind::ALL {
            for selector in &selectors {
                inside.extend(list(admin, ns, kind, selector).await?);
            }
        }
        inside.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        inside.dedup_by(|a, b| a.uid == b.uid);
    }

    let mut not_searched = Vec::new();
    let cluster_rbac = cluster_grants(admin, scope, &selector, &mut not_searched).await?;

    // Who is alive.
    let now = Timestamp::now();
    let mut live: BTreeMap<String, String> = BTreeMap::new();
    if !scope.force {
        let mut holding: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut where_: Vec<&str> = namespaces.iter().map(|n| n.name.as_str()).collect();
        where_.extend(scope.namespace);
        // A grant's run is judged by its Lease in the namespace its binding names; one that
        // cannot be read there leaves the run alive, as gc judges no run dead unseen.
        for (found, bound) in &cluster_rbac {
            let Some(ns) = bound.as_deref().filter(|ns| !where_.contains(ns)) else {
                continue;
            };
            match leases_in(admin, ns, now).await {
                Ok(leases) => leases
                    .into_iter()
                    .filter(|(_, j)| j.live)
                    .for_each(|(_, j)| {
                        live.entry(j.run).or_insert(j.evidence);
                    }),
                Err(e) => {
                    if let Some(run) = &found.run {
                        live.entry(run.clone()).or_insert(format!(
                            "its Lease in namespace {ns} could not be read: {}",
                            crate::error_chain(&e)
                        ));
                    }
                }
            }
        }
        for ns in where_ {
            for (_, judged) in leases_in(admin, ns, now).await? {
                holding
                    .entry(ns.to_owned())
                    .or_default()
                    .insert(judged.run.clone());
                if judged.live {
                    live.entry(judged.run).or_insert(judged.evidence);
                }
            }
        }
        // A namespace already terminating is not one being set up (real Kind: `gc --run`
        // right after a run read its terminating namespace as a live run's).
        for ns in namespaces.iter().filter(|n| !n.deleting) {
            let Some(run) = &ns.run else { continue };
            let has_lease = holding.get(&ns.name).is_some_and(|runs| runs.contains(run));
            let age = ns.created.map(|c| now.as_second() - c.as_second());
            if !has_lease && age.is_some_and(|age| age < i64::from(LEASE_SECONDS)) {
                live.entry(run.clone()).or_insert(format!(
                    "namespace {} created {} s ago and its run holds no lease there yet (being set up)",
                    ns.name,
                    age.unwrap_or_default()
                ));
            }
        }
    }
    let alive = |run: &Option<String>| run.as_ref().is_some_and(|r| live.contains_key(r));

    let in_namespace = scope.namespace.unwrap_or_default();
    // Cluster-scoped grants before the namespaces they name (made after the run's Lease, so
    // judged by it as every object inside is).
    let grants: Vec<Found> = cluster_rbac
        .iter()
        .map(|(found, _)| found.clone())
        .collect();
    let mut outcome = GcOutcome {
        not_searched,
        ..Default::default()
    };
    for found in grants
        .iter()
        .chain(&namespaces)
        .chain(&inside)
        .filter(|f| !alive(&f.run))
    {
        if found.deleting {
            outcome.being_removed.push(found.shown());
            continue;
        }
        if !scope.dry_run && !remove(admin, in_namespace, found).await? {
            continue;
        }
        outcome.removed.push(found.shown());
    }
    outcome.spared = live
        .into_iter()
        .filter(|(run, _)| {
            namespaces
                .iter()
                .chain(&inside)
                .chain(cluster_rbac.iter().map(|(f, _)| f))
                .any(|f| f.run.as_ref() == Some(run))
        })
        .map(|(run, evidence)| Spared { run, evidence })
        .collect();
    Ok(outcome)
}

/// `launch --node-inspector`'s cluster-scoped grants matching `selector`, each with the run's
/// namespace (a binding's subject's; a role's annotation, [`GRANT_NAMESPACE`]). Under
/// `--namespace`, only those of it. A server that serves none has none; one that refuses the
/// list is said in `not_searched`, with the fix.
async fn cluster_grants(
    admin: &Client,
    scope: &GcScope<'_>,
    selector: &str,
    not_searched: &mut Vec<String>,
) -> Result<Vec<(Found, Option<String>)>, ClusterError> {
    let params = ListParams::default().labels(selector);
    let mut refused = |kind: &str, e: &kube::Error| match e {
        kube::Error::Api(s) if s.code == 404 => true,
        kube::Error::Api(s) if s.code == 403 => {
            not_searched.push(format!(
                "{kind}: your identity may not list them ({}); a `launch --node-inspector` killed before its end leaves its grant there\n  fix: grant list on {kind}, or remove them yourself: kubectl delete clusterrolebinding,clusterrole -l {selector}",
                s.message
            ));
            true
        }
        _ => false,
    };
    let bindings = match Api::<ClusterRoleBinding>::all(admin.clone())
        .list(&params)
        .await
    {
        Ok(list) => list.items,
        Err(e) if refused("clusterrolebindings", &e) => Vec::new(),
        Err(e) => return Err(setup("list cluster role bindings")(e)),
    };
    let roles = match Api::<ClusterRole>::all(admin.clone()).list(&params).await {
        Ok(list) => list.items,
        Err(e) if refused("clusterroles", &e) => Vec::new(),
        Err(e) => return Err(setup("list cluster roles")(e)),
    };
    let mut found: Vec<(Found, Option<String>)> = bindings
        .iter()
        .map(|b| {
            let bound = b
                .subjects
                .as_ref()
                .and_then(|s| s.first()?.namespace.clone());
            (Found::of(Kind::ClusterRoleBinding, b), bound)
        })
        .chain(roles.iter().map(|r| {
            let bound = r
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(GRANT_NAMESPACE).cloned());
            (Found::of(Kind::ClusterRole, r), bound)
        }))
        .collect();
    if let Some(ns) = scope.namespace {
        found.retain(|(_, bound)| bound.as_deref() == Some(ns));
    }
    Ok(found)
}

/// The objects of `kind` in `namespace` matching `selector`.
async fn list(
    admin: &Client,
    namespace: &str,
    kind: Kind,
    selector: &str,
) -> Result<Vec<Found>, ClusterError> {
    async fn of<K>(
        admin: &Client,
        namespace: &str,
        kind: Kind,
        selector: &str,
    ) -> Result<Vec<Found>, ClusterError>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(admin.clone(), namespace);
        Ok(api
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(setup(format!("list {}s in {namespace}", kind.name())))?
            .items
            .iter()
            .map(|o| Found::of(kind, o))
            .collect())
    }
    match kind {
        // Namespaces and cluster grants are listed cluster-wide, by `gc` itself.
        Kind::Namespace | Kind::ClusterRoleBinding | Kind::ClusterRole => Ok(Vec::new()),
        Kind::Job => of::<Job>(admin, namespace, kind, selector).await,
        Kind::Pod => of::<Pod>(admin, namespace, kind, selector).await,
        Kind::Claim => of::<PersistentVolumeClaim>(admin, namespace, kind, selector).await,
        Kind::Secret => of::<Secret>(admin, namespace, kind, selector).await,
        Kind::RoleBinding => of::<RoleBinding>(admin, namespace, kind, selector).await,
        Kind::Role => of::<Role>(admin, namespace, kind, selector).await,
        Kind::ServiceAccount => of::<ServiceAccount>(admin, namespace, kind, selector).await,
        Kind::Lease => of::<Lease>(admin, namespace, kind, selector).await,
    }
}

/// Removes `found` (a namespace, or an object in `namespace`) while it still has its UID;
/// false when it was gone already or is now another object of that name. Pods and claims go
/// as the run's own sweeps remove them (waited for until gone); a Job takes its Pods with it
/// (batch/v1 Jobs orphan them by default).
async fn remove(admin: &Client, namespace: &str, found: &Found) -> Result<bool, ClusterError> {
    let failed = |e: crate::backend::BackendError| ClusterError::Setup {
        what: format!("remove {} in {namespace}", found.shown()),
        source: e.into(),
    };
    let policy = DeletePolicy::default();
    match found.kind {
        Kind::Pod => {
            let api: Api<Pod> = Api::namespaced(admin.clone(), namespace);
            return delete_exact(&policy, &api, "pod", &found.name, &found.uid)
                .await
                .map_err(failed);
        }
        Kind::Claim => {
            let api: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), namespace);
            return delete_exact(&policy, &api, "workspace claim", &found.name, &found.uid)
                .await
                .map_err(failed);
        }
        _ => {}
    }
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        preconditions: Some(Preconditions {
            uid: Some(found.uid.clone()),
            resource_version: None,
        }),
        ..Default::default()
    };
    async fn delete<K>(
        admin: &Client,
        namespace: &str,
        name: &str,
        dp: &DeleteParams,
    ) -> kube::Result<()>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        Api::<K>::namespaced(admin.clone(), namespace)
            .delete(name, dp)
            .await
            .map(|_| ())
    }
    let name = found.name.as_str();
    let result = match found.kind {
        Kind::Namespace => Api::<Namespace>::all(admin.clone())
            .delete(name, &dp)
            .await
            .map(|_| ()),
        Kind::ClusterRoleBinding => Api::<ClusterRoleBinding>::all(admin.clone())
            .delete(name, &dp)
            .await
            .map(|_| ()),
        Kind::ClusterRole => Api::<ClusterRole>::all(admin.clone())
            .delete(name, &dp)
            .await
            .map(|_| ()),
        Kind::Job => delete::<Job>(admin, namespace, name, &dp).await,
        Kind::Secret => delete::<Secret>(admin, namespace, name, &dp).await,
        Kind::RoleBinding => delete::<RoleBinding>(admin, namespace, name, &dp).await,
        Kind::Role => delete::<Role>(admin, namespace, name, &dp).await,
        Kind::ServiceAccount => delete::<ServiceAccount>(admin, namespace, name, &dp).await,
        Kind::Lease => delete::<Lease>(admin, namespace, name, &dp).await,
        // Removed above, as sweeps remove them.
        Kind::Pod | Kind::Claim => Ok(()),
    };
    match result {
        Ok(()) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(false),
        Err(e) => Err(setup(format!("delete {} in {namespace}", found.shown()))(e)),
    }
}
