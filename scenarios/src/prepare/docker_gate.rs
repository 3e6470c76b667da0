//! `prepare::docker_gate` — preparation waits, bounded, for `docker info` before the normal
//! prepare flow; with no daemon it fails within the bound with a clear message and the agent
//! never starts.
//!
//! Can fail when the daemon never becomes ready (a broken companion), when the prepare script
//! lacks the gate (preparation "succeeds" without a daemon and the agent starts), when the
//! wait is unbounded, or when the failure does not name the daemon.

use crate::support::with_daemon_command;
use kandev_harness::runner::{
    Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, broken, promise,
};
use kandev_harness::session::{PrepareFailed, SessionOptions};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const READY: Check = Check {
    id: "ready",
    promise: "the Pod's Docker daemon becomes ready within the preparation bound and the agent can use it",
    twin: Twin::Template("daemon-unprivileged"),
};
const FAILS: Check = Check {
    id: "fails",
    promise: "with no daemon, preparation fails instead of starting the agent",
    twin: Twin::Prepare("no-docker-gate"),
};
const BOUNDED: Check = Check {
    id: "bounded",
    promise: "with no daemon, preparation fails within DOCKER_READY_TIMEOUT_SECONDS (plus one probe)",
    twin: Twin::Exempt("TODO: twin not written yet"),
};
const MESSAGE: Check = Check {
    id: "message",
    promise: "the preparation failure names the daemon (\"Docker daemon did not become ready\")",
    twin: Twin::Exempt("TODO: twin not written yet"),
};
const NEVER_STARTS: Check = Check {
    id: "never_starts",
    promise: "after a failed preparation the agent never starts",
    twin: Twin::Exempt("TODO: twin not written yet"),
};

/// The bound the unavailable-daemon check sets, as the upstream acceptance does.
const ABSENT_DAEMON_TIMEOUT_SECONDS: u64 = 2;

pub fn scenario() -> Scenario {
    Scenario {
        name: "prepare::docker_gate",
        promise: "preparation waits (bounded) for `docker info` before the normal prepare flow; an absent daemon fails within the bound with a clear message and the agent never starts",
        checks: &[READY, FAILS, BOUNDED, MESSAGE, NEVER_STARTS],
        timeout: Duration::from_secs(300),
        run,
    }
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        ctx.step("ready daemon: launch through the gate");
        let session = match ctx.launch(SessionOptions::default()).await {
            Ok(session) => session,
            Err(e) => match e.downcast_ref::<PrepareFailed>() {
                Some(failed) => {
                    return Err(broken(&READY, format!("preparation failed: {failed}")));
                }
                None => return Err(e),
            },
        };
        let info = session
            .agent_sh(
                "docker info --format '{{.ID}} {{.ServerVersion}}'",
                Duration::from_secs(30),
            )
            .await?;
        ctx.evidence("agent_docker_info", &info);
        promise(info.success(), &READY, || {
            format!(
                "`docker info` as the agent after preparation: {}",
                info.summary()
            )
        })?;

        ctx.step("absent daemon: prepare with the daemon replaced by sleep");
        let mut options = SessionOptions {
            template: Some(with_daemon_command(
                ctx,
                &["/bin/sh", "-c", "exec sleep 3600"],
            )?),
            ..Default::default()
        };
        options.profile_env = BTreeMap::from([(
            "DOCKER_READY_TIMEOUT_SECONDS".into(),
            ABSENT_DAEMON_TIMEOUT_SECONDS.to_string(),
        )]);
        let absent = ctx.create_session(options).await?;
        absent.write_bootstrap_files().await?;
        let started = Instant::now();
        let prepared = absent.run_prepare().await?;
        let elapsed = started.elapsed();
        let output = format!("{}{}", prepared.stdout_text(), prepared.stderr_text());
        ctx.evidence("exit_code", prepared.exit_code);
        ctx.evidence("elapsed_ms", elapsed.as_millis() as u64);
        ctx.evidence("output", output.trim());
        promise(prepared.exit_code != Some(0), &FAILS, || {
            format!(
                "the prepare script exited 0 after {elapsed:?} with no daemon in the Pod; output: {}",
                output.trim()
            )
        })?;
        // Each probe is `timeout 3 docker info`, one per second: allow the bound, one probe
        // and the exec round trips.
        let bound = Duration::from_secs(ABSENT_DAEMON_TIMEOUT_SECONDS + 3 + 5);
        promise(elapsed <= bound, &BOUNDED, || {
            format!("failed only after {elapsed:?} (bound {bound:?})")
        })?;
        promise(
            output.contains("Docker daemon did not become ready"),
            &MESSAGE,
            || format!("output: {}", output.trim()),
        )?;

        ctx.step("absent daemon: the agent never started");
        // As Kandev does, a failed preparation writes neither marker; the bootstrap keeps
        // waiting and no control process may be listening.
        let probe = absent
            .in_main(
                &["sh", "-c", "test -e /opt/kandev/start && echo start-marker; test -e /opt/kandev/prepared && echo prepared-marker; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done | grep -c '^/opt/kandev/agentctl' || true"],
                Duration::from_secs(20),
            )
            .await?;
        let text = probe.stdout_text();
        ctx.evidence("markers_and_agent_processes", text.trim());
        let agent_processes: u32 = text
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or(0);
        promise(
            !text.contains("start-marker")
                && !text.contains("prepared-marker")
                && agent_processes == 0,
            &NEVER_STARTS,
            || format!("markers/processes in the main container: {}", text.trim()),
        )?;
        Ok(Verdict::Passed)
    })
}
