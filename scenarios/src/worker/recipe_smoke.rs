//! `worker::recipe_smoke` — the recipe's own smoke test (AC-003.1): when the worker image
//! carries `/opt/full-worker/smoke.sh`, `bash /opt/full-worker/smoke.sh --all` run by the agent
//! (UID 1000, in `kandev-agent`, through agentctl) exits 0, writes
//! `source-browser-docker-compose-ok` to `/workspace/full-worker-result.txt`, and
//! `/run/docker/docker.sock` is a socket. An image without the script is reported
//! `incompatible` with that reason, never passed.
//!
//! Its own scenario rather than a check of `image::recipe`: the smoke drives the Pod's daemon,
//! the browser and Compose (the catalogue's longest scenario, about 80 s in a warm catalogue on
//! 2 cores, 55–70 s of its Pod's CPU; much of it the Go step compiling the standard library behind
//! net/http, once), and an image without it
//! must not leave the recipe's other checks unjudged. Can fail when the smoke fails or stays
//! silent.
//!
//! Its steps overlap work other scenarios judge (`worker::toolchain`'s tool jobs,
//! `browser::launch`, `image::build_run`, `compose::cleanup`), and it still runs `--all` whole:
//! what it judges is the recipe's own script (AC-003.1), which no other scenario runs; its
//! Docker half needs the static program its Go step builds; and `worker::toolchain` judges any
//! worker image's tools (`--required-tools`), with or without this script, in its own session
//! (scenarios share no session, so neither can take its evidence from the other's run).

use kandev_harness::runner::{Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, promise};
use kandev_harness::session::SessionOptions;
use std::time::Duration;

const RESULT: Check = Check {
    id: "result",
    promise: "`bash /opt/full-worker/smoke.sh --all` as the agent exits 0 and writes source-browser-docker-compose-ok to /workspace/full-worker-result.txt; /run/docker/docker.sock is a socket",
    twin: Twin::Worker("worker-smoke-silent"),
};

/// The recipe's smoke script, and the line it must leave.
pub const SMOKE: &str = "/opt/full-worker/smoke.sh";
pub const RESULT_FILE: &str = "/workspace/full-worker-result.txt";
pub const RESULT_LINE: &str = "source-browser-docker-compose-ok";

pub fn scenario() -> Scenario {
    Scenario {
        name: "worker::recipe_smoke",
        promise: "the worker image's own smoke (`smoke.sh --all`: source tools, browser click and screenshot, scratch build with --network=none, nested HTTPS fetch, Compose with RO/RW binds and `down`) passes as the agent and writes its result line",
        checks: &[RESULT],
        timeout: Duration::from_secs(600),
        starts_first: true,
        run,
    }
}

/// The agent's command: its UID, then `bash <script> --all` with its output's last 40 lines,
/// exiting with the smoke's own status. (A pipe into `tail` would end with tail's status, and
/// `sh` is dash, which has no `pipefail`: a smoke that failed after writing its result line
/// would pass.)
pub fn smoke_command(script: &str) -> String {
    format!(
        "id -u; out=$(bash {script} --all 2>&1); rc=$?; printf '%s\\n' \"$out\" | tail -n 40; exit $rc"
    )
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        ctx.step("launch");
        let session = ctx.launch(SessionOptions::default()).await?;

        ctx.step("smoke.sh present");
        let present = session
            .agent_sh(
                &format!("test -f {SMOKE} && echo yes || echo no"),
                Duration::from_secs(20),
            )
            .await?;
        if present.stdout.trim() != "yes" {
            return Ok(Verdict::Incompatible(format!(
                "the worker image has no {SMOKE}: the recipe's own smoke cannot be run (Kandev's full-worker recipe ships it)"
            )));
        }

        ctx.step("smoke.sh --all as the agent");
        let smoke = session
            .agent_sh(&smoke_command(SMOKE), Duration::from_secs(480))
            .await?;
        ctx.evidence("smoke", smoke.summary());
        ctx.evidence("duration_ms", smoke.duration_ms);
        let after = session
            .agent_sh(
                &format!("test -S /run/docker/docker.sock && echo socket || echo not-a-socket; cat {RESULT_FILE} 2>/dev/null || echo '(no result file)'"),
                Duration::from_secs(20),
            )
            .await?;
        ctx.evidence("after", after.stdout.lines().collect::<Vec<_>>());
        let mut wrong = Vec::new();
        if !smoke.success() {
            wrong.push(format!("smoke.sh --all failed: {}", smoke.summary()));
        }
        if smoke.stdout.lines().next().map(str::trim) != Some("1000") {
            wrong.push(format!(
                "it did not run as UID 1000: {}",
                smoke.stdout.lines().next().unwrap_or_default()
            ));
        }
        if !after.stdout.lines().any(|l| l.trim() == "socket") {
            wrong.push("/run/docker/docker.sock is not a socket".to_owned());
        }
        if !after.stdout.lines().any(|l| l.trim() == RESULT_LINE) {
            wrong.push(format!(
                "{RESULT_FILE} does not hold {RESULT_LINE}: {:?}",
                after.stdout.lines().skip(1).collect::<Vec<_>>()
            ));
        }
        promise(wrong.is_empty(), &RESULT, || wrong.join("; "))?;
        Ok(Verdict::Passed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// The agent runs the command through `sh -c`: a smoke that writes its result line and
    /// then fails must fail the command (the check reads its exit status), and a smoke that
    /// passes must pass it, its output's tail kept.
    #[test]
    fn the_smokes_own_exit_status_is_the_commands() {
        let dir = tempfile::tempdir().unwrap();
        let smoke = dir.path().join("smoke.sh");
        for (body, expected) in [
            (
                "echo source-browser-docker-compose-ok; echo failing late >&2; exit 3",
                Some(3),
            ),
            ("echo source-browser-docker-compose-ok; exit 0", Some(0)),
        ] {
            std::fs::write(&smoke, body).unwrap();
            let out = Command::new("sh")
                .args(["-c", &smoke_command(&smoke.display().to_string())])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert_eq!(out.status.code(), expected, "{body}: {text}");
            assert!(text.contains("source-browser-docker-compose-ok"), "{text}");
        }
    }
}
