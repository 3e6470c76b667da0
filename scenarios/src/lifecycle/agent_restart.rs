//! `lifecycle::agent_restart` — foundation item 15, both halves. First the backend restarts
//! under the running session: everything it held is dropped but the session's inventory row,
//! and Kandev's reconnect reaches the same Pod (UID and owned labels verified) with the
//! recorded token; agentctl is the same process and still runs the session's agent process.
//! Then the main container's PID 1 (agentctl, which the bootstrap
//! script `exec`s) ends on SIGTERM (`kill 1` in `kandev-agent`, as the agent user, as Kandev's
//! Kind suite does it); the kubelet restarts the container in the same Pod (restart count up,
//! same Pod UID); agentctl comes back at once (the start markers are on the runtime volume)
//! and Kandev reconnects: the recorded token is refused by the new agentctl, a new handshake
//! with the bootstrap nonce the Pod still holds succeeds, and a new session process starts;
//! the Pod's Docker daemon is untouched (same ID, same dockerd process, the nested container
//! still running since before).
//!
//! Can fail when PID 1 of the main container survives SIGTERM (an entry shell that does not
//! `exec` the agent), when the reconnect cannot authenticate, or when the companion reacts
//! to the agent's restart by disturbing the daemon or its containers.

use crate::support::{build_workload, daemon_id, or_unknown, probe_tag, require_success};
use kandev_harness::backend::ContainerState;
use kandev_harness::runner::{
    Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, broken_by, promise,
};
use kandev_harness::session::{RecordedToken, Session, SessionOptions};
use serde_json::json;
use std::time::{Duration, Instant};

const RESTARTED: Check = Check {
    id: "restarted",
    promise: "SIGTERM to the main container's PID 1 ends it and the container restarts in the same Pod (restart count up, same Pod UID)",
    twin: Twin::Worker("worker-pid1-ignores-term"),
};
const BACKEND_RESTART: Check = Check {
    id: "backend_restart",
    promise: "after a backend restart, reconnecting from the session's inventory row alone reaches the same Pod UID (owned labels and claim verified); agentctl, the same process with the main container not restarted, accepts the recorded token and still runs the session's agent process",
    twin: Twin::Mirror(BACKEND_RESTART_DECIDED_BY),
};

/// Why a backend restart's reconnect is a mirror check (here and in `lifecycle::task_sessions`).
pub(crate) const BACKEND_RESTART_DECIDED_BY: &str = "a backend restart happens only in the backend: on Kubernetes each control request is its own port-forward (locally a tunnel the backend keeps in the Pod's infra container, its plumbing, not the Pod's), so nothing of the system under test can see it; only Kandev's reconnect (mirrored in Session::reattach, whose fail-closed refusals of a foreign UID, a foreign kandev.ai label and a missing Pod are tested against the API double) decides it. Kept in the scenario because it reads the running Pod: its UID from the API, the main container's restart count, agentctl's uptime and /proc";
const REHANDSHAKE: Check = Check {
    id: "rehandshake",
    promise: "after the restart agentctl answers /health again as a new process, refuses the recorded token, accepts a new handshake with the recorded bootstrap nonce and starts a new session process",
    twin: Twin::Mirror(
        "decided by agentctl's token handling (mirrored by the mock agent) and Kandev's reconnect (mirrored in Session::reconnect); the nonce lives in /run/kandev/auth.env on the reserved kandev-auth volume, which no template may mount and Kandev rewrites after preparation. Kept in the scenario because it needs the restarted agentctl of the running Pod",
    ),
};
const DAEMON_UNTOUCHED: Check = Check {
    id: "daemon_untouched",
    promise: "the agent's restart leaves the Pod's Docker daemon alone: same daemon ID, same dockerd process, the nested container still running since before",
    twin: Twin::Template("daemon-resets-on-agent-restart"),
};

/// How long the kubelet (or the local engine) may take to restart the main container.
const RESTART_BOUND: Duration = Duration::from_secs(45);
/// How long after the agent is back the daemon's state is watched before it is judged: harm
/// done in reaction to the restart (by the companion) shows within it.
const SETTLE: Duration = Duration::from_secs(5);

pub fn scenario() -> Scenario {
    Scenario {
        name: "lifecycle::agent_restart",
        promise: "a backend restart reconnects to the same Pod and agent process; killing the main container's PID 1 restarts it in the same Pod; the agent re-handshakes with the recorded nonce; the daemon and its containers are untouched",
        checks: &[BACKEND_RESTART, RESTARTED, REHANDSHAKE, DAEMON_UNTOUCHED],
        timeout: Duration::from_secs(300),
        starts_first: false,
        run,
    }
}

/// `PID STARTTIME` of every dockerd in the companion (its own PID namespace), from /proc.
async fn dockerd_processes(session: &Session) -> anyhow::Result<Vec<String>> {
    let script = r#"for p in /proc/[0-9]*; do
  [ "$(cat "$p/comm" 2>/dev/null)" = dockerd ] || continue
  echo "${p#/proc/} $(cut -d' ' -f22 "$p/stat")"
done"#;
    let out = session
        .in_daemon(&["sh", "-c", script], Duration::from_secs(20))
        .await?;
    Ok(out
        .stdout_text()
        .lines()
        .map(|l| l.trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect())
}

/// agentctl's uptime from its `/health` answer.
fn uptime(health: &serde_json::Value) -> Option<u64> {
    health.get("uptime_ms").and_then(serde_json::Value::as_u64)
}

fn main_state<'a>(states: &'a [ContainerState], main: &str) -> Option<&'a ContainerState> {
    states.iter().find(|s| s.name == main)
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        ctx.step("launch, start the session's agent process and a nested container");
        let mut session = ctx.launch(SessionOptions::default()).await?;
        session.start_agent_process().await?;
        let tag = probe_tag(ctx, "restart");
        require_success(
            &build_workload(&session, &tag).await?,
            &DAEMON_UNTOUCHED,
            "docker build",
        )?;
        let s = kandev_harness::pod::identity::random_hex(4);
        let keeper = format!("restart-keeper-{s}");
        let inspect =
            format!("docker inspect -f '{{{{.State.Running}}}} {{{{.State.StartedAt}}}}' {keeper}");
        let started = session
            .agent_sh(
                &format!(
                    "set -e; docker run -d --name {keeper} --network none {tag} sleep 600 >/dev/null; {inspect}"
                ),
                Duration::from_secs(60),
            )
            .await?;
        require_success(&started, &DAEMON_UNTOUCHED, "start a nested container")?;
        let keeper_before = started.stdout.trim().to_owned();
        let id_before = daemon_id(&session, &DAEMON_UNTOUCHED).await?;
        let dockerd_before = dockerd_processes(&session).await?;
        let main = session.main_container().to_owned();
        let pod_uid = session.pod.uid.clone();
        let states = ctx.backend().container_states(&session.pod).await?;
        let restarts_before = main_state(&states, &main).map(|s| s.restarts);
        let health_before = session.agent()?.health().await?;
        ctx.evidence(
            "before",
            json!({"pod_uid": session.pod.uid, "restarts": restarts_before, "agentctl": health_before,
                "instance": session.instance(), "daemon_id": id_before, "dockerd": dockerd_before,
                "nested": keeper_before}),
        );
        let Some(restarts_before) = restarts_before else {
            anyhow::bail!("the backend reports no state for container {main}");
        };

        ctx.step("restart the backend: reconnect from the session's inventory row alone");
        let instance_before = session.instance().map(str::to_owned);
        let uptime_before = uptime(&health_before);
        let (mut session, reattached) = ctx
            .restart_backend(session)
            .await
            .map_err(|e| broken_by(&BACKEND_RESTART, e))?;
        let states = ctx.backend().container_states(&session.pod).await?;
        let restarts_now = main_state(&states, &main).map(|s| s.restarts);
        let uid_now = ctx
            .backend()
            .pod_uid(&session.pod.namespace, &session.pod.name)
            .await?;
        let whoami = session
            .agent_sh("id -u", Duration::from_secs(20))
            .await
            .map_err(|e| broken_by(&BACKEND_RESTART, e))?;
        ctx.evidence(
            "after_backend_restart",
            json!({"pod_uid": uid_now, "restarts": restarts_now, "agentctl": reattached.health,
                "recorded_token": reattached.token, "instance_lost": reattached.instance_lost,
                "instance": session.instance(), "id_u": whoami.stdout.trim()}),
        );
        let same_agentctl = uptime(&reattached.health)
            .zip(uptime_before)
            .is_some_and(|(now, before)| now >= before);
        promise(
            uid_now.as_deref() == Some(pod_uid.as_str())
                && restarts_now == Some(restarts_before)
                && same_agentctl
                && reattached.token == RecordedToken::Accepted
                && reattached.instance_lost.is_none()
                && session.instance().is_some()
                && session.instance().map(str::to_owned) == instance_before
                && whoami.success()
                && whoami.stdout.trim() == "1000",
            &BACKEND_RESTART,
            || {
                format!(
                    "after the backend restart: Pod UID {} (was {pod_uid}), {main} restarts {} (was {restarts_before}), agentctl uptime {} ms (was {}), recorded token {:?}, session process lost: {}, commands: {}",
                    or_unknown(uid_now.as_deref()),
                    or_unknown(restarts_now),
                    or_unknown(uptime(&reattached.health)),
                    or_unknown(uptime_before),
                    reattached.token,
                    reattached.instance_lost.as_deref().unwrap_or("no"),
                    whoami.summary()
                )
            },
        )?;

        ctx.step("kill the main container's PID 1 (SIGTERM, as the agent user)");
        let killed_at = Instant::now();
        // The exec dies with the container it runs in: its outcome is evidence, the restart
        // count is the judge.
        let kill = match session
            .in_main(&["sh", "-c", "id -u; kill 1"], Duration::from_secs(20))
            .await
        {
            Ok(out) => {
                json!({"exit_code": out.exit_code, "stdout": out.stdout_text().trim(), "stderr": out.stderr_text().trim()})
            }
            Err(e) => json!({"error": format!("{e:#}")}),
        };
        ctx.evidence("kill", &kill);
        let backend = ctx.backend();
        let pod = session.pod.clone();
        let restarted = ctx
            .wait_within("the main container to restart", RESTART_BOUND, || async {
                let states = backend.container_states(&pod).await?;
                Ok(main_state(&states, &main)
                    .filter(|s| s.restarts > restarts_before && s.running)
                    .cloned())
            })
            .await;
        let states = backend.container_states(&pod).await?;
        let uid = backend.pod_uid(&pod.namespace, &pod.name).await?;
        ctx.evidence(
            "after_kill",
            json!({"pod_uid": uid, "containers": states.iter().map(|s| json!({"name": s.name, "running": s.running, "restarts": s.restarts, "exit_code": s.exit_code})).collect::<Vec<_>>(),
                "waited_ms": killed_at.elapsed().as_millis() as u64}),
        );
        let restarted = restarted.map_err(|e| {
            broken_by(
                &RESTARTED,
                e.context(format!(
                    "the restart count of {main} stayed {restarts_before} for {:?} after `kill 1` ({kill})",
                    killed_at.elapsed(),
                )),
            )
        })?;
        promise(uid.as_deref() == Some(pod.uid.as_str()), &RESTARTED, || {
            format!(
                "after the restart the Pod's UID is {}, was {} (restarts {restarts_before} -> {})",
                uid.as_deref().unwrap_or("gone"),
                pod.uid,
                restarted.restarts
            )
        })?;

        ctx.step("reconnect: the recorded token, then the recorded bootstrap nonce");
        let reconnected = session
            .reconnect()
            .await
            .map_err(|e| broken_by(&REHANDSHAKE, e))?;
        let since_kill = killed_at.elapsed().as_millis() as u64;
        let uptime = uptime(&reconnected.health);
        ctx.evidence(
            "reconnected",
            json!({"agentctl": reconnected.health, "recorded_token": reconnected.token,
                "instance_lost": reconnected.instance_lost, "ms_since_kill": since_kill}),
        );
        promise(
            uptime.is_some_and(|u| u <= since_kill)
                && reconnected.token == RecordedToken::Refused
                && reconnected.instance_lost.is_some(),
            &REHANDSHAKE,
            || {
                format!(
                    "agentctl is not a new process that lost the old session (uptime {} ms, {since_kill} ms since the kill; recorded token {:?}; old session process lost: {})",
                    or_unknown(uptime),
                    reconnected.token,
                    reconnected.instance_lost.as_deref().unwrap_or("no")
                )
            },
        )?;
        let instance = session
            .start_agent_process()
            .await
            .map_err(|e| broken_by(&REHANDSHAKE, e))?;
        let whoami = session
            .agent_sh(
                "id -u; echo \"$KANDEV_SESSION_ID\"",
                Duration::from_secs(20),
            )
            .await?;
        ctx.evidence(
            "new_session_process",
            json!({"instance": instance, "instances": session.agent()?.instances().await?, "id": whoami.stdout.lines().collect::<Vec<_>>()}),
        );
        promise(
            whoami.success()
                && whoami.stdout.lines().collect::<Vec<_>>()
                    == ["1000", session.identity.session_id.as_str()],
            &REHANDSHAKE,
            || format!("the reconnected agent's commands: {}", whoami.summary()),
        )?;

        ctx.step("the daemon, its process and the nested container are untouched");
        // The watch window, from the re-handshake (the agent is back by then).
        tokio::time::sleep(SETTLE).await;
        let id_after = daemon_id(&session, &DAEMON_UNTOUCHED).await?;
        let dockerd_after = dockerd_processes(&session).await?;
        let keeper_after = session.agent_sh(&inspect, Duration::from_secs(30)).await?;
        ctx.evidence(
            "after",
            json!({"daemon_id": id_after, "dockerd": dockerd_after, "nested": keeper_after.stdout.trim(),
                "nested_error": keeper_after.stderr.trim()}),
        );
        promise(
            id_after == id_before
                && dockerd_after == dockerd_before
                && dockerd_before.len() == 1
                && keeper_after.success()
                && keeper_after.stdout.trim() == keeper_before,
            &DAEMON_UNTOUCHED,
            || {
                format!(
                    "before the restart: daemon {id_before}, dockerd (pid starttime) {dockerd_before:?}, {keeper} {keeper_before:?}; after: daemon {id_after}, dockerd {dockerd_after:?}, {keeper}: {}",
                    keeper_after.summary()
                )
            },
        )?;
        Ok(Verdict::Passed)
    })
}
