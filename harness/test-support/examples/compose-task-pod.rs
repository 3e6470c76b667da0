//! Prints (JSON) the task Pod `kandev-acceptance run --backend kube` would ask an API server
//! to create: the default full-worker template composed for one session, as
//! `harness/scripts/record-kube-fixtures.sh` records it against a real API server.
//!
//! `cargo run -q -p kandev-test-support --example compose-task-pod -- --namespace NS
//! [--claim NAME] [--worker-image REF] [--daemon-image REF]`

use kandev_test_support::cluster_double::recorded::composed_task_pod;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut namespace, mut claim) = (None, None);
    let mut worker = "kandev-acceptance/worker:recorded".to_owned();
    let mut daemon = "kandev-acceptance/daemon:recorded".to_owned();
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .ok_or_else(|| anyhow::anyhow!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--namespace" => namespace = Some(value()?),
            "--claim" => claim = Some(value()?),
            "--worker-image" => worker = value()?,
            "--daemon-image" => daemon = value()?,
            other => anyhow::bail!(
                "unknown argument {other:?}; expected --namespace NS [--claim NAME] [--worker-image REF] [--daemon-image REF]"
            ),
        }
    }
    let namespace = namespace.ok_or_else(|| anyhow::anyhow!("--namespace NS is required"))?;
    let pod = composed_task_pod(&namespace, claim.as_deref(), &worker, &daemon)?;
    println!("{}", serde_json::to_string_pretty(&pod)?);
    Ok(())
}
