//! pods/exec and pods/portforward over websockets, framed as the API server frames them for
//! kube-rs: every binary message starts with its channel byte.
//!
//! - exec (`v5.channel.k8s.io`, else `v4.channel.k8s.io`): stdin 0, stdout 1, stderr 2, the
//!   error/status channel 3 (a JSON `Status`; a non-zero exit code in
//!   `details.causes[reason=ExitCode]`); with v5 the client ends stdin with `[255, 0]`.
//!   The double runs the command once stdin has ended and sends its output when it ends.
//! - portforward (`v4.channel.k8s.io`, the one kube-rs accepts for it): per requested port
//!   a data channel `2i` and an error channel `2i+1`, each opened by the server with a first
//!   frame carrying the port (little-endian u16). The client's bytes are buffered until a
//!   complete HTTP/1.x request (with its Content-Length body) has arrived, which the runtime's
//!   `port_exchange` answers.

use super::api::{Reply, Route, status};
use super::{DoubleState, Running};
use futures_util::{SinkExt, StreamExt};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use kandev_harness::backend::{Backend, ExecRequest, PodRef};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

const V5: &str = "v5.channel.k8s.io";
const V4: &str = "v4.channel.k8s.io";
/// How large one output frame is.
const FRAME: usize = 32 * 1024;
/// The longest command the double runs (the client bounds its own exec).
const EXEC_LIMIT: Duration = Duration::from_secs(3600);

/// An error answer before the upgrade (boxed: a Response is large).
type Refused = Box<Reply>;

type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// The Pod of the route, its runtime Pod and spec; or the error reply.
fn target(
    state: &DoubleState,
    route: &Route,
) -> Result<(Value, PodRef, Arc<dyn Backend>), Refused> {
    let name = route.name.clone().unwrap_or_default();
    let ns = route.namespace.clone().unwrap_or_default();
    let store = state.store();
    let Some(pod) = store
        .objects
        .get(&("/pods".to_owned(), ns, name.clone()))
        .cloned()
    else {
        return Err(Box::new(status(
            StatusCode::NOT_FOUND,
            "NotFound",
            &format!("pods \"{name}\" not found"),
            json!({"name": name, "kind": "pods"}),
        )));
    };
    let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
    match (store.running.get(uid), state.runtime.clone()) {
        (Some(Running::Ready(running)), Some(runtime)) => Ok((pod, running.clone(), runtime)),
        _ => Err(Box::new(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("pod {name} is not running (the double has no runtime Pod for it)"),
            json!({}),
        ))),
    }
}

/// The 101 answer, and the websocket once the connection is upgraded.
fn upgrade(
    req: &mut Request<Incoming>,
    preferred: &[&'static str],
) -> Result<(Reply, &'static str, hyper::upgrade::OnUpgrade), Refused> {
    let offered: Vec<String> = req
        .headers()
        .get_all(hyper::header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| h.split(',').map(|p| p.trim().to_owned()))
        .collect();
    let Some(protocol) = preferred
        .iter()
        .copied()
        .find(|p| offered.iter().any(|o| o == p))
    else {
        return Err(Box::new(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("no supported websocket subprotocol among {offered:?}"),
            json!({}),
        )));
    };
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
    let mut reply = Response::new(Full::new(Bytes::new()));
    *reply.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = reply.headers_mut();
    let value = hyper::header::HeaderValue::from_static;
    headers.insert(hyper::header::UPGRADE, value("websocket"));
    headers.insert(hyper::header::CONNECTION, value("Upgrade"));
    headers.insert(hyper::header::SEC_WEBSOCKET_PROTOCOL, value(protocol));
    if let Ok(accept) = hyper::header::HeaderValue::from_str(&accept) {
        headers.insert(hyper::header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    Ok((reply, protocol, on))
}

async fn socket(on: hyper::upgrade::OnUpgrade) -> Option<Socket> {
    let upgraded = on.await.ok()?;
    Some(WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await)
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
    let (pod, running, runtime) = match target(&state, &route) {
        Ok(t) => t,
        Err(reply) => return *reply,
    };
    let argv: Vec<String> = query
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    let container = query
        .iter()
        .find(|(k, _)| k == "container")
        .map(|(_, v)| v.clone())
        .or_else(|| {
            pod["spec"]["containers"][0]["name"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_default();
    let stdin = query.iter().any(|(k, v)| k == "stdin" && v == "true");
    if argv.is_empty() {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "you must specify at least 1 command",
            json!({}),
        );
    }
    let (reply, protocol, on) = match upgrade(&mut req, &[V5, V4]) {
        Ok(u) => u,
        Err(reply) => return *reply,
    };
    tokio::spawn(async move {
        let Some(ws) = socket(on).await else { return };
        serve_exec(ws, protocol == V5, runtime, running, container, argv, stdin).await;
    });
    reply
}

async fn serve_exec(
    ws: Socket,
    v5: bool,
    runtime: Arc<dyn Backend>,
    pod: PodRef,
    container: String,
    argv: Vec<String>,
    stdin: bool,
) {
    let (mut sink, mut stream) = ws.split();
    let mut input = Vec::new();
    let mut open = true;
    if stdin {
        // Until the client ends stdin: v5's close frame, or (v4) the socket's close.
        loop {
            match stream.next().await {
                Some(Ok(Message::Binary(bytes))) => match bytes.first() {
                    Some(0) => input.extend_from_slice(&bytes[1..]),
                    Some(255) if v5 && bytes.get(1) == Some(&0) => break,
                    _ => {}
                },
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                    open = false;
                    break;
                }
                Some(Ok(_)) => {}
            }
        }
    }
    let request = ExecRequest {
        container,
        argv: argv.clone(),
        stdin: stdin.then_some(input),
        timeout: Some(EXEC_LIMIT),
    };
    let run = runtime.exec(&pod, request);
    tokio::pin!(run);
    // Keep reading while the command runs (pings; a client that goes away ends it).
    let output = loop {
        tokio::select! {
            output = &mut run => break output,
            message = stream.next(), if open => match message {
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => open = false,
                Some(Ok(_)) => {}
            },
        }
    };
    if !open && !v5 {
        return;
    }
    let (stdout, stderr, exit) = match output {
        Ok(out) => (out.stdout, out.stderr, Ok(out.exit_code)),
        Err(e) => (Vec::new(), Vec::new(), Err(e.to_string())),
    };
    for (channel, bytes) in [(1u8, &stdout), (2u8, &stderr)] {
        for chunk in bytes.chunks(FRAME) {
            if sink.send(framed(channel, chunk)).await.is_err() {
                return;
            }
        }
    }
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
    let _ = sink.send(Message::Close(None)).await;
}

pub(crate) async fn portforward(
    state: Arc<DoubleState>,
    mut req: Request<Incoming>,
    route: Route,
    query: Vec<(String, String)>,
) -> Reply {
    let (pod, running, runtime) = match target(&state, &route) {
        Ok(t) => t,
        Err(reply) => return *reply,
    };
    let ports: Result<Vec<u16>, _> = query
        .iter()
        .filter(|(k, _)| k == "ports")
        .flat_map(|(_, v)| v.split(',').map(|p| p.trim().parse::<u16>()))
        .collect();
    let ports = match ports {
        Ok(p) if !p.is_empty() && p.len() <= 127 => p,
        _ => {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "ports: a comma-separated list of port numbers is required",
                json!({}),
            );
        }
    };
    // The container that declares the port, else the first one.
    let containers = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let container_of = |port: u16| {
        containers
            .iter()
            .find(|c| {
                c["ports"].as_array().is_some_and(|ps| {
                    ps.iter()
                        .any(|p| p["containerPort"].as_u64() == Some(u64::from(port)))
                })
            })
            .or(containers.first())
            .and_then(|c| c["name"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let targets: Vec<(u16, String)> = ports.iter().map(|p| (*p, container_of(*p))).collect();
    let (reply, _, on) = match upgrade(&mut req, &[V4, V5]) {
        Ok(u) => u,
        Err(reply) => return *reply,
    };
    tokio::spawn(async move {
        let Some(ws) = socket(on).await else { return };
        serve_portforward(ws, runtime, running, targets).await;
    });
    reply
}

/// The length of the first complete HTTP/1.x message in `buffer` (head and Content-Length body).
pub fn complete_http_message(buffer: &[u8]) -> Option<usize> {
    let head_end = buffer.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&buffer[..head_end]);
    let length = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    (buffer.len() >= head_end + length).then_some(head_end + length)
}

async fn serve_portforward(
    ws: Socket,
    runtime: Arc<dyn Backend>,
    pod: PodRef,
    targets: Vec<(u16, String)>,
) {
    let (mut sink, mut stream) = ws.split();
    for (i, (port, _)) in targets.iter().enumerate() {
        for channel in [2 * i, 2 * i + 1] {
            let channel = u8::try_from(channel).unwrap_or(u8::MAX);
            if sink
                .send(framed(channel, &port.to_le_bytes()))
                .await
                .is_err()
            {
                return;
            }
        }
    }
    let mut buffers = vec![Vec::<u8>::new(); targets.len()];
    while let Some(Ok(message)) = stream.next().await {
        let bytes = match message {
            Message::Binary(bytes) if bytes.len() > 1 => bytes,
            Message::Close(_) => break,
            _ => continue,
        };
        let channel = usize::from(bytes[0]);
        let index = channel / 2;
        let (Some((port, container)), Some(buffer)) = (targets.get(index), buffers.get_mut(index))
        else {
            continue;
        };
        if channel % 2 == 1 {
            continue;
        }
        buffer.extend_from_slice(&bytes[1..]);
        while let Some(length) = complete_http_message(buffer) {
            let request: Vec<u8> = buffer.drain(..length).collect();
            let data = u8::try_from(2 * index).unwrap_or(u8::MAX);
            let answered = runtime
                .port_exchange(&pod, container, *port, &request, Duration::from_secs(300))
                .await;
            let sent = match answered {
                Ok(response) => {
                    let mut ok = true;
                    for chunk in response.chunks(FRAME) {
                        ok &= sink.send(framed(data, chunk)).await.is_ok();
                    }
                    ok
                }
                Err(e) => sink
                    .send(framed(
                        data + 1,
                        format!("error forwarding port {port} to pod {}: {e}", pod.name).as_bytes(),
                    ))
                    .await
                    .is_ok(),
            };
            if !sent {
                return;
            }
        }
    }
    let _ = sink.send(Message::Close(None)).await;
}
