//! Label sweeps with the operator's identity (Kandev's Role grants no `list`): every
//! harness-managed Pod and claim carrying a run's or a scenario's labels, listed or deleted
//! (each by its UID).

use super::deletes::{DeletePolicy, delete_exact};
use super::errors::other;
use crate::backend::Result;
use crate::pod::identity::LABEL_MANAGED;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

/// `k=v,...` plus the harness's managed label: only objects the harness labelled match.
pub fn label_selector(selector: &[(&str, &str)]) -> String {
    selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .chain(std::iter::once(format!("{LABEL_MANAGED}=true")))
        .collect::<Vec<_>>()
        .join(",")
}

/// Every harness-managed Pod and claim in `namespace` carrying the `selector` labels, seen
/// with the operator's identity (Kandev's Role grants no `list`).
pub async fn list_labelled(
    admin: &Client,
    namespace: &str,
    selector: &[(&str, &str)],
) -> Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), namespace);
    let params = ListParams::default().labels(&label_selector(selector));
    let mut objects: Vec<String> = pods
        .list(&params)
        .await
        .map_err(|e| other("list pods", e))?
        .items
        .iter()
        .map(|p| format!("pod/{}", p.name_any()))
        .collect();
    objects.extend(
        pvcs.list(&params)
            .await
            .map_err(|e| other("list persistentvolumeclaims", e))?
            .items
            .iter()
            .map(|p| format!("persistentvolumeclaim/{}", p.name_any())),
    );
    objects.sort();
    Ok(objects)
}

/// Deletes (each by its UID) every harness-managed Pod and claim in `namespace` carrying
/// the `selector` labels; returns what was (or, with `dry_run`, would be) removed.
pub async fn remove_labelled(
    admin: &Client,
    namespace: &str,
    selector: &[(&str, &str)],
    dry_run: bool,
    policy: &DeletePolicy,
) -> Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(admin.clone(), namespace);
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), namespace);
    let params = ListParams::default().labels(&label_selector(selector));
    let mut removed = Vec::new();
    let listed = pods
        .list(&params)
        .await
        .map_err(|e| other("list pods", e))?;
    for pod in listed.items {
        let (name, uid) = (pod.name_any(), pod.uid().unwrap_or_default());
        if !dry_run {
            delete_exact(policy, &pods, "pod", &name, &uid).await?;
        }
        removed.push(format!("pod/{name}"));
    }
    let claims = pvcs
        .list(&params)
        .await
        .map_err(|e| other("list persistentvolumeclaims", e))?;
    for claim in claims.items {
        let (name, uid) = (claim.name_any(), claim.uid().unwrap_or_default());
        if !dry_run {
            delete_exact(policy, &pvcs, "workspace claim", &name, &uid).await?;
        }
        removed.push(format!("persistentvolumeclaim/{name}"));
    }
    Ok(removed)
}
