//! The Pod's containers as engine containers: init and app containers, and the infra container.

use super::resources::{ContainerResources, cgroup_parent, oom_score_adj};
use super::security::{added_groups, security_options, user_spec};
use super::volumes::{VolumeKind, VolumePlan, volume_mount};
use super::{INFRA_VOLUME_ROOT, LABEL_CONTAINER, LABEL_ROLE, PlanContext, Unsupported};
use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, RestartPolicy, RestartPolicyNameEnum,
};
use k8s_openapi::api::core::v1::{Container, PodSpec};
use std::collections::HashMap;

#[derive(Debug, Clone)]
pub struct ContainerPlan {
    pub name: String,
    pub engine_name: String,
    pub image: String,
    pub body: ContainerCreateBody,
    /// `runAsNonRoot` without a numeric user: the image's user must be checked.
    pub require_non_root_image_user: bool,
}

/// What every container of one Pod shares.
pub(super) struct PodShared<'a> {
    pod_name: &'a str,
    spec: &'a PodSpec,
    labels: &'a HashMap<String, String>,
    volumes: &'a [VolumePlan],
    ctx: &'a PlanContext,
    /// The engine name of the infra container, whose namespaces the others join.
    infra_name: String,
    cgroup_parent: String,
    restart: RestartPolicyNameEnum,
    /// `fsGroup` and `supplementalGroups`.
    group_add: Vec<String>,
    /// The value of `HOSTNAME` in every container.
    hostname: String,
}

impl<'a> PodShared<'a> {
    pub(super) fn new(
        pod_name: &'a str,
        spec: &'a PodSpec,
        labels: &'a HashMap<String, String>,
        volumes: &'a [VolumePlan],
        ctx: &'a PlanContext,
    ) -> Self {
        let restart = match spec.restart_policy.as_deref() {
            Some("Always") | None => RestartPolicyNameEnum::ALWAYS,
            Some("OnFailure") => RestartPolicyNameEnum::ON_FAILURE,
            _ => RestartPolicyNameEnum::NO,
        };
        let hostname = if spec.host_network == Some(true) {
            ctx.node_hostname.clone()
        } else {
            pod_name.to_owned()
        };
        Self {
            pod_name,
            spec,
            labels,
            volumes,
            ctx,
            infra_name: format!("{pod_name}-infra"),
            cgroup_parent: cgroup_parent(ctx),
            restart,
            group_add: added_groups(spec.security_context.as_ref()),
            hostname,
        }
    }
}

/// The engine container of `c`, the `index`th of `spec.<list>`; `role` is `init` or
/// `container`. What cannot be honoured goes to `problems`.
pub(super) fn container_plan(
    pod: &PodShared,
    c: &Container,
    list: &str,
    index: usize,
    role: &str,
    problems: &mut Vec<Unsupported>,
) -> ContainerPlan {
    let path = format!("spec.{list}[{index}]");
    let psc = pod.spec.security_context.as_ref();
    let (user, require_non_root_image_user) =
        match user_spec(c.security_context.as_ref(), psc, &path) {
            Ok(u) => u,
            Err(e) => {
                problems.push(e);
                (None, false)
            }
        };
    let mounts = container_mounts(pod.volumes, c, &path, problems);
    let mut labels = pod.labels.clone();
    labels.insert(LABEL_CONTAINER.into(), c.name.clone());
    labels.insert(LABEL_ROLE.into(), role.into());
    let (entrypoint, cmd) = match (&c.command, &c.args) {
        (Some(command), args) => (
            Some(command.clone()),
            Some(args.clone().unwrap_or_default()),
        ),
        (None, Some(args)) => (None, Some(args.clone())),
        (None, None) => (None, None),
    };
    // As every CRI runtime does, HOSTNAME names the Pod (the node, with hostNetwork); the
    // node view finds the Pod's processes by it.
    let env = std::iter::once(format!("HOSTNAME={}", pod.hostname))
        .chain(
            c.env
                .iter()
                .flatten()
                .map(|e| format!("{}={}", e.name, e.value.clone().unwrap_or_default())),
        )
        .collect();
    ContainerPlan {
        name: c.name.clone(),
        engine_name: format!("{}-{}", pod.pod_name, c.name),
        image: c.image.clone().unwrap_or_default(),
        require_non_root_image_user,
        body: ContainerCreateBody {
            image: c.image.clone(),
            entrypoint,
            cmd,
            working_dir: c.working_dir.clone(),
            user,
            env: Some(env),
            labels: Some(labels),
            host_config: Some(host_config(pod, c, role, mounts)),
            ..Default::default()
        },
    }
}

/// The engine mounts of `c`'s volumeMounts (one naming no Pod volume is a problem).
fn container_mounts(
    volumes: &[VolumePlan],
    c: &Container,
    path: &str,
    problems: &mut Vec<Unsupported>,
) -> Vec<Mount> {
    let mut mounts = Vec::new();
    for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
        match volume_mount(
            volumes,
            &m.name,
            &m.mount_path,
            m.read_only.unwrap_or(false),
        ) {
            Some(mount) => mounts.push(mount),
            None => problems.push(Unsupported {
                field: format!("{path}.volumeMounts[{j}].name"),
                reason: format!("no volume named {} in the Pod", m.name),
            }),
        }
    }
    mounts
}

/// The engine settings of `c`: the infra container's namespaces (or the host's), its
/// securityContext, resources, the Pod cgroup and the restart policy.
fn host_config(pod: &PodShared, c: &Container, role: &str, mounts: Vec<Mount>) -> HostConfig {
    let sc = c.security_context.as_ref();
    let psc = pod.spec.security_context.as_ref();
    let privileged = sc.and_then(|s| s.privileged).unwrap_or(false);
    let caps = sc.and_then(|s| s.capabilities.clone()).unwrap_or_default();
    let resources = ContainerResources::of(c);
    let infra_or_host = |host: Option<bool>| {
        if host == Some(true) {
            "host".into()
        } else {
            format!("container:{}", pod.infra_name)
        }
    };
    HostConfig {
        network_mode: Some(infra_or_host(pod.spec.host_network)),
        ipc_mode: Some(infra_or_host(pod.spec.host_ipc)),
        pid_mode: (pod.spec.host_pid == Some(true)).then(|| "host".to_owned()),
        privileged: Some(privileged),
        cap_add: caps.add.filter(|a| !a.is_empty()),
        cap_drop: caps.drop.filter(|d| !d.is_empty()),
        security_opt: Some(security_options(sc, psc, privileged)),
        readonly_rootfs: sc.and_then(|s| s.read_only_root_filesystem),
        group_add: Some(pod.group_add.clone()).filter(|g| !g.is_empty()),
        mounts: Some(mounts),
        memory: resources.memory,
        // No swap beyond the limit, as the kubelet configures it.
        memory_swap: resources.memory,
        nano_cpus: resources.nano_cpus,
        cpu_shares: resources.cpu_shares,
        oom_score_adj: oom_score_adj(pod.spec, c, pod.ctx.node_memory_bytes),
        cgroup_parent: Some(pod.cgroup_parent.clone()),
        restart_policy: Some(RestartPolicy {
            name: Some(if role == "init" {
                RestartPolicyNameEnum::NO
            } else {
                pod.restart
            }),
            maximum_retry_count: None,
        }),
        init: Some(false),
        ..Default::default()
    }
}

/// The infra container: it owns the Pod's network, IPC and UTS namespaces and keeps every
/// engine volume of the Pod mounted below [`INFRA_VOLUME_ROOT`].
pub(super) fn infra_container(pod: &PodShared) -> ContainerPlan {
    let mut labels = pod.labels.clone();
    labels.insert(LABEL_ROLE.into(), "infra".into());
    labels.insert(LABEL_CONTAINER.into(), "infra".into());
    let mounts = pod
        .volumes
        .iter()
        .filter(|v| !matches!(v.kind, VolumeKind::HostPath { .. }))
        .filter_map(|v| {
            let target = format!("{INFRA_VOLUME_ROOT}/{}", v.name);
            volume_mount(pod.volumes, &v.name, &target, false)
        })
        .collect();
    let own_or_host =
        |host: Option<bool>, own: &str| if host == Some(true) { "host" } else { own }.to_owned();
    ContainerPlan {
        name: "infra".into(),
        engine_name: pod.infra_name.clone(),
        image: pod.ctx.infra_image.clone(),
        require_non_root_image_user: false,
        body: ContainerCreateBody {
            image: Some(pod.ctx.infra_image.clone()),
            entrypoint: Some(pod.ctx.infra_command.clone()),
            hostname: Some(pod.pod_name.to_owned()),
            labels: Some(labels),
            host_config: Some(HostConfig {
                network_mode: Some(own_or_host(pod.spec.host_network, &pod.ctx.pod_network)),
                ipc_mode: Some(own_or_host(pod.spec.host_ipc, "shareable")),
                mounts: Some(mounts),
                cgroup_parent: Some(pod.cgroup_parent.clone()),
                restart_policy: Some(RestartPolicy {
                    name: Some(RestartPolicyNameEnum::ALWAYS),
                    maximum_retry_count: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    }
}
