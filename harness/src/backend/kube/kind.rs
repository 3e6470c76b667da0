//! Every `kind` command the harness runs: creating, loading, listing and deleting the Kind
//! clusters of runs. Kind's nodes are containers on this host's engine.

use super::errors::ClusterError;
use crate::pod::compose::Arch;
use std::path::{Path, PathBuf};

/// The Kind release the harness pins (written once, beside the error that names it).
pub use super::errors::KIND_VERSION;

/// The Kind cluster name a run creates.
pub fn run_kind_cluster(run_id: &str) -> String {
    format!("kandev-acc-{run_id}")
}

/// Kind's longest cluster name: the control-plane node's hostname is the name and
/// `-control-plane`, and a hostname holds 64 bytes (kind v0.33.0,
/// `pkg/cluster/internal/create/create.go`, `clusterNameMax = 50`; Kind only warns past it,
/// and the node then fails to start on hosts that enforce the limit).
pub const CLUSTER_NAME_MAX: usize = 50;

/// `Err(the fix)` when a run with this id would create a Kind cluster whose name is over
/// [`CLUSTER_NAME_MAX`].
pub fn check_run_kind_cluster(run_id: &str) -> Result<(), String> {
    let name = run_kind_cluster(run_id);
    if name.len() <= CLUSTER_NAME_MAX {
        return Ok(());
    }
    Err(format!(
        "--run-id {run_id}: a Kind run names its cluster {name} ({} bytes), over Kind's {CLUSTER_NAME_MAX} (the node's hostname is the name and -control-plane); nothing was created\n  fix: a run id of at most {} characters, or --kind-cluster NAME to use an existing cluster",
        name.len(),
        CLUSTER_NAME_MAX - run_kind_cluster("").len()
    ))
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
    /// The docker CLI of this host's engine (`docker save` for `kind load image-archive`).
    pub docker_bin: PathBuf,
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
            // A kubelet that will refuse this host's cgroup v1 is named now, not after the
            // --wait bound.
            super::kind_cgroup::preflight(&o.docker_bin, &o.config, o.node_image.as_deref())?;
            let config = o.config.display().to_string();
            let mut args = vec![
                "create", "cluster", "--name", &o.name, "--config", &config, "--wait", "180s",
            ];
            if let Some(image) = &o.node_image {
                args.extend(["--image", image]);
            }
            // Kept on failure (kind deletes a failed cluster, and its logs with it), so that
            // its logs go to the report's folder before the harness deletes it.
            args.push("--retain");
            if let Err(e) = cluster.kind(&args) {
                return Err(cluster.not_up(e));
            }
        }
        write_kubeconfig(&o.kind_bin, &o.name, &o.kubeconfig)?;
        Ok(cluster)
    }

    /// Loads `images` (they exist only in this host's engine) into the node through an
    /// archive: `docker save` into a temporary file, then `kind load image-archive`.
    ///
    /// Not `kind load docker-image`: with Docker's containerd image store (the default of
    /// fresh Docker 29 installs) its plain `docker save` carries an image's whole
    /// multi-platform index while only this platform's blobs are present, and the node's
    /// `ctr images import --all-platforms` fails on the first missing digest
    /// (kubernetes-sigs/kind#3795, #4066). Kind's maintainers point to `docker save
    /// --platform` + `kind load image-archive`; `--platform` needs engine API 1.48, and an
    /// older engine (the classic store) saves one platform anyway. `engine_api` is this
    /// host's engine API version.
    ///
    /// Images every node already holds with this host's image ID are not loaded again (a
    /// reused `--kind-cluster`: the worker image alone took 100 s to load), as `kind load
    /// docker-image` skips them (kind's `nodeutils.ImageID`, through the node's crictl).
    /// Returns the images loaded.
    pub fn load(
        &self,
        images: &[String],
        engine_api: Option<&str>,
    ) -> Result<Vec<String>, ClusterError> {
        let nodes: Vec<String> = self
            .kind(&["get", "nodes", "--name", &self.options.name])?
            .lines()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect();
        let missing: Vec<String> = images
            .iter()
            .filter(|image| !self.on_every_node(&nodes, image))
            .cloned()
            .collect();
        if missing.is_empty() {
            return Ok(missing);
        }
        self.load_archive(&missing, engine_api)?;
        Ok(missing)
    }

    /// Whether each of `nodes` holds `image` with the ID this host's engine gives it (no
    /// nodes listed: no).
    fn on_every_node(&self, nodes: &[String], image: &str) -> bool {
        if nodes.is_empty() {
            return false;
        }
        let docker = &self.options.docker_bin;
        let inspect = ["image", "inspect", "--format", "{{.Id}}", image].map(str::to_owned);
        let Ok(host_id) = run_docker(docker, &inspect) else {
            return false;
        };
        let host_id = host_id.trim();
        nodes.iter().all(|node| {
            let args = ["exec", node, "crictl", "inspecti", "-o", "json", image].map(str::to_owned);
            run_docker(docker, &args)
                .ok()
                .and_then(|out| serde_json::from_str::<serde_json::Value>(&out).ok())
                .is_some_and(|v| v["status"]["id"].as_str() == Some(host_id))
        })
    }

    fn load_archive(
        &self,
        images: &[String],
        engine_api: Option<&str>,
    ) -> Result<(), ClusterError> {
        let folder = tempfile::Builder::new()
            .prefix("kandev-acceptance-kind-load-")
            .tempdir()
            .map_err(|e| ClusterError::Setup {
                what: "a temporary folder for the image archive".into(),
                source: e.into(),
            })?;
        let archive = folder.path().join("images.tar");
        let save = save_args(&archive, images, save_platform(engine_api).as_deref());
        run_docker(&self.options.docker_bin, &save)?;
        let archive = archive.display().to_string();
        self.kind(&[
            "load",
            "image-archive",
            &archive,
            "--name",
            &self.options.name,
        ])
        .map(|_| ())
        // `folder` (and the archive) is removed when it goes out of scope.
    }

    /// A create that failed: the node's logs exported beside the kubeconfig (the report's
    /// folder, `kind-logs/`), then the cluster deleted; the error names both.
    fn not_up(&self, failed: ClusterError) -> ClusterError {
        let output = match failed {
            ClusterError::Kind { output, .. } => output,
            other => other.to_string(),
        };
        let o = &self.options;
        let folder = o
            .kubeconfig
            .parent()
            .unwrap_or(Path::new("."))
            .join("kind-logs");
        let logs = match self.kind(&[
            "export",
            "logs",
            &folder.display().to_string(),
            "--name",
            &o.name,
        ]) {
            Ok(_) => folder.display().to_string(),
            Err(e) => format!("not exported ({e})"),
        };
        let deleted = match self.delete() {
            Ok(()) => "deleted".to_owned(),
            Err(e) => {
                format!(
                    "not deleted ({e}); `{} gc --backend kind --all` removes it",
                    crate::paths::command()
                )
            }
        };
        ClusterError::KindNotUp {
            name: o.name.clone(),
            output,
            logs,
            deleted,
        }
    }

    pub fn delete(&self) -> Result<(), ClusterError> {
        delete_cluster(&self.options.kind_bin, &self.options.name)
    }
}

/// The platform `docker save` selects: this machine's, where the engine can select one
/// (API 1.48 and later); None leaves `--platform` out.
pub fn save_platform(engine_api: Option<&str>) -> Option<String> {
    let (major, minor) = engine_api?.trim().split_once('.')?;
    let version = (major.parse::<u32>().ok()?, minor.parse::<u32>().ok()?);
    (version >= (1, 48)).then(|| format!("linux/{}", Arch::of_this_machine().as_str()))
}

/// `docker save [--platform P] -o ARCHIVE IMAGE...`.
pub fn save_args(archive: &Path, images: &[String], platform: Option<&str>) -> Vec<String> {
    let mut args = vec!["save".to_owned()];
    if let Some(platform) = platform {
        args.extend(["--platform".to_owned(), platform.to_owned()]);
    }
    args.extend(["-o".to_owned(), archive.display().to_string()]);
    args.extend(images.iter().cloned());
    args
}

fn run_docker(bin: &Path, args: &[String]) -> Result<String, ClusterError> {
    let step = args
        .iter()
        .take_while(|a| !a.starts_with('-'))
        .cloned()
        .collect::<Vec<_>>()
        .join(" ");
    let output = std::process::Command::new(bin)
        .args(args)
        .output()
        .map_err(|e| ClusterError::Docker {
            step: step.clone(),
            output: format!("{}: {e}", bin.display()),
        })?;
    if !output.status.success() {
        return Err(ClusterError::Docker {
            step,
            output: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The kind binary a run uses: the one given; else the one `ensure-kind.sh` built (the
/// release its node image is for), when built; else `kind` on PATH.
pub fn resolve_kind_bin(given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(|| {
        crate::host::kube_build::Pins::read()
            .ok()
            .and_then(|pins| pins.bin_dir().ok())
            .map(|bin| bin.join("kind"))
            .filter(|kind| kind.is_file())
            .unwrap_or_else(|| PathBuf::from("kind"))
    })
}

/// The node image `ensure-kind.sh` assembled, when this host's engine has it: the default
/// where no `--kind-node-image` is given (the config's pin needs a registry).
pub fn local_node_image(docker_bin: &Path) -> Option<String> {
    let image = crate::host::kube_build::Pins::read().ok()?.node_image();
    std::process::Command::new(docker_bin)
        .args(["image", "inspect", "--format", "{{.Id}}", &image])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|_| image)
}

/// The node image a Kind config pins (its first node's `image:`), for the report.
pub fn pinned_node_image(config: &Path) -> Option<String> {
    std::fs::read_to_string(config)
        .ok()?
        .lines()
        .find_map(|l| l.trim().strip_prefix("image:"))
        .map(|image| image.trim().to_owned())
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

    #[test]
    fn a_run_id_that_makes_a_kind_name_over_50_bytes_is_refused_naming_the_fix() {
        let longest = "a".repeat(39);
        assert!(super::check_run_kind_cluster(&longest).is_ok());
        let over = "a".repeat(40);
        let why = super::check_run_kind_cluster(&over).unwrap_err();
        assert!(why.contains("(51 bytes), over Kind's 50"), "{why}");
        assert!(
            why.contains("at most 39 characters, or --kind-cluster NAME"),
            "{why}"
        );
    }

    use super::*;

    /// The Kind release named in the missing-kind fix, in `kind/cluster.yaml` (which pins the
    /// node image that release built) and in the nightly workflow is one: [`KIND_VERSION`].
    #[test]
    fn one_kind_version_everywhere() {
        let root = crate::paths::workspace_root();
        let config = std::fs::read_to_string(root.join("kind/cluster.yaml")).unwrap_or_default();
        assert!(
            config.contains(&format!("release notes of Kind {KIND_VERSION}")),
            "kind/cluster.yaml's node image is not the one Kind {KIND_VERSION} lists"
        );
        let workflow = std::fs::read_to_string(root.join(".github/workflows/nightly-kind.yml"))
            .unwrap_or_default();
        let installed: Vec<&str> = workflow
            .lines()
            .filter_map(|l| l.trim().strip_prefix("KIND_VERSION:"))
            .map(str::trim)
            .collect();
        assert!(!installed.is_empty(), "the workflow names no KIND_VERSION");
        assert!(
            installed.iter().all(|v| *v == KIND_VERSION),
            "the workflow installs {installed:?}, the harness pins {KIND_VERSION}"
        );
        let missing = ClusterError::KindMissing { bin: "kind".into() }.to_string();
        assert!(missing.contains(KIND_VERSION), "{missing}");
    }

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

    /// An executable shell script `name` in `dir` that appends its arguments to `log` and
    /// then runs `body`.
    fn fake_tool(dir: &Path, name: &str, log: &Path, body: &str) -> std::io::Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        let script = format!(
            "#!/bin/sh\necho \"{name} $*\" >> '{}'\n{body}\n",
            log.display()
        );
        std::fs::write(&path, script)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        Ok(path)
    }

    #[test]
    fn kind_load_goes_through_an_image_archive() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let log = dir.path().join("calls.log");
        // docker writes the archive `-o` names; kind records whether it exists when loading.
        let docker_bin = fake_tool(
            dir.path(),
            "docker",
            &log,
            r#"while [ "$1" != "-o" ]; do shift; done; echo archive > "$2""#,
        )?;
        let kind_bin = fake_tool(
            dir.path(),
            "kind",
            &log,
            r#"if [ -f "$3" ]; then echo "archive present" >> CALLS; fi"#
                .replace("CALLS", &log.display().to_string())
                .as_str(),
        )?;
        let cluster = KindCluster {
            options: KindOptions {
                kind_bin,
                name: "kandev-acc-test".into(),
                config: dir.path().join("cluster.yaml"),
                node_image: None,
                keep: false,
                kubeconfig: dir.path().join("kubeconfig"),
                docker_bin,
            },
            created: true,
        };
        let images = vec![
            "kandev-acceptance/worker:1".to_owned(),
            "kandev-acceptance/daemon:1".to_owned(),
        ];
        let loaded = cluster.load(&images, Some("1.51"));
        let calls = std::fs::read_to_string(&log)?;
        assert!(loaded.is_ok(), "{loaded:?} {calls}");
        // The nodes are asked first (the fake kind lists none: nothing is on them yet).
        let mut lines: Vec<&str> = calls.lines().collect();
        assert_eq!(
            lines.first().copied(),
            Some("kind get nodes --name kandev-acc-test"),
            "{calls}"
        );
        lines.remove(0);
        let platform = format!("linux/{}", Arch::of_this_machine().as_str());
        assert_eq!(lines.len(), 3, "{calls}");
        let archive = lines[0]
            .split(" -o ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_default()
            .to_owned();
        assert_eq!(
            lines[0],
            format!(
                "docker save --platform {platform} -o {archive} kandev-acceptance/worker:1 kandev-acceptance/daemon:1"
            )
        );
        assert_eq!(
            lines[1],
            format!("kind load image-archive {archive} --name kandev-acc-test"),
            "not `kind load docker-image`, which fails with Docker's containerd image store"
        );
        assert_eq!(lines[2], "archive present", "saved before it was loaded");
        assert!(
            !Path::new(&archive).exists(),
            "the archive is removed afterwards"
        );
        Ok(())
    }

    #[test]
    fn docker_save_selects_this_platform_only_where_the_engine_can() {
        let platform = format!("linux/{}", Arch::of_this_machine().as_str());
        assert_eq!(save_platform(Some("1.48")), Some(platform.clone()));
        assert_eq!(save_platform(Some("1.52")), Some(platform.clone()));
        // Debian bookworm's engine (API 1.41) has no --platform; its classic store saves one.
        assert_eq!(save_platform(Some("1.41")), None);
        assert_eq!(save_platform(None), None);
        assert_eq!(save_platform(Some("garbage")), None);
        let archive = Path::new("/tmp/x/images.tar");
        let images = ["a:1".to_owned()];
        assert_eq!(
            save_args(archive, &images, None),
            ["save", "-o", "/tmp/x/images.tar", "a:1"]
        );
        assert_eq!(
            save_args(archive, &images, Some(&platform)),
            [
                "save",
                "--platform",
                &platform,
                "-o",
                "/tmp/x/images.tar",
                "a:1"
            ]
        );
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
