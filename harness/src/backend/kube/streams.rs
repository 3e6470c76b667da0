//! Exec and port-forward, each bounded by its own deadline (the client has no read timeout,
//! which would cut their streams): an exec's output and exit code, and one HTTP exchange with
//! a port inside the Pod.

use super::backend::KubeBackend;
use super::errors::other;
use crate::backend::{BackendError, ExecOutput, ExecRequest, PodRef, Result};
use crate::wait::WaitTimedOut;
use anyhow::anyhow;
use kube::api::AttachParams;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The deadline of an exec whose request names none. The client has no read timeout (it would
/// cut exec and port-forward streams), so every exec is bounded by its own deadline.
pub const EXEC_DEADLINE: Duration = Duration::from_secs(600);

/// Runs `request` in its container, collecting stdout and stderr, within its deadline.
pub(super) async fn exec(
    backend: &KubeBackend,
    pod: &PodRef,
    request: ExecRequest,
) -> Result<ExecOutput> {
    let started = Instant::now();
    let error = |source: anyhow::Error| BackendError::Exec {
        pod: pod.name.clone(),
        container: request.container.clone(),
        argv: request.argv.clone(),
        source,
    };
    let params = AttachParams::default()
        .container(request.container.clone())
        .stdin(request.stdin.is_some())
        .stdout(true)
        .stderr(true);
    let run = async {
        let mut attached = backend
            .pods()
            .exec(&pod.name, request.argv.clone(), &params)
            .await
            .map_err(|e| error(e.into()))?;
        let status = attached.take_status();
        let mut stdout = attached.stdout();
        let mut stderr = attached.stderr();
        let feed = async {
            if let (Some(bytes), Some(mut stdin)) = (&request.stdin, attached.stdin()) {
                stdin.write_all(bytes).await?;
                stdin.shutdown().await?;
            }
            std::io::Result::Ok(())
        };
        let read = |reader: Option<Box<dyn tokio::io::AsyncRead + Unpin + Send>>| async move {
            let mut out = Vec::new();
            if let Some(mut reader) = reader {
                reader.read_to_end(&mut out).await?;
            }
            std::io::Result::Ok(out)
        };
        let (fed, out, err) = tokio::join!(
            feed,
            read(
                stdout
                    .take()
                    .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>)
            ),
            read(
                stderr
                    .take()
                    .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Unpin + Send>)
            ),
        );
        fed.map_err(|e| error(e.into()))?;
        let (out, err) = (
            out.map_err(|e| error(e.into()))?,
            err.map_err(|e| error(e.into()))?,
        );
        let status = match status {
            Some(status) => status.await,
            None => None,
        };
        let _ = attached.join().await;
        Ok(ExecOutput {
            exit_code: status.as_ref().and_then(exit_code),
            stdout: out,
            stderr: err,
            duration: started.elapsed(),
        })
    };
    let limit = request.timeout.unwrap_or(EXEC_DEADLINE);
    tokio::time::timeout(limit, run).await.map_err(|_| {
        BackendError::from(WaitTimedOut {
            what: format!(
                "exec {:?} in {}/{}",
                request.argv, pod.name, request.container
            ),
            waited: limit,
        })
    })?
}

/// Writes `request` to `port` in the Pod through a port-forward and reads one HTTP answer.
pub(super) async fn port_exchange(
    backend: &KubeBackend,
    pod: &PodRef,
    port: u16,
    request: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>> {
    let exchange = async {
        let mut forwarder = backend
            .pods()
            .portforward(&pod.name, &[port])
            .await
            .map_err(|e| other(format!("port-forward to {}:{port}", pod.name), e))?;
        let mut stream = forwarder.take_stream(port).ok_or_else(|| {
            other(
                format!("port-forward to {}:{port}", pod.name),
                anyhow!("no stream"),
            )
        })?;
        stream
            .write_all(request)
            .await
            .map_err(|e| other("port-forward write", e))?;
        let response = read_http_response(&mut stream)
            .await
            .map_err(|e| other("port-forward read", e))?;
        drop(stream);
        forwarder.abort();
        Ok(response)
    };
    tokio::time::timeout(timeout, exchange).await.map_err(|_| {
        BackendError::from(WaitTimedOut {
            what: format!("an answer from {}:{port} through port-forward", pod.name),
            waited: timeout,
        })
    })?
}

/// Reads one HTTP/1.x response from `stream`: up to the end of its body when it has a
/// `Content-Length`, otherwise until the stream ends (a port-forward stream may stay open
/// after the server closed its side).
async fn read_http_response<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
) -> std::io::Result<Vec<u8>> {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if let Some(length) = length
                && buffer.len() >= end + 4 + length
            {
                buffer.truncate(end + 4 + length);
                return Ok(buffer);
            }
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(buffer);
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// The exit code an exec's final status reports (`Success` is 0; failures carry the code
/// as the `ExitCode` cause).
fn exit_code(status: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Status) -> Option<i64> {
    if status.status.as_deref() == Some("Success") {
        return Some(0);
    }
    status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|causes| {
            causes
                .iter()
                .find(|c| c.reason.as_deref() == Some("ExitCode"))
                .and_then(|c| c.message.as_ref())
                .and_then(|m| m.parse().ok())
        })
}
