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

/// Asks the replacement's daemon for the old nested container and volume (suffix `s`): one
/// line each, `<kind> present`, `<kind> absent` (the daemon answered "No such container" or
/// "no such volume": its own word that the object is not there) or `<kind> error <what it
/// said>`. A bare "no such" is no such answer: Docker 28's CLI says a missing socket with
/// "connect: no such file or directory", when no daemon answered at all.
fn old_state_probe(s: &str) -> String {
    format!(
        "for k in 'container keeper-{s}' 'volume keep-{s}'; do set -- $k; if err=$(docker \"$1\" inspect \"$2\" 2>&1 >/dev/null); then echo \"$1 present\"; else case $err in *\"No such $1\"*|*\"no such $1\"*) echo \"$1 absent\";; *) echo \"$1 error\" $err;; esac; fi; done"
    )
}

/// What the probe shows of the old Docker state: the objects still there, and any answer
/// that is not the daemon's own "No such <kind>" (a daemon that did not answer shows nothing).
fn old_state_left(stdout: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    for kind in ["container", "volume"] {
        let line = stdout
            .lines()
            .map(str::trim)
            .find(|l| l.split_whitespace().next() == Some(kind));
        match line.map(|l| l[kind.len()..].trim()) {
            Some("absent") => {}
            Some("present") => wrong.push(format!("still has the old {kind}")),
            Some(other) => wrong.push(format!("could not be asked for the old {kind}: {other}")),
            None => wrong.push(format!("said nothing of the old {kind}")),
        }
    }
    wrong
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
            .agent_sh(&old_state_probe(&s), Duration::from_secs(30))
            .await?;
        ctx.evidence("daemon_ids", json!({"old": before, "replacement": new_id}));
        ctx.evidence(
            "old_state_in_replacement",
            old_state.stdout.lines().collect::<Vec<_>>(),
        );
        promise(new_id != before, &NEW_DAEMON, || {
            format!("the replacement reports the old daemon ID {before}")
        })?;
        let wrong = old_state_left(&old_state.stdout);
        promise(wrong.is_empty(), &NEW_DAEMON, || {
            format!(
                "the replacement's daemon: {}; probe: {}",
                wrong.join("; "),
                old_state.summary()
            )
        })?;
        Ok(Verdict::Passed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the daemon's own "No such <kind>" for both objects holds; a probe made to fail (no
    /// daemon answering, no answer at all) fails the check.
    #[test]
    fn old_state_is_gone_only_when_the_daemon_says_so() {
        assert!(old_state_left("container absent\nvolume absent\n").is_empty());
        assert_eq!(
            old_state_left("container absent\nvolume present\n").len(),
            1
        );
        assert_eq!(old_state_left("").len(), 2);
        assert_eq!(
            old_state_left("container error Cannot connect to the Docker daemon\nvolume absent\n")
                .len(),
            1
        );
    }

    /// The probe as the agent runs it (sh), against a `docker` that answers as a daemon does
    /// for objects it lacks, and one that cannot reach a daemon.
    #[test]
    fn the_probe_tells_absent_from_unanswered() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let docker = dir.path().join("docker");
        let run = |script: &str| {
            std::fs::write(&docker, script).unwrap();
            std::fs::set_permissions(&docker, std::fs::Permissions::from_mode(0o755)).unwrap();
            let out = std::process::Command::new("sh")
                .args(["-c", &old_state_probe("ab12")])
                .env("PATH", format!("{}:/usr/bin:/bin", dir.path().display()))
                .output()
                .unwrap();
            old_state_left(&String::from_utf8_lossy(&out.stdout))
        };
        assert!(run("#!/bin/sh\necho \"Error: No such $1: $3\" >&2\nexit 1\n").is_empty());
        assert_eq!(
            run("#!/bin/sh\necho 'Cannot connect to the Docker daemon at unix:///run/docker/docker.sock' >&2\nexit 1\n").len(),
            2
        );
        // Docker 28's CLI says a missing socket in words that hold "no such": no daemon
        // answered, so neither object is shown absent.
        assert_eq!(
            run("#!/bin/sh\necho 'failed to connect to the docker API at unix:///run/docker/docker.sock; check if the path is correct and if the daemon is running: dial unix /run/docker/docker.sock: connect: no such file or directory' >&2\nexit 1\n").len(),
            2
        );
        // The daemon's own words for a missing volume, as older CLIs print them.
        assert!(
            run("#!/bin/sh\ncase $1 in container) echo \"Error: No such container: $3\";; *) echo \"Error response from daemon: get $3: no such volume\";; esac >&2\nexit 1\n").is_empty()
        );
        assert_eq!(run("#!/bin/sh\necho '[{}]'\n").len(), 2);
    }
}
