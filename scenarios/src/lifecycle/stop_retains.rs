//! `lifecycle::stop_retains` — an ordinary Stop (Kandev ends the session's agent process
//! through agentctl's control API; agentctl stays) keeps the Pod (same UID), its daemon
//! (same ID), the nested containers, volumes and uncommitted files, and the agent is
//! reattached with the recorded token and a new session process started; a
//! replacement Pod (the old one deleted by UID, the launch snapshot recomposed with the
//! same workspace claim and the recorded nonce) keeps the workspace files, gets a new daemon ID, and the old nested
//! containers and volumes are gone.
//!
//! Can fail when Stop disturbs the Pod or daemon, when the workspace is lost on replacement,
//! or when Docker state is retained across Pods (a daemon data root that outlives the Pod).

use crate::support::{build_workload, daemon_id, probe_tag, require_success};
use kandev_harness::runner::{Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, promise};
use kandev_harness::session::SessionOptions;
use serde_json::json;
use std::time::Duration;

const STOP_KEEPS: Check = Check {
    id: "stop_keeps",
    promise: "an ordinary stop (the session's agent process ended through agentctl, which stays) keeps the Pod, its daemon ID, nested containers, volumes and uncommitted files, and the agent resumes with the recorded token",
    twin: Twin::Prepare("session-end-hook"),
};
const WORKSPACE_KEPT: Check = Check {
    id: "workspace_kept",
    promise: "a replacement Pod keeps the workspace",
    twin: Twin::Prepare("workspace-reset"),
};
const NEW_DAEMON: Check = Check {
    id: "new_daemon",
    promise: "a replacement Pod gets a new daemon and the old nested containers and volumes are gone",
    twin: Twin::Template("daemon-data-retained"),
};

pub fn scenario() -> Scenario {
    Scenario {
        name: "lifecycle::stop_retains",
        promise: "ordinary stop keeps the Pod, its daemon ID and nested containers; a replacement Pod keeps the workspace and gets a new daemon",
        checks: &[STOP_KEEPS, WORKSPACE_KEPT, NEW_DAEMON],
        timeout: Duration::from_secs(300),
        starts_first: false,
        run,
    }
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        ctx.step("launch, start the session's agent process and leave state behind");
        let mut session = ctx.launch(SessionOptions::default()).await?;
        session.start_agent_process().await?;
        let tag = probe_tag(ctx, "stop");
        require_success(
            &build_workload(&session, &tag).await?,
            &STOP_KEEPS,
            "docker build",
        )?;
        let s = kandev_harness::pod::identity::random_hex(4);
        let setup = format!(
            "set -e; docker run -d --name keeper-{s} --network none {tag} sleep 600 >/dev/null; docker volume create keep-{s} >/dev/null; echo uncommitted > /workspace/retained-{s}.txt; echo ok"
        );
        require_success(
            &session.agent_sh(&setup, Duration::from_secs(60)).await?,
            &STOP_KEEPS,
            "start a nested container, a volume and a file",
        )?;
        let before = daemon_id(&session, &STOP_KEEPS).await?;
        let agentctl_before = session.agent()?.health().await?;
        let pod_before = session.pod.clone();
        ctx.evidence(
            "before",
            json!({"pod_uid": pod_before.uid, "daemon_id": before, "agentctl": agentctl_before, "instances": session.agent()?.instances().await?}),
        );

        ctx.step("ordinary stop: end the session's agent process, then resume");
        let (token, ended) = session.stop().await?;
        let token = token.ok_or_else(|| anyhow::anyhow!("the session had no agent token"))?;
        ctx.evidence("stopped_process", &ended);
        let uid = ctx
            .backend()
            .pod_uid(&pod_before.namespace, &pod_before.name)
            .await?;
        promise(
            uid.as_deref() == Some(pod_before.uid.as_str()),
            &STOP_KEEPS,
            || {
                format!(
                    "after stop the Pod's UID is {}, was {}",
                    uid.as_deref().unwrap_or("gone"),
                    pod_before.uid
                )
            },
        )?;
        session.resume(token).await?;
        let agentctl_after = session.agent()?.health().await?;
        // agentctl stayed: the same process (pid), still running since before the stop.
        let field = |v: &serde_json::Value, k: &str| v.get(k).and_then(serde_json::Value::as_u64);
        promise(
            ended.is_some()
                && field(&agentctl_after, "pid").is_some()
                && field(&agentctl_after, "pid") == field(&agentctl_before, "pid")
                && field(&agentctl_after, "uptime_ms") > field(&agentctl_before, "uptime_ms"),
            &STOP_KEEPS,
            || {
                format!(
                    "stop ended {}; agentctl before {agentctl_before}, after {agentctl_after}",
                    ended
                        .as_ref()
                        .map_or_else(|| "without an answer".to_owned(), ToString::to_string)
                )
            },
        )?;
        session.start_agent_process().await?;
        let after = daemon_id(&session, &STOP_KEEPS).await?;
        let state = session
            .agent_sh(&format!("docker inspect -f '{{{{.State.Running}}}}' keeper-{s}; docker volume inspect -f '{{{{.Name}}}}' keep-{s}; cat /workspace/retained-{s}.txt"), Duration::from_secs(30))
            .await?;
        ctx.evidence("after_stop", json!({"pod_uid": uid, "daemon_id": after, "agentctl": agentctl_after, "instances": session.agent()?.instances().await?, "state": state.stdout.lines().collect::<Vec<_>>()}));
        promise(after == before, &STOP_KEEPS, || {
            format!("the daemon ID changed from {before} to {after}")
        })?;
        promise(
            state.stdout.lines().collect::<Vec<_>>()
                == ["true", &format!("keep-{s}"), "uncommitted"],
            &STOP_KEEPS,
            || format!("after stop: {}", state.summary()),
        )?;

        ctx.step("replacement Pod on the same workspace");
        ctx.backend().delete_pod(&session.pod).await?;
        let gone = ctx
            .backend()
            .pod_uid(&pod_before.namespace, &pod_before.name)
            .await?;
        promise(gone.is_none(), &WORKSPACE_KEPT, || {
            format!(
                "the deleted Pod is still there (uid {})",
                gone.as_deref().unwrap_or_default()
            )
        })?;
        let replacement = ctx.replace(&session, None).await?;
        let file = replacement
            .agent_sh(
                &format!("cat /workspace/retained-{s}.txt"),
                Duration::from_secs(10),
            )
            .await?;
        ctx.evidence("replacement_pod_uid", &replacement.pod.uid);
        ctx.evidence("retained_file", file.stdout.trim());
        promise(
            replacement.pod.uid != pod_before.uid,
            &WORKSPACE_KEPT,
            || "the replacement has the old UID".into(),
        )?;
        promise(
            file.success() && file.stdout.trim() == "uncommitted",
            &WORKSPACE_KEPT,
            || format!("retained-{s}.txt: {}", file.summary()),
        )?;

        ctx.step("the replacement has a new daemon and none of the old Docker state");
        let new_id = daemon_id(&replacement, &NEW_DAEMON).await?;
        let old_state = replacement
            .agent_sh(&format!("docker container inspect keeper-{s} >/dev/null 2>&1 && echo container; docker volume inspect keep-{s} >/dev/null 2>&1 && echo volume; true"), Duration::from_secs(30))
            .await?;
        ctx.evidence("daemon_ids", json!({"old": before, "replacement": new_id}));
        ctx.evidence(
            "old_state_in_replacement",
            old_state.stdout.lines().collect::<Vec<_>>(),
        );
        promise(new_id != before, &NEW_DAEMON, || {
            format!("the replacement reports the old daemon ID {before}")
        })?;
        promise(old_state.stdout.trim().is_empty(), &NEW_DAEMON, || {
            format!(
                "the replacement's daemon still has the old {}",
                old_state.stdout.trim().replace('\n', " and ")
            )
        })?;
        Ok(Verdict::Passed)
    })
}
