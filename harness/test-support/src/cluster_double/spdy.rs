//! kubectl's pods/portforward: SPDY/3.1 with the `portforward.k8s.io` stream protocol, as a
//! kubelet serves it (`pkg/kubelet/cri/streaming/portforward/httpstream.go`) and the API
//! server passes it on. Two transports carry the same SPDY bytes:
//!
//! - a websocket with subprotocol `SPDY/3.1+portforward.k8s.io`, each SPDY write one binary
//!   message (KEP-4006; what kubectl 1.31+ asks for first: client-go
//!   `tools/portforward/tunneling_connection.go`, the API server's
//!   `apiserver/pkg/util/proxy/streamtunnel.go`);
//! - a plain HTTP/1.1 upgrade (`Upgrade: SPDY/3.1`, `X-Stream-Protocol-Version:
//!   portforward.k8s.io`), what kubectl falls back to (or uses with
//!   `KUBECTL_PORT_FORWARD_WEBSOCKETS=false`).
//!
//! The SPDY/3 framing is the draft's (as moby/spdystream reads and writes it): 8-byte frame
//! headers, control frames SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS
//! and WINDOW_UPDATE, DATA frames; header blocks are zlib streams with the SPDY/3 preset
//! dictionary, one compression context per direction for the whole connection (every block
//! ends with a sync flush).
//!
//! Per forwarded connection the client opens an error stream and a data stream (headers
//! `streamtype: error|data`, `port`, `requestid`; each is answered with a SYN_REPLY). Once
//! both are there, the data stream is a byte tunnel to 127.0.0.1:port in the Pod's network
//! namespace ([`PodStreams::port`], the bridge the websocket port-forward uses); when the Pod
//! side ends, a failure (a refused connection) is written on the error stream, then both
//! streams are half-closed (FIN), as the kubelet's `portForward` does.
//! Flow control is spdystream's: no windows (WINDOW_UPDATE is read and ignored); a client that
//! stops reading blocks the double's writes, as on the websocket.

use super::tunnel::{FRAME, pod_side};
use futures_util::{Stream, StreamExt};
use kandev_harness::backend::PodRef;
use kandev_harness::backend::local::attach::{Output, PodStreams};
use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc::Sender;

/// The websocket subprotocol of the tunnelled form.
pub(crate) const TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";
/// The stream protocol (`X-Stream-Protocol-Version`) of the plain SPDY upgrade.
pub(crate) const PROTOCOL: &str = "portforward.k8s.io";

const VERSION: u16 = 3;
const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;
const FLAG_FIN: u8 = 0x01;
/// RST_STREAM status codes (SPDY/3 draft 2.6.3).
const PROTOCOL_ERROR: u32 = 1;
const REFUSED_STREAM: u32 = 3;

/// The SPDY/3 header compression dictionary (draft 2.6.10.1): the header names each after
/// its 32-bit length, then common values run together.
fn dictionary() -> &'static [u8] {
    static DICTIONARY: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    DICTIONARY.get_or_init(|| {
        const NAMES: &[&str] = &[
            "options",
            "head",
            "post",
            "put",
            "delete",
            "trace",
            "accept",
            "accept-charset",
            "accept-encoding",
            "accept-language",
            "accept-ranges",
            "age",
            "allow",
            "authorization",
            "cache-control",
            "connection",
            "content-base",
            "content-encoding",
            "content-language",
            "content-length",
            "content-location",
            "content-md5",
            "content-range",
            "content-type",
            "date",
            "etag",
            "expect",
            "expires",
            "from",
            "host",
            "if-match",
            "if-modified-since",
            "if-none-match",
            "if-range",
            "if-unmodified-since",
            "last-modified",
            "location",
            "max-forwards",
            "pragma",
            "proxy-authenticate",
            "proxy-authorization",
            "range",
            "referer",
            "retry-after",
            "server",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "user-agent",
            "vary",
            "via",
            "warning",
            "www-authenticate",
            "method",
            "get",
            "status",
            "200 OK",
            "version",
            "HTTP/1.1",
            "url",
            "public",
            "set-cookie",
            "keep-alive",
            "origin",
        ];
        const VALUES: &str = concat!(
            "100101201202205206300302303304305306307402405406407408409410411412413414415416417",
            "502504505",
            "203 Non-Authoritative Information",
            "204 No Content",
            "301 Moved Permanently",
            "400 Bad Request",
            "401 Unauthorized",
            "403 Forbidden",
            "404 Not Found",
            "500 Internal Server Error",
            "501 Not Implemented",
            "503 Service Unavailable",
            "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec",
            " 00:00:00",
            " Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
            "chunked,text/html,image/png,image/jpg,image/gif,application/xml,",
            "application/xhtml+xml,text/plain,text/javascript,",
            "publicprivatemax-age=gzip,deflate,sdch",
            "charset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
        );
        let mut dictionary = Vec::new();
        for name in NAMES {
            let len = u32::try_from(name.len()).unwrap_or_default();
            dictionary.extend_from_slice(&len.to_be_bytes());
            dictionary.extend_from_slice(name.as_bytes());
        }
        dictionary.extend_from_slice(VALUES.as_bytes());
        dictionary
    })
}

/// Inflates the client's header blocks (one zlib stream for the connection).
struct Inflater(flate2::Decompress);

impl Inflater {
    fn new() -> Self {
        Self(flate2::Decompress::new(true))
    }

    fn inflate(&mut self, block: &[u8]) -> Result<Vec<u8>, String> {
        let mut out = Vec::with_capacity(block.len() * 4 + 64);
        let mut consumed = 0;
        loop {
            if out.capacity() - out.len() < 256 {
                out.reserve(out.capacity().max(1024));
            }
            let (before_in, before_out) = (self.0.total_in(), self.0.total_out());
            let result =
                self.0
                    .decompress_vec(&block[consumed..], &mut out, flate2::FlushDecompress::Sync);
            consumed += usize::try_from(self.0.total_in() - before_in).unwrap_or(usize::MAX);
            match result {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    // The first block's zlib header names the dictionary (FDICT).
                    self.0
                        .set_dictionary(dictionary())
                        .map_err(|e| format!("the header dictionary: {e}"))?;
                    continue;
                }
                Err(e) => return Err(format!("a header block: {e}")),
            }
            if consumed >= block.len() && out.capacity() > out.len() {
                return Ok(out);
            }
            if self.0.total_in() == before_in && self.0.total_out() == before_out {
                return Err("a truncated header block".into());
            }
        }
    }
}

/// Deflates the double's header blocks (one zlib stream for the connection).
struct Deflater(flate2::Compress);

impl Deflater {
    fn new() -> Self {
        let mut z = flate2::Compress::new(flate2::Compression::best(), true);
        // Right after init, as zlib requires: the stream's header then names the dictionary.
        let _ = z.set_dictionary(dictionary());
        Self(z)
    }

    fn deflate(&mut self, raw: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(raw.len() + 64);
        let mut consumed = 0;
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(out.capacity().max(256));
            }
            let before = self.0.total_in();
            let _ = self
                .0
                .compress_vec(&raw[consumed..], &mut out, flate2::FlushCompress::Sync);
            consumed += usize::try_from(self.0.total_in() - before).unwrap_or(usize::MAX);
            // Done once all input is in and the flush did not fill the output.
            if consumed >= raw.len() && out.capacity() > out.len() {
                return out;
            }
        }
    }
}

/// A SPDY/3 name/value header block (before compression): 32-bit count, then each name and
/// value after its 32-bit length.
fn header_block(headers: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    let count = u32::try_from(headers.len()).unwrap_or_default();
    block.extend_from_slice(&count.to_be_bytes());
    for (name, value) in headers {
        for part in [name, value] {
            let len = u32::try_from(part.len()).unwrap_or_default();
            block.extend_from_slice(&len.to_be_bytes());
            block.extend_from_slice(part.as_bytes());
        }
    }
    block
}

fn parse_headers(block: &[u8]) -> Option<HashMap<String, String>> {
    fn word(block: &[u8], at: &mut usize) -> Option<u32> {
        let bytes = block.get(*at..*at + 4)?;
        *at += 4;
        Some(u32::from_be_bytes(bytes.try_into().ok()?))
    }
    fn text(block: &[u8], at: &mut usize) -> Option<String> {
        let len = usize::try_from(word(block, at)?).ok()?;
        let bytes = block.get(*at..*at + len)?;
        *at += len;
        Some(String::from_utf8_lossy(bytes).into_owned())
    }
    let mut at = 0;
    let count = word(block, &mut at)?;
    let mut headers = HashMap::new();
    for _ in 0..count {
        let name = text(block, &mut at)?.to_ascii_lowercase();
        let value = text(block, &mut at)?;
        headers.insert(name, value);
    }
    Some(headers)
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(payload.len() + 8);
    frame.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    frame.extend_from_slice(&kind.to_be_bytes());
    let len = u32::try_from(payload.len()).unwrap_or_default();
    frame.push(flags);
    frame.extend_from_slice(&len.to_be_bytes()[1..]);
    frame.extend_from_slice(payload);
    frame
}

fn data_frame(stream: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(payload.len() + 8);
    frame.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    let len = u32::try_from(payload.len()).unwrap_or_default();
    frame.push(flags);
    frame.extend_from_slice(&len.to_be_bytes()[1..]);
    frame.extend_from_slice(payload);
    frame
}

fn rst_stream(stream: u32, status: u32) -> Vec<u8> {
    let mut payload = (stream & 0x7fff_ffff).to_be_bytes().to_vec();
    payload.extend_from_slice(&status.to_be_bytes());
    control(RST_STREAM, 0, &payload)
}

enum Frame {
    Control {
        kind: u16,
        flags: u8,
        payload: Vec<u8>,
    },
    Data {
        stream: u32,
        flags: u8,
        payload: Vec<u8>,
    },
}

/// The next whole frame at the start of `buffer`, taken out of it.
fn next_frame(buffer: &mut Vec<u8>) -> Option<Frame> {
    let head: [u8; 8] = buffer.get(..8)?.try_into().ok()?;
    let len = usize::try_from(u32::from_be_bytes([0, head[5], head[6], head[7]])).ok()?;
    if buffer.len() < 8 + len {
        return None;
    }
    let payload = buffer[8..8 + len].to_vec();
    buffer.drain(..8 + len);
    let flags = head[4];
    Some(if head[0] & 0x80 != 0 {
        Frame::Control {
            kind: u16::from_be_bytes([head[2], head[3]]),
            flags,
            payload,
        }
    } else {
        Frame::Data {
            stream: u32::from_be_bytes([head[0], head[1], head[2], head[3]]) & 0x7fff_ffff,
            flags,
            payload,
        }
    })
}

fn stream_id(payload: &[u8]) -> Option<u32> {
    let bytes: [u8; 4] = payload.get(..4)?.try_into().ok()?;
    Some(u32::from_be_bytes(bytes) & 0x7fff_ffff)
}

/// One forwarded connection's streams, as the client has opened them.
#[derive(Default)]
struct Pair {
    error: Option<u32>,
    data: Option<u32>,
    port: u16,
    started: bool,
}

/// Serves one SPDY connection: `incoming` the client's bytes as they come, `to_client` the
/// writer of whole frames (in order).
pub(crate) async fn serve(
    incoming: impl Stream<Item = Vec<u8>> + Send,
    to_client: Sender<Vec<u8>>,
    streams: PodStreams,
    pod: PodRef,
) {
    let mut incoming = std::pin::pin!(incoming);
    let mut inflater = Inflater::new();
    let mut deflater = Deflater::new();
    let mut buffer = Vec::new();
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    let mut inputs: HashMap<u32, Pin<Box<dyn AsyncWrite + Send>>> = HashMap::new();
    // Streams the client has reset: nothing more is sent on them.
    let reset: Arc<Mutex<HashSet<u32>>> = Arc::default();
    let mut tunnels = Vec::new();
    'connection: while let Some(chunk) = incoming.next().await {
        buffer.extend_from_slice(&chunk);
        while let Some(frame) = next_frame(&mut buffer) {
            match frame {
                Frame::Control {
                    kind: SYN_STREAM,
                    flags: _,
                    payload,
                } => {
                    let Some(id) = stream_id(&payload) else {
                        break 'connection;
                    };
                    // Stream id, associated stream id, priority and slot; then the headers.
                    let headers = match payload.get(10..).map(|b| inflater.inflate(b)) {
                        Some(Ok(raw)) => parse_headers(&raw),
                        // The compression context is lost: nothing more can be read.
                        _ => break 'connection,
                    };
                    let reply_block = deflater.deflate(&header_block(&[]));
                    let mut reply = id.to_be_bytes().to_vec();
                    reply.extend_from_slice(&reply_block);
                    if to_client.send(control(SYN_REPLY, 0, &reply)).await.is_err() {
                        break 'connection;
                    }
                    let headers = headers.unwrap_or_default();
                    let port = headers.get("port").and_then(|p| p.parse::<u16>().ok());
                    let (Some(port), Some(request)) = (port, headers.get("requestid")) else {
                        // The kubelet refuses a stream without a valid port (or request id).
                        let _ = to_client.send(rst_stream(id, PROTOCOL_ERROR)).await;
                        continue;
                    };
                    let pair = pairs.entry(request.clone()).or_default();
                    pair.port = port;
                    match headers.get("streamtype").map(String::as_str) {
                        Some("error") => pair.error = Some(id),
                        Some("data") => pair.data = Some(id),
                        _ => {
                            let _ = to_client.send(rst_stream(id, PROTOCOL_ERROR)).await;
                            continue;
                        }
                    }
                    let (Some(error), Some(data), false) = (pair.error, pair.data, pair.started)
                    else {
                        continue;
                    };
                    pair.started = true;
                    match streams.port(&pod, port).await {
                        Ok(attached) => {
                            inputs.insert(data, attached.input);
                            let tunnel = from_pod(
                                Tunnel { data, error, port },
                                pod.clone(),
                                attached.output,
                                attached.exit,
                                to_client.clone(),
                                reset.clone(),
                            );
                            tunnels.push(tokio::spawn(tunnel));
                        }
                        Err(e) => {
                            let message = format!(
                                "error forwarding port {port} to pod {}, uid {}: {e:#}",
                                pod.name, pod.uid
                            );
                            for frame in [
                                data_frames(error, message.as_bytes()),
                                vec![
                                    data_frame(error, FLAG_FIN, &[]),
                                    data_frame(data, FLAG_FIN, &[]),
                                ],
                            ]
                            .concat()
                            {
                                let _ = to_client.send(frame).await;
                            }
                        }
                    }
                }
                Frame::Control {
                    kind: HEADERS,
                    payload,
                    ..
                } => {
                    // Read to keep the compression context in step; nothing uses them.
                    if payload.len() < 4 || inflater.inflate(&payload[4..]).is_err() {
                        break 'connection;
                    }
                }
                Frame::Control {
                    kind: RST_STREAM,
                    payload,
                    ..
                } => {
                    if let Some(id) = stream_id(&payload) {
                        reset.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
                        if let Some(mut input) = inputs.remove(&id) {
                            let _ = input.shutdown().await;
                        }
                    }
                }
                Frame::Control {
                    kind: PING,
                    flags,
                    payload,
                } => {
                    // The client's pings (odd ids) are echoed, as spdystream does.
                    if stream_id(&payload).is_some_and(|id| id % 2 == 1)
                        && to_client
                            .send(control(PING, flags, &payload))
                            .await
                            .is_err()
                    {
                        break 'connection;
                    }
                }
                Frame::Control { kind: GOAWAY, .. } => break 'connection,
                // SYN_REPLY (the double opens no streams), SETTINGS, WINDOW_UPDATE: nothing
                // to do.
                Frame::Control { .. } => {}
                Frame::Data {
                    stream,
                    flags,
                    payload,
                } => {
                    if let Some(input) = inputs.get_mut(&stream)
                        && !payload.is_empty()
                        && input.write_all(&payload).await.is_err()
                    {
                        // The tunnel has ended on the Pod side; drop what else comes for it.
                        inputs.remove(&stream);
                    }
                    if flags & FLAG_FIN != 0
                        && let Some(mut input) = inputs.remove(&stream)
                    {
                        // The client is done sending: the Pod side sees EOF.
                        let _ = input.shutdown().await;
                    }
                    if !inputs.contains_key(&stream)
                        && !payload.is_empty()
                        && !pairs.values().any(|p| p.data == Some(stream))
                    {
                        let _ = to_client.send(rst_stream(stream, REFUSED_STREAM)).await;
                    }
                }
            }
        }
    }
    // The client has gone (closed, GOAWAY, or a frame the double cannot read).
    for (_, mut input) in inputs {
        let _ = input.shutdown().await;
    }
    for tunnel in tunnels {
        tunnel.abort();
    }
}

fn data_frames(stream: u32, bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .chunks(FRAME)
        .map(|c| data_frame(stream, 0, c))
        .collect()
}

struct Tunnel {
    data: u32,
    error: u32,
    port: u16,
}

/// One tunnel's Pod side: its bytes to the client on the data stream as they come, then a
/// failure's reason on the error stream, then both streams half-closed.
async fn from_pod(
    tunnel: Tunnel,
    pod: PodRef,
    output: Pin<Box<dyn Stream<Item = anyhow::Result<Output>> + Send>>,
    exit: kandev_harness::backend::local::attach::Exit,
    to_client: Sender<Vec<u8>>,
    reset: Arc<Mutex<HashSet<u32>>>,
) {
    let Tunnel { data, error, port } = tunnel;
    let open = |id: u32| {
        !reset
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&id)
    };
    let relayed = pod_side(output, exit, |bytes| {
        // A data stream the client reset takes nothing more; the tunnel keeps draining.
        let frames = if open(data) {
            data_frames(data, &bytes)
        } else {
            Vec::new()
        };
        let to_client = to_client.clone();
        async move {
            for frame in frames {
                if to_client.send(frame).await.is_err() {
                    return false;
                }
            }
            true
        }
    })
    .await;
    let Some(reason) = relayed else {
        return;
    };
    let mut frames = Vec::new();
    if let Some(reason) = reason
        && open(error)
    {
        let message = format!(
            "error forwarding port {port} to pod {}, uid {}: {reason}",
            pod.name, pod.uid
        );
        frames.extend(data_frames(error, message.as_bytes()));
    }
    // The kubelet closes the error stream, then the data stream.
    for id in [error, data] {
        if open(id) {
            frames.push(data_frame(id, FLAG_FIN, &[]));
        }
    }
    for frame in frames {
        if to_client.send(frame).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_blocks_round_trip_through_one_context_per_direction() {
        let mut deflater = Deflater::new();
        let mut inflater = Inflater::new();
        for (port, request) in [("80", "0"), ("8765", "1"), ("8765", "2")] {
            let raw = header_block(&[
                ("streamtype", "data"),
                ("port", port),
                ("requestid", request),
            ]);
            let block = deflater.deflate(&raw);
            let headers = parse_headers(&inflater.inflate(&block).unwrap()).unwrap();
            assert_eq!(headers["port"], port);
            assert_eq!(headers["requestid"], request);
            assert_eq!(headers["streamtype"], "data");
        }
    }

    #[test]
    fn frames_are_read_whole_and_in_order() {
        let mut bytes = control(PING, 0, &7u32.to_be_bytes());
        bytes.extend(data_frame(5, FLAG_FIN, b"hello"));
        let mut buffer = bytes[..14].to_vec();
        assert!(matches!(
            next_frame(&mut buffer),
            Some(Frame::Control { kind: PING, .. })
        ));
        assert!(next_frame(&mut buffer).is_none());
        buffer.extend_from_slice(&bytes[14..]);
        match next_frame(&mut buffer) {
            Some(Frame::Data {
                stream: 5,
                flags: FLAG_FIN,
                payload,
            }) => assert_eq!(payload, b"hello"),
            _ => panic!("a data frame"),
        }
        assert!(buffer.is_empty());
    }
}
