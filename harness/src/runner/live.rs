//! The live view of a run on a terminal: one status line (scenarios running, passed,
//! failed, other, elapsed, the names of those running) below one line per finished scenario.
//! Hidden unless [`LiveView::show`] is called, which the CLI does only when stderr is a
//! terminal: CI logs get libtest's plain lines and no control characters.

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use kandev_report::{Outcome, ScenarioReport};
use std::sync::Mutex;
use std::time::Duration;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    pub running: Vec<String>,
    pub passed: usize,
    pub failed: usize,
    /// Errored, timed out, cancelled, leaked: anything else that fails the gate.
    pub other: usize,
    /// Skipped or incompatible.
    pub not_judged: usize,
}

impl Counts {
    /// The status line's text (without the spinner and elapsed time).
    pub fn line(&self) -> String {
        let mut line = format!(
            "running {} · passed {} · failed {} · other {} · skipped {}",
            self.running.len(),
            self.passed,
            self.failed,
            self.other,
            self.not_judged
        );
        if !self.running.is_empty() {
            line.push_str(&format!(" · {}", self.running.join(", ")));
        }
        line
    }
}

/// How often a run whose stderr is no terminal says what it is doing ([`heartbeat_line`]): a
/// CI log that shows nothing for minutes while images build looks hung.
pub const HEARTBEAT: Duration = Duration::from_secs(30);

/// The line printed every [`HEARTBEAT`] when there is no live view: how long the run has
/// gone, each image build under way (what, for how long, its last line) and the scenarios.
pub fn heartbeat_line(
    elapsed: Duration,
    building: &[(String, Duration, String)],
    counts: &Counts,
) -> String {
    let mut line = format!("progress [{}]", minutes(elapsed));
    for (what, for_how_long, last) in building {
        line.push_str(&format!(
            " building {what} ({}): {last};",
            minutes(*for_how_long)
        ));
    }
    line.push(' ');
    line.push_str(&counts.line());
    line
}

fn minutes(d: Duration) -> String {
    format!("{}m{:02}s", d.as_secs() / 60, d.as_secs() % 60)
}

pub struct LiveView {
    bar: ProgressBar,
    counts: Mutex<Counts>,
}

impl Default for LiveView {
    fn default() -> Self {
        Self {
            bar: ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()),
            counts: Mutex::new(Counts::default()),
        }
    }
}

impl LiveView {
    /// Draws the view (in `multi`, beside image build spinners) from now on.
    pub fn show(&self, multi: &MultiProgress) {
        let bar = multi.add(self.bar.clone());
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        self.redraw();
    }

    pub fn started(&self, scenario: &str) {
        if let Ok(mut c) = self.counts.lock() {
            c.running.push(scenario.to_owned());
        }
        self.redraw();
    }

    pub fn finished(&self, report: &ScenarioReport) {
        if let Ok(mut c) = self.counts.lock() {
            c.running.retain(|r| r != &report.name);
            match report.outcome {
                Outcome::Passed => c.passed += 1,
                Outcome::Failed => c.failed += 1,
                Outcome::Skipped | Outcome::Incompatible => c.not_judged += 1,
                Outcome::Errored | Outcome::TimedOut | Outcome::Cancelled | Outcome::Leaked => {
                    c.other += 1
                }
            }
        }
        let diagnosis = report
            .diagnosis
            .as_deref()
            .and_then(|d| d.lines().next())
            .map(|d| format!("  {d}"))
            .unwrap_or_default();
        self.println(&format!(
            "{:<12} {:<28} {:>6.1}s{diagnosis}",
            report.outcome.as_str(),
            report.name,
            report.duration_ms as f64 / 1000.0
        ));
        self.redraw();
    }

    /// A line above the view (dropped while the view is hidden: libtest prints its own).
    pub fn println(&self, line: &str) {
        if !self.bar.is_hidden() {
            self.bar.println(line);
        }
    }

    pub fn counts(&self) -> Counts {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }

    fn redraw(&self) {
        self.bar.set_message(self.counts().line());
    }

    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heartbeat_says_what_builds_and_what_runs() {
        let counts = Counts {
            running: vec!["a::x".into()],
            passed: 2,
            ..Counts::default()
        };
        assert_eq!(
            heartbeat_line(
                Duration::from_secs(95),
                &[(
                    "worker image".into(),
                    Duration::from_secs(61),
                    "Step 5/9 : RUN apt-get".into()
                )],
                &counts
            ),
            "progress [1m35s] building worker image (1m01s): Step 5/9 : RUN apt-get; running 1 · passed 2 · failed 0 · other 0 · skipped 0 · a::x"
        );
    }

    #[test]
    fn counts_follow_scenarios_and_a_hidden_view_stays_quiet() {
        let view = LiveView::default();
        view.started("a::x");
        view.started("b::y");
        assert_eq!(view.counts().running, vec!["a::x", "b::y"]);
        let mut report: ScenarioReport = serde_json::from_value(serde_json::json!({
            "name": "a::x", "promise": "p", "outcome": "leaked", "diagnosis": "leaked: 1",
            "started_at": "", "duration_ms": 1, "steps": [], "findings": [], "sessions": [],
            "cleanup": [], "artifacts": [], "attempts": 1, "flaky": false,
            "previous_attempts": [], "nested_inventory": [], "leaks": ["x"]
        }))
        .unwrap_or_else(|e| unreachable!("{e}"));
        view.finished(&report);
        report.name = "b::y".into();
        report.outcome = Outcome::Passed;
        view.finished(&report);
        let counts = view.counts();
        assert_eq!(
            (counts.passed, counts.other, counts.running.len()),
            (1, 1, 0)
        );
        assert!(
            counts
                .line()
                .starts_with("running 0 · passed 1 · failed 0 · other 1")
        );
        assert!(view.bar.is_hidden(), "never drawn unless shown");
    }
}
