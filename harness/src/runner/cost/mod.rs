//! What a run costs, measured as it goes: every call the harness makes to the backend and
//! the node view, counted and timed by kind (always recorded: a counter and a clock read per
//! call). [`cpu`] reads the harness's, the engine's and the machine's CPU;
//! [`metered_backend`] and [`metered_node`] wrap the run's backend and node view so that every
//! call they forward is metered.
//!
//! Calls are counted for the run and, through a task-local meter the runner sets around each
//! scenario, for the scenario that made them (a call from a task a scenario spawned counts
//! for the run only).

pub mod cpu;
pub mod metered_backend;
pub mod metered_node;

use kandev_report::Calls;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Counts calls by kind; cheap to clone, shared.
#[derive(Clone, Default)]
pub struct CallMeter(Arc<Mutex<Calls>>);

impl CallMeter {
    pub fn record(&self, kind: &str, took: Duration) {
        let mut calls = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let entry = calls.entry(kind.to_owned()).or_default();
        entry.count += 1;
        entry.total_ms += took.as_millis() as u64;
    }

    pub fn snapshot(&self) -> Calls {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

tokio::task_local! {
    /// The meter of the scenario running in this task.
    pub static SCENARIO_CALLS: CallMeter;
}

/// Records a call for the run (`run`) and for the scenario running in this task, if any.
pub fn record(run: &CallMeter, kind: &str, took: Duration) {
    run.record(kind, took);
    let _ = SCENARIO_CALLS.try_with(|scenario| scenario.record(kind, took));
}

/// Times `call` and records it under `kind`.
pub async fn metered<T>(run: &CallMeter, kind: &str, call: impl Future<Output = T>) -> T {
    let started = std::time::Instant::now();
    let out = call.await;
    record(run, kind, started.elapsed());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kandev_report::CallCost;

    #[test]
    fn counts_calls_for_the_run_and_the_scenario() {
        let run = CallMeter::default();
        let scenario = CallMeter::default();
        record(&run, "exec", Duration::from_millis(5));
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap_or_else(|e| panic!("{e}"))
            .block_on(SCENARIO_CALLS.scope(scenario.clone(), async {
                record(&run, "exec", Duration::from_millis(7));
            }));
        assert_eq!(
            run.snapshot()["exec"],
            CallCost {
                count: 2,
                total_ms: 12
            }
        );
        assert_eq!(
            scenario.snapshot()["exec"],
            CallCost {
                count: 1,
                total_ms: 7
            }
        );
    }
}
