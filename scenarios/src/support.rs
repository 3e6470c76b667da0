//! Helpers shared by scenarios: template variants, the nested workload image, checks.

use anyhow::{Context, anyhow};
use k8s_openapi::api::core::v1::{Container, PodTemplate};
use kandev_harness::runner::{Check, Ctx, broken};
use kandev_harness::session::Session;
use kandev_harness::session::agent::{AgentExecResult, FileDigest};
use std::time::Duration;

/// The named container of a template (mutable, for variants).
pub fn container_mut<'a>(
    template: &'a mut PodTemplate,
    name: &str,
) -> anyhow::Result<&'a mut Container> {
    template
        .template
        .as_mut()
        .and_then(|t| t.spec.as_mut())
        .and_then(|s| s.containers.iter_mut().find(|c| c.name == name))
        .ok_or_else(|| anyhow!("the template has no container {name}"))
}

/// The run's template with the daemon container's command replaced (the upstream fixture's
/// "unavailable daemon" variant replaces `exec dockerd ...` the same way).
pub fn with_daemon_command(ctx: &Ctx, argv: &[&str]) -> anyhow::Result<PodTemplate> {
    let mut template = ctx.template().clone();
    let daemon = container_mut(&mut template, &ctx.config().daemon_container)?;
    daemon.command = Some(argv.iter().map(|s| (*s).to_owned()).collect());
    daemon.args = None;
    Ok(template)
}

/// Fails `check` when an agent command did not succeed (a step towards judging it, not a pass
/// of it).
pub fn require_success(result: &AgentExecResult, check: &Check, what: &str) -> anyhow::Result<()> {
    if result.success() {
        Ok(())
    } else {
        Err(broken(check, format!("{what}: {}", result.summary())))
    }
}

/// Parses the digest line the workload (`kandev-mock-agent digest|write`) prints.
pub fn workload_digest(stdout: &str) -> anyhow::Result<FileDigest> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or_else(|| anyhow!("no digest in output {stdout:?}"))?;
    serde_json::from_str(line).context("decode the workload's digest")
}

/// Folder (in the workspace) for the nested workload's build context.
pub const WORKLOAD_CONTEXT: &str = "/workspace/.kandev-acceptance/workload";

/// Builds the nested workload image (`FROM scratch` + the static mock agent) inside the
/// session's daemon, with `--network none`: no registry and no base image needed.
/// Returns the agent's build result (the image id on stdout when it worked).
pub async fn build_workload(session: &Session, tag: &str) -> anyhow::Result<AgentExecResult> {
    let script = format!(
        r#"set -eu
d={WORKLOAD_CONTEXT}
mkdir -p "$d"
cp /opt/kandev/agentctl "$d/workload"
printf 'FROM scratch\nCOPY workload /workload\nENTRYPOINT ["/workload"]\n' > "$d/Dockerfile"
docker build -q --network none -t {tag} "$d""#
    );
    session.agent_sh(&script, Duration::from_secs(180)).await
}

/// A tag unique to this scenario run.
pub fn probe_tag(ctx: &Ctx, what: &str) -> String {
    format!(
        "kandev-acceptance-{what}:{}",
        ctx.run_id().replace('t', "-")
    )
}

/// A file the agent digested, as a diagnosis says it: `sha256 <hex> (<n> bytes)`, or that it
/// is missing.
pub fn digest_text(digest: Option<&FileDigest>) -> String {
    match digest {
        Some(d) if d.exists => format!(
            "sha256 {} ({} bytes)",
            or_unknown(d.sha256.as_deref()),
            or_unknown(d.size)
        ),
        _ => "no such file".to_owned(),
    }
}

/// A value that may be missing, printed plainly for a diagnosis ("unknown" when absent),
/// never as Rust's `Some(..)`.
pub fn or_unknown<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "unknown".to_owned(), |v| v.to_string())
}

/// The ID of the daemon the session's agent reaches (`docker info`); fails `check` when the
/// agent cannot ask.
pub async fn daemon_id(session: &Session, check: &Check) -> anyhow::Result<String> {
    let info = session
        .agent_sh("docker info --format '{{.ID}}'", Duration::from_secs(30))
        .await?;
    require_success(&info, check, "docker info")?;
    Ok(info.stdout.trim().to_owned())
}

/// Why a scenario that needs the node's own view (processes, cgroups, kernel records) is
/// skipped when the backend has none.
pub const NO_NODE_VIEW: &str = "no node view: the node's processes and cgroups cannot be read from here (local: the host's cgroup filesystem is not readable; Kind: the node container is not on this host's engine; other clusters: pass --node-inspector to admit a privileged inspector Pod on the session's node)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_values_print_as_unknown() {
        assert_eq!(or_unknown(Some(0u32)), "0");
        assert_eq!(or_unknown(Some("0644")), "0644");
        assert_eq!(or_unknown(None::<u32>), "unknown");
    }
}
