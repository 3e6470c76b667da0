//! `report.html`: the run for people, one self-contained file beside `report.json`.
//!
//! A summary (environment, images, template, gate, counts, what the exit code means), a
//! timeline (inline SVG: scenarios as bars on the run's time axis, their steps and launch
//! stages inside), and one row per scenario that expands to its checks, steps, findings,
//! sessions, cleanup records and evidence files. Inline CSS and a few lines of inline script;
//! nothing is fetched. PNG evidence (the browser scenario's screenshot) is embedded as a
//! `data:` URI when the file is beside the report, and linked relatively either way. Every
//! text from the report is escaped: diagnoses carry arbitrary bytes.

use super::{
    CheckOutcome, CleanupOutcome, CleanupRecord, FindingLevel, Outcome, Report, ScenarioReport,
    StepOutcome, StepReport, exit,
};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Component, Path};

/// The largest PNG embedded (larger ones are only linked).
const MAX_EMBEDDED_BYTES: u64 = 4 << 20;

/// Text for HTML content and attribute values: `& < > " '` as references, and the
/// characters HTML does not allow in a document (controls other than tab and newline,
/// noncharacters) as visible `\u{..}`.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' | '\t' => out.push(c),
            c if c.is_control() || is_noncharacter(c) => {
                let _ = write!(out, "\\u{{{:04x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

fn is_noncharacter(c: char) -> bool {
    let n = c as u32;
    (0xFDD0..=0xFDEF).contains(&n) || (n & 0xFFFE) == 0xFFFE
}

/// A relative path as an `href`: each segment percent-encoded where URLs need it.
fn href(relative: &str) -> String {
    let mut out = String::new();
    for b in relative.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

/// Standard base64 with padding (for `data:` URIs).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn secs(ms: u64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

fn or_dash(value: Option<impl ToString>) -> String {
    value.map(|v| v.to_string()).unwrap_or_else(|| "—".into())
}

/// The CSS class of an outcome (its `snake_case` name).
fn outcome_class(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Passed => "passed",
        Outcome::Failed => "failed",
        Outcome::Errored => "errored",
        Outcome::TimedOut => "timed_out",
        Outcome::Cancelled => "cancelled",
        Outcome::Skipped => "skipped",
        Outcome::Incompatible => "incompatible",
        Outcome::Leaked => "leaked",
    }
}

fn check_class(outcome: CheckOutcome) -> &'static str {
    match outcome {
        CheckOutcome::Passed => "passed",
        CheckOutcome::Failed => "failed",
        CheckOutcome::NotReached => "not_reached",
    }
}

fn step_class(outcome: StepOutcome) -> &'static str {
    match outcome {
        StepOutcome::Passed => "passed",
        StepOutcome::Failed => "failed",
        StepOutcome::Errored => "errored",
        StepOutcome::Incompatible => "incompatible",
    }
}

fn badge(class: &str, text: &str) -> String {
    format!(
        "<span class=\"badge {}\">{}</span>",
        escape(class),
        escape(text)
    )
}

/// Whether the run was told to keep Pods (`--keep`), which excuses its leftovers.
pub(crate) fn kept(report: &Report) -> bool {
    report
        .configuration
        .settings
        .get("keep")
        .and_then(Value::as_str)
        .is_some_and(|k| k != "never")
}

/// A relative path inside the report's folder (no `..`, not absolute).
fn inside(relative: &str) -> bool {
    let path = Path::new(relative);
    !relative.is_empty()
        && path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The PNG files a scenario kept: its artifacts ending in `.png`, and string evidence of its
/// steps under a `screenshot` key.
pub fn screenshots(s: &ScenarioReport) -> Vec<String> {
    let mut found: Vec<String> = s
        .artifacts
        .iter()
        .filter(|a| a.ends_with(".png"))
        .cloned()
        .collect();
    for step in &s.steps {
        if let Some(path) = step.evidence.get("screenshot").and_then(Value::as_str)
            && path.ends_with(".png")
            && !found.iter().any(|f| f == path)
        {
            found.push(path.to_owned());
        }
    }
    found.retain(|p| inside(p));
    found
}

/// `<img>` for a PNG of the report's folder: embedded when readable there, linked otherwise.
fn image(folder: Option<&Path>, relative: &str, alt: &str) -> String {
    let embedded = folder
        .map(|f| f.join(relative))
        .filter(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() <= MAX_EMBEDDED_BYTES)
        })
        .and_then(|p| std::fs::read(p).ok())
        .filter(|bytes| bytes.starts_with(b"\x89PNG\r\n\x1a\n"))
        .map(|bytes| format!("data:image/png;base64,{}", base64(&bytes)));
    let src = embedded.unwrap_or_else(|| href(relative));
    format!(
        "<figure class=\"screenshot\"><a href=\"{link}\"><img src=\"{src}\" alt=\"{alt}\" data-path=\"{path}\"></a><figcaption>{path}</figcaption></figure>",
        link = href(relative),
        alt = escape(alt),
        path = escape(relative),
    )
}

const STYLE: &str = r#"
:root{--passed:#1a7f37;--failed:#cf222e;--errored:#bc4c00;--timed_out:#cf222e;--cancelled:#6e7781;--skipped:#6e7781;--incompatible:#8250df;--leaked:#9a6700;--not_reached:#6e7781}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1200px;padding:16px 24px;color:#1f2328;background:#fff}
h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:22px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}h3{font-size:14px;margin:12px 0 4px}
table{border-collapse:collapse;margin:4px 0 8px}th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f6f8fa}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px}pre{white-space:pre-wrap;word-break:break-word;margin:0}
.badge{display:inline-block;min-width:64px;text-align:center;border-radius:10px;padding:0 8px;color:#fff;font-size:12px;font-weight:600;background:#6e7781}
.badge.passed{background:var(--passed)}.badge.failed,.badge.timed_out{background:var(--failed)}.badge.errored{background:var(--errored)}.badge.leaked{background:var(--leaked)}.badge.incompatible{background:var(--incompatible)}
.counts span{margin-right:12px}.verdict{font-size:15px;font-weight:600;padding:6px 10px;border-radius:6px;display:inline-block}.verdict.ok{background:#dafbe1}.verdict.bad{background:#ffebe9}
details.scenario{border:1px solid #d0d7de;border-radius:6px;margin:4px 0}details.scenario>summary{display:grid;grid-template-columns:90px 260px 70px 1fr;gap:8px;padding:6px 8px;cursor:pointer;align-items:start}
details.scenario[open]>summary{background:#f6f8fa;border-bottom:1px solid #d0d7de}details.scenario>div{padding:4px 12px 10px}
.diagnosis{color:#57606a;overflow-wrap:anywhere}.promise{font-style:italic}.duration{text-align:right}
figure.screenshot img{max-width:640px;border:1px solid #d0d7de}figure.screenshot{margin:8px 0}
svg.timeline text{font:11px system-ui,sans-serif;fill:#1f2328}svg.timeline .axis{stroke:#d0d7de}
.toolbar button{margin-right:6px}
"#;

const SCRIPT: &str = r#"
function setAll(open){document.querySelectorAll('details.scenario').forEach(function(d){d.open=open;});}
"#;

/// The HTML report of `report`; `folder` is where `report.json` is (for embedding PNGs).
pub fn render(report: &Report, folder: Option<&Path>) -> String {
    let mut h = String::with_capacity(64 * 1024);
    let code = exit::exit_code(report, kept(report));
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>kandev-acceptance {}</title>\n<style>{STYLE}</style>\n<script>{SCRIPT}</script>\n</head>\n<body>\n",
        escape(&report.run_id)
    );
    let _ = writeln!(
        h,
        "<h1>kandev-acceptance run <span id=\"run-id\" class=\"mono\">{}</span> on {}</h1>",
        escape(&report.run_id),
        escape(&report.backend)
    );
    let ok = code == exit::SUCCESS;
    let _ = writeln!(
        h,
        "<p><span id=\"verdict\" class=\"verdict {}\" data-exit-code=\"{code}\">exit code {code}: {}</span></p>",
        if ok { "ok" } else { "bad" },
        escape(exit::meaning(code))
    );
    summary(&mut h, report);
    timeline(&mut h, report);
    pictures(&mut h, report, folder);
    scenarios(&mut h, report);
    run_level(&mut h, report);
    let _ = write!(
        h,
        "<footer><p>Written by kandev-acceptance {} from report.json (schema {}).</p></footer>\n</body>\n</html>\n",
        escape(&report.harness_version),
        report.schema_version
    );
    h
}

fn summary(h: &mut String, report: &Report) {
    let s = &report.summary;
    h.push_str("<section id=\"summary\">\n<h2>Summary</h2>\n<p class=\"counts\">");
    let _ = write!(
        h,
        "<span id=\"scenario-count\">{} scenarios:</span>",
        s.total
    );
    for (class, label, n) in [
        ("passed", "passed", s.passed),
        ("failed", "failed", s.failed),
        ("leaked", "leaked", s.leaked),
        ("errored", "errored", s.errored),
        ("timed_out", "timed out", s.timed_out),
        ("cancelled", "cancelled", s.cancelled),
        ("skipped", "skipped", s.skipped),
        ("incompatible", "incompatible", s.incompatible),
        ("passed", "flaky", s.flaky),
    ] {
        if n > 0 || label == "passed" || label == "failed" {
            let _ = write!(h, "<span>{} {n}</span>", badge(class, label));
        }
    }
    let c = &s.checks;
    let _ = write!(
        h,
        "</p>\n<p id=\"check-count\">{}: {} passed ({} system, {} mirror), {} failed, {} not reached. System checks can be broken by the cluster, template, images or prepare script; mirror checks only by the harness's mirror of Kandev, so they say nothing of the system.</p>\n",
        c.kinds_line(),
        c.passed,
        c.system.passed,
        c.mirror.passed,
        c.failed,
        c.not_reached
    );
    if let Some(used) = &s.resources {
        let _ = writeln!(
            h,
            "<p id=\"resources\">Resources of {} Pods: {} (CPU summed over the scenarios, memory the largest scenario's peak)</p>",
            used.pods,
            escape(&used.describe())
        );
    }
    if let Some(cost) = &report.cost {
        let _ = writeln!(
            h,
            "<p id=\"cost\">Cost of the run itself: {}</p>",
            escape(&super::cost::console_line(cost))
        );
    }
    if report.interrupted {
        h.push_str("<p class=\"verdict bad\">The run was interrupted before every scenario finished.</p>\n");
    }
    if report.deadline_exceeded {
        h.push_str("<p class=\"verdict bad\">The run's --deadline passed before every scenario finished.</p>\n");
    }
    let e = &report.environment;
    let gate = &report.gate;
    let requires = if gate.requires.is_empty() {
        "nothing".to_owned()
    } else {
        gate.requires
            .iter()
            .map(|c| c.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let cgroup = match (e.cgroup_version, &e.cgroup_driver) {
        (Some(v), Some(d)) => format!("v{v} ({d})"),
        (Some(v), None) => format!("v{v}"),
        (None, _) => "—".into(),
    };
    h.push_str("<table id=\"environment\">\n");
    for (name, value) in [
        ("run id", report.run_id.clone()),
        ("backend", report.backend.clone()),
        ("harness", report.harness_version.clone()),
        ("started", report.started_at.clone()),
        ("finished", report.finished_at.clone()),
        ("duration", secs(report.duration_ms)),
        (
            "engine",
            match (&e.engine_version, &e.engine_api_version) {
                (Some(v), Some(api)) => format!("{v} (API {api})"),
                (v, _) => or_dash(v.as_ref()),
            },
        ),
        ("kubernetes", or_dash(e.kubernetes_version.as_ref())),
        ("kernel", or_dash(e.kernel.as_ref())),
        ("operating system", or_dash(e.operating_system.as_ref())),
        ("architecture", or_dash(e.architecture.as_ref())),
        ("cgroup", cgroup),
        ("node MTU", or_dash(e.node_mtu)),
        (
            "template",
            e.template
                .as_ref()
                .map(|t| match &t.source_sha256 {
                    Some(file) => format!("{} (file {file}, rendered {})", t.path, t.sha256),
                    None => format!("{} {}", t.path, t.sha256),
                })
                .unwrap_or_else(|| "—".into()),
        ),
        (
            "gate",
            if gate.source.is_empty() {
                format!("{} profile, requires {requires}", gate.profile.name())
            } else {
                format!(
                    "{} profile, requires {requires} ({})",
                    gate.profile.name(),
                    gate.source
                )
            },
        ),
        ("configuration", report.configuration.sha256.clone()),
    ] {
        let _ = writeln!(
            h,
            "<tr><th>{}</th><td class=\"mono\">{}</td></tr>",
            escape(name),
            escape(&value)
        );
    }
    h.push_str("</table>\n");
    if !e.images.is_empty() {
        h.push_str("<h3>Images</h3>\n<table id=\"images\"><tr><th>role</th><th>reference</th><th>id</th><th>built by this run</th></tr>\n");
        for image in &e.images {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td class=\"mono\">{}</td><td class=\"mono\">{}</td><td>{}</td></tr>",
                escape(&image.role),
                escape(&image.reference),
                escape(&or_dash(image.id.as_ref())),
                if image.built { "built" } else { "reused" }
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("</section>\n");
}

/// Milliseconds from the run's start to the scenario's.
fn scenario_offset(report: &Report, s: &ScenarioReport) -> u64 {
    match (
        super::unix_ms(&report.started_at),
        super::unix_ms(&s.started_at),
    ) {
        (Some(run), Some(scenario)) => scenario.saturating_sub(run),
        _ => 0,
    }
}

/// Each session's launch stages as (name, offset from the scenario's start, duration): laid
/// out one after the other from the start of the step that launched the session (its
/// `launch_stages_ms` evidence), or else from the n-th step whose name mentions `launch`; cut
/// at the scenario's end.
fn launch_stages(s: &ScenarioReport) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    for st in &s.steps {
        let Some(launched) = st
            .evidence
            .get("launch_stages_ms")
            .and_then(Value::as_array)
        else {
            continue;
        };
        let mut at = st.offset_ms;
        for session in launched {
            for pair in session
                .get("stages_ms")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let (Some(stage), Some(ms)) = (
                    pair.get(0).and_then(Value::as_str),
                    pair.get(1).and_then(Value::as_u64),
                ) {
                    out.push((stage.to_owned(), at, ms));
                    at += ms;
                }
            }
        }
    }
    if out.is_empty() {
        let launches: Vec<&StepReport> = s
            .steps
            .iter()
            .filter(|st| st.name.contains("launch"))
            .collect();
        let mut previous_end = 0;
        for (i, session) in s.sessions.iter().enumerate() {
            let mut at = launches
                .get(i)
                .map(|st| st.offset_ms)
                .unwrap_or(previous_end);
            for (stage, ms) in &session.launch_stages_ms {
                out.push((stage.clone(), at, *ms));
                at += ms;
            }
            previous_end = at;
        }
    }
    out.into_iter()
        .filter(|(_, at, _)| *at < s.duration_ms)
        .map(|(stage, at, ms)| (stage, at, ms.min(s.duration_ms - at)))
        .collect()
}

/// A step of about `span` milliseconds for the time axis: 1, 2 or 5 times a power of ten.
fn tick(span: u64) -> u64 {
    let rough = (span / 8).max(1);
    let mut unit = 1;
    loop {
        for m in [1, 2, 5] {
            if unit * m >= rough {
                return unit * m;
            }
        }
        unit *= 10;
    }
}

fn timeline(h: &mut String, report: &Report) {
    const LEFT: f64 = 220.0;
    const WIDTH: f64 = 1140.0;
    const LANE: f64 = 26.0;
    let setup_end = report
        .setup
        .iter()
        .map(|st| st.offset_ms + st.duration_ms)
        .max()
        .unwrap_or(0);
    let span = report
        .scenarios
        .iter()
        .map(|s| scenario_offset(report, s) + s.duration_ms)
        .chain([report.duration_ms, setup_end])
        .max()
        .unwrap_or(0)
        .max(1);
    let x = |ms: u64| LEFT + (WIDTH - LEFT - 10.0) * ms as f64 / span as f64;
    let w = |ms: u64| ((WIDTH - LEFT - 10.0) * ms as f64 / span as f64).max(1.0);
    let lanes = report.scenarios.len() + usize::from(!report.setup.is_empty());
    let height = 30.0 + LANE * lanes as f64 + 10.0;
    h.push_str("<section id=\"timeline-section\">\n<h2>Timeline</h2>\n<p>Each bar is a scenario on the run's time axis; inside it, its steps (upper half) and its sessions' launch stages (lower half); after its last step come teardown and the leak ledger. Hover for names and times.</p>\n");
    let _ = writeln!(
        h,
        "<svg id=\"timeline\" class=\"timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" role=\"img\" aria-label=\"timeline of the run\">"
    );
    let step = tick(span);
    let mut t = 0;
    while t <= span {
        let _ = writeln!(
            h,
            "<line class=\"axis\" x1=\"{0:.1}\" y1=\"18\" x2=\"{0:.1}\" y2=\"{1:.1}\"/><text x=\"{0:.1}\" y=\"12\" text-anchor=\"middle\">{2}</text>",
            x(t),
            height - 6.0,
            escape(&format!("{}s", t as f64 / 1000.0))
        );
        t += step;
    }
    let mut y = 24.0;
    if !report.setup.is_empty() {
        let _ = writeln!(
            h,
            "<text x=\"4\" y=\"{:.1}\">setup</text>",
            y + LANE / 2.0 + 1.0
        );
        for st in &report.setup {
            let _ = writeln!(
                h,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\" opacity=\"0.7\"><title>{}</title></rect>",
                x(st.offset_ms),
                y + 3.0,
                w(st.duration_ms),
                LANE - 8.0,
                step_colour(st.outcome),
                escape(&format!("setup {}: {}", st.name, secs(st.duration_ms)))
            );
        }
        y += LANE;
    }
    for s in &report.scenarios {
        let start = scenario_offset(report, s);
        let _ = writeln!(
            h,
            "<g class=\"lane\" data-scenario=\"{}\"><text x=\"4\" y=\"{:.1}\">{}</text>",
            escape(&s.name),
            y + LANE / 2.0 + 1.0,
            escape(&s.name)
        );
        let _ = writeln!(
            h,
            "<rect class=\"bar {}\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"3\" fill=\"{}\" fill-opacity=\"0.25\" stroke=\"{}\"><title>{}</title></rect>",
            outcome_class(s.outcome),
            x(start),
            y + 2.0,
            w(s.duration_ms),
            LANE - 6.0,
            outcome_colour(s.outcome),
            outcome_colour(s.outcome),
            escape(&format!(
                "{}: {}, {}",
                s.name,
                s.outcome.as_str(),
                secs(s.duration_ms)
            ))
        );
        for st in &s.steps {
            let _ = writeln!(
                h,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\" opacity=\"0.75\"><title>{}</title></rect>",
                x(start + st.offset_ms),
                y + 4.0,
                w(st.duration_ms),
                (LANE - 10.0) / 2.0,
                step_colour(st.outcome),
                escape(&format!(
                    "step {}: {} at +{}",
                    st.name,
                    secs(st.duration_ms),
                    secs(st.offset_ms)
                ))
            );
        }
        for (i, (stage, at, ms)) in launch_stages(s).into_iter().enumerate() {
            let _ = writeln!(
                h,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}</title></rect>",
                x(start + at),
                y + 4.0 + (LANE - 10.0) / 2.0,
                w(ms),
                (LANE - 10.0) / 2.0,
                ["#0969da", "#54aeff", "#8250df", "#bf8700"][i % 4],
                escape(&format!("launch stage {stage}: {ms} ms"))
            );
        }
        h.push_str("</g>\n");
        y += LANE;
    }
    h.push_str("</svg>\n</section>\n");
}

fn outcome_colour(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Passed => "#1a7f37",
        Outcome::Failed | Outcome::TimedOut => "#cf222e",
        Outcome::Errored => "#bc4c00",
        Outcome::Leaked => "#9a6700",
        Outcome::Incompatible => "#8250df",
        Outcome::Cancelled | Outcome::Skipped => "#6e7781",
    }
}

fn step_colour(outcome: StepOutcome) -> &'static str {
    match outcome {
        StepOutcome::Passed => "#2da44e",
        StepOutcome::Failed => "#cf222e",
        StepOutcome::Errored => "#bc4c00",
        StepOutcome::Incompatible => "#8250df",
    }
}

/// The PNGs scenarios kept (the browser's screenshot), where people see them first.
fn pictures(h: &mut String, report: &Report, folder: Option<&Path>) {
    let shots: Vec<(&ScenarioReport, String)> = report
        .scenarios
        .iter()
        .flat_map(|s| screenshots(s).into_iter().map(move |p| (s, p)))
        .collect();
    if shots.is_empty() {
        return;
    }
    h.push_str("<section id=\"screenshots\">\n<h2>Screenshots</h2>\n");
    for (s, path) in shots {
        let _ = writeln!(
            h,
            "<h3 class=\"mono\">{}</h3>\n{}",
            escape(&s.name),
            image(folder, &path, &format!("screenshot of {}", s.name))
        );
    }
    h.push_str("</section>\n");
}

fn scenarios(h: &mut String, report: &Report) {
    h.push_str("<section id=\"scenarios\">\n<h2>Scenarios</h2>\n<p class=\"toolbar\"><button type=\"button\" onclick=\"setAll(true)\">expand all</button><button type=\"button\" onclick=\"setAll(false)\">collapse all</button></p>\n");
    for s in &report.scenarios {
        scenario(h, s);
    }
    h.push_str("</section>\n");
}

fn scenario(h: &mut String, s: &ScenarioReport) {
    let class = outcome_class(s.outcome);
    let diagnosis = s.diagnosis.as_deref().unwrap_or("");
    let flaky = if s.flaky {
        format!(" (flaky: passed on attempt {})", s.attempts)
    } else {
        String::new()
    };
    let noteworthy = s
        .findings
        .iter()
        .filter(|f| f.level != FindingLevel::Info)
        .count();
    let warnings = match noteworthy {
        0 => String::new(),
        1 => " (1 finding)".to_owned(),
        n => format!(" ({n} findings)"),
    };
    let _ = writeln!(
        h,
        "<details class=\"scenario\" id=\"scenario-{id}\" data-scenario=\"{name}\" data-outcome=\"{class}\"{open}>\n<summary><span class=\"outcome\">{badge}</span><span class=\"name mono\">{name}</span><span class=\"duration\">{duration}</span><span class=\"diagnosis\">{diagnosis}{flaky}</span></summary>\n<div>",
        id = escape(&s.name.replace("::", "-")),
        name = escape(&s.name),
        open = if s.outcome.is_acceptable() {
            ""
        } else {
            " open"
        },
        badge = badge(class, s.outcome.as_str()),
        duration = match &s.resources {
            Some(used) => format!(
                "{}<br><small title=\"CPU time of its Pods\">{} CPU</small>",
                secs(s.duration_ms),
                secs(used.cpu_ms)
            ),
            None => secs(s.duration_ms),
        },
        diagnosis = escape(diagnosis),
        flaky = escape(&(flaky + &warnings)),
    );
    let _ = writeln!(h, "<p class=\"promise\">{}</p>", escape(&s.promise));
    if let Some(used) = &s.resources {
        let _ = writeln!(
            h,
            "<p class=\"resources\">Resources of its {} Pods: {}</p>",
            used.pods,
            escape(&used.describe())
        );
    }
    if let Some(lacking) = s.lacking {
        let _ = writeln!(h, "<p>Lacking: <code>{}</code></p>", lacking.name());
    }
    if !s.checks.is_empty() {
        h.push_str("<h3>Checks</h3>\n<table class=\"checks\"><tr><th>check</th><th>kind</th><th>outcome</th><th>promise</th><th>twin</th></tr>\n");
        for c in &s.checks {
            let _ = writeln!(
                h,
                "<tr class=\"check\" data-check=\"{id}\" data-kind=\"{kind}\" data-outcome=\"{class}\"><td class=\"mono\">{id}</td><td>{kind}</td><td>{badge}</td><td>{promise}</td><td class=\"mono\">{twin}</td></tr>",
                id = escape(&c.id),
                kind = c.kind.as_str(),
                class = check_class(c.outcome),
                badge = badge(check_class(c.outcome), c.outcome.as_str()),
                promise = escape(&c.promise),
                twin = escape(&c.twin),
            );
        }
        h.push_str("</table>\n");
    }
    for path in screenshots(s) {
        let _ = writeln!(
            h,
            "<p>Screenshot: <a href=\"#screenshots\">{}</a> (under Screenshots above)</p>",
            escape(&path)
        );
    }
    if !s.steps.is_empty() {
        h.push_str("<h3>Steps</h3>\n<table class=\"steps\"><tr><th>step</th><th>outcome</th><th>at</th><th>took</th><th>evidence / error</th></tr>\n");
        for st in &s.steps {
            let evidence = if st.evidence.is_null() {
                String::new()
            } else {
                serde_json::to_string_pretty(&st.evidence).unwrap_or_default()
            };
            let error = st
                .error
                .as_deref()
                .map(|e| format!("<pre class=\"error\">{}</pre>", escape(e)))
                .unwrap_or_default();
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td class=\"duration\">+{}</td><td class=\"duration\">{}</td><td>{error}{}</td></tr>",
                escape(&st.name),
                badge(step_class(st.outcome), step_class(st.outcome)),
                secs(st.offset_ms),
                secs(st.duration_ms),
                if evidence.is_empty() {
                    String::new()
                } else {
                    format!(
                        "<details><summary>evidence</summary><pre>{}</pre></details>",
                        escape(&evidence)
                    )
                }
            );
        }
        h.push_str("</table>\n");
    }
    if !s.findings.is_empty() {
        h.push_str("<h3>Findings</h3>\n<ul class=\"findings\">\n");
        for f in &s.findings {
            let level = match f.level {
                FindingLevel::Info => "info",
                FindingLevel::Warning => "warning",
                FindingLevel::Incompatible => "incompatible",
            };
            let _ = writeln!(
                h,
                "<li><b>{level}</b> <code>{}</code>: {}</li>",
                escape(&f.code),
                escape(&f.message)
            );
        }
        h.push_str("</ul>\n");
    }
    if !s.sessions.is_empty() {
        h.push_str("<h3>Sessions</h3>\n<table class=\"sessions\"><tr><th>Pod</th><th>namespace</th><th>task / session</th><th>launch stages</th></tr>\n");
        for session in &s.sessions {
            let stages = session
                .launch_stages_ms
                .iter()
                .map(|(stage, ms)| format!("{stage} {ms} ms"))
                .collect::<Vec<_>>()
                .join(", ");
            let _ = writeln!(
                h,
                "<tr><td class=\"mono\">{} <small>{}</small></td><td>{}</td><td class=\"mono\">{} / {}</td><td>{}</td></tr>",
                escape(&session.pod_name),
                escape(&session.pod_uid),
                escape(&session.namespace),
                escape(&session.task_id),
                escape(&session.session_id),
                escape(&stages)
            );
        }
        h.push_str("</table>\n");
    }
    if !s.cleanup.is_empty() {
        h.push_str("<h3>Cleanup</h3>\n");
        cleanup_table(h, &s.cleanup);
    }
    if !s.leaks.is_empty() {
        h.push_str("<h3>Leaks</h3>\n<ul class=\"leaks\">\n");
        for leak in &s.leaks {
            let _ = writeln!(h, "<li class=\"mono\">{}</li>", escape(leak));
        }
        h.push_str("</ul>\n");
    }
    if !s.previous_attempts.is_empty() {
        h.push_str("<h3>Earlier attempts</h3>\n<ul>\n");
        for attempt in &s.previous_attempts {
            let _ = writeln!(h, "<li>{}</li>", escape(attempt));
        }
        h.push_str("</ul>\n");
    }
    if !s.artifacts.is_empty() {
        h.push_str("<h3>Evidence files</h3>\n<ul class=\"artifacts\">\n");
        for a in &s.artifacts {
            // Only files inside the report's folder are linked.
            let _ = if inside(a) {
                writeln!(h, "<li><a href=\"{}\">{}</a></li>", href(a), escape(a))
            } else {
                writeln!(h, "<li>{}</li>", escape(a))
            };
        }
        h.push_str("</ul>\n");
    }
    h.push_str("</div>\n</details>\n");
}

fn cleanup_table(h: &mut String, records: &[CleanupRecord]) {
    h.push_str("<table class=\"cleanup\"><tr><th>object</th><th>outcome</th><th>took</th><th>error</th></tr>\n");
    for c in records {
        let outcome = match c.outcome {
            CleanupOutcome::Removed => "removed",
            CleanupOutcome::AlreadyGone => "already gone",
            CleanupOutcome::Kept => "kept",
            CleanupOutcome::Failed => "failed",
        };
        let _ = writeln!(
            h,
            "<tr><td class=\"mono\">{}</td><td>{}</td><td class=\"duration\">{} ms</td><td>{}</td></tr>",
            escape(&c.object),
            badge(
                if c.outcome == CleanupOutcome::Failed {
                    "failed"
                } else {
                    "passed"
                },
                outcome
            ),
            c.duration_ms,
            escape(c.error.as_deref().unwrap_or(""))
        );
    }
    h.push_str("</table>\n");
}

fn run_level(h: &mut String, report: &Report) {
    h.push_str("<section id=\"run-level\">\n<h2>Run</h2>\n");
    if !report.setup.is_empty() {
        h.push_str("<h3>Setup steps</h3>\n<table class=\"setup\"><tr><th>step</th><th>outcome</th><th>at</th><th>took</th><th>error</th></tr>\n");
        for st in &report.setup {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td class=\"duration\">+{}</td><td class=\"duration\">{}</td><td>{}</td></tr>",
                escape(&st.name),
                badge(step_class(st.outcome), step_class(st.outcome)),
                secs(st.offset_ms),
                secs(st.duration_ms),
                escape(st.error.as_deref().unwrap_or(""))
            );
        }
        h.push_str("</table>\n");
    }
    if !report.teardown.is_empty() {
        h.push_str("<h3>Run teardown</h3>\n");
        cleanup_table(h, &report.teardown);
    }
    let _ = writeln!(
        h,
        "<h3>Left behind</h3>\n<p id=\"leftovers\">{}</p>",
        if report.leftovers.is_empty() {
            "nothing".to_owned()
        } else {
            escape(&report.leftovers.join(", "))
        }
    );
    h.push_str("</section>\n");
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::report::{CheckKind, CheckReport, SessionRecord, Summary};

    pub(crate) fn scenario(
        name: &str,
        outcome: Outcome,
        diagnosis: Option<&str>,
    ) -> ScenarioReport {
        ScenarioReport {
            name: name.into(),
            promise: "a promise".into(),
            outcome,
            diagnosis: diagnosis.map(str::to_owned),
            checks: vec![
                CheckReport {
                    id: format!("{name}/first"),
                    promise: "first".into(),
                    kind: CheckKind::System,
                    outcome: if outcome == Outcome::Passed {
                        CheckOutcome::Passed
                    } else {
                        CheckOutcome::Failed
                    },
                    twin: "fixtures/templates/broken/x.yaml".into(),
                },
                CheckReport {
                    id: format!("{name}/second"),
                    promise: "second".into(),
                    kind: CheckKind::Mirror,
                    outcome: if outcome == Outcome::Passed {
                        CheckOutcome::Passed
                    } else {
                        CheckOutcome::NotReached
                    },
                    twin: "mirror: none".into(),
                },
            ],
            lacking: None,
            started_at: "2026-11-29T00:00:02.000Z".into(),
            duration_ms: 4000,
            steps: vec![StepReport {
                name: "launch".into(),
                outcome: StepOutcome::Passed,
                offset_ms: 0,
                duration_ms: 3000,
                evidence: serde_json::json!({"k": "v <b>"}),
                error: None,
            }],
            findings: Vec::new(),
            sessions: vec![SessionRecord {
                pod_name: "kandev-1".into(),
                pod_uid: "uid".into(),
                namespace: "ns".into(),
                task_id: "t".into(),
                session_id: "s".into(),
                workspace: "w".into(),
                launch_stages_ms: vec![("storage".into(), 10), ("pod_ready".into(), 1500)],
                template_sha256: "sha256:0".into(),
            }],
            cleanup: vec![CleanupRecord {
                object: "pod/kandev-1".into(),
                outcome: CleanupOutcome::Removed,
                duration_ms: 12,
                error: None,
            }],
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

    pub(crate) fn report(scenarios: Vec<ScenarioReport>) -> Report {
        Report {
            schema_version: 1,
            run_id: "r1".into(),
            harness_version: "0.1.0".into(),
            started_at: "2026-11-29T00:00:00.000Z".into(),
            finished_at: "2026-11-29T00:01:00.000Z".into(),
            duration_ms: 60_000,
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
        }
    }

    #[test]
    fn escapes_markup_and_characters_html_forbids() {
        assert_eq!(
            escape("a<b>&\"c\"'\u{1b}[31m\u{0}\u{7f}\u{fffe}\n\t"),
            "a&lt;b&gt;&amp;&quot;c&quot;&#39;\\u{001b}[31m\\u{0000}\\u{007f}\\u{fffe}\n\t"
        );
    }

    #[test]
    fn every_scenario_has_a_row_with_its_checks_and_text_is_escaped() {
        let nasty = "x::y/first: <script>alert(1)</script> & \u{1b}[0m\u{0} done";
        let html = render(
            &report(vec![
                scenario("a::passes", Outcome::Passed, None),
                scenario("x::y", Outcome::Failed, Some(nasty)),
                scenario("c::skips", Outcome::Incompatible, Some("no browser")),
            ]),
            None,
        );
        assert_eq!(html.matches("<details class=\"scenario\"").count(), 3);
        for name in ["a::passes", "x::y", "c::skips"] {
            assert!(
                html.contains(&format!("data-scenario=\"{name}\"")),
                "{name}"
            );
        }
        assert!(html.contains("data-outcome=\"failed\" open>"));
        assert!(
            html.contains("<tr class=\"check\" data-check=\"x::y/first\" data-kind=\"system\" data-outcome=\"failed\">")
        );
        assert!(html.contains(
            "data-check=\"x::y/second\" data-kind=\"mirror\" data-outcome=\"not_reached\""
        ));
        assert_eq!(html.matches("<tr class=\"check\"").count(), 6);
        assert!(!html.contains("<script>alert"), "unescaped diagnosis");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; \\u{001b}[0m\\u{0000} done")
        );
        assert!(!html.contains('\u{1b}') && !html.contains('\u{0}'));
        assert!(
            html.contains("3 system checks, 3 with a twin; 3 mirror checks"),
            "{html}"
        );
        assert!(html.contains("exit code 1: "));
        assert!(html.contains("<svg id=\"timeline\""));
        assert!(html.contains("launch stage pod_ready: 1500 ms"));
        assert!(html.contains("&quot;v &lt;b&gt;&quot;"), "evidence escaped");
        // Nothing is fetched: no external URL in src or href.
        assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));
    }

    #[test]
    fn embeds_a_screenshot_beside_the_report_and_links_one_that_is_not() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
        let png = b"\x89PNG\r\n\x1a\nrest";
        std::fs::create_dir_all(dir.path().join("browser-launch")).unwrap_or_default();
        std::fs::write(dir.path().join("browser-launch/screenshot.png"), png).unwrap_or_default();
        let mut s = scenario("browser::launch", Outcome::Passed, None);
        s.steps[0].evidence = serde_json::json!({"screenshot": "browser-launch/screenshot.png"});
        let mut escaping = scenario("x::y", Outcome::Passed, None);
        escaping.artifacts = vec!["../outside.png".into(), "/etc/x.png".into()];
        let html = render(&report(vec![s.clone(), escaping]), Some(dir.path()));
        assert!(
            html.contains(&format!("src=\"data:image/png;base64,{}\"", base64(png))),
            "{html}"
        );
        assert_eq!(
            html.matches("<img ").count(),
            1,
            "only the screenshot inside the folder"
        );
        assert!(!html.contains("href=\"../outside.png") && !html.contains("href=\"/etc/x.png"));
        let linked = render(&report(vec![s]), None);
        assert!(linked.contains("<img src=\"browser-launch/screenshot.png\""));
    }

    /// Every element closed in order (void elements and `/>` aside), outside `<script>` and
    /// `<style>`: the document's structure survives any text the report carries.
    fn unbalanced(html: &str) -> Option<String> {
        const VOID: &[&str] = &["meta", "img", "br", "hr", "input", "link", "!DOCTYPE"];
        let mut open: Vec<String> = Vec::new();
        let mut rest = html;
        while let Some(start) = rest.find('<') {
            let Some(end) = rest[start..].find('>').map(|e| e + start) else {
                return Some("an unterminated tag".into());
            };
            let tag = &rest[start + 1..end];
            rest = &rest[end + 1..];
            let name: String = tag
                .trim_start_matches('/')
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '/')
                .collect();
            if let Some(closing) = tag.strip_prefix('/') {
                if open.pop().as_deref() != Some(closing.trim()) {
                    return Some(format!("</{closing}> closes {open:?}"));
                }
            } else if !VOID.contains(&name.as_str()) && !tag.ends_with('/') {
                if name == "script" || name == "style" {
                    let close = format!("</{name}>");
                    let Some(at) = rest.find(&close) else {
                        return Some(format!("{name} never closed"));
                    };
                    rest = &rest[at + close.len()..];
                    continue;
                }
                open.push(name);
            }
        }
        (!open.is_empty()).then(|| format!("left open: {open:?}"))
    }

    #[test]
    fn the_document_is_balanced_whatever_the_text() {
        let nasty = "</details></summary></table><script>x</script> <!-- \u{1b} \"'&";
        let mut s = scenario("x::y", Outcome::Failed, Some(nasty));
        s.findings.push(crate::report::Finding {
            level: FindingLevel::Warning,
            code: "a<b".into(),
            message: nasty.into(),
            evidence: Value::Null,
        });
        s.leaks.push(nasty.into());
        s.previous_attempts.push(nasty.into());
        s.artifacts.push(nasty.into());
        s.cleanup[0].error = Some(nasty.into());
        s.steps[0].error = Some(nasty.into());
        let mut r = report(vec![s, scenario("a::b", Outcome::Passed, None)]);
        r.leftovers.push(nasty.into());
        r.run_id = nasty.into();
        let html = render(&r, None);
        assert_eq!(unbalanced(&html), None, "{html}");
        assert_eq!(unbalanced("<p><b></p></b>").map(|_| ()), Some(()));
    }

    #[test]
    fn base64_pads() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn launch_stages_start_with_the_step_that_launched_them_and_end_with_the_scenario() {
        let mut s = scenario("a::b", Outcome::Passed, None);
        s.duration_ms = 4_000;
        s.steps.push(StepReport {
            name: "a second session".into(),
            outcome: StepOutcome::Passed,
            offset_ms: 3_000,
            duration_ms: 900,
            evidence: serde_json::json!({"launch_stages_ms": [
                {"pod": "p2", "stages_ms": [["storage", 100], ["pod_ready", 2000]]}
            ]}),
            error: None,
        });
        assert_eq!(
            launch_stages(&s),
            vec![
                ("storage".to_owned(), 3_000, 100),
                ("pod_ready".to_owned(), 3_100, 900)
            ]
        );
        // Without that evidence: from the launch step, cut at the scenario's end.
        s.steps.truncate(1);
        s.duration_ms = 1_000;
        assert_eq!(
            launch_stages(&s),
            vec![
                ("storage".to_owned(), 0, 10),
                ("pod_ready".to_owned(), 10, 990)
            ]
        );
    }

    #[test]
    fn ticks_are_round() {
        assert_eq!(tick(60_000), 10_000);
        assert_eq!(tick(7_000), 1_000);
        assert_eq!(tick(1), 1);
    }
}
