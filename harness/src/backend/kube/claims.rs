//! Workspace claims: the claim Kandev would create, Kandev's comparison of the admitted claim
//! (`ValidateAdmittedPVC`), and creating, reading and deleting claims (only those the run
//! created are ever deleted).

use super::backend::KubeBackend;
use super::deletes::delete_exact;
use super::errors::other;
use super::pods::made_by_this_create;
use crate::backend::{BackendError, Result, WorkspaceRef};
use crate::pod::admission::{self, AdmissionMismatch, AdmissionMutated};
use crate::pod::identity::{ANNOTATION_CREATE_NONCE, LABEL_MANAGED};
use crate::pod::template::is_owned_label;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use std::collections::BTreeMap;

impl KubeBackend {
    /// The PVC Kandev would create for `name`.
    pub fn managed_pvc(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> PersistentVolumeClaim {
        let mut labels = labels.clone();
        labels.insert(LABEL_MANAGED.into(), "true".into());
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(self.namespace.clone()),
                labels: Some(labels),
                annotations: Some(annotations.clone()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(self.workspace.access_modes.clone()),
                volume_mode: Some("Filesystem".into()),
                storage_class_name: self.workspace.storage_class.clone(),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_owned(),
                        Quantity(self.workspace.size.clone()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// Kandev's `ValidateAdmittedPVC`: what admission may not change on a managed claim.
pub fn compare_pvc(
    desired: &PersistentVolumeClaim,
    admitted: &PersistentVolumeClaim,
) -> Vec<AdmissionMismatch> {
    let mut found = Vec::new();
    let mut mismatch = |field: &str, what: String| {
        found.push(AdmissionMismatch {
            path: field.to_owned(),
            message: what,
        })
    };
    let owned =
        |m: &Option<BTreeMap<String, String>>, annotations: bool| -> BTreeMap<String, String> {
            m.iter()
                .flatten()
                .filter(|(k, _)| {
                    if annotations {
                        k.starts_with("kandev.ai/")
                    } else {
                        is_owned_label(k)
                    }
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
    for (field, annotations, d, a) in [
        (
            "metadata.labels",
            false,
            &desired.metadata.labels,
            &admitted.metadata.labels,
        ),
        (
            "metadata.annotations",
            true,
            &desired.metadata.annotations,
            &admitted.metadata.annotations,
        ),
    ] {
        let (d, a) = (owned(d, annotations), owned(a, annotations));
        if d != a {
            mismatch(field, format!("owned entries {d:?} became {a:?}"));
        }
    }
    if admitted.metadata.name != desired.metadata.name {
        mismatch(
            "metadata.name",
            admission::value_or_unset(&admitted.metadata.name),
        );
    }
    if admitted
        .metadata
        .owner_references
        .as_ref()
        .is_some_and(|o| !o.is_empty())
    {
        mismatch(
            "metadata.ownerReferences",
            "owner references were added".into(),
        );
    }
    let extra_finalizers: Vec<&String> = admitted
        .metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| f.as_str() != "kubernetes.io/pvc-protection")
        .collect();
    if !extra_finalizers.is_empty() {
        mismatch(
            "metadata.finalizers",
            format!("{extra_finalizers:?} were added"),
        );
    }
    let (d, a) = (
        desired.spec.clone().unwrap_or_default(),
        admitted.spec.clone().unwrap_or_default(),
    );
    let set = |v: &Option<Vec<String>>| -> std::collections::BTreeSet<String> {
        v.iter().flatten().cloned().collect()
    };
    let list = |v: &Option<Vec<String>>| match v.as_deref() {
        None | Some([]) => "(unset)".to_owned(),
        Some(items) => items.join(", "),
    };
    if set(&d.access_modes) != set(&a.access_modes) {
        mismatch(
            "spec.accessModes",
            format!("{} became {}", list(&d.access_modes), list(&a.access_modes)),
        );
    }
    if d.volume_mode != a.volume_mode
        && !(d.volume_mode.is_none() && a.volume_mode.as_deref() == Some("Filesystem"))
    {
        mismatch(
            "spec.volumeMode",
            format!(
                "{} became {}",
                d.volume_mode.as_deref().unwrap_or("(unset)"),
                a.volume_mode.as_deref().unwrap_or("(unset)")
            ),
        );
    }
    // Compared by value, as upstream's `sameResourceList` (`Quantity.Cmp`): an API server
    // may write `5Gi` back as `5120Mi`. An absent list equals an empty one.
    let (dr, ar) = (
        d.resources.clone().unwrap_or_default(),
        a.resources.clone().unwrap_or_default(),
    );
    for (list, want, got) in [
        ("requests", dr.requests, ar.requests),
        ("limits", dr.limits, ar.limits),
    ] {
        let (want, got) = (want.unwrap_or_default(), got.unwrap_or_default());
        let names: std::collections::BTreeSet<&String> = want.keys().chain(got.keys()).collect();
        for name in names {
            let (w, g) = (want.get(name), got.get(name));
            let same = match (w, g) {
                (Some(w), Some(g)) => crate::pod::quantity::same(&w.0, &g.0),
                _ => false,
            };
            if !same {
                let show = |q: Option<&Quantity>| q.map_or("nothing".to_owned(), |q| q.0.clone());
                mismatch(
                    &format!("spec.resources.{list}[{name}]"),
                    format!("{} became {}", show(w), show(g)),
                );
            }
        }
    }
    // A default storage class being filled in is allowed; an explicit one must stay.
    if d.storage_class_name.is_some() && d.storage_class_name != a.storage_class_name {
        mismatch(
            "spec.storageClassName",
            format!(
                "{} became {}",
                admission::value_or_unset(&d.storage_class_name),
                admission::value_or_unset(&a.storage_class_name)
            ),
        );
    }
    if d.volume_attributes_class_name != a.volume_attributes_class_name {
        mismatch(
            "spec.volumeAttributesClassName",
            format!(
                "{} became {}",
                admission::value_or_unset(&d.volume_attributes_class_name),
                admission::value_or_unset(&a.volume_attributes_class_name)
            ),
        );
    }
    if d.selector != a.selector {
        mismatch("spec.selector", "changed".into());
    }
    if d.data_source != a.data_source || d.data_source_ref != a.data_source_ref {
        mismatch("spec.dataSource", "changed".into());
    }
    found
}

/// Creates the managed claim and compares what admission made of it; a changed claim is
/// deleted by its exact UID and the create fails naming every change.
pub(super) async fn create(
    backend: &KubeBackend,
    name: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<WorkspaceRef> {
    let desired = backend.managed_pvc(name, labels, annotations);
    let admitted = match backend
        .pvcs()
        .create(&KubeBackend::post_params(), &desired)
        .await
    {
        Ok(admitted) => admitted,
        // As a Pod's create: a claim carrying this create's nonce is the one it made (a 504
        // retried by kube-rs and answered 409, a timeout).
        Err(e) => match made_by_this_create(
            &backend.pvcs(),
            name,
            annotations.get(ANNOTATION_CREATE_NONCE),
        )
        .await
        {
            Some(found) => found,
            None => {
                return Err(BackendError::Create {
                    what: "workspace claim",
                    name: name.into(),
                    source: e.into(),
                });
            }
        },
    };
    let uid = admitted.uid().unwrap_or_default();
    let mismatches = compare_pvc(&desired, &admitted);
    if !mismatches.is_empty() {
        let _ = delete_exact(
            &backend.delete_policy(),
            &backend.pvcs(),
            "workspace claim",
            name,
            &uid,
        )
        .await;
        return Err(other(
            "admission of the workspace claim",
            AdmissionMutated {
                what: "workspace claim",
                name: name.into(),
                uid,
                mismatches,
            },
        ));
    }
    Ok(WorkspaceRef {
        name: name.into(),
        uid,
        created_by_run: true,
    })
}

/// Deletes a claim only when the run created it (by its UID).
pub(super) async fn delete(backend: &KubeBackend, workspace: &WorkspaceRef) -> Result<()> {
    // Existing claims are never deleted, whatever else holds.
    if !workspace.created_by_run {
        return Ok(());
    }
    delete_exact(
        &backend.delete_policy(),
        &backend.pvcs(),
        "workspace claim",
        &workspace.name,
        &workspace.uid,
    )
    .await
    .map(|_| ())
}

/// The claim of that name, if it exists (not created by the run).
pub(super) async fn get(backend: &KubeBackend, name: &str) -> Result<Option<WorkspaceRef>> {
    let found = backend
        .pvcs()
        .get_opt(name)
        .await
        .map_err(|e| other(format!("get workspace claim {name}"), e))?;
    Ok(found.map(|pvc| WorkspaceRef {
        name: name.to_owned(),
        uid: pvc.uid().unwrap_or_default(),
        created_by_run: false,
    }))
}

/// The labels of the claim of that name (None when absent).
pub(super) async fn labels(
    backend: &KubeBackend,
    name: &str,
) -> Result<Option<BTreeMap<String, String>>> {
    backend
        .pvcs()
        .get_opt(name)
        .await
        .map(|pvc| pvc.map(|pvc| pvc.labels().clone()))
        .map_err(|e| other(format!("get workspace claim {name}"), e))
}
