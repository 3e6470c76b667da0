//! `launch::contract` — what Kandev's Kind suite checks of a launched task Pod (foundation
//! item 13), from the running Pod as the backend reads it back: its owned labels and
//! `kandev.ai/*` annotations exactly as composed (the create nonce included);
//! `automountServiceAccountToken: false` and no service-account token in any container;
//! nothing exposing the Pod (no Service; locally no published port); the control port reached
//! through the backend's forward and bound on loopback only. Kandev's launch timing records for
//! the session are kept as evidence (their shape is a unit test of `session::timing`).
//! On the local backend the labels and the exposure are read but not judged: the harness is
//! the only thing there that writes them.
//!
//! What `daemon::socket_only` already judges is not judged again: the agent's own token and
//! identity (`agent_unprivileged`), and listeners other than the control port
//! (`no_tcp_listener`).

use k8s_openapi::api::core::v1::Pod;
use kandev_harness::backend::BackendKind;
use kandev_harness::backend::ExecRequest;
use kandev_harness::pod::template::is_owned_label;
use kandev_harness::runner::{
    Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, not_judged_lacking, promise,
    raise_platform_fault,
};
use kandev_harness::session::SessionOptions;
use kandev_report::Capability;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

const LABELS: Check = Check {
    id: "labels_as_composed",
    promise: "the running Pod's owned labels and kandev.ai annotations (the create nonce included) are exactly the composed ones",
    // Only a cluster breaks it (something that rewrites a running Pod's owned labels or
    // kandev.ai annotations after admission; a mutating admission is caught at create by the
    // admission comparison): Kandev's rules refuse a template's kandev.ai or owned labels, and
    // a Pod has no API credentials to relabel itself.
    twin: Twin::Cluster(
        "a_cluster_that_relabels_running_pods_fails_labels_as_composed_on_kube_double",
    ),
};
const NO_TOKEN: Check = Check {
    id: "no_token_anywhere",
    promise: "the running Pod has automountServiceAccountToken: false and no container has a service-account token",
    twin: Twin::Template("companion-service-account-token"),
};
const NO_SERVICE: Check = Check {
    id: "no_service",
    promise: "nothing exposes the Pod beyond the backend's forward: no Service selects it (local: no port published from any of its containers)",
    // Only a cluster breaks it (a Service someone else creates that selects the task Pod):
    // Kandev creates no Service, its rules refuse a template's hostPort, its Role grants no
    // Services, the Pod has no API credentials, and the local backend publishes no port.
    twin: Twin::Cluster("a_cluster_that_exposes_task_pods_fails_no_service_on_kube_double"),
};
const FORWARD: Check = Check {
    id: "forward_loopback",
    promise: "the control port answers through the backend's forward and agentctl listens on 127.0.0.1 only",
    twin: Twin::Prepare("agent-listens-everywhere"),
};

/// Why the local backend leaves `labels_as_composed` not judged.
const LOCAL_LABELS: &str = "the local backend labels the Pod's containers itself and has no API server or admission between the composed and the running Pod: only the harness could change them (a cluster judges this: --backend kind or kube)";
/// Why the local backend leaves `no_service` not judged.
const LOCAL_EXPOSURE: &str = "the local backend has no Services and publishes no port itself; only the harness could expose the Pod (a cluster judges this: --backend kind or kube)";

/// The token a service-account volume puts in a container.
const TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

pub fn scenario() -> Scenario {
    Scenario {
        name: "launch::contract",
        promise: "the launched Pod is exactly as composed: owned labels and annotations, no service-account token anywhere, no Service, a loopback-only control port reached through the forward; the launch's timing records kept as evidence",
        checks: &[LABELS, NO_TOKEN, NO_SERVICE, FORWARD],
        timeout: Duration::from_secs(300),
        starts_first: false,
        run,
    }
}

fn annotations(pod: &Pod) -> BTreeMap<String, String> {
    pod.metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k.starts_with("kandev.ai/"))
        .collect()
}

fn owned(pod: &Pod) -> BTreeMap<String, String> {
    pod.metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| is_owned_label(k))
        .collect()
}

fn differences(
    what: &str,
    composed: &BTreeMap<String, String>,
    running: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut out: Vec<String> = composed
        .iter()
        .filter(|(k, v)| running.get(*k) != Some(*v))
        .map(|(k, v)| {
            format!(
                "{what} {k}: composed {v:?}, running {}",
                running
                    .get(k)
                    .map_or_else(|| "(absent)".to_owned(), |r| format!("{r:?}"))
            )
        })
        .collect();
    out.extend(
        running
            .iter()
            .filter(|(k, _)| !composed.contains_key(*k))
            .map(|(k, v)| format!("{what} {k}={v:?} added")),
    );
    out
}

/// Where the running Pod's owned labels and `kandev.ai/*` annotations differ from the
/// composed Pod's, both ways (empty: exactly as composed).
pub fn composition_drift(composed: &Pod, running: &Pod) -> Vec<String> {
    let mut out = differences("label", &owned(composed), &owned(running));
    out.extend(differences(
        "annotation",
        &annotations(composed),
        &annotations(running),
    ));
    out
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        ctx.step("launch");
        let session = ctx.launch(SessionOptions::default()).await?;
        let backend = ctx.backend();

        ctx.step("the running Pod, read back");
        let running = backend
            .pod_object(&session.pod)
            .await?
            .ok_or_else(|| anyhow::anyhow!("pod {} is gone", session.pod.name))?;
        let drift = composition_drift(&session.pod_spec, &running);
        ctx.evidence(
            "running_pod_metadata",
            json!({"owned_labels": owned(&running), "kandev_annotations": annotations(&running)}),
        );
        // Locally the harness is the only writer of what these two checks read (it labels the
        // containers it creates and publishes no port), so a pass there would only be the
        // harness agreeing with itself: judged on a cluster, where an API server, admission
        // and other controllers stand between the composed and the running Pod.
        let local = ctx.config().backend == BackendKind::Local;
        if local {
            not_judged_lacking(&LABELS, Capability::Cluster, LOCAL_LABELS);
        } else {
            promise(drift.is_empty(), &LABELS, || drift.join("; "))?;
        }

        ctx.step("no service-account token in any container");
        let spec = running.spec.clone().unwrap_or_default();
        let automount = spec.automount_service_account_token;
        let mut tokens = Vec::new();
        let mut seen = BTreeMap::new();
        for c in &spec.containers {
            let request = ExecRequest::new(
                &c.name,
                &[
                    "sh",
                    "-c",
                    "if [ -e \"$1\" ]; then echo present; else echo absent; fi; grep -c serviceaccount /proc/self/mountinfo || true",
                    "sh",
                    TOKEN,
                ],
            )
            .timeout(Duration::from_secs(20));
            let out = backend.exec(&session.pod, request).await?;
            let text = out.stdout_text();
            let mut lines = text.lines();
            let file = lines.next().unwrap_or_default().trim().to_owned();
            let mounts: u32 = lines.next().unwrap_or("0").trim().parse().unwrap_or(0);
            seen.insert(
                c.name.clone(),
                json!({"token": file, "serviceaccount_mounts": mounts}),
            );
            if !out.success() || file != "absent" || mounts > 0 {
                tokens.push(format!(
                    "{}: token {file:?}, service-account mounts {mounts} ({})",
                    c.name,
                    out.exit_text()
                ));
            }
        }
        ctx.evidence("automount_service_account_token", automount);
        ctx.evidence("token_per_container", &seen);
        promise(
            automount == Some(false) && tokens.is_empty(),
            &NO_TOKEN,
            || {
                format!(
                    "automountServiceAccountToken {}; {}",
                    crate::support::or_unknown(automount),
                    tokens.join("; ")
                )
            },
        )?;

        ctx.step("nothing exposes the Pod");
        let exposures = backend.pod_exposures(&session.pod).await?;
        ctx.evidence(
            "exposures",
            json!({
                "found": exposures,
                "looked_at": if backend.name() == "local" {
                    "the engine's published ports of every container of the Pod (the local backend has no Services)"
                } else {
                    "every Service in the namespace, by selector and kandev.ai/task-id label (operator identity)"
                },
            }),
        );
        if local {
            // The evidence is still read and kept: a port found is a harness defect to see.
            not_judged_lacking(&NO_SERVICE, Capability::Cluster, LOCAL_EXPOSURE);
        } else {
            promise(exposures.is_empty(), &NO_SERVICE, || {
                format!("exposed: {exposures:?}")
            })?;
        }

        ctx.step("the control port: forward and loopback listener");
        // A lost API server is the cluster's error, not the forward's.
        let health = raise_platform_fault(session.agent()?.health().await)?;
        let net = session
            .agent_sh(
                "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null",
                Duration::from_secs(20),
            )
            .await?;
        let listeners = crate::daemon::socket_only::tcp_listeners(&net.stdout);
        let control: Vec<&String> = listeners
            .iter()
            .filter(|l| l.rsplit_once(':').is_some_and(|(_, p)| p == "8765"))
            .collect();
        ctx.evidence(
            "control_port",
            json!({"health_through_forward": health.as_ref().map_err(|e| format!("{e:#}")), "listeners_on_8765": control}),
        );
        promise(
            health.is_ok() && !control.is_empty() && control.iter().all(|l| *l == "127.0.0.1:8765"),
            &FORWARD,
            || {
                format!(
                    "through the forward: {}; agentctl listens on {control:?}",
                    health
                        .as_ref()
                        .map_or_else(|e| format!("no answer ({e:#})"), |_| "answered".into())
                )
            },
        )?;

        // Kandev's timing records of this launch, as evidence: only the harness's mirror of
        // the launch writes them, so their shape is unit-tested (session::timing), not a check.
        ctx.step("the launch's timing records");
        ctx.evidence("launch_records", ctx.launch_records(&session.identity));
        Ok(Verdict::Passed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Pod {
        let map = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            )
        };
        Pod {
            metadata: ObjectMeta {
                labels: map(labels),
                annotations: map(annotations),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn drift_is_found_both_ways_and_foreign_keys_are_ignored() {
        let composed = pod(
            &[
                ("app.kubernetes.io/managed-by", "kandev"),
                ("kandev.ai/task-id", "t1"),
            ],
            &[("kandev.ai/create-nonce", "n1")],
        );
        let same = pod(
            &[
                ("app.kubernetes.io/managed-by", "kandev"),
                ("kandev.ai/task-id", "t1"),
                ("acceptance.kandev.ai/run", "r"),
            ],
            &[("kandev.ai/create-nonce", "n1"), ("other/x", "y")],
        );
        assert!(composition_drift(&composed, &same).is_empty());
        let mutated = pod(
            &[
                ("app.kubernetes.io/managed-by", "kandev"),
                ("kandev.ai/task-id", "t2"),
                ("kandev.ai/foreign-owner", "true"),
            ],
            &[],
        );
        let drift = composition_drift(&composed, &mutated);
        assert_eq!(drift.len(), 3, "{drift:?}");
        assert!(drift.iter().any(|d| d.contains("kandev.ai/task-id")));
        assert!(drift.iter().any(|d| d.contains("foreign-owner")));
        assert!(drift.iter().any(|d| d.contains("create-nonce")));
    }
}
