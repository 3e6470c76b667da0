//! Pod volumes as engine volumes, bind mounts and the mounts that attach them.

use super::Unsupported;
use crate::pod::compose::parse_quantity;
use bollard::models::{Mount, MountType, MountVolumeOptions};
use k8s_openapi::api::core::v1::{PodSpec, Volume};

#[derive(Debug, Clone, PartialEq)]
pub enum VolumeKind {
    /// A Pod-owned engine volume; tmpfs when `medium: Memory`.
    EmptyDir {
        memory: bool,
        size_limit: Option<i64>,
    },
    /// A claim: an engine volume that outlives the Pod, named by the claim.
    Claim { read_only: bool },
    /// `create` is the kubelet's `DirectoryOrCreate` / `FileOrCreate` (None: no creation).
    HostPath {
        path: String,
        create: Option<HostPathCreate>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostPathCreate {
    Directory,
    File,
}

#[derive(Debug, Clone, PartialEq)]
pub struct VolumePlan {
    /// The Pod's volume name.
    pub name: String,
    /// The engine volume name (or host path for hostPath).
    pub source: String,
    pub kind: VolumeKind,
}

/// The plan of every Pod volume the engine can provide (other kinds are reported by
/// `unsupported_fields`).
pub(super) fn volume_plans(
    spec: &PodSpec,
    pod_name: &str,
    problems: &mut Vec<Unsupported>,
) -> Vec<VolumePlan> {
    let mut volumes = Vec::new();
    for v in spec.volumes.iter().flatten() {
        let Some(kind) = volume_kind(v, problems) else {
            continue; // reported by unsupported_fields
        };
        let source = match (&kind, &v.persistent_volume_claim, &v.host_path) {
            (VolumeKind::Claim { .. }, Some(c), _) => c.claim_name.clone(),
            (VolumeKind::HostPath { .. }, _, Some(h)) => h.path.clone(),
            _ => format!("{pod_name}-{}", v.name),
        };
        volumes.push(VolumePlan {
            name: v.name.clone(),
            source,
            kind,
        });
    }
    volumes
}

fn volume_kind(v: &Volume, problems: &mut Vec<Unsupported>) -> Option<VolumeKind> {
    if let Some(e) = &v.empty_dir {
        let memory = match e.medium.as_deref() {
            None | Some("") => false,
            Some("Memory") => true,
            Some(other) => {
                problems.push(Unsupported {
                    field: format!("spec.volumes[{}].emptyDir.medium", v.name),
                    reason: format!("medium {other} does not exist locally"),
                });
                false
            }
        };
        Some(VolumeKind::EmptyDir {
            memory,
            size_limit: e.size_limit.as_ref().and_then(|q| parse_quantity(q, false)),
        })
    } else if let Some(c) = &v.persistent_volume_claim {
        Some(VolumeKind::Claim {
            read_only: c.read_only.unwrap_or(false),
        })
    } else if let Some(h) = &v.host_path {
        let create = match h.type_.as_deref() {
            Some("DirectoryOrCreate") => Some(HostPathCreate::Directory),
            Some("FileOrCreate") => Some(HostPathCreate::File),
            None | Some("" | "Directory" | "File") => None,
            Some(other) => {
                problems.push(Unsupported {
                    field: format!("spec.volumes[{}].hostPath.type", v.name),
                    reason: format!("type {other} is not checked by the local backend"),
                });
                None
            }
        };
        Some(VolumeKind::HostPath {
            path: h.path.clone(),
            create,
        })
    } else {
        None
    }
}

/// The engine mount of the Pod volume `name` at `target` (None: the Pod has no such volume).
pub(super) fn volume_mount(
    volumes: &[VolumePlan],
    name: &str,
    target: &str,
    read_only: bool,
) -> Option<Mount> {
    let plan = volumes.iter().find(|v| v.name == name)?;
    let (typ, claim_ro) = match plan.kind {
        VolumeKind::HostPath { .. } => (MountType::BIND, false),
        VolumeKind::Claim { read_only } => (MountType::VOLUME, read_only),
        VolumeKind::EmptyDir { .. } => (MountType::VOLUME, false),
    };
    // The kubelet never copies image content into a volume; the engine does by default
    // (and copies the image folder's owner over the fsGroup), so switch that off.
    let volume_options = (typ == MountType::VOLUME).then(|| MountVolumeOptions {
        no_copy: Some(true),
        ..Default::default()
    });
    Some(Mount {
        target: Some(target.to_owned()),
        source: Some(plan.source.clone()),
        typ: Some(typ),
        read_only: Some(read_only || claim_ro),
        volume_options,
        ..Default::default()
    })
}
