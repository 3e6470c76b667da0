//! `workspace::shared` — the agent and the `docker-engine` companion see one `/workspace`
//! (the same bytes, both ways); with a read-only grant the companion cannot write.
//!
//! Can fail when the companion has no workspace grant or mounts something else at
//! `/workspace`, when writes of one side are invisible to the other, or when a read-only
//! grant still lets the companion write (only the read-only error itself, EROFS, counts).

use crate::support::container_mut;
use kandev_harness::pod::template::is_workspace_grant;
use kandev_harness::runner::{Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, promise};
use kandev_harness::session::{Session, SessionOptions};
use std::time::Duration;

const SHARED: Check = Check {
    id: "shared",
    promise: "both containers see one /workspace",
    twin: Twin::Template("no-workspace-grant"),
};
const READ_ONLY: Check = Check {
    id: "read_only_grant",
    promise: "through a read-only workspace grant the companion's write fails with EROFS (\"Read-only file system\") and leaves no file",
    twin: Twin::Template("daemon-remounts-workspace-rw"),
};

pub fn scenario() -> Scenario {
    Scenario {
        name: "workspace::shared",
        promise: "both containers see one `/workspace`; a read-only grant cannot write (EROFS)",
        checks: &[SHARED, READ_ONLY],
        timeout: Duration::from_secs(300),
        starts_first: false,
        run,
    }
}

/// `sha256sum` of a path in the companion; None when it cannot read it.
async fn companion_sha(session: &Session, path: &str) -> anyhow::Result<(Option<String>, String)> {
    let out = session
        .in_daemon(&["sha256sum", path], Duration::from_secs(30))
        .await?;
    let sha = out.success().then(|| {
        out.stdout_text()
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned()
    });
    Ok((
        sha,
        format!("{}{}", out.stdout_text(), out.stderr_text())
            .trim()
            .to_owned(),
    ))
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        ctx.step("launch: read-write grant (template) and read-only grant (variant)");
        let daemon = ctx.config().daemon_container.clone();
        let mut read_only = ctx.template().clone();
        let mut flipped = 0;
        for mount in container_mut(&mut read_only, &daemon)?
            .volume_mounts
            .iter_mut()
            .flatten()
        {
            if is_workspace_grant(mount) {
                mount.read_only = Some(true);
                flipped += 1;
            }
        }
        ctx.evidence("grants_in_template", flipped);
        let options = vec![
            SessionOptions::default(),
            SessionOptions {
                template: Some(read_only),
                ..Default::default()
            },
        ];
        let mut sessions = ctx.launch_many(options).await?;
        let (Some(ro), Some(rw)) = (sessions.pop(), sessions.pop()) else {
            anyhow::bail!("two sessions were launched")
        };

        ctx.step("agent writes, companion reads");
        let path = "/workspace/shared-probe/from-agent.bin";
        let written = rw.agent_sh(&format!("mkdir -p /workspace/shared-probe && /opt/kandev/agentctl write {path} 1048576 4242"), Duration::from_secs(60)).await?;
        let agent_digest = crate::support::workload_digest(&written.stdout)?;
        let (companion, output) = companion_sha(&rw, path).await?;
        ctx.evidence("agent", &agent_digest);
        ctx.evidence("companion_sha256", &companion);
        promise(
            companion.is_some() && companion == agent_digest.sha256,
            &SHARED,
            || {
                format!(
                    "the agent wrote {path} (sha256 {:?}); the companion read: {output}",
                    agent_digest.sha256
                )
            },
        )?;

        ctx.step("companion writes, agent reads");
        let path = "/workspace/shared-probe/from-engine.bin";
        let out = rw
            .in_daemon(
                &[
                    "sh",
                    "-c",
                    &format!("head -c 262144 /dev/urandom > {path} && sha256sum {path}"),
                ],
                Duration::from_secs(30),
            )
            .await?;
        let engine_sha = out
            .stdout_text()
            .split_whitespace()
            .next()
            .map(str::to_owned);
        let seen = rw
            .agent()?
            .exec(
                &kandev_harness::session::agent::AgentExec::sh("true", Duration::from_secs(10))
                    .digests(&[path]),
            )
            .await?;
        let agent_view = seen.digest(path).cloned();
        ctx.evidence("companion_sha256", &engine_sha);
        ctx.evidence("agent", &agent_view);
        promise(
            out.success() && agent_view.as_ref().and_then(|d| d.sha256.clone()) == engine_sha,
            &SHARED,
            || {
                format!(
                    "the companion wrote {path} ({}); the agent saw {agent_view:?}",
                    out.stderr_text().trim()
                )
            },
        )?;

        ctx.step("read-only grant: companion reads but cannot write");
        let path = "/workspace/shared-probe/for-read-only.txt";
        let written = ro
            .agent_sh(
                &format!("mkdir -p /workspace/shared-probe && echo from-agent > {path}"),
                Duration::from_secs(30),
            )
            .await?;
        ctx.evidence("agent_write", &written);
        let (read, output) = companion_sha(&ro, path).await?;
        promise(read.is_some(), &SHARED, || {
            format!("with a read-only grant the companion cannot read the agent's {path}: {output}")
        })?;
        let attempt = ro
            .in_daemon(
                &[
                    "sh",
                    "-c",
                    "echo from-engine > /workspace/shared-probe/engine-write.txt",
                ],
                Duration::from_secs(30),
            )
            .await?;
        let stderr = attempt.stderr_text();
        ctx.evidence("companion_write_exit", attempt.exit_code);
        ctx.evidence("companion_write_stderr", stderr.trim());
        // The read-only error itself, not any failure (a permission or a missing folder
        // would fail the write too without the grant being read-only).
        let left = ro
            .agent_sh(
                "test ! -e /workspace/shared-probe/engine-write.txt",
                Duration::from_secs(30),
            )
            .await?;
        promise(
            !attempt.success() && stderr.contains("Read-only file system") && left.success(),
            &READ_ONLY,
            || {
                format!(
                    "the companion's write to /workspace/shared-probe/engine-write.txt through a read-only grant: {}, {:?}; the file {}",
                    attempt.exit_text(),
                    stderr.trim(),
                    if left.success() {
                        "is absent"
                    } else {
                        "exists"
                    }
                )
            },
        )?;
        Ok(Verdict::Passed)
    })
}
