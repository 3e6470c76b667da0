//! Exec and port-forward over the API server's websockets, each bounded by its own deadline
//! (the client has no read timeout, which would cut their streams): an exec's output and exit
//! code, and one HTTP exchange with a port inside the Pod.
//!
//! Spoken here rather than through kube-rs's `AttachedProcess` and `Portforwarder` (same
//! `Client::connect` upgrade, same framing: `v5.channel.k8s.io` / `v4.channel.k8s.io`) for
//! two things those lack:
//! - **Keepalive**: a websocket ping every [`KubeBackend::keepalive`] (20 s) both ways of a
//!   silent stream. Load balancers in front of API servers cut connections idle for 60 s
//!   (AWS ALB, nginx ingress defaults) or longer; an agent call may stay silent for 240 s.
//!   kube-rs's port-forward sends none and its exec one a minute, on the very edge of such a
//!   cut. (TCP keepalive would not do: an HTTP load balancer counts bytes, not probes.)
//! - **A stream that breaks is named**: kube-rs's exec ends a lost connection as if the
//!   command had ended without a status, and its port-forward as if the Pod had closed the
//!   port (a short answer read as complete). Here each is an error naming the lost
//!   connection, the command or port, and the fix; an exec is repeated only when its command
//!   never ran (a refused upgrade, or a stream a translator could not take on: see
//!   [`not_taken_to_the_kubelet`]), a port-forward's HTTP exchange is the caller's to repeat.

use super::backend::KubeBackend;
use super::cluster::resilience::{UPGRADE_PAUSE, UPGRADE_RETRIES};
use super::errors::other;
use crate::backend::{BackendError, ExecOutput, ExecRequest, PodRef, Result};
use crate::wait::WaitTimedOut;
use anyhow::anyhow;
use futures_util::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::AttachParams;
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

/// The deadline of an exec whose request names none. The client has no read timeout (it would
/// cut exec and port-forward streams), so every exec is bounded by its own deadline.
pub const EXEC_DEADLINE: Duration = Duration::from_secs(600);

/// The largest frame sent (stdin, a port's bytes).
const FRAME: usize = 32 * 1024;

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const STATUS: u8 = 3;
/// v5's close signal: `[CLOSE, channel]` ends that channel (stdin's end).
const CLOSE: u8 = 255;

/// The fix every lost stream names.
const LOST_FIX: &str = "a load balancer, proxy or restarting API server cut the connection; check the cluster's health and the load balancer's idle timeout, then rerun (the run's summary names the `gc` command that removes what it left)";

/// An exec's or port-forward's stream broken in transit (the websocket's connection to the API
/// server failed: an I/O or protocol error), as a lost API server or a proxy cutting it does.
/// Not a stream the API server closed without an exit status: a dying container does that.
#[derive(Debug, thiserror::Error)]
#[error("the {what} stream broke before {before}: {cause}\n  fix: {LOST_FIX}")]
pub struct StreamBroke {
    pub what: &'static str,
    pub before: &'static str,
    pub cause: String,
}

type Socket = tokio_tungstenite::WebSocketStream<hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>>;

/// Pings `sink` every `period`, for as long as it is polled (the stream's reader decides
/// how the stream ended: a ping that cannot be sent stops the pings, and the reader then
/// sees the connection gone).
async fn keep_alive(
    sink: &tokio::sync::Mutex<futures_util::stream::SplitSink<Socket, Message>>,
    period: Duration,
) {
    let mut ticks = tokio::time::interval(period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let sent = sink
            .lock()
            .await
            .send(Message::Ping(Default::default()))
            .await;
        if sent.is_err() {
            return std::future::pending().await;
        }
    }
}

/// The websocket of `request` (an exec or port-forward upgrade) and whether it speaks v5.
/// The client's retries (`cluster::resilience`) have asked again while the kubelet could not
/// serve; a refusal left is named with its cause.
async fn connect(
    backend: &KubeBackend,
    request: http::Request<Vec<u8>>,
) -> anyhow::Result<(Socket, bool)> {
    let connection = backend
        .client
        .connect(request)
        .await
        .map_err(upgrade_refused)?;
    let v5 = connection.supports_stream_close();
    Ok((connection.into_stream(), v5))
}

/// The kubelet's own "pod does not exist" (a plain-text 404 the API server passes on while
/// it holds the Pod), lasting through the upgrade's retries: the node's fault, not the Pod's.
#[derive(Debug, thiserror::Error)]
#[error(
    "the kubelet of the Pod's node kept answering \"pod does not exist\" while the client asked again, a second apart, and the API server holds the Pod: a restarted kubelet that has not read its Pods back, or a node that lost them\n  fix: check the node (`kubectl get node`, the kubelet's log: `journalctl -u kubelet` on the node), then rerun (the run's summary names the `gc` command that removes what it left)"
)]
pub struct KubeletLacksPod;

/// An exec or port-forward could not be taken to the container, through the client's
/// retries: a hop on the way could not be dialled. Two hops translate a v5 exec's stream: the
/// API server towards a kubelet that does not take websockets itself, and the 1.37 kubelet
/// towards its container runtime's streaming server (`pkg/kubelet/server/server.go`); either
/// tells a failed dial on the status channel, and the API server's proxy tells its own as
/// "error dialing backend".
#[derive(Debug, thiserror::Error)]
#[error(
    "the exec never reached the container: a hop on the way (the API server to the node's kubelet, or the kubelet to its container runtime) could not be dialled while the client asked again, a second apart: {cause}\n  fix: check the node (`kubectl get node`; on the node, the kubelet's and containerd's logs: `journalctl -u kubelet -u containerd`) and that the API server reaches the kubelet's port (10250), then rerun (the run's summary names the `gc` command that removes what it left)"
)]
pub struct ContainerUnreachable {
    pub cause: String,
}

/// An upgrade's refusal, with the kubelet's own "pod does not exist", and a kubelet the API
/// server could not dial (its proxy's "error dialing backend: <dial error>", k8s.io/
/// apimachinery `pkg/util/proxy/upgradeaware.go`), named as the node's.
fn upgrade_refused(e: kube::Error) -> anyhow::Error {
    match &e {
        kube::Error::Api(status)
            if status.code == 404 && status.message == "pod does not exist" =>
        {
            KubeletLacksPod.into()
        }
        kube::Error::Api(status)
            if status.code >= 500 && status.message.contains("error dialing backend: ") =>
        {
            ContainerUnreachable {
                cause: status.message.clone(),
            }
            .into()
        }
        _ => e.into(),
    }
}

/// The API path of the backend's Pods.
fn pods_path(backend: &KubeBackend) -> kube::core::Request {
    kube::core::Request::new(Pod::url_path(&(), Some(&backend.namespace)))
}

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
    let limit = request.timeout.unwrap_or(EXEC_DEADLINE);
    let timed_out = || {
        BackendError::from(WaitTimedOut {
            what: format!(
                "exec {:?} in {}/{}",
                request.argv, pod.name, request.container
            ),
            waited: limit,
        })
    };
    let mut deadline = None;
    let mut not_taken = 0;
    loop {
        let mut upgrade = pods_path(backend)
            .exec(&pod.name, request.argv.clone(), &params)
            .map_err(|e| error(e.into()))?;
        upgrade.extensions_mut().insert("exec");
        // Connected before the command's deadline starts: the client's retries wait out a
        // restarting kubelet within the client's own answer bound, and the command has not run.
        let (socket, v5) = connect(backend, upgrade).await.map_err(error)?;
        // One deadline from the first connection, whatever attempts it takes to start it.
        let deadline = *deadline.get_or_insert_with(|| Instant::now() + limit);
        let left = deadline
            .checked_duration_since(Instant::now())
            .ok_or_else(timed_out)?;
        let streamed = tokio::time::timeout(left, stream_exec(backend, socket, v5, &request))
            .await
            .map_err(|_| timed_out())?
            .map_err(error)?;
        match streamed {
            Streamed::Ended {
                stdout,
                stderr,
                exit_code,
            } => {
                return Ok(ExecOutput {
                    exit_code,
                    stdout,
                    stderr,
                    duration: started.elapsed(),
                });
            }
            // The command never ran: sent again as the client sends a refused upgrade again.
            Streamed::NotTaken(_) if not_taken < UPGRADE_RETRIES => {
                not_taken += 1;
                tokio::time::sleep(UPGRADE_PAUSE).await;
            }
            Streamed::NotTaken(refusal) => return Err(error(refusal)),
        }
    }
}

/// How an exec's stream ended.
enum Streamed {
    /// The command ran and ended with this output and exit code.
    Ended {
        stdout: Vec<u8>,
        stderr: Vec<u8>,
        exit_code: Option<i64>,
    },
    /// The API server could not take the exec to the kubelet: the command never ran.
    NotTaken(anyhow::Error),
}

/// Feeds `request`'s stdin to the command and reads its output and exit status.
async fn stream_exec(
    backend: &KubeBackend,
    socket: Socket,
    v5: bool,
    request: &ExecRequest,
) -> anyhow::Result<Streamed> {
    let (sink, mut stream) = socket.split();
    let sink = tokio::sync::Mutex::new(sink);
    let feed = async {
        let Some(bytes) = &request.stdin else {
            return Ok(());
        };
        for piece in bytes.chunks(FRAME) {
            let mut frame = Vec::with_capacity(piece.len() + 1);
            frame.push(STDIN);
            frame.extend_from_slice(piece);
            sink.lock().await.send(Message::binary(frame)).await?;
        }
        if v5 {
            sink.lock()
                .await
                .send(Message::binary(vec![CLOSE, STDIN]))
                .await
        } else {
            // v4 has no close signal: the socket's end ends stdin (as kube-rs does).
            sink.lock().await.close().await
        }
    };
    let read = async {
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        while let Some(message) = stream.next().await {
            let Message::Binary(bytes) = message? else {
                continue;
            };
            // A frame of the channel byte alone opens the channel.
            let Some((&channel, data)) = bytes.split_first() else {
                continue;
            };
            match channel {
                STDOUT => stdout.extend_from_slice(data),
                STDERR => stderr.extend_from_slice(data),
                STATUS if !data.is_empty() => {
                    let status = serde_json::from_slice(data).ok();
                    return Ok((stdout, stderr, Some(status)));
                }
                _ => {}
            }
        }
        Ok::<_, tokio_tungstenite::tungstenite::Error>((stdout, stderr, None))
    };
    let streamed = async {
        let (fed, read) = tokio::join!(feed, read);
        match read {
            // The command ended: stdin it did not read (it exited first, the send then
            // failing) is its own business, not a stream broken in transit.
            Ok(ended @ (_, _, Some(_))) => Ok(ended),
            Ok(ended) => fed.map(|()| ended),
            Err(e) => Err(e),
        }
    };
    let ended = tokio::select! {
        ended = streamed => ended,
        () = keep_alive(&sink, backend.keepalive) => Ok((Vec::new(), Vec::new(), None)),
    };
    let (stdout, stderr, status) = ended.map_err(|e| StreamBroke {
        what: "exec",
        before: "the command's exit status",
        cause: e.to_string(),
    })?;
    let Some(status) = status else {
        return Err(anyhow!(
            "the exec stream ended without the command's exit status (the connection was closed after {} bytes of stdout, {} of stderr)\n  fix: {LOST_FIX}",
            stdout.len(),
            stderr.len()
        ));
    };
    let _ = sink.lock().await.close().await;
    if stdout.is_empty()
        && stderr.is_empty()
        && let Some(refusal) = status.as_ref().and_then(not_taken_to_the_kubelet)
    {
        return Ok(Streamed::NotTaken(refusal));
    }
    Ok(Streamed::Ended {
        exit_code: status.as_ref().and_then(exit_code),
        stdout,
        stderr,
    })
}

/// The API server could not take an exec to the Pod's kubelet, told on the exec's status
/// channel. A v5 exec reaches the kubelet through the API server's stream translator
/// (API servers 1.30 and later, for nodes that do not declare `ExtendWebSocketsToKubelet`:
/// `pkg/registry/core/pod/rest/subresources.go`). The translator upgrades the client's
/// websocket first and dials the kubelet after, so a kubelet it cannot reach, or one that
/// refuses the upgrade, is reported as `NewInternalError` on channel 3, not as the upgrade's
/// answer (k8s.io/apiserver `pkg/util/proxy/streamtranslator.go`, `ServeHTTP`). The words
/// are client-go's SPDY executor's: "error sending request: <dial error>" (transport/spdy
/// `Negotiate`), "unable to upgrade connection: <the kubelet's answer>" (k8s.io/streaming
/// `SpdyRoundTripper.NewConnection`). The command never ran.
fn not_taken_to_the_kubelet(
    status: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Status,
) -> Option<anyhow::Error> {
    const INTERNAL: &str = "Internal error occurred: ";
    if status.reason.as_deref() != Some("InternalError") {
        return None;
    }
    let cause = status.message.as_deref()?.strip_prefix(INTERNAL)?;
    if let Some(answer) = cause.strip_prefix("unable to upgrade connection: ") {
        return Some(if answer == "pod does not exist" {
            KubeletLacksPod.into()
        } else {
            anyhow!(
                "the Pod's kubelet refused the exec, asked again a second apart: {answer}\n  fix: check the Pod's containers (`kubectl describe pod`) and its node's kubelet log (`journalctl -u kubelet` on the node)"
            )
        });
    }
    cause.starts_with("error sending request: ").then(|| {
        ContainerUnreachable {
            cause: cause.to_owned(),
        }
        .into()
    })
}

/// Writes `request` to `port` in the Pod through a port-forward (`v4.channel.k8s.io`: the
/// port's data channel 0 and error channel 1, each opened by the server with the port) and
/// reads one HTTP answer, whole.
pub(super) async fn port_exchange(
    backend: &KubeBackend,
    pod: &PodRef,
    port: u16,
    request: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>> {
    let what = format!("port-forward to {}:{port}", pod.name);
    let mut upgrade = pods_path(backend)
        .portforward(&pod.name, &[port])
        .map_err(|e| other(what.clone(), e))?;
    upgrade.extensions_mut().insert("portforward");
    // As an exec's: connected before the exchange's deadline starts.
    let (socket, _) = connect(backend, upgrade)
        .await
        .map_err(|e| other(what.clone(), e))?;
    let exchange = async {
        let (sink, mut stream) = socket.split();
        let sink = tokio::sync::Mutex::new(sink);
        let send = async {
            for piece in request.chunks(FRAME) {
                let mut frame = Vec::with_capacity(piece.len() + 1);
                frame.push(0);
                frame.extend_from_slice(piece);
                sink.lock().await.send(Message::binary(frame)).await?;
            }
            Ok::<_, tokio_tungstenite::tungstenite::Error>(())
        };
        let read = async {
            let mut opened = [false; 2];
            let mut response = Vec::new();
            while let Some(message) = stream.next().await {
                let bytes = match message? {
                    Message::Binary(bytes) => bytes,
                    Message::Close(_) => break,
                    _ => continue,
                };
                let Some((&channel, data)) = bytes.split_first() else {
                    continue;
                };
                let Some(open) = opened.get_mut(usize::from(channel)) else {
                    continue;
                };
                if !*open {
                    // The channel's first frame is the port it is for.
                    *open = true;
                    continue;
                }
                if channel == 1 {
                    return Ok(Err(String::from_utf8_lossy(data).into_owned()));
                }
                response.extend_from_slice(data);
                if http_response_complete(&response) == Some(true) {
                    break;
                }
            }
            Ok::<_, tokio_tungstenite::tungstenite::Error>(Ok(response))
        };
        let streamed = async { tokio::try_join!(send, read).map(|(_, read)| read) };
        let ended = tokio::select! {
            ended = streamed => ended,
            () = keep_alive(&sink, backend.keepalive) => Ok(Ok(Vec::new())),
        };
        let _ = sink.lock().await.close().await;
        let response = ended.map_err(|e| {
            other(
                what.clone(),
                StreamBroke {
                    what: "port-forward",
                    before: "the answer was whole",
                    cause: e.to_string(),
                },
            )
        })?;
        let response = response.map_err(|refused| {
            other(
                what.clone(),
                anyhow!("the Pod refused the connection: {refused}"),
            )
        })?;
        match http_response_complete(&response) {
            Some(true) => {
                let end = response_end(&response).unwrap_or(response.len());
                Ok(response[..end].to_vec())
            }
            // No length given: the answer is what came before the end.
            None if !response.is_empty() => Ok(response),
            _ => Err(other(
                what.clone(),
                anyhow!(
                    "the port-forward ended before the answer was whole ({} bytes: {:?})\n  fix: {LOST_FIX}",
                    response.len(),
                    String::from_utf8_lossy(&response[..response.len().min(200)])
                ),
            )),
        }
    };
    tokio::time::timeout(timeout, exchange).await.map_err(|_| {
        BackendError::from(WaitTimedOut {
            what: format!("an answer from {}:{port} through port-forward", pod.name),
            waited: timeout,
        })
    })?
}

/// Where an HTTP/1.x response in `buffer` ends by its `Content-Length` (None: its head is
/// not whole, or it names no length).
fn response_end(buffer: &[u8]) -> Option<usize> {
    let end = buffer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())?;
    Some(end + 4 + length)
}

/// Whether the response in `buffer` is whole: `Some(true)` once its `Content-Length` has
/// arrived, `Some(false)` before, None when its head is whole but names no length (then it
/// ends with the stream).
fn http_response_complete(buffer: &[u8]) -> Option<bool> {
    if let Some(end) = response_end(buffer) {
        return Some(buffer.len() >= end);
    }
    let head_whole = buffer.windows(4).any(|w| w == b"\r\n\r\n");
    if head_whole { None } else { Some(false) }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn status(
        reason: &str,
        message: &str,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Status {
        serde_json::from_value(serde_json::json!({
            "status": "Failure", "reason": reason, "message": message, "code": 500
        }))
        .unwrap()
    }

    #[test]
    fn the_translators_kubelet_refusals_are_told_from_the_commands_own_failures() {
        let lacks = status(
            "InternalError",
            "Internal error occurred: unable to upgrade connection: pod does not exist",
        );
        let lacks = not_taken_to_the_kubelet(&lacks).unwrap();
        assert!(lacks.is::<KubeletLacksPod>(), "{lacks:#}");
        let dial = status(
            "InternalError",
            "Internal error occurred: error sending request: dial tcp 10.0.0.7:10250: connect: connection refused",
        );
        let dial = not_taken_to_the_kubelet(&dial).unwrap();
        assert!(dial.is::<ContainerUnreachable>(), "{dial:#}");
        let refused = status(
            "InternalError",
            "Internal error occurred: unable to upgrade connection: container not found (\"agent\")",
        );
        let refused = not_taken_to_the_kubelet(&refused).unwrap();
        assert!(
            !refused.is::<ContainerUnreachable>()
                && format!("{refused}").contains("container not found"),
            "{refused:#}"
        );
        // The command's own ends are the command's.
        let exited = status(
            "NonZeroExitCode",
            "command terminated with non-zero exit code: exit status 1",
        );
        assert!(not_taken_to_the_kubelet(&exited).is_none());
        let lost = status(
            "InternalError",
            "Internal error occurred: error reading from error stream",
        );
        assert!(not_taken_to_the_kubelet(&lost).is_none());
    }

    #[test]
    fn a_kubelet_the_api_server_could_not_dial_is_named_as_the_nodes() {
        let dial: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "reason": "InternalError", "code": 500,
            "message": "error dialing backend: dial tcp 172.18.0.2:10250: connect: connection refused"
        }))
        .unwrap();
        let named = upgrade_refused(kube::Error::Api(Box::new(dial)));
        assert!(named.is::<ContainerUnreachable>(), "{named:#}");
        let other: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "reason": "NotFound", "code": 404,
            "message": "pods \"x\" not found"
        }))
        .unwrap();
        let other = upgrade_refused(kube::Error::Api(Box::new(other)));
        assert!(!other.is::<ContainerUnreachable>() && !other.is::<KubeletLacksPod>());
    }

    #[test]
    fn an_http_answer_is_whole_by_its_content_length_or_the_streams_end() {
        let head = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n".to_vec();
        assert_eq!(http_response_complete(&head), Some(false));
        let mut whole = head.clone();
        whole.extend_from_slice(b"hello");
        assert_eq!(http_response_complete(&whole), Some(true));
        assert_eq!(response_end(&whole), Some(whole.len()));
        assert_eq!(http_response_complete(b"HTTP/1.1 200 OK\r\n"), Some(false));
        assert_eq!(
            http_response_complete(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nbody"),
            None
        );
    }
}
