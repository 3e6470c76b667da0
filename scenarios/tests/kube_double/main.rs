//! The whole catalogue through `launch --backend kube --node-inspector` against the
//! wire-level cluster double (`kandev_test_support::cluster_double`), the run inside a Job's
//! Pod (`run --in-cluster`), and `run --backend kube` from outside for the broken fixtures and
//! gc, and the cluster twins (behaviours of the double that break the checks only a cluster
//! can break): the harness binary reaches the double only through the kubeconfig it wrote
//! (HTTPS, its own CA, a token) or, in the Pod, through the mounted token and CA, with real
//! RBAC, and runs every session over the double's websockets; the double runs the Pods on
//! this host's engine through the local backend (with the UIDs it assigned, so the inspector
//! Pod finds each Pod's `pod<uid>` cgroup on the one node). Every scenario must pass and
//! nothing of the run may be left on the engine. Needs a reachable engine, so it is `#[ignore]`d.

// A test file: failing loudly with unwrap/panic is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../common/mod.rs"]
mod common;
// The other cluster-double tests of whole runs, in one binary with these: each mostly waits
// (on the engine, on a bound), and libtest runs the tests of one binary side by side.
mod faults;
mod jobs;
mod launch;
mod node_ledger;
mod platform;
mod pull_secrets;
mod shared_pull_secrets;
mod storage;

use common::kube::{
    Run, command, held_by_double, launch, launch_command, launched_run_id, left_in_double, run,
    run_command,
};
use common::{REFUSED_BEFORE_THE_RUN, fixture, twin_failures};
use kandev_harness::host::images::ImageSet;
use kandev_harness::pod::identity::{LABEL_LAUNCH, LABEL_MANAGED, LABEL_ROLE, LABEL_RUN};
use kandev_harness::runner::Twin;
use kandev_report::Capability;
use kandev_report::Outcome;
use kandev_test_support::cluster_double;
use kandev_test_support::cluster_double::Behaviour;
use kandev_test_support::engine::FixtureEngine;
use kandev_test_support::engine::engine_double;
use std::sync::Arc;

/// What the engine still holds of `run_id` (containers and volumes), polled briefly: claims'
/// volumes are removed once their Pod is gone.
async fn left_on_engine(run_id: &str) -> Vec<String> {
    let label = format!("label=acceptance.kandev.ai/run={run_id}");
    let mut left = Vec::new();
    for _ in 0..60 {
        left = ["ps -aq", "volume ls -q"]
            .iter()
            .flat_map(|command| {
                let mut args: Vec<&str> = command.split(' ').collect();
                args.extend(["--filter", &label]);
                let out = std::process::Command::new("docker")
                    .args(&args)
                    .output()
                    .unwrap();
                String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .map(str::to_owned)
                    .filter(|l| !l.is_empty())
                    .collect::<Vec<_>>()
            })
            .collect();
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    left
}

/// Asserts `scenario` failed (exit 1) with a diagnosis containing `promise`, kept its
/// evidence, and left nothing on the double's engine; the diagnosis.
async fn assert_fails(run: &Run, scenario: &str, promise: &str, evidence: bool) -> String {
    let report = run
        .report
        .scenarios
        .iter()
        .find(|s| s.name == scenario)
        .unwrap_or_else(|| panic!("{scenario} did not run:\n{}", run.text));
    assert_eq!(
        report.outcome,
        Outcome::Failed,
        "{scenario}: {:?}\n{}",
        report.diagnosis,
        run.text
    );
    let diagnosis = report.diagnosis.clone().unwrap_or_default();
    assert!(
        diagnosis.contains(promise),
        "{scenario} failed, but the diagnosis does not name the promise {promise:?}: {diagnosis}"
    );
    assert_eq!(
        run.code,
        Some(1),
        "exit code of a failed scenario\n{}",
        run.text
    );
    assert!(
        !evidence || !report.artifacts.is_empty(),
        "a failed scenario keeps evidence"
    );
    for artifact in &report.artifacts {
        assert!(
            run.report_dir.join(artifact).is_file(),
            "artifact {artifact} is missing"
        );
    }
    assert!(
        run.report.leftovers.is_empty(),
        "{:?}",
        run.report.leftovers
    );
    let left = left_on_engine(&run.report.run_id).await;
    assert!(left.is_empty(), "left on the engine: {left:?}");
    diagnosis
}

/// The whole catalogue from inside the cluster, as an operator runs it with `launch`: the
/// harness creates the executor's and the bookkeeper's identities, the inputs Secret and a Job
/// on the double; the Job's Pod runs the harness image (this very binary) with `run
/// --in-cluster`, reaching the double at the address its Pods reach it at with the token and
/// CA mounted there, and every session goes through that service account. Every scenario
/// passes, the report retrieved is the one the Pod wrote (launch compares its sha256 with the
/// one the run logged), and nothing of the launch or the run is left in the double or on the
/// engine behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn catalogue_in_cluster_on_kube_double() {
    let (double, images, harness) = in_cluster_double().await;
    let launched = launch(&double, &images, &harness, &["--node-inspector"]).await;
    let text = &launched.text;
    let (_, report) = launched.report();
    assert_eq!(report.run_id, launched.run_id, "{text}");
    assert_eq!(
        report.scenarios.len(),
        kandev_scenarios::registry().len(),
        "{text}"
    );
    for scenario in &report.scenarios {
        eprintln!(
            "{:<40} {:?} {} ms",
            scenario.name, scenario.outcome, scenario.duration_ms
        );
    }
    // The figures to set beside real Kind's (docs/development.md): checks by kind and outcome.
    let mut tally = std::collections::BTreeMap::<String, usize>::new();
    for check in report.scenarios.iter().flat_map(|s| &s.checks) {
        *tally
            .entry(format!("{:?} {:?}", check.kind, check.outcome))
            .or_default() += 1;
    }
    eprintln!("checks: {tally:?}");
    // `image::recipe` reads the images' config and layers from an engine holding them; the
    // Pod has none (as on any cluster whose images were not built where the harness runs):
    // it is skipped, with that reason, and every other scenario passes.
    let failures: Vec<String> = report
        .scenarios
        .iter()
        .filter(|s| s.outcome != Outcome::Passed)
        .filter(|s| {
            !(s.name == "image::recipe"
                && s.outcome == Outcome::Skipped
                && s.diagnosis
                    .as_deref()
                    .is_some_and(|d| d.contains("no engine holding the run's images")))
        })
        .map(|s| format!("{}: {:?} {:?}", s.name, s.outcome, s.diagnosis))
        .collect();
    assert!(failures.is_empty(), "{failures:#?}\n{text}");
    assert_eq!(launched.code, Some(0), "{text}");
    assert!(
        text.contains("its sha256 is the one the run logged"),
        "{text}"
    );
    assert!(report.leftovers.is_empty(), "{:?}", report.leftovers);
    // The sessions ran as the Pod's own service account, which the run did not create.
    let preflight = report
        .setup
        .iter()
        .find(|s| s.name == "preflight")
        .unwrap_or_else(|| panic!("no preflight step: {text}"));
    assert_eq!(
        preflight.evidence["executor"],
        format!(
            "system:serviceaccount:kandev-acceptance-{}:kandev-acceptance-executor",
            report.run_id
        ),
        "{text}"
    );
    assert_eq!(preflight.evidence["executor_created_by_run"], false);
    assert!(
        report
            .environment
            .images
            .iter()
            .any(|i| i.role == "harness" && i.reference == harness),
        "{:?}",
        report.environment.images
    );
    let left = left_in_double(&double, &launched.run_id).await;
    assert!(left.is_empty(), "left in the double: {left:?}");
    let left = left_on_engine(&launched.run_id).await;
    assert!(left.is_empty(), "left on the engine: {left:?}");
}

/// The double with its Pods on this host's engine, the fixture images, and the harness image
/// of this very binary.
async fn in_cluster_double() -> (cluster_double::KubeDouble, ImageSet, String) {
    let engine = FixtureEngine::start().await;
    let double = cluster_double::start(Some(engine.local_backend()))
        .await
        .unwrap();
    let harness = engine
        .harness_image(std::path::Path::new(env!(
            "CARGO_BIN_EXE_kandev-acceptance"
        )))
        .await;
    (double, engine.images, harness.reference)
}

/// What `launch` refuses, each with its cause named and nothing left: a harness image the node
/// cannot pull (exit 3) and a Role the API server would refuse as invalid (exit 2). With
/// [`launch_bounds_a_run_by_the_jobs_deadline_on_kube_double`] and
/// [`launch_interrupted_or_killed_leaves_nothing_on_kube_double`], three tests, not one: each
/// mostly waits on its launches, so libtest runs them side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn launch_refusals_are_named_and_leave_nothing_on_kube_double() {
    let (double, images, harness) = in_cluster_double().await;
    let started = std::time::Instant::now();

    let missing = launch(
        &double,
        &images,
        "kandev-acceptance/harness:not-built",
        &["--exact", "daemon::socket_only"],
    )
    .await;
    assert_eq!(missing.code, Some(3), "{}", missing.text);
    assert!(
        missing.text.contains("cannot start") && missing.text.contains("ErrImagePull"),
        "{}",
        missing.text
    );
    let left = left_in_double(&double, &missing.run_id).await;
    assert!(left.is_empty(), "left in the double: {left:?}");
    eprintln!(
        "missing image in {:?}:\n{}",
        started.elapsed(),
        missing.text
    );

    // A Role the API server would refuse (a rule without apiGroups): refused by the harness
    // before anything is created, named with its fix, nothing left (the real API server's 422
    // for it: real_api_server's launch.rs).
    let role = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        role.path(),
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: executor}\nrules:\n- resources: [pods]\n  verbs: [get, create, delete, watch]\n",
    )
    .unwrap();
    let refused = launch(
        &double,
        &images,
        &harness,
        &[
            "--executor-role",
            role.path().to_str().unwrap(),
            "--exact",
            "daemon::socket_only",
        ],
    )
    .await;
    assert_eq!(refused.code, Some(2), "{}", refused.text);
    assert!(
        refused.text.contains(&format!(
            "the executor Role {} rules[0] names no apiGroups",
            role.path().display()
        )) && refused.text.contains("nothing was created"),
        "{}",
        refused.text
    );
    // Refused before a run id was given: nothing in the double is any launch's or run's.
    assert!(refused.run_id.is_empty(), "{}", refused.text);
    let held: Vec<_> = [
        "namespaces",
        "roles",
        "rolebindings",
        "serviceaccounts",
        "jobs",
    ]
    .iter()
    .flat_map(|resource| double.state.objects(resource))
    .filter(|o| {
        let labels = &o["metadata"]["labels"];
        labels[LABEL_LAUNCH].is_string() || labels[LABEL_RUN].is_string()
    })
    .map(|o| o["metadata"]["name"].clone())
    .collect();
    assert!(held.is_empty(), "left in the double: {held:?}");
}

/// A run past `--job-timeout` (the Job's deadline) ends with exit 3 and its cause named. In
/// the operator's namespace: the Job's deadline ends the run mid-scenario, and launch sweeps the
/// session Pod the run left there (a namespace of its own would take it along).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn launch_bounds_a_run_by_the_jobs_deadline_on_kube_double() {
    let (double, images, harness) = in_cluster_double().await;
    let started = std::time::Instant::now();
    double.state.create_namespace("operators-own", &[]);
    let bounded = launch(
        &double,
        &images,
        &harness,
        &[
            "--namespace",
            "operators-own",
            "--job-timeout",
            "15",
            "--hold",
            "10",
            "--exact",
            "worker::recipe_smoke",
        ],
    )
    .await;
    assert_eq!(bounded.code, Some(3), "{}", bounded.text);
    assert!(
        bounded
            .text
            .contains("did not finish within the Job's deadline")
            && bounded.text.contains("DeadlineExceeded")
            && bounded.text.contains("(left by the run)"),
        "{}",
        bounded.text
    );
    let left = left_in_double(&double, &bounded.run_id).await;
    assert!(left.is_empty(), "left in the double: {left:?}");
    let left = left_on_engine(&bounded.run_id).await;
    assert!(left.is_empty(), "left on the engine: {left:?}");
    eprintln!("job timeout in {:?}", started.elapsed());
}

/// Ctrl-C before the run began (130, nothing waited for) and while it runs (the run in the Pod
/// stops and its interrupted report is still retrieved, 130), and a killed launch whose
/// leftovers `gc --run` refuses while its Leases live and `gc --run --force` removes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn launch_interrupted_or_killed_leaves_nothing_on_kube_double() {
    let (double, images, harness) = in_cluster_double().await;

    // Ctrl-C before the run began: nothing is waited for.
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = interrupt_launch(
        launch_command(
            &double,
            &images,
            &harness,
            dir.path(),
            &["--exact", "worker::recipe_smoke"],
        ),
        "Job kandev-acceptance-",
        nix_signal::SIGINT,
    )
    .await;
    let run_id = launched_run_id(&text).unwrap();
    assert_eq!(code, Some(130), "{text}");
    let left = left_in_double(&double, &run_id).await;
    assert!(left.is_empty(), "left in the double: {left:?}");

    // Ctrl-C once the run in the Pod has started its scenario.
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = interrupt_launch(
        launch_command(
            &double,
            &images,
            &harness,
            dir.path(),
            &["--exact", "worker::recipe_smoke"],
        ),
        "running 1 test",
        nix_signal::SIGINT,
    )
    .await;
    let run_id = launched_run_id(&text).unwrap();
    assert_eq!(code, Some(130), "{text}");
    let (_, report) = common::written_report(dir.path(), &text);
    assert!(report.interrupted, "{text}");
    let left = left_in_double(&double, &run_id).await;
    assert!(left.is_empty(), "left in the double: {left:?}");
    let left = left_on_engine(&run_id).await;
    assert!(left.is_empty(), "left on the engine: {left:?}");
    eprintln!("interrupted in {:?}", started.elapsed());

    // Killed: the Job's Pod runs on, and so does the run in it: `gc --run` refuses (the run's
    // and the launch's Leases are live); `--force` removes the namespace and all in it.
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let (_, text) = interrupt_launch(
        launch_command(
            &double,
            &images,
            &harness,
            dir.path(),
            &["--exact", "worker::recipe_smoke"],
        ),
        "running 1 test",
        nix_signal::SIGKILL,
    )
    .await;
    let run_id = launched_run_id(&text).unwrap();
    assert!(
        !held_by_double(&double, &run_id).is_empty(),
        "a killed launch removed its objects?"
    );
    let refused = command(&double, "gc")
        .args(["--run", &run_id])
        .output()
        .await
        .unwrap();
    let text = common::output_text(&refused);
    assert_eq!(refused.status.code(), Some(2), "{text}");
    assert!(
        text.contains("is still alive") && text.contains("lease"),
        "{text}"
    );
    assert!(
        !held_by_double(&double, &run_id).is_empty(),
        "a refused gc removed the live run's objects"
    );
    let gc = command(&double, "gc")
        .args(["--run", &run_id, "--force"])
        .output()
        .await
        .unwrap();
    assert!(gc.status.success(), "{}", common::output_text(&gc));
    let left = left_in_double(&double, &run_id).await;
    assert!(left.is_empty(), "left in the double after gc: {left:?}");
    let left = left_on_engine(&run_id).await;
    assert!(left.is_empty(), "left on the engine after gc: {left:?}");
    eprintln!("killed and gc in {:?}", started.elapsed());
}

/// Signals for [`interrupt_launch`].
mod nix_signal {
    pub const SIGINT: i32 = 2;
    pub const SIGKILL: i32 = 9;
}

/// Starts `command` (a launch), waits for a line containing `when` (`running 1 test`: the run
/// in the Pod has started its scenario, two seconds more and a session is being created),
/// sends `signal`, and returns the exit code and all
/// the launch printed.
async fn interrupt_launch(
    mut command: tokio::process::Command,
    when: &str,
    signal: i32,
) -> (Option<i32>, String) {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut child = command
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut text = String::new();
    let mut signalled = false;
    let bound = tokio::time::Instant::now() + std::time::Duration::from_secs(300);
    loop {
        let line = tokio::time::timeout_at(bound, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no end within 300 s:\n{text}"))
            .unwrap();
        let Some(line) = line else { break };
        text.push_str(&line);
        text.push('\n');
        if !signalled && line.contains(when) {
            signalled = true;
            if when == "running 1 test" {
                // The scenario is under way in the Pod: a session is being created.
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            }
            std::process::Command::new("kill")
                .args([format!("-{signal}"), pid.to_string()])
                .status()
                .unwrap();
        }
    }
    let status = child.wait().await.unwrap();
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        use tokio::io::AsyncReadExt;
        let _ = stdout.read_to_string(&mut out).await;
    }
    assert!(signalled, "the run never started:\n{text}{out}");
    (status.code(), format!("{out}{text}"))
}

/// The broken templates fail, over the double, exactly the scenario they target, with the
/// diagnosis the local tests expect for them; a mutating admission fails the launching
/// scenario and the mutated Pod is rolled back by its exact UID.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn broken_fixtures_fail_the_right_scenario_on_kube_double() {
    let (double, images) = engine_double().await;
    for (template, scenario, promise) in [
        (
            "templates/broken/daemon-tcp-listener.yaml",
            "daemon::socket_only",
            "no TCP listener in the Pod besides the loopback control port",
        ),
        (
            "templates/broken/no-workspace-grant.yaml",
            "workspace::shared",
            "both containers see one /workspace",
        ),
        (
            "templates/broken/daemon-runtime-broken.yaml",
            "image::build_run",
            "the agent runs the built image and its output matches",
        ),
    ] {
        let started = std::time::Instant::now();
        let run = run(
            &double,
            &images,
            &["--template", &fixture(template), "--exact", scenario],
        )
        .await;
        assert_eq!(run.report.scenarios.len(), 1, "{}", run.text);
        assert_fails(&run, scenario, promise, true).await;
        eprintln!("{template}: {scenario} failed in {:?}", started.elapsed());
    }

    // Without a node view (no --node-inspector), a gate that requires it fails the two
    // scenarios that read the node, instead of letting them pass as skipped.
    let gated = run(
        &double,
        &images,
        &[
            vec!["--require".to_owned(), "node-view".to_owned()],
            common::only(&["cgroup::accounting", "lifecycle::teardown_exact"]),
        ]
        .concat()
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>(),
    )
    .await;
    assert_eq!(gated.report.scenarios.len(), 2, "{}", gated.text);
    for scenario in &gated.report.scenarios {
        let diagnosis = scenario.diagnosis.clone().unwrap_or_default();
        assert!(
            scenario.outcome == Outcome::Failed
                && scenario.lacking == Some(Capability::NodeView)
                && diagnosis.starts_with("required capability node-view is missing")
                && diagnosis.contains("--node-inspector"),
            "{}: {:?} {diagnosis}",
            scenario.name,
            scenario.outcome
        );
    }
    assert_eq!(gated.code, Some(1), "{}", gated.text);

    // A mutating admission strips the companion's workspace grant from every task Pod.
    let mutated = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = mutated.clone();
    double
        .state
        .set_pod_mutator(Some(Box::new(move |pod: &mut serde_json::Value| {
            let name = pod["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let Some(containers) = pod["spec"]["containers"].as_array_mut() else {
                return;
            };
            for container in containers
                .iter_mut()
                .filter(|c| c["name"] != "kandev-agent")
            {
                if let Some(mounts) = container["volumeMounts"].as_array_mut() {
                    let before = mounts.len();
                    mounts.retain(|m| m["name"] != "kandev-workspace");
                    if mounts.len() != before {
                        seen.lock().unwrap().push(name.clone());
                    }
                }
            }
        })));
    let started = std::time::Instant::now();
    let run = run(&double, &images, &["--exact", "workspace::shared"]).await;
    double.state.set_pod_mutator(None);
    let diagnosis = assert_fails(
        &run,
        "workspace::shared",
        "admission changed what Kandev owns",
        // A Pod rolled back at its create has no session to take evidence from.
        false,
    )
    .await;
    assert!(diagnosis.contains("docker-engine"), "{diagnosis}");
    // Every stored mutated Pod (a server-side dry run stores nothing) was rolled back by its
    // exact UID.
    let names = mutated.lock().unwrap().clone();
    let deletions = double.state.deletions();
    let rolled_back: Vec<_> = deletions
        .iter()
        .filter(|d| d.resource == "pods" && names.contains(&d.name))
        .collect();
    assert!(
        !rolled_back.is_empty(),
        "no mutated Pod was rolled back: {names:?} {deletions:?}\n{}",
        run.text
    );
    for deletion in &rolled_back {
        assert_eq!(
            deletion.precondition_uid.as_deref(),
            Some(deletion.uid.as_str()),
            "the rollback named the exact UID: {deletion:?}"
        );
    }
    for name in &names {
        assert!(
            double
                .state
                .objects("pods")
                .iter()
                .all(|p| p["metadata"]["name"] != name.as_str()),
            "the mutated Pod {name} is still stored"
        );
    }
    assert!(
        rolled_back.iter().any(|d| diagnosis.contains(&d.uid)),
        "the diagnosis names the rolled-back UID: {diagnosis}"
    );
    eprintln!(
        "mutating admission: workspace::shared failed in {:?}",
        started.elapsed()
    );
}

/// The cluster twin of `launch::contract/no_service`, which no template, image or prepare
/// script can break: a cluster where something else exposes the task Pods (a Service in their
/// namespace selecting every Pod the harness labels, as a controller of the operator's might
/// create). The run must fail exactly that check and leave nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_cluster_that_exposes_task_pods_fails_no_service_on_kube_double() {
    let (double, images) = engine_double().await;
    let namespace = "kandev-agents-exposed";
    double.state.create_namespace(
        namespace,
        &[("pod-security.kubernetes.io/enforce", "privileged")],
    );
    double.state.create_object(
        "services",
        namespace,
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "expose-everything"},
            "spec": {
                "selector": {LABEL_MANAGED: "true"},
                "ports": [{"port": 8765, "targetPort": 8765}],
            },
        }),
    );
    let run = run(
        &double,
        &images,
        &["--namespace", namespace, "--exact", "launch::contract"],
    )
    .await;
    assert_eq!(run.report.scenarios.len(), 1, "{}", run.text);
    let diagnosis = assert_fails(
        &run,
        "launch::contract",
        "nothing exposes the Pod beyond the backend's forward",
        true,
    )
    .await;
    assert!(
        diagnosis.starts_with("launch::contract/no_service")
            && diagnosis.contains("service/expose-everything"),
        "{diagnosis}"
    );
    let checks: Vec<_> = run.report.scenarios[0]
        .checks
        .iter()
        .map(|c| (c.id.as_str(), c.outcome.as_str()))
        .collect();
    assert_eq!(
        checks,
        [
            ("launch::contract/labels_as_composed", "passed"),
            ("launch::contract/no_token_anywhere", "passed"),
            ("launch::contract/no_service", "failed"),
            ("launch::contract/forward_loopback", "not reached"),
        ]
    );
}

/// The report records what the task Pods' containers ran as the kubelet says it
/// (`status.containerStatuses[].imageID`, which the double gives as containerd does for a
/// loaded image: the runtime's image id), per image role, and it agrees with the images the
/// run recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn the_report_records_the_image_ids_the_kubelet_reports_on_kube_double() {
    let (double, images) = engine_double().await;
    let run = run(&double, &images, &["--exact", "launch::contract"]).await;
    assert_eq!(run.code, Some(0), "{}", run.text);
    for (role, reference) in [("worker", &images.worker), ("daemon", &images.daemon)] {
        let record = run
            .report
            .environment
            .images
            .iter()
            .find(|i| i.role == role)
            .unwrap_or_else(|| panic!("no {role} image"));
        let id = images
            .records
            .iter()
            .find(|r| &r.reference == reference)
            .and_then(|r| r.id.clone())
            .unwrap();
        assert!(!record.ran.is_empty(), "{role}: {record:?}\n{}", run.text);
        for ran in &record.ran {
            assert_eq!((&ran.image, &ran.image_id), (reference, &id), "{role}");
        }
        assert!(record.disagreements().is_empty(), "{record:?}");
    }
}

/// The scenario and check `id` (`area::name/check`) of the catalogue.
fn catalogue_check(
    id: &str,
) -> (
    kandev_harness::runner::Scenario,
    kandev_harness::runner::Check,
) {
    kandev_scenarios::registry()
        .into_iter()
        .find_map(|scenario| {
            let check = scenario
                .checks
                .iter()
                .find(|c| scenario.check_id(c) == id)
                .copied()?;
            Some((scenario, check))
        })
        .unwrap_or_else(|| panic!("no check {id} in the catalogue"))
}

/// Runs `scenario` alone on the double and asserts that exactly `id` failed (the checks
/// before it passed, none after it was reached), with a diagnosis naming it, exit 1; the
/// diagnosis.
async fn cluster_twin_run(
    double: &cluster_double::KubeDouble,
    images: &ImageSet,
    id: &str,
) -> (Run, String) {
    let (scenario, check) = catalogue_check(id);
    twin_test_of(&check);
    // Without the set-up's warm-up: a twin that breaks every Pod on the node (a finalizer
    // that holds them) would fail its Pods in the set-up, before the check it breaks.
    let run = run(double, images, &["--exact", scenario.name, "--no-warm-up"]).await;
    assert_eq!(run.report.scenarios.len(), 1, "{}", run.text);
    let wrong = twin_failures(&run.report, &scenario, &check);
    assert!(wrong.is_empty(), "{}\n{}", wrong.join("\n"), run.text);
    assert_eq!(run.code, Some(1), "{}", run.text);
    let diagnosis = run.report.scenarios[0]
        .diagnosis
        .clone()
        .unwrap_or_default();
    eprintln!(
        "{id}: failed in {} ms: {diagnosis}",
        run.report.scenarios[0].duration_ms
    );
    (run, diagnosis)
}

/// The test a cluster twin names.
fn twin_test_of(check: &kandev_harness::runner::Check) -> &'static str {
    match check.twin {
        Twin::Cluster(test) => test,
        other => panic!("{} has no cluster twin: {other:?}", check.id),
    }
}

/// The selector every task Pod the harness composes matches (Kandev's ownership label).
fn task_pods() -> std::collections::BTreeMap<String, String> {
    std::collections::BTreeMap::from([(
        "app.kubernetes.io/managed-by".to_owned(),
        "kandev".to_owned(),
    )])
}

/// The cluster twin of `launch::contract/labels_as_composed`: a controller of the cluster's
/// own (a policy engine's mutate-existing rule, an inventory controller) relabels every task
/// Pod once it runs, after admission, where the admission comparison cannot see it. The run
/// must fail exactly that check, naming the label, and leave nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_cluster_that_relabels_running_pods_fails_labels_as_composed_on_kube_double() {
    let (double, images) = engine_double().await;
    double.state.enable(Behaviour::RelabelRunningPods {
        selector: task_pods(),
        patch: serde_json::json!({"labels": {"app.kubernetes.io/managed-by": "fleet-inventory"}}),
    });
    let (run, diagnosis) =
        cluster_twin_run(&double, &images, "launch::contract/labels_as_composed").await;
    assert_fails(
        &run,
        "launch::contract",
        "label app.kubernetes.io/managed-by: composed \"kandev\", running \"fleet-inventory\"",
        true,
    )
    .await;
    assert!(!diagnosis.contains("create-nonce"), "{diagnosis}");
    // The create itself was admitted as composed: the relabel came after.
    assert!(!diagnosis.contains("admission"), "{diagnosis}");
}

/// The cluster twin of `launch::causal_failures/names_cause`: a cleanup controller deletes
/// each Pod whose image cannot be pulled at once (grace period 0), before anything reads its
/// `ErrImagePull`: the cause is left only in the Events of a Pod that is gone, and the
/// absent-image launch fails (within its bound, leaving nothing) without naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_cluster_that_reaps_unpullable_pods_fails_names_cause_on_kube_double() {
    let (double, images) = engine_double().await;
    double.state.enable(Behaviour::ReapUnpullablePods);
    let (run, diagnosis) =
        cluster_twin_run(&double, &images, "launch::causal_failures/names_cause").await;
    assert_fails(&run, "launch::causal_failures", "image: ", true).await;
    let absent = kandev_scenarios::launch::causal_failures::ABSENT_IMAGE;
    assert!(
        diagnosis.contains("it was deleted before container kandev-agent ran")
            && !diagnosis.contains(absent),
        "{diagnosis}"
    );
    // Only the absent image's case: the other causes were named.
    for other in ["node_selector: ", "missing_claim: ", "restricted_identity"] {
        assert!(!diagnosis.contains(other), "{diagnosis}");
    }
}

/// The cluster twin of `launch::causal_failures/within_bound`: the node cannot reach the
/// absent image's registry, so its pull hangs (no answer, no progress: the containers stay
/// `ContainerCreating`, as a kubelet shows a pull under way) and the launch fails only when
/// the pod_ready wait runs out. The failure still names the image it waited on
/// (`names_cause` holds), the rollback leaves nothing, and exactly `within_bound` fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_cluster_whose_image_pulls_hang_fails_within_bound_on_kube_double() {
    let (double, images) = engine_double().await;
    double.state.enable(Behaviour::UnreachableRegistry {
        host: "registry.invalid".into(),
    });
    let (run, diagnosis) =
        cluster_twin_run(&double, &images, "launch::causal_failures/within_bound").await;
    assert_fails(&run, "launch::causal_failures", "image: ", true).await;
    assert!(
        diagnosis.contains("it surfaced only when the pod_ready wait timed out"),
        "{diagnosis}"
    );
    for other in ["node_selector: ", "missing_claim: ", "restricted_identity"] {
        assert!(!diagnosis.contains(other), "{diagnosis}");
    }
    // What the launch said while it waited: the image, still being pulled.
    let cases = run.report.scenarios[0]
        .steps
        .iter()
        .find_map(|s| s.evidence.get("cases").cloned())
        .unwrap_or_default();
    let message = cases[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("timed out")
            && message.contains("waiting: ContainerCreating")
            && message.contains(kandev_scenarios::launch::causal_failures::ABSENT_IMAGE),
        "{message}"
    );
}

/// The cluster twin of `launch::causal_failures/nothing_left`: a node agent puts its
/// finalizer on every Pod that reaches the node and is stuck (never removes it), so the
/// absent-image launch's rollback deletes its Pod and the API server keeps it, marked
/// (`deletionTimestamp`, grace period 0) until the finalizer goes. The rollback's wait ends
/// (no hang) with an error naming the finalizer, the cause and the bound still hold, and
/// exactly `nothing_left` fails; the leftovers ledger names the held Pod and the run's
/// namespace waits `Terminating`. Once the finalizer is removed (as an operator would, by
/// hand), the Pod and the namespace go, `gc` finds nothing more, and nothing is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn a_cluster_whose_finalizer_holds_the_rollback_fails_nothing_left_on_kube_double() {
    const FINALIZER: &str = "node-agent.example.com/cleanup";
    let (double, images) = engine_double().await;
    double.state.enable(Behaviour::StuckNodeFinalizer {
        finalizer: FINALIZER.into(),
    });
    let (run, diagnosis) =
        cluster_twin_run(&double, &images, "launch::causal_failures/nothing_left").await;
    let report = &run.report.scenarios[0];
    // Only the absent image's Pod reached the node; the others were never scheduled.
    let held: Vec<serde_json::Value> = double
        .state
        .objects("pods")
        .into_iter()
        .filter(|p| p["metadata"]["labels"][LABEL_RUN] == run.report.run_id.as_str())
        .collect();
    assert_eq!(held.len(), 1, "{held:?}\n{}", run.text);
    let pod = &held[0];
    let name = pod["metadata"]["name"].as_str().unwrap().to_owned();
    let namespace = pod["metadata"]["namespace"].as_str().unwrap().to_owned();
    assert!(
        diagnosis.contains(&format!("image: Pod {name}")),
        "{diagnosis}"
    );
    assert!(pod["metadata"]["deletionTimestamp"].is_string(), "{pod}");
    assert_eq!(pod["metadata"]["deletionGracePeriodSeconds"], 0, "{pod}");
    assert_eq!(
        pod["metadata"]["finalizers"],
        serde_json::json!([FINALIZER])
    );
    // The rollback's wait ended naming the finalizer, and the launch still named its cause.
    let cases = report
        .steps
        .iter()
        .find_map(|s| s.evidence.get("cases").cloned())
        .unwrap_or_default();
    let message = cases[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(kandev_scenarios::launch::causal_failures::ABSENT_IMAGE)
            && message.contains("rollback of the failed launch")
            && message.contains(FINALIZER),
        "{message}"
    );
    // Teardown could not remove it either, and says why; the ledger names it.
    assert!(
        report
            .cleanup
            .iter()
            .any(|c| c.outcome == kandev_report::CleanupOutcome::Failed
                && c.error.as_deref().is_some_and(|e| e.contains(FINALIZER))),
        "{:?}",
        report.cleanup
    );
    assert_eq!(run.report.leftovers, [format!("pod/{name}")]);
    // The namespace controller waits for it.
    let ns = double.state.object("namespaces", "", &namespace).unwrap();
    assert_eq!(ns["status"]["phase"], "Terminating", "{ns}");

    // Removed by hand, as an operator unsticks it: the update that empties the finalizers
    // deletes the Pod, and the namespace goes.
    let (client, _, _) = kandev_harness::backend::kube::cluster::client_for(
        Some(&double.kubeconfig),
        Some(&double.context),
    )
    .await
    .unwrap();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client, &namespace);
    pods.patch(
        &name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let left = left_in_double(&double, &run.report.run_id).await;
    assert!(left.is_empty(), "left in the double: {left:?}");
    let gc = command(&double, "gc")
        .args(["--run", &run.report.run_id])
        .output()
        .await
        .unwrap();
    assert!(gc.status.success(), "{}", common::output_text(&gc));
    let left = left_on_engine(&run.report.run_id).await;
    assert!(left.is_empty(), "left on the engine: {left:?}");
}

/// `launch::connection` passes with the run's own executor Role (Kandev's), and each Role twin
/// (`Twin::Role`, found in the catalogue as twins.rs finds the others), run as
/// `--executor-role`, fails exactly its check: one granting more than Kandev needs fails
/// `nothing_broader`; one lacking a permission Kandev needs is refused by the preflight before
/// any scenario, naming the check (exit 3). Each leaves nothing in the double or on the engine.
/// Only `launch::connection` runs: it creates no Pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn role_twins_fail_exactly_their_check_on_kube_double() {
    const SCENARIO: &str = "launch::connection";
    let (double, images) = engine_double().await;
    let started = std::time::Instant::now();
    let good = run(&double, &images, &["--exact", SCENARIO]).await;
    let report = &good.report;
    assert_eq!(report.scenarios.len(), 1, "{}", good.text);
    let connection = &report.scenarios[0];
    assert_eq!(
        connection.outcome,
        Outcome::Passed,
        "{:?}\n{}",
        connection.diagnosis,
        good.text
    );
    assert_eq!(good.code, Some(0), "{}", good.text);
    let evidence = |key: &str| {
        connection
            .steps
            .iter()
            .find_map(|s| s.evidence.get(key).cloned())
            .unwrap_or_default()
    };
    assert_eq!(evidence("auth_mode"), "kubeconfig");
    assert_eq!(evidence("success"), true);
    let executor = evidence("executor");
    assert!(
        executor
            .as_str()
            .is_some_and(|e| e.ends_with(":kandev-acceptance-executor")),
        "{executor}"
    );
    assert_eq!(evidence("identity"), executor);
    assert_eq!(evidence("broader"), serde_json::json!([]));
    // The double serves the rules review as an API server does: the Role's rules and every
    // authenticated user's (the three self-reviews) and service account's (the three reads
    // of ClusterTrustBundles), judged apart.
    let grants = evidence("grants");
    assert_eq!(grants["beyond"], serde_json::json!([]), "{grants}");
    assert_eq!(
        grants["every_user"].as_array().map(Vec::len),
        Some(6),
        "{grants}"
    );
    assert!(
        grants["within"]
            .as_array()
            .is_some_and(|w| w.iter().any(|g| g == "create pods/portforward")),
        "{grants}"
    );
    assert_eq!(evidence("rules_review")["incomplete"], false);
    assert!(connection.findings.is_empty(), "{:?}", connection.findings);
    eprintln!("launch::connection passed in {:?}", started.elapsed());

    let registry = kandev_scenarios::registry();
    let mut wrong = Vec::new();
    let mut ran = 0;
    for scenario in &registry {
        for check in scenario.checks {
            let (Twin::Role(name), Some(path)) = (check.twin, check.twin.fixture()) else {
                continue;
            };
            // What the failure must name: the permission the Role adds or lacks.
            let names = match name {
                "executor-role-lists-pods" => "list pods",
                "executor-role-without-portforward" => "create pods/portforward",
                other => panic!("say what the failure of Role twin {other} names"),
            };
            assert_eq!(scenario.name, SCENARIO, "a Role twin of another scenario");
            let id = scenario.check_id(check);
            let started = std::time::Instant::now();
            let twin = run(
                &double,
                &images,
                &["--executor-role", &fixture(&path), "--exact", scenario.name],
            )
            .await;
            if REFUSED_BEFORE_THE_RUN.contains(&id.as_str()) {
                // Refused by the preflight: no scenario ran, and the refusal names the check.
                let preflight = twin.report.setup.iter().find(|s| s.name == "preflight");
                let refusal = preflight.and_then(|s| s.error.clone()).unwrap_or_default();
                if twin.code != Some(3)
                    || !twin.report.scenarios.is_empty()
                    || !refusal.starts_with(&format!("{id}: "))
                    || !refusal.contains(names)
                    || !twin.text.contains(&format!("error: {id}: "))
                {
                    wrong.push(format!(
                        "{id}: fixtures/{path} was not refused by the preflight naming the check (exit {:?}, preflight {refusal:?})\n{}",
                        twin.code, twin.text
                    ));
                }
            } else {
                wrong.extend(twin_failures(&twin.report, scenario, check));
                let diagnosis = twin
                    .report
                    .scenarios
                    .first()
                    .and_then(|s| s.diagnosis.clone())
                    .unwrap_or_default();
                if !diagnosis.contains(names) {
                    wrong.push(format!(
                        "{id}: the diagnosis does not name {names}: {diagnosis}"
                    ));
                }
                // Found by the rules review itself, not only by the access reviews.
                let grants = twin.report.scenarios.first().and_then(|s| {
                    s.steps
                        .iter()
                        .find_map(|step| step.evidence.get("grants").cloned())
                });
                let in_rules = grants.as_ref().is_some_and(|g| {
                    g["beyond"]
                        .as_array()
                        .is_some_and(|b| b.iter().any(|x| x == names))
                });
                if !in_rules {
                    wrong.push(format!(
                        "{id}: the rules review does not list {names} beyond: {grants:?}"
                    ));
                }
                if twin.code != Some(1) {
                    wrong.push(format!(
                        "{id}: fixtures/{path} exited {:?} (expected 1)\n{}",
                        twin.code, twin.text
                    ));
                }
            }
            if !twin.report.leftovers.is_empty()
                || !left_on_engine(&twin.report.run_id).await.is_empty()
            {
                wrong.push(format!(
                    "{id}: fixtures/{path} left {:?}",
                    twin.report.leftovers
                ));
            }
            // The namespace goes once the double has removed what is inside.
            let mut left = run_namespaces(&double, &twin.report.run_id);
            for _ in 0..40 {
                if left.is_empty() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(250)).await;
                left = run_namespaces(&double, &twin.report.run_id);
            }
            if !left.is_empty() {
                wrong.push(format!("{id}: fixtures/{path} left {left:?}"));
            }
            ran += 1;
            eprintln!("role twin fixtures/{path}: {id} in {:?}", started.elapsed());
        }
    }
    assert!(ran >= 2, "the catalogue has {ran} Role twins");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A run aborted on the double (a second Ctrl-C: no teardown) prints the exact `gc` command
/// that removes what it left, with the backend, kubeconfig and context it used (before issue
/// 34 it printed `gc --run ID`, which looks at the local engine, removes nothing and exits 0),
/// and gives up its Lease as it goes: that command, run as printed, removes the run's
/// namespace, objects and containers at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn an_aborted_runs_hint_is_the_gc_command_that_removes_it_on_kube_double() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let (double, images) = engine_double().await;
    let dir = tempfile::tempdir().unwrap();
    let mut child = run_command(
        &double,
        &images,
        dir.path(),
        &["--skip", "template::grant_rules"],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let pid = child.id().unwrap().to_string();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let collected = tokio::spawn(async move {
        let mut text = String::new();
        while let Ok(Some(line)) = lines.next_line().await {
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    let started = std::time::Instant::now();
    let id = loop {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(300),
            "the run never created a Pod"
        );
        let id = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .next()
            .map(|e| e.file_name().to_string_lossy().into_owned());
        // A session's Pod, running: not the set-up's warm-up Pods.
        if let Some(id) = id
            && double.state.objects("pods").iter().any(|pod| {
                pod["metadata"]["labels"][LABEL_RUN] == id.as_str()
                    && pod["metadata"]["labels"][LABEL_ROLE]
                        != kandev_harness::backend::kube::warm_up::ROLE
                    && pod["metadata"]["uid"]
                        .as_str()
                        .and_then(|uid| double.state.runtime_pod(uid))
                        .is_some()
            })
        {
            break id;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    for _ in 0..2 {
        std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    let status = child.wait().await.unwrap();
    let text = collected.await.unwrap();
    assert_eq!(status.code(), Some(130), "{text}");
    let hint = text
        .lines()
        .find_map(|l| {
            l.split_once("remove leftovers with: ")
                .map(|(_, c)| c.trim())
        })
        .unwrap_or_else(|| panic!("no hint:\n{text}"));
    let words: Vec<&str> = hint.split_whitespace().collect();
    let kubeconfig = double.kubeconfig.display().to_string();
    // The tests run in the checkout, where the hint is the command that works there.
    assert_eq!(
        words,
        [
            "cargo",
            "acceptance",
            "gc",
            "--backend",
            "kube",
            "--kubeconfig",
            kubeconfig.as_str(),
            "--context",
            double.context.as_str(),
            "--run",
            id.as_str(),
        ],
        "{text}"
    );
    let gc = tokio::process::Command::from(kandev_test_support::harness_env::harness(env!(
        "CARGO_BIN_EXE_kandev-acceptance"
    )))
    .args(&words[2..])
    .output()
    .await
    .unwrap();
    let gc_text = common::output_text(&gc);
    assert!(gc.status.success(), "the printed command: {gc_text}");
    assert!(!gc_text.contains("spared"), "{gc_text}");
    let remaining = left_in_double(&double, &id).await;
    assert!(remaining.is_empty(), "left in the double: {remaining:?}");
    let left = left_on_engine(&id).await;
    assert!(left.is_empty(), "left on the engine: {left:?}");
}

/// `--keep always` on the double: each kept Pod's hint and the kept namespace's hint print
/// the exact `gc` command, with the kubeconfig and context the run used (before issue 34 they
/// left out `--context`, and `gc` then refused or looked elsewhere); the run gives its Lease
/// up as it ends, so that command, run as printed, removes everything at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn keep_hints_print_the_gc_command_that_removes_what_was_kept_on_kube_double() {
    let (double, images) = engine_double().await;
    let run = common::kube::run(
        &double,
        &images,
        &["--keep", "always", "--exact", "daemon::socket_only"],
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.text);
    let id = run.report.run_id.clone();
    // The tests run in the checkout, where the hint is the command that works there.
    let expected = format!(
        "cargo acceptance gc --backend kube --kubeconfig {} --context {} --run {id}",
        double.kubeconfig.display(),
        double.context
    );
    let hints: Vec<&str> = run
        .text
        .lines()
        .filter(|l| l.contains("remove later:"))
        .collect();
    assert!(
        hints.iter().any(|l| l.starts_with("kept kandev-")),
        "no kept Pod's hint:\n{}",
        run.text
    );
    assert!(
        hints
            .iter()
            .any(|l| l.starts_with("kept the run's namespace")),
        "no kept namespace's hint:\n{}",
        run.text
    );
    for hint in &hints {
        assert!(hint.contains(&expected), "{hint}\nexpected {expected}");
    }
    assert!(
        double
            .state
            .objects("pods")
            .iter()
            .any(|pod| pod["metadata"]["labels"][LABEL_RUN] == id.as_str()),
        "--keep always kept no Pod"
    );
    let words: Vec<&str> = expected.split_whitespace().collect();
    let gc = tokio::process::Command::from(kandev_test_support::harness_env::harness(env!(
        "CARGO_BIN_EXE_kandev-acceptance"
    )))
    .args(&words[2..])
    .output()
    .await
    .unwrap();
    let gc_text = common::output_text(&gc);
    assert!(gc.status.success(), "the printed command: {gc_text}");
    let remaining = left_in_double(&double, &id).await;
    assert!(remaining.is_empty(), "left in the double: {remaining:?}");
    let left = left_on_engine(&id).await;
    assert!(left.is_empty(), "left on the engine: {left:?}");
}

/// The run's namespaces in the double (labelled with `run_id`).
fn run_namespaces(double: &cluster_double::KubeDouble, run_id: &str) -> Vec<String> {
    double
        .state
        .objects("namespaces")
        .into_iter()
        .filter(|ns| ns["metadata"]["labels"][LABEL_RUN] == run_id)
        .filter_map(|ns| ns["metadata"]["name"].as_str().map(str::to_owned))
        .collect()
}

/// While a run is going, `gc` spares it: `gc --run` refuses and `gc --all` leaves its
/// namespace (its Lease is live). Killed (SIGKILL) once its first Pod runs, it leaves its
/// namespace behind with a Lease that stays live for a minute: `gc --run` still refuses,
/// `--force` removes the namespace, its objects and its containers, and nothing of another
/// run (issue 34: before, `gc` deleted every harness namespace, live runs' included).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn gc_after_a_killed_run_on_kube_double() {
    let (double, images) = engine_double().await;
    // A namespace of another run, as the harness labels them.
    let other = "kandev-acceptance-some-other-run";
    double.state.create_namespace(
        other,
        &[(LABEL_MANAGED, "true"), (LABEL_RUN, "some-other-run")],
    );
    let dir = tempfile::tempdir().unwrap();
    let mut child = run_command(
        &double,
        &images,
        dir.path(),
        &["--skip", "template::grant_rules"],
    )
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    let started = std::time::Instant::now();
    let id = loop {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(300),
            "the run never created a Pod"
        );
        let id = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .next()
            .map(|e| e.file_name().to_string_lossy().into_owned());
        // A session's Pod, running: not the set-up's warm-up Pods.
        if let Some(id) = id
            && double.state.objects("pods").iter().any(|pod| {
                pod["metadata"]["labels"][LABEL_RUN] == id.as_str()
                    && pod["metadata"]["labels"][LABEL_ROLE]
                        != kandev_harness::backend::kube::warm_up::ROLE
                    && pod["metadata"]["uid"]
                        .as_str()
                        .and_then(|uid| double.state.runtime_pod(uid))
                        .is_some()
            })
        {
            break id;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    // Alive: spared by --all (a dry run: the other run's namespace stays for the end),
    // refused by --run.
    let all = command(&double, "gc")
        .args(["--all", "--dry-run"])
        .output()
        .await
        .unwrap();
    let text = common::output_text(&all);
    assert!(all.status.success(), "{text}");
    assert!(text.contains(&format!("spared run {id}: alive")), "{text}");
    assert!(
        !text.contains(&format!(
            "namespace/{}",
            kandev_harness::backend::kube::cluster::run_namespace(&id)
        )),
        "{text}"
    );
    let refused = command(&double, "gc")
        .args(["--run", &id])
        .output()
        .await
        .unwrap();
    let text = common::output_text(&refused);
    assert_eq!(refused.status.code(), Some(2), "{text}");
    assert!(text.contains("is still alive"), "{text}");
    child.kill().await.unwrap();
    // Let in-flight requests of the dead run settle.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let namespaces = run_namespaces(&double, &id);
    assert!(!namespaces.is_empty(), "the killed run left no namespace");
    // Its Lease holds a minute after its last renewal: --run still refuses.
    let refused = command(&double, "gc")
        .args(["--run", &id])
        .output()
        .await
        .unwrap();
    assert_eq!(
        refused.status.code(),
        Some(2),
        "{}",
        common::output_text(&refused)
    );
    let gc = command(&double, "gc")
        .args(["--run", &id, "--force"])
        .output()
        .await
        .unwrap();
    let text = common::output_text(&gc);
    assert!(gc.status.success(), "{text}");
    for ns in &namespaces {
        assert!(text.contains(&format!("namespace/{ns}")), "{text}");
    }
    // The namespace goes once its Pods are removed from the engine.
    let remaining = left_in_double(&double, &id).await;
    assert!(remaining.is_empty(), "left in the double: {remaining:?}");
    let left = left_on_engine(&id).await;
    assert!(left.is_empty(), "left on the engine: {left:?}");
    assert!(
        double.state.object("namespaces", "", other).is_some(),
        "gc --run removed another run's namespace"
    );
    eprintln!("killed run and gc in {:?}", started.elapsed());
}
