//! The run-level set-up steps as they happen (engine, images, cluster, preflight), each with
//! its timing and evidence or error, for `report.setup`.

use crate::backend::SetupSteps;
use kandev_report::{StepOutcome, StepReport};
use serde_json::Value;
use std::sync::Mutex;
use std::time::Instant;

/// The run's set-up steps, recorded by the backends' preparation ([`SetupSteps`]).
pub struct SetupLog {
    run_started: Instant,
    steps: Mutex<Vec<StepReport>>,
}

impl SetupLog {
    pub fn new(run_started: Instant) -> Self {
        Self {
            run_started,
            steps: Mutex::new(Vec::new()),
        }
    }

    pub fn steps(&self) -> Vec<StepReport> {
        self.steps.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

impl SetupSteps for SetupLog {
    fn record(&self, name: &str, started: Instant, ended: Result<Value, String>) {
        let step = StepReport {
            name: name.to_owned(),
            outcome: if ended.is_ok() {
                StepOutcome::Passed
            } else {
                StepOutcome::Errored
            },
            offset_ms: started.duration_since(self.run_started).as_millis() as u64,
            duration_ms: started.elapsed().as_millis() as u64,
            error: ended.as_ref().err().cloned(),
            evidence: ended.unwrap_or(Value::Null),
        };
        if let Ok(mut steps) = self.steps.lock() {
            steps.push(step);
        }
    }
}
