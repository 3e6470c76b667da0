//! Kandev's template rules (`ValidatePodTemplate` and the workspace-grant exception): every
//! error and warning at once, each at its field path.

use super::finding::{PATH_PREFIX, TemplateFinding, error, warning};
use super::reserved::{
    RESERVED_VOLUMES, clean_path, is_agentctl_port, is_at_or_below, is_owned_label,
    is_reserved_path, is_workspace_grant,
};
use k8s_openapi::api::core::v1::{Container, NodeSelectorTerm, PodSpec, PodTemplate, VolumeMount};
use serde::{Deserialize, Serialize};

/// The three workspace modes of a Kandev profile.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceMode {
    ManagedPvc,
    EmptyDir,
    ExistingClaim,
}

/// What the rules need besides the template itself.
#[derive(Debug, Clone)]
pub struct RuleOptions {
    pub main_container: String,
    pub workspace_mode: WorkspaceMode,
    /// The workspace claim name in PVC modes (for the claim-alias rule).
    pub workspace_claim: Option<String>,
}

fn touches_workspace(mount: &VolumeMount) -> bool {
    mount.name == "kandev-workspace" || is_at_or_below(&mount.mount_path, "/workspace")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Main,
    Ordinary,
    Init,
}

/// Applies Kandev's template rules; returns every error and warning at once.
pub fn validate(template: &PodTemplate, options: &RuleOptions) -> Vec<TemplateFinding> {
    let mut findings = Vec::new();
    let root = format!("{PATH_PREFIX}.template");
    let Some(pod) = template.template.as_ref() else {
        findings.push(error(format!("{PATH_PREFIX}.template"), "is required"));
        return findings;
    };
    if let Some(meta) = &pod.metadata {
        let m = format!("{root}.metadata");
        let forbidden = [
            ("name", meta.name.is_some()),
            ("generateName", meta.generate_name.is_some()),
            ("namespace", meta.namespace.is_some()),
            ("uid", meta.uid.is_some()),
            ("resourceVersion", meta.resource_version.is_some()),
            ("generation", meta.generation.is_some()),
            ("creationTimestamp", meta.creation_timestamp.is_some()),
            ("deletionTimestamp", meta.deletion_timestamp.is_some()),
            ("ownerReferences", meta.owner_references.is_some()),
            ("finalizers", meta.finalizers.is_some()),
            ("managedFields", meta.managed_fields.is_some()),
        ];
        for (field, set) in forbidden {
            if set {
                findings.push(error(format!("{m}.{field}"), "is reserved for Kandev"));
            }
        }
        for key in meta.labels.iter().flatten().map(|(k, _)| k) {
            if is_owned_label(key) {
                findings.push(error(
                    format!("{m}.labels[{key}]"),
                    "is a label key reserved for Kandev",
                ));
            }
        }
        for key in meta.annotations.iter().flatten().map(|(k, _)| k) {
            if key.starts_with("kandev.ai/") {
                findings.push(error(
                    format!("{m}.annotations[{key}]"),
                    "is an annotation key reserved for Kandev",
                ));
            }
        }
    }
    let Some(spec) = pod.spec.as_ref() else {
        findings.push(error(format!("{root}.spec"), "is required"));
        return findings;
    };
    validate_spec(spec, &format!("{root}.spec"), options, &mut findings);
    findings
}

fn validate_spec(
    spec: &PodSpec,
    s: &str,
    options: &RuleOptions,
    findings: &mut Vec<TemplateFinding>,
) {
    if spec.restart_policy.is_some() {
        findings.push(error(
            format!("{s}.restartPolicy"),
            "is reserved for Kandev",
        ));
    }
    if spec.node_name.is_some() {
        findings.push(error(format!("{s}.nodeName"), "is reserved for Kandev"));
    }
    if spec.os.is_some() {
        findings.push(error(
            format!("{s}.os"),
            "is reserved for Kandev (set by the profile platform)",
        ));
    }
    for key in spec.node_selector.iter().flatten().map(|(k, _)| k) {
        if key == "kubernetes.io/os" || key == "kubernetes.io/arch" {
            findings.push(error(
                format!("{s}.nodeSelector[{key}]"),
                "is reserved for Kandev (set by the profile platform)",
            ));
        }
    }
    validate_node_affinity(spec, s, findings);
    for (i, volume) in spec.volumes.iter().flatten().enumerate() {
        let v = format!("{s}.volumes[{i}]");
        if RESERVED_VOLUMES.contains(&volume.name.as_str()) {
            findings.push(error(
                format!("{v}.name"),
                format!("volume name {} is reserved for Kandev", volume.name),
            ));
        }
        if let (Some(claim), Some(pvc)) =
            (&options.workspace_claim, &volume.persistent_volume_claim)
            && options.workspace_mode != WorkspaceMode::EmptyDir
            && &pvc.claim_name == claim
        {
            findings.push(error(
                format!("{v}.persistentVolumeClaim.claimName"),
                "workspace claim must only be referenced by the owned workspace volume",
            ));
        }
        if volume.host_path.is_some() {
            findings.push(warning(
                format!("{v}.hostPath"),
                "hostPath volumes expose the node's filesystem",
            ));
        }
    }
    if spec.automount_service_account_token == Some(true) {
        findings.push(warning(
            format!("{s}.automountServiceAccountToken"),
            "mounts a service-account token into the task Pod",
        ));
    }
    for (field, set) in [
        ("hostNetwork", spec.host_network == Some(true)),
        ("hostPID", spec.host_pid == Some(true)),
        ("hostIPC", spec.host_ipc == Some(true)),
    ] {
        if set {
            findings.push(warning(
                format!("{s}.{field}"),
                "shares a host namespace with the task Pod",
            ));
        }
    }

    let mut names = std::collections::BTreeMap::<&str, usize>::new();
    let mut main_count = 0;
    for (i, c) in spec.containers.iter().enumerate() {
        *names.entry(&c.name).or_default() += 1;
        let role = if c.name == options.main_container {
            main_count += 1;
            Role::Main
        } else {
            Role::Ordinary
        };
        validate_container(c, &format!("{s}.containers[{i}]"), role, findings);
    }
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        *names.entry(&c.name).or_default() += 1;
        validate_container(c, &format!("{s}.initContainers[{i}]"), Role::Init, findings);
    }
    for (i, c) in spec.ephemeral_containers.iter().flatten().enumerate() {
        let p = format!("{s}.ephemeralContainers[{i}]");
        if c.env_from.is_some() {
            findings.push(error(
                format!("{p}.envFrom"),
                "is not allowed; list env entries explicitly",
            ));
        }
        for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
            if RESERVED_VOLUMES.contains(&m.name.as_str()) || is_reserved_path(&m.mount_path) {
                findings.push(error(
                    format!("{p}.volumeMounts[{j}]"),
                    "ephemeral containers cannot mount Kandev's reserved volumes or paths (the workspace grant is for ordinary containers only)",
                ));
            }
        }
    }
    for (name, count) in names {
        if count > 1 {
            findings.push(error(
                format!("{s}.containers"),
                format!("container name {name} is used {count} times"),
            ));
        }
    }
    if main_count == 0 {
        findings.push(error(
            format!("{s}.containers"),
            format!("must contain the main container {}", options.main_container),
        ));
    }
}

/// Node affinity on the platform keys is the profile's (upstream's `validateNodeAffinity`):
/// every match expression or match field on `kubernetes.io/os` / `kubernetes.io/arch`, in
/// required and preferred terms, is refused at its `key`.
fn validate_node_affinity(spec: &PodSpec, s: &str, findings: &mut Vec<TemplateFinding>) {
    let Some(affinity) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
    else {
        return;
    };
    let base = format!("{s}.affinity.nodeAffinity");
    let mut terms: Vec<(String, &NodeSelectorTerm)> = Vec::new();
    if let Some(required) = &affinity.required_during_scheduling_ignored_during_execution {
        for (i, term) in required.node_selector_terms.iter().enumerate() {
            terms.push((
                format!(
                    "{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
                ),
                term,
            ));
        }
    }
    for (i, term) in affinity
        .preferred_during_scheduling_ignored_during_execution
        .iter()
        .flatten()
        .enumerate()
    {
        terms.push((
            format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"),
            &term.preference,
        ));
    }
    for (path, term) in terms {
        for (list, requirements) in [
            ("matchExpressions", term.match_expressions.as_ref()),
            ("matchFields", term.match_fields.as_ref()),
        ] {
            for (j, r) in requirements.into_iter().flatten().enumerate() {
                if r.key == "kubernetes.io/os" || r.key == "kubernetes.io/arch" {
                    findings.push(error(
                        format!("{path}.{list}[{j}].key"),
                        "is reserved for Kandev (set by the profile platform)",
                    ));
                }
            }
        }
    }
}

fn validate_container(c: &Container, p: &str, role: Role, findings: &mut Vec<TemplateFinding>) {
    if c.image.as_deref().unwrap_or("").is_empty() {
        findings.push(error(format!("{p}.image"), "is required"));
    }
    if role == Role::Main {
        for (field, set) in [
            ("command", c.command.is_some()),
            ("args", c.args.is_some()),
            ("workingDir", c.working_dir.is_some()),
        ] {
            if set {
                findings.push(error(format!("{p}.{field}"), "is reserved for Kandev"));
            }
        }
    }
    if c.env_from.is_some() {
        findings.push(error(
            format!("{p}.envFrom"),
            "is not allowed; list env entries explicitly",
        ));
    }
    for (j, env) in c.env.iter().flatten().enumerate() {
        if env.name == "HOME"
            || env.name.starts_with("AGENTCTL_")
            || env.name.starts_with("KANDEV_")
        {
            findings.push(error(
                format!("{p}.env[{j}].name"),
                format!("{} is reserved for Kandev", env.name),
            ));
        }
    }
    for (j, port) in c.ports.iter().flatten().enumerate() {
        if is_agentctl_port(port) {
            findings.push(error(
                format!("{p}.ports[{j}]"),
                "port 8765 / kandev-agentctl is reserved for Kandev",
            ));
        }
        if port.host_port.is_some() {
            findings.push(warning(
                format!("{p}.ports[{j}].hostPort"),
                "binds a port on the node",
            ));
        }
    }
    if c.security_context.as_ref().and_then(|s| s.privileged) == Some(true) {
        findings.push(warning(
            format!("{p}.securityContext.privileged"),
            "runs privileged: the container can control the node",
        ));
    }
    let mounts: Vec<&VolumeMount> = c.volume_mounts.iter().flatten().collect();
    let grants = mounts.iter().filter(|m| touches_workspace(m)).count();
    let has_grant = role == Role::Ordinary && mounts.iter().any(|m| is_workspace_grant(m));
    for (j, m) in mounts.iter().enumerate() {
        let mp = format!("{p}.volumeMounts[{j}]");
        if touches_workspace(m) && role == Role::Ordinary {
            if !is_workspace_grant(m) || grants > 1 {
                findings.push(error(
                    mp,
                    "workspace grant must be one direct RO/RW mount at /workspace",
                ));
            }
            continue;
        }
        if RESERVED_VOLUMES.contains(&m.name.as_str()) || is_reserved_path(&m.mount_path) {
            let why = match role {
                Role::Init => "init containers cannot mount Kandev's reserved volumes or paths",
                _ => "mounts a volume or path reserved for Kandev",
            };
            findings.push(error(mp, why));
            continue;
        }
        if has_grant {
            let cleaned = clean_path(&m.mount_path);
            if cleaned == "/" || "/workspace".starts_with(&format!("{cleaned}/")) {
                findings.push(error(mp, "workspace grant overlaps another mount"));
            }
        }
    }
    for (j, d) in c.volume_devices.iter().flatten().enumerate() {
        if RESERVED_VOLUMES.contains(&d.name.as_str()) || is_reserved_path(&d.device_path) {
            findings.push(error(
                format!("{p}.volumeDevices[{j}]"),
                "uses a volume or path reserved for Kandev",
            ));
        }
    }
}
