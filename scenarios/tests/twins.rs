//! Every promise check can fail. Each check of the catalogue names its broken twin: a fixture
//! of the system under test (template, worker image, prepare script) that breaks exactly that
//! promise. These tests hold the catalogue to that:
//!
//! - every check has a twin on disk, or an exemption whose reason README lists;
//! - README's table of checks and twins is the catalogue's own (`kandev-acceptance checks`);
//! - (engine) each twin, run against the scenarios whose checks it twins, fails exactly that
//!   check in each of them, with a diagnosis naming it, while the checks before it still pass.
//!
//! One run per fixture: a fixture that twins checks of several scenarios runs them together
//! (it breaks one check in each). `KANDEV_TWINS=<part of a fixture path>` runs only matching
//! twins (for working on one).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use kandev_harness::report::{CheckOutcome, Outcome};
use kandev_harness::runner::{Check, Scenario, Twin};
use std::collections::BTreeMap;
use std::process::Command;

const README_EXEMPTIONS: &str = "### Checks without a twin";
const TABLE_BEGIN: &str = "<!-- checks:begin -->";
const TABLE_END: &str = "<!-- checks:end -->";

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).unwrap()
}

#[test]
fn every_check_has_a_twin_or_an_exemption_listed_in_readme() {
    let readme = readme();
    let exemptions = readme
        .split_once(README_EXEMPTIONS)
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or_default().to_owned())
        .unwrap_or_default();
    let mut problems = Vec::new();
    for scenario in kandev_scenarios::registry() {
        if scenario.checks.is_empty() {
            problems.push(format!("{} declares no checks", scenario.name));
        }
        let mut twins: BTreeMap<String, &str> = BTreeMap::new();
        for (i, check) in scenario.checks.iter().enumerate() {
            let id = scenario.check_id(check);
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
                (Twin::Exempt(reason), None) => {
                    if reason.trim().is_empty() || reason.starts_with("TODO") {
                        problems.push(format!("{id}: no twin ({reason})"));
                    } else if !exemptions.contains(&format!("`{id}`")) {
                        problems.push(format!(
                            "{id}: exempt, but README's \"{README_EXEMPTIONS}\" does not list it with its reason"
                        ));
                    }
                }
                _ => {}
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn readme_lists_every_check_and_its_twin() {
    let readme = readme();
    let table = readme
        .split_once(TABLE_BEGIN)
        .and_then(|(_, rest)| rest.split_once(TABLE_END))
        .map(|(table, _)| table.trim().to_owned())
        .unwrap_or_default();
    let expected = kandev_harness::runner::scenario::checks_table(&kandev_scenarios::registry());
    assert_eq!(
        table,
        expected.trim(),
        "README's checks table (between {TABLE_BEGIN} and {TABLE_END}) differs from the catalogue: \
         paste the output of `cargo run -q -p kandev-scenarios -- checks`"
    );
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
        Twin::Exempt(_) => (Vec::new(), None),
    }
}

/// What is wrong with `scenario`'s result in `run` for its check `check`, if anything.
fn judge(run: &Run, scenario: &Scenario, check: &Check) -> Vec<String> {
    let id = scenario.check_id(check);
    let Some(report) = run
        .report
        .scenarios
        .iter()
        .find(|s| s.name == scenario.name)
    else {
        return vec![format!("{id}: {} did not run", scenario.name)];
    };
    let mut wrong = Vec::new();
    if report.outcome != Outcome::Failed {
        wrong.push(format!(
            "{id}: {} ended {} (expected failed): {:?}",
            scenario.name,
            report.outcome.as_str(),
            report.diagnosis
        ));
    }
    let diagnosis = report.diagnosis.clone().unwrap_or_default();
    if !diagnosis.starts_with(&id) {
        wrong.push(format!(
            "{id}: the diagnosis does not name the check: {diagnosis}"
        ));
    }
    let position = scenario.checks.iter().position(|c| c.id == check.id);
    for (i, c) in report.checks.iter().enumerate() {
        let expected = match position {
            Some(p) if i < p => CheckOutcome::Passed,
            Some(p) if i == p => CheckOutcome::Failed,
            _ => CheckOutcome::NotReached,
        };
        // Later checks are not reached; earlier ones must have been judged and held.
        if (i as isize) <= position.map_or(-1, |p| p as isize) && c.outcome != expected {
            wrong.push(format!(
                "{id}: {} is {} (expected {})",
                c.id,
                c.outcome.as_str(),
                expected.as_str()
            ));
        }
    }
    if report.artifacts.is_empty() {
        wrong.push(format!("{id}: a failed scenario keeps evidence"));
    }
    wrong
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
    let mut wrong = Vec::new();
    let mut ran = 0;
    for (path, (twin, checks)) in by_fixture {
        if !path.contains(&wanted) {
            continue;
        }
        let started = std::time::Instant::now();
        let (mut args, built) = twin_args(&twin);
        let names: Vec<&str> = checks.iter().map(|(s, _)| s.name).collect();
        args.extend(only(&names));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = run(&argv);
        if let Some(tag) = built {
            let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
        }
        // Escape twins leave processes on the node by design: remove them before judging.
        clean_escaped(&run, "kandev-accounting-");
        clean_escaped(
            &run,
            kandev_scenarios::lifecycle::teardown_exact::MARKER_PREFIX,
        );
        for (scenario, check) in &checks {
            wrong.extend(judge(&run, scenario, check));
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
        ran += 1;
        eprintln!(
            "twin fixtures/{path}: {} check(s) in {:.1}s",
            checks.len(),
            started.elapsed().as_secs_f64()
        );
        if !wrong.is_empty() {
            eprintln!("{}", run.output);
        }
    }
    assert!(ran > 0, "no twin matched KANDEV_TWINS={wanted:?}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
