//! Every promise check can fail. Each check of the catalogue declares its kind: a `system`
//! check names its broken twin, a fixture of the system under test (template, worker image,
//! prepare script) that breaks exactly that promise; a `mirror` check is one only the
//! harness's mirror of Kandev decides. These tests hold the catalogue to that:
//!
//! - every system check has a twin: on disk (a template, image, prepare script or Role), or
//!   on the cluster double for what only a cluster can break (`Twin::Cluster`, a test of
//!   `kube_double/main.rs`); none is exempt, and `docs/catalogue.md` lists none as such; every
//!   mirror check is listed there with its reason;
//! - `docs/catalogue.md`'s table of checks, kinds and twins is the catalogue's own
//!   (`kandev-acceptance checks`);
//! - (engine) each twin, run against the scenarios whose checks it twins, fails exactly that
//!   check in each of them, with a diagnosis naming it, while the checks before it still pass.
//!   `template::grant_rules/passes` is a mirror check (only Kandev's rules decide it); the
//!   template that breaks them is refused by `run` before anything starts (exit 2, the broken
//!   rule named at its field path), tested here too. Role twins (`--executor-role`) need RBAC: `kube_double/main.rs` runs them on the
//!   cluster double (`role_twins_fail_exactly_their_check_on_kube_double`).
//!
//! One run per fixture: a fixture that twins checks of several scenarios runs them together
//! (it breaks one check in each). `KANDEV_TWINS=<part of a fixture path>` runs only matching
//! twins (for working on one).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use kandev_harness::runner::{Check, Scenario, Twin};
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// Where the catalogue is documented: its checks table and the reasons of the mirror checks.
const CATALOGUE_DOC: &str = "docs/catalogue.md";
/// The section that listed system checks without a twin, while there were any.
const DOC_EXEMPTIONS: &str = "## System checks without a twin";
const DOC_MIRRORS: &str = "## Mirror checks";
/// The host-path folders twins share between Pods, left on the node by design.
const HOST_FOLDERS: [&str; 3] = [
    "/tmp/kandev-acceptance-shared-docker-socket",
    "/tmp/kandev-acceptance-shared-containerd",
    "/tmp/kandev-acceptance-shared-workspace",
];
const TABLE_BEGIN: &str = "<!-- checks:begin -->";
const TABLE_END: &str = "<!-- checks:end -->";
const CGROUP_TABLE_BEGIN: &str = "<!-- cgroup-twins:begin -->";
const CGROUP_TABLE_END: &str = "<!-- cgroup-twins:end -->";

/// Twins beyond a check's own (a check names one; each of these breaks it another way, which
/// the first does not show): the fixture and the check it must fail, exactly, in its run.
/// `docs/catalogue.md`'s section under [`DOC_MORE_TWINS`] lists them.
const MORE_TWINS: [(Twin, &str); 3] = [
    // A proxy of the private socket on a folder the agent shares with the companion that is
    // neither the workspace nor the socket folder.
    (
        Twin::Template("daemon-socket-proxied"),
        "daemon::socket_only/one_socket_only",
    ),
    // A proxy of the private socket on an abstract unix socket: no file anywhere, reachable
    // from the whole Pod's network namespace.
    (
        Twin::Template("daemon-socket-abstract"),
        "daemon::socket_only/one_socket_only",
    ),
    // A renamed daemon binary (not `dockerd` by comm) serving TCP out of the Pod's network
    // namespace: found by the socket it holds, not by its name.
    (
        Twin::Template("daemon-renamed-tcp-host"),
        "daemon::socket_only/no_tcp_host",
    ),
];
const DOC_MORE_TWINS: &str = "## More twins of one check";

fn catalogue_doc() -> String {
    std::fs::read_to_string(root().join(CATALOGUE_DOC)).unwrap()
}

/// The check ids the catalogue document's section under `heading` lists: the backticked ids at the head of
/// each bullet (before its first ": "), up to the next heading.
fn listed(doc: &str, heading: &str) -> BTreeSet<String> {
    let Some((_, rest)) = doc.split_once(heading) else {
        return BTreeSet::new();
    };
    // A bullet and its continuation lines (indented) as one text.
    let mut bullets: Vec<String> = Vec::new();
    for line in rest
        .lines()
        .skip(1)
        .take_while(|line| !line.starts_with('#'))
    {
        if let Some(start) = line.strip_prefix("- ") {
            bullets.push(start.to_owned());
        } else if let (Some(last), true) = (bullets.last_mut(), line.starts_with("  ")) {
            last.push(' ');
            last.push_str(line.trim());
        }
    }
    bullets
        .iter()
        .flat_map(|bullet| {
            let head = bullet.split(": ").next().unwrap_or_default();
            head.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn every_system_check_has_a_twin_and_every_mirror_check_is_listed_in_the_catalogue_doc() {
    let doc = catalogue_doc();
    let mirrors = listed(&doc, DOC_MIRRORS);
    let mut problems = Vec::new();
    if doc.contains(DOC_EXEMPTIONS) {
        problems.push(format!(
            "{CATALOGUE_DOC} still has \"{DOC_EXEMPTIONS}\": every system check has a twin"
        ));
    }
    let mut catalogue: BTreeMap<String, Twin> = BTreeMap::new();
    for scenario in kandev_scenarios::registry() {
        if scenario.checks.is_empty() {
            problems.push(format!("{} declares no checks", scenario.name));
        }
        let mut twins: BTreeMap<String, &str> = BTreeMap::new();
        for (i, check) in scenario.checks.iter().enumerate() {
            let id = scenario.check_id(check);
            catalogue.insert(id.clone(), check.twin);
            if scenario.checks[..i].iter().any(|c| c.id == check.id) {
                problems.push(format!("{id}: the id is used twice"));
            }
            if !check
                .id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                problems.push(format!("{id}: ids are snake_case"));
            }
            match (check.twin, check.twin.fixture()) {
                (_, Some(path)) => {
                    if !root().join("fixtures").join(&path).exists() {
                        problems.push(format!("{id}: its twin fixtures/{path} does not exist"));
                    }
                    // One run per fixture and scenario breaks one check: the first it reaches.
                    if let Some(other) = twins.insert(path.clone(), check.id) {
                        problems.push(format!(
                            "{id}: fixtures/{path} already twins {other} of the same scenario"
                        ));
                    }
                }
                (Twin::Cluster(test), None) => {
                    // Run by scenarios/tests/kube_double/main.rs, which must hold that test.
                    let tests =
                        std::fs::read_to_string(root().join("scenarios/tests/kube_double/main.rs"))
                            .unwrap_or_default();
                    if !tests.contains(&format!("async fn {test}(")) {
                        problems.push(format!(
                            "{id}: its cluster twin {test} is no test of scenarios/tests/kube_double/main.rs"
                        ));
                    }
                }
                (Twin::Exempt(reason), None) => {
                    problems.push(format!(
                        "{id}: a system check without a twin ({reason}): give it one, a fixture, a Role or, for what only a cluster can break, a behaviour of the cluster double and a test of scenarios/tests/kube_double/main.rs (Twin::Cluster)"
                    ));
                }
                (Twin::Mirror(reason), None) => {
                    if !reason.contains("Kept in the scenario because") {
                        problems.push(format!(
                            "{id}: a mirror check stays in the catalogue only where it needs the running Pod (\"Kept in the scenario because ...\"); else it is a unit test of the mirror: {reason}"
                        ));
                    } else if !mirrors.contains(&id) {
                        problems.push(format!(
                            "{id}: a mirror check, but {CATALOGUE_DOC}'s \"{DOC_MIRRORS}\" does not list it with its reason"
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    // The document lists nothing stale: every id it lists is a mirror check.
    for id in &mirrors {
        if !matches!(catalogue.get(id), Some(Twin::Mirror(_))) {
            problems.push(format!(
                "{CATALOGUE_DOC}'s \"{DOC_MIRRORS}\" lists {id}, which is no mirror check of the catalogue"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Each of [`MORE_TWINS`] exists, twins a check of the catalogue that has a fixture twin of its
/// own (not this one), is no twin of another check of that scenario (one run per fixture
/// breaks one check of each scenario), and `docs/catalogue.md` lists it with its check.
#[test]
fn every_further_twin_names_a_check_and_is_documented() {
    let registry = kandev_scenarios::registry();
    let doc = catalogue_doc();
    let section = doc
        .split_once(DOC_MORE_TWINS)
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or_default().to_owned())
        .unwrap_or_default();
    let mut problems = Vec::new();
    for (twin, id) in MORE_TWINS {
        let path = twin.fixture().unwrap();
        if !root().join("fixtures").join(&path).exists() {
            problems.push(format!(
                "{id}: its further twin fixtures/{path} does not exist"
            ));
        }
        let found = registry.iter().find_map(|s| {
            s.checks
                .iter()
                .find(|c| s.check_id(c) == id)
                .map(|c| (s, c))
        });
        match found {
            None => problems.push(format!(
                "fixtures/{path} twins {id}, no check of the catalogue"
            )),
            Some((scenario, check)) => {
                if check.twin.fixture().is_none() || check.twin.fixture() == Some(path.clone()) {
                    problems.push(format!(
                        "{id}: fixtures/{path} is its own twin or the check has no fixture twin of its own"
                    ));
                }
                for other in scenario.checks.iter().filter(|c| c.id != check.id) {
                    if other.twin.fixture() == Some(path.clone()) {
                        problems.push(format!(
                            "fixtures/{path} twins both {id} and {} of the same scenario",
                            scenario.check_id(other)
                        ));
                    }
                }
            }
        }
        if !section
            .lines()
            .any(|l| l.contains(&format!("`fixtures/{path}`")) && l.contains(&format!("`{id}`")))
        {
            problems.push(format!(
                "{CATALOGUE_DOC}'s \"{DOC_MORE_TWINS}\" does not list `fixtures/{path}` with `{id}` on one line"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_catalogue_doc_lists_every_check_and_its_twin() {
    let table = catalogue_doc()
        .split_once(TABLE_BEGIN)
        .and_then(|(_, rest)| rest.split_once(TABLE_END))
        .map(|(table, _)| table.trim().to_owned())
        .unwrap_or_default();
    let expected = kandev_harness::runner::scenario::checks_table(&kandev_scenarios::registry());
    assert_eq!(
        table,
        expected.trim(),
        "{CATALOGUE_DOC}'s checks table (between {TABLE_BEGIN} and {TABLE_END}) differs from the catalogue: \
         paste the output of `cargo run -q -p kandev-scenarios -- checks`"
    );
}

/// `docs/catalogue.md`'s table of checks that can be `not judged` says what the code does:
/// every `not_judged(&CHECK, ...)` call in a scenario's source (outside its unit tests) is a
/// row, every row is a check of the catalogue, and a scenario that leaves a check it passes
/// by variable (`not_judged(check, ...)`) has at least one row.
#[test]
fn the_not_judged_table_is_what_the_code_can_leave_unjudged() {
    const HEADING: &str = "## Checks that can be `not judged`";
    let doc = catalogue_doc();
    let table = doc
        .split_once(HEADING)
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or_default().to_owned())
        .unwrap_or_default();
    let rows: BTreeSet<String> = table
        .lines()
        .filter(|l| l.starts_with("| `"))
        .flat_map(|l| {
            let first = l.split(" | ").next().unwrap_or_default().to_owned();
            first
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    let known: BTreeSet<String> = kandev_scenarios::registry()
        .iter()
        .flat_map(|s| s.checks.iter().map(move |c| format!("{}/{}", s.name, c.id)))
        .collect();
    for row in &rows {
        assert!(
            known.contains(row),
            "{CATALOGUE_DOC} lists {row}, no check of the catalogue"
        );
    }
    let mut files = vec![root().join("scenarios/src")];
    let mut called = BTreeSet::new();
    let mut by_variable = BTreeSet::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let Some(scenario) = code
            .split("name: \"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
        else {
            continue;
        };
        // `not_judged(&CHECK, ...)` and `not_judged_lacking(&CHECK, ...)` alike.
        for call in code.split("not_judged").skip(1).filter_map(|rest| {
            rest.strip_prefix('(')
                .or_else(|| rest.strip_prefix("_lacking("))
        }) {
            let argument = call.split(',').next().unwrap_or_default().trim();
            match argument.strip_prefix('&') {
                Some(constant) => {
                    let id = code
                        .split(&format!("const {constant}: Check = Check {{"))
                        .nth(1)
                        .and_then(|rest| rest.split("id: \"").nth(1))
                        .and_then(|rest| rest.split('"').next())
                        .unwrap_or_else(|| panic!("{}: no const {constant}", path.display()));
                    called.insert(format!("{scenario}/{id}"));
                }
                None => {
                    by_variable.insert(scenario.to_owned());
                }
            }
        }
    }
    assert!(
        !called.is_empty(),
        "no not_judged call found: the scan is broken"
    );
    for check in &called {
        assert!(
            rows.contains(check),
            "{check} can be not judged (its scenario's source calls not_judged on it), but {CATALOGUE_DOC}'s table does not list it"
        );
    }
    for scenario in &by_variable {
        assert!(
            rows.iter().any(|r| r.starts_with(&format!("{scenario}/"))),
            "{scenario} leaves checks not judged, but {CATALOGUE_DOC}'s table lists none of them"
        );
    }
}

/// The cgroup twins' table (which cgroup versions each is proven on) is the catalogue's: every
/// twin of a `cgroup::accounting` check and of `lifecycle::teardown_exact/nested_vanish` is in
/// it with its check, nothing else is, each claims at least one version, each recorded-tree
/// proof names a unit test that exists, and `docs/catalogue.md` states it as it is.
#[test]
fn the_cgroup_twins_table_is_the_catalogues() {
    use kandev_scenarios::support::CGROUP_TWINS;
    let mut catalogue = BTreeSet::new();
    for scenario in kandev_scenarios::registry() {
        for check in scenario.checks {
            let id = scenario.check_id(check);
            let cgroup = scenario.name == "cgroup::accounting"
                || id == "lifecycle::teardown_exact/nested_vanish";
            if let (true, Some(path)) = (cgroup, check.twin.fixture()) {
                catalogue.insert((path, id));
            }
        }
    }
    let table: BTreeSet<(String, String)> = CGROUP_TWINS
        .iter()
        .map(|t| (t.fixture.to_owned(), t.check.to_owned()))
        .collect();
    assert_eq!(table, catalogue, "CGROUP_TWINS in scenarios/src/support.rs");
    let documented = catalogue_doc()
        .split_once(CGROUP_TABLE_BEGIN)
        .and_then(|(_, rest)| rest.split_once(CGROUP_TABLE_END))
        .map(|(table, _)| table.trim().to_owned())
        .unwrap_or_default();
    assert_eq!(
        documented,
        kandev_scenarios::support::cgroup_twins_table().trim(),
        "{CATALOGUE_DOC}'s cgroup twins table (between {CGROUP_TABLE_BEGIN} and {CGROUP_TABLE_END}) \
         differs from CGROUP_TWINS: paste kandev_scenarios::support::cgroup_twins_table()"
    );
    for twin in CGROUP_TWINS {
        assert!(
            !twin.engine.is_empty() || !twin.fixture_trees.is_empty(),
            "{}: proven on no cgroup version",
            twin.fixture
        );
        assert!(
            twin.engine
                .iter()
                .chain(twin.fixture_trees)
                .all(|v| twin.works_on.contains(v)),
            "{}: proven on a version it is not made for",
            twin.fixture
        );
        assert_eq!(
            twin.fixture_trees.is_empty(),
            twin.tree_test.is_none(),
            "{}: a recorded-tree proof names its test",
            twin.fixture
        );
        if let Some(test) = twin.tree_test {
            let (file, name) = test.split_once("::").unwrap();
            let source = std::fs::read_to_string(root().join("scenarios/src").join(file))
                .unwrap_or_default();
            assert!(
                source.contains(&format!("fn {name}(")),
                "{}: its recorded-tree test {test} does not exist",
                twin.fixture
            );
        }
    }
}

/// The node's cgroup version, and the cgroup twins not made for it (skipped on this node, and
/// said so; every other is run and must break its check).
fn cgroup_twins_unproven_here() -> (
    Option<kandev_harness::node::CgroupVersion>,
    BTreeSet<String>,
) {
    let version = kandev_harness::node::CgroupFs::host()
        .ok()
        .map(|c| c.version());
    let unproven = kandev_scenarios::support::CGROUP_TWINS
        .iter()
        .filter(|t| version.is_some_and(|v| !kandev_scenarios::support::cgroup_twin_claims(t, v)))
        .map(|t| t.fixture.to_owned())
        .collect();
    (version, unproven)
}

/// The command-line arguments that put `twin` in place of the good fixture.
fn twin_args(twin: &Twin) -> (Vec<String>, Option<String>) {
    match twin {
        Twin::Template(_) => (
            vec![
                "--template".into(),
                fixture(&twin.fixture().unwrap_or_default()),
            ],
            None,
        ),
        Twin::Prepare(_) => (
            vec![
                "--prepare-script".into(),
                fixture(&twin.fixture().unwrap_or_default()),
            ],
            None,
        ),
        Twin::Worker(name) => {
            let tag = broken_worker(name);
            (vec!["--worker-image".into(), tag.clone()], Some(tag))
        }
        Twin::Role(_) => (
            vec![
                "--executor-role".into(),
                fixture(&twin.fixture().unwrap_or_default()),
            ],
            None,
        ),
        Twin::Cluster(_) | Twin::Exempt(_) | Twin::Mirror(_) => (Vec::new(), None),
    }
}

/// A twin and the checks (of different scenarios) it must fail in one run.
type TwinRun<'a> = (Twin, Vec<(&'a Scenario, Check)>);

#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn every_twin_fails_exactly_its_check() {
    let wanted = std::env::var("KANDEV_TWINS").unwrap_or_default();
    let registry = kandev_scenarios::registry();
    let mut by_fixture: BTreeMap<String, TwinRun> = BTreeMap::new();
    for scenario in &registry {
        for check in scenario.checks {
            if let Some(path) = check.twin.fixture() {
                by_fixture
                    .entry(path)
                    .or_insert_with(|| (check.twin, Vec::new()))
                    .1
                    .push((scenario, *check));
            }
        }
    }
    for (twin, id) in MORE_TWINS {
        let (scenario, check) = registry
            .iter()
            .find_map(|s| {
                s.checks
                    .iter()
                    .find(|c| s.check_id(c) == id)
                    .map(|c| (s, c))
            })
            .unwrap_or_else(|| panic!("{id}: no check of the catalogue"));
        by_fixture
            .entry(twin.fixture().unwrap())
            .or_insert_with(|| (twin, Vec::new()))
            .1
            .push((scenario, *check));
    }
    // Refused before the run: the preflight's, on the cluster double with the other Role
    // twins, which need RBAC (kube_double/main.rs,
    // role_twins_fail_exactly_their_check_on_kube_double).
    let (version, unproven) = cgroup_twins_unproven_here();
    for path in &unproven {
        eprintln!(
            "twin fixtures/{path}: skipped, not made for this node's cgroup {version:?} (scenarios/src/support.rs CGROUP_TWINS)"
        );
    }
    let queue: Vec<(String, TwinRun)> = by_fixture
        .into_iter()
        .filter(|(path, _)| !unproven.contains(path))
        .filter(|(path, (twin, checks))| {
            let refused = checks.iter().any(|(scenario, check)| {
                REFUSED_BEFORE_THE_RUN.contains(&scenario.check_id(check).as_str())
            });
            path.contains(&wanted) && !refused && !matches!(twin, Twin::Role(_))
        })
        .collect();
    assert!(
        !queue.is_empty(),
        "no twin matched KANDEV_TWINS={wanted:?} (Role twins run in kube_double/main.rs)"
    );
    let jobs = twin_jobs().min(queue.len());
    let started = std::time::Instant::now();
    eprintln!(
        "{} twin run(s), {jobs} at once (KANDEV_TWIN_JOBS overrides)",
        queue.len()
    );
    // The longest first (the ones that wait out a bound, then the most scenarios), so that the
    // last to start is a short one and no long one runs alone at the end.
    let mut queue = queue;
    queue.sort_by_key(|(path, (_, checks))| {
        (
            !WAIT_OUT_A_BOUND.iter().any(|slow| path.contains(slow)),
            std::cmp::Reverse(checks.len()),
        )
    });
    let queue = std::sync::Mutex::new(queue.into_iter());
    let wrong = std::sync::Mutex::new(Vec::<String>::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let next = queue.lock().map(|mut q| q.next()).unwrap_or(None);
                    let Some((path, (twin, checks))) = next else {
                        break;
                    };
                    let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        run_twin(&path, &twin, &checks)
                    }))
                    .unwrap_or_else(|_| vec![format!("fixtures/{path}: the twin's run panicked")]);
                    if let Ok(mut wrong) = wrong.lock() {
                        wrong.extend(found);
                    }
                }
            });
        }
    });
    // What the escape twins share on the node (a cgroup folder outside every Pod): none may
    // be left once none of them runs.
    let escaped = remove_escaped_folders();
    eprintln!(
        "twins: all done in {:.1}s with {jobs} at once",
        started.elapsed().as_secs_f64()
    );
    let mut wrong = wrong.into_inner().unwrap();
    if !escaped.is_empty() {
        wrong.push(format!("escape folders still hold processes: {escaped:?}"));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Twins whose broken system makes their scenario wait out a bound before the check fails
/// (measured, 4 at once on 2 cores: the nested fetch without NAT waits for its connection
/// until the transfer bound, 144 s; an unprivileged daemon that never answers, 83 s; a PID 1
/// that ignores SIGTERM, the grace period, 55 s; a worker without node, 47 s; nested processes
/// moved out of the Pod, the teardown's settle time, 42 s). Started first, so that none of
/// them runs alone at the end; the rest take 5–30 s.
const WAIT_OUT_A_BOUND: [&str; 5] = [
    "daemon-without-iptables",
    "daemon-unprivileged",
    "worker-pid1-ignores-term",
    "worker-without-node",
    "daemon-escapes-pod.yaml",
];

/// How much memory one twin run may take: its Pods (a worker with a browser and toolchains,
/// a Docker daemon with nested containers; up to three Pods for the scenarios run together)
/// and the harness.
const GIB_PER_TWIN_RUN: u64 = 4;

/// How many twin runs at once: `KANDEV_TWIN_JOBS`, else two per core as far as memory holds
/// [`GIB_PER_TWIN_RUN`] each. Each run's scenarios mostly wait (on the engine, on the bounds
/// their twins make them wait out): on the 2-core machine one per core left the cores idle
/// for minutes (5–6 % busy while two runs waited), and all 54 twin runs took 342 s in CI; two
/// per core kept them 70–99 % busy and took 278 s.
fn twin_jobs() -> usize {
    if let Some(n) = std::env::var("KANDEV_TWIN_JOBS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|n| *n > 0)
    {
        return n;
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let memory_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map_or(GIB_PER_TWIN_RUN, |kib| kib >> 20);
    let by_memory = usize::try_from(memory_gib / GIB_PER_TWIN_RUN).unwrap_or(1);
    (2 * cores).min(by_memory).max(1)
}

/// Runs one twin against the scenarios whose checks it twins, cleans what it leaves by
/// design, and says what is wrong with how the harness judged it.
fn run_twin(path: &str, twin: &Twin, checks: &[(&Scenario, Check)]) -> Vec<String> {
    let started = std::time::Instant::now();
    let mut wrong = Vec::new();
    let (mut args, built) = twin_args(twin);
    let names: Vec<&str> = checks.iter().map(|(s, _)| s.name).collect();
    args.extend(only(&names));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = run(&argv);
    if let Some(tag) = built {
        let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
    }
    // Escape twins leave processes on the node by design: remove them before judging.
    // Sharing twins leave their host-path folder (the node state the fixture says): only
    // this fixture's, as other twins may be running with theirs.
    let text = std::fs::read_to_string(fixture(path)).unwrap_or_default();
    for folder in HOST_FOLDERS.iter().filter(|f| text.contains(**f)) {
        let _ = std::fs::remove_dir_all(folder);
    }
    // The escape twins' shared folder goes as soon as it is empty: the leak ledger of a run
    // going on beside this one reports an empty cgroup folder made in its window (one that
    // still holds another escape twin's processes is kept until those are gone).
    clean_escaped(&run, "kandev-accounting-");
    clean_escaped(
        &run,
        kandev_scenarios::lifecycle::teardown_exact::MARKER_PREFIX,
    );
    for (scenario, check) in checks {
        wrong.extend(twin_failures(&run.report, scenario, check));
    }
    if run.code != 1 {
        wrong.push(format!(
            "fixtures/{path}: exit code {} (expected 1, a failed scenario)",
            run.code
        ));
    }
    let left = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        assert_nothing_left(&run.report)
    }));
    if left.is_err() {
        wrong.push(format!("fixtures/{path}: the run left objects behind"));
    }
    eprintln!(
        "twin fixtures/{path}: {} check(s) in {:.1}s{}",
        checks.len(),
        started.elapsed().as_secs_f64(),
        if wrong.is_empty() { "" } else { " WRONG" }
    );
    if !wrong.is_empty() {
        eprintln!("{}", run.output);
    }
    wrong
}

/// A template that breaks Kandev's rules ([`REFUSED_BY_RULES_FIXTURE`]) is refused by `run`
/// before anything starts (exit 2), naming exactly the rule it breaks at its field path, and no
/// run folder is written. Needs no engine: nothing is created.
#[test]
fn the_template_breaking_kandevs_rules_is_refused_naming_its_rule() {
    let wrong = refused_by_rules(REFUSED_BY_RULES_FIXTURE);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// What is wrong with how `run` treated the template that breaks [`REFUSED_BY_RULES`].
fn refused_by_rules(path: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let output = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["run", "--report"])
        .arg(dir.path())
        .arg("--template")
        .arg(fixture(path))
        .env("KANDEV_ACCEPTANCE_ROOT", root())
        .output()
        .unwrap();
    let text = output_text(&output);
    let mut wrong = Vec::new();
    if output.status.code() != Some(2) {
        wrong.push(format!(
            "{REFUSED_BY_RULES}: fixtures/{path} exited {:?}, expected 2 (refused): {text}",
            output.status.code()
        ));
    }
    // Exactly the one rule the fixture breaks, at its field path.
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("error: config."))
        .collect();
    if !text.contains("breaks Kandev's rules")
        || errors.len() != 1
        || !errors[0].contains("config.pod_template_yaml.template.spec.containers[0].command")
    {
        wrong.push(format!(
            "{REFUSED_BY_RULES}: fixtures/{path}: the refusal does not name exactly the main container's command: {text}"
        ));
    }
    if std::fs::read_dir(dir.path()).unwrap().next().is_some() {
        wrong.push(format!(
            "{REFUSED_BY_RULES}: fixtures/{path}: a refused run wrote a run folder"
        ));
    }
    wrong
}

/// The leak ledger compares the node's cgroup folders before a scenario and after its
/// teardown: a companion that made a cgroup of its own outside the Pod's
/// (`fixtures/templates/broken/daemon-leaves-cgroup.yaml`) has every check hold and nothing of
/// its Pod left, and the scenario is `leaked` (exit 4) naming the folder, which is then
/// removed here.
#[test]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
fn a_companion_leaving_a_cgroup_on_the_node_is_reported_leaked() {
    let run = run(&[
        "--template",
        &fixture("templates/broken/daemon-leaves-cgroup.yaml"),
        "--exact",
        "workspace::shared",
    ]);
    let scenario = &run.report.scenarios[0];
    let folders: Vec<String> = scenario
        .sessions
        .iter()
        .map(|s| format!("kandev-acceptance-left-{}", s.pod_name))
        .collect();
    for hierarchy in ["/sys/fs/cgroup/memory", "/sys/fs/cgroup"] {
        for folder in &folders {
            let _ = std::fs::remove_dir(std::path::Path::new(hierarchy).join(folder));
        }
    }
    assert_eq!(
        scenario.outcome,
        kandev_report::Outcome::Leaked,
        "{:?}\n{}",
        scenario.diagnosis,
        run.output
    );
    assert!(
        scenario
            .checks
            .iter()
            .all(|c| c.outcome == kandev_report::CheckOutcome::Passed),
        "{:?}",
        scenario.checks
    );
    assert!(
        scenario
            .leaks
            .iter()
            .any(|l| l.starts_with("node: cgroup ")
                && folders.iter().any(|f| l.contains(f.as_str()))),
        "{:#?}",
        scenario.leaks
    );
    assert_eq!(run.code, 4, "{}", run.output);
}
