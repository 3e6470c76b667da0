//! `prepare::docker_gate` — preparation waits, bounded, for `docker info` before the normal
//! prepare flow; with no daemon it fails within the bound with a clear message and the agent
//! never starts.
//!
//! Can fail when the daemon never becomes ready (a broken companion), when the prepare script
//! lacks the gate (preparation "succeeds" without a daemon), when the wait is unbounded (the
//! harness abandons it at the bound), when the failure does not name the daemon, or when the
//! script starts the agent despite the gate (seen from outside the agent: markers, an agent
//! process, a listener on the control port).

use crate::support::with_daemon_command;
use kandev_harness::runner::{
    Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, broken, not_judged, promise,
};
use kandev_harness::session::{PrepareFailed, SessionOptions};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const READY: Check = Check {
    id: "ready",
    promise: "the Pod's Docker daemon becomes ready within the preparation bound and the agent can use it",
    twin: Twin::Template("daemon-unprivileged"),
};
const BOUNDED: Check = Check {
    id: "bounded",
    promise: "with no daemon, preparation ends within DOCKER_READY_TIMEOUT_SECONDS (plus one probe)",
    twin: Twin::Prepare("gate-unbounded"),
};
const FAILS: Check = Check {
    id: "fails",
    promise: "with no daemon, preparation fails instead of succeeding",
    twin: Twin::Prepare("no-docker-gate"),
};
const MESSAGE: Check = Check {
    id: "message",
    promise: "the preparation failure names the daemon (\"Docker daemon did not become ready\")",
    twin: Twin::Prepare("gate-wrong-message"),
};
const NEVER_STARTS: Check = Check {
    id: "never_starts",
    promise: "after a failed preparation the agent never starts: no start or prepared marker, no agent process, nothing listening on the control port 127.0.0.1:8765",
    twin: Twin::Prepare("gate-starts-agent"),
};

/// The bound the unavailable-daemon check sets, as the upstream acceptance does.
const ABSENT_DAEMON_TIMEOUT_SECONDS: u64 = 2;

pub fn scenario() -> Scenario {
    Scenario {
        name: "prepare::docker_gate",
        promise: "preparation waits (bounded) for `docker info` before the normal prepare flow; an absent daemon fails within the bound with a clear message and the agent never starts",
        checks: &[READY, BOUNDED, FAILS, MESSAGE, NEVER_STARTS],
        timeout: Duration::from_secs(300),
        starts_first: false,
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
        // Each probe is `timeout 3 docker info`, one per second: allow the bound, one probe
        // and the exec round trips. Past it the preparation is abandoned (the Pod goes at
        // teardown): a gate that waits without a bound fails here, not on the scenario's
        // timeout.
        let bound = Duration::from_secs(ABSENT_DAEMON_TIMEOUT_SECONDS + 3 + 5);
        let started = Instant::now();
        let prepared = tokio::time::timeout(bound, absent.run_prepare()).await;
        let elapsed = started.elapsed();
        ctx.evidence("elapsed_ms", elapsed.as_millis() as u64);
        let Ok(prepared) = prepared else {
            return Err(broken(
                &BOUNDED,
                format!("preparation was still running after {elapsed:?} (bound {bound:?})"),
            ));
        };
        let prepared = prepared?;
        let output = format!("{}{}", prepared.stdout_text(), prepared.stderr_text());
        ctx.evidence("exit_code", prepared.exit_code);
        ctx.evidence("output", output.trim());
        promise(elapsed <= bound, &BOUNDED, || {
            format!("preparation ended only after {elapsed:?} (bound {bound:?})")
        })?;
        match exited_non_zero(prepared.exit_code) {
            Some(failed) => promise(failed, &FAILS, || {
                format!(
                    "the prepare script exited 0 after {elapsed:?} with no daemon in the Pod; output: {}",
                    output.trim()
                )
            })?,
            None => not_judged(
                &FAILS,
                "the prepare script's exec ended without an exit status: neither a failure nor a success was seen",
            ),
        }
        promise(
            output.contains("Docker daemon did not become ready"),
            &MESSAGE,
            || format!("output: {}", output.trim()),
        )?;

        ctx.step("absent daemon: the agent never started");
        // Seen from outside the agent, in the main container: Kandev writes neither marker
        // after a failed preparation, so the bootstrap keeps waiting; no agent process and
        // nothing on the control port. The probe first gives a bootstrap that found the
        // markers (it polls every 0.2 s) time to start the agent. Its positive controls: the
        // process walk finds the probe's own shell, and the TCP table has its header; a walk
        // or a table that read nothing is no evidence that nothing started.
        let probe = absent
            .in_main(
                &[
                    "sh",
                    "-c",
                    "sleep 1; test -e /opt/kandev/start && echo marker:start; test -e /opt/kandev/prepared && echo marker:prepared; \
                     for p in /proc/[0-9]*; do [ \"${p#/proc/}\" = \"$$\" ] && echo control:self; c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null); case \"$c\" in /opt/kandev/agentctl*) echo \"process:$c\";; esac; done; \
                     echo '--- /proc/net/tcp'; cat /proc/net/tcp && if [ -e /proc/net/tcp6 ]; then cat /proc/net/tcp6; fi",
                ],
                Duration::from_secs(20),
            )
            .await?;
        anyhow::ensure!(
            probe.success(),
            "the probe of markers, processes and listeners in the main container failed: {}",
            probe.stderr_text().trim()
        );
        let (seen, control_port) = started_after_failure(&probe.stdout_text())?;
        ctx.evidence("markers_and_agent_processes", &seen);
        ctx.evidence("control_port_listeners", &control_port);
        promise(
            seen.is_empty() && control_port.is_empty(),
            &NEVER_STARTS,
            || {
                format!(
                    "after the failed preparation, in the main container: {seen:?}; listening on the control port: {control_port:?}"
                )
            },
        )?;
        Ok(Verdict::Passed)
    })
}

/// Whether the prepare script failed, from its exec's exit status: `None` when the exec
/// ended with no status (a dropped stream), which shows neither a failure nor a success.
fn exited_non_zero(exit_code: Option<i64>) -> Option<bool> {
    exit_code.map(|code| code != 0)
}

/// What the never-starts probe saw start (markers and agent processes) and listen on the
/// control port, once its positive controls hold: the process walk found the probe's own
/// shell, and the TCP table was read (its header line).
fn started_after_failure(probe_output: &str) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let (walk, net) = probe_output
        .split_once("--- /proc/net/tcp")
        .ok_or_else(|| anyhow::anyhow!("the probe printed no TCP table: {probe_output:?}"))?;
    let mut self_seen = false;
    let mut seen = Vec::new();
    for line in walk.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line == "control:self" {
            self_seen = true;
        } else {
            seen.push(line.to_string());
        }
    }
    anyhow::ensure!(
        self_seen,
        "the probe's process walk did not find the probe itself: /proc is not readable there, so no agent process could be seen"
    );
    anyhow::ensure!(
        net.contains("local_address"),
        "the probe's TCP table has no header line: /proc/net/tcp was not read, so no listener could be seen"
    );
    let control_port = crate::daemon::socket_only::tcp_listeners(net)
        .into_iter()
        .filter(|l| l.ends_with(":8765"))
        .collect();
    Ok((seen, control_port))
}

#[cfg(test)]
mod tests {
    use super::{exited_non_zero, started_after_failure};

    const TCP_HEADER: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode";

    #[test]
    fn the_never_starts_probe_needs_its_positive_controls() {
        // Nothing started, and the probe saw itself and the table: judged, nothing found.
        let clean = format!("control:self\n--- /proc/net/tcp\n{TCP_HEADER}\n");
        assert_eq!(started_after_failure(&clean).unwrap(), (vec![], vec![]));
        // An agent process and a listener on 8765 (0.0.0.0:8765, state 0A) are found.
        let started = format!(
            "marker:start\ncontrol:self\nprocess:/opt/kandev/agentctl serve\n--- /proc/net/tcp\n{TCP_HEADER}\n   0: 00000000:223D 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1 0 100 0 0 10 0\n"
        );
        let (seen, port) = started_after_failure(&started).unwrap();
        assert_eq!(seen, ["marker:start", "process:/opt/kandev/agentctl serve"]);
        assert_eq!(port, ["0.0.0.0:8765"]);
        // A walk that did not find the probe, or an empty table, is no evidence.
        let blind = format!("--- /proc/net/tcp\n{TCP_HEADER}\n");
        assert!(started_after_failure(&blind).is_err());
        assert!(started_after_failure("control:self\n--- /proc/net/tcp\n").is_err());
        assert!(started_after_failure("control:self\n").is_err());
    }

    #[test]
    fn a_missing_exit_status_is_no_failure_seen() {
        assert_eq!(exited_non_zero(Some(1)), Some(true));
        assert_eq!(exited_non_zero(Some(0)), Some(false));
        assert_eq!(exited_non_zero(None), None);
    }
}
