//! Kandev's launch stage `bootstrap`, over exec into the main container: the agent binary
//! and the runtime files written, the prepare script run, the markers that start agentctl.

use super::agent::CONTROL_PORT;
use super::{AGENT_HOME, Session};
use crate::backend::ExecOutput;
use anyhow::bail;
use kandev_agent_wire::env_file;
use std::time::Duration;

/// Bound on the prepare script's captured output (as Kandev: 256 KiB).
const MAX_PREPARE_OUTPUT: usize = 256 * 1024;

/// `put DEST MODE`: stdin to DEST as Kandev writes files into a Pod: every folder on the
/// path checked (a symlink or a non-folder is refused with exit 73, a missing one created),
/// DEST itself neither a symlink nor a folder, written to a temporary file beside it and
/// renamed into place.
pub(super) const PUT: &str = r#"put() {
  dest=$1; mode=$2; dir=${1%/*}; cur=
  old_ifs=$IFS; IFS=/; set -- $dir; IFS=$old_ifs
  for part in "$@"; do
    [ -n "$part" ] || continue
    cur="$cur/$part"
    [ ! -L "$cur" ] || exit 73
    if [ -e "$cur" ]; then [ -d "$cur" ] || exit 73; else mkdir "$cur"; fi
  done
  [ ! -L "$dest" ] || exit 73
  [ ! -d "$dest" ] || exit 73
  tmp=$(mktemp "$dir/.kandev-upload.XXXXXX")
  cat > "$tmp"
  chmod "$mode" "$tmp"
  mv -f "$tmp" "$dest"
}"#;

/// The worker image lacks a tool the Docker-workloads recipe needs: the scenario cannot be
/// judged on this image (reported `incompatible`, with the fix).
#[derive(Debug, thiserror::Error)]
#[error(
    "the worker image {image} has no `{tool}` on the agent's PATH\n  fix: use a worker image with the Docker CLI (Kandev's full-worker recipe), or pass one with --worker-image"
)]
pub struct WorkerImageLacks {
    pub image: String,
    pub tool: String,
}

/// A launch that failed in the prepare script: the agent was never started.
#[derive(Debug, thiserror::Error)]
#[error(
    "kubernetes lifecycle: prepare script failed ({} after {:.1} s): {output}",
    crate::backend::exit_text(*.exit_code),
    .elapsed.as_secs_f64()
)]
pub struct PrepareFailed {
    pub exit_code: Option<i64>,
    pub elapsed: Duration,
    pub output: String,
}

impl Session {
    /// Stage `bootstrap`: the files, the prepare script (its failure is [`PrepareFailed`]),
    /// the markers that start agentctl.
    pub(super) async fn bootstrap(&self) -> anyhow::Result<()> {
        self.write_bootstrap_files().await?;
        let output = self.run_prepare().await?;
        if output.exit_code != Some(0) {
            return Err(PrepareFailed {
                exit_code: output.exit_code,
                elapsed: output.duration,
                output: format!("{}{}", output.stdout_text(), output.stderr_text())
                    .trim()
                    .to_owned(),
            }
            .into());
        }
        self.mark_prepared_and_start().await
    }

    /// Uploads the agent to `/opt/kandev/agentctl` and writes `runtime.env`, `prepare.sh`, the
    /// home and `auth.env` as Kandev does (umask 077, a symlinked path refused with exit 73,
    /// temporary file then rename), in one exec: the binary comes on stdin, the text files as
    /// arguments (exact bytes). Ends by checking that the worker has the `docker` CLI, which
    /// the prepare gate and every scenario need.
    pub async fn write_bootstrap_files(&self) -> anyhow::Result<()> {
        // Kandev's task-owned layout (executor_kubernetes_bootstrap.go): the agent binary and
        // runtime files under /opt/kandev; the session's own environment in its home under
        // /run/kandev/sessions/<hash>/home/auth.env; the shared /run/kandev/auth.env with the
        // profile environment, the nonce and the session's HOME for the prepare script (it
        // is reduced to the nonce once preparation is done).
        let script = format!(
            r#"set -e
umask 077
{PUT}
head -c "$1" | put /opt/kandev/agentctl 0755
printf '%s' "$2" | put /opt/kandev/runtime.env 0600
printf '%s' "$3" | put /opt/kandev/prepare.sh 0600
mkdir -p /run/kandev/home
chmod 0700 /run/kandev/home
printf '%s' "$4" | put "$6/auth.env" 0600
printf '%s' "$5" | put /run/kandev/auth.env 0600
command -v docker >/dev/null 2>&1 || exit 69"#
        );
        let id = &self.identity;
        let port = CONTROL_PORT.to_string();
        let runtime = env_file::render(&[
            ("AGENTCTL_LISTEN_HOST", "127.0.0.1"),
            ("AGENTCTL_PORT", &port),
            ("AGENTCTL_INSTANCE_PORT_BASE", "41001"),
            ("AGENTCTL_INSTANCE_PORT_MAX", "41100"),
            ("KANDEV_INSTANCE_ID", &id.environment_id),
            ("KANDEV_TASK_ID", &id.task_id),
            ("KANDEV_TASK_ENVIRONMENT_ID", &id.environment_id),
        ]);
        let home = self.home();
        let profile: Vec<(&str, &str)> = self
            .session_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut session = profile.clone();
        session.extend([
            ("HOME", home.as_str()),
            ("KANDEV_SESSION_ID", id.session_id.as_str()),
            ("KANDEV_TASK_ID", id.task_id.as_str()),
            ("KANDEV_INSTANCE_ID", id.environment_id.as_str()),
            ("KANDEV_TASK_ENVIRONMENT_ID", id.environment_id.as_str()),
        ]);
        let mut shared = profile;
        shared.extend([
            ("AGENTCTL_BOOTSTRAP_NONCE", self.bootstrap_nonce.as_str()),
            ("HOME", home.as_str()),
        ]);
        let (session, shared) = (env_file::render(&session), env_file::render(&shared));
        let size = self.settings.agent_binary.len().to_string();
        let argv = [
            "sh",
            "-c",
            &script,
            "sh",
            &size,
            &runtime,
            &self.settings.prepare_script,
            &session,
            &shared,
            &home,
        ];
        let out = self
            .main_exec(
                &argv,
                Some(self.settings.agent_binary.to_vec()),
                Duration::from_secs(120),
            )
            .await?;
        match out.exit_code {
            Some(0) => Ok(()),
            Some(69) => {
                let image = self
                    .pod_spec
                    .spec
                    .as_ref()
                    .and_then(|s| {
                        s.containers
                            .iter()
                            .find(|c| c.name == self.settings.main_container)
                    })
                    .and_then(|c| c.image.clone())
                    .unwrap_or_default();
                Err(WorkerImageLacks {
                    image,
                    tool: "docker".into(),
                }
                .into())
            }
            Some(73) => bail!(
                "bootstrap: a path under /opt/kandev or /run/kandev is a symlink (or not a folder); refused"
            ),
            code => bail!(
                "bootstrap: write the runtime files: {}: {}",
                crate::backend::exit_text(code),
                out.stderr_text().trim()
            ),
        }
    }

    /// Runs `/opt/kandev/prepare.sh` with the runtime and auth environment; returns its output
    /// (bounded) whatever its exit code.
    pub async fn run_prepare(&self) -> anyhow::Result<ExecOutput> {
        let script = "set -a; . /opt/kandev/runtime.env; . /run/kandev/auth.env; set +a; exec sh /opt/kandev/prepare.sh";
        let mut out = self
            .main_exec(&["sh", "-c", script], None, self.settings.prepare_timeout)
            .await?;
        out.stdout.truncate(MAX_PREPARE_OUTPUT);
        out.stderr.truncate(MAX_PREPARE_OUTPUT);
        Ok(out)
    }

    /// After preparation: the shared auth.env keeps only the control environment (the
    /// nonce, the agent's own HOME), as Kandev rewrites it for task-owned Pods; then the
    /// `prepared` and `start` markers.
    pub async fn mark_prepared_and_start(&self) -> anyhow::Result<()> {
        let control = env_file::render(&[
            ("AGENTCTL_BOOTSTRAP_NONCE", self.bootstrap_nonce.as_str()),
            ("HOME", AGENT_HOME),
        ]);
        let script = format!(
            r#"set -e
umask 077
{PUT}
printf '%s' "$1" | put /run/kandev/auth.env 0600
: > /opt/kandev/prepared
: > /opt/kandev/start"#
        );
        let out = self
            .main_exec(
                &["sh", "-c", &script, "sh", &control],
                None,
                Duration::from_secs(30),
            )
            .await?;
        if !out.success() {
            bail!(
                "bootstrap: reduce auth.env and write the start markers: {}: {}",
                out.exit_text(),
                out.stderr_text().trim()
            );
        }
        Ok(())
    }
}
