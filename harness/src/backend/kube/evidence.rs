//! What the operator's identity reads for a scenario that did not pass or a check that
//! needs it (Kandev's Role grants none of it): container logs, the Pod object, its events and
//! previous logs, and the Services that expose the Pod.

use super::backend::KubeBackend;
use super::errors::other;
use super::pods;
use crate::backend::{BackendError, PodRef, Result};
use crate::wait::WaitTimedOut;
use k8s_openapi::api::core::v1::{Event, Service};
use kube::ResourceExt;
use kube::api::{Api, ListParams, LogParams};
use std::time::Duration;

/// The deadline of a log read (the evidence of a failed scenario).
const LOGS_DEADLINE: Duration = Duration::from_secs(60);

/// A container's logs (up to 1 MiB), within [`LOGS_DEADLINE`].
pub(super) async fn logs(backend: &KubeBackend, pod: &PodRef, container: &str) -> Result<String> {
    let (pods, params) = (
        backend.admin_pods(),
        LogParams {
            container: Some(container.to_owned()),
            limit_bytes: Some(1 << 20),
            ..Default::default()
        },
    );
    let read = pods.logs(&pod.name, &params);
    tokio::time::timeout(LOGS_DEADLINE, read)
        .await
        .map_err(|_| {
            BackendError::from(WaitTimedOut {
                what: format!("the logs of {}/{container}", pod.name),
                waited: LOGS_DEADLINE,
            })
        })?
        .map_err(|e| other(format!("logs of {}/{container}", pod.name), e))
}

/// The Pod object (YAML), its events and the previous logs of every container.
pub(super) async fn diagnostics(backend: &KubeBackend, pod: &PodRef) -> Vec<(String, String)> {
    let mut files = Vec::new();
    if let Ok(Some(mut found)) = backend.admin_pods().get_opt(&pod.name).await {
        found.metadata.managed_fields = None;
        let mut names: Vec<String> = Vec::new();
        if let Some(spec) = &found.spec {
            names.extend(
                spec.init_containers
                    .iter()
                    .flatten()
                    .map(|c| c.name.clone()),
            );
            names.extend(spec.containers.iter().map(|c| c.name.clone()));
        }
        for name in names {
            let previous = LogParams {
                container: Some(name.clone()),
                previous: true,
                limit_bytes: Some(1 << 20),
                ..Default::default()
            };
            let pods = backend.admin_pods();
            let read = pods.logs(&pod.name, &previous);
            if let Ok(Ok(text)) = tokio::time::timeout(LOGS_DEADLINE, read).await {
                files.push((format!("{name}.previous.log"), text));
            }
        }
        files.push((
            "pod.yaml".into(),
            serde_yaml::to_string(&found).unwrap_or_default(),
        ));
    }
    let events: Api<Event> = Api::namespaced(backend.admin.clone(), &backend.namespace);
    let selector = ListParams::default().fields(&format!("involvedObject.uid={}", pod.uid));
    match events.list(&selector).await {
        Ok(list) => {
            let lines: Vec<String> = list.items.iter().map(event_line).collect();
            files.push(("events.txt".into(), lines.join("\n")));
        }
        // Kandev's Role grants no events; the run's setup identity may read them.
        Err(e) => files.push(("events.txt".into(), format!("(events not readable: {e})"))),
    }
    files
}

/// One event as a line: `<time> <type> <reason> x<count>: <message>`. Events written through
/// `events.k8s.io/v1` (the scheduler's and, since 1.25, much of the kubelet's) read back in
/// core/v1 with `lastTimestamp` and `count` null: their time is the series' last observation
/// or `eventTime`, their count the series' (k8s.io/api events/v1 types.go: "deprecatedLastTimestamp",
/// "series"; kubernetes pkg/apis/core/validation/events.go accepts either form).
fn event_line(e: &Event) -> String {
    let time = e
        .last_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .or_else(|| {
            e.series
                .as_ref()
                .and_then(|s| s.last_observed_time.as_ref())
                .map(|t| t.0.to_string())
        })
        .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
        .or_else(|| e.first_timestamp.as_ref().map(|t| t.0.to_string()))
        .unwrap_or_else(|| "(no time)".into());
    let count = e
        .count
        .or_else(|| e.series.as_ref().and_then(|s| s.count))
        .unwrap_or(1);
    format!(
        "{time} {} {} x{count}: {}",
        e.type_.clone().unwrap_or_default(),
        e.reason.clone().unwrap_or_default(),
        e.message.clone().unwrap_or_default()
    )
}

/// Services selecting the Pod, or labelled with its task.
pub(super) async fn exposures(backend: &KubeBackend, pod: &PodRef) -> Result<Vec<String>> {
    // Kandev's Role grants no Services at all: seen with the operator's identity.
    let labels = pods::object(backend, pod)
        .await?
        .and_then(|p| p.metadata.labels)
        .unwrap_or_default();
    let services: Api<Service> = Api::namespaced(backend.admin.clone(), &backend.namespace);
    let listed = services
        .list(&ListParams::default())
        .await
        .map_err(|e| other("list services", e))?;
    Ok(listed
        .items
        .iter()
        .filter_map(|s| {
            let selector = s.spec.as_ref()?.selector.clone()?;
            let selects =
                !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v));
            // A Service labelled with the Pod's task is Kandev's too, selector or not.
            let task = "kandev.ai/task-id";
            let labelled = labels
                .get(task)
                .is_some_and(|t| s.metadata.labels.as_ref().and_then(|l| l.get(task)) == Some(t));
            (selects || labelled)
                .then(|| format!("service/{}: selector {selector:?}", s.name_any()))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::event_line;
    use k8s_openapi::api::core::v1::{Event, EventSeries};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    #[test]
    fn an_event_written_through_events_v1_keeps_its_time_and_count() {
        let at: MicroTime = serde_json::from_str("\"2026-12-06T01:02:03.000004Z\"").unwrap();
        let mut e = Event {
            event_time: Some(at.clone()),
            type_: Some("Warning".into()),
            reason: Some("FailedScheduling".into()),
            message: Some("0/1 nodes are available".into()),
            ..Default::default()
        };
        let line = event_line(&e);
        assert!(line.starts_with("2026-12-06T01:02:03"), "{line}");
        assert!(
            line.ends_with("Warning FailedScheduling x1: 0/1 nodes are available"),
            "{line}"
        );
        e.series = Some(EventSeries {
            count: Some(4),
            last_observed_time: Some(at),
        });
        assert!(event_line(&e).contains(" x4: "), "{}", event_line(&e));
    }

    /// As the API server serves an events/v1 event in core/v1: `lastTimestamp` and `count`
    /// null, the time in `eventTime`; an old-style event keeps its `lastTimestamp`.
    #[test]
    fn event_time_stands_in_for_a_null_last_timestamp() {
        let served: Event = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p.1", "namespace": "n"},
            "involvedObject": {"kind": "Pod", "name": "p", "uid": "u"},
            "reason": "Scheduled", "message": "assigned n/p to node", "type": "Normal",
            "firstTimestamp": null, "lastTimestamp": null, "count": null,
            "eventTime": "2026-12-06T05:06:07.123456Z",
            "reportingComponent": "default-scheduler", "reportingInstance": "default-scheduler-cp",
        }))
        .unwrap();
        assert_eq!(
            event_line(&served),
            "2026-12-06T05:06:07.123456Z Normal Scheduled x1: assigned n/p to node"
        );
        let old: Event = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p.2", "namespace": "n"},
            "involvedObject": {"kind": "Pod", "name": "p", "uid": "u"},
            "reason": "BackOff", "message": "back-off", "type": "Warning",
            "firstTimestamp": "2026-12-06T05:00:00Z", "lastTimestamp": "2026-12-06T05:09:00Z",
            "count": 3, "eventTime": null,
        }))
        .unwrap();
        assert_eq!(
            event_line(&old),
            "2026-12-06T05:09:00Z Warning BackOff x3: back-off"
        );
    }
}
