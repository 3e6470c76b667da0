//! How a run prepares the `kind` and `kube` backends, what it tears down at the end, and `gc`
//! of what killed runs left in a cluster.
//!
//! Order matters: an existing cluster's API server is reached before anything is built or
//! created (an unreachable one fails in seconds); then the namespace and executor identity,
//! images (Kind: built here and loaded), the preflight, the node view, `--jobs`, the warm-up
//! (every placeable node pulls the images before the first scenario), and `--node-inspector`'s
//! inspectors on those nodes (the leak ledger lists their cgroup folders from the first
//! scenario on).

use super::KubeBackend;
use super::cluster::{self, Cluster};
use super::inspector::ClusterInspector;
use super::kind::{self, check_kind, run_kind_cluster};
use crate::backend::connection::AuthMode;
use crate::backend::local::lease::{EngineLease, Leased};
use crate::backend::{
    Backend, GcOutcome, GcRequest, PrepareInput, Prepared, Provider, RunTeardown, Spared,
    on_this_host,
};
use crate::config::RunConfig;
use crate::host::images::ImageSet;
use crate::node::NodeView;
use crate::pod::compose::{Arch, ComposeInput, WorkspaceSource, compose_pod};
use crate::pod::identity::{SessionIdentity, create_nonce};
use crate::pod::template::WorkspaceMode;
use anyhow::Context;
use async_trait::async_trait;
use kandev_report::{CleanupRecord, Environment, ImageRecord};
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

/// `--backend kind`: a Kind cluster on this host's engine.
pub struct KindProvider;
/// `--backend kube`: an existing cluster, named by an explicit context.
pub struct KubeProvider;

const IMAGES_NEEDED: &str = "--backend kube runs your images: pass --worker-image and --daemon-image references the cluster can pull (this harness never pushes to a registry)";

/// With a remote cluster the operator's images are used as they are (the harness never
/// pushes); their references must be ones the cluster can pull.
fn operator_images(config: &RunConfig) -> anyhow::Result<ImageSet> {
    let (Some(worker), Some(daemon)) = (&config.worker_image, &config.daemon_image) else {
        anyhow::bail!(IMAGES_NEEDED);
    };
    let record = |role: &str, reference: &str| ImageRecord {
        role: role.into(),
        reference: reference.into(),
        id: None,
        built: false,
        ran: Vec::new(),
    };
    Ok(ImageSet {
        worker: worker.clone(),
        daemon: daemon.clone(),
        mock_agent: String::new(),
        records: vec![record("worker", worker), record("daemon", daemon)],
    })
}

#[async_trait]
impl Provider for KindProvider {
    fn check(&self, config: &RunConfig) -> Result<(), String> {
        on_this_host::check_root("kind")?;
        if config.cluster.in_cluster {
            return Err("--in-cluster runs inside an existing cluster: use --backend kube (Kind's cluster is created from this host)".into());
        }
        check_executor_role(config)
    }

    fn prepare_first(&self) -> bool {
        true
    }

    async fn prepare(&self, input: &PrepareInput<'_>) -> anyhow::Result<Prepared> {
        let settings = &input.config.cluster;
        let mut options = settings
            .kind_options(input.run_id, input.report_folder)
            .context("--backend kind without Kind settings")?;
        let started = Instant::now();
        let kind_version =
            input
                .setup
                .step("kind", started, check_kind(&options.kind_bin), |v| json!(v))?;
        // Kind's node runs on this host's engine, and the images are built there.
        let (engine, mut environment) = on_this_host::engine(input).await?;
        // No --kind-node-image: the node image ensure-kind.sh assembled here, when the engine
        // has it (the config's pin needs a registry).
        if options.node_image.is_none() {
            options.node_image = kind::local_node_image(&options.docker_bin);
        }
        environment.kind_version = Some(kind_version);
        environment.kind_node_image = options
            .node_image
            .clone()
            .or_else(|| kind::pinned_node_image(&options.config));
        let images = on_this_host::images(&engine, input).await?;
        // The run's Kind cluster lives on this host's engine: the run holds an engine lease,
        // as a local run does, before the cluster exists (`gc --backend kind` spares it).
        let lease = EngineLease::take(engine.docker(), &images.mock_agent, input.run_id).await?;
        let started = Instant::now();
        let connected = Cluster::connect_kind(
            &options,
            settings.namespace.as_deref(),
            input.config.workspace_mode,
            settings.executor_role.as_deref(),
            input.run_id,
            &wanted_pull_secrets(input).unwrap_or_default(),
        )
        .await;
        let cluster = input
            .setup
            .step("cluster_setup", started, connected, setup_evidence)?;
        let node = cluster.node_view(Some(engine.docker())).await;
        let views = NodeViews {
            node,
            inspector: None,
        };
        let mut prepared = finish(input, cluster, images, views, Some(engine), environment).await?;
        prepared.teardown = prepared
            .teardown
            .map(|t| Box::new(Leased::new(t, lease)) as Box<dyn RunTeardown>);
        Ok(prepared)
    }

    /// Kind clusters the harness created (`kandev-acc-<run>`) are deleted whole, but those of
    /// runs alive on this host's engine (their engine lease runs: a Kind run holds one as a
    /// local run does); in an existing Kind cluster (`--kind-cluster`), labelled namespaces
    /// and objects go, but those of live runs (their Lease there).
    async fn gc(&self, request: &GcRequest) -> anyhow::Result<GcOutcome> {
        let settings = &request.cluster;
        let kind = settings
            .kind
            .as_ref()
            .context("--backend kind without Kind settings")?;
        let wanted = |name: &str| match &request.run {
            Some(run) => name == run_kind_cluster(run),
            None => name.starts_with(&run_kind_cluster("")),
        };
        // Listed before the leases are read (`cluster::gc`'s order).
        let clusters: Vec<String> = kind::clusters(&kind.kind_bin)?
            .into_iter()
            .filter(|n| wanted(n))
            .collect();
        let live = if request.force || clusters.is_empty() {
            Default::default()
        } else {
            crate::backend::local::lease::live_runs(&crate::host::connect_engine().await?).await?
        };
        let mut outcome = GcOutcome::default();
        for name in &clusters {
            let run = name.strip_prefix(&run_kind_cluster("")).unwrap_or_default();
            if let Some(evidence) = live.get(run) {
                outcome.spared.push(Spared {
                    run: run.to_owned(),
                    evidence: evidence.clone(),
                });
                continue;
            }
            if !request.dry_run {
                kind::delete_cluster(&kind.kind_bin, name)?;
            }
            outcome.removed.push(format!("kind-cluster/{name}"));
        }
        // An existing cluster the run used (--kind-cluster) keeps running: sweep inside it.
        if let Some(name) = &kind.cluster {
            let path = std::env::temp_dir().join(format!("kandev-acceptance-gc-{name}.kubeconfig"));
            let context = kind::write_kubeconfig(&kind.kind_bin, name, &path)?;
            let reached = cluster::open(Some(&path), Some(&context)).await?;
            let inside = cluster::gc(&reached.admin, &scope(request)).await?;
            outcome.removed.extend(inside.removed);
            outcome.spared.extend(inside.spared);
        }
        Ok(outcome)
    }
}

#[async_trait]
impl Provider for KubeProvider {
    fn check(&self, config: &RunConfig) -> Result<(), String> {
        if config.cluster.context.is_none() && !config.cluster.in_cluster {
            return Err("--backend kube needs --context NAME: the harness never uses the kubeconfig's current context implicitly".into());
        }
        if config.worker_image.is_none() || config.daemon_image.is_none() {
            return Err(IMAGES_NEEDED.into());
        }
        check_executor_role(config)
    }

    fn prepare_first(&self) -> bool {
        true
    }

    async fn prepare(&self, input: &PrepareInput<'_>) -> anyhow::Result<Prepared> {
        let settings = &input.config.cluster;
        // Reached before anything is built or created: an unreachable cluster fails fast.
        let started = Instant::now();
        let (opened, session) = if settings.in_cluster {
            match cluster::open_in_cluster(settings.bookkeeper_token.as_deref()).await {
                Ok((reached, session)) => (Ok(reached), Some(session)),
                Err(e) => (Err(e), None),
            }
        } else {
            let opened =
                cluster::open(settings.kubeconfig.as_deref(), settings.context.as_deref()).await;
            (opened, None)
        };
        let reached = input.setup.step(
            "cluster",
            started,
            opened,
            |r| json!({"context": r.context, "server": r.server, "version": r.server_version}),
        )?;
        let started = Instant::now();
        let images = operator_images(input.config).map(|mut images| {
            images.records.extend(harness_image_record());
            images
        });
        let images = input
            .setup
            .step("images", started, images, |i| json!(i.records))?;
        let started = Instant::now();
        let set_up = match session {
            Some(session) => {
                Cluster::in_cluster(
                    reached,
                    session,
                    settings.namespace.as_deref(),
                    input.run_id,
                )
                .await
            }
            None => {
                Cluster::set_up_with_role(
                    reached,
                    None,
                    settings.namespace.as_deref(),
                    input.config.workspace_mode,
                    settings.executor_role.as_deref(),
                    settings.node_inspector,
                    input.run_id,
                    &wanted_pull_secrets(input).unwrap_or_default(),
                )
                .await
            }
        };
        let cluster = input
            .setup
            .step("cluster_setup", started, set_up, setup_evidence)?;
        // The inspector runs the daemon image: it carries the run's pull secrets (a name
        // refused here is refused in `finish`, before any Pod).
        let pull_secret_names = planned_pull_secrets(input, &cluster)
            .map(|p| super::pull_secrets::names(&p))
            .unwrap_or_default();
        let inspector = settings.node_inspector.then(|| {
            Arc::new(
                ClusterInspector::new(
                    cluster.admin.clone(),
                    &cluster.namespace,
                    settings
                        .node_inspector_image
                        .as_deref()
                        .unwrap_or(&images.daemon),
                    input.run_id,
                )
                .with_pull_secrets(pull_secret_names),
            )
        });
        let node = inspector.clone().map(|i| i as Arc<dyn NodeView>);
        let views = NodeViews { node, inspector };
        finish(input, cluster, images, views, None, Environment::default()).await
    }

    /// Labelled namespaces, and in `--namespace` the labelled Pods, claims and executor
    /// objects.
    async fn gc(&self, request: &GcRequest) -> anyhow::Result<GcOutcome> {
        let settings = &request.cluster;
        let reached =
            cluster::open(settings.kubeconfig.as_deref(), settings.context.as_deref()).await?;
        Ok(cluster::gc(&reached.admin, &scope(request)).await?)
    }
}

/// What `gc` asks of a cluster.
fn scope(request: &GcRequest) -> cluster::GcScope<'_> {
    cluster::GcScope {
        namespace: request.cluster.namespace.as_deref(),
        run: request.run.as_deref(),
        dry_run: request.dry_run,
        force: request.force,
    }
}

/// `--executor-role FILE` must be one Role with rules: refused before anything is created
/// (exit 2), naming the file and what is wrong.
fn check_executor_role(config: &RunConfig) -> Result<(), String> {
    match &config.cluster.executor_role {
        Some(path) => cluster::executor_role_file(path, "", &Default::default())
            .map(|_| ())
            .map_err(|e| e.to_string()),
        None => Ok(()),
    }
}

/// The environment variable naming the image a run inside the cluster runs from (`launch`
/// sets it), recorded in the report as the `harness` image.
pub const HARNESS_IMAGE_ENV: &str = "KANDEV_ACCEPTANCE_HARNESS_IMAGE";

/// The harness's own image when the run is inside a Pod that names it.
fn harness_image_record() -> Option<ImageRecord> {
    let reference = std::env::var(HARNESS_IMAGE_ENV).ok()?;
    Some(ImageRecord {
        role: "harness".into(),
        reference,
        id: None,
        built: false,
        ran: Vec::new(),
    })
}

fn setup_evidence(c: &Cluster) -> serde_json::Value {
    json!({"context": c.context, "server": c.server, "version": c.server_version, "namespace": c.namespace, "executor": c.executor, "executor_created_by_run": c.created_executor, "operator_access": c.operator_access})
}

/// The run's node view, and the `--node-inspector` inspectors behind it (started in
/// [`finish`], once the nodes' architecture is known and they hold the images).
struct NodeViews {
    node: Option<Arc<dyn NodeView>>,
    inspector: Option<Arc<ClusterInspector>>,
}

/// With the cluster set up: load the images (Kind), the preflight, the backend. A failure
/// tears down what the run created in the cluster.
async fn finish(
    input: &PrepareInput<'_>,
    mut cluster: Cluster,
    images: ImageSet,
    NodeViews { node, inspector }: NodeViews,
    host_engine: Option<crate::host::HostEngine>,
    mut environment: Environment,
) -> anyhow::Result<Prepared> {
    let engine_api = environment.engine_api_version.clone();
    let settings = &input.config.cluster;
    // The pull secrets first: every Pod below (the warm-up's, the sessions') may need them.
    let carried_pull_secrets = match pull_secrets(input, &mut cluster).await {
        Ok(names) => names,
        Err(e) => {
            cluster.teardown().await;
            return Err(e);
        }
    };
    // The architecture the Pods are pinned to: --platform, else the nodes' own.
    let started = Instant::now();
    let resolved = match super::platform::resolve(
        &cluster.admin,
        settings.platform,
        settings.in_cluster,
        &template_spec(input),
    )
    .await
    {
        // The mock agent is built here: it must run where the Pods are pinned.
        Ok(platform) => match input.mock_agent_binary().await.and_then(|path| {
            let mut header = [0u8; 20];
            let read = std::fs::File::open(&path)
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut header));
            read.with_context(|| format!("read {}", path.display()))?;
            super::platform::check_agent_runs_on(&header, &platform).map_err(anyhow::Error::msg)
        }) {
            Ok(()) => Ok(platform),
            Err(refused) => Err(refused),
        },
        Err(e) => Err(anyhow::Error::from(e)),
    };
    let platform = match input
        .setup
        .step("platform", started, resolved, |p| json!(p))
    {
        Ok(platform) => platform,
        Err(e) => {
            cluster.teardown().await;
            return Err(e);
        }
    };
    if let Err(e) = preflight(
        input,
        &mut cluster,
        &images,
        engine_api.as_deref(),
        platform.arch,
        &carried_pull_secrets,
    )
    .await
    {
        cluster.teardown().await;
        return Err(e);
    }
    let jobs = derive_jobs(input, &cluster, platform.arch).await;
    if let Err(e) = warm_up(
        input,
        &cluster,
        &images,
        platform.arch,
        &carried_pull_secrets,
    )
    .await
    {
        cluster.teardown().await;
        return Err(e);
    }
    if let Some(inspector) = inspector {
        // Before the first scenario's baseline: the leak ledger lists every placeable node's
        // cgroup folders. A node whose inspector did not start is named, not a failed run.
        let started = Instant::now();
        let evidence = inspector.start(&template_spec(input), platform.arch).await;
        let _ = input.setup.step(
            "node_inspector",
            started,
            Ok::<_, anyhow::Error>(evidence),
            Clone::clone,
        );
    }
    let name = if cluster.kind.is_some() {
        "kind"
    } else {
        "kube"
    };
    let backend = KubeBackend::new(
        cluster.session.clone(),
        &cluster.namespace,
        name,
        &input.config.main_container,
        settings.managed_pvc(),
    )
    .with_admin(cluster.admin.clone())
    .with_platform(platform.arch)
    .with_pull_secrets(carried_pull_secrets)
    .with_config(cluster.config.clone())
    .with_executor(
        cluster.created_executor.then(|| cluster.executor.clone()),
        if settings.in_cluster {
            AuthMode::InCluster
        } else {
            AuthMode::Kubeconfig
        },
    );
    environment.kubernetes_version = Some(cluster.server_version.clone());
    let backend: Arc<dyn Backend> = Arc::new(backend);
    Ok(Prepared {
        backend,
        namespace: cluster.namespace.clone(),
        images,
        node,
        host_engine,
        environment,
        teardown: Some(Box::new(cluster)),
        jobs,
    })
}

/// The Pod spec of the run's template (its tolerations, `nodeSelector` and affinity decide
/// which nodes its Pods can be placed on).
fn template_spec(input: &PrepareInput<'_>) -> k8s_openapi::api::core::v1::PodSpec {
    input
        .template
        .parsed()
        .template
        .as_ref()
        .and_then(|t| t.spec.clone())
        .unwrap_or_default()
}

/// `--jobs` not given: no more scenarios at once than the cluster holds task Pods (what its
/// nodes can still allocate against the template's requests), at most the host's default and
/// at least 1, recorded as the `jobs` set-up step (derived or not, and why). Given: as given.
async fn derive_jobs(input: &PrepareInput<'_>, cluster: &Cluster, arch: Arch) -> Option<usize> {
    let host = crate::config::host_jobs();
    let started = Instant::now();
    if let Some(given) = input.config.jobs {
        let _ = input.setup.step(
            "jobs",
            started,
            Ok::<_, anyhow::Error>(given),
            |jobs| json!({"jobs": jobs, "from": "--jobs"}),
        );
        return None;
    }
    let read = super::capacity::read(&cluster.admin, arch, &template_spec(input)).await;
    let (jobs, evidence) = match read {
        Ok(capacity) => {
            // A scenario may hold two task Pods at once: a second session, the MTU peer, or a
            // replacement created while its predecessor still terminates (its requests count
            // until it is gone). On real Kind (one 2-CPU node, two sessions' room) two
            // scenarios at once left a third Pod Unschedulable past the readiness bound.
            let jobs = (capacity.sessions / PODS_PER_SCENARIO).clamp(1, host);
            let mut evidence = capacity.evidence;
            evidence["pods_per_scenario"] = json!(PODS_PER_SCENARIO);
            evidence["from"] = json!("the cluster's allocatable resources");
            evidence["host_default"] = json!(host);
            evidence["jobs"] = json!(jobs);
            (Some(jobs), evidence)
        }
        Err(e) => (
            None,
            json!({"jobs": host, "from": "the host's default",
                "why": format!("the cluster's nodes and Pods could not be read to derive it ({e}); pass --jobs to choose")}),
        ),
    };
    let _ = input.setup.step(
        "jobs",
        started,
        Ok::<_, anyhow::Error>(evidence),
        Clone::clone,
    );
    jobs
}

/// The most task Pods one scenario holds at once: `--jobs` derived from the cluster's room
/// divides by it.
const PODS_PER_SCENARIO: usize = 2;

/// Kind: `kind load` (through an image archive, see [`kind::KindCluster::load`]); then the
/// executor's permissions and a server-side dry run of a composed Pod (the privileged
/// companion must be admitted).
async fn preflight(
    input: &PrepareInput<'_>,
    cluster: &mut Cluster,
    images: &ImageSet,
    engine_api: Option<&str>,
    arch: Arch,
    pull_secrets: &[super::pull_secrets::Planned],
) -> anyhow::Result<()> {
    if let Some(kind) = &cluster.kind {
        let started = Instant::now();
        let refs = vec![images.worker.clone(), images.daemon.clone()];
        let platform = kind::save_platform(engine_api);
        input.setup.step(
            "kind_load",
            started,
            kind.load(&refs, engine_api),
            |loaded| json!({"images": refs, "loaded": loaded, "via": "docker save + kind load image-archive (images the nodes hold already: not loaded again)", "platform": platform}),
        )?;
    }
    let started = Instant::now();
    let probe_identity = SessionIdentity::new(input.run_id, "preflight", 0);
    let mut probe = task_pod(
        input,
        &cluster.namespace,
        images,
        arch,
        &probe_identity,
        pull_secrets,
    )
    .context("compose the preflight Pod")?;
    probe
        .metadata
        .labels
        .get_or_insert_default()
        .extend(probe_identity.harness_labels());
    let checked = cluster.preflight(&probe, input.config.workspace_mode).await;
    input
        .setup
        .step("preflight", started, checked, Clone::clone)?;
    if input.config.workspace_mode == WorkspaceMode::ManagedPvc {
        let started = Instant::now();
        let class = cluster
            .storage_class_preflight(input.config.cluster.storage_class.as_deref())
            .await;
        input
            .setup
            .step("storage_class", started, class, Clone::clone)?;
    }
    Ok(())
}

/// The Secrets `--image-pull-secret` and the template's `imagePullSecrets` name.
fn wanted_pull_secrets(
    input: &PrepareInput<'_>,
) -> Result<Vec<super::pull_secrets::Wanted>, super::pull_secrets::Refused> {
    let cluster = &input.config.cluster;
    super::pull_secrets::wanted(
        &cluster.image_pull_secrets,
        &template_spec(input),
        super::pull_secrets::namespace_given(
            cluster.namespace.as_deref(),
            cluster.in_cluster,
            Some(input.run_id),
        ),
    )
}

/// Where each of the run's image pull secrets is read and the name its Pods carry in the
/// run's namespace (`pull_secrets::plan`). A bare NAME is read from the kubeconfig context's
/// namespace; in the cluster (`--in-cluster`), from the one `launch` read it from.
fn planned_pull_secrets(
    input: &PrepareInput<'_>,
    cluster: &Cluster,
) -> Result<Vec<super::pull_secrets::Planned>, super::pull_secrets::Refused> {
    let context_namespace = if input.config.cluster.in_cluster {
        std::env::var(super::pull_secrets::LAUNCH_CONTEXT_NAMESPACE_ENV)
            .unwrap_or_else(|_| cluster.namespace.clone())
    } else {
        cluster
            .config
            .as_ref()
            .map_or_else(|| "default".to_owned(), |c| c.default_namespace.clone())
    };
    // In the cluster the namespace is always given, by `launch`: it named the operator's
    // `--namespace` unless it is the one `launch` creates, and the run must name the copies
    // as `launch` made them.
    let namespace_given = if input.config.cluster.in_cluster {
        cluster.namespace != cluster::run_namespace(input.run_id)
    } else {
        !cluster.created_namespace
    };
    Ok(super::pull_secrets::plan(
        &wanted_pull_secrets(input)?,
        &context_namespace,
        &cluster.namespace,
        namespace_given,
        input.run_id,
    ))
}

/// The run's image pull secrets in its namespace (`pull_secrets`), recorded as the
/// `pull_secrets` set-up step when any is named: read and copied (the copies kept on
/// `cluster` for its teardown). In the cluster (`--in-cluster`) `launch` copied them
/// already: their names are carried, nothing is read. What every Pod of the run carries
/// besides the template's own.
async fn pull_secrets(
    input: &PrepareInput<'_>,
    cluster: &mut Cluster,
) -> anyhow::Result<Vec<super::pull_secrets::Planned>> {
    let started = Instant::now();
    let copied = match planned_pull_secrets(input, cluster) {
        Ok(planned) if planned.is_empty() => return Ok(Vec::new()),
        Ok(planned) if input.config.cluster.in_cluster => Ok(super::pull_secrets::PullSecrets {
            carried: planned,
            copies: Vec::new(),
            evidence: vec![
                json!({"copied": false, "why": "in the cluster: launch copied them into the namespace"}),
            ],
        }),
        Ok(planned) => {
            let labels = cluster::run_labels(input.run_id);
            super::pull_secrets::copy(&cluster.admin, &cluster.namespace, &labels, &planned)
                .await
                .map_err(|(refused, copies)| {
                    cluster.pull_secret_copies = copies;
                    refused
                })
        }
        Err(refused) => Err(refused),
    };
    if let Ok(made) = &copied {
        cluster.pull_secret_copies = made.copies.clone();
    }
    input
        .setup
        .step("pull_secrets", started, copied, |made| json!(made.evidence))
        .map(|made| made.carried)
}

/// The task Pod as a session of `identity` would compose it, with the run's images.
fn task_pod(
    input: &PrepareInput<'_>,
    namespace: &str,
    images: &ImageSet,
    arch: Arch,
    identity: &SessionIdentity,
    pull_secrets: &[super::pull_secrets::Planned],
) -> anyhow::Result<k8s_openapi::api::core::v1::Pod> {
    let template = input
        .template
        .with_images(&images.worker, &images.daemon)?
        .template;
    // As the backend sends it: the template's own pull secrets, then the run's.
    let mut pod = compose_pod(&ComposeInput {
        template: &template,
        identity,
        namespace,
        main_container: &input.config.main_container,
        arch,
        workspace: WorkspaceSource::EmptyDir,
        create_nonce: &create_nonce(),
    })?;
    super::pull_secrets::carry_planned(&mut pod, pull_secrets);
    Ok(pod)
}

/// Before the first scenario, every node the task Pod can be placed on pulls its images
/// (`warm_up`), recorded as the `warm_up` set-up step: its time is kept apart from every
/// scenario's `pod_ready`. `--no-warm-up` or `--warm-up-timeout 0s`: recorded as skipped.
async fn warm_up(
    input: &PrepareInput<'_>,
    cluster: &Cluster,
    images: &ImageSet,
    arch: Arch,
    pull_secrets: &[super::pull_secrets::Planned],
) -> anyhow::Result<()> {
    let started = Instant::now();
    let Some(timeout) = input.config.warm_up_timeout else {
        let why = "turned off (--no-warm-up or --warm-up-timeout 0s): a cold node pulls the images within a scenario's pod_ready bound";
        let _ = input
            .setup
            .step("warm_up", started, Ok::<_, anyhow::Error>(()), |()| {
                super::warm_up::skipped(why)
            });
        return Ok(());
    };
    let identity = SessionIdentity::new(input.run_id, "warm-up", 0);
    let warmed = match task_pod(
        input,
        &cluster.namespace,
        images,
        arch,
        &identity,
        pull_secrets,
    ) {
        Ok(task) => {
            super::warm_up::run(
                &cluster.admin,
                &cluster.namespace,
                input.run_id,
                &task.spec.unwrap_or_default(),
                &template_spec(input),
                arch,
                super::warm_up::Until {
                    timeout,
                    stopped: input.stopped,
                },
            )
            .await
        }
        Err(e) => Err(e.context("compose the task Pod the warm-up pulls for")),
    };
    input
        .setup
        .step("warm_up", started, warmed, Clone::clone)
        .map(|_| ())
}

#[async_trait]
impl RunTeardown for Cluster {
    async fn teardown(&self) -> Vec<CleanupRecord> {
        Cluster::teardown(self).await
    }

    fn kept_hint(&self, gc: &str) -> String {
        format!(
            "kept the run's namespace {} (--keep); remove later: {gc}",
            self.namespace
        )
    }

    async fn release(&self) -> Vec<CleanupRecord> {
        self.give_up_lease().await.into_iter().collect()
    }
}
