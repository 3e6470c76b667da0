//! Issue 41, item 6, at the process level: `kandev-acceptance run` on the local engine killed
//! with SIGKILL (no teardown, no sweep, nothing it remembered) at every stage of its set-up
//! and first scenario, each time a little later, leaves nothing once `gc --run` has run: no
//! container, volume or network of the run, and no Pod cgroup (`kandev-acceptance/pod<uid>`,
//! which carries no label) in any hierarchy. The Pod-create level is
//! `harness/tests/interrupted_local.rs`. Its own test binary, so that no other test's Pod
//! cgroups appear meanwhile. Needs a reachable engine, so it is `#[ignore]`d.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::docker_lines;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

/// Every Pod cgroup the harness's hierarchy holds now, by path (cgroup v1: one folder per
/// hierarchy; v2: the one tree).
fn pod_cgroups() -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let roots = std::fs::read_dir("/sys/fs/cgroup")
        .map(|d| d.flatten().map(|e| e.path()).collect::<Vec<_>>())
        .unwrap_or_default();
    for root in roots
        .iter()
        .map(|r| r.as_path())
        .chain([Path::new("/sys/fs/cgroup")])
    {
        let Ok(children) = std::fs::read_dir(root.join("kandev-acceptance")) else {
            continue;
        };
        for child in children.flatten().filter(|c| c.path().is_dir()) {
            found.insert(child.path().display().to_string());
        }
    }
    found
}

/// What the engine holds of run `id`: containers, volumes and networks.
fn labelled(id: &str) -> Vec<String> {
    let label = format!("label=acceptance.kandev.ai/run={id}");
    ["ps -aq", "volume ls -q", "network ls -q"]
        .iter()
        .flat_map(|list| {
            let mut args: Vec<&str> = list.split(' ').collect();
            args.extend(["--filter", &label]);
            docker_lines(&args)
        })
        .collect()
}

/// Waits until `read` gives the same twice, a second apart (the engine finishing what the
/// dead run had sent), at most 60 s.
fn settled<T: PartialEq>(read: impl Fn() -> T) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = read();
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let now = read();
        if now == last || Instant::now() > deadline {
            return now;
        }
        last = now;
    }
}

#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn a_run_killed_at_any_stage_of_its_set_up_leaves_nothing_after_gc() {
    let binary = env!("CARGO_BIN_EXE_kandev-acceptance");
    // The control of the cgroup half: the engine's Pod cgroups are this host's to read.
    assert!(
        [
            "/sys/fs/cgroup/kandev-acceptance",
            "/sys/fs/cgroup/memory/kandev-acceptance"
        ]
        .iter()
        .any(|root| Path::new(root).is_dir()),
        "the engine's cgroups are not visible from this host: run on the engine's host"
    );
    let before = pod_cgroups();
    let mut saw_cgroups = false;
    let mut left_something = 0;
    let mut kills = Vec::new();
    for (i, after_ms) in [200u64, 500, 650, 800, 1000, 1400, 2000, 2800, 3800]
        .into_iter()
        .enumerate()
    {
        let id = format!("killed-{}-{i}", std::process::id());
        let dir = tempfile::tempdir().unwrap();
        let mut child = kandev_test_support::harness_env::harness(binary)
            .args(["run", "--run-id", &id, "--report-dir"])
            .arg(dir.path())
            .args(["--exact", "workspace::shared"])
            .env("KANDEV_ACCEPTANCE_ROOT", common::root())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(after_ms));
        // A run done before its kill: the later kills would come after its end too.
        let finished = child.try_wait().unwrap().is_some();
        let _ = child.kill();
        child.wait().unwrap();
        // The lease container ends with the process (its stdin closed): until then the run
        // is alive to `gc`.
        let lease = format!("name=kandev-acceptance-lease-{id}");
        let started = Instant::now();
        while !docker_lines(&["ps", "-q", "--filter", &lease]).is_empty() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{id}'s lease lives on"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let (objects, cgroups) = settled(|| {
            let new: Vec<String> = pod_cgroups().difference(&before).cloned().collect();
            (labelled(&id), new)
        });
        if !objects.is_empty() || !cgroups.is_empty() {
            left_something += 1;
        }
        saw_cgroups |= !cgroups.is_empty();
        // Killed between the lease's create and its start (read once the engine settled):
        // `gc` takes it for a run being set up for its first minute
        // (`lease::SETTING_UP_SECONDS`); the process is known gone, which `--force` is for.
        let created = [
            "ps",
            "-aq",
            "--filter",
            &lease,
            "--filter",
            "status=created",
        ];
        let force = !docker_lines(&created).is_empty();
        // Past `--older-than`: a Pod cgroup younger is spared as one being created.
        std::thread::sleep(Duration::from_secs(2));
        let gc = kandev_test_support::harness_env::harness(binary)
            .args(["gc", "--run", &id, "--older-than", "1s"])
            .args(force.then_some("--force"))
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&gc.stdout),
            String::from_utf8_lossy(&gc.stderr)
        );
        assert!(gc.status.success(), "gc --run {id}: {said}");
        // A Pod cgroup whose Pod has containers is a live Pod's, and one that comes and goes
        // is one being made or removed (another test's on this engine, when tests run beside
        // this binary): a leak is an orphan that stays.
        let orphans = || -> BTreeSet<String> {
            pod_cgroups()
                .difference(&before)
                .filter(|path| {
                    let uid = path.rsplit_once("/pod").map_or("", |(_, uid)| uid);
                    let label = format!("label=acceptance.kandev.ai/pod-uid={uid}");
                    docker_lines(&["ps", "-aq", "--filter", &label]).is_empty()
                })
                .cloned()
                .collect()
        };
        let first = orphans();
        std::thread::sleep(Duration::from_secs(3));
        let cgroups_left: Vec<String> = first.intersection(&orphans()).cloned().collect();
        assert_eq!(
            (labelled(&id), cgroups_left),
            (Vec::new(), Vec::new()),
            "killed after {after_ms} ms, left after gc (before it: {objects:?} {cgroups:?}); gc said: {said}"
        );
        kills.push((after_ms, objects.len(), cgroups.len()));
        if finished {
            break;
        }
    }
    eprintln!("(ms after the start, objects, Pod cgroups) left by each kill: {kills:?}");
    assert!(
        left_something >= 3 && saw_cgroups,
        "the kills missed the stages that make something (a Pod cgroup among them): {kills:?}"
    );
}
