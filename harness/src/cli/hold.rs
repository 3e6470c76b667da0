//! `run --hold-report`: after a run inside a Pod has published its report, the process (the
//! container's PID 1) stays up until `launch` has copied the report folder out, as Sonobuoy's
//! aggregator waits to be retrieved: a finished container's files cannot be read through the
//! API, only a running one's (exec). The exit code travels twice: in a file beside the folder
//! (`launch` reads it before copying) and as the process's own exit code.

use crate::backend::kube::launch::{HOLDING, exit_file, retrieved_file};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::Duration;

/// How often the marker file is looked for.
const POLL: Duration = Duration::from_millis(250);

/// Writes the exit file, logs the holding line (with the report's sha256, which `launch`
/// compares with the copy it retrieved), and waits until the folder was retrieved, a
/// SIGTERM or SIGINT arrives, or `bound` passes.
pub(crate) async fn hold(report_dir: &Path, run_id: &str, code: u8, bound: Duration) {
    if let Err(e) = std::fs::write(exit_file(report_dir, run_id), code.to_string()) {
        eprintln!("kandev-acceptance: could not write the exit file: {e}");
    }
    let report = report_dir.join(run_id).join("report.json");
    let sha = std::fs::read(&report)
        .map(|bytes| hex::encode(Sha256::digest(bytes)))
        .unwrap_or_else(|_| "none".into());
    eprintln!(
        "{HOLDING} {run_id} exit {code} report.json sha256 {sha}; waiting up to {}s for {}",
        bound.as_secs(),
        retrieved_file(report_dir, run_id).display()
    );
    let retrieved = retrieved_file(report_dir, run_id);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let signalled = async {
        match term.as_mut() {
            Some(t) => {
                t.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let looked_for = async {
        while !retrieved.exists() {
            tokio::time::sleep(POLL).await;
        }
    };
    let ended = tokio::select! {
        () = looked_for => "retrieved",
        () = signalled => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "SIGINT",
        () = tokio::time::sleep(bound) => "the hold's bound",
    };
    eprintln!("kandev-acceptance: hold of run {run_id} ended ({ended}); exit {code}");
}
