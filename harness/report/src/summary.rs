//! The counts a report keeps of its scenarios and their checks (`summary`).

use crate::cost::ResourceUsage;
use crate::scenario::{CheckKind, CheckOutcome, Outcome, ScenarioReport, has_twin};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Summary {
    pub total: usize,
    pub passed: usize,
    pub failed: usize,
    pub errored: usize,
    pub timed_out: usize,
    pub cancelled: usize,
    pub skipped: usize,
    pub incompatible: usize,
    /// Its checks held, but something it created outlived its teardown.
    pub leaked: usize,
    /// Passed after a retry (counted in `passed` too).
    pub flaky: usize,
    /// The promise checks of the scenarios run.
    #[serde(default)]
    pub checks: CheckSummary,
    /// What the scenarios' Pods consumed: CPU summed over the scenarios, memory the largest
    /// scenario's peak (scenarios run in parallel: their peaks do not add up to the run's).
    /// Absent without a node view, and in reports written before it was recorded.
    #[serde(default)]
    pub resources: Option<ResourceUsage>,
}

/// How many promise checks the run judged, of which kind, and how many have a broken twin.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckSummary {
    pub total: usize,
    pub passed: usize,
    pub failed: usize,
    pub not_reached: usize,
    /// Reached but not judged on this backend (no evidence it could see).
    #[serde(default)]
    pub not_judged: usize,
    /// System checks with a broken twin that shows they can fail, a fixture or a cluster twin
    /// (the rest of the system checks are exempt, with the reason in `twin`; mirror checks
    /// have none).
    pub with_twin: usize,
    /// Checks the system under test (cluster, template, images, prepare script, daemon
    /// configuration) can break.
    #[serde(default)]
    pub system: KindCount,
    /// Checks only the harness's mirror of Kandev decides: they say nothing of the system.
    #[serde(default)]
    pub mirror: KindCount,
}

/// The checks of one [`CheckKind`] and how they ended.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KindCount {
    pub total: usize,
    pub passed: usize,
    pub failed: usize,
    pub not_reached: usize,
    #[serde(default)]
    pub not_judged: usize,
}

impl KindCount {
    fn add(&mut self, outcome: CheckOutcome) {
        self.total += 1;
        match outcome {
            CheckOutcome::Passed => self.passed += 1,
            CheckOutcome::Failed => self.failed += 1,
            CheckOutcome::NotReached => self.not_reached += 1,
            CheckOutcome::NotJudged => self.not_judged += 1,
        }
    }

    /// Those judged against the system: passed or failed (not those not reached or not
    /// judged).
    pub fn judged(&self) -> usize {
        self.passed + self.failed
    }
}

impl CheckSummary {
    /// "64 system checks (60 judged against the system, 4 not judged), 60 with a twin; 10
    /// mirror checks": what a green of these checks proves about the system (only those judged
    /// against it: passed or failed), what it could not judge, and what only judges the
    /// harness's mirror of Kandev. Checks never reached are named when there are any. Every
    /// format and reader prints this line, so that they agree.
    pub fn kinds_line(&self) -> String {
        let s = &self.system;
        let not_reached = if s.not_reached > 0 {
            format!(", {} not reached", s.not_reached)
        } else {
            String::new()
        };
        format!(
            "{} system checks ({} judged against the system, {} not judged{not_reached}), {} with a twin; {} mirror checks",
            s.total,
            s.judged(),
            s.not_judged,
            self.with_twin,
            self.mirror.total
        )
    }
}

impl Summary {
    pub fn of(scenarios: &[ScenarioReport]) -> Self {
        let mut s = Summary {
            total: scenarios.len(),
            ..Default::default()
        };
        for scenario in scenarios {
            s.flaky += usize::from(scenario.flaky);
            if let Some(used) = &scenario.resources {
                let total = s.resources.get_or_insert_with(ResourceUsage::default);
                total.pods += used.pods;
                total.cpu_ms += used.cpu_ms;
                total.memory_peak_bytes = total.memory_peak_bytes.max(used.memory_peak_bytes);
            }
            for check in &scenario.checks {
                s.checks.total += 1;
                s.checks.with_twin += usize::from(has_twin(&check.twin));
                match check.kind {
                    CheckKind::System => s.checks.system.add(check.outcome),
                    CheckKind::Mirror => s.checks.mirror.add(check.outcome),
                }
                match check.outcome {
                    CheckOutcome::Passed => s.checks.passed += 1,
                    CheckOutcome::Failed => s.checks.failed += 1,
                    CheckOutcome::NotReached => s.checks.not_reached += 1,
                    CheckOutcome::NotJudged => s.checks.not_judged += 1,
                }
            }
            match scenario.outcome {
                Outcome::Passed => s.passed += 1,
                Outcome::Failed => s.failed += 1,
                Outcome::Errored => s.errored += 1,
                Outcome::TimedOut => s.timed_out += 1,
                Outcome::Cancelled => s.cancelled += 1,
                Outcome::Skipped => s.skipped += 1,
                Outcome::Incompatible => s.incompatible += 1,
                Outcome::Leaked => s.leaked += 1,
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::CheckReport;

    #[test]
    fn the_kinds_line_counts_what_was_judged_against_the_system_apart() {
        let check = |id: &str, kind, outcome| CheckReport {
            id: id.into(),
            promise: "p".into(),
            kind,
            outcome,
            reason: None,
            lacking: None,
            twin: "fixtures/templates/broken/x.yaml".into(),
        };
        let scenario = ScenarioReport {
            name: "a::x".into(),
            checks: vec![
                check("a::x/1", CheckKind::System, CheckOutcome::Passed),
                check("a::x/2", CheckKind::System, CheckOutcome::Failed),
                check("a::x/3", CheckKind::System, CheckOutcome::NotJudged),
                check("a::x/4", CheckKind::Mirror, CheckOutcome::Passed),
            ],
            ..Default::default()
        };
        let summary = Summary::of(std::slice::from_ref(&scenario));
        assert_eq!(
            summary.checks.kinds_line(),
            "3 system checks (2 judged against the system, 1 not judged), 4 with a twin; 1 mirror checks"
        );
        assert_eq!(summary.checks.not_judged, 1);
        let mut unreached = scenario;
        unreached.checks[0].outcome = CheckOutcome::NotReached;
        assert_eq!(
            Summary::of(&[unreached]).checks.kinds_line(),
            "3 system checks (1 judged against the system, 1 not judged, 1 not reached), 4 with a twin; 1 mirror checks"
        );
    }

    #[test]
    fn the_summary_sums_cpu_and_keeps_the_largest_memory_peak() {
        let scenario = |name: &str, resources| ScenarioReport {
            name: name.into(),
            resources,
            ..Default::default()
        };
        let a = scenario(
            "a::one",
            Some(ResourceUsage {
                pods: 2,
                cpu_ms: 1_500,
                memory_peak_bytes: Some(300 << 20),
            }),
        );
        let b = scenario(
            "b::two",
            Some(ResourceUsage {
                pods: 1,
                cpu_ms: 2_000,
                memory_peak_bytes: Some(100 << 20),
            }),
        );
        let unmeasured = scenario("c::three", None);
        let summary = Summary::of(&[a, b, unmeasured]);
        let total = summary.resources.unwrap_or_default();
        assert_eq!(
            (total.pods, total.cpu_ms, total.memory_peak_bytes),
            (3, 3_500, Some(300 << 20))
        );
        assert_eq!(total.describe(), "3.5 s CPU, peak 300 MiB");
        assert_eq!(Summary::of(&[]).resources, None);
    }
}
