//! The run's cost on the console.

pub use kandev_report::{CallCost, Calls, EngineCpu, RunCost};
/// One line for the console: `harness 2.1 s CPU, engine 24.3 s, machine 58.0 s busy; 131 exec, ...`.
pub fn console_line(cost: &RunCost) -> String {
    let s = |ms: u64| format!("{:.1} s", ms as f64 / 1000.0);
    let mut parts = vec![format!("harness {} CPU", s(cost.harness_cpu_ms))];
    if let Some(engine) = &cost.engine {
        parts.push(format!("engine {}", s(engine.cpu_ms)));
    }
    if let Some(busy) = cost.machine_busy_ms {
        parts.push(format!("machine {} busy", s(busy)));
    }
    let mut calls: Vec<_> = cost.calls.iter().collect();
    calls.sort_by_key(|(_, c)| std::cmp::Reverse(c.count));
    let calls: Vec<String> = calls
        .iter()
        .take(6)
        .map(|(kind, c)| format!("{} {kind}", c.count))
        .collect();
    format!("{}; calls: {}", parts.join(", "), calls.join(", "))
}

