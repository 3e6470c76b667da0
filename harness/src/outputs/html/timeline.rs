//! The timeline of `report.html` (inline SVG): the run-level setup, then each scenario as a
//! bar on the run's time axis, its steps and its sessions' launch stages inside.

use super::markup::{escape, outcome_class, secs};
use kandev_report::{Outcome, Report, ScenarioReport, StepOutcome, StepReport, unix_ms};
use serde_json::Value;
use std::fmt::Write as _;

/// Milliseconds from the run's start to the scenario's.
fn scenario_offset(report: &Report, s: &ScenarioReport) -> u64 {
    match (unix_ms(&report.started_at), unix_ms(&s.started_at)) {
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

pub(super) fn timeline(h: &mut String, report: &Report) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::html::tests::scenario;

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
