//! The report folder out of the held run's Pod, as `sonobuoy retrieve` does: the exit file
//! read and the folder tarred through exec (a finished container's files are out of reach),
//! unpacked under the operator's report folder, its `report.json` compared with the sha256
//! the run logged; then the run is told it may exit.

use super::follow::Held;
use super::objects::{CONTAINER, LaunchPlan, REPORTS};
use super::{LaunchError, exit_file, retrieved_file};
use crate::backend::kube::{KubeBackend, ManagedPvc};
use crate::backend::{Backend, ExecRequest, PodRef};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::Duration;

/// Each exec's bound (the tar of a report folder with its evidence included).
const EXEC_BOUND: Duration = Duration::from_secs(120);

/// Copies the run's folder into `report_dir/<run id>/`, checks it, and ends the hold;
/// returns the run's exit code.
pub(super) async fn retrieve(
    admin: &kube::Client,
    plan: &LaunchPlan,
    held: &Held,
    report_dir: &Path,
) -> Result<u8, LaunchError> {
    let ns = plan.namespace();
    let backend = KubeBackend::new(admin.clone(), &ns, "kube", CONTAINER, ManagedPvc::default());
    let pod = PodRef {
        namespace: ns.clone(),
        name: held.pod.clone(),
        uid: held.uid.clone(),
    };
    let remote = Path::new(REPORTS);
    let exec = |argv: Vec<String>| {
        let (backend, pod) = (&backend, &pod);
        async move {
            let output = backend
                .exec(
                    pod,
                    ExecRequest {
                        container: CONTAINER.into(),
                        argv: argv.clone(),
                        stdin: None,
                        timeout: Some(EXEC_BOUND),
                    },
                )
                .await
                .map_err(|e| LaunchError::Retrieve(crate::error_chain(&e)))?;
            if !output.success() {
                return Err(LaunchError::Retrieve(format!(
                    "{argv:?} in {}: {}: {}",
                    pod.name,
                    output.exit_text(),
                    output.stderr_text().trim()
                )));
            }
            Ok(output.stdout)
        }
    };
    let code_text = exec(vec![
        "cat".into(),
        exit_file(remote, &plan.run_id).display().to_string(),
    ])
    .await?;
    let code: u8 = String::from_utf8_lossy(&code_text)
        .trim()
        .parse()
        .map_err(|_| LaunchError::Retrieve(format!("the exit file says {code_text:?}")))?;
    if code != held.code {
        return Err(LaunchError::Retrieve(format!(
            "the exit file says {code}, the holding line {}",
            held.code
        )));
    }
    let archive = exec(vec![
        "tar".into(),
        "cf".into(),
        "-".into(),
        "-C".into(),
        REPORTS.into(),
        plan.run_id.clone(),
    ])
    .await?;
    std::fs::create_dir_all(report_dir)
        .and_then(|()| tar::Archive::new(archive.as_slice()).unpack(report_dir))
        .map_err(|e| {
            LaunchError::Retrieve(format!(
                "unpack into {}: {e} (fix: pass a writable --report-dir DIR)",
                report_dir.display()
            ))
        })?;
    let report = report_dir.join(&plan.run_id).join("report.json");
    let sha = std::fs::read(&report)
        .map(|bytes| hex::encode(Sha256::digest(bytes)))
        .unwrap_or_else(|_| "none".into());
    if sha != held.report_sha256 {
        return Err(LaunchError::Retrieve(format!(
            "{} has sha256 {sha}, the run logged {}",
            report.display(),
            held.report_sha256
        )));
    }
    exec(vec![
        "touch".into(),
        retrieved_file(remote, &plan.run_id).display().to_string(),
    ])
    .await?;
    Ok(code)
}
