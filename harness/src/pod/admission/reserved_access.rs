//! What no container but the main one may gain, whatever was requested: a reserved volume, a
//! mount under a reserved root (a companion's exact workspace grant aside), the agentctl
//! port, a reserved volume device; and on any container no new envFrom or reserved variable.

use super::fields::{describe_mount, describe_port};
use crate::pod::template::{
    RESERVED_VOLUMES, clean_path, is_agentctl_port, is_reserved_path, is_workspace_grant,
};
use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec, VolumeDevice, VolumeMount};

/// A companion's mounts with its workspace grant taken out, as upstream's
/// `companionWithoutWorkspaceGrant`: at most one `kandev-workspace` mount, of exactly the
/// grant's shape; with a grant, no other mount at `/`, at `/workspace` or below it. Returns
/// the remaining mounts (which the reserved-access rules then see) and each mount that broke
/// the grant's rules, with why.
fn companion_mounts_without_grant(
    c: &Container,
) -> (Vec<&VolumeMount>, Vec<(&VolumeMount, &'static str)>) {
    let (mut rest, mut broken) = (Vec::new(), Vec::new());
    let mut grant = None;
    for m in c.volume_mounts.iter().flatten() {
        if m.name != "kandev-workspace" {
            rest.push(m);
        } else if grant.is_some() || !is_workspace_grant(m) {
            broken.push((
                m,
                "workspace grant must be one direct RO/RW mount at /workspace",
            ));
        } else {
            grant = Some(m);
        }
    }
    if grant.is_some() {
        rest.retain(|m| {
            let path = clean_path(&m.mount_path);
            let overlaps = path == "/"
                || path == "/workspace"
                || path.starts_with("/workspace/")
                || "/workspace".starts_with(&format!("{path}/"));
            if overlaps {
                broken.push((m, "workspace grant overlaps another mount"));
            }
            !overlaps
        });
    }
    (rest, broken)
}

/// One container as the reserved-access rules see it.
struct Holder<'a> {
    /// `spec.containers[name]`, `spec.initContainers[name]` or `spec.ephemeralContainers[name]`.
    base: String,
    /// The mounts and ports the rules apply to (none on the main container, whose own are
    /// compared exactly with the request).
    mounts: Vec<&'a VolumeMount>,
    ports: Vec<&'a ContainerPort>,
    devices: Vec<&'a VolumeDevice>,
    /// Mounts that broke the workspace grant's rules (companions only), with why.
    grant_broken: Vec<(&'a VolumeMount, &'static str)>,
    /// Said after a reserved mount: why this container may not have it.
    why: &'static str,
}

/// Every container of the Pod, main, companions, init and ephemeral.
fn holders<'a>(a: &'a PodSpec, main_container: &str) -> Vec<Holder<'a>> {
    let mut out = Vec::new();
    for c in &a.containers {
        let main = c.name == main_container;
        let (mounts, grant_broken) = if main {
            (Vec::new(), Vec::new())
        } else {
            companion_mounts_without_grant(c)
        };
        out.push(Holder {
            base: format!("spec.containers[{}]", c.name),
            mounts,
            ports: if main {
                Vec::new()
            } else {
                c.ports.iter().flatten().collect()
            },
            devices: c.volume_devices.iter().flatten().collect(),
            grant_broken,
            why: "only the main container may mount them; a companion only the exact workspace grant",
        });
    }
    for c in a.init_containers.iter().flatten() {
        out.push(Holder {
            base: format!("spec.initContainers[{}]", c.name),
            mounts: c.volume_mounts.iter().flatten().collect(),
            ports: c.ports.iter().flatten().collect(),
            devices: c.volume_devices.iter().flatten().collect(),
            grant_broken: Vec::new(),
            why: "init containers never receive them, the workspace grant included",
        });
    }
    for c in a.ephemeral_containers.iter().flatten() {
        out.push(Holder {
            base: format!("spec.ephemeralContainers[{}]", c.name),
            mounts: c.volume_mounts.iter().flatten().collect(),
            ports: c.ports.iter().flatten().collect(),
            devices: c.volume_devices.iter().flatten().collect(),
            grant_broken: Vec::new(),
            why: "ephemeral containers never receive them, the workspace grant included",
        });
    }
    out
}

/// A companion holds at most its one exact workspace grant, with no mount overlapping it; no
/// container but the main one holds a reserved volume, a mount under a reserved root (the
/// exact grant aside) or the agentctl port; no container at all a reserved volume device. Absolute, as upstream's `validateAdmittedContainers`: the template rules never
/// let a request hold them, so any found was added by admission.
pub(super) fn compare_reserved_access(
    a: &PodSpec,
    main_container: &str,
    push: &mut impl FnMut(&str, String),
) {
    for Holder {
        base,
        mounts,
        ports,
        devices,
        grant_broken,
        why,
    } in holders(a, main_container)
    {
        for (m, rule) in grant_broken {
            push(
                &format!("{base}.volumeMounts[{}]", m.name),
                format!("{rule}: {}", describe_mount(m)),
            );
        }
        for m in mounts {
            if RESERVED_VOLUMES.contains(&m.name.as_str()) || is_reserved_path(&m.mount_path) {
                push(
                    &format!("{base}.volumeMounts[{}]", m.name),
                    format!(
                        "{} mounts a volume or path reserved for Kandev ({why})",
                        describe_mount(m)
                    ),
                );
            }
        }
        for p in ports.into_iter().filter(|p| is_agentctl_port(p)) {
            push(
                &format!("{base}.ports[{}]", p.container_port),
                format!(
                    "only the main container may carry the agentctl port: {}",
                    describe_port(p)
                ),
            );
        }
        for d in devices {
            if RESERVED_VOLUMES.contains(&d.name.as_str()) || is_reserved_path(&d.device_path) {
                push(
                    &format!("{base}.volumeDevices[{}]", d.name),
                    format!(
                        "a volume device may not use Kandev's reserved volumes or paths: {} at {}",
                        d.name, d.device_path
                    ),
                );
            }
        }
    }
}

/// Every container: no new envFrom, no new reserved environment keys.
pub(super) fn compare_env(d: &PodSpec, a: &PodSpec, push: &mut impl FnMut(&str, String)) {
    for ac in &a.containers {
        let dc = d.containers.iter().find(|c| c.name == ac.name);
        if ac.env_from.is_some() && dc.and_then(|c| c.env_from.as_ref()).is_none() {
            push(
                &format!("spec.containers[{}].envFrom", ac.name),
                "admission added envFrom".into(),
            );
        }
        for env in ac.env.iter().flatten() {
            let reserved = env.name == "HOME"
                || env.name.starts_with("AGENTCTL_")
                || env.name.starts_with("KANDEV_");
            let requested = dc.is_some_and(|c| c.env.iter().flatten().any(|e| e.name == env.name));
            if reserved && !requested {
                push(
                    &format!("spec.containers[{}].env[{}]", ac.name, env.name),
                    "admission added a reserved variable".into(),
                );
            }
        }
    }
}
