//! The reports people read and compare, end to end: `report.html` opened in Debian's headless
//! Chromium (the rendered DOM must show every scenario row with its outcome, its checks and
//! the browser's screenshot; a screenshot of the rendered report is kept under
//! `target/report-html/`), the GitHub step summary and annotations of a real run, and
//! `report diff` on real reports (a good run, a run with a broken fixture, an old report), and
//! the resources a real run's Pods used.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{fixture, only, root};
use kandev_report::{
    CheckKind, CheckOutcome, CheckReport, Outcome, Report, ScenarioReport, StepOutcome, StepReport,
    Summary,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_kandev-acceptance");

/// Where the rendered reports' screenshots are kept.
fn artefacts() -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
        .join("report-html");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Chromium, headless, with nothing fetched: `extra` then the page.
fn chromium(page: &Path, extra: &[String]) -> std::process::Output {
    chromium_at(&format!("file://{}", page.display()), extra)
}

/// Chromium, headless, with nothing fetched: `extra` then `url`.
fn chromium_at(url: &str, extra: &[String]) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    let output = Command::new("timeout")
        .arg("120")
        .arg("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .output()
        .expect("run chromium (bash harness/scripts/ensure-test-deps.sh installs it)");
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The DOM Chromium rendered from `html`, and a screenshot of it kept as `target/report-html/<name>`.
fn render(html: &Path, name: &str) -> String {
    let dom = String::from_utf8(chromium(html, &["--dump-dom".into()]).stdout).unwrap();
    let shot = artefacts().join(name);
    let _ = std::fs::remove_file(&shot);
    chromium(
        html,
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,2000".into(),
        ],
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "screenshot {}",
        shot.display()
    );
    dom
}

/// The DOM Chromium rendered from `html` opened at `#fragment` (the report's filters read it).
fn dom_filtered(html: &Path, fragment: &str) -> String {
    let url = format!("file://{}#{fragment}", html.display());
    String::from_utf8(chromium_at(&url, &["--dump-dom".into()]).stdout).unwrap()
}

/// The opening tag of the scenario row (`<details>`) or check row (`<tr>`) whose attributes
/// contain `marker` (the timeline's lanes carry `data-scenario` too).
fn tag_with<'a>(dom: &'a str, marker: &str) -> &'a str {
    dom.match_indices(marker)
        .map(|(at, _)| {
            let start = dom[..at].rfind('<').unwrap();
            let end = at + dom[at..].find('>').unwrap();
            &dom[start..=end]
        })
        .find(|tag| tag.starts_with("<details") || tag.starts_with("<tr"))
        .unwrap_or_else(|| panic!("no row with {marker} in the DOM"))
}

/// Whether the element whose attributes contain `marker` is hidden by the filters.
fn hidden(dom: &str, marker: &str) -> bool {
    tag_with(dom, marker).contains(" hidden")
}

/// Every scenario of `report` has a row with its outcome, and every check its row.
fn assert_rows(dom: &str, report: &Report) {
    assert_eq!(
        dom.matches("<details class=\"scenario\"").count(),
        report.scenarios.len(),
        "{dom}"
    );
    for s in &report.scenarios {
        let class = serde_json::to_value(s.outcome).unwrap();
        let row = format!(
            "data-scenario=\"{}\" data-outcome=\"{}\"",
            s.name,
            class.as_str().unwrap()
        );
        assert!(dom.contains(&row), "no row {row}");
        for c in &s.checks {
            let class = serde_json::to_value(c.outcome).unwrap();
            let check = format!(
                "data-check=\"{}\" data-kind=\"{}\" data-outcome=\"{}\"",
                c.id,
                c.kind.as_str(),
                class.as_str().unwrap()
            );
            assert!(dom.contains(&check), "no check row {check}");
        }
    }
}

/// A 1×1 PNG.
const PIXEL: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x02, 0x00, 0x00, 0x00, 0x90, 0x77, 0x53,
    0xde, 0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x08, 0xd7, 0x63, 0x28, 0x4b, 0xd3, 0x00,
    0x00, 0x02, 0x2c, 0x01, 0x3d, 0xd6, 0x9f, 0x2d, 0x9d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e,
    0x44, 0xae, 0x42, 0x60, 0x82,
];

fn assembled_scenario(name: &str, outcome: Outcome, diagnosis: Option<&str>) -> ScenarioReport {
    let judged = |first| CheckReport {
        id: format!("{name}/{first}"),
        promise: "a promise".into(),
        kind: Default::default(),
        outcome: if outcome == Outcome::Passed {
            CheckOutcome::Passed
        } else {
            CheckOutcome::Failed
        },
        reason: None,
        lacking: None,
        twin: "fixtures/templates/broken/agent-readonly-rootfs.yaml".into(),
    };
    ScenarioReport {
        name: name.into(),
        promise: "the promise".into(),
        outcome,
        diagnosis: diagnosis.map(str::to_owned),
        checks: vec![judged("first")],
        lacking: None,
        started_at: "2026-11-29T00:00:05.000Z".into(),
        duration_ms: 9_000,
        steps: vec![StepReport {
            name: "launch".into(),
            outcome: StepOutcome::Passed,
            offset_ms: 0,
            duration_ms: 3_000,
            evidence: Value::Null,
            error: None,
        }],
        findings: Vec::new(),
        sessions: Vec::new(),
        cleanup: Vec::new(),
        resources: None,
        calls: Default::default(),
        artifacts: Vec::new(),
        attempts: 1,
        flaky: false,
        previous_attempts: Vec::new(),
        nested_inventory: Vec::new(),
        leaks: Vec::new(),
    }
}

/// A report of `scenarios` as a local run writes it, its environment empty.
fn assembled_report(scenarios: Vec<ScenarioReport>) -> Report {
    Report {
        schema_version: kandev_report::SCHEMA_VERSION,
        run_id: "assembled".into(),
        harness_version: "0.1.0".into(),
        started_at: "2026-11-29T00:00:00.000Z".into(),
        finished_at: "2026-11-29T00:00:20.000Z".into(),
        duration_ms: 20_000,
        interrupted: false,
        deadline_exceeded: false,
        backend: "local".into(),
        gate: Default::default(),
        environment: Default::default(),
        configuration: Default::default(),
        summary: Summary::of(&scenarios),
        setup: Vec::new(),
        scenarios,
        leftovers: Vec::new(),
        teardown: Vec::new(),
        cost: None,
        selection: None,
        verdict: None,
    }
}

#[test]
#[ignore = "needs Debian's chromium: bash harness/scripts/ensure-test-deps.sh, then cargo test --workspace -- --include-ignored"]
fn an_assembled_report_renders_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("browser-launch")).unwrap();
    std::fs::write(dir.path().join("browser-launch/screenshot.png"), PIXEL).unwrap();
    let mut browser = assembled_scenario("browser::launch", Outcome::Passed, None);
    browser.steps[0].evidence = json!({"screenshot": "browser-launch/screenshot.png"});
    let nasty = "x::y/first: <img src=x onerror=alert(1)> & \u{1b}[31m\u{0} </details>";
    // A passed scenario with a mirror check and a check it could not judge.
    let mut unjudged = assembled_scenario("u::v", Outcome::Passed, None);
    unjudged.checks.push(CheckReport {
        id: "u::v/unseen".into(),
        promise: "the node shows it".into(),
        kind: CheckKind::Mirror,
        outcome: CheckOutcome::NotJudged,
        reason: Some("no node view on this backend".into()),
        lacking: None,
        twin: "mirror: none".into(),
    });
    let scenarios = vec![
        browser,
        assembled_scenario("x::y", Outcome::Failed, Some(nasty)),
        assembled_scenario("c::skips", Outcome::Incompatible, Some("no browser")),
        unjudged,
    ];
    let report = assembled_report(scenarios);
    let json = dir.path().join("report.json");
    kandev_report::write(&report, &json).unwrap();
    let out = kandev_test_support::harness_env::harness(BIN)
        .args(["report", "show", "--html"])
        .arg(&json)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let dom = render(&dir.path().join("report.html"), "assembled.png");
    assert_rows(&dom, &report);
    assert_eq!(
        dom.matches("<img ").count(),
        1,
        "only the screenshot: the diagnosis's markup stays text"
    );
    assert!(dom.contains("src=\"data:image/png;base64,"), "{dom}");
    assert!(dom.contains(
        "&lt;img src=x onerror=alert(1)&gt; &amp; \\u{001b}[31m\\u{0000} &lt;/details&gt;"
    ));
    assert!(dom.contains(
        "4 system checks (4 judged against the system, 0 not judged), 4 with a twin; 1 mirror checks"
    ));
    assert!(
        dom.contains("not judged: no node view on this backend"),
        "the reason is shown"
    );
    // Nothing filtered: every row shown, and the count says so.
    assert!(!hidden(&dom, "data-scenario=\"c::skips\""), "{dom}");
    assert!(dom.contains("4 of 4 scenarios, 5 checks shown"), "{dom}");

    // Filtered by outcome (a check's): only the scenario with a check not judged, only that
    // check; the view is linkable through the fragment.
    let html = dir.path().join("report.html");
    let dom = dom_filtered(&html, "outcome=not_judged");
    assert!(!hidden(&dom, "data-check=\"u::v/unseen\""), "{dom}");
    assert!(hidden(&dom, "data-check=\"u::v/first\""), "{dom}");
    for other in ["browser::launch", "x::y", "c::skips"] {
        assert!(
            hidden(&dom, &format!("data-scenario=\"{other}\"")),
            "{other} is filtered out: {}",
            tag_with(&dom, &format!("data-scenario=\"{other}\""))
        );
    }
    assert!(
        tag_with(&dom, "data-scenario=\"u::v\"").contains(" open"),
        "a matching scenario opens"
    );
    assert!(dom.contains("1 of 4 scenarios, 1 checks shown"), "{dom}");
    // By outcome (a scenario's): the failed one with its checks.
    let dom = dom_filtered(&html, "outcome=failed");
    assert!(!hidden(&dom, "data-scenario=\"x::y\""), "{dom}");
    assert!(hidden(&dom, "data-scenario=\"u::v\""), "{dom}");
    // By kind: only the scenario with a mirror check.
    let dom = dom_filtered(&html, "kind=mirror");
    assert!(!hidden(&dom, "data-scenario=\"u::v\""), "{dom}");
    assert!(hidden(&dom, "data-check=\"u::v/first\""), "{dom}");
    assert!(hidden(&dom, "data-scenario=\"x::y\""), "{dom}");
    // A search matches check ids, promises and reasons, case-insensitively.
    let dom = dom_filtered(&html, "q=NODE%20VIEW");
    assert!(dom.contains("1 of 4 scenarios, 1 checks shown"), "{dom}");
    assert!(!hidden(&dom, "data-check=\"u::v/unseen\""), "{dom}");
    let dom = dom_filtered(&html, "q=x%3A%3Ay%2Ffirst");
    assert!(!hidden(&dom, "data-check=\"x::y/first\""), "{dom}");
    assert!(hidden(&dom, "data-scenario=\"browser::launch\""), "{dom}");
    // A search nothing matches shows nothing, and says so.
    let dom = dom_filtered(&html, "q=no-such-check");
    assert!(dom.contains("0 of 4 scenarios, 0 checks shown"), "{dom}");
}

/// Where Chromium laid `html` out in a window `width` px wide: the page's own script is
/// followed by one that writes the measures into the DOM it dumps (`data-*` of `<body>`).
fn layout(html: &Path, width: u32) -> std::collections::BTreeMap<String, i64> {
    const MEASURE: &str = r#"<script>document.addEventListener('DOMContentLoaded',function(){
var b=document.body,d=document.documentElement;
function right(id){var e=document.getElementById(id);return e?Math.ceil(e.getBoundingClientRect().right):-1;}
function top(id){var e=document.getElementById(id);return e?Math.round(e.getBoundingClientRect().top+window.scrollY):-1;}
b.setAttribute('data-scroll-width',d.scrollWidth);b.setAttribute('data-client-width',d.clientWidth);
b.setAttribute('data-images-right',right('images'));b.setAttribute('data-environment-right',right('environment'));
b.setAttribute('data-scenarios-top',top('scenarios'));b.setAttribute('data-timeline-top',top('timeline-section'));
b.setAttribute('data-environment-top',top('environment-section'));});</script>"#;
    let page = html.with_file_name("measured.html");
    let text = std::fs::read_to_string(html).unwrap();
    std::fs::write(&page, text.replace("</body>", &format!("{MEASURE}</body>"))).unwrap();
    let dom = String::from_utf8(
        chromium(
            &page,
            &["--dump-dom".into(), format!("--window-size={width},1000")],
        )
        .stdout,
    )
    .unwrap();
    let body = tag_of(&dom, "<body");
    body.split_whitespace()
        .filter_map(|attribute| attribute.strip_prefix("data-"))
        .filter_map(|pair| pair.trim_end_matches('>').split_once('='))
        .map(|(name, value)| (name.to_owned(), value.trim_matches('"').parse().unwrap()))
        .collect()
}

/// The opening tag that starts with `start`.
fn tag_of<'a>(dom: &'a str, start: &str) -> &'a str {
    let at = dom
        .find(start)
        .unwrap_or_else(|| panic!("no {start} in {dom}"));
    &dom[at..=at + dom[at..].find('>').unwrap()]
}

/// The report people open: the scenarios right after the verdict and the counts, the
/// environment and the images after them, and nothing wider than a 1400-px window, even with
/// an operator's long registry references and digests in the Images table.
#[test]
#[ignore = "needs Debian's chromium: bash harness/scripts/ensure-test-deps.sh, then cargo test --workspace -- --include-ignored"]
fn the_report_shows_the_scenarios_first_and_fits_1400_px() {
    let dir = tempfile::tempdir().unwrap();
    let scenarios = (0..6)
        .map(|i| assembled_scenario(&format!("s::n{i}"), Outcome::Passed, None))
        .collect();
    let mut report = assembled_report(scenarios);
    let digest = |c: char| format!("sha256:{}", c.to_string().repeat(64));
    let long = |role: &str| {
        format!(
            "registry.internal.example.com:5000/platform-engineering/kandev/{role}-with-the-team-toolchain-and-language-servers:2026.12.06-build.48213@{}",
            digest('e')
        )
    };
    report.environment.images = ["worker", "daemon", "mock-agent", "harness"]
        .iter()
        .map(|role| kandev_report::ImageRecord {
            role: (*role).into(),
            reference: long(role),
            id: Some(digest('a')),
            built: false,
            ran: vec![
                kandev_report::RanImage {
                    image: long(role),
                    image_id: long(role),
                    containers: 12,
                },
                kandev_report::RanImage {
                    image: format!("docker.io/library/{role}:latest"),
                    image_id: format!("docker-pullable://docker.io/library/{role}@{}", digest('b')),
                    containers: 1,
                },
            ],
        })
        .collect();
    report.environment.kernel = Some(format!("6.1.0-{}-cloud-amd64", "9".repeat(80)));
    let json = dir.path().join("report.json");
    kandev_report::write(&report, &json).unwrap();
    let out = kandev_test_support::harness_env::harness(BIN)
        .args(["report", "show", "--html"])
        .arg(&json)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let html = dir.path().join("report.html");
    render(&html, "wide-values.png");
    let at = layout(&html, 1400);
    for measure in [
        "scroll-width",
        "client-width",
        "images-right",
        "environment-right",
        "scenarios-top",
        "timeline-top",
        "environment-top",
    ] {
        assert!(at.get(measure).is_some_and(|v| *v > 0), "{measure}: {at:?}");
    }
    assert!(at["client-width"] <= 1400, "{at:?}");
    assert!(
        at["scroll-width"] <= at["client-width"],
        "the page is wider than a 1400-px window: {at:?}"
    );
    for table in ["images-right", "environment-right"] {
        assert!(at[table] <= at["client-width"], "{table}: {at:?}");
    }
    assert!(
        at["scenarios-top"] < at["timeline-top"] && at["timeline-top"] < at["environment-top"],
        "the scenarios come first: {at:?}"
    );
}

/// `kandev-acceptance` with `args`, its exit code and stdout.
fn harness(args: &[&str]) -> (i32, String) {
    let out = kandev_test_support::harness_env::harness(BIN)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// A run into `dir`, under GitHub Actions' conventions (step summary into `summary`).
fn github_run(dir: &Path, summary: &Path, args: &[String]) -> (i32, String, PathBuf) {
    let out = kandev_test_support::harness_env::harness(BIN)
        .arg("run")
        .arg("--report")
        .arg(dir)
        .args(args)
        .env("KANDEV_ACCEPTANCE_ROOT", root())
        .env("GITHUB_STEP_SUMMARY", summary)
        .env("GITHUB_ACTIONS", "true")
        .output()
        .unwrap();
    let run_dir = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .find(|e| e.path().join("report.json").is_file())
        .unwrap_or_else(|| panic!("no report: {}", String::from_utf8_lossy(&out.stderr)))
        .path();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        run_dir.join("report.json"),
    )
}

#[test]
#[ignore = "needs a Docker engine and Debian's chromium: bash harness/scripts/ensure-test-deps.sh, then cargo test --workspace -- --include-ignored"]
fn real_runs_render_summarize_and_diff() {
    let started = std::time::Instant::now();
    let scratch = tempfile::tempdir().unwrap();
    let summary = scratch.path().join("step-summary.md");

    // A good run of two scenarios: its report.html renders with the browser's screenshot.
    let good_dir = scratch.path().join("good");
    let (code, stdout, good) = github_run(
        &good_dir,
        &summary,
        &only(&["browser::launch", "image::build_run"]),
    );
    let report: Report = serde_json::from_slice(&std::fs::read(&good).unwrap()).unwrap();
    assert_eq!(code, 0, "{stdout}");
    assert!(!stdout.contains("::error"), "{stdout}");
    let html = good.with_file_name("report.html");
    let dom = render(&html, "real-run.png");
    assert_rows(&dom, &report);
    assert!(
        dom.contains("<img src=\"data:image/png;base64,iVBORw0KGgo"),
        "the browser's screenshot is embedded"
    );
    assert!(
        good.with_file_name("browser-launch/screenshot.png")
            .is_file()
    );
    // What the Pods consumed, from their cgroups through the node view.
    for s in &report.scenarios {
        let used = s
            .resources
            .clone()
            .unwrap_or_else(|| panic!("{} has no resources", s.name));
        assert!(used.pods >= 1 && used.cpu_ms > 0, "{}: {used:?}", s.name);
        assert!(
            used.memory_peak_bytes.is_some_and(|b| b > 1 << 20),
            "{}: {used:?}",
            s.name
        );
    }
    assert!(report.summary.resources.is_some());
    assert!(
        dom.contains("<p id=\"resources\">Resources of "),
        "resources in the summary"
    );

    // The same scenario with a broken fixture: failed, annotated, summarized.
    let bad_dir = scratch.path().join("bad");
    let mut args = vec![
        "--template".to_owned(),
        fixture("templates/broken/agent-readonly-rootfs.yaml"),
    ];
    args.extend(only(&["browser::launch"]));
    let (code, stdout, bad) = github_run(&bad_dir, &summary, &args);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.lines().any(|l| l
            .starts_with("::error title=browser%3A%3Alaunch/renders::browser::launch/renders: ")),
        "{stdout}"
    );
    let md = std::fs::read_to_string(&summary).unwrap();
    assert_eq!(md.matches("### kandev-acceptance run").count(), 2, "{md}");
    assert!(md.contains("| `browser::launch` | ❌ failed |"), "{md}");
    assert!(
        md.contains("failed check `browser::launch/renders`"),
        "{md}"
    );
    let bad_report: Report = serde_json::from_slice(&std::fs::read(&bad).unwrap()).unwrap();
    let dom = render(&bad.with_file_name("report.html"), "real-run-failed.png");
    assert_rows(&dom, &bad_report);

    // report diff: good -> bad regressed (exit 1), bad -> good fixed (0), good -> good (0).
    let (g, b) = (good.to_str().unwrap(), bad.to_str().unwrap());
    let (code, text) = harness(&["report", "diff", g, b]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("REGRESSED"), "{text}");
    assert!(text.contains("newly failing (1):"), "{text}");
    assert!(
        text.contains("system checks whose outcome changed (2):\n  browser::launch/renders                  system passed -> failed"),
        "{text}"
    );
    assert!(text.contains("template digest: "), "{text}");
    assert!(
        text.contains("no longer run (1):\n  image::build_run"),
        "{text}"
    );
    let (code, json) = harness(&["report", "diff", g, b, "--format", "json"]);
    assert_eq!(code, 1);
    let v: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["regressed"], true);
    assert_eq!(v["newly_failing"][0]["scenario"], "browser::launch");
    assert_eq!(v["newly_failing"][0]["new"], "failed");
    let (code, text) = harness(&["report", "diff", b, g]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("fixed (1):"), "{text}");
    let (code, text) = harness(&["report", "diff", g, g]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(text.lines().count(), 1, "nothing changed: {text}");

    // A report written before checks and gates existed is still read, shown and compared.
    let mut old: Value = serde_json::from_slice(&std::fs::read(&good).unwrap()).unwrap();
    old.as_object_mut().unwrap().remove("gate");
    old["summary"].as_object_mut().unwrap().remove("checks");
    for s in old["scenarios"].as_array_mut().unwrap() {
        let s = s.as_object_mut().unwrap();
        s.remove("checks");
        s.remove("lacking");
    }
    let old_path = scratch.path().join("old/report.json");
    std::fs::create_dir_all(old_path.parent().unwrap()).unwrap();
    std::fs::write(&old_path, serde_json::to_vec(&old).unwrap()).unwrap();
    let o = old_path.to_str().unwrap();
    let (code, text) = harness(&["report", "diff", o, b]);
    assert_eq!(
        code, 1,
        "a scenario newly failing regresses without checks: {text}"
    );
    assert!(!text.contains("checks whose outcome changed"), "{text}");
    let (code, text) = harness(&["report", "diff", o, g]);
    assert_eq!(code, 0, "{text}");
    let (code, text) = harness(&["report", "show", "--html", o]);
    assert_eq!(code, 0, "{text}");
    assert!(old_path.with_file_name("report.html").is_file());
    let (code, _) = harness(&["report", "diff", o, "/nonexistent/report.json"]);
    assert_eq!(code, 2, "unreadable input is a usage error");
    eprintln!(
        "real_runs_render_summarize_and_diff: {:.0} s",
        started.elapsed().as_secs_f64()
    );
}
