//! The main container as admission may not change it: unique container names, Kandev's
//! command, the agentctl port and the reserved mounts, each compared field by field.

use super::fields::{describe_mount, describe_mounts, describe_port, mount_key, port_key};
use crate::pod::template::{AGENTCTL_PORT, RESERVED_VOLUMES, is_agentctl_port, is_reserved_path};
use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec, VolumeMount};
use std::collections::BTreeMap;

/// Container names stay unique; the main container keeps Kandev's command, port and mounts.
pub(super) fn compare_main_container(
    d: &PodSpec,
    a: &PodSpec,
    main_container: &str,
    push: &mut impl FnMut(&str, String),
) {
    let mut seen = BTreeMap::<&str, usize>::new();
    for c in a
        .containers
        .iter()
        .chain(a.init_containers.iter().flatten())
    {
        *seen.entry(&c.name).or_default() += 1;
    }
    for (name, count) in seen.into_iter().filter(|(_, n)| *n > 1) {
        push(
            "spec.containers",
            format!("container name {name} appears {count} times"),
        );
    }
    let dmain = d.containers.iter().find(|c| c.name == main_container);
    let amain = a.containers.iter().find(|c| c.name == main_container);
    match (dmain, amain) {
        (Some(dc), Some(ac)) => {
            if dc.command != ac.command || dc.args != ac.args || dc.working_dir != ac.working_dir {
                push(
                    &format!("spec.containers[{main_container}]"),
                    "command, args or workingDir changed".into(),
                );
            }
            compare_main_ports(dc, ac, main_container, push);
            compare_main_mounts(dc, ac, main_container, push);
        }
        _ => push(
            "spec.containers",
            format!("the main container {main_container} is missing"),
        ),
    }
}

/// The main container's reserved mounts, exactly as requested and exactly once each
/// (upstream counts them with `reflect.DeepEqual`): per reserved volume, the admitted
/// mounts of that volume must be the requested ones, field by field; any other mount under
/// a reserved root must have been requested as it is.
fn compare_main_mounts(
    dc: &Container,
    ac: &Container,
    main_container: &str,
    push: &mut impl FnMut(&str, String),
) {
    let of = |c: &'_ Container, name: &str| -> Vec<VolumeMount> {
        let mut mounts: Vec<VolumeMount> = c
            .volume_mounts
            .iter()
            .flatten()
            .filter(|m| m.name == name)
            .cloned()
            .collect();
        mounts.sort_by(|a, b| mount_key(a).cmp(&mount_key(b)));
        mounts
    };
    for name in RESERVED_VOLUMES {
        let (want, got) = (of(dc, name), of(ac, name));
        let same = want.len() == got.len()
            && want
                .iter()
                .zip(&got)
                .all(|(w, g)| mount_key(w) == mount_key(g));
        if !same {
            push(
                &format!("spec.containers[{main_container}].volumeMounts[{name}]"),
                format!(
                    "the reserved mount changed from {} to {}",
                    describe_mounts(&want.iter().collect::<Vec<_>>()),
                    describe_mounts(&got.iter().collect::<Vec<_>>())
                ),
            );
        }
    }
    for m in
        ac.volume_mounts.iter().flatten().filter(|m| {
            !RESERVED_VOLUMES.contains(&m.name.as_str()) && is_reserved_path(&m.mount_path)
        })
    {
        let requested = dc
            .volume_mounts
            .iter()
            .flatten()
            .any(|w| mount_key(w) == mount_key(m));
        if !requested {
            push(
                &format!("spec.containers[{main_container}].volumeMounts[{}]", m.name),
                format!(
                    "admission added a mount under a path reserved for Kandev: {}",
                    describe_mount(m)
                ),
            );
        }
    }
}

/// The main container's agentctl port: exactly as requested, exactly once (upstream counts
/// ports on 8765 or named `kandev-agentctl` with `reflect.DeepEqual`).
fn compare_main_ports(
    dc: &Container,
    ac: &Container,
    main_container: &str,
    push: &mut impl FnMut(&str, String),
) {
    let of = |c: &'_ Container| -> Vec<ContainerPort> {
        let mut ports: Vec<ContainerPort> = c
            .ports
            .iter()
            .flatten()
            .filter(|p| is_agentctl_port(p))
            .cloned()
            .collect();
        ports.sort_by(|a, b| port_key(a).cmp(&port_key(b)));
        ports
    };
    let (want, got) = (of(dc), of(ac));
    let same = want.len() == got.len()
        && want
            .iter()
            .zip(&got)
            .all(|(w, g)| port_key(w) == port_key(g));
    if !same {
        let list = |ports: &[ContainerPort]| {
            if ports.is_empty() {
                "nothing".to_owned()
            } else {
                ports
                    .iter()
                    .map(describe_port)
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        push(
            &format!("spec.containers[{main_container}].ports[{AGENTCTL_PORT}]"),
            format!(
                "the agentctl port changed from {} to {}",
                list(&want),
                list(&got)
            ),
        );
    }
}
