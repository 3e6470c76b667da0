//! Following the Job's Pod: its start (an image the node cannot pull, a Pod that never
//! starts), its log printed as it comes, and the run's holding line; Ctrl-C asks the run to
//! stop (SIGTERM to the harness, PID 1), a second one gives up.

use super::LaunchError;
use super::objects::{CONTAINER, LaunchPlan};
use crate::backend::kube::errors::ClusterError;
use crate::backend::kube::{CannotStart, KubeBackend};
use futures_util::AsyncBufReadExt;
use futures_util::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, ListParams, LogParams};
use kube::{Client, ResourceExt};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// How often the Job and its Pod are read.
const POLL: Duration = Duration::from_secs(1);

/// How long an interrupted run may take to tear down, publish and hold.
const INTERRUPT_BOUND: Duration = Duration::from_secs(180);

/// How often the log is followed again after its stream ended while the harness ran.
const MAX_RECONNECTS: u32 = 20;

/// How many of the Pod's last log lines an early end quotes.
const TAIL: usize = 25;

/// The finished run, holding its report folder for retrieval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The Job's Pod (name and UID).
    pub pod: String,
    pub uid: String,
    pub code: u8,
    /// The sha256 of `report.json` the run computed (`none` when it wrote none).
    pub report_sha256: String,
}

/// The run's holding line (`kandev-acceptance: holding run ID exit N report.json sha256 H;
/// ...`): its exit code and the report's sha256, when it is that line of run `run_id`.
pub fn parse_holding(line: &str, run_id: &str) -> Option<(u8, String)> {
    let rest = line
        .split_once(super::HOLDING)?
        .1
        .trim_start()
        .strip_prefix(run_id)?;
    let words: Vec<&str> = rest.split_whitespace().collect();
    match words.as_slice() {
        ["exit", code, "report.json", "sha256", sha, ..] => {
            Some((code.parse().ok()?, sha.trim_end_matches(';').to_owned()))
        }
        _ => None,
    }
}

/// Ctrl-C presses seen since the launch began.
#[derive(Clone, Default)]
pub struct Interrupts(Arc<AtomicUsize>);

impl Interrupts {
    /// Counts Ctrl-C presses (SIGINT) from now on: the handler is registered before this
    /// returns, so none is lost to the default one, which would end the process mid-create.
    pub fn listen() -> Self {
        let seen = Self::default();
        let counter = seen.0.clone();
        let Ok(mut interrupts) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        else {
            return seen;
        };
        tokio::spawn(async move {
            while interrupts.recv().await.is_some() {
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                if n == 1 {
                    eprintln!(
                        "\nlaunch: interrupted: a started run is asked to stop and tear down (SIGTERM), one not started yet is not begun; interrupt again to remove everything at once"
                    );
                }
            }
        });
        seen
    }

    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// Waits for the Job's Pod to start, prints its log as it comes, and returns once the run
/// holds its report; an early end, a Pod that cannot start or the Job's deadline is an
/// error naming what the Pod said last.
pub(super) async fn follow(
    admin: &Client,
    plan: &LaunchPlan,
    interrupts: &Interrupts,
) -> Result<Held, LaunchError> {
    let ns = plan.namespace();
    let job_name = plan.job_name();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(admin.clone(), &ns);
    let selector = ListParams::default().labels(&format!("job-name={job_name}"));
    let started = Instant::now();
    let read = |what: String| {
        move |e: kube::Error| ClusterError::Setup {
            what,
            source: e.into(),
        }
    };
    let (lines_tx, mut lines) = mpsc::channel::<LogEvent>(256);
    let mut following: Option<(String, String)> = None;
    let mut tail: VecDeque<String> = VecDeque::new();
    let mut log_ended = false;
    let mut signalled_at: Option<Instant> = None;
    let mut reconnects = 0;
    let mut log_refused: Option<String> = None;
    let mut ticker = tokio::time::interval(POLL);
    loop {
        tokio::select! {
            event = lines.recv(), if following.is_some() && !log_ended => {
                match event {
                    Some(LogEvent::Line(line)) => {
                        eprintln!("{line}");
                        if let (Some((code, sha)), Some((pod, uid))) = (parse_holding(&line, &plan.run_id), &following) {
                            return Ok(Held { pod: pod.clone(), uid: uid.clone(), code, report_sha256: sha });
                        }
                        if tail.len() == TAIL {
                            tail.pop_front();
                        }
                        tail.push_back(line);
                    }
                    Some(LogEvent::Refused(why)) => {
                        log_ended = true;
                        log_refused = Some(why);
                    }
                    Some(LogEvent::Ended(why)) | Some(LogEvent::Failed(why)) => {
                        log_ended = true;
                        if let Some(why) = why {
                            eprintln!("launch: the Pod's log stream ended: {why}");
                        }
                    }
                    None => log_ended = true,
                }
                continue;
            }
            _ = ticker.tick() => {}
        }
        if interrupts.count() >= 2 {
            return Err(LaunchError::Interrupted);
        }
        let job = jobs
            .get_opt(&job_name)
            .await
            .map_err(read(format!("get job {job_name}")))?;
        if let Some(timed_out) = past_deadline(job.as_ref(), plan, &tail) {
            return Err(timed_out);
        }
        let pod = pods
            .list(&selector)
            .await
            .map_err(read(format!("list the Pods of job {job_name}")))?
            .items
            .into_iter()
            .next();
        let Some(pod) = pod else {
            if interrupts.count() > 0 {
                return Err(LaunchError::Interrupted);
            }
            if started.elapsed() > plan.start_timeout {
                let state = job
                    .and_then(|j| failed_condition(&j))
                    .map(|(reason, message)| format!("{reason}: {message}"))
                    .unwrap_or_else(|| "the Job created no Pod".into());
                return Err(LaunchError::StartTimedOut {
                    waited: plan.start_timeout,
                    state,
                    namespace: ns,
                });
            }
            continue;
        };
        if let Some(cause) = KubeBackend::why_cannot_start(&pod) {
            let fix = match &cause {
                // A registry that wants credentials: a pull secret, which launch copies and
                // the Job's Pod carries.
                CannotStart::PullRefusedCredentials(_) => {
                    crate::backend::kube::pull_secrets::AUTH_FIX.to_owned()
                }
                CannotStart::Config(_) => "the Pod's configuration names what is missing (a Secret, a variable); see `kubectl describe pod`".to_owned(),
                CannotStart::Image(_) | CannotStart::NoNodeMatches(_) => format!(
                    "push it where the cluster's nodes pull from and pass that reference to --harness-image (Kind: `docker save {0} -o h.tar && kind load image-archive h.tar`)",
                    plan.harness_image
                ),
            };
            return Err(LaunchError::ImageCannotStart {
                image: plan.harness_image.clone(),
                reason: cause.cause().to_owned(),
                fix,
            });
        }
        let phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let started_container = matches!(phase.as_str(), "Running" | "Succeeded" | "Failed");
        if !started_container {
            if interrupts.count() > 0 {
                return Err(LaunchError::Interrupted);
            }
            // The start bound is for a Pod that never started: one already followed that
            // reads Pending for a moment (a node slow to report) is still the same run.
            if following.is_none() && started.elapsed() > plan.start_timeout {
                return Err(LaunchError::StartTimedOut {
                    waited: plan.start_timeout,
                    state: KubeBackend::waiting_reason(&pod, CONTAINER),
                    namespace: ns,
                });
            }
            continue;
        }
        let (name, uid) = (pod.name_any(), pod.uid().unwrap_or_default());
        if let Some(why) = &log_refused {
            return Err(LaunchError::LogUnreadable(why.clone()));
        }
        if following.is_none() || (log_ended && phase == "Running") {
            reconnects += 1;
            if reconnects > MAX_RECONNECTS {
                return Err(LaunchError::LogUnreadable(format!(
                    "the log stream ended {MAX_RECONNECTS} times while the harness ran"
                )));
            }
            // A log stream dropped while the harness still runs: follow again, from a few
            // seconds back (some lines are shown twice rather than lost).
            let since = following.is_some().then_some(10);
            if since.is_some() {
                eprintln!("launch: following the log again (the last 10 s are shown again)");
            }
            tokio::spawn(stream_log(
                pods.clone(),
                name.clone(),
                since,
                lines_tx.clone(),
            ));
            following = Some((name.clone(), uid.clone()));
            log_ended = false;
        }
        if interrupts.count() == 1 && signalled_at.is_none() && phase == "Running" {
            signalled_at = Some(Instant::now());
            signal_run(&pods, &name).await;
        }
        if let Some(at) = signalled_at
            && at.elapsed() > INTERRUPT_BOUND
        {
            return Err(LaunchError::StopTimedOut {
                waited: INTERRUPT_BOUND,
            });
        }
        if phase != "Running" && log_ended {
            // The Job controller may have killed the Pod for its deadline after the Job was
            // read above: read it again before calling this the harness's own end.
            let job = jobs
                .get_opt(&job_name)
                .await
                .map_err(read(format!("get job {job_name}")))?;
            if let Some(timed_out) = past_deadline(job.as_ref(), plan, &tail) {
                return Err(timed_out);
            }
            let terminated = pod
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.iter().find(|c| c.name == CONTAINER))
                .and_then(|c| c.state.as_ref())
                .and_then(|s| s.terminated.clone());
            return Err(LaunchError::HarnessEnded {
                ended: match &terminated {
                    Some(t) => format!(
                        "phase {phase}, exit {} {}",
                        t.exit_code,
                        t.reason.clone().unwrap_or_default()
                    ),
                    None => format!("phase {phase}"),
                },
                code: terminated.map(|t| t.exit_code),
                tail: joined(&tail),
            });
        }
    }
}

enum LogEvent {
    Line(String),
    /// The stream ended (the container ended, or the connection dropped).
    Ended(Option<String>),
    Failed(Option<String>),
    /// The API server refuses the log to this identity (401, 403): following again is useless.
    Refused(String),
}

/// Streams the harness container's log into `lines` until it ends.
async fn stream_log(
    pods: Api<Pod>,
    name: String,
    since_seconds: Option<i64>,
    lines: mpsc::Sender<LogEvent>,
) {
    let params = LogParams {
        container: Some(CONTAINER.into()),
        follow: true,
        since_seconds,
        ..Default::default()
    };
    let stream = match pods.log_stream(&name, &params).await {
        Ok(stream) => stream,
        Err(e) => {
            let why = crate::error_chain(&e);
            let refused =
                matches!(&e, kube::Error::Api(status) if [401, 403].contains(&status.code));
            let event = if refused {
                LogEvent::Refused(why)
            } else {
                LogEvent::Failed(Some(why))
            };
            let _ = lines.send(event).await;
            return;
        }
    };
    let mut stream = stream.lines();
    while let Some(line) = stream.next().await {
        match line {
            Ok(line) => {
                if lines.send(LogEvent::Line(line)).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = lines.send(LogEvent::Ended(Some(e.to_string()))).await;
                return;
            }
        }
    }
    let _ = lines.send(LogEvent::Ended(None)).await;
}

/// Asks the run to stop: SIGTERM to the harness (its container's PID 1, which handles it as
/// Ctrl-C: teardown, report, hold). Through `sh`: the image has no `kill` binary (procps),
/// the shell has it built in.
async fn signal_run(pods: &Api<Pod>, name: &str) {
    // (kube-rs refuses an exec without a stream; `kill` writes to stderr only on failure.)
    let params = AttachParams::default().container(CONTAINER);
    let failed = |why: String| eprintln!("launch: could not signal the run: {why}");
    match pods.exec(name, ["sh", "-c", "kill -TERM 1"], &params).await {
        Ok(mut attached) => {
            let status = attached.take_status();
            let mut stderr = String::new();
            if let Some(mut err) = attached.stderr() {
                use tokio::io::AsyncReadExt;
                let _ = err.read_to_string(&mut stderr).await;
            }
            let status = match status {
                Some(status) => status.await,
                None => None,
            };
            let _ = attached.join().await;
            if status.as_ref().and_then(|s| s.status.as_deref()) != Some("Success") {
                failed(format!("{status:?} {}", stderr.trim()));
            }
        }
        Err(e) => failed(crate::error_chain(&e)),
    }
}

/// The Job ended for its deadline (`--job-timeout` and `--hold`), with the last lines.
fn past_deadline(
    job: Option<&Job>,
    plan: &LaunchPlan,
    tail: &VecDeque<String>,
) -> Option<LaunchError> {
    let (reason, message) = job.and_then(failed_condition)?;
    (reason == "DeadlineExceeded").then(|| LaunchError::JobTimedOut {
        timeout: plan.job_timeout + plan.hold,
        state: format!("{reason}: {message}; last lines:\n{}", joined(tail)),
    })
}

/// The Job's failure, reason and message: its `Failed` condition, or the interim
/// `FailureTarget` the Job controller writes first. Since Kubernetes 1.31 a Job past its
/// deadline gets `FailureTarget` (reason `DeadlineExceeded`), then its Pods are killed, and
/// only after their finalizers are gone `Failed` (`pkg/controller/job/job_controller.go`:
/// `newFailureCondition`, `newFailedConditionForFailureTarget`): read alone, `Failed` comes
/// after the Pod has already ended.
fn failed_condition(job: &Job) -> Option<(String, String)> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    ["Failed", "FailureTarget"]
        .iter()
        .find_map(|kind| {
            conditions
                .iter()
                .find(|c| c.type_ == *kind && c.status == "True")
        })
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

fn joined(tail: &VecDeque<String>) -> String {
    tail.iter()
        .map(|l| format!("  | {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holding_line_gives_the_code_and_sha() {
        let line = "kandev-acceptance: holding run 20261202t1-abc exit 1 report.json sha256 ab12; waiting up to 600s for /reports/x.retrieved";
        assert_eq!(
            parse_holding(line, "20261202t1-abc"),
            Some((1, "ab12".into()))
        );
        assert_eq!(parse_holding(line, "other"), None);
        assert_eq!(parse_holding("holding run x exit 0", "x"), None);
    }

    /// As a 1.31+ Job controller writes them past the deadline: `FailureTarget` first (the
    /// Pod is then killed), `Failed` once its finalizers are gone; either names the deadline.
    #[test]
    fn a_jobs_deadline_is_read_from_failure_target_before_failed() {
        let job = |conditions: &[(&str, &str)]| -> Job {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "j"},
                "status": {"conditions": conditions.iter().map(|(kind, status)| serde_json::json!({
                    "type": kind, "status": status, "reason": "DeadlineExceeded",
                    "message": "Job was active longer than specified deadline"
                })).collect::<Vec<_>>()}
            }))
            .unwrap()
        };
        for conditions in [
            &[("FailureTarget", "True")][..],
            &[("FailureTarget", "True"), ("Failed", "True")][..],
        ] {
            assert_eq!(
                failed_condition(&job(conditions)),
                Some((
                    "DeadlineExceeded".into(),
                    "Job was active longer than specified deadline".into()
                )),
                "{conditions:?}"
            );
        }
        assert_eq!(failed_condition(&job(&[("FailureTarget", "False")])), None);
        assert_eq!(failed_condition(&job(&[])), None);
    }
}
