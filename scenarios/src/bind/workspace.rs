//! `bind::workspace` — a nested container's bind mount of a `/workspace` path reads and
//! writes the same bytes the agent sees (digests both ways); the ownership of files nested
//! containers create is reported; a bind source outside `/workspace` (the agent's private
//! HOME) is reported incompatible.
//!
//! Can fail when the daemon does not see the agent's workspace (its own mount namespace, a
//! different volume), when bytes differ, or when the agent's private HOME is visible to the
//! daemon (runtime/auth mounts must not be shared with the companion).

use crate::support::{
    build_workload, digest_text, or_unknown, probe_tag, require_success, workload_digest,
};
use kandev_harness::runner::{Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, promise};
use kandev_harness::session::SessionOptions;
use kandev_harness::session::agent::AgentExec;
use kandev_report::FindingLevel;
use serde_json::json;
use std::time::Duration;

const READS: Check = Check {
    id: "reads",
    promise: "a nested bind of /workspace reads the bytes the agent wrote",
    twin: Twin::Template("daemon-private-workspace"),
};
const WRITES: Check = Check {
    id: "writes",
    promise: "the agent sees the bytes a nested container wrote through a /workspace bind",
    twin: Twin::Template("daemon-workspace-read-only"),
};
const PRIVATE_HOME: Check = Check {
    id: "private_home",
    promise: "the agent's private HOME is not visible to the Pod's daemon",
    twin: Twin::Prepare("home-on-workspace"),
};

pub fn scenario() -> Scenario {
    Scenario {
        name: "bind::workspace",
        promise: "a nested container's bind mount of a `/workspace` path reads and writes the same bytes the agent sees; ownership of nested writes is reported; a bind source outside `/workspace` is reported incompatible",
        checks: &[READS, WRITES, PRIVATE_HOME],
        timeout: Duration::from_secs(300),
        starts_first: false,
        run,
    }
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        ctx.step("launch and build the workload image");
        let session = ctx.launch(SessionOptions::default()).await?;
        let tag = probe_tag(ctx, "bind");
        let build = build_workload(&session, &tag).await?;
        require_success(&build, &READS, "docker build")?;

        ctx.step("nested container reads the agent's bytes");
        let dir = "/workspace/bind-probe";
        let wrote = session
            .agent_sh(
                &format!("mkdir -p {dir} && /opt/kandev/agentctl write {dir}/in.bin 2097152 7"),
                Duration::from_secs(60),
            )
            .await?;
        require_success(&wrote, &READS, "the agent writes the probe file")?;
        let agent_in = workload_digest(&wrote.stdout)?;
        let nested = session
            .agent_sh(
                &format!("docker run --rm --network none -v {dir}:/data {tag} digest /data/in.bin"),
                Duration::from_secs(120),
            )
            .await?;
        ctx.evidence("agent", &agent_in);
        ctx.evidence("nested", &nested);
        require_success(&nested, &READS, "the nested container reads /data/in.bin")?;
        let nested_in = workload_digest(&nested.stdout)?;
        promise(
            nested_in.sha256 == agent_in.sha256 && nested_in.size == agent_in.size,
            &READS,
            || {
                format!(
                    "the agent wrote {}, the nested container read {}",
                    digest_text(Some(&agent_in)),
                    digest_text(Some(&nested_in))
                )
            },
        )?;

        ctx.step("agent reads the nested container's bytes");
        let out = session.agent_sh(&format!("docker run --rm --network none -v {dir}:/data {tag} write /data/out.bin 1048576 99"), Duration::from_secs(120)).await?;
        require_success(&out, &WRITES, "the nested container writes /data/out.bin")?;
        let nested_out = workload_digest(&out.stdout)?;
        let seen = session
            .agent()?
            .exec(
                &AgentExec::sh("true", Duration::from_secs(10))
                    .digests(&["/workspace/bind-probe/out.bin"]),
            )
            .await?;
        let agent_out = seen.digest("/workspace/bind-probe/out.bin").cloned();
        ctx.evidence("nested", &nested_out);
        ctx.evidence("agent", &agent_out);
        promise(
            agent_out.as_ref().and_then(|d| d.sha256.clone()) == nested_out.sha256,
            &WRITES,
            || {
                format!(
                    "the nested container wrote {}, the agent saw {}",
                    digest_text(Some(&nested_out)),
                    digest_text(agent_out.as_ref())
                )
            },
        )?;
        if let Some(file) = &agent_out
            && file.uid != Some(1000)
        {
            let deletable = session
                .agent_sh("rm /workspace/bind-probe/out.bin", Duration::from_secs(10))
                .await?
                .success();
            ctx.finding(
                FindingLevel::Warning,
                "workspace.nested_files_not_agent_owned",
                format!(
                    "files nested containers write into /workspace are owned by uid {} gid {} (mode {}), not the agent (uid 1000); the agent {} delete them",
                    or_unknown(file.uid),
                    or_unknown(file.gid),
                    or_unknown(file.mode.as_deref()),
                    if deletable { "can" } else { "cannot" }
                ),
                json!({"file": file, "agent_can_delete": deletable}),
            );
        }

        ctx.step("bind source outside /workspace (the agent's private HOME)");
        // The probe binds the home's physical path: a HOME that is a symlink into /workspace
        // (the daemon's mount namespace has no /run/kandev, but it has /workspace) must not
        // pass for private because its unresolved path does not exist for the daemon.
        let home = session
            .agent_sh(
                "mkdir -p \"$HOME/bind-probe\" && /opt/kandev/agentctl write \"$HOME/bind-probe/private.bin\" 4096 3 && echo \"$HOME\" && cd \"$HOME\" && pwd -P",
                Duration::from_secs(30),
            )
            .await?;
        require_success(&home, &PRIVATE_HOME, "write $HOME/bind-probe/private.bin")?;
        let (home_dir, physical) = home_paths(&home.stdout)?;
        ctx.evidence("home", json!({"home": home_dir, "physical": physical}));
        let private = workload_digest(&home.stdout)?;
        let outside = session
            .agent_sh(&format!("docker run --rm --network none -v {physical}/bind-probe:/data {tag} digest /data/private.bin"), Duration::from_secs(120))
            .await?;
        ctx.evidence("outside_bind", &outside);
        let seen = outside_bind_view(outside.success(), &outside.stdout, &outside.stderr);
        let nested_view = match &seen {
            OutsideBind::Read(digest) => Some(digest.clone()),
            OutsideBind::NoSuchFile => None,
            OutsideBind::NotRun(why) => {
                // The nested container never looked: no evidence either way.
                return Err(kandev_harness::runner::broken(
                    &PRIVATE_HOME,
                    format!(
                        "the nested container that binds {physical}/bind-probe did not look in it ({why}): {}",
                        outside.summary()
                    ),
                ));
            }
        };
        promise(
            nested_view.as_ref().and_then(|d| d.sha256.clone()) != private.sha256,
            &PRIVATE_HOME,
            || {
                format!(
                    "a nested container read {physical}/bind-probe/private.bin (the agent's HOME {home_dir}) with the agent's bytes"
                )
            },
        )?;
        ctx.step_incompatible();
        ctx.finding(
            FindingLevel::Incompatible,
            "bind.source_outside_workspace",
            format!(
                "a bind source outside /workspace ({physical}/bind-probe) does not exist in the daemon's mount namespace: the nested container saw {}; put bind sources under /workspace",
                match seen { OutsideBind::Read(_) => "other bytes", _ => "no such file (an empty folder the daemon created)" }
            ),
            json!({"source": format!("{physical}/bind-probe"), "home": home_dir, "nested": outside.summary()}),
        );
        Ok(Verdict::Passed)
    })
}

/// What the nested container that binds the agent's HOME saw there.
#[derive(Debug, PartialEq, Eq)]
enum OutsideBind {
    /// It read the file: these bytes.
    Read(kandev_harness::session::agent::FileDigest),
    /// It ran and said the file is not there (the workload's own "no such file"): the
    /// daemon does not see the agent's HOME.
    NoSuchFile,
    /// It did not run, or said nothing the workload says: no evidence (why).
    NotRun(String),
}

/// Judges the nested `digest /data/private.bin`: only the workload's own answer counts, its
/// digest or its "no such file"; any other failure (no image, no daemon, a refused bind) is
/// no evidence that the HOME is private.
fn outside_bind_view(success: bool, stdout: &str, stderr: &str) -> OutsideBind {
    if success {
        return match workload_digest(stdout) {
            Ok(digest) => OutsideBind::Read(digest),
            Err(e) => OutsideBind::NotRun(format!("it printed no digest: {e:#}")),
        };
    }
    if stderr.contains("kandev-mock-agent digest: /data/private.bin: no such file") {
        OutsideBind::NoSuchFile
    } else {
        OutsideBind::NotRun("it failed without the workload's own answer".to_owned())
    }
}

/// `$HOME` and its physical path (`pwd -P`), the last two lines the probe printed.
fn home_paths(stdout: &str) -> anyhow::Result<(String, String)> {
    let mut lines = stdout
        .lines()
        .rev()
        .map(str::trim)
        .filter(|l| !l.is_empty());
    match (lines.next(), lines.next()) {
        (Some(physical), Some(home)) if physical.starts_with('/') && home.starts_with('/') => {
            Ok((home.to_owned(), physical.to_owned()))
        }
        _ => Err(anyhow::anyhow!(
            "no $HOME and physical path in the probe's output {stdout:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the workload's own answer judges the HOME: a nested run that failed for another
    /// reason (the daemon unreachable, no image) fails the check instead of passing it.
    #[test]
    fn a_nested_failure_other_than_no_such_file_is_no_evidence() {
        assert_eq!(
            outside_bind_view(
                false,
                "",
                "kandev-mock-agent digest: /data/private.bin: no such file\n"
            ),
            OutsideBind::NoSuchFile
        );
        for stderr in [
            "docker: Cannot connect to the Docker daemon at unix:///run/docker/docker.sock.\n",
            "Unable to find image 'kandev-acceptance-bind:x' locally\n",
            "",
        ] {
            assert!(
                matches!(outside_bind_view(false, "", stderr), OutsideBind::NotRun(_)),
                "{stderr}"
            );
        }
        assert!(matches!(
            outside_bind_view(true, "", ""),
            OutsideBind::NotRun(_)
        ));
        let read = outside_bind_view(
            true,
            "{\"path\":\"/data/private.bin\",\"exists\":true,\"sha256\":\"ab\",\"size\":4096}\n",
            "",
        );
        assert!(matches!(read, OutsideBind::Read(d) if d.sha256.as_deref() == Some("ab")));
    }

    #[test]
    fn the_probe_reports_home_and_its_physical_path() {
        let out = "{\"path\":\"x\"}\n/run/kandev/home\n/workspace/.kandev-home\n";
        assert_eq!(
            home_paths(out).unwrap(),
            (
                "/run/kandev/home".to_owned(),
                "/workspace/.kandev-home".to_owned()
            )
        );
        assert!(home_paths("{\"path\":\"x\"}\n/run/kandev/home\n").is_err());
    }
}
