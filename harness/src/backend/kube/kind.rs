//! Every `kind` command the harness runs: creating, loading, listing and deleting the Kind
//! clusters of runs. Kind's nodes are containers on this host's engine.

use super::cluster::ClusterError;
use std::path::{Path, PathBuf};

/// The Kind cluster name a run creates.
pub fn run_kind_cluster(run_id: &str) -> String {
    format!("kandev-acc-{run_id}")
}

#[derive(Debug, Clone)]
pub struct KindOptions {
    pub kind_bin: PathBuf,
    pub name: String,
    pub config: PathBuf,
    /// Overrides the config's pinned node image.
    pub node_image: Option<String>,
    /// Leave the cluster when the run ends (a cluster that existed before is always left).
    pub keep: bool,
    /// Where the cluster's kubeconfig is written.
    pub kubeconfig: PathBuf,
}

/// A Kind cluster the run uses.
#[derive(Debug, Clone)]
pub struct KindCluster {
    pub options: KindOptions,
    /// False when the cluster existed before the run (then it is never deleted).
    pub created: bool,
}

impl KindCluster {
    pub fn node_container(&self) -> String {
        format!("{}-control-plane", self.options.name)
    }

    fn kind(&self, args: &[&str]) -> Result<String, ClusterError> {
        run_kind(&self.options.kind_bin, args)
    }

    /// Creates the cluster unless one of that name exists.
    pub fn up(options: KindOptions) -> Result<Self, ClusterError> {
        let created = !clusters(&options.kind_bin)?.contains(&options.name);
        let cluster = Self { options, created };
        let o = &cluster.options;
        if created {
            let config = o.config.display().to_string();
            let mut args = vec![
                "create", "cluster", "--name", &o.name, "--config", &config, "--wait", "180s",
            ];
            if let Some(image) = &o.node_image {
                args.extend(["--image", image]);
            }
            cluster.kind(&args)?;
        }
        write_kubeconfig(&o.kind_bin, &o.name, &o.kubeconfig)?;
        Ok(cluster)
    }

    /// `kind load docker-image`: the images exist only in this host's engine.
    pub fn load(&self, images: &[String]) -> Result<(), ClusterError> {
        let mut args = vec!["load", "docker-image", "--name", &self.options.name];
        args.extend(images.iter().map(String::as_str));
        self.kind(&args).map(|_| ())
    }

    pub fn delete(&self) -> Result<(), ClusterError> {
        delete_cluster(&self.options.kind_bin, &self.options.name)
    }
}

/// `kind version`: checked before anything is built or created.
pub fn check_kind(bin: &Path) -> Result<String, ClusterError> {
    run_kind(bin, &["version"]).map(|v| v.trim().to_owned())
}

fn run_kind(bin: &Path, args: &[&str]) -> Result<String, ClusterError> {
    let output = std::process::Command::new(bin)
        .args(args)
        .output()
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                ClusterError::KindMissing {
                    bin: bin.display().to_string(),
                }
            } else {
                ClusterError::Kind {
                    step: args.join(" "),
                    output: e.to_string(),
                }
            }
        })?;
    if !output.status.success() {
        return Err(ClusterError::Kind {
            step: args.join(" "),
            output: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The clusters `kind get clusters` lists.
pub fn clusters(bin: &Path) -> Result<Vec<String>, ClusterError> {
    Ok(run_kind(bin, &["get", "clusters"])?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

/// `kind delete cluster --name NAME`.
pub fn delete_cluster(bin: &Path, name: &str) -> Result<(), ClusterError> {
    run_kind(bin, &["delete", "cluster", "--name", name]).map(|_| ())
}

/// The kubeconfig of cluster `name`, written to `path`; returns its context name.
pub fn write_kubeconfig(bin: &Path, name: &str, path: &Path) -> Result<String, ClusterError> {
    let kubeconfig = run_kind(bin, &["get", "kubeconfig", "--name", name])?;
    std::fs::write(path, kubeconfig).map_err(|e| ClusterError::Setup {
        what: format!("write {}", path.display()),
        source: e.into(),
    })?;
    Ok(format!("kind-{name}"))
}

#[cfg(test)]
mod tests {
    /// The Kubernetes minor version of `kindest/node:v1.<minor>.<patch>` in the Kind config.
    fn pinned_node_minor(config: &str) -> Option<u32> {
        let tag = config.split("kindest/node:v1.").nth(1)?;
        tag.split('.').next()?.parse().ok()
    }

    /// The Kubernetes minor version k8s-openapi was built for (its `v1_*` feature; exactly one
    /// of these macros expands).
    #[allow(clippy::vec_init_then_push)]
    fn compiled_minor() -> Vec<u32> {
        let mut compiled = Vec::new();
        k8s_openapi::k8s_if_1_33! { compiled.push(33); }
        k8s_openapi::k8s_if_1_34! { compiled.push(34); }
        k8s_openapi::k8s_if_1_35! { compiled.push(35); }
        k8s_openapi::k8s_if_1_36! { compiled.push(36); }
        k8s_openapi::k8s_if_1_37! { compiled.push(37); }
        compiled
    }

    #[test]
    fn the_kind_cluster_gives_every_pod_a_pids_limit() {
        // A kubelet writes a Pod cgroup's pids.max only with podPidsLimit > 0, which
        // cgroup::accounting reads from the node.
        let path = crate::paths::workspace_root().join("kind/cluster.yaml");
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let config: serde_yaml::Value = serde_yaml::from_str(&text).unwrap_or_default();
        let kubelet: Vec<serde_yaml::Value> = config["kubeadmConfigPatches"]
            .as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|patch| serde_yaml::from_str(patch.as_str()?).ok())
            .filter(|patch: &serde_yaml::Value| patch["kind"] == "KubeletConfiguration")
            .collect();
        assert_eq!(
            kubelet.len(),
            1,
            "one KubeletConfiguration patch in {path:?}"
        );
        let limit = kubelet[0]["podPidsLimit"].as_i64().unwrap_or(0);
        assert!(limit > 0, "podPidsLimit {limit} in {path:?}");
        assert_eq!(
            kubelet[0]["featureGates"]["KubeletInUserNamespace"],
            serde_yaml::Value::Bool(true),
            "the patch Kandev's fixture sets stays"
        );
    }

    #[test]
    fn the_api_types_are_those_of_the_pinned_kind_node() {
        let path = crate::paths::workspace_root().join("kind/cluster.yaml");
        let config = std::fs::read_to_string(&path).unwrap_or_default();
        let pinned = pinned_node_minor(&config);
        assert!(pinned.is_some(), "no kindest/node:v1.N pin in {path:?}");
        assert_eq!(
            compiled_minor(),
            pinned.into_iter().collect::<Vec<_>>(),
            "k8s-openapi's feature (workspace Cargo.toml) must be the pinned node's v1_N"
        );
    }
}
