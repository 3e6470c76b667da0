//! Kandev's reserved volumes, exactly as requested, and the workspace grants, compared by
//! container name in both directions.

use crate::pod::template::{RESERVED_VOLUMES, is_workspace_grant};
use k8s_openapi::api::core::v1::{Container, PodSpec, Volume, VolumeMount};

/// Reserved volumes: exactly as desired, exactly once; no other volume aliases the claim.
pub(super) fn compare_reserved_volumes(
    d: &PodSpec,
    a: &PodSpec,
    push: &mut impl FnMut(&str, String),
) {
    let claim = d
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "kandev-workspace")
        .and_then(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone());
    for name in RESERVED_VOLUMES {
        let want: Vec<&Volume> = d
            .volumes
            .iter()
            .flatten()
            .filter(|v| v.name == name)
            .collect();
        let got: Vec<&Volume> = a
            .volumes
            .iter()
            .flatten()
            .filter(|v| v.name == name)
            .collect();
        if got.len() != 1 || want.first() != got.first() {
            push(
                &format!("spec.volumes[{name}]"),
                format!(
                    "the reserved volume is not exactly as requested ({} found)",
                    got.len()
                ),
            );
        }
    }
    if let Some(claim) = &claim {
        for v in a
            .volumes
            .iter()
            .flatten()
            .filter(|v| v.name != "kandev-workspace")
        {
            if v.persistent_volume_claim
                .as_ref()
                .is_some_and(|c| &c.claim_name == claim)
            {
                push(
                    &format!("spec.volumes[{}]", v.name),
                    "aliases the workspace claim".into(),
                );
            }
        }
    }
}

/// A grant as compared: its access mode (`readOnly` absent = false, a neutral default).
fn grant_modes(container: &Container) -> Vec<bool> {
    container
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| is_workspace_grant(m))
        .map(|m| m.read_only.unwrap_or(false))
        .collect()
}

fn touches_workspace(mounts: Option<&Vec<VolumeMount>>) -> bool {
    mounts
        .into_iter()
        .flatten()
        .any(|m| m.name == "kandev-workspace")
}

/// Workspace grants by container name, both directions. (Init and ephemeral containers never
/// hold one: [`super::reserved_access::compare_reserved_access`] refuses any workspace mount there.)
pub(super) fn compare_grants(
    d: &PodSpec,
    a: &PodSpec,
    main_container: &str,
    push: &mut impl FnMut(&str, String),
) {
    for dc in d.containers.iter().filter(|c| c.name != main_container) {
        let want = grant_modes(dc);
        let got = a
            .containers
            .iter()
            .find(|c| c.name == dc.name)
            .map(grant_modes);
        match got {
            None if !want.is_empty() => push(
                &format!("spec.containers[{}]", dc.name),
                "the grant's recipient was removed or renamed".into(),
            ),
            Some(got) if got != want => push(
                &format!("spec.containers[{}].volumeMounts", dc.name),
                format!("workspace grant changed from {want:?} to {got:?} (readOnly per grant)"),
            ),
            _ => {}
        }
    }
    for ac in a.containers.iter().filter(|c| c.name != main_container) {
        let requested = d.containers.iter().any(|c| c.name == ac.name);
        if !requested && touches_workspace(ac.volume_mounts.as_ref()) {
            push(
                &format!("spec.containers[{}]", ac.name),
                "admission added a container with the workspace".into(),
            );
        }
    }
}
