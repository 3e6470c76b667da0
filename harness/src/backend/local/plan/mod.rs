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
//! silently dropped. The allowlists in `fields` are the exact set of fields this backend
//! honours.

mod containers;
mod fields;
mod resources;
mod security;
mod volumes;

pub use containers::ContainerPlan;
pub use fields::unsupported_fields;
pub use resources::PodCgroupLimits;
pub use volumes::{HostPathCreate, VolumeKind, VolumePlan};

use containers::{PodShared, container_plan, infra_container};
use k8s_openapi::api::core::v1::Pod;
use resources::pod_cgroup_limits;
use std::collections::{BTreeMap, HashMap};
use volumes::volume_plans;

pub use crate::pod::identity::{
    LABEL_CONTAINER, LABEL_POD, LABEL_POD_UID, LABEL_ROLE, LABEL_WORKSPACE_UID,
};
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
    /// The engine network a Pod's infra container joins (`bridge`: the default).
    pub pod_network: String,
    /// The node's hostname (`/proc/sys/kernel/hostname`): `HOSTNAME` of a hostNetwork Pod.
    pub node_hostname: String,
    /// The node's memory (`MemTotal`): a kubelet's OOM scores are shares of it.
    pub node_memory_bytes: i64,
}

/// Builds the engine plan for a composed Pod.
pub fn plan(pod: &Pod, ctx: &PlanContext) -> Result<PodPlan, Vec<Unsupported>> {
    let mut problems = unsupported_fields(pod);
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let mut labels: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    labels.insert(LABEL_POD.into(), pod_name.clone());
    labels.insert(LABEL_POD_UID.into(), ctx.uid.clone());
    let volumes = volume_plans(&spec, &pod_name, &mut problems);

    let shared = PodShared::new(&pod_name, &spec, &labels, &volumes, ctx);
    let init_containers: Vec<ContainerPlan> = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| container_plan(&shared, c, "initContainers", i, "init", &mut problems))
        .collect();
    let containers: Vec<ContainerPlan> = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| container_plan(&shared, c, "containers", i, "container", &mut problems))
        .collect();
    let infra = infra_container(&shared);
    let cgroup = pod_cgroup_limits(&spec, ctx);

    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(PodPlan {
        pod_name,
        uid: ctx.uid.clone(),
        labels,
        volumes,
        fs_group: spec.security_context.as_ref().and_then(|s| s.fs_group),
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
    let spec = pod.spec.clone().unwrap_or_default();
    if let Some(policy) = spec
        .dns_policy
        .as_deref()
        .filter(|p| p.starts_with("ClusterFirst"))
    {
        notes.push(format!(
            "dnsPolicy {policy} is accepted but there is no cluster DNS locally: the Pod resolves names through the engine's resolver, as with dnsPolicy Default"
        ));
    }
    if let Some(scheduler) = spec
        .scheduler_name
        .as_deref()
        .filter(|s| *s != "default-scheduler")
    {
        notes.push(format!(
            "schedulerName {scheduler} is accepted but no scheduler places a local Pod: it runs on the one local node"
        ));
    }
    if let Some(class) = &spec.priority_class_name {
        notes.push(format!(
            "priorityClassName {class} is recorded but not enforced locally (no preemption, no eviction order)"
        ));
    }
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
    {
        // `IfNotPresent` is honoured as it is (the image is there, or the create fails as a
        // pull would); `Always` would pull every time.
        if c.image_pull_policy.as_deref() == Some("Always") {
            notes.push(format!(
                "container {} imagePullPolicy Always is accepted but the local engine never pulls: image {} must already be in it",
                c.name,
                c.image.clone().unwrap_or_default()
            ));
        }
    }
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
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

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
            pod_network: "bridge".into(),
            node_hostname: "node".into(),
            node_memory_bytes: 16 << 30,
        }
    }

    /// The kubelet's OOM scores by QoS class (pkg/kubelet/qos/policy.go, v1.37): BestEffort
    /// 1000; Burstable a share of the node's memory within 3..=999; Guaranteed (-997) left at
    /// the engine's 0, which an engine without CAP_SYS_RESOURCE could not lower.
    #[test]
    fn containers_get_the_kubelets_oom_score_by_qos_class() {
        let adj_with = |requests: Option<(&str, &str)>, limits: Option<(&str, &str)>| {
            let mut pod = full_worker_pod();
            let spec = pod.spec.get_or_insert_with(Default::default);
            let init = spec.init_containers.iter_mut().flatten();
            for c in spec.containers.iter_mut().chain(init) {
                let list = |pair: Option<(&str, &str)>| {
                    pair.map(|(cpu, memory)| {
                        [("cpu", cpu), ("memory", memory)]
                            .into_iter()
                            .map(|(k, v)| (k.to_owned(), Quantity(v.to_owned())))
                            .collect()
                    })
                };
                c.resources = Some(ResourceRequirements {
                    requests: list(requests),
                    limits: list(limits),
                    ..Default::default()
                });
            }
            let plan = plan(&pod, &ctx()).map_err(|e| format!("{e:?}"));
            plan.ok()
                .and_then(|p| p.containers.into_iter().find(|c| c.name == "docker-engine"))
                .and_then(|c| c.body.host_config)
                .and_then(|h| h.oom_score_adj)
        };
        assert_eq!(adj_with(None, None), Some(1000));
        assert_eq!(adj_with(Some(("1", "8Gi")), Some(("2", "16Gi"))), Some(500));
        assert_eq!(adj_with(Some(("1", "1Ki")), Some(("2", "16Gi"))), Some(999));
        assert_eq!(adj_with(Some(("1", "16Gi")), Some(("2", "32Gi"))), Some(3));
        assert_eq!(adj_with(None, Some(("1", "1Gi"))), None);
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
        // Burstable: 1000 - 1000 * 512Mi / 16Gi, as a kubelet scores it.
        assert_eq!(hc.oom_score_adj, Some(969));
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

    /// Issue 32, defect 10: `kubectl run p --image=i -- sleep 300` as an API server stores
    /// it (the fields `SetDefaults_PodSpec` and the Priority plugin fill in) is a Pod the
    /// local node runs; what it cannot do as a kubelet would is a note, not a refusal.
    #[test]
    fn a_pod_as_the_api_server_defaults_it_is_planned_with_notes() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "labels": {"run": "p"}},
            "spec": {
                "containers": [{"name": "p", "image": "img", "args": ["sleep", "300"],
                    "resources": {}, "imagePullPolicy": "Always",
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File"}],
                "dnsPolicy": "ClusterFirst", "restartPolicy": "Always",
                "enableServiceLinks": true, "schedulerName": "default-scheduler",
                "terminationGracePeriodSeconds": 30, "securityContext": {},
                "priority": 0, "preemptionPolicy": "PreemptLowerPriority",
                "serviceAccountName": "default", "serviceAccount": "default",
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                    "effect": "NoExecute", "tolerationSeconds": 300}]}}))
        .unwrap_or_default();
        let planned = plan(&pod, &ctx());
        assert!(planned.is_ok(), "{:?}", planned.err());
        let notes = unenforced(&pod);
        assert!(
            notes.iter().any(|n| n.contains("dnsPolicy ClusterFirst")),
            "{notes:?}"
        );
        assert!(
            notes.iter().any(|n| n.contains("imagePullPolicy Always")),
            "{notes:?}"
        );
    }

    #[test]
    fn a_host_network_pods_defaulted_host_ports_are_its_own() {
        let pod = |host_port: i32| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"},
                "spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "img",
                    "ports": [{"containerPort": 80, "hostPort": host_port}]}]}}))
            .unwrap_or_default()
        };
        assert!(plan(&pod(80), &ctx()).is_ok());
        let refused = plan(&pod(8080), &ctx()).err().unwrap_or_default();
        assert_eq!(
            refused.first().map(|u| u.field.as_str()),
            Some("spec.containers[0].ports[0].hostPort")
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
