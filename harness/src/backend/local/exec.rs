//! Exec and port-forward as [`Backend`](crate::backend::Backend) has them: a command's output
//! collected until it ends, and one exchange through the Pod's tunnel.

use super::attach::Exit;
use super::backend::LocalBackend;
use crate::backend::{BackendError, ExecOutput, ExecRequest, PodRef, Result};
use anyhow::anyhow;
use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures_util::StreamExt;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;

pub(super) async fn exec(
    backend: &LocalBackend,
    pod: &PodRef,
    request: ExecRequest,
) -> Result<ExecOutput> {
    let name = backend.verified_name(pod, &request.container).await?;
    let timeout = request.timeout.unwrap_or(Duration::from_secs(120));
    exec_in(backend, &name, request.argv.clone(), request.stdin, timeout)
        .await
        .map_err(|source| BackendError::Exec {
            pod: pod.name.clone(),
            container: request.container,
            argv: request.argv,
            source,
        })
}

/// One exchange with `port` in the Pod's network namespace, through its tunnel.
pub(super) async fn port_exchange(
    backend: &LocalBackend,
    pod: &PodRef,
    container: &str,
    port: u16,
    request: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>> {
    // The tunnel runs in the infra container, which holds the network namespace every
    // container of the Pod shares: `container` names no different loopback.
    let _ = container;
    backend
        .tunnels
        .exchange(&backend.streams(), pod, port, request, timeout)
        .await
}

/// Runs `argv` in the engine container `engine_name`, its output collected within `timeout`.
async fn exec_in(
    backend: &LocalBackend,
    engine_name: &str,
    argv: Vec<String>,
    stdin: Option<Vec<u8>>,
    timeout: Duration,
) -> anyhow::Result<ExecOutput> {
    let started = Instant::now();
    let created = backend
        .objects
        .docker
        .create_exec(
            engine_name,
            CreateExecOptions {
                cmd: Some(argv),
                attach_stdin: Some(stdin.is_some()),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                ..Default::default()
            },
        )
        .await?;
    let run = async {
        let mut out = ExecOutput::default();
        let options = StartExecOptions {
            detach: false,
            tty: false,
            output_capacity: Some(1 << 20),
        };
        if let StartExecResults::Attached {
            mut output,
            mut input,
        } = backend
            .objects
            .docker
            .start_exec(&created.id, Some(options))
            .await?
        {
            if let Some(bytes) = stdin {
                input.write_all(&bytes).await?;
                input.flush().await?;
                input.shutdown().await?;
            }
            while let Some(chunk) = output.next().await {
                match chunk? {
                    LogOutput::StdOut { message } | LogOutput::Console { message } => {
                        out.stdout.extend_from_slice(&message)
                    }
                    LogOutput::StdErr { message } => out.stderr.extend_from_slice(&message),
                    LogOutput::StdIn { .. } => {}
                }
            }
        }
        anyhow::Ok(out)
    };
    let mut out = tokio::time::timeout(timeout, run)
        .await
        .map_err(|_| anyhow!("no exit within {timeout:?}"))??;
    out.exit_code = Exit::of(backend.objects.docker.clone(), created.id)
        .code()
        .await?;
    out.duration = started.elapsed();
    Ok(out)
}
