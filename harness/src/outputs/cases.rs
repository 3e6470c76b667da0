//! The run as CI test cases, one per check, for JUnit and CTRF alike: a check passed, failed
//! (with its scenario's diagnosis, which names it), or skipped with the reason (not judged,
//! not reached). A scenario gets a case of its own only where its checks cannot tell how it
//! ended: it has no checks, or it failed outside a check (errored, timed out, cancelled,
//! leaked, failed by a gate requirement), or it passed and its teardown failed.

use super::trace::teardown_failures;
use kandev_report::{CheckOutcome, CheckReport, Outcome, Report, ScenarioReport};

/// How CI reads a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Passed,
    /// A promise broke (JUnit `<failure>`).
    Failed,
    /// The run could not judge it for its own reasons (JUnit `<error>`).
    Errored,
    /// Nothing was claimed (JUnit `<skipped>`).
    Skipped,
}

/// One CI test case.
#[derive(Debug, Clone)]
pub(crate) struct Case<'a> {
    pub scenario: &'a ScenarioReport,
    /// The check it is (None: the scenario's own case).
    pub check: Option<&'a CheckReport>,
    /// The check's id, or the scenario's name.
    pub name: String,
    pub status: Status,
    /// The exact outcome: the check's (`not judged`, ...) or the scenario's.
    pub raw: &'static str,
    /// Why it did not pass: the diagnosis, or the reason it was not judged or reached.
    pub message: String,
    /// The case that carries its scenario's steps, evidence and earlier attempts (one a
    /// scenario: its own case, else its failed check, else its first check).
    pub carries_scenario: bool,
}

impl Case<'_> {
    /// Its duration in CI's reading: the scenario's on the case that carries it (checks
    /// have none of their own), else 0.
    pub fn duration_ms(&self) -> u64 {
        if self.carries_scenario {
            self.scenario.duration_ms
        } else {
            0
        }
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}

/// The case of check `c` of scenario `s`.
fn check_case<'a>(s: &'a ScenarioReport, c: &'a CheckReport) -> Case<'a> {
    let diagnosis = s.diagnosis.as_deref().unwrap_or_default();
    let (status, message) = match c.outcome {
        CheckOutcome::Passed => (Status::Passed, String::new()),
        CheckOutcome::Failed => (Status::Failed, diagnosis.to_owned()),
        CheckOutcome::NotJudged => (
            Status::Skipped,
            format!(
                "not judged: {}",
                c.reason.as_deref().unwrap_or("no reason recorded")
            ),
        ),
        CheckOutcome::NotReached => (
            Status::Skipped,
            if diagnosis.is_empty() {
                format!("not reached: {} {}", s.name, s.outcome.as_str())
            } else {
                format!(
                    "not reached: {} {}: {}",
                    s.name,
                    s.outcome.as_str(),
                    first_line(diagnosis)
                )
            },
        ),
    };
    Case {
        scenario: s,
        check: Some(c),
        name: c.id.clone(),
        status,
        raw: c.outcome.as_str(),
        message,
        carries_scenario: false,
    }
}

/// The scenario's own case, when its checks cannot tell how it ended.
fn scenario_case(s: &ScenarioReport) -> Option<Case<'_>> {
    let failed_check = s.checks.iter().any(|c| c.outcome == CheckOutcome::Failed);
    let teardown = teardown_failures(s);
    let needed = s.checks.is_empty()
        || (!s.outcome.is_acceptable() && !failed_check)
        || (s.outcome == Outcome::Passed && !teardown.is_empty());
    if !needed {
        return None;
    }
    let diagnosis = s.diagnosis.clone().unwrap_or_default();
    let (status, message) = match s.outcome {
        Outcome::Passed if teardown.is_empty() => (Status::Passed, String::new()),
        Outcome::Passed => (Status::Errored, teardown.join("; ")),
        Outcome::Failed | Outcome::TimedOut | Outcome::Leaked => (Status::Failed, diagnosis),
        Outcome::Errored | Outcome::Cancelled => (Status::Errored, diagnosis),
        Outcome::Skipped | Outcome::Incompatible => (
            Status::Skipped,
            format!("{}: {diagnosis}", s.outcome.as_str()),
        ),
    };
    Some(Case {
        scenario: s,
        check: None,
        name: s.name.clone(),
        status,
        raw: if s.outcome == Outcome::Passed && status == Status::Errored {
            "teardown failed"
        } else {
            s.outcome.as_str()
        },
        message,
        carries_scenario: true,
    })
}

/// Every case of the run, scenario by scenario (a scenario's own case first).
pub(crate) fn cases(report: &Report) -> Vec<Case<'_>> {
    let mut all = Vec::new();
    for s in &report.scenarios {
        let mut these: Vec<Case<'_>> = scenario_case(s).into_iter().collect();
        these.extend(s.checks.iter().map(|c| check_case(s, c)));
        if !these.iter().any(|c| c.carries_scenario) {
            let carrier = these
                .iter()
                .position(|c| c.status == Status::Failed)
                .unwrap_or(0);
            if let Some(case) = these.get_mut(carrier) {
                case.carries_scenario = true;
            }
        }
        all.extend(these);
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::html::tests::{report, scenario};

    fn summary(r: &Report) -> Vec<(String, Status, String, bool)> {
        cases(r)
            .into_iter()
            .map(|c| (c.name, c.status, c.message, c.carries_scenario))
            .collect()
    }

    #[test]
    fn one_case_per_check_and_a_scenario_case_only_where_checks_cannot_tell() {
        let mut unjudged = scenario("a::passes", Outcome::Passed, None);
        unjudged.checks[1].outcome = CheckOutcome::NotJudged;
        unjudged.checks[1].reason = Some("no node view".into());
        let mut leaked = scenario("c::leaks", Outcome::Leaked, Some("left pod/p"));
        for c in &mut leaked.checks {
            c.outcome = CheckOutcome::Passed;
        }
        let mut skipped = scenario("d::skips", Outcome::Skipped, Some("no browser"));
        for c in &mut skipped.checks {
            c.outcome = CheckOutcome::NotReached;
        }
        let mut bare = scenario("e::bare", Outcome::Errored, Some("engine gone"));
        bare.checks.clear();
        let r = report(vec![
            unjudged,
            scenario(
                "b::fails",
                Outcome::Failed,
                Some("b::fails/first: broke\nevidence"),
            ),
            leaked,
            skipped,
            bare,
        ]);
        let s = |t: &str| t.to_owned();
        assert_eq!(
            summary(&r),
            vec![
                (s("a::passes/first"), Status::Passed, s(""), true),
                (
                    s("a::passes/second"),
                    Status::Skipped,
                    s("not judged: no node view"),
                    false
                ),
                (
                    s("b::fails/first"),
                    Status::Failed,
                    s("b::fails/first: broke\nevidence"),
                    true
                ),
                (
                    s("b::fails/second"),
                    Status::Skipped,
                    s("not reached: b::fails failed: b::fails/first: broke"),
                    false
                ),
                (s("c::leaks"), Status::Failed, s("left pod/p"), true),
                (s("c::leaks/first"), Status::Passed, s(""), false),
                (s("c::leaks/second"), Status::Passed, s(""), false),
                (
                    s("d::skips/first"),
                    Status::Skipped,
                    s("not reached: d::skips skipped: no browser"),
                    true
                ),
                (
                    s("d::skips/second"),
                    Status::Skipped,
                    s("not reached: d::skips skipped: no browser"),
                    false
                ),
                (s("e::bare"), Status::Errored, s("engine gone"), true),
            ]
        );
    }
}
