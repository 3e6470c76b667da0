//! Composition: template + identity + workspace -> the typed Pod Kandev would create.
//!
//! Follows Kandev's `ComposePod` (kandev-contract.md §4): the template's metadata and spec are
//! copied, Kandev's name, namespace, ownership labels and create nonce are stamped, the
//! Pod-level invariants are set, the main container gets the bootstrap command and the three
//! reserved mounts, and the reserved volumes are appended. Companions (such as
//! `docker-engine`) are copied verbatim, workspace grant included. Every backend uses this.

use crate::pod::identity::{ANNOTATION_CREATE_NONCE, SessionIdentity};
use crate::pod::template::{AGENTCTL_PORT, AGENTCTL_PORT_NAME};
use k8s_openapi::api::core::v1::{
    ContainerPort, EmptyDirVolumeSource, PersistentVolumeClaimVolumeSource, Pod, PodOS,
    PodTemplate, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The bootstrap command of the main container (Kandev's newest shape, K-1ee3): wait for the
/// start marker, load the runtime and auth environment, require the prepared marker, then
/// become the control process.
pub const BOOTSTRAP_SCRIPT: &str = r#"while [ ! -f /opt/kandev/start ]; do sleep 0.2; done
set -a
. /opt/kandev/runtime.env
if [ -f /run/kandev/auth.env ]; then . /run/kandev/auth.env; fi
set +a
if [ ! -f /opt/kandev/prepared ]; then echo "kubernetes preparation marker is missing" >&2; exit 70; fi
exec /opt/kandev/agentctl"#;

/// Where the session's workspace comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspaceSource {
    /// `emptyDir`: dies with the Pod.
    EmptyDir,
    /// A claim (managed or existing): outlives the Pod.
    Claim(String),
}

/// The CPU architecture of the profile's platform (`linux/<arch>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    pub fn of_this_machine() -> Self {
        if cfg!(target_arch = "aarch64") {
            Arch::Arm64
        } else {
            Arch::Amd64
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// The architecture a node's `kubernetes.io/arch` label (or `GOARCH`) names.
    pub fn from_label(label: &str) -> Option<Arch> {
        match label {
            "amd64" => Some(Arch::Amd64),
            "arm64" => Some(Arch::Arm64),
            _ => None,
        }
    }

    /// A Kandev profile's `platform` (`linux/amd64`, `linux/arm64`): the ones Kandev accepts.
    pub fn from_platform(platform: &str) -> Result<Arch, String> {
        platform
            .strip_prefix("linux/")
            .and_then(Arch::from_label)
            .ok_or_else(|| format!("{platform:?}: linux/amd64 or linux/arm64"))
    }
}

/// Everything composition needs besides the template.
#[derive(Debug, Clone)]
pub struct ComposeInput<'a> {
    pub template: &'a PodTemplate,
    pub identity: &'a SessionIdentity,
    pub namespace: &'a str,
    pub main_container: &'a str,
    pub arch: Arch,
    pub workspace: WorkspaceSource,
    pub create_nonce: &'a str,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ComposeError {
    #[error("template has no template.spec")]
    NoSpec,
    #[error("template has no main container {0}")]
    NoMainContainer(String),
}

/// Composes the Pod Kandev would create for this session.
pub fn compose_pod(input: &ComposeInput<'_>) -> Result<Pod, ComposeError> {
    let template = input.template.template.clone().unwrap_or_default();
    let mut spec = template.spec.ok_or(ComposeError::NoSpec)?;
    let mut meta = template.metadata.unwrap_or_default();

    meta.name = Some(input.identity.pod_name());
    meta.namespace = Some(input.namespace.to_owned());
    meta.labels
        .get_or_insert_default()
        .extend(input.identity.all_labels());
    meta.annotations.get_or_insert_default().insert(
        ANNOTATION_CREATE_NONCE.into(),
        input.create_nonce.to_owned(),
    );

    spec.restart_policy = Some("Always".into());
    spec.os = Some(PodOS {
        name: "linux".into(),
    });
    if spec.automount_service_account_token.is_none() {
        spec.automount_service_account_token = Some(false);
    }
    let selector = spec.node_selector.get_or_insert_default();
    selector.insert("kubernetes.io/os".into(), "linux".into());
    selector.insert("kubernetes.io/arch".into(), input.arch.as_str().into());

    let main = spec
        .containers
        .iter_mut()
        .find(|c| c.name == input.main_container)
        .ok_or_else(|| ComposeError::NoMainContainer(input.main_container.to_owned()))?;
    main.command = Some(vec!["sh".into(), "-c".into()]);
    main.args = Some(vec![BOOTSTRAP_SCRIPT.into()]);
    main.working_dir = Some("/workspace".into());
    main.ports.get_or_insert_default().push(ContainerPort {
        name: Some(AGENTCTL_PORT_NAME.into()),
        container_port: AGENTCTL_PORT,
        protocol: Some("TCP".into()),
        ..Default::default()
    });
    let mounts = main.volume_mounts.get_or_insert_default();
    for (name, path) in [
        ("kandev-runtime", "/opt/kandev"),
        ("kandev-auth", "/run/kandev"),
        ("kandev-workspace", "/workspace"),
    ] {
        mounts.push(VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            ..Default::default()
        });
    }

    let volumes = spec.volumes.get_or_insert_default();
    volumes.push(Volume {
        name: "kandev-runtime".into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Default::default()
    });
    volumes.push(Volume {
        name: "kandev-auth".into(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            ..Default::default()
        }),
        ..Default::default()
    });
    volumes.push(match &input.workspace {
        WorkspaceSource::EmptyDir => Volume {
            name: "kandev-workspace".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
        WorkspaceSource::Claim(claim) => Volume {
            name: "kandev-workspace".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.clone(),
                read_only: None,
            }),
            ..Default::default()
        },
    });

    Ok(Pod {
        metadata: ObjectMeta { ..meta },
        spec: Some(spec),
        status: None,
    })
}

/// Parses a Kubernetes quantity into bytes (memory) or millicores (cpu, with `milli = true`).
pub fn parse_quantity(quantity: &Quantity, milli: bool) -> Option<i64> {
    let s = quantity.0.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let value: f64 = number.parse().ok()?;
    let factor: f64 = match suffix {
        "" => 1.0,
        "m" => 0.001,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0f64.powi(4),
        _ => return None,
    };
    let scaled = value * factor * if milli { 1000.0 } else { 1.0 };
    Some(scaled.round() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::template;

    fn full_worker() -> PodTemplate {
        let text = std::fs::read_to_string(crate::paths::default_template()).unwrap_or_default();
        let rendered = template::render(&text, "worker:test", "daemon:test");
        template::parse(&rendered.text).unwrap_or_default()
    }

    fn compose(workspace: WorkspaceSource) -> Pod {
        let identity = SessionIdentity::new("run-1", "image::build_run", 0);
        let template = full_worker();
        let input = ComposeInput {
            template: &template,
            identity: &identity,
            namespace: "kandev-acceptance",
            main_container: "kandev-agent",
            arch: Arch::Amd64,
            workspace,
            create_nonce: "ab",
        };
        compose_pod(&input).unwrap_or_default()
    }

    #[test]
    fn main_container_gets_bootstrap_port_and_reserved_mounts() {
        let pod = compose(WorkspaceSource::Claim("claim".into()));
        let spec = pod.spec.unwrap_or_default();
        let main = spec
            .containers
            .iter()
            .find(|c| c.name == "kandev-agent")
            .cloned()
            .unwrap_or_default();
        assert_eq!(main.command, Some(vec!["sh".to_string(), "-c".to_string()]));
        assert_eq!(main.working_dir.as_deref(), Some("/workspace"));
        let ports: Vec<_> = main
            .ports
            .iter()
            .flatten()
            .map(|p| (p.name.clone(), p.container_port))
            .collect();
        assert!(ports.contains(&(Some("kandev-agentctl".into()), 8765)));
        let mounts: Vec<_> = main
            .volume_mounts
            .iter()
            .flatten()
            .map(|m| (m.name.as_str(), m.mount_path.as_str()))
            .collect();
        for expected in [
            ("kandev-runtime", "/opt/kandev"),
            ("kandev-auth", "/run/kandev"),
            ("kandev-workspace", "/workspace"),
        ] {
            assert_eq!(
                mounts.iter().filter(|m| **m == expected).count(),
                1,
                "{expected:?} in {mounts:?}"
            );
        }
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.automount_service_account_token, Some(false));
        assert_eq!(spec.os.map(|o| o.name), Some("linux".into()));
        let selector = spec.node_selector.unwrap_or_default();
        assert_eq!(
            selector.get("kubernetes.io/arch").map(String::as_str),
            Some("amd64")
        );
    }

    #[test]
    fn companion_is_copied_verbatim_with_its_grant() {
        let pod = compose(WorkspaceSource::EmptyDir);
        let spec = pod.spec.unwrap_or_default();
        let template_spec = full_worker()
            .template
            .and_then(|t| t.spec)
            .unwrap_or_default();
        let original = template_spec
            .containers
            .iter()
            .find(|c| c.name == "docker-engine");
        let composed = spec.containers.iter().find(|c| c.name == "docker-engine");
        assert!(original.is_some());
        assert_eq!(original, composed);
        let grant = composed
            .and_then(|c| c.volume_mounts.as_ref())
            .map(|m| m.iter().filter(|m| template::is_workspace_grant(m)).count());
        assert_eq!(grant, Some(1));
    }

    #[test]
    fn identity_labels_nonce_and_volumes_are_stamped() {
        let pod = compose(WorkspaceSource::Claim("kandev-x-workspace".into()));
        let labels = pod.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels
                .get("app.kubernetes.io/managed-by")
                .map(String::as_str),
            Some("kandev")
        );
        assert_eq!(
            labels
                .get("kandev.ai/ownership-version")
                .map(String::as_str),
            Some("task-v1")
        );
        assert_eq!(
            labels
                .get(crate::pod::identity::LABEL_RUN)
                .map(String::as_str),
            Some("run-1")
        );
        assert_eq!(
            pod.metadata
                .annotations
                .unwrap_or_default()
                .get("kandev.ai/create-nonce")
                .map(String::as_str),
            Some("ab")
        );
        let volumes = pod.spec.and_then(|s| s.volumes).unwrap_or_default();
        let auth = volumes
            .iter()
            .find(|v| v.name == "kandev-auth")
            .and_then(|v| v.empty_dir.clone());
        assert_eq!(auth.and_then(|e| e.medium).as_deref(), Some("Memory"));
        let ws = volumes
            .iter()
            .find(|v| v.name == "kandev-workspace")
            .and_then(|v| v.persistent_volume_claim.clone());
        assert_eq!(
            ws.map(|c| c.claim_name).as_deref(),
            Some("kandev-x-workspace")
        );
    }

    #[test]
    fn quantities_parse() {
        assert_eq!(
            parse_quantity(&Quantity("3Gi".into()), false),
            Some(3 << 30)
        );
        assert_eq!(parse_quantity(&Quantity("250m".into()), true), Some(250));
        assert_eq!(parse_quantity(&Quantity("2".into()), true), Some(2000));
        assert_eq!(
            parse_quantity(&Quantity("16Mi".into()), false),
            Some(16 << 20)
        );
        assert_eq!(parse_quantity(&Quantity("1e3".into()), false), None);
    }
}
