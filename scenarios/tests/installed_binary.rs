//! The binary as a user installs it, run anywhere: copied out of the build (as `cargo install`
//! or a release archive leaves it) into an empty folder, and run from there in a mount
//! namespace where the checkout it was built from is hidden (an empty read-only tmpfs over
//! it), with `env -i PATH=/usr/bin:/bin HOME=<that folder>`: no checkout, no cargo, no
//! `KANDEV_ACCEPTANCE_ROOT`. What it reads then comes from what it carries (`harness/build.rs`:
//! the fixtures, and the static mock agent), written out under `$HOME/.cache/kandev-acceptance`;
//! its reports go to `./reports`.
//!
//! The tests that hide the checkout need root (unshare --mount), so they are `#[ignore]`d as
//! the engine tests are.

// A test file: failing loudly with unwrap/panic is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use kandev_test_support::engine::FixtureEngine;
use std::path::{Path, PathBuf};
use std::process::Output;

/// Runs in a new mount namespace: hides the checkout (`$1`), checks that it is hidden and that
/// the binary's PATH has no cargo (each a positive control, with its own exit code), then runs
/// the copied binary from the empty folder (`$2`) with the remaining arguments.
const NAMESPACE_SCRIPT: &str = r#"
checkout=$1; home=$2; shift 2
mount -t tmpfs -o ro,size=1m kandev-hidden-checkout "$checkout" || exit 97
if [ -e "$checkout/fixtures" ]; then echo "control: the checkout $checkout is still visible"; exit 98; fi
if env -i PATH=/usr/bin:/bin sh -c 'command -v cargo'; then echo "control: cargo is on /usr/bin:/bin"; exit 99; fi
cd "$home" || exit 96
exec env -i PATH=/usr/bin:/bin HOME="$home" "$home/kandev-acceptance" "$@"
"#;

/// An empty folder holding a copy of the built binary (and the template a user would pass).
struct Installed {
    dir: tempfile::TempDir,
}

impl Installed {
    fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("kandev-installed-")
            .tempdir()
            .unwrap();
        assert!(
            !dir.path().starts_with(common::root()),
            "the folder must lie outside the checkout it hides"
        );
        std::fs::copy(
            env!("CARGO_BIN_EXE_kandev-acceptance"),
            dir.path().join("kandev-acceptance"),
        )
        .unwrap();
        Self { dir }
    }

    fn home(&self) -> &Path {
        self.dir.path()
    }

    /// The installed binary with `args`, the checkout hidden; its output (exit code checked
    /// by the caller, the controls' here).
    fn run(&self, args: &[&str]) -> Output {
        let output = kandev_test_support::harness_env::harness("unshare")
            .args(["--mount", "--propagation", "private", "--"])
            .args(["sh", "-c", NAMESPACE_SCRIPT, "sh"])
            .arg(common::root())
            .arg(self.home())
            .args(args)
            .output()
            .expect("unshare (util-linux) runs");
        let code = output.status.code().unwrap_or(-1);
        assert!(
            !(96..=99).contains(&code),
            "the namespace's set-up or a control failed ({code}); this test needs root \
             (unshare --mount):\n{}",
            common::output_text(&output)
        );
        output
    }

    /// Every file below the user's cache (relative paths, sorted); empty when it is not there.
    fn cached(&self) -> Vec<String> {
        let mut files = Vec::new();
        let cache = self.home().join(".cache");
        let mut stack = vec![cache.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if entry.file_type().unwrap().is_dir() {
                    stack.push(entry.path());
                } else {
                    let path = entry.path();
                    files.push(path.strip_prefix(&cache).unwrap().display().to_string());
                }
            }
        }
        files.sort();
        files
    }
}

/// Every file at or below `path` under `root`, as its path below `root`.
fn files_below(root: &Path, path: &str) -> Vec<String> {
    let full = root.join(path);
    if full.is_file() {
        return vec![path.to_owned()];
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&full).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        files.extend(files_below(root, &format!("{path}/{name}")));
    }
    files
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
#[ignore = "needs root (a mount namespace hides the checkout): cargo test -p kandev-scenarios --test installed_binary -- --include-ignored"]
fn with_no_checkout_and_no_cargo_it_lists_validates_and_prints_its_checks() {
    let installed = Installed::new();
    let registry = kandev_scenarios::registry();

    let list = installed.run(&["run", "--list"]);
    assert!(list.status.success(), "{}", common::output_text(&list));
    let listed = stdout(&list);
    for scenario in &registry {
        assert!(
            listed.contains(&format!("{}: test", scenario.name)),
            "{} is not listed:\n{listed}",
            scenario.name
        );
    }

    let checks = installed.run(&["checks"]);
    assert!(checks.status.success(), "{}", common::output_text(&checks));
    assert_eq!(
        stdout(&checks),
        kandev_harness::runner::scenario::checks_table(&registry)
    );

    // An operator's template, in the folder it is run from; and a twin that breaks a rule.
    let template = std::fs::read(common::fixture("templates/full-worker.yaml")).unwrap();
    std::fs::write(installed.home().join("template.yaml"), template).unwrap();
    let broken = std::fs::read(common::fixture(
        "templates/broken/main-command-overridden.yaml",
    ))
    .unwrap();
    std::fs::write(installed.home().join("broken.yaml"), broken).unwrap();
    let valid = installed.run(&["validate", "--template", "template.yaml"]);
    assert!(valid.status.success(), "{}", common::output_text(&valid));
    assert!(
        stdout(&valid).contains("template.yaml: 0 errors"),
        "{}",
        stdout(&valid)
    );
    let refused = installed.run(&["validate", "--template", "broken.yaml"]);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "{}",
        common::output_text(&refused)
    );

    // None of these reads a fixture: nothing is written out.
    assert_eq!(installed.cached(), Vec::<String>::new());
}

#[test]
#[ignore = "needs root (a mount namespace hides the checkout): cargo test -p kandev-scenarios --test installed_binary -- --include-ignored"]
fn with_no_checkout_an_unwritable_cache_refuses_the_run_naming_the_fix() {
    let installed = Installed::new();
    // A file where the cache folder would be made.
    std::fs::write(installed.home().join(".cache"), b"").unwrap();
    let output = installed.run(&["run", "--exact", "template::grant_rules"]);
    let text = common::output_text(&output);
    assert_eq!(output.status.code(), Some(3), "{text}");
    assert!(
        text.contains("write the fixtures this binary carries to")
            && text.contains("fix:")
            && text.contains("XDG_CACHE_HOME")
            && text.contains("KANDEV_ACCEPTANCE_ROOT"),
        "{text}"
    );
    assert!(
        !installed.home().join("reports").exists(),
        "a refused run made its report folder"
    );
}

/// `KANDEV_ACCEPTANCE_ROOT` naming a folder without fixtures is refused before anything is
/// made, naming the variable and the fix (no root needed: the variable comes first).
#[test]
fn a_root_without_fixtures_is_refused_naming_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let output = kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
        .args(["run", "--exact", "template::grant_rules", "--report"])
        .arg(dir.path().join("reports"))
        .env("KANDEV_ACCEPTANCE_ROOT", dir.path())
        .output()
        .unwrap();
    let text = common::output_text(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(
        text.contains(&format!(
            "KANDEV_ACCEPTANCE_ROOT={} holds no fixtures/ folder",
            dir.path().display()
        )) && text.contains("fix:"),
        "{text}"
    );
    assert!(!dir.path().join("reports").exists(), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine and root (a mount namespace hides the checkout): bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn with_no_checkout_and_no_cargo_it_runs_a_scenario_on_the_local_engine() {
    // The fixture images as the checkout's fixtures build them (reused by content when the
    // engine has them): the installed binary's carried copies must give the same tags.
    let engine = FixtureEngine::start().await;
    let installed = Installed::new();
    let home = installed.home().to_owned();
    let output = tokio::task::spawn_blocking(move || {
        let installed = installed;
        let output = installed.run(&["run", "--exact", "template::grant_rules"]);
        (installed, output)
    })
    .await
    .unwrap();
    let (installed, output) = output;
    let text = common::output_text(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");

    // The report went to ./reports of the folder it ran from.
    let (run_dir, report) = common::written_report(&home.join("reports"), &text);
    assert!(run_dir.starts_with(home.join("reports")));
    let scenario = &report.scenarios[0];
    assert_eq!(scenario.name, "template::grant_rules");
    assert_eq!(scenario.outcome, kandev_report::Outcome::Passed, "{text}");
    assert_eq!(
        report
            .environment
            .template
            .as_ref()
            .map(|t| t.path.as_str()),
        Some("fixtures/templates/full-worker.yaml"),
        "the default template, shown below the fixtures' root"
    );
    // The report says which fixtures ran: the carried ones, with the checkout's digest (the
    // same bytes). The test binary itself runs from the checkout's target/: checkout's.
    let fixtures = report.environment.fixtures.clone().unwrap();
    assert_eq!(fixtures.source, "embedded");
    assert!(fixtures.files > 50, "{fixtures:?}");
    let here = kandev_harness::paths::fixtures_record().unwrap();
    assert_eq!(here.source, "checkout");
    assert_eq!(
        fixtures.sha256, here.sha256,
        "the carried fixtures are the checkout's"
    );

    // The same image tags as the checkout's fixtures and the test's mock agent give, none
    // built: the carried fixtures are byte for byte the checkout's.
    let role = |role: &str| {
        report
            .environment
            .images
            .iter()
            .find(|i| i.role == role)
            .unwrap_or_else(|| panic!("no {role} image in the report"))
            .clone()
    };
    for (name, expected) in [
        ("worker", &engine.images.worker),
        ("daemon", &engine.images.daemon),
        ("mock-agent", &engine.images.mock_agent),
    ] {
        let record = role(name);
        assert_eq!(&record.reference, expected, "{name}");
        assert!(!record.built, "{name} was built again: {record:?}");
    }

    // What it read, it wrote out under its own cache: the fixtures, and the mock agent the
    // run uploads (the `mock_agent_binary` step's path).
    // The fixtures: exactly the checkout's files below what scenarios/build.rs carries, byte
    // for byte.
    let cached = installed.cached();
    let template = cached
        .iter()
        .find(|p| p.ends_with("/fixtures/templates/full-worker.yaml"))
        .unwrap_or_else(|| panic!("no fixtures written out: {cached:?}"));
    let folder = template.trim_end_matches("fixtures/templates/full-worker.yaml");
    assert!(
        folder.starts_with("kandev-acceptance/fixtures-"),
        "{folder}"
    );
    let written: Vec<&str> = cached
        .iter()
        .filter_map(|p| p.strip_prefix(folder))
        .collect();
    let mut expected = Vec::new();
    for carried in kandev_harness::paths::CARRIED {
        expected.extend(files_below(&common::root(), carried));
    }
    expected.sort();
    assert_eq!(written, expected);
    for path in &written {
        assert_eq!(
            std::fs::read(home.join(".cache").join(folder).join(path)).unwrap(),
            std::fs::read(common::root().join(path)).unwrap(),
            "{path}"
        );
    }
    let agent: PathBuf = report
        .setup
        .iter()
        .find(|s| s.name == "mock_agent_binary")
        .and_then(|s| s.evidence["path"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("no mock_agent_binary step: {:?}", report.setup));
    assert!(
        agent.starts_with(home.join(".cache/kandev-acceptance")),
        "{}",
        agent.display()
    );
    assert_eq!(
        std::fs::read(&agent).unwrap(),
        std::fs::read(&engine.mock_agent_binary).unwrap()
    );

    // Nothing in the report names the checkout.
    let raw = std::fs::read_to_string(run_dir.join("report.json")).unwrap();
    let checkout = common::root().display().to_string();
    assert!(!raw.contains(&checkout), "the report names {checkout}");

    // The harness image from the installed binary: the carried template, prepare script and
    // mock agent, under the same paths, give the very image the checkout's files give.
    let (installed, image) = tokio::task::spawn_blocking(move || {
        let image = installed.run(&["image", "harness"]);
        (installed, image)
    })
    .await
    .unwrap();
    assert!(image.status.success(), "{}", common::output_text(&image));
    let from_checkout = engine
        .harness_image(Path::new(env!("CARGO_BIN_EXE_kandev-acceptance")))
        .await;
    assert_eq!(stdout(&image).trim(), from_checkout.reference);
    drop(installed);
}

/// `KANDEV_MOCK_AGENT_BIN` still names the agent a run uploads (another architecture's, a
/// patched one): the run records that very file; a path that is no file errors the run, naming
/// the variable and the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn kandev_mock_agent_bin_names_the_agent_a_run_uploads() {
    let engine = FixtureEngine::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("my-agent");
    std::fs::copy(&engine.mock_agent_binary, &agent).unwrap();
    let run = |agent: &Path| {
        let reports = tempfile::tempdir().unwrap();
        let output =
            kandev_test_support::harness_env::harness(env!("CARGO_BIN_EXE_kandev-acceptance"))
                .args(["run", "--exact", "template::grant_rules", "--report"])
                .arg(reports.path())
                .env("KANDEV_ACCEPTANCE_ROOT", common::root())
                .env("KANDEV_MOCK_AGENT_BIN", agent)
                .env_remove("GITHUB_STEP_SUMMARY")
                .env_remove("GITHUB_ACTIONS")
                .output()
                .unwrap();
        let text = common::output_text(&output);
        let (_, report) = common::written_report(reports.path(), &text);
        (output.status.code(), text, report)
    };
    let (code, text, report) = tokio::task::spawn_blocking({
        let agent = agent.clone();
        move || run(&agent)
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{text}");
    let step = report
        .setup
        .iter()
        .find(|s| s.name == "mock_agent_binary")
        .unwrap_or_else(|| panic!("no mock_agent_binary step: {:?}", report.setup));
    assert_eq!(step.evidence["path"], agent.display().to_string());

    let missing = dir.path().join("no-such-agent");
    let (code, text, report) = tokio::task::spawn_blocking({
        let missing = missing.clone();
        move || run(&missing)
    })
    .await
    .unwrap();
    assert_ne!(code, Some(0), "{text}");
    let diagnosis = report.scenarios[0].diagnosis.clone().unwrap_or_default();
    assert!(
        diagnosis.contains(&format!(
            "KANDEV_MOCK_AGENT_BIN={} is not a file",
            missing.display()
        )) && diagnosis.contains("fix:"),
        "{diagnosis}\n{text}"
    );
}
