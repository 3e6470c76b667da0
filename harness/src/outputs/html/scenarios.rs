//! The scenarios of `report.html`: the screenshots they kept, and one row each that opens
//! to its checks, steps, findings, sessions, cleanup, leaks and evidence files.

use super::markup::{
    badge, base64, check_class, cleanup_table, escape, href, outcome_class, secs, step_class,
};
use kandev_report::{FindingLevel, Report, ScenarioReport};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Component, Path};

/// The largest PNG embedded (larger ones are only linked).
const MAX_EMBEDDED_BYTES: u64 = 4 << 20;

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

/// The PNGs scenarios kept (the browser's screenshot), where people see them first.
pub(super) fn pictures(h: &mut String, report: &Report, folder: Option<&Path>) {
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

/// The outcomes the filter offers: a check's, then a scenario's (value, label).
const FILTER_OUTCOMES: [(&str, &str); 10] = [
    ("passed", "passed"),
    ("failed", "failed"),
    ("not_judged", "not judged"),
    ("not_reached", "not reached"),
    ("errored", "errored"),
    ("timed_out", "timed out"),
    ("cancelled", "cancelled"),
    ("skipped", "skipped"),
    ("incompatible", "incompatible"),
    ("leaked", "leaked"),
];

pub(super) fn scenarios(h: &mut String, report: &Report) {
    h.push_str("<section id=\"scenarios\">\n<h2>Scenarios</h2>\n<p class=\"toolbar\"><button type=\"button\" onclick=\"setAll(true)\">expand all</button><button type=\"button\" onclick=\"setAll(false)\">collapse all</button>\n");
    h.push_str("<label for=\"filter-outcome\">outcome</label><select id=\"filter-outcome\" onchange=\"applyFilters()\"><option value=\"all\">all</option>");
    for (value, label) in FILTER_OUTCOMES {
        let _ = write!(h, "<option value=\"{value}\">{label}</option>");
    }
    h.push_str("</select><label for=\"filter-kind\">kind</label><select id=\"filter-kind\" onchange=\"applyFilters()\"><option value=\"all\">all</option><option value=\"system\">system</option><option value=\"mirror\">mirror</option></select>");
    h.push_str("<label for=\"filter-search\">search</label><input id=\"filter-search\" type=\"search\" placeholder=\"check id, promise, reason\" oninput=\"applyFilters()\"><span id=\"filter-count\"></span></p>\n");
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
            let reason = c
                .reason
                .as_deref()
                .map(|r| {
                    format!(
                        "<br><small class=\"reason\">not judged: {}</small>",
                        escape(r)
                    )
                })
                .unwrap_or_default();
            // What the search looks in: the id, the promise and the reason, lowercased.
            let search = format!(
                "{} {} {}",
                c.id,
                c.promise,
                c.reason.as_deref().unwrap_or_default()
            )
            .to_lowercase();
            let _ = writeln!(
                h,
                "<tr class=\"check\" data-check=\"{id}\" data-kind=\"{kind}\" data-outcome=\"{class}\" data-search=\"{search}\"><td class=\"mono\">{id}</td><td>{kind}</td><td>{badge}{reason}</td><td>{promise}</td><td class=\"mono\">{twin}</td></tr>",
                id = escape(&c.id),
                kind = c.kind.as_str(),
                class = check_class(c.outcome),
                badge = badge(check_class(c.outcome), c.outcome.as_str()),
                search = escape(&search),
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
