//! The settings of a run, as the command line gave them: plain data, recorded in the report
//! (its digest is the configuration's identity) and read by the runner and the backends.

use crate::pod::template::WorkspaceMode;
use kandev_report::Gate;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// Which backend runs the Pods (`--backend`); each is registered in `backend::provider`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum BackendKind {
    /// The embedded default: a Docker engine on this host.
    #[default]
    Local,
    /// A Kind cluster the run creates from kind/cluster.yaml (and deletes), images loaded.
    Kind,
    /// An existing cluster: --context (required) from --kubeconfig or KUBECONFIG.
    Kube,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Kind => "kind",
            Self::Kube => "kube",
        }
    }
}

/// When to leave a scenario's Pods running for debugging.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Keep {
    /// Every scenario's Pods are removed after it.
    Never,
    /// The Pods of a scenario that did not pass stay.
    OnFailure,
    /// Every scenario's Pods stay.
    Always,
}

/// The tools Kandev's full-worker recipe promises, as `worker::toolchain` names them: the
/// default `--required-tools`, what a release gate refuses to leave out, and what
/// `image::recipe` looks for in the worker image. One list, comma-separated.
pub const RECIPE_TOOLS: &str =
    "git,python-venv,c,node,pnpm,go,rust,docker,buildx,compose,playwright";
/// Tools the recipe names that no registry reachable from the fixture image builds serves
/// (golangci-lint v2): checked when present, a finding when missing (`--optional-tools`).
pub const RECIPE_OPTIONAL_TOOLS: &str = "golangci-lint";

/// [`RECIPE_TOOLS`] as a list.
pub fn recipe_tools() -> Vec<&'static str> {
    RECIPE_TOOLS.split(',').collect()
}

/// Settings of a run (from the command line).
#[derive(Debug, Clone, Serialize)]
pub struct RunConfig {
    pub template: PathBuf,
    pub prepare_script: PathBuf,
    pub main_container: String,
    pub daemon_container: String,
    pub workspace_mode: WorkspaceMode,
    pub base_image: String,
    pub worker_image: Option<String>,
    pub daemon_image: Option<String>,
    pub report_dir: PathBuf,
    pub keep: Keep,
    pub docker_ready_timeout_seconds: u32,
    /// Launch stage pod_ready's bound: the main container running (`--pod-ready-timeout`).
    pub pod_ready_timeout: Duration,
    /// The cluster's warm-up bound (`--warm-up-timeout`): every node the task Pod can be
    /// placed on pulls its images before the first scenario. None: skipped
    /// (`--no-warm-up` or `--warm-up-timeout 0s`).
    pub warm_up_timeout: Option<Duration>,
    pub pod_pids_limit: i64,
    /// MTU of the local backend's per-run Pod network (`--pod-mtu`).
    pub pod_mtu: u32,
    pub scenario_timeout: Option<Duration>,
    /// Tools `worker::toolchain` requires of the worker image (a missing one fails it).
    pub required_tools: Vec<String>,
    /// Tools it checks when present (a missing one is a finding).
    pub optional_tools: Vec<String>,
    /// How often a failed, errored or timed-out scenario is run again.
    pub retries: u32,
    /// The claim `existing_claim` mode mounts.
    pub workspace_claim: Option<String>,
    /// The longest any one step of a scenario may take (`--step-timeout`).
    pub step_timeout: Option<Duration>,
    /// The whole run's budget (`--deadline`): past it, running scenarios time out (after
    /// their teardown) and the rest are not started.
    pub deadline: Option<Duration>,
    /// Which backend runs the Pods.
    pub backend: BackendKind,
    /// `--backend kind|kube`: where the cluster comes from and how sessions use it.
    pub cluster: ClusterSettings,
    /// What the run is judged by (`--gate-profile`, `--require`, the template's declaration).
    pub gate: Gate,
    /// How many scenarios run at once when the operator said so (`--jobs`, or libtest's
    /// `--test-threads`); None: [`host_jobs`], and on a cluster no more than it can hold.
    pub jobs: Option<usize>,
}

/// How many scenarios run at once by default on this host: twice its cores, at most 8.
pub fn host_jobs() -> usize {
    let cores = std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(2);
    (cores * 2).clamp(1, 8)
}

/// The `kind`/`kube` settings of a run (from the command line; recorded in the report).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ClusterSettings {
    /// Set for `--backend kind`.
    pub kind: Option<KindSettings>,
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// `--in-cluster`: the run is inside a Pod, its service account the sessions' identity.
    pub in_cluster: bool,
    /// In-cluster: the token file of the identity that keeps the books (evidence, ledger,
    /// sweeps); None: the Pod's own identity does.
    pub bookkeeper_token: Option<PathBuf>,
    /// None: the run creates `kandev-acceptance-<run id>` and removes it.
    pub namespace: Option<String>,
    /// `--executor-role`: a Role file whose rules replace the ones the run binds its executor
    /// to (Kandev's, mirrored); None: Kandev's.
    pub executor_role: Option<PathBuf>,
    pub workspace_size: String,
    pub workspace_access_modes: Vec<String>,
    pub storage_class: Option<String>,
    /// Admit a privileged inspector Pod on each session's node for the node view (clusters
    /// whose nodes this host cannot see).
    pub node_inspector: bool,
    /// The inspector's image (default: the docker-engine image).
    pub node_inspector_image: Option<String>,
    /// `--platform`: the architecture the sessions' Pods are pinned to; None: the nodes'
    /// own (`kubernetes.io/arch`, when all schedulable nodes agree).
    pub platform: Option<crate::pod::compose::Arch>,
    /// `--image-pull-secret [NS/]NAME`: Secrets copied into the run's namespace and carried
    /// by every Pod the run creates (`backend::kube::pull_secrets`).
    pub image_pull_secrets: Vec<String>,
}

impl RunConfig {
    /// The exact `gc` command that removes what run `run_id` left: its backend and, on a
    /// cluster, the kubeconfig, context and namespace it used (or the Kind cluster and
    /// binary), so that the command a hint prints works when pasted as it is. An in-cluster
    /// run has no context of its own to name: the operator's goes in its place.
    pub fn gc_command(&self, run_id: &str) -> String {
        gc_command(self.backend, &self.cluster, run_id)
    }
}

/// [`RunConfig::gc_command`] of a run on `backend` with these cluster settings.
pub fn gc_command(backend: BackendKind, c: &ClusterSettings, run_id: &str) -> String {
    format!("{} --run {}", gc_where(backend, c), shell_word(run_id))
}

/// `kandev-acceptance gc` (or the checkout's `cargo acceptance gc`: [`crate::paths::command`]) with the backend and where (kubeconfig, context, namespace; Kind
/// binary and cluster): what names one run (`--run ID`) or every run there (`--all`) follows.
pub fn gc_where(backend: BackendKind, c: &ClusterSettings) -> String {
    let mut words = vec![
        crate::paths::command().to_owned(),
        "gc".to_owned(),
        "--backend".to_owned(),
        backend.name().to_owned(),
    ];
    match backend {
        BackendKind::Local => {}
        BackendKind::Kind => {
            if let Some(kind) = &c.kind {
                if kind.kind_bin != std::path::Path::new("kind") {
                    words.extend([
                        "--kind-bin".into(),
                        shell_word(&kind.kind_bin.display().to_string()),
                    ]);
                }
                if let Some(cluster) = &kind.cluster {
                    words.extend(["--kind-cluster".into(), shell_word(cluster)]);
                }
            }
        }
        BackendKind::Kube => {
            if let Some(path) = &c.kubeconfig {
                words.extend([
                    "--kubeconfig".into(),
                    shell_word(&path.display().to_string()),
                ]);
            }
            let context = match &c.context {
                Some(context) => shell_word(context),
                None => "<your context>".into(),
            };
            words.extend(["--context".into(), context]);
        }
    }
    if backend != BackendKind::Local
        && let Some(ns) = &c.namespace
    {
        words.extend(["--namespace".into(), shell_word(ns)]);
    }
    words.join(" ")
}

/// `word` as one shell word: as it is when only safe characters make it up, else single
/// quoted (a context named `arn:aws:eks:...:cluster/x` pastes as it is; one with a space
/// does not break the command).
pub fn shell_word(word: &str) -> String {
    let safe = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c));
    if safe {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct KindSettings {
    pub kind_bin: PathBuf,
    /// None: `kandev-acc-<run id>`, created and deleted by the run.
    pub cluster: Option<String>,
    pub config: PathBuf,
    pub node_image: Option<String>,
    pub keep_cluster: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gc_command_names_everything_the_run_used() {
        let run = "20261203t000000-abc123";
        // `cargo acceptance` here (a checkout), `kandev-acceptance` installed.
        let gc = crate::paths::command();
        assert_eq!(
            gc_command(BackendKind::Local, &ClusterSettings::default(), run),
            format!("{gc} gc --backend local --run {run}")
        );
        let kube = ClusterSettings {
            kubeconfig: Some("/home/o/my config".into()),
            context: Some("arn:aws:eks:eu-west-1:1:cluster/ci".into()),
            namespace: Some("acceptance".into()),
            ..Default::default()
        };
        assert_eq!(
            gc_command(BackendKind::Kube, &kube, run),
            format!(
                "{gc} gc --backend kube --kubeconfig '/home/o/my config' --context arn:aws:eks:eu-west-1:1:cluster/ci --namespace acceptance --run {run}"
            )
        );
        let kind = ClusterSettings {
            kind: Some(KindSettings {
                kind_bin: "/opt/kind".into(),
                cluster: Some("shared".into()),
                config: "kind/cluster.yaml".into(),
                node_image: None,
                keep_cluster: false,
            }),
            ..Default::default()
        };
        assert_eq!(
            gc_command(BackendKind::Kind, &kind, run),
            format!(
                "{gc} gc --backend kind --kind-bin /opt/kind --kind-cluster shared --run {run}"
            )
        );
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }
}
