//! pods/exec and pods/portforward over websockets, framed as the API server frames them for
//! kube-rs: every binary message starts with its channel byte.
//!
//! - exec (`v5.channel.k8s.io`, which kube-rs, the only client, always offers first): stdin
//!   0, stdout 1, stderr 2, the error/status channel 3 (a JSON `Status`; a non-zero exit code
//!   in `details.causes[reason=ExitCode]`); the client ends stdin with `[255, 0]`.
//!   The command starts at once with its streams attached (the local backend's
//!   [`PodStreams::exec`]): stdin is written as the client sends it, and stdout and stderr
//!   are sent as the command writes them, the status when it has ended, as a kubelet does.
//! - portforward (`v4.channel.k8s.io`, the one kube-rs accepts for it): per requested port
//!   a data channel `2i` and an error channel `2i+1`, each opened by the server with a first
//!   frame carrying the port (little-endian u16). Each port is a byte tunnel to 127.0.0.1:port
//!   in the Pod's network namespace ([`PodStreams::port`]), both ways at once, as a kubelet's
//!   port-forward is: the client's bytes go to the Pod as they arrive, the Pod's come back as
//!   they are written; a refused connection is reported on the error channel. The client
//!   ending the socket ends the tunnels' input (the Pod side sees EOF); the tunnels ending
//!   (the Pod side closed) closes the socket.
//!
//! Flow control: nothing is buffered beyond a frame or two. A client that stops reading
//! blocks the double's writes, which stops it reading the command's output (or the tunnel),
//! which stops the writer in the Pod; and the other way round.

use super::route::{Route, container_param};
use super::status::{Reply, full, not_found, status};
use super::store::{DoubleState, Running};
use futures_util::{SinkExt, StreamExt};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use kandev_harness::backend::PodRef;
use kandev_harness::backend::local::attach::{Attached, Exit, Output, PodStreams};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

/// exec's protocol.
const V5: &str = "v5.channel.k8s.io";
/// port-forward's (kube-rs takes no other for it).
const V4: &str = "v4.channel.k8s.io";
/// The longest command the double runs (the client bounds its own exec).
const EXEC_LIMIT: Duration = Duration::from_secs(3600);
/// How long port tunnels may take to finish once the client has gone.
const TUNNEL_GRACE: Duration = Duration::from_secs(30);

/// The largest frame the double sends.
const FRAME: usize = 32 * 1024;
/// At most this much of a tunnel's stderr goes into its error message.
const MAX_ERROR: usize = 4096;

/// An error answer before the upgrade (boxed: a Response is large).
type Refused = Box<Reply>;

type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// The Pod of the route, its runtime Pod and the streams into it; or the error reply.
fn target(state: &DoubleState, route: &Route) -> Result<(Value, PodRef, PodStreams), Refused> {
    let name = route.name.clone().unwrap_or_default();
    let ns = route.namespace.clone().unwrap_or_default();
    let store = state.store();
    let Some(pod) = store
        .objects
        .get(&("/pods".to_owned(), ns, name.clone()))
        .cloned()
    else {
        return Err(Box::new(not_found(route, &name)));
    };
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    match (store.running.get(uid), state.streams.clone()) {
        (Some(Running::Ready(running)), Some(streams)) => Ok((pod, running.clone(), streams)),
        _ => Err(Box::new(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("pod {name} is not running (the double has no runtime Pod for it)"),
            json!({}),
        ))),
    }
}

/// The 101 answer (speaking `protocol`), and the websocket once the connection is upgraded.
fn upgrade(
    req: &mut Request<Incoming>,
    protocol: &'static str,
) -> Result<(Reply, hyper::upgrade::OnUpgrade), Refused> {
    let offered: Vec<&str> = req
        .headers()
        .get_all(hyper::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(',').map(str::trim))
        .collect();
    if !offered.contains(&protocol) {
        return Err(Box::new(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!(
                "no supported websocket subprotocol among {offered:?}: the kube double serves {protocol} only here (what the harness's client uses; no SPDY)"
            ),
            json!({}),
        )));
    }
    let Some(key) = req.headers().get(hyper::header::SEC_WEBSOCKET_KEY).cloned() else {
        return Err(Box::new(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "no Sec-WebSocket-Key",
            json!({}),
        )));
    };
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let on = hyper::upgrade::on(req);
    let mut reply = Response::new(full(Bytes::new()));
    *reply.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = reply.headers_mut();
    let value = hyper::header::HeaderValue::from_static;
    headers.insert(hyper::header::UPGRADE, value("websocket"));
    headers.insert(hyper::header::CONNECTION, value("Upgrade"));
    headers.insert(hyper::header::SEC_WEBSOCKET_PROTOCOL, value(protocol));
    if let Ok(accept) = hyper::header::HeaderValue::from_str(&accept) {
        headers.insert(hyper::header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    Ok((reply, on))
}

async fn socket(on: hyper::upgrade::OnUpgrade) -> Option<Socket> {
    let upgraded = on.await.ok()?;
    Some(WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await)
}

/// A close frame with the normal-closure code (1000), as the API server ends a stream:
/// client-go's websocket executor (kubectl exec) takes any other end, a close without a
/// code (1005) included, for a failed stream (`remotecommand/websocket.go`, `readDemuxLoop`:
/// only `CloseNormalClosure` ends it cleanly), and reports "error reading from error
/// stream" instead of the command's exit code.
fn normal_close() -> Message {
    use tokio_tungstenite::tungstenite::protocol::CloseFrame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
    Message::Close(Some(CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    }))
}

fn framed(channel: u8, bytes: &[u8]) -> Message {
    let mut frame = Vec::with_capacity(bytes.len() + 1);
    frame.push(channel);
    frame.extend_from_slice(bytes);
    Message::binary(frame)
}

pub(crate) async fn exec(
    state: Arc<DoubleState>,
    mut req: Request<Incoming>,
    route: Route,
    query: Vec<(String, String)>,
) -> Reply {
    let (pod, running, streams) = match target(&state, &route) {
        Ok(t) => t,
        Err(reply) => return *reply,
    };
    let argv: Vec<String> = query
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    let container = container_param(&query, &pod);
    let stdin = query.iter().any(|(k, v)| k == "stdin" && v == "true");
    if argv.is_empty() {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "you must specify at least 1 command",
            json!({}),
        );
    }
    let (reply, on) = match upgrade(&mut req, V5) {
        Ok(u) => u,
        Err(reply) => return *reply,
    };
    tokio::spawn(async move {
        let Some(ws) = socket(on).await else {
            return;
        };
        match streams
            .exec(&running, &container, argv.clone(), stdin)
            .await
        {
            Ok(attached) => {
                let served = serve_exec(ws, attached, argv, stdin);
                let _ = tokio::time::timeout(EXEC_LIMIT, served).await;
            }
            Err(e) => {
                let failure = json!({"metadata": {}, "status": "Failure",
                    "message": e.to_string(), "reason": "InternalError"});
                fail(ws, failure).await;
            }
        }
    });
    reply
}

/// Ends an exec with `failure` on its status channel, the command never run.
async fn fail(mut ws: Socket, failure: Value) {
    let _ = ws.send(framed(3, failure.to_string().as_bytes())).await;
    let _ = ws.send(normal_close()).await;
}

/// An exec the stream translator could not take to the kubelet (`Fault::TranslatedRefusal`):
/// upgraded, then `NewInternalError(cause)` on the status channel (k8s.io/apimachinery
/// `pkg/api/errors`: code 500, reason InternalError, "Internal error occurred: <cause>").
pub(crate) fn translated_refusal(mut req: Request<Incoming>, cause: &str) -> Reply {
    let (reply, on) = match upgrade(&mut req, V5) {
        Ok(u) => u,
        Err(reply) => return *reply,
    };
    let failure = json!({"metadata": {}, "status": "Failure",
        "message": format!("Internal error occurred: {cause}"), "reason": "InternalError",
        "details": {"causes": [{"message": cause}]}, "code": 500});
    tokio::spawn(async move {
        if let Some(ws) = socket(on).await {
            fail(ws, failure).await;
        }
    });
    reply
}

/// Relays one attached command: the client's stdin to it while it runs, its output to the
/// client as it comes, then its exit status.
async fn serve_exec(ws: Socket, attached: Attached, argv: Vec<String>, stdin: bool) {
    let (mut sink, mut stream) = ws.split();
    let Attached {
        mut input,
        mut output,
        exit,
    } = attached;
    // The client's stdin as it comes, until its close frame or the socket's end; reading
    // also answers the client's pings and close.
    let to_command = async move {
        let mut open = stdin;
        while let Some(Ok(message)) = stream.next().await {
            let Message::Binary(bytes) = message else {
                if message.is_close() {
                    break;
                }
                continue;
            };
            match bytes.first() {
                Some(0) if open => {
                    open = input.write_all(&bytes[1..]).await.is_ok();
                }
                Some(255) if bytes.get(1) == Some(&0) && open => {
                    let _ = input.shutdown().await;
                    open = false;
                }
                _ => {}
            }
        }
        if open {
            let _ = input.shutdown().await;
        }
    };
    let from_command = async move {
        let mut failure = None;
        while let Some(chunk) = output.next().await {
            let (channel, bytes) = match chunk {
                Ok(Output::Stdout(bytes)) => (1u8, bytes),
                Ok(Output::Stderr(bytes)) => (2u8, bytes),
                Err(e) => {
                    failure = Some(format!("{e:#}"));
                    break;
                }
            };
            for piece in bytes.chunks(FRAME) {
                if sink.send(framed(channel, piece)).await.is_err() {
                    // The client has gone.
                    return;
                }
            }
        }
        let exit = match failure {
            Some(e) => Err(e),
            None => exit.code().await.map_err(|e| format!("{e:#}")),
        };
        let status = match exit {
            Ok(Some(0)) => json!({"metadata": {}, "status": "Success"}),
            Ok(Some(code)) => json!({"metadata": {}, "status": "Failure",
                "message": format!("command terminated with non-zero exit code: error executing command {argv:?}, exit code {code}"),
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}}),
            Ok(None) => json!({"metadata": {}, "status": "Failure",
                "message": "the command ended without an exit code", "reason": "InternalError"}),
            Err(e) => {
                json!({"metadata": {}, "status": "Failure", "message": e, "reason": "InternalError"})
            }
        };
        let _ = sink.send(framed(3, status.to_string().as_bytes())).await;
        let _ = sink.send(normal_close()).await;
    };
    tokio::pin!(to_command, from_command);
    let mut reading = true;
    loop {
        tokio::select! {
            () = &mut from_command => break,
            () = &mut to_command, if reading => reading = false,
        }
    }
}

pub(crate) async fn portforward(
    state: Arc<DoubleState>,
    mut req: Request<Incoming>,
    route: Route,
    query: Vec<(String, String)>,
) -> Reply {
    let (_, running, streams) = match target(&state, &route) {
        Ok(t) => t,
        Err(reply) => return *reply,
    };
    let ports: Result<Vec<u16>, _> = query
        .iter()
        .filter(|(k, _)| k == "ports")
        .flat_map(|(_, v)| v.split(',').map(|p| p.trim().parse::<u16>()))
        .collect();
    let ports = match ports {
        Ok(p) if !p.is_empty() && p.len() <= 127 && !p.contains(&0) => p,
        _ => {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "ports: a comma-separated list of port numbers is required",
                json!({}),
            );
        }
    };
    let (reply, on) = match upgrade(&mut req, V4) {
        Ok(u) => u,
        Err(reply) => return *reply,
    };
    tokio::spawn(async move {
        let Some(ws) = socket(on).await else { return };
        serve_portforward(ws, streams, running, ports).await;
    });
    reply
}

/// The data and error channels of the `index`th port.
fn channels(index: usize) -> (u8, u8) {
    let data = u8::try_from(2 * index).unwrap_or(u8::MAX - 1);
    (data, data + 1)
}

/// One tunnel's Pod side: the bytes the bridge reads from the Pod's port to the client as they
/// come (through the bounded `to_client` queue, so a slow client slows the tunnel), then, if
/// the connection failed, why (the bridge's error, or its stderr when it exited non-zero).
async fn from_pod(
    index: usize,
    port: u16,
    pod: PodRef,
    mut output: std::pin::Pin<Box<dyn futures_util::Stream<Item = anyhow::Result<Output>> + Send>>,
    exit: Exit,
    to_client: tokio::sync::mpsc::Sender<Message>,
) {
    let (data, error) = channels(index);
    let mut stderr = Vec::new();
    let mut failure = None;
    while let Some(chunk) = output.next().await {
        match chunk {
            Ok(Output::Stdout(bytes)) => {
                for piece in bytes.chunks(FRAME) {
                    if to_client.send(framed(data, piece)).await.is_err() {
                        // The client has gone, and so has the tunnel.
                        return;
                    }
                }
            }
            Ok(Output::Stderr(bytes)) => {
                let room = MAX_ERROR.saturating_sub(stderr.len());
                stderr.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
            Err(e) => {
                failure = Some(format!("{e:#}"));
                break;
            }
        }
    }
    let reason = match (failure, exit.code().await) {
        (Some(e), _) => e,
        (None, Ok(Some(0))) => return,
        (None, Ok(_)) => String::from_utf8_lossy(&stderr).trim().to_owned(),
        (None, Err(e)) => format!("{e:#}"),
    };
    let message = format!(
        "error forwarding port {port} to pod {}, uid {}: {reason}",
        pod.name, pod.uid
    );
    let _ = to_client.send(framed(error, message.as_bytes())).await;
}

/// Relays byte tunnels to `ports` of `pod` over one websocket.
async fn serve_portforward(ws: Socket, streams: PodStreams, pod: PodRef, ports: Vec<u16>) {
    let (mut sink, mut stream) = ws.split();
    // One writer owns the socket's sending half; the tunnels queue to it (bounded).
    let (to_client, mut queued) = tokio::sync::mpsc::channel::<Message>(8);
    let mut writer = tokio::spawn(async move {
        while let Some(message) = queued.recv().await {
            let last = message.is_close();
            if sink.send(message).await.is_err() || last {
                break;
            }
        }
    });
    for (index, port) in ports.iter().enumerate() {
        let (data, error) = channels(index);
        for channel in [data, error] {
            let _ = to_client.send(framed(channel, &port.to_le_bytes())).await;
        }
    }
    let mut inputs = Vec::with_capacity(ports.len());
    let mut tunnels = Vec::with_capacity(ports.len());
    for (index, port) in ports.iter().copied().enumerate() {
        match streams.port(&pod, port).await {
            Ok(Attached {
                input,
                output,
                exit,
            }) => {
                inputs.push(Some(input));
                let task = from_pod(index, port, pod.clone(), output, exit, to_client.clone());
                tunnels.push(tokio::spawn(task));
            }
            Err(e) => {
                inputs.push(None);
                let message = format!(
                    "error forwarding port {port} to pod {}, uid {}: {e}",
                    pod.name, pod.uid
                );
                let _ = to_client
                    .send(framed(channels(index).1, message.as_bytes()))
                    .await;
            }
        }
    }
    // Every tunnel ended (the Pod side closed or refused): close the socket, as the kubelet
    // does once all its port streams are done.
    let aborts: Vec<_> = tunnels.iter().map(|t| t.abort_handle()).collect();
    let closer = tokio::spawn(async move {
        for tunnel in tunnels {
            let _ = tunnel.await;
        }
        let _ = to_client.send(normal_close()).await;
    });
    // The client's bytes to each tunnel as they come, until the client closes or goes.
    let from_client = async {
        while let Some(Ok(message)) = stream.next().await {
            let bytes = match message {
                Message::Binary(bytes) if bytes.len() > 1 => bytes,
                message if message.is_close() => break,
                _ => continue,
            };
            let channel = usize::from(bytes[0]);
            if channel % 2 == 1 {
                continue;
            }
            if let Some(slot) = inputs.get_mut(channel / 2)
                && let Some(input) = slot
                && input.write_all(&bytes[1..]).await.is_err()
            {
                // The tunnel has ended on the Pod side; drop what else comes for it.
                *slot = None;
            }
        }
        // The Pod side sees the end of the client's bytes.
        for input in inputs.iter_mut().flatten() {
            let _ = input.shutdown().await;
        }
    };
    tokio::select! {
        () = from_client => {
            let _ = tokio::time::timeout(TUNNEL_GRACE, &mut writer).await;
        }
        _ = &mut writer => {}
    }
    closer.abort();
    writer.abort();
    aborts.iter().for_each(tokio::task::AbortHandle::abort);
}
