//! `gc` in a cluster: what killed runs left, found by the harness's labels.

use crate::backend::kube::deletes::DeletePolicy;
use crate::backend::kube::errors::{ClusterError, setup};
use crate::backend::kube::sweeps::remove_labelled;
use crate::pod::identity::{LABEL_LAUNCH, LABEL_MANAGED, LABEL_RUN};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PropagationPolicy};

/// `gc` in a cluster: namespaces the harness created (by label, optionally of one run) are
/// deleted whole; in a namespace the operator named, the run's Pods, claims and executor
/// objects are removed, and what `launch` created there (its Job with its Pod, its Secret,
/// the bookkeeper's account, Role and binding). Returns what was (or would be) removed.
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
        // A run's Pods and claims; a launch's Job Pod carries the launch's label instead.
        let selectors: Vec<Vec<(&str, &str)>> = match run {
            Some(r) => vec![vec![(LABEL_RUN, r)], vec![(LABEL_LAUNCH, r)]],
            None => vec![Vec::new()],
        };
        for selector in &selectors {
            removed.extend(
                remove_labelled(admin, ns, selector, dry_run, &DeletePolicy::default())
                    .await
                    .map_err(|e| ClusterError::Setup {
                        what: format!("remove labelled objects in {ns}"),
                        source: e.into(),
                    })?,
            );
        }
        // A Job's Pods go with it (batch/v1 Jobs orphan them by default).
        let background = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        };
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
                        api.delete(&name, &background)
                            .await
                            .map_err(setup(format!("delete {} {name}", $label)))?;
                    }
                    removed.push(format!("{}/{name}", $label));
                }
            }};
        }
        // What a killed `launch` left (its Job's deadline and TTL end the Job on their own).
        sweep!(Job, "job");
        sweep!(Secret, "secret");
        sweep!(RoleBinding, "rolebinding");
        sweep!(Role, "role");
        sweep!(ServiceAccount, "serviceaccount");
    }
    Ok(removed)
}
