//! `report.html`: the run for people, one self-contained file beside `report.json`.
//!
//! In the order people read it: the report's own verdict with every reason (what the exit
//! code means), the counts, one row per scenario that expands to its checks, steps, findings,
//! sessions, cleanup records and evidence files, the screenshots, a timeline (inline SVG:
//! scenarios as bars on the run's time axis, their steps and launch stages inside), the
//! environment (engine, cluster, template, gate, images) and the run's own steps. It fits a
//! 1400-px window: long values wrap. The scenarios filter by outcome (a check's or its scenario's) and by kind, and search
//! check ids, promises and reasons, client-side (the URL's fragment keeps the filter). Inline
//! CSS and a few lines of inline script; nothing is fetched. PNG evidence (the browser scenario's screenshot) is embedded as a
//! `data:` URI when the file is beside the report, and linked relatively either way. Every
//! text from the report is escaped: diagnoses carry arbitrary bytes.

mod markup;
mod scenarios;
mod summary;
mod timeline;

use kandev_report::{Report, exit, verdict_of};
use markup::escape;
use std::fmt::Write as _;
use std::path::Path;

const STYLE: &str = r#"
:root{--passed:#1a7f37;--failed:#cf222e;--errored:#bc4c00;--timed_out:#cf222e;--cancelled:#6e7781;--skipped:#6e7781;--incompatible:#8250df;--leaked:#9a6700;--not_reached:#6e7781;--not_judged:#bf8700}
[hidden]{display:none!important}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1200px;padding:16px 24px;color:#1f2328;background:#fff}
h1{font-size:22px;margin:8px 0}h2{font-size:17px;margin:22px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}h3{font-size:14px;margin:12px 0 4px}
table{border-collapse:collapse;margin:4px 0 8px}th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top;overflow-wrap:anywhere}th{background:#f6f8fa}
table#environment,table#images{table-layout:fixed;width:100%}table#environment th{width:150px}#images col.role{width:90px}#images col.reference{width:30%}#images col.id{width:24%}#images col.built{width:80px}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12px}pre{white-space:pre-wrap;word-break:break-word;margin:0}
.badge{display:inline-block;min-width:64px;text-align:center;border-radius:10px;padding:0 8px;color:#fff;font-size:12px;font-weight:600;background:#6e7781}
.badge.not_judged{background:var(--not_judged)}.badge.passed{background:var(--passed)}.badge.failed,.badge.timed_out{background:var(--failed)}.badge.errored{background:var(--errored)}.badge.leaked{background:var(--leaked)}.badge.incompatible{background:var(--incompatible)}
.counts span{margin-right:12px}.verdict{font-size:15px;font-weight:600;padding:6px 10px;border-radius:6px;display:inline-block}.verdict.ok{background:#dafbe1}.verdict.bad{background:#ffebe9}
details.scenario{border:1px solid #d0d7de;border-radius:6px;margin:4px 0}details.scenario>summary{display:grid;grid-template-columns:90px 260px 70px 1fr;gap:8px;padding:6px 8px;cursor:pointer;align-items:start}
details.scenario[open]>summary{background:#f6f8fa;border-bottom:1px solid #d0d7de}details.scenario>div{padding:4px 12px 10px}
.diagnosis{color:#57606a;overflow-wrap:anywhere}.promise{font-style:italic}.duration{text-align:right}
figure.screenshot img{max-width:640px;border:1px solid #d0d7de}figure.screenshot{margin:8px 0}
svg.timeline text{font:11px system-ui,sans-serif;fill:#1f2328}svg.timeline .axis{stroke:#d0d7de}
.toolbar button,.toolbar select,.toolbar input{margin-right:6px}.toolbar label{margin-right:4px}#filter-count{color:#57606a}
ul#verdict-reasons{margin:4px 0 8px}
"#;

/// Expand/collapse, and the filters: by outcome (a check's, or its scenario's), by kind, and a
/// search of check ids, promises and reasons (and scenario names). The URL's fragment holds
/// them (`#outcome=not_judged&kind=system&q=socket`), so that a filtered view can be linked.
const SCRIPT: &str = r#"
function setAll(open){document.querySelectorAll('details.scenario').forEach(function(d){d.open=open;});}
function applyFilters(){
  var outcome=document.getElementById('filter-outcome').value;
  var kind=document.getElementById('filter-kind').value;
  var q=document.getElementById('filter-search').value.trim().toLowerCase();
  var active=outcome!=='all'||kind!=='all'||q!=='';
  var all=document.querySelectorAll('details.scenario'),shown=0,checks=0;
  all.forEach(function(d){
    var so=d.getAttribute('data-outcome');
    var nameHit=q===''||d.getAttribute('data-scenario').toLowerCase().indexOf(q)>=0;
    var rows=d.querySelectorAll('tr.check'),any=false;
    rows.forEach(function(r){
      var ok=(kind==='all'||r.getAttribute('data-kind')===kind)
        &&(outcome==='all'||r.getAttribute('data-outcome')===outcome||so===outcome)
        &&(nameHit||r.getAttribute('data-search').indexOf(q)>=0);
      r.hidden=!ok;if(ok){any=true;checks++;}
    });
    var ok=any||(rows.length===0&&kind==='all'&&(outcome==='all'||so===outcome)&&nameHit);
    d.hidden=!ok;
    if(ok){shown++;if(active){d.open=true;}}
  });
  document.getElementById('filter-count').textContent=shown+' of '+all.length+' scenarios, '+checks+' checks shown';
  var hash=[];
  if(outcome!=='all'){hash.push('outcome='+encodeURIComponent(outcome));}
  if(kind!=='all'){hash.push('kind='+encodeURIComponent(kind));}
  if(q!==''){hash.push('q='+encodeURIComponent(q));}
  if(history.replaceState){history.replaceState(null,'',hash.length?'#'+hash.join('&'):location.pathname+location.search);}
}
function initFilters(){
  var f=document.getElementById('filter-outcome');
  if(!f){return;}
  location.hash.replace(/^#/,'').split('&').forEach(function(pair){
    var kv=pair.split('='),v=decodeURIComponent(kv[1]||'');
    if(kv[0]==='outcome'){f.value=v;}
    if(kv[0]==='kind'){document.getElementById('filter-kind').value=v;}
    if(kv[0]==='q'){document.getElementById('filter-search').value=v;}
  });
  applyFilters();
}
document.addEventListener('DOMContentLoaded',initFilters);
"#;

/// The HTML report of `report`; `folder` is where `report.json` is (for embedding PNGs).
pub fn render(report: &Report, folder: Option<&Path>) -> String {
    let mut h = String::with_capacity(64 * 1024);
    // The report's own verdict (a report before schema 2: judged by its run's rules).
    let verdict = verdict_of(report);
    let code = verdict.exit_code;
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
    let _ = writeln!(
        h,
        "<p><span id=\"verdict\" class=\"verdict {}\" data-exit-code=\"{code}\" data-passed=\"{}\" data-profile=\"{profile}\">exit code {code}: {}; the {profile} gate: {}</span></p>",
        if verdict.passed { "ok" } else { "bad" },
        verdict.passed,
        escape(exit::meaning(code)),
        verdict.brief(),
        profile = verdict.profile.name(),
    );
    if !verdict.reasons.is_empty() {
        h.push_str("<ul id=\"verdict-reasons\">\n");
        for reason in &verdict.reasons {
            let _ = writeln!(h, "<li>{}</li>", escape(reason));
        }
        h.push_str("</ul>\n");
    }
    // What people open the report for comes first: the verdict, the counts, the scenarios;
    // then the screenshots, the timeline, the environment and the run's own steps.
    summary::counts(&mut h, report);
    scenarios::scenarios(&mut h, report);
    scenarios::pictures(&mut h, report, folder);
    timeline::timeline(&mut h, report);
    summary::environment(&mut h, report);
    summary::run_level(&mut h, report);
    let _ = write!(
        h,
        "<footer><p>Written by kandev-acceptance {} from report.json (schema {}).</p></footer>\n</body>\n</html>\n",
        escape(&report.harness_version),
        report.schema_version
    );
    h
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kandev_report::{
        CheckKind, CheckOutcome, CheckReport, CleanupOutcome, CleanupRecord, FindingLevel, Outcome,
        ScenarioReport, SessionRecord, StepOutcome, StepReport, Summary,
    };
    use serde_json::Value;

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
                    reason: None,
                    lacking: None,
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
                    reason: None,
                    lacking: None,
                    twin: "mirror: none".into(),
                },
            ],
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
            ..Default::default()
        }
    }

    pub(crate) fn report(scenarios: Vec<ScenarioReport>) -> Report {
        Report {
            run_id: "r1".into(),
            harness_version: "0.1.0".into(),
            started_at: "2026-11-29T00:00:00.000Z".into(),
            finished_at: "2026-11-29T00:01:00.000Z".into(),
            duration_ms: 60_000,
            backend: "local".into(),
            summary: Summary::of(&scenarios),
            scenarios,
            ..Default::default()
        }
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
        assert!(html.contains(
            "<tr class=\"check\" data-check=\"x::y/first\" data-kind=\"system\" data-outcome=\"failed\" data-search=\"x::y/first first \">"
        ));
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
            html.contains(
                "3 system checks (3 judged against the system, 0 not judged), 3 with a twin; 3 mirror checks"
            ),
            "{html}"
        );
        assert!(html.contains("exit code 1: "));
        // The verdict names every reason; the filters are there.
        assert!(
            html.contains("<li>x::y failed: x::y/first: &lt;script&gt;"),
            "{html}"
        );
        assert!(!html.contains("<li>c::skips"), "skipped is acceptable");
        for control in ["filter-outcome", "filter-kind", "filter-search"] {
            assert!(html.contains(&format!("id=\"{control}\"")), "{control}");
        }
        assert!(html.contains("<svg id=\"timeline\""));
        assert!(html.contains("launch stage pod_ready: 1500 ms"));
        assert!(html.contains("&quot;v &lt;b&gt;&quot;"), "evidence escaped");
        // Nothing is fetched: no external URL in src or href.
        assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));
    }

    #[test]
    fn a_check_not_judged_shows_its_reason_and_a_filtered_run_says_so() {
        let mut s = scenario("a::passes", Outcome::Passed, None);
        s.checks[0].outcome = CheckOutcome::NotJudged;
        s.checks[0].reason = Some("no <host> engine".into());
        let mut r = report(vec![s]);
        r.selection = Some(kandev_report::Selection {
            filtered: true,
            selected: vec!["a::passes".into()],
            left_out: vec!["b::other".into()],
            ..Default::default()
        });
        r.gate.profile = kandev_report::GateProfile::Release;
        r.verdict = Some(kandev_report::judge(
            &r,
            &kandev_report::Rules::release(Vec::new()),
        ));
        let html = render(&r, None);
        assert!(
            html.contains("data-search=\"a::passes/first first no &lt;host&gt; engine\""),
            "the search text is escaped: {html}"
        );
        assert!(
            html.contains("<small class=\"reason\">not judged: no &lt;host&gt; engine</small>"),
            "{html}"
        );
        assert!(html.contains("<p id=\"filtered\""), "{html}");
        assert!(html.contains("Left out: b::other"), "{html}");
        assert!(
            html.contains("data-passed=\"false\" data-profile=\"release\""),
            "{html}"
        );
        assert!(
            html.contains("<li>check a::passes/first not judged: no &lt;host&gt; engine</li>"),
            "{html}"
        );
        assert!(html.contains("1 not judged"), "{html}");
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
            html.contains(&format!(
                "src=\"data:image/png;base64,{}\"",
                markup::base64(png)
            )),
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
        s.findings.push(kandev_report::Finding {
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
}
