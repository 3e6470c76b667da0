//! The CI workflows' shapes that a run cannot show until it is too late: the nightly
//! `launch` job's time budget adds up (before: a 90-minute job held a Job deadline of
//! 3600 s and a hold of 600 s after a build and a preparation run, so a slow night was cut
//! mid-launch, before its clean-up steps).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_yaml::Value;

fn workflow(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.github/workflows")
        .join(name);
    serde_yaml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn minutes(value: &Value) -> Option<u64> {
    value.get("timeout-minutes").and_then(Value::as_u64)
}

/// The value of `--flag N` in a command, in seconds.
fn flag(command: &str, flag: &str) -> Option<u64> {
    let mut words = command.split_whitespace();
    words.find(|w| *w == flag)?;
    words.next()?.parse().ok()
}

#[test]
fn the_nightly_launch_jobs_time_budget_adds_up() {
    let nightly = workflow("nightly-kind.yml");
    let job = &nightly["jobs"]["launch"];
    let budget = minutes(job).expect("the launch job has a timeout-minutes");
    let steps = job["steps"].as_sequence().unwrap();
    let mut sum = 0;
    let mut launch_step = None;
    for step in steps {
        let name = step
            .get("name")
            .or_else(|| step.get("uses"))
            .and_then(Value::as_str)
            .unwrap_or("?");
        let Some(step_minutes) = minutes(step) else {
            panic!(
                "step {name:?} has no timeout-minutes: a stuck step would use the job's whole budget"
            )
        };
        sum += step_minutes;
        let run = step.get("run").and_then(Value::as_str).unwrap_or_default();
        if run.contains("cargo acceptance launch") {
            launch_step = Some((step_minutes, run.replace("\\\n", " ")));
        }
    }
    assert!(
        sum <= budget,
        "the steps' timeouts sum to {sum} minutes, over the job's {budget}"
    );
    let (launch_minutes, command) = launch_step.expect("a step runs `cargo acceptance launch`");
    let seconds = |name: &str| {
        flag(&command, name).unwrap_or_else(|| {
            panic!("the launch step names {name} explicitly (its budget is counted from it)")
        })
    };
    let (start, job_timeout, hold) = (
        seconds("--start-timeout"),
        seconds("--job-timeout"),
        seconds("--hold"),
    );
    // Five minutes beyond the Pod's start, the Job's deadline and the hold: the report's
    // retrieval and the removal of what launch created.
    let needed = start + job_timeout + hold + 300;
    assert!(
        launch_minutes * 60 >= needed,
        "the launch step's {launch_minutes} minutes hold less than start {start} s + Job deadline {job_timeout} s + hold {hold} s + 300 s"
    );
}
