//! Pure translation of a composed Pod into the engine objects that give it Pod semantics.
//!
//! - An infra container owns the network, IPC and UTS namespaces (hostname = Pod name) and
//!   keeps every Pod volume mounted for the Pod's lifetime, as the kubelet does; the
//!   `fsGroup` ownership is applied through it.
//! - emptyDirs become labelled engine volumes (`medium: Memory` -> tmpfs with `sizeLimit`);
//!   claims become the named workspace volume.
//! - securityContext, resources and restartPolicy map onto container settings.
//! - All containers share a Pod-level cgroup parent carrying the Pod's summed limits.
//!
//! Any field the engine cannot honour is an [`Unsupported`] naming its path; nothing is
//! silently dropped. The allowlists below are the exact set of fields this backend honours.

use crate::pod::compose::parse_quantity;
use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountType, MountVolumeOptions, RestartPolicy,
    RestartPolicyNameEnum,
};
use k8s_openapi::api::core::v1::{Container, Pod, PodSecurityContext, SecurityContext};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

pub const LABEL_POD: &str = "acceptance.kandev.ai/pod";
pub const LABEL_POD_UID: &str = "acceptance.kandev.ai/pod-uid";
pub const LABEL_CONTAINER: &str = "acceptance.kandev.ai/container";
pub const LABEL_ROLE: &str = "acceptance.kandev.ai/role";
/// Where the infra container mounts every Pod volume.
pub const INFRA_VOLUME_ROOT: &str = "/kandev-volumes";
/// The cgroup folder (below each hierarchy's root) that holds every local Pod cgroup.
pub const CGROUP_ROOT: &str = "kandev-acceptance";

/// A field this backend cannot honour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    pub field: String,
    pub reason: String,
}

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

/// Limits of the Pod-level cgroup (kubelet: a resource's Pod limit is the sum of the
/// containers' limits when every container has one; otherwise it is unlimited).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodCgroupLimits {
    /// Path of the Pod cgroup below each hierarchy's root, e.g. `kandev-acceptance/pod<uid>`.
    pub relative_path: String,
    pub memory_bytes: Option<i64>,
    pub cpu_millis: Option<i64>,
    pub pids: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct ContainerPlan {
    pub name: String,
    pub engine_name: String,
    pub image: String,
    pub body: ContainerCreateBody,
    /// `runAsNonRoot` without a numeric user: the image's user must be checked.
    pub require_non_root_image_user: bool,
}

#[derive(Debug, Clone)]
pub struct PodPlan {
    pub pod_name: String,
    pub uid: String,
    pub labels: HashMap<String, String>,
    pub volumes: Vec<VolumePlan>,
    pub fs_group: Option<i64>,
    pub infra: ContainerPlan,
    pub init_containers: Vec<ContainerPlan>,
    pub containers: Vec<ContainerPlan>,
    pub cgroup: PodCgroupLimits,
    pub termination_grace_seconds: i64,
}

/// Inputs besides the Pod.
#[derive(Debug, Clone)]
pub struct PlanContext {
    pub uid: String,
    pub infra_image: String,
    /// The `pause` argv of the infra image.
    pub infra_command: Vec<String>,
    /// The kubelet's `podPidsLimit` this backend applies to every Pod.
    pub pod_pids_limit: i64,
}

const POD_SPEC_FIELDS: &[&str] = &[
    "containers",
    "initContainers",
    "volumes",
    "securityContext",
    "restartPolicy",
    "os",
    "nodeSelector",
    "automountServiceAccountToken",
    "serviceAccountName",
    "serviceAccount",
    "terminationGracePeriodSeconds",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "tolerations",
    "enableServiceLinks",
];
const POD_SECURITY_FIELDS: &[&str] = &[
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "fsGroup",
    "supplementalGroups",
    "seccompProfile",
    "fsGroupChangePolicy",
];
const CONTAINER_FIELDS: &[&str] = &[
    "name",
    "image",
    "imagePullPolicy",
    "command",
    "args",
    "workingDir",
    "env",
    "ports",
    "volumeMounts",
    "resources",
    "securityContext",
    "terminationMessagePath",
    "terminationMessagePolicy",
];
const CONTAINER_SECURITY_FIELDS: &[&str] = &[
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "privileged",
    "allowPrivilegeEscalation",
    "capabilities",
    "seccompProfile",
    "readOnlyRootFilesystem",
];
const VOLUME_FIELDS: &[&str] = &["name", "emptyDir", "persistentVolumeClaim", "hostPath"];
const MOUNT_FIELDS: &[&str] = &["name", "mountPath", "readOnly"];
const PORT_FIELDS: &[&str] = &["name", "containerPort", "protocol"];
const ENV_FIELDS: &[&str] = &["name", "value"];

/// Reports every key of `value` outside `allowed` (null values are absent fields).
fn check_fields(
    value: &Value,
    allowed: &[&str],
    path: &str,
    why: &str,
    out: &mut Vec<Unsupported>,
) {
    if let Value::Object(map) = value {
        for (key, v) in map {
            if !v.is_null() && !allowed.contains(&key.as_str()) {
                out.push(Unsupported {
                    field: format!("{path}.{key}"),
                    reason: why.to_owned(),
                });
            }
        }
    }
}

fn each<'a>(value: &'a Value, key: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    value
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

/// Finds every field the local backend does not honour, by path.
pub fn unsupported_fields(pod: &Pod) -> Vec<Unsupported> {
    let mut out = Vec::new();
    let spec = serde_json::to_value(&pod.spec).unwrap_or(Value::Null);
    let not_mapped = "no local engine equivalent";
    check_fields(&spec, POD_SPEC_FIELDS, "spec", not_mapped, &mut out);
    if let Some(sc) = spec.get("securityContext") {
        check_fields(
            sc,
            POD_SECURITY_FIELDS,
            "spec.securityContext",
            not_mapped,
            &mut out,
        );
    }
    for (i, v) in each(&spec, "volumes") {
        let p = format!("spec.volumes[{i}]");
        check_fields(
            v,
            VOLUME_FIELDS,
            &p,
            "only emptyDir, persistentVolumeClaim and hostPath volumes exist locally",
            &mut out,
        );
    }
    for list in ["containers", "initContainers"] {
        for (i, c) in each(&spec, list) {
            let p = format!("spec.{list}[{i}]");
            check_fields(c, CONTAINER_FIELDS, &p, not_mapped, &mut out);
            if let Some(sc) = c.get("securityContext") {
                check_fields(
                    sc,
                    CONTAINER_SECURITY_FIELDS,
                    &format!("{p}.securityContext"),
                    not_mapped,
                    &mut out,
                );
                if sc.pointer("/seccompProfile/type").and_then(Value::as_str) == Some("Localhost") {
                    out.push(Unsupported {
                        field: format!("{p}.securityContext.seccompProfile"),
                        reason: "Localhost profiles live on a node; the local engine has none"
                            .into(),
                    });
                }
            }
            for (j, m) in each(c, "volumeMounts") {
                check_fields(
                    m,
                    MOUNT_FIELDS,
                    &format!("{p}.volumeMounts[{j}]"),
                    "engine volume mounts have no subPath or propagation settings",
                    &mut out,
                );
            }
            for (j, port) in each(c, "ports") {
                check_fields(
                    port,
                    PORT_FIELDS,
                    &format!("{p}.ports[{j}]"),
                    "a local Pod publishes no host ports",
                    &mut out,
                );
            }
            for (j, env) in each(c, "env") {
                check_fields(
                    env,
                    ENV_FIELDS,
                    &format!("{p}.env[{j}]"),
                    "no API server to resolve valueFrom locally",
                    &mut out,
                );
            }
            for kind in ["limits", "requests"] {
                if let Some(Value::Object(map)) = c.pointer(&format!("/resources/{kind}")) {
                    for key in map.keys().filter(|k| *k != "cpu" && *k != "memory") {
                        out.push(Unsupported {
                            field: format!("{p}.resources.{kind}.{key}"),
                            reason: "only cpu and memory are enforced by the local engine".into(),
                        });
                    }
                }
            }
        }
    }
    if spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        == Some(true)
    {
        out.push(Unsupported {
            field: "spec.automountServiceAccountToken".into(),
            reason: "the local engine has no service account token to mount".into(),
        });
    }
    for (key, value) in spec
        .get("nodeSelector")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let ok = match key.as_str() {
            "kubernetes.io/os" => value == "linux",
            "kubernetes.io/arch" => value == crate::pod::compose::Arch::of_this_machine().as_str(),
            _ => false,
        };
        if !ok {
            out.push(Unsupported {
                field: format!("spec.nodeSelector[{key}]"),
                reason: format!("the local node does not carry {key}={value}"),
            });
        }
    }
    out
}

fn effective<T: Clone>(container: Option<&T>, pod: Option<&T>) -> Option<T> {
    container.or(pod).cloned()
}

fn user_spec(
    sc: Option<&SecurityContext>,
    psc: Option<&PodSecurityContext>,
    path: &str,
) -> Result<(Option<String>, bool), Unsupported> {
    let uid = effective(
        sc.and_then(|s| s.run_as_user.as_ref()),
        psc.and_then(|s| s.run_as_user.as_ref()),
    );
    let gid = effective(
        sc.and_then(|s| s.run_as_group.as_ref()),
        psc.and_then(|s| s.run_as_group.as_ref()),
    );
    let non_root = effective(
        sc.and_then(|s| s.run_as_non_root.as_ref()),
        psc.and_then(|s| s.run_as_non_root.as_ref()),
    )
    .unwrap_or(false);
    if non_root && uid == Some(0) {
        return Err(Unsupported {
            field: format!("{path}.securityContext.runAsNonRoot"),
            reason: "runAsNonRoot is set but runAsUser is 0; the kubelet refuses to start this container".into(),
        });
    }
    let user = match (uid, gid) {
        (Some(u), Some(g)) => Some(format!("{u}:{g}")),
        (Some(u), None) => Some(u.to_string()),
        (None, Some(_)) => {
            return Err(Unsupported {
                field: format!("{path}.securityContext.runAsGroup"),
                reason: "runAsGroup without runAsUser cannot be expressed for the engine; set runAsUser too".into(),
            });
        }
        (None, None) => None,
    };
    let unknown_user = user.is_none();
    Ok((user, non_root && unknown_user))
}

/// Builds the engine plan for a composed Pod.
pub fn plan(pod: &Pod, ctx: &PlanContext) -> Result<PodPlan, Vec<Unsupported>> {
    let mut problems = unsupported_fields(pod);
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let psc = spec.security_context.as_ref();

    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    labels.insert(LABEL_POD.into(), pod_name.clone());
    labels.insert(LABEL_POD_UID.into(), ctx.uid.clone());

    let mut volumes = Vec::new();
    for v in spec.volumes.iter().flatten() {
        let kind = if let Some(e) = &v.empty_dir {
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
            VolumeKind::EmptyDir {
                memory,
                size_limit: e.size_limit.as_ref().and_then(|q| parse_quantity(q, false)),
            }
        } else if let Some(c) = &v.persistent_volume_claim {
            VolumeKind::Claim {
                read_only: c.read_only.unwrap_or(false),
            }
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
            VolumeKind::HostPath {
                path: h.path.clone(),
                create,
            }
        } else {
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

    let volume_mount = |name: &str, target: &str, read_only: bool| -> Option<Mount> {
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
    };

    let infra_name = format!("{pod_name}-infra");
    let restart = match spec.restart_policy.as_deref() {
        Some("Always") | None => RestartPolicyNameEnum::ALWAYS,
        Some("OnFailure") => RestartPolicyNameEnum::ON_FAILURE,
        _ => RestartPolicyNameEnum::NO,
    };
    let fs_group = psc.and_then(|s| s.fs_group);
    let mut group_add: Vec<String> = fs_group.iter().map(i64::to_string).collect();
    group_add.extend(
        psc.and_then(|s| s.supplemental_groups.clone())
            .unwrap_or_default()
            .iter()
            .map(i64::to_string),
    );
    let cgroup_parent = format!("/{CGROUP_ROOT}/pod{}", ctx.uid);

    let hostname_env = if spec.host_network == Some(true) {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default()
    } else {
        pod_name.clone()
    };
    let container_plan =
        |c: &Container,
         list: &str,
         index: usize,
         role: &str,
         problems: &mut Vec<Unsupported>|
         -> ContainerPlan {
            let path = format!("spec.{list}[{index}]");
            let sc = c.security_context.as_ref();
            let (user, require_non_root_image_user) = match user_spec(sc, psc, &path) {
                Ok(u) => u,
                Err(e) => {
                    problems.push(e);
                    (None, false)
                }
            };
            let mut mounts = Vec::new();
            for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
                match volume_mount(&m.name, &m.mount_path, m.read_only.unwrap_or(false)) {
                    Some(mount) => mounts.push(mount),
                    None => problems.push(Unsupported {
                        field: format!("{path}.volumeMounts[{j}].name"),
                        reason: format!("no volume named {} in the Pod", m.name),
                    }),
                }
            }
            let privileged = sc.and_then(|s| s.privileged).unwrap_or(false);
            let mut security_opt = Vec::new();
            if sc.and_then(|s| s.allow_privilege_escalation) == Some(false) {
                security_opt.push("no-new-privileges:true".to_owned());
            }
            // Kubernetes runs a container unconfined unless a seccomp profile is asked for.
            let seccomp = effective(
                sc.and_then(|s| s.seccomp_profile.as_ref()),
                psc.and_then(|s| s.seccomp_profile.as_ref()),
            );
            if seccomp.as_ref().map(|p| p.type_.as_str()) != Some("RuntimeDefault") && !privileged {
                security_opt.push("seccomp=unconfined".to_owned());
            }
            let caps = sc.and_then(|s| s.capabilities.clone()).unwrap_or_default();
            let limits = c
                .resources
                .as_ref()
                .and_then(|r| r.limits.clone())
                .unwrap_or_default();
            let requests = c
                .resources
                .as_ref()
                .and_then(|r| r.requests.clone())
                .unwrap_or_default();
            let memory = limits.get("memory").and_then(|q| parse_quantity(q, false));
            let cpu_limit = limits.get("cpu").and_then(|q| parse_quantity(q, true));
            let cpu_request = requests
                .get("cpu")
                .or(limits.get("cpu"))
                .and_then(|q| parse_quantity(q, true));
            let mut container_labels = labels.clone();
            container_labels.insert(LABEL_CONTAINER.into(), c.name.clone());
            container_labels.insert(LABEL_ROLE.into(), role.into());
            let (entrypoint, cmd) = match (&c.command, &c.args) {
                (Some(command), args) => (
                    Some(command.clone()),
                    Some(args.clone().unwrap_or_default()),
                ),
                (None, Some(args)) => (None, Some(args.clone())),
                (None, None) => (None, None),
            };
            let host_config = HostConfig {
                network_mode: Some(if spec.host_network == Some(true) {
                    "host".into()
                } else {
                    format!("container:{infra_name}")
                }),
                ipc_mode: Some(if spec.host_ipc == Some(true) {
                    "host".into()
                } else {
                    format!("container:{infra_name}")
                }),
                pid_mode: (spec.host_pid == Some(true)).then(|| "host".to_owned()),
                privileged: Some(privileged),
                cap_add: caps.add.filter(|a| !a.is_empty()),
                cap_drop: caps.drop.filter(|d| !d.is_empty()),
                security_opt: Some(security_opt),
                readonly_rootfs: sc.and_then(|s| s.read_only_root_filesystem),
                group_add: Some(group_add.clone()).filter(|g| !g.is_empty()),
                mounts: Some(mounts),
                memory,
                // No swap beyond the limit, as the kubelet configures it.
                memory_swap: memory,
                nano_cpus: cpu_limit.map(|m| m * 1_000_000),
                cpu_shares: cpu_request.map(|m| (m * 1024 / 1000).max(2)),
                cgroup_parent: Some(cgroup_parent.clone()),
                restart_policy: Some(RestartPolicy {
                    name: Some(if role == "init" {
                        RestartPolicyNameEnum::NO
                    } else {
                        restart
                    }),
                    maximum_retry_count: None,
                }),
                init: Some(false),
                ..Default::default()
            };
            ContainerPlan {
                name: c.name.clone(),
                engine_name: format!("{pod_name}-{}", c.name),
                image: c.image.clone().unwrap_or_default(),
                require_non_root_image_user,
                body: ContainerCreateBody {
                    image: c.image.clone(),
                    entrypoint,
                    cmd,
                    working_dir: c.working_dir.clone(),
                    user,
                    // As every CRI runtime does, HOSTNAME names the Pod (the node, with
                    // hostNetwork); the node view finds the Pod's processes by it.
                    env: Some(
                        std::iter::once(format!("HOSTNAME={hostname_env}"))
                            .chain(c.env.iter().flatten().map(|e| {
                                format!("{}={}", e.name, e.value.clone().unwrap_or_default())
                            }))
                            .collect(),
                    ),
                    labels: Some(container_labels),
                    host_config: Some(host_config),
                    ..Default::default()
                },
            }
        };

    let init_containers: Vec<ContainerPlan> = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| container_plan(c, "initContainers", i, "init", &mut problems))
        .collect();
    let containers: Vec<ContainerPlan> = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| container_plan(c, "containers", i, "container", &mut problems))
        .collect();

    let mut infra_labels = labels.clone();
    infra_labels.insert(LABEL_ROLE.into(), "infra".into());
    infra_labels.insert(LABEL_CONTAINER.into(), "infra".into());
    let infra_mounts = volumes
        .iter()
        .filter(|v| !matches!(v.kind, VolumeKind::HostPath { .. }))
        .filter_map(|v| volume_mount(&v.name, &format!("{INFRA_VOLUME_ROOT}/{}", v.name), false))
        .collect();
    let infra = ContainerPlan {
        name: "infra".into(),
        engine_name: infra_name,
        image: ctx.infra_image.clone(),
        require_non_root_image_user: false,
        body: ContainerCreateBody {
            image: Some(ctx.infra_image.clone()),
            entrypoint: Some(ctx.infra_command.clone()),
            hostname: Some(pod_name.clone()),
            labels: Some(infra_labels),
            host_config: Some(HostConfig {
                network_mode: Some(if spec.host_network == Some(true) {
                    "host".into()
                } else {
                    "bridge".into()
                }),
                ipc_mode: Some(if spec.host_ipc == Some(true) {
                    "host".into()
                } else {
                    "shareable".into()
                }),
                mounts: Some(infra_mounts),
                cgroup_parent: Some(cgroup_parent),
                restart_policy: Some(RestartPolicy {
                    name: Some(RestartPolicyNameEnum::ALWAYS),
                    maximum_retry_count: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        },
    };

    let sum = |select: &dyn Fn(&Container) -> Option<i64>| -> Option<i64> {
        spec.containers.iter().map(select).sum::<Option<i64>>()
    };
    let limit = |c: &Container, key: &str, milli: bool| {
        c.resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get(key))
            .and_then(|q| parse_quantity(q, milli))
    };
    let cgroup = PodCgroupLimits {
        relative_path: format!("{CGROUP_ROOT}/pod{}", ctx.uid),
        memory_bytes: sum(&|c| limit(c, "memory", false)),
        cpu_millis: sum(&|c| limit(c, "cpu", true)),
        pids: Some(ctx.pod_pids_limit),
    };

    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(PodPlan {
        pod_name,
        uid: ctx.uid.clone(),
        labels,
        volumes,
        fs_group,
        infra,
        init_containers,
        containers,
        cgroup,
        termination_grace_seconds: spec.termination_grace_period_seconds.unwrap_or(30),
    })
}

/// What the local backend accepts but does not enforce the way a kubelet does, one sentence
/// each, for the report: nothing is dropped silently.
pub fn unenforced(pod: &Pod) -> Vec<String> {
    let mut notes = Vec::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        if let Some(e) = &v.empty_dir
            && e.medium.as_deref() != Some("Memory")
            && let Some(limit) = &e.size_limit
        {
            notes.push(format!(
                "emptyDir {} sizeLimit {} is recorded but not enforced locally (a kubelet evicts the Pod when it is exceeded)",
                v.name, limit.0
            ));
        }
    }
    notes
}

/// Labels as the engine wants them.
pub fn engine_labels(labels: &BTreeMap<String, String>) -> HashMap<String, String> {
    labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::compose::{Arch, ComposeInput, WorkspaceSource, compose_pod};
    use crate::pod::identity::SessionIdentity;
    use crate::pod::template;

    fn full_worker_pod() -> Pod {
        let text = std::fs::read_to_string(crate::paths::default_template()).unwrap_or_default();
        let rendered = template::render(&text, "worker:test", "daemon:test");
        let t = template::parse(&rendered.text).unwrap_or_default();
        let identity = SessionIdentity::new("run", "x::y", 0);
        compose_pod(&ComposeInput {
            template: &t,
            identity: &identity,
            namespace: "local",
            main_container: "kandev-agent",
            arch: Arch::of_this_machine(),
            workspace: WorkspaceSource::Claim("ws".into()),
            create_nonce: "n",
        })
        .unwrap_or_default()
    }

    fn ctx() -> PlanContext {
        PlanContext {
            uid: "u1".into(),
            infra_image: "infra".into(),
            infra_command: vec!["/pause".into()],
            pod_pids_limit: 4096,
        }
    }

    #[test]
    fn full_worker_maps_security_and_limits() {
        let plan = plan(&full_worker_pod(), &ctx()).map_err(|e| format!("{e:?}"));
        let plan = match plan {
            Ok(p) => p,
            Err(e) => return assert!(e.is_empty(), "{e}"),
        };
        let agent = plan
            .containers
            .iter()
            .find(|c| c.name == "kandev-agent")
            .map(|c| c.body.clone())
            .unwrap_or_default();
        let hc = agent.host_config.unwrap_or_default();
        assert_eq!(agent.user.as_deref(), Some("1000:1000"));
        assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
        assert_eq!(
            hc.security_opt,
            Some(vec!["no-new-privileges:true".to_string()])
        );
        assert_eq!(hc.group_add, Some(vec!["1000".to_string()]));
        assert_eq!(hc.memory, Some(4 << 30));
        assert_eq!(hc.nano_cpus, Some(2_000_000_000));
        assert_eq!(
            hc.network_mode.as_deref(),
            Some(plan.infra.engine_name.as_str())
                .map(|n| format!("container:{n}"))
                .as_deref()
        );
        let daemon = plan
            .containers
            .iter()
            .find(|c| c.name == "docker-engine")
            .map(|c| c.body.clone())
            .unwrap_or_default();
        assert_eq!(daemon.host_config.and_then(|h| h.privileged), Some(true));
        assert_eq!(plan.cgroup.memory_bytes, Some(7 << 30));
        assert_eq!(plan.cgroup.cpu_millis, Some(4000));
        assert_eq!(plan.cgroup.relative_path, "kandev-acceptance/podu1");
        let socket = plan
            .volumes
            .iter()
            .find(|v| v.name == "docker-socket")
            .map(|v| v.kind.clone());
        assert_eq!(
            socket,
            Some(VolumeKind::EmptyDir {
                memory: true,
                size_limit: Some(16 << 20)
            })
        );
    }

    #[test]
    fn unhonoured_fields_are_named() {
        let mut pod = full_worker_pod();
        if let Some(spec) = pod.spec.as_mut() {
            spec.dns_policy = Some("None".into());
            if let Some(c) = spec.containers.first_mut() {
                c.readiness_probe = Some(Default::default());
                if let Some(m) = c.volume_mounts.as_mut().and_then(|m| m.first_mut()) {
                    m.sub_path = Some("x".into());
                }
            }
        }
        let problems = plan(&pod, &ctx()).err().unwrap_or_default();
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert!(fields.contains(&"spec.dnsPolicy"), "{fields:?}");
        assert!(
            fields.contains(&"spec.containers[0].readinessProbe"),
            "{fields:?}"
        );
        assert!(
            fields.contains(&"spec.containers[0].volumeMounts[0].subPath"),
            "{fields:?}"
        );
    }

    #[test]
    fn unenforced_disk_size_limits_are_named() {
        let notes = unenforced(&full_worker_pod());
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].contains("emptyDir docker-data sizeLimit 12Gi"),
            "{notes:?}"
        );
    }

    #[test]
    fn pod_memory_is_unlimited_when_a_container_has_no_limit() {
        let mut pod = full_worker_pod();
        if let Some(c) = pod.spec.as_mut().and_then(|s| s.containers.first_mut()) {
            c.resources = None;
        }
        let plan = plan(&pod, &ctx()).ok().map(|p| p.cgroup.memory_bytes);
        assert_eq!(plan, Some(None));
    }
}
