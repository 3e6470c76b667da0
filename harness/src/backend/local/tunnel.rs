//! The local backend's port-forward: one long-lived exec per Pod running the mock agent's
//! `tunnel` in the infra container (which holds the Pod's network namespace), carrying every
//! exchange with the Pod's loopback ports as framed, multiplexed connections — as a kubelet
//! serves one port-forward stream per Pod. One exec per request cost the engine a runc exec,
//! a shim and several API calls each time (most of the harness's engine overhead).
//!
//! Frames as `kandev_agent_wire::tunnel` defines them (shared with the mock agent). A tunnel
//! that ends (its Pod gone, the infra container restarted) fails the exchanges it carried and
//! is replaced on the next one.

use super::attach::{Attached, Output, PodStreams};
use crate::backend::{BackendError, PodRef, Result};
use anyhow::anyhow;
use futures_util::StreamExt;
use kandev_agent_wire::tunnel as frame;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;

/// Largest payload of one frame the harness sends.
const FRAME: usize = 32 * 1024;

/// How long opening a Pod's tunnel (an inspect and an exec) may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// What arrives for one connection.
enum Event {
    Data(Vec<u8>),
    End,
    Failed(String),
}

type Routes = Arc<Mutex<HashMap<u32, mpsc::UnboundedSender<Event>>>>;

/// One Pod's tunnel.
struct Tunnel {
    /// Whole frames for the writer task: an exchange that times out can never leave half a
    /// frame on the stream (which would wedge the agent's reader).
    frames: mpsc::UnboundedSender<Vec<u8>>,
    routes: Routes,
    next: AtomicU32,
    /// Why the tunnel ended (its stderr, or the stream's error), once it has.
    ended: Arc<Mutex<Option<String>>>,
}

impl Tunnel {
    fn open(attached: Attached) -> Arc<Self> {
        let Attached {
            mut input,
            mut output,
            ..
        } = attached;
        let routes: Routes = Arc::default();
        let ended = Arc::new(Mutex::new(None));
        let (frames, mut queued) = mpsc::unbounded_channel::<Vec<u8>>();
        let tunnel = Arc::new(Self {
            frames,
            routes: routes.clone(),
            next: AtomicU32::new(1),
            ended: ended.clone(),
        });
        let writer_ended = ended.clone();
        tokio::spawn(async move {
            while let Some(frame) = queued.recv().await {
                let written = async {
                    input.write_all(&frame).await?;
                    input.flush().await
                };
                if let Err(e) = written.await {
                    let mut ended = writer_ended.lock().unwrap_or_else(|e| e.into_inner());
                    ended.get_or_insert_with(|| format!("writing to the tunnel failed: {e}"));
                    return;
                }
            }
            // Every sender gone (the tunnel was forgotten): end the agent's stdin, and so it.
            let _ = input.shutdown().await;
        });
        tokio::spawn(async move {
            let mut buffer = Vec::new();
            let mut stderr = Vec::new();
            let reason = loop {
                match output.next().await {
                    Some(Ok(Output::Stdout(bytes))) => {
                        buffer.extend_from_slice(&bytes);
                        dispatch(&mut buffer, &routes);
                    }
                    Some(Ok(Output::Stderr(bytes))) => stderr.extend_from_slice(&bytes),
                    Some(Err(e)) => break format!("the tunnel's stream failed: {e:#}"),
                    None => {
                        break format!(
                            "the tunnel ended: {}",
                            String::from_utf8_lossy(&stderr).trim()
                        );
                    }
                }
            };
            ended
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_or_insert_with(|| reason.clone());
            // Dropping every route ends every exchange still waiting.
            for (_, route) in routes.lock().unwrap_or_else(|e| e.into_inner()).drain() {
                let _ = route.send(Event::Failed(reason.clone()));
            }
        });
        tunnel
    }

    fn ended(&self) -> Option<String> {
        self.ended.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Queues one whole frame for the writer task.
    fn send(&self, kind: u8, id: u32, payload: &[u8]) -> anyhow::Result<()> {
        let frame = frame::frame(kind, id, payload)
            .ok_or_else(|| anyhow!("a payload of {} bytes is over a frame's", payload.len()))?;
        self.frames
            .send(frame)
            .map_err(|_| anyhow!("the tunnel's writer has ended"))
    }

    /// Opens a connection to `addr`, sends `request`, ends the sending side and returns what
    /// the server sent until it closed the connection.
    async fn exchange(
        &self,
        addr: &str,
        request: &[u8],
        timeout: Duration,
    ) -> anyhow::Result<Vec<u8>> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (route, mut events) = mpsc::unbounded_channel();
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, route);
        if let Some(reason) = self.ended() {
            self.routes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
            return Err(anyhow!(reason));
        }
        let run = async {
            self.send(frame::OPEN, id, addr.as_bytes())?;
            for chunk in request.chunks(FRAME) {
                self.send(frame::DATA, id, chunk)?;
            }
            self.send(frame::END, id, &[])?;
            let mut response = Vec::new();
            loop {
                match events.recv().await {
                    Some(Event::Data(bytes)) => response.extend_from_slice(&bytes),
                    Some(Event::End) => return Ok(response),
                    Some(Event::Failed(reason)) => return Err(anyhow!(reason)),
                    None => return Err(anyhow!("the tunnel ended")),
                }
            }
        };
        let result = match tokio::time::timeout(timeout, run).await {
            Ok(result) => result,
            Err(_) => {
                let _ = self.send(frame::KILL, id, &[]);
                Err(anyhow!("no answer within {timeout:?}"))
            }
        };
        self.routes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id);
        result
    }
}

/// Routes every whole frame in `buffer` to its connection and keeps the rest.
fn dispatch(buffer: &mut Vec<u8>, routes: &Routes) {
    let mut at = 0;
    while let Some(header) = buffer.get(at..).and_then(frame::Header::parse) {
        let (id, len) = (header.connection, header.length);
        let Some(payload) = buffer.get(at + frame::HEADER..at + frame::HEADER + len) else {
            break;
        };
        let event = match header.kind {
            frame::DATA => Event::Data(payload.to_vec()),
            frame::END => Event::End,
            _ => Event::Failed(String::from_utf8_lossy(payload).into_owned()),
        };
        let mut routes = routes.lock().unwrap_or_else(|e| e.into_inner());
        let last = !matches!(event, Event::Data(_));
        if let Some(route) = routes.get(&id) {
            let _ = route.send(event);
        }
        if last {
            routes.remove(&id);
        }
        at += frame::HEADER + len;
    }
    buffer.drain(..at);
}

/// The tunnels of one backend's Pods, by Pod UID.
#[derive(Default)]
pub(super) struct Tunnels {
    open: tokio::sync::Mutex<HashMap<String, Arc<Tunnel>>>,
}

impl Tunnels {
    /// One exchange with `port` on the Pod's loopback.
    pub(super) async fn exchange(
        &self,
        streams: &PodStreams,
        pod: &PodRef,
        port: u16,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        let tunnel = {
            let mut open = self.open.lock().await;
            match open.get(&pod.uid) {
                Some(tunnel) if tunnel.ended().is_none() => tunnel.clone(),
                _ => {
                    // Bounded: the lock is held meanwhile, and other Pods' exchanges wait.
                    let opened = tokio::time::timeout(OPEN_TIMEOUT, streams.tunnel(pod))
                        .await
                        .map_err(|_| BackendError::Exec {
                            pod: pod.name.clone(),
                            container: "infra".into(),
                            argv: vec!["tunnel".into()],
                            source: anyhow!("the tunnel did not open within {OPEN_TIMEOUT:?}"),
                        })??;
                    let tunnel = Tunnel::open(opened);
                    open.insert(pod.uid.clone(), tunnel.clone());
                    tunnel
                }
            }
        };
        tunnel
            .exchange(&format!("127.0.0.1:{port}"), request, timeout)
            .await
            .map_err(|source| BackendError::Exec {
                pod: pod.name.clone(),
                container: "infra".into(),
                argv: vec!["tunnel".into(), format!("127.0.0.1:{port}")],
                source,
            })
    }

    /// Forgets a deleted Pod's tunnel (its exec ended with the infra container).
    pub(super) async fn forget(&self, pod: &PodRef) {
        self.open.lock().await.remove(&pod.uid);
    }
}
