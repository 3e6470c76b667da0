//! The real-Kind tests that share one cluster (kind and a Kubernetes node image built here by
//! `harness/scripts/ensure-kind.sh`): `launch` as a Job inside it, a private registry pulled
//! from with a pull secret, and the faults of a real control plane in the middle of a run
//! (issue 38, item 4), one test per fault: containerd restarted on the node, the kubelet
//! restarted, the API server's container killed, the node container paused for 30 s. Each
//! fault strikes once the run's task Pod is ready, while its scenario works; the run must end
//! with the right verdict (passed) or a clear cluster error naming the cause (errored, exit 3,
//! never a failed check: a fault of the platform is no broken promise of the Pod), and leave
//! nothing behind: its ledger is empty, `gc --run` finds nothing, its namespace goes.
//!
//! One cluster, created by the first test that runs and deleted when the binary ends however
//! its tests ended: a cluster's creation and image loads cost more than most of these tests.
//! They run one at a time, in `main`'s order (the registry last: see there); before each, the
//! cluster is waited on until it is healthy, so that each strikes a settled control plane. A
//! custom test harness (libtest-mimic) owns `main` for that: libtest has no hook after its
//! last test.
//! Every test name says `on_real_kind`; none reads as passed unless it ran.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::real_kind::{built, clusters_of, one_cluster_at_a_time};
use common::root;
use kandev_harness::host::kube_build::Pins;
use kandev_report::{CheckOutcome, Outcome};
use libtest_mimic::{Arguments, Failed, Trial};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The scenario each fault strikes: its Pod lives a while (the agent restarts inside it, the
/// kubelet restarts its main container), and it execs, reads the node and talks to the
/// nested daemon throughout.
const SCENARIO: &str = "lifecycle::agent_restart";

/// The faults, each with how it is caused on the node container.
const FAULTS: &[(&str, Fault)] = &[
    (
        "containerd_restarted_mid_run_on_real_kind",
        Fault::Systemd("containerd"),
    ),
    (
        "kubelet_restarted_mid_run_on_real_kind",
        Fault::Systemd("kubelet"),
    ),
    (
        "api_server_killed_mid_run_on_real_kind",
        Fault::KillApiServer,
    ),
    (
        "node_paused_for_30_s_mid_run_on_real_kind",
        Fault::Pause(Duration::from_secs(30)),
    ),
];

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// `systemctl restart` of a node service: its containers' shims live on.
    Systemd(&'static str),
    /// The API server's container stopped with SIGKILL (`crictl stop --timeout 0`); the
    /// kubelet starts its static Pod's container again.
    KillApiServer,
    /// The node container frozen (`docker pause`: the cgroup freezer) for this long, then
    /// thawed: every process of the node, the Pods' among them, stops and goes on.
    Pause(Duration),
}

fn main() {
    let mut args = Arguments::from_args();
    // One test at a time on the one cluster.
    args.test_threads = Some(1);
    let mut trials = vec![on_the_cluster(
        "launch_runs_the_suite_as_a_job_inside_the_cluster_on_real_kind",
        launch_runs_the_suite_as_a_job_inside_the_cluster,
    )];
    trials.extend(FAULTS.iter().map(|&(name, fault)| {
        Trial::test(name, move || {
            with_the_cluster(|cluster| strike(cluster, fault))
        })
    }));
    // Last: once the node has pulled the daemon image with a pull secret, the kubelet
    // verifies every later Pod's right to that image (its ID) by pulling again with that
    // Pod's credentials (KubeletEnsureSecretPulledImages, beta and on by default since 1.35,
    // kubernetes v1.37.2 pkg/features/kube_features.go): the faults' runs, which carry no
    // secret and name the image by its local tag, then failed their warm-up pulling it.
    trials.push(on_the_cluster(
        "a_private_registry_is_pulled_from_with_the_pull_secret_on_real_kind",
        a_private_registry_is_pulled_from_with_the_pull_secret,
    ));
    let conclusion = libtest_mimic::run(&args, trials);
    // Whatever the tests did, the cluster goes (a killed binary's: `kind delete cluster`).
    let made = CLUSTER
        .get()
        .and_then(|c| c.lock().unwrap_or_else(|p| p.into_inner()).take());
    if let Some(cluster) = made {
        cluster.delete();
    }
    conclusion.exit();
}

/// A test that panics on what it finds wrong, on the shared cluster.
fn on_the_cluster(name: &'static str, test: fn(&Cluster)) -> Trial {
    Trial::test(name, move || {
        with_the_cluster(|cluster| {
            test(cluster);
            Ok(())
        })
    })
}

/// Runs `test` on the shared cluster, creating it first if no test has, once it is healthy.
fn with_the_cluster(test: impl FnOnce(&Cluster) -> Result<(), Failed>) -> Result<(), Failed> {
    let _one = one_cluster_at_a_time();
    let shared = CLUSTER.get_or_init(|| Mutex::new(None));
    let mut guard = shared.lock().unwrap_or_else(|p| p.into_inner());
    if guard.is_none() {
        *guard = Some(Cluster::create(built())?);
    }
    let cluster = guard.as_ref().unwrap();
    cluster.await_healthy(Duration::from_secs(240))?;
    test(cluster)
}

/// The shared cluster, made by the first test that needs it.
static CLUSTER: OnceLock<Mutex<Option<Cluster>>> = OnceLock::new();

struct Cluster {
    pins: Pins,
    name: String,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl Cluster {
    fn create(pins: Pins) -> Result<Self, Failed> {
        let name = format!(
            "kandev-acc-faults-{}",
            kandev_harness::pod::identity::random_hex(3)
        );
        let kind = pins.bin_dir().unwrap().join("kind");
        let config = root().join("kind/cluster.yaml");
        let dir = tempfile::tempdir().unwrap();
        let kubeconfig = dir.path().join("kubeconfig");
        let created = run_tool(
            &kind,
            &[
                "create",
                "cluster",
                "--name",
                &name,
                "--config",
                config.to_str().unwrap(),
                "--image",
                &pins.node_image(),
                "--kubeconfig",
                kubeconfig.to_str().unwrap(),
                "--wait",
                "180s",
            ],
        );
        let cluster = Self {
            pins,
            name,
            kubeconfig,
            _dir: dir,
        };
        if let Err(e) = created {
            cluster.delete();
            return Err(e);
        }
        Ok(cluster)
    }

    fn node(&self) -> String {
        format!("{}-control-plane", self.name)
    }

    fn kubectl(&self, args: &[&str]) -> Result<String, Failed> {
        let kubectl = self.pins.bin_dir().unwrap().join("kubectl");
        let mut all = vec!["--kubeconfig", self.kubeconfig.to_str().unwrap()];
        all.extend_from_slice(args);
        run_tool(&kubectl, &all)
    }

    /// Until the API server is ready, the node Ready and every kube-system Pod ready (each
    /// control-plane component back after a fault, its informers synced), bounded.
    fn await_healthy(&self, bound: Duration) -> Result<(), Failed> {
        let start = Instant::now();
        let mut last = String::new();
        while start.elapsed() < bound {
            match self.health() {
                Ok(()) => return Ok(()),
                Err(why) => last = why,
            }
            std::thread::sleep(Duration::from_secs(2));
        }
        Err(format!(
            "the cluster {} was not healthy again within {}s: {last}",
            self.name,
            bound.as_secs()
        )
        .into())
    }

    fn health(&self) -> Result<(), String> {
        let ready = self
            .kubectl(&["get", "--raw", "/readyz"])
            .map_err(|e| format!("/readyz: {}", e.message().unwrap_or_default()))?;
        if ready.trim() != "ok" {
            return Err(format!("/readyz: {ready}"));
        }
        let node = self
            .kubectl(&[
                "get",
                "node",
                &self.node(),
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ])
            .map_err(|e| format!("node: {}", e.message().unwrap_or_default()))?;
        if node.trim() != "True" {
            return Err(format!("node Ready={node}"));
        }
        let pods = self
            .kubectl(&[
                "get",
                "pods",
                "-n",
                "kube-system",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
            ])
            .map_err(|e| format!("kube-system: {}", e.message().unwrap_or_default()))?;
        let unready: Vec<&str> = pods.lines().filter(|l| !l.ends_with("=True")).collect();
        if pods.lines().count() == 0 || !unready.is_empty() {
            return Err(format!("kube-system Pods not ready: {unready:?}"));
        }
        Ok(())
    }

    fn delete(self) {
        let kind = self.pins.bin_dir().unwrap().join("kind");
        let _ = Command::new(kind)
            .args(["delete", "cluster", "--name", &self.name])
            .output();
        assert_eq!(clusters_of(&self.pins, &self.name), Vec::<String>::new());
    }
}

/// Runs `program args`; its stdout, or a failure carrying its output.
fn run_tool(program: &Path, args: &[&str]) -> Result<String, Failed> {
    let out = Command::new(program)
        .args(args)
        .env("KANDEV_ACCEPTANCE_ROOT", root())
        .output()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} {args:?}: {}",
            program.display(),
            common::output_text(&out)
        )
        .into());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `program args`, and returns its stdout; a failure fails the test with its output.
fn must(program: &Path, args: &[&str]) -> String {
    run_tool(program, args).unwrap_or_else(|e| panic!("{}", e.message().unwrap_or_default()))
}

/// The fixture image of each role (`kandev-acceptance image fixtures`), by role.
fn fixture_images(binary: &Path) -> impl Fn(&str) -> String {
    let fixtures = must(binary, &["image", "fixtures"]);
    move |role: &str| {
        fixtures
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{role} ")))
            .unwrap_or_else(|| panic!("no {role} image in: {fixtures}"))
            .trim()
            .to_owned()
    }
}

/// `launch` on a real Kind cluster, as an operator whose API server is out of reach runs it
/// (the nightly's launch job): the harness image and the fixture images loaded into the
/// node, the suite run as a Job under Kandev's executor identity inside the cluster, its
/// report retrieved. The cluster-facing scenarios (`launch::`) run there; the whole
/// catalogue on real Kind is `real_kind.rs`'s.
fn launch_runs_the_suite_as_a_job_inside_the_cluster(cluster: &Cluster) {
    let pins = &cluster.pins;
    let kind = pins.bin_dir().unwrap().join("kind");
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_kandev-acceptance"));
    let name = cluster.name.clone();

    // The images: the harness image and the fixture worker and daemon, loaded into the node.
    let harness = must(binary, &["image", "harness"]).trim().to_owned();
    let image_of = fixture_images(binary);
    let (worker, daemon) = (image_of("worker"), image_of("daemon"));
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("images.tar");
    let archive = archive.to_str().unwrap();
    must(
        std::path::Path::new("docker"),
        &["save", "-o", archive, &harness, &worker, &daemon],
    );
    must(&kind, &["load", "image-archive", archive, "--name", &name]);
    let kubeconfig = &cluster.kubeconfig;
    let context = format!("kind-{name}");
    let reports = dir.path().join("reports");
    let out = kandev_test_support::harness_env::harness(binary)
        .args([
            "launch",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--context",
            &context,
            "--harness-image",
            &harness,
            "--worker-image",
            &worker,
            "--daemon-image",
            &daemon,
            "--node-inspector",
            "--start-timeout",
            "300s",
            "--job-timeout",
            "30m",
            "--hold",
            "60s",
            "--report-dir",
            reports.to_str().unwrap(),
            "launch::",
        ])
        .env("KANDEV_ACCEPTANCE_ROOT", root())
        .output()
        .unwrap();
    let text = common::output_text(&out);
    let (_, report) = common::written_report(&reports, &text);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let names: Vec<&str> = report.scenarios.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "launch::connection",
            "launch::contract",
            "launch::causal_failures"
        ],
        "{text}"
    );
    for scenario in &report.scenarios {
        assert_eq!(
            scenario.outcome,
            Outcome::Passed,
            "{}: {text}",
            scenario.name
        );
    }
    assert_eq!(
        report.environment.kubernetes_version.as_deref(),
        Some(pins.kubernetes.as_str())
    );
    // Inside the cluster the bookkeeper reads the nodes (launch's ClusterRole for
    // --node-inspector): the inspector started on the node and the warm-up ran.
    for step in ["node_inspector", "warm_up"] {
        let found = report.setup.iter().find(|s| s.name == step);
        let evidence = found.map(|s| s.evidence.to_string()).unwrap_or_default();
        assert!(
            found.is_some_and(|s| s.error.is_none())
                && evidence.contains(&format!("{name}-control-plane"))
                && !evidence.contains("could not be listed"),
            "{step}: {evidence}\n{text}"
        );
    }

    // Nothing the launch created is left in the cluster.
    let gc = kandev_test_support::harness_env::harness(binary)
        .args([
            "gc",
            "--backend",
            "kube",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--context",
            &context,
            "--all",
        ])
        .env("KANDEV_ACCEPTANCE_ROOT", root())
        .output()
        .unwrap();
    let gc_text = common::output_text(&gc);
    assert!(gc.status.success(), "{gc_text}");
    // The run's namespace may still be terminating (its deletion asked for by the run):
    // the cluster finishes that, gc leaves it.
    let left: Vec<&str> = gc_text
        .lines()
        .filter(|l| l.starts_with("being removed already:") && !l.contains(" namespace/"))
        .collect();
    assert!(
        gc_text.contains("removed 0 objects") && left.is_empty(),
        "the launch left objects for gc: {gc_text}"
    );
    let kubectl = pins.bin_dir().unwrap().join("kubectl");
    let grants = must(
        &kubectl,
        &[
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "get",
            "clusterroles,clusterrolebindings",
            "-l",
            "acceptance.kandev.ai/managed=true",
            "-o",
            "name",
        ],
    );
    assert_eq!(grants.trim(), "", "the launch left its node grant");
}

/// Issue 40, item 7 (private registries) on a real Kind node: the daemon image lives only in a
/// registry with htpasswd authentication (Debian's docker-registry, `fixtures/images/registry`,
/// started and reaped by testcontainers inside the node's network namespace, so that the
/// node's containerd reaches it as `localhost`, over plain HTTP as containerd's CRI does for a
/// localhost host). Without `--image-pull-secret` the run fails in its warm-up, naming the
/// registry's refusal for want of credentials and its fix; with it the node pulls the image
/// with the copied Secret and the scenario passes. `run --backend kube` against the Kind
/// cluster: the harness loads nothing, the node pulls.
fn a_private_registry_is_pulled_from_with_the_pull_secret(cluster: &Cluster) {
    use testcontainers::core::WaitFor;
    use testcontainers::runners::SyncRunner;
    use testcontainers::{GenericImage, ImageExt};

    let pins = &cluster.pins;
    let bin = pins.bin_dir().unwrap();
    let kind = bin.join("kind");
    let kubectl = bin.join("kubectl");
    let docker = std::path::Path::new("docker");
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_kandev-acceptance"));
    let name = cluster.name.clone();
    let node = format!("{name}-control-plane");

    // The registry image, on the fixtures' Debian base.
    let image_of = fixture_images(binary);
    let (base, worker, daemon) = (image_of("base"), image_of("worker"), image_of("daemon"));
    let registry_tag = "kandev-acceptance/registry:test";
    let recipe = root().join("fixtures/images/registry");
    must(
        docker,
        &[
            "build",
            "-q",
            "-t",
            registry_tag,
            "--build-arg",
            &format!("BASE_IMAGE={base}"),
            recipe.to_str().unwrap(),
        ],
    );
    let password = kandev_harness::pod::identity::random_hex(8);
    let (repository, tag) = registry_tag.split_once(':').unwrap();
    // In the node's network namespace: set on the engine's host config directly, as
    // testcontainers' `with_network` would try to create a network of that name; and no port
    // published (the engine refuses publishing with a container's network).
    let network_mode = format!("container:{node}");
    let _registry = GenericImage::new(repository, tag)
        .with_wait_for(WaitFor::message_on_stderr("listening on 127.0.0.1:5111"))
        .with_host_config_modifier(move |host| {
            host.network_mode = Some(network_mode.clone());
            host.publish_all_ports = Some(false);
            host.port_bindings = None;
        })
        .with_env_var("HTPASSWD_USER", "kandev")
        .with_env_var("HTPASSWD_PASSWORD", password.as_str())
        .start()
        .unwrap();

    // The daemon image into the registry, through the node's own containerd (in a namespace
    // of its own, which the kubelet's `k8s.io` does not see); the worker loaded as usual.
    let pushed = format!(
        "localhost:5111/kandev/daemon:{}",
        daemon.rsplit(':').next().unwrap()
    );
    let in_node = |script: &str| {
        must(
            std::path::Path::new("sh"),
            &["-c", &format!("set -e; {script}")],
        )
    };
    in_node(&format!(
        "docker save {daemon} | docker exec -i {node} ctr -n kandev-push images import -"
    ));
    in_node(&format!(
        "docker exec {node} ctr -n kandev-push images tag docker.io/{daemon} {pushed}; docker exec {node} ctr -n kandev-push images push --plain-http -u kandev:{password} {pushed}; docker exec {node} ctr -n kandev-push images rm docker.io/{daemon} {pushed}"
    ));
    must(&kind, &["load", "docker-image", &worker, "--name", &name]);

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = cluster.kubeconfig.to_str().unwrap();
    let context = format!("kind-{name}");
    must(
        &kubectl,
        &[
            "--kubeconfig",
            kubeconfig,
            "--context",
            &context,
            "-n",
            "default",
            "create",
            "secret",
            "docker-registry",
            "regcred",
            "--docker-server=localhost:5111",
            "--docker-username=kandev",
            &format!("--docker-password={password}"),
        ],
    );
    let run = |extra: &[&str]| {
        // Each run its own report folder: `written_report` reads the one report found there.
        let reports = dir.path().join(format!("reports-{}", extra.len()));
        let out = kandev_test_support::harness_env::harness(binary)
            .args([
                "run",
                "--backend",
                "kube",
                "--kubeconfig",
                kubeconfig,
                "--context",
                &context,
                "--worker-image",
                &worker,
                "--daemon-image",
                &pushed,
                "--report-dir",
                reports.to_str().unwrap(),
            ])
            .args(extra)
            .args(["--exact", "launch::contract"])
            .env("KANDEV_ACCEPTANCE_ROOT", root())
            .output()
            .unwrap();
        let text = common::output_text(&out);
        let (folder, report) = common::written_report(&reports, &text);
        (out.status.code(), text, report, folder)
    };

    // First without the secret (the node has not pulled the image yet): refused for want of
    // credentials, named with the fix, in the warm-up.
    let (code, text, report, _) = run(&[]);
    assert_eq!(code, Some(3), "{text}");
    let warm_up = report.setup.iter().find(|s| s.name == "warm_up");
    let error = warm_up
        .and_then(|s| s.error.clone())
        .unwrap_or_else(|| panic!("the warm-up did not fail: {text}"));
    assert!(
        error.contains(&pushed)
            && error.contains("the registry refused the pull for want of credentials")
            && error.contains(&format!(
                "fix: {}",
                kandev_harness::backend::kube::pull_secrets::AUTH_FIX
            )),
        "{error}"
    );

    // Without the warm-up, the scenario's Pod meets the refusal: it fails, and its evidence
    // holds the kubelet's own events, each with its time (events.k8s.io writes leave
    // `lastTimestamp` null: evidence::event_line).
    let (code, text, report, folder) = run(&["--no-warm-up"]);
    assert_ne!(code, Some(0), "{text}");
    assert_ne!(report.scenarios[0].outcome, Outcome::Passed, "{text}");
    let events: Vec<String> = report.scenarios[0]
        .artifacts
        .iter()
        .filter(|a| a.ends_with(".events.txt"))
        .map(|a| std::fs::read_to_string(folder.join(a)).unwrap())
        .collect();
    assert!(
        !events.is_empty(),
        "no events.txt among {:?}",
        report.scenarios[0].artifacts
    );
    let pulls: Vec<&str> = events
        .iter()
        .flat_map(|e| e.lines())
        .filter(|l| l.contains(&pushed) && (l.contains("Failed") || l.contains("BackOff")))
        .collect();
    assert!(
        !pulls.is_empty(),
        "no refused pull of {pushed} in the events: {events:?}"
    );
    for line in events.iter().flat_map(|e| e.lines()) {
        assert!(
            !line.starts_with("(no time)") && !line.starts_with("(events not readable"),
            "{line}"
        );
    }

    // With it: copied, the node pulls, the scenario passes.
    let (code, text, report, _) = run(&["--image-pull-secret", "regcred"]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(report.scenarios[0].outcome, Outcome::Passed, "{text}");
    let copied = report
        .setup
        .iter()
        .find(|s| s.name == "pull_secrets")
        .unwrap_or_else(|| panic!("no pull_secrets step: {text}"));
    assert_eq!(copied.evidence[0]["copied"], true, "{text}");
    let warmed = report.setup.iter().find(|s| s.name == "warm_up").unwrap();
    assert!(
        warmed.evidence.to_string().contains(&pushed),
        "{}",
        warmed.evidence
    );
}

/// One fault in the middle of a run of [`SCENARIO`], and what the run made of it.
fn strike(cluster: &Cluster, fault: Fault) -> Result<(), Failed> {
    let run_id = format!("faults-{}", kandev_harness::pod::identity::random_hex(4));
    let reports = tempfile::tempdir().unwrap();
    let mut child =
        kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
            .args([
                "run",
                "--backend",
                "kind",
                "--kind-cluster",
                &cluster.name,
                "--run-id",
                &run_id,
                "--report-dir",
                reports.path().to_str().unwrap(),
                "--exact",
                SCENARIO,
            ])
            .env("KANDEV_ACCEPTANCE_ROOT", root())
            .env_remove("GITHUB_STEP_SUMMARY")
            .env_remove("GITHUB_ACTIONS")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
    // Its output is read on threads, so that a full pipe never holds the run.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = drain(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = drain(child.stderr.take().map(|p| Box::new(p) as _));

    // The fault strikes once the task Pod is ready (the image loads, the warm-up and the Pod's
    // start come first), 3 s into its work.
    let struck = match await_task_pod_ready(cluster, &run_id, &mut child) {
        Ok(pod) => {
            std::thread::sleep(Duration::from_secs(3));
            cause(cluster, fault).map(|()| pod)
        }
        Err(e) => Err(e),
    };
    let status = wait_bounded(&mut child, Duration::from_secs(15 * 60));
    let output = format!(
        "{}{}",
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default()
    );
    let pod = struck.map_err(|e| format!("{}\n{output}", e.message().unwrap_or_default()))?;
    let code = status.map_err(|e| format!("{e}\n{output}"))?;

    let (_, report) = common::written_report(reports.path(), &output);
    let scenario = report
        .scenarios
        .iter()
        .find(|s| s.name == SCENARIO)
        .ok_or_else(|| format!("{SCENARIO} not in the report\n{output}"))?;
    let diagnosis = scenario.diagnosis.clone().unwrap_or_default();
    let mut wrong = Vec::new();
    match scenario.outcome {
        Outcome::Passed if code == Some(0) => {}
        // A cluster error: exit 3, the cause named (a cluster's, with its fix), never a check
        // failed by the fault.
        Outcome::Errored if code == Some(3) => {
            if !(diagnosis.contains("fix:") && names_the_cause(&diagnosis)) {
                wrong.push(format!(
                    "errored without naming the cluster's cause and its fix: {diagnosis}"
                ));
            }
        }
        outcome => wrong.push(format!(
            "{outcome:?} (exit {code:?}): a fault of the platform is passed or a cluster error, never this: {diagnosis}"
        )),
    }
    for check in &scenario.checks {
        if check.outcome == CheckOutcome::Failed {
            wrong.push(format!("{} failed under the fault", check.id));
        }
    }
    if !report.leftovers.is_empty() {
        wrong.push(format!("leftovers in the ledger: {:?}", report.leftovers));
    }

    // Nothing left: gc finds nothing of the run, and its namespace (deleted by the run) goes.
    cluster.await_healthy(Duration::from_secs(240))?;
    let gc = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args([
            "gc",
            "--backend",
            "kind",
            "--kind-cluster",
            &cluster.name,
            "--run",
            &run_id,
            "--dry-run",
        ])
        .env("KANDEV_ACCEPTANCE_ROOT", root())
        .output()
        .unwrap();
    let gc_text = common::output_text(&gc);
    if !gc.status.success() || !gc_text.contains("would remove 0 objects") {
        wrong.push(format!("gc --run found what the run left: {gc_text}"));
    }
    let namespace = kandev_harness::backend::kube::cluster::run_namespace(&run_id);
    if let Err(e) = await_gone(cluster, &namespace, Duration::from_secs(120)) {
        wrong.push(e);
    }
    if wrong.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{fault:?} struck {pod} of run {run_id}:\n{}\n{output}",
        wrong.join("\n")
    )
    .into())
}

/// A diagnosis names a cluster's cause when it speaks of the cluster, its API server, its
/// node or what runs the containers there (the words the harness's cluster errors carry).
fn names_the_cause(diagnosis: &str) -> bool {
    let lower = diagnosis.to_lowercase();
    [
        "api server",
        "cluster",
        "kubelet",
        "containerd",
        "node",
        "exec stream",
    ]
    .iter()
    .any(|w| lower.contains(w))
}

/// The run's task Pod (Kandev's `kandev-<16 hex>`) once every container of it is ready; an
/// error when the run ends first or it is not ready within 10 minutes.
fn await_task_pod_ready(
    cluster: &Cluster,
    run_id: &str,
    child: &mut std::process::Child,
) -> Result<String, Failed> {
    let start = Instant::now();
    let selector = format!("{}={run_id}", kandev_harness::pod::identity::LABEL_RUN);
    while start.elapsed() < Duration::from_secs(600) {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("the run ended ({status}) before its task Pod was ready").into());
        }
        let pods = cluster
            .kubectl(&[
                "get",
                "pods",
                "-A",
                "-l",
                &selector,
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status}{\"\\n\"}{end}",
            ])
            .unwrap_or_default();
        let ready = pods.lines().find_map(|line| {
            let (name, ready) = line.split_once('=')?;
            let hex = name.strip_prefix("kandev-")?;
            (hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()) && ready == "True")
                .then(|| name.to_owned())
        });
        if let Some(pod) = ready {
            return Ok(pod);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Err("the run's task Pod was not ready within 600s".into())
}

fn cause(cluster: &Cluster, fault: Fault) -> Result<(), Failed> {
    let docker = Path::new("docker");
    let node = cluster.node();
    match fault {
        Fault::Systemd(unit) => {
            run_tool(docker, &["exec", &node, "systemctl", "restart", unit])?;
        }
        Fault::KillApiServer => {
            run_tool(
                docker,
                &[
                    "exec",
                    &node,
                    "sh",
                    "-c",
                    "id=$(crictl ps -q --name kube-apiserver) && [ -n \"$id\" ] && crictl stop --timeout 0 $id",
                ],
            )?;
        }
        Fault::Pause(frozen) => {
            run_tool(docker, &["pause", &node])?;
            std::thread::sleep(frozen);
            run_tool(docker, &["unpause", &node])?;
        }
    }
    Ok(())
}

fn wait_bounded(child: &mut std::process::Child, bound: Duration) -> Result<Option<i32>, String> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(status.code());
        }
        if start.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("the run did not end within {}s", bound.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Until `namespace` is gone, bounded.
fn await_gone(cluster: &Cluster, namespace: &str, bound: Duration) -> Result<(), String> {
    let start = Instant::now();
    while start.elapsed() < bound {
        match cluster.kubectl(&[
            "get",
            "namespace",
            namespace,
            "--ignore-not-found",
            "-o",
            "name",
        ]) {
            Ok(found) if found.trim().is_empty() => return Ok(()),
            _ => std::thread::sleep(Duration::from_secs(2)),
        }
    }
    Err(format!(
        "the run's namespace {namespace} was still there {}s after the run",
        bound.as_secs()
    ))
}
