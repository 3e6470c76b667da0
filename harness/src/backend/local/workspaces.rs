//! Workspace volumes, the local backend's claims: labelled with their UID, created, read and
//! deleted (only those the run created, by that UID).

use super::backend::LocalBackend;
use super::engine::other;
use super::plan::{self, LABEL_ROLE};
use crate::backend::{BackendError, Result, WorkspaceRef};
use crate::host::is_not_found;
use anyhow::anyhow;
use bollard::models::VolumeCreateRequest;
use std::collections::BTreeMap;

pub(super) async fn create(
    backend: &LocalBackend,
    name: &str,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, String>,
) -> Result<WorkspaceRef> {
    let uid = uuid::Uuid::new_v4().to_string();
    let mut all = plan::engine_labels(labels);
    all.extend(plan::engine_labels(annotations));
    all.insert(plan::LABEL_WORKSPACE_UID.into(), uid.clone());
    all.insert(LABEL_ROLE.into(), "workspace".into());
    let request = VolumeCreateRequest {
        name: Some(name.into()),
        driver: Some("local".into()),
        labels: Some(all),
        ..Default::default()
    };
    if backend.objects.docker.inspect_volume(name).await.is_ok() {
        return Err(BackendError::Create {
            what: "workspace volume",
            name: name.into(),
            source: anyhow!("a volume of that name already exists"),
        });
    }
    backend
        .objects
        .docker
        .create_volume(request)
        .await
        .map_err(|e| BackendError::Create {
            what: "workspace volume",
            name: name.into(),
            source: e.into(),
        })?;
    Ok(WorkspaceRef {
        name: name.into(),
        uid,
        created_by_run: true,
    })
}

pub(super) async fn delete(backend: &LocalBackend, workspace: &WorkspaceRef) -> Result<()> {
    if !workspace.created_by_run {
        return Ok(());
    }
    let found = match backend.objects.docker.inspect_volume(&workspace.name).await {
        Ok(v) => v,
        Err(e) if is_not_found(&e) => return Ok(()),
        Err(e) => return Err(other(format!("inspect volume {}", workspace.name), e)),
    };
    let uid = found
        .labels
        .get(plan::LABEL_WORKSPACE_UID)
        .cloned()
        .unwrap_or_default();
    if uid != workspace.uid {
        return Err(BackendError::UidMismatch {
            what: "workspace",
            name: workspace.name.clone(),
            expected: workspace.uid.clone(),
            found: uid,
        });
    }
    backend.objects.remove_volume(&workspace.name).await
}

pub(super) async fn get(backend: &LocalBackend, name: &str) -> Result<Option<WorkspaceRef>> {
    match backend.objects.docker.inspect_volume(name).await {
        Ok(found) => Ok(Some(WorkspaceRef {
            name: name.to_owned(),
            uid: found
                .labels
                .get(plan::LABEL_WORKSPACE_UID)
                .cloned()
                .unwrap_or_default(),
            created_by_run: false,
        })),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(other(format!("inspect volume {name}"), e)),
    }
}

pub(super) async fn labels(
    backend: &LocalBackend,
    name: &str,
) -> Result<Option<BTreeMap<String, String>>> {
    match backend.objects.docker.inspect_volume(name).await {
        // The claim's labels: the volume's, minus this backend's bookkeeping and the
        // annotations it keeps among them (the create nonce).
        Ok(found) => Ok(Some(
            found
                .labels
                .into_iter()
                .filter(|(k, _)| {
                    ![
                        plan::LABEL_WORKSPACE_UID,
                        LABEL_ROLE,
                        crate::pod::identity::ANNOTATION_CREATE_NONCE,
                    ]
                    .contains(&k.as_str())
                })
                .collect(),
        )),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(other(format!("inspect volume {name}"), e)),
    }
}
