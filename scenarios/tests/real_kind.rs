//! The whole catalogue on a real Kind cluster: kind v0.33.0 and a node image of Kubernetes
//! v1.37.2 built on this machine from their Go modules (`harness/scripts/ensure-kind.sh`,
//! which the README's test command runs), a real API server, scheduler and kubelet. Every
//! test name says `on_real_kind`; none of them reads as passed unless it ran.

// A test file: failing loudly with unwrap/panic is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::real_kind::{built, clusters_of, one_cluster_at_a_time};
use common::root;
use kandev_report::{CheckOutcome, Outcome};
use std::process::Command;

/// What real Kind on these machines shows that is not a pass, each an open finding with the
/// words its diagnosis must carry (docs/development.md, "What real Kind found"). A finding
/// that no longer shows fails this test as surely as a new failure: the list only shrinks
/// by being fixed, and never stands in for a pass (the run's verdict and exit code say
/// failed).
const OPEN_FINDINGS: &[(&str, Outcome, &str)] = &[
    // None open: the two real Kind found (dockerd the nested hog's OOM victim, a scenario
    // holding three Pods on a node with room for two) are fixed (docs/development.md).
];

#[test]
fn the_whole_catalogue_on_real_kind() {
    let _one = one_cluster_at_a_time();
    let pins = built();
    let run = common::run(&["--backend", "kind"]);
    let report = &run.report;
    let mut wrong = Vec::new();
    for (name, outcome, words) in OPEN_FINDINGS {
        let seen = report.scenarios.iter().find(|s| s.name == *name);
        if !seen.is_some_and(|s| {
            s.outcome == *outcome && s.diagnosis.as_deref().is_some_and(|d| d.contains(words))
        }) {
            wrong.push(format!(
                "{name}: the open finding ({outcome:?}, \"{words}\") did not show; it may be fixed: take it off OPEN_FINDINGS and docs/development.md ({:?})",
                seen.map(|s| (s.outcome, s.diagnosis.clone()))
            ));
        }
    }
    for scenario in &report.scenarios {
        let open = OPEN_FINDINGS.iter().any(|(n, _, _)| *n == scenario.name);
        if scenario.outcome != Outcome::Passed && !open {
            wrong.push(format!(
                "{} {:?}: {}",
                scenario.name,
                scenario.outcome,
                scenario.diagnosis.clone().unwrap_or_default()
            ));
        }
        for check in &scenario.checks {
            // Not judged only with the reason Kind really has (the report names it).
            if check.outcome == CheckOutcome::NotJudged && check.reason.is_none() {
                wrong.push(format!("{}: not judged without a reason", check.id));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "on real Kind:\n{}\n{}",
        wrong.join("\n"),
        run.output
    );
    // The open findings fail the run: exit 1 (a scenario failed), never 0.
    let expected = if OPEN_FINDINGS.is_empty() { 0 } else { 1 };
    assert_eq!(run.code, expected, "{}", run.output);
    assert_eq!(report.scenarios.len(), 22, "the whole catalogue");

    // The report says which cluster gave the verdict.
    let environment = &report.environment;
    assert_eq!(
        environment.kubernetes_version.as_deref(),
        Some(pins.kubernetes.as_str())
    );
    assert_eq!(
        environment.kind_node_image.as_deref(),
        Some(pins.node_image().as_str())
    );
    assert!(
        environment
            .kind_version
            .as_deref()
            .is_some_and(|v| v.contains(&pins.kind)),
        "{:?}",
        environment.kind_version
    );

    // Nothing the run created is left: its ledger, its cluster, and gc finds nothing.
    assert!(report.leftovers.is_empty(), "{:?}", report.leftovers);
    assert_eq!(clusters_of(&pins, &report.run_id), Vec::<String>::new());
    let gc = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["gc", "--backend", "kind", "--run", &report.run_id])
        .env("KANDEV_ACCEPTANCE_ROOT", root())
        .output()
        .unwrap();
    let text = common::output_text(&gc);
    assert!(gc.status.success(), "{text}");
}

/// A cluster that does not come up (here: a kubelet configuration kubeadm cannot read) is
/// deleted with its node's logs kept in the report's folder (`kind export logs`), the error
/// names both, and the run's verdict is the environment's failure, never a pass of nothing.
#[test]
fn a_cluster_that_does_not_come_up_leaves_its_logs_and_nothing_else_on_real_kind() {
    let _one = one_cluster_at_a_time();
    let pins = built();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("cluster.yaml");
    let good = std::fs::read_to_string(root().join("kind/cluster.yaml")).unwrap();
    let pids = "    podPidsLimit: 4096\n";
    assert!(good.contains(pids), "kind/cluster.yaml changed: {good}");
    std::fs::write(
        &config,
        good.replace(pids, &format!("{pids}    maxPods: many\n")),
    )
    .unwrap();
    let run = common::run(&[
        "--backend",
        "kind",
        "--kind-config",
        config.to_str().unwrap(),
        "--exact",
        "template::grant_rules",
    ]);
    assert_eq!(run.code, 3, "{}", run.output);
    let verdict = run.report.verdict.as_ref().unwrap();
    assert!(
        !verdict.passed && verdict.exit_code == 3,
        "{verdict:?}\n{}",
        run.output
    );
    let step = run
        .report
        .setup
        .iter()
        .find(|s| s.name == "cluster_setup")
        .unwrap_or_else(|| panic!("no cluster_setup step: {}", run.output));
    let error = step.error.clone().unwrap_or_default();
    let logs = run.report_path.with_file_name("kind-logs");
    assert!(
        error.contains("maxPods")
            && error.contains(&logs.display().to_string())
            && error.contains("the cluster was deleted"),
        "{error}"
    );
    let node = format!("kandev-acc-{}-control-plane", run.report.run_id);
    for file in ["kubelet.log", "journal.log", "containerd.log"] {
        assert!(
            logs.join(&node).join(file).is_file(),
            "{file} not in {}: {:?}",
            logs.display(),
            std::fs::read_dir(&logs).map(|d| d.count())
        );
    }
    assert_eq!(clusters_of(&pins, &run.report.run_id), Vec::<String>::new());
}

/// A Kind cluster this test made, deleted when the test ends, however it ends.
struct OwnCluster {
    kind: std::path::PathBuf,
    name: String,
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let _ = Command::new(&self.kind)
            .args(["delete", "cluster", "--name", &self.name])
            .output();
    }
}

/// Runs `program args`, and returns its stdout; a failure fails the test with its output.
fn must(program: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .env("KANDEV_ACCEPTANCE_ROOT", root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} {args:?}: {}",
        program.display(),
        common::output_text(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `launch` on a real Kind cluster, as an operator whose API server is out of reach runs it
/// (the nightly's launch job): the harness image and the fixture images loaded into the
/// node, the suite run as a Job under Kandev's executor identity inside the cluster, its
/// report retrieved. The cluster-facing scenarios (`launch::`) run there; the whole
/// catalogue on real Kind is the test above.
#[test]
fn launch_runs_the_suite_as_a_job_inside_the_cluster_on_real_kind() {
    let _one = one_cluster_at_a_time();
    let pins = built();
    let kind = pins.bin_dir().unwrap().join("kind");
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_kandev-acceptance"));
    let name = format!(
        "kandev-acc-launch-{}",
        kandev_harness::pod::identity::random_hex(3)
    );
    let config = root().join("kind/cluster.yaml");
    must(
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
            "--wait",
            "180s",
        ],
    );
    let cluster = OwnCluster {
        kind: kind.clone(),
        name: name.clone(),
    };

    // The images: the harness image and the fixture worker and daemon, loaded into the node.
    let harness = must(binary, &["image", "harness"]).trim().to_owned();
    let fixtures = must(binary, &["image", "fixtures"]);
    let image_of = |role: &str| {
        fixtures
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{role} ")))
            .unwrap_or_else(|| panic!("no {role} image in: {fixtures}"))
            .trim()
            .to_owned()
    };
    let (worker, daemon) = (image_of("worker"), image_of("daemon"));
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("images.tar");
    let archive = archive.to_str().unwrap();
    must(
        std::path::Path::new("docker"),
        &["save", "-o", archive, &harness, &worker, &daemon],
    );
    must(
        &kind,
        &["load", "image-archive", archive, "--name", &cluster.name],
    );
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        must(&kind, &["get", "kubeconfig", "--name", &cluster.name]),
    )
    .unwrap();
    let context = format!("kind-{}", cluster.name);
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
    drop(cluster);
    assert_eq!(clusters_of(&pins, &name), Vec::<String>::new());
}

/// Issue 40, item 7 (private registries) on a real Kind node: the daemon image lives only in a
/// registry with htpasswd authentication (Debian's docker-registry, `fixtures/images/registry`,
/// started and reaped by testcontainers inside the node's network namespace, so that the
/// node's containerd reaches it as `localhost`, over plain HTTP as containerd's CRI does for a
/// localhost host). Without `--image-pull-secret` the run fails in its warm-up, naming the
/// registry's refusal for want of credentials and its fix; with it the node pulls the image
/// with the copied Secret and the scenario passes. `run --backend kube` against the Kind
/// cluster: the harness loads nothing, the node pulls.
#[test]
fn a_private_registry_is_pulled_from_with_the_pull_secret_on_real_kind() {
    use testcontainers::core::WaitFor;
    use testcontainers::runners::SyncRunner;
    use testcontainers::{GenericImage, ImageExt};

    let _one = one_cluster_at_a_time();
    let pins = built();
    let bin = pins.bin_dir().unwrap();
    let kind = bin.join("kind");
    let kubectl = bin.join("kubectl");
    let docker = std::path::Path::new("docker");
    let binary = std::path::Path::new(env!("CARGO_BIN_EXE_kandev-acceptance"));
    let name = format!(
        "kandev-acc-registry-{}",
        kandev_harness::pod::identity::random_hex(3)
    );
    let config = root().join("kind/cluster.yaml");
    must(
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
            "--wait",
            "180s",
        ],
    );
    let cluster = OwnCluster {
        kind: kind.clone(),
        name: name.clone(),
    };
    let node = format!("{name}-control-plane");

    // The registry image, on the fixtures' Debian base.
    let fixtures = must(binary, &["image", "fixtures"]);
    let image_of = |role: &str| {
        fixtures
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{role} ")))
            .unwrap_or_else(|| panic!("no {role} image in: {fixtures}"))
            .trim()
            .to_owned()
    };
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
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        must(&kind, &["get", "kubeconfig", "--name", &name]),
    )
    .unwrap();
    let kubeconfig = kubeconfig.to_str().unwrap();
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
    let reports = dir.path().join("reports");
    let run = |extra: &[&str]| {
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
        let (_, report) = common::written_report(&reports, &text);
        (out.status.code(), text, report)
    };

    // First without the secret (the node has not pulled the image yet): refused for want of
    // credentials, named with the fix, in the warm-up.
    let (code, text, report) = run(&[]);
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

    // With it: copied, the node pulls, the scenario passes.
    let (code, text, report) = run(&["--image-pull-secret", "regcred"]);
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
    drop(cluster);
    assert_eq!(clusters_of(&pins, &name), Vec::<String>::new());
}
