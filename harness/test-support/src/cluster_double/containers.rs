//! The runtime's containers as the engine has them, read as a kubelet reads its container
//! runtime: each container's state with its start and finish times, and its log (whole, or
//! followed while the container runs). The local backend labels every container
//! with its Pod's UID, its Pod container name and its role (`init`, `container`, `infra`).

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::query_parameters::{InspectContainerOptions, ListContainersOptionsBuilder};
use futures_util::{Stream, StreamExt};
use hyper::body::Bytes;
use kandev_harness::backend::local::plan::{LABEL_CONTAINER, LABEL_POD_UID, LABEL_ROLE};
use std::collections::HashMap;

/// One container of a Pod as the engine has it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Observed {
    /// The Pod container's name.
    pub name: String,
    pub running: bool,
    /// Set once it has ended (and while the engine restarts it).
    pub exit_code: Option<i64>,
    pub oom_killed: bool,
    pub restarts: u32,
    /// RFC 3339 (seconds), as the API server writes times.
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// The engine's container ID (what its log is read by).
    pub id: String,
    /// The image the engine created it from (`sha256:<hex>`): the runtime's image ref.
    pub image_id: String,
}

/// An engine timestamp (RFC 3339 with nanoseconds, or the zero time for never) as the API
/// server writes one (seconds).
fn seconds(time: Option<String>) -> Option<String> {
    let time = time?;
    if time.starts_with("0001-") || time.len() < 19 {
        return None;
    }
    Some(format!("{}Z", &time[..19]))
}

/// Every container of the Pod of `uid` (its infra container left out: the double runs no
/// init containers).
pub(crate) async fn observe(docker: &Docker, uid: &str) -> Vec<Observed> {
    let filters = HashMap::from([("label", vec![format!("{LABEL_POD_UID}={uid}")])]);
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    let Ok(listed) = docker.list_containers(Some(options)).await else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for summary in listed {
        let labels = summary.labels.unwrap_or_default();
        if labels.get(LABEL_ROLE).map(String::as_str) != Some("container") {
            continue;
        }
        let Some(id) = summary.id else { continue };
        let Ok(inspect) = docker
            .inspect_container(&id, None::<InspectContainerOptions>)
            .await
        else {
            continue;
        };
        let state = inspect.state.unwrap_or_default();
        let running = state.running == Some(true);
        let ended = !running
            && seconds(state.finished_at.clone()).is_some()
            && seconds(state.started_at.clone()).is_some();
        found.push(Observed {
            name: labels.get(LABEL_CONTAINER).cloned().unwrap_or_default(),
            running,
            exit_code: if ended { state.exit_code } else { None },
            oom_killed: state.oom_killed == Some(true),
            restarts: inspect
                .restart_count
                .and_then(|r| u32::try_from(r).ok())
                .unwrap_or(0),
            started_at: seconds(state.started_at),
            finished_at: seconds(state.finished_at),
            id,
            image_id: inspect.image.unwrap_or_default(),
        });
    }
    found
}

/// What a log request asks for (`follow`, `sinceSeconds`: what the harness sends).
#[derive(Debug, Clone, Default)]
pub(crate) struct LogQuery {
    pub follow: bool,
    pub since_seconds: Option<u64>,
}

/// The container's log (stdout and stderr as written, interleaved as the kubelet's log
/// file has them): what it holds now, or with `follow` also what it writes until it ends.
pub(crate) fn log(
    docker: &Docker,
    id: &str,
    query: &LogQuery,
) -> impl Stream<Item = Bytes> + Send + 'static {
    let since = query
        .since_seconds
        .and_then(|s| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_secs();
            i32::try_from(now.saturating_sub(s)).ok()
        })
        .unwrap_or(0);
    let options = bollard::query_parameters::LogsOptionsBuilder::default()
        .follow(query.follow)
        .stdout(true)
        .stderr(true)
        .since(since)
        .build();
    docker
        .logs(id, Some(options))
        .take_while(|chunk| std::future::ready(chunk.is_ok()))
        .filter_map(|chunk| {
            std::future::ready(match chunk {
                Ok(
                    LogOutput::StdOut { message }
                    | LogOutput::StdErr { message }
                    | LogOutput::Console { message },
                ) => Some(message),
                _ => None,
            })
        })
}
