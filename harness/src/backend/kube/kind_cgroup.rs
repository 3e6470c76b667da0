//! Kind on a cgroup v1 host: from Kubernetes 1.35 the kubelet refuses to start there unless its
//! configuration says `failCgroupV1: false` (the default turned true:
//! `pkg/kubelet/apis/config/v1beta1/defaults.go`, `SetDefaults_KubeletConfiguration`; the
//! refusal: `pkg/kubelet/apis/config/validation/validation_linux.go`,
//! `validateKubeletOSConfiguration`, "kubelet is configured to not run on a host using cgroup
//! v1"). Kind's node then never becomes ready and `kind create cluster` fails at its `--wait`
//! bound without saying why. `kind/cluster.yaml` sets it; a `--kind-config` of the operator's
//! own that does not, on a cgroup v1 host, with a node of 1.35 or later, is refused here before
//! anything is created, naming the cause and the fix.

use super::errors::ClusterError;

/// The first Kubernetes minor whose kubelet refuses cgroup v1 by default.
const REFUSES_FROM_MINOR: u32 = 35;

/// Why a Kind cluster from `config` (the YAML text; `node_image` overrides its nodes' images)
/// would not start on an engine whose cgroup version is `engine_cgroup` (`docker info`'s
/// `CgroupVersion`: "1" or "2"), or None when it would.
pub fn cgroup_v1_refusal(
    config: &str,
    node_image: Option<&str>,
    engine_cgroup: &str,
) -> Option<String> {
    if engine_cgroup.trim() != "1" {
        return None;
    }
    let parsed: serde_yaml::Value = serde_yaml::from_str(config).unwrap_or_default();
    let images: Vec<String> = match node_image {
        Some(image) => vec![image.to_owned()],
        None => parsed["nodes"]
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|n| n["image"].as_str().map(str::to_owned))
            .collect(),
    };
    // No image named: Kind's default node, which for Kind v0.33 is 1.36.
    let refusing: Vec<&String> = images
        .iter()
        .filter(|image| node_minor(image).is_none_or(|minor| minor >= REFUSES_FROM_MINOR))
        .collect();
    if !images.is_empty() && refusing.is_empty() {
        return None;
    }
    if allows_cgroup_v1(&parsed) {
        return None;
    }
    let which = if refusing.is_empty() {
        "Kind's default node image".to_owned()
    } else {
        refusing
            .iter()
            .map(|i| i.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    Some(format!(
        "this host's engine runs cgroup v1, and the kubelet of {which} (Kubernetes 1.{REFUSES_FROM_MINOR} or later) refuses to start on cgroup v1 unless its KubeletConfiguration says failCgroupV1: false, which the Kind config does not"
    ))
}

/// Whether a KubeletConfiguration patch among the config's `kubeadmConfigPatches` (the
/// cluster's or a node's) sets `failCgroupV1: false`.
fn allows_cgroup_v1(config: &serde_yaml::Value) -> bool {
    let node_patches = config["nodes"]
        .as_sequence()
        .into_iter()
        .flatten()
        .flat_map(|n| {
            n["kubeadmConfigPatches"]
                .as_sequence()
                .cloned()
                .unwrap_or_default()
        });
    config["kubeadmConfigPatches"]
        .as_sequence()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .chain(node_patches)
        .filter_map(|patch| patch.as_str().map(str::to_owned))
        .flat_map(|patch| {
            serde_yaml::Deserializer::from_str(&patch)
                .filter_map(|d| serde::Deserialize::deserialize(d).ok())
                .collect::<Vec<serde_yaml::Value>>()
        })
        .any(|doc| {
            doc["kind"] == "KubeletConfiguration"
                && doc["failCgroupV1"] == serde_yaml::Value::Bool(false)
        })
}

/// The Kubernetes minor of a node image tagged `...:v1.<minor>.<patch>[@digest]`.
fn node_minor(image: &str) -> Option<u32> {
    let tag = image.split('@').next()?.rsplit_once(':')?.1;
    let mut parts = tag.strip_prefix("v1.")?.split('.');
    parts.next()?.parse().ok()
}

/// Refuses, before `kind create`, a cluster whose kubelet would not start on this host (the
/// engine's cgroup version asked of the docker CLI `docker_bin`); an engine that cannot say
/// is not refused (Kind's own error then stands).
pub(super) fn preflight(
    docker_bin: &std::path::Path,
    config_path: &std::path::Path,
    node_image: Option<&str>,
) -> Result<(), ClusterError> {
    let Ok(output) = std::process::Command::new(docker_bin)
        .args(["info", "--format", "{{.CgroupVersion}}"])
        .output()
    else {
        return Ok(());
    };
    if !output.status.success() {
        return Ok(());
    }
    let engine_cgroup = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    let config = std::fs::read_to_string(config_path).unwrap_or_default();
    match cgroup_v1_refusal(&config, node_image, &engine_cgroup) {
        Some(cause) => Err(ClusterError::KindCgroupV1 {
            config: config_path.display().to_string(),
            cause,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shipped() -> String {
        let path = crate::paths::workspace_root().join("kind/cluster.yaml");
        std::fs::read_to_string(&path).unwrap_or_default()
    }

    const PATCHLESS: &str = "apiVersion: kind.x-k8s.io/v1alpha4\nkind: Cluster\nnodes:\n  - role: control-plane\n    image: kindest/node:v1.36.4@sha256:0\nkubeadmConfigPatches:\n  - |\n    kind: KubeletConfiguration\n    podPidsLimit: 4096\n";

    #[test]
    fn the_shipped_kind_config_lets_its_kubelet_run_on_cgroup_v1() {
        let config = shipped();
        assert!(config.contains("kindest/node:v1.36"), "{config}");
        assert_eq!(cgroup_v1_refusal(&config, None, "1"), None);
        assert_eq!(cgroup_v1_refusal(&config, None, "2"), None);
    }

    #[test]
    fn a_kind_config_whose_kubelet_refuses_cgroup_v1_is_refused_on_a_cgroup_v1_host_only() {
        let refusal = cgroup_v1_refusal(PATCHLESS, None, "1").unwrap_or_default();
        assert!(
            refusal.contains("cgroup v1") && refusal.contains("failCgroupV1: false"),
            "{refusal}"
        );
        assert!(refusal.contains("kindest/node:v1.36.4"), "{refusal}");
        assert_eq!(cgroup_v1_refusal(PATCHLESS, None, "2"), None);
        // A node before 1.35 still runs on cgroup v1.
        assert_eq!(
            cgroup_v1_refusal(PATCHLESS, Some("kindest/node:v1.34.2"), "1"),
            None
        );
        assert!(cgroup_v1_refusal(PATCHLESS, Some("kindest/node:v1.35.0"), "1").is_some());
        // No image at all: Kind's default (1.36 for Kind v0.33).
        assert!(
            cgroup_v1_refusal(
                "kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\n",
                None,
                "1"
            )
            .is_some_and(|r| r.contains("Kind's default node image"))
        );
        // The setting in a node's own patches counts too.
        let per_node = "kind: Cluster\nnodes:\n  - role: control-plane\n    image: kindest/node:v1.36.4\n    kubeadmConfigPatches:\n      - |\n        kind: KubeletConfiguration\n        failCgroupV1: false\n";
        assert_eq!(cgroup_v1_refusal(per_node, None, "1"), None);
    }

    #[test]
    fn the_preflight_refuses_before_kind_creates_anything() -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir()?;
        let docker = dir.path().join("docker");
        std::fs::write(&docker, "#!/bin/sh\necho 1\n")?;
        std::fs::set_permissions(&docker, std::fs::Permissions::from_mode(0o755))?;
        let config = dir.path().join("cluster.yaml");
        std::fs::write(&config, PATCHLESS)?;
        let refused = preflight(&docker, &config, None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            refused.contains(&config.display().to_string())
                && refused.contains("fix:")
                && refused.contains("failCgroupV1: false"),
            "{refused}"
        );
        std::fs::write(&config, shipped())?;
        assert!(preflight(&docker, &config, None).is_ok());

        // Through `KindCluster::up`: refused before `kind create cluster` runs.
        std::fs::write(&config, PATCHLESS)?;
        let log = dir.path().join("kind.log");
        let kind = dir.path().join("kind");
        std::fs::write(
            &kind,
            format!("#!/bin/sh\necho \"kind $*\" >> '{}'\n", log.display()),
        )?;
        std::fs::set_permissions(&kind, std::fs::Permissions::from_mode(0o755))?;
        let up = super::super::kind::KindCluster::up(super::super::kind::KindOptions {
            kind_bin: kind,
            name: "kandev-acc-test".into(),
            config: config.clone(),
            node_image: None,
            keep: false,
            kubeconfig: dir.path().join("kubeconfig"),
            docker_bin: docker,
        });
        assert!(
            up.is_err_and(|e| matches!(e, ClusterError::KindCgroupV1 { .. })),
            "refused"
        );
        let calls = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(!calls.contains("create"), "{calls}");
        Ok(())
    }
}
