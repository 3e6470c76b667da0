//! What a real control plane does to its clients besides answering, switched on by a test:
//! the faults a client must survive or name, and the connection limits a cluster sets.
//!
//! - **Faults** ([`Fault`], by [`Faults::inject`]): for the next requests matching a
//!   method and a path fragment, an answer the API server gives under load or while
//!   restarting (429 with `Retry-After` from API Priority and Fairness, 500 and 503, 410 Gone
//!   as for an expired list or watch), or a connection cut without a TLS `close_notify` (a
//!   load balancer's reset, a restarting API server): before the request is served, after it
//!   was served (the answer lost: a create that happened though its client never heard), or a
//!   while into an exec or a port-forward. A cut is a `shutdown` of the TCP socket, so the
//!   client sees what it sees from a real reset: the peer gone mid-conversation.
//! - **An idle cut** ([`Faults::set_idle_cut`]): a connection without a byte either way
//!   for that long is cut, as load balancers in front of API servers cut idle connections
//!   (commonly at 60 s).
//! - **A token lifetime cap** ([`Faults::set_max_token_expiration`]): the API server's
//!   `--service-account-max-token-expiration`, for `rbac`'s TokenRequests.
//!
//! Every fault that fired is recorded ([`DoubleState::injected`]), so a test can show it
//! happened, not only that the client came through. A test reaches them through
//! `DoubleState::faults`.

use super::status::{Reply, full, status};
use hyper::Response;
use hyper::StatusCode;
use serde_json::json;
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What the double does to a matching request instead of (or besides) answering it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this status and the API server's `Status` body, with `Retry-After`
    /// seconds when given, without serving the request (429 TooManyRequests, 500
    /// InternalError, 503 ServiceUnavailable, 410 Gone/Expired).
    Status { code: u16, retry_after: Option<u64> },
    /// Cut the connection before the request is served.
    Reset,
    /// Serve the request, then cut the connection before the answer leaves.
    ResetAfterServing,
    /// Serve the request (an exec or port-forward: the stream starts), and cut the
    /// connection this long after it arrived.
    ResetAfter(Duration),
    /// Answer an exec or port-forward as a restarted kubelet does until it has read its Pods
    /// back: the plain-text 404 of its streaming server, which the API server passes on
    /// (`pkg/kubelet/server/server.go`: `response.WriteError(http.StatusNotFound,
    /// fmt.Errorf("pod does not exist"))`).
    KubeletLacksPod,
    /// Answer a v5 exec as the API server's stream translator does when its dial of, or its
    /// upgrade to, the kubelet failed with this cause: the client's websocket upgraded first,
    /// then the failure as `NewInternalError` on the status channel, the command never run
    /// (k8s.io/apiserver `pkg/util/proxy/streamtranslator.go`, `ServeHTTP`; the path of API
    /// servers 1.30 and later for nodes that do not take websockets themselves).
    TranslatedRefusal(String),
}

/// A fault for the next `times` requests of `method` (any when None) whose path and query
/// contain `path`.
#[derive(Debug, Clone)]
struct Rule {
    method: Option<String>,
    path: String,
    fault: Fault,
    times: usize,
}

/// The faults and limits a test switched on (part of the double's state).
#[derive(Debug, Default)]
pub struct Faults {
    rules: Mutex<Vec<Rule>>,
    injected: Mutex<Vec<String>>,
    idle_cut: Mutex<Option<Duration>>,
    max_token_expiration: Mutex<Option<Duration>>,
    /// When each TokenRequest's token expires.
    token_expiries: Mutex<std::collections::HashMap<String, Instant>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Faults {
    /// The fault for this request, if a rule matches (its count taken), recorded.
    fn take(&self, method: &str, path_and_query: &str) -> Option<Fault> {
        let mut rules = lock(&self.rules);
        let index = rules.iter().position(|r| {
            r.times > 0
                && r.method.as_deref().is_none_or(|m| m == method)
                && path_and_query.contains(&r.path)
        })?;
        let rule = &mut rules[index];
        rule.times -= 1;
        let fault = rule.fault.clone();
        lock(&self.injected).push(format!("{fault:?} {method} {path_and_query}"));
        Some(fault)
    }

    /// The lifetime `token` gets of the `asked` seconds: capped by
    /// `--service-account-max-token-expiration` as `TokenREST.Create`
    /// (`pkg/registry/core/serviceaccount/storage/token.go`) caps it; it stops authenticating
    /// then.
    pub(crate) fn grant(&self, token: &str, asked: u64) -> u64 {
        let cap = lock(&self.max_token_expiration).map(|cap| cap.as_secs());
        let granted = cap.map_or(asked, |cap| asked.min(cap));
        let expiry = Instant::now() + Duration::from_secs(granted);
        lock(&self.token_expiries).insert(token.to_owned(), expiry);
        granted
    }

    /// Whether `token` was issued with a lifetime that has run out.
    pub(crate) fn token_expired(&self, token: &str) -> bool {
        lock(&self.token_expiries)
            .get(token)
            .is_some_and(|expiry| Instant::now() >= *expiry)
    }

    /// How many connections were cut for being idle.
    pub fn idle_cuts(&self) -> usize {
        lock(&self.injected)
            .iter()
            .filter(|i| i.starts_with("IdleCut "))
            .count()
    }

    /// How many requests were refused because their token had expired.
    pub fn expired_refusals(&self) -> usize {
        lock(&self.injected)
            .iter()
            .filter(|i| i.starts_with("ExpiredToken "))
            .count()
    }

    pub(crate) fn record(&self, what: String) {
        lock(&self.injected).push(what);
    }

    /// Injects `fault` into the next `times` requests of `method` (any method when None)
    /// whose path and query contain `path` (`/rolebindings`, `/exec`,
    /// `selfsubjectaccessreviews`, `/pods?&fieldManager`: a create that is no dry run).
    pub fn inject(&self, method: Option<&str>, path: &str, fault: Fault, times: usize) {
        lock(&self.rules).push(Rule {
            method: method.map(str::to_owned),
            path: path.to_owned(),
            fault,
            times,
        });
    }

    /// Removes every fault not yet fired.
    pub fn clear(&self) {
        lock(&self.rules).clear();
    }

    /// The faults that fired so far: `<fault> <method> <path and query>`, in order.
    pub fn injected(&self) -> Vec<String> {
        lock(&self.injected).clone()
    }

    /// Cuts every connection idle (no byte either way) for `cut` (None: never), as a load
    /// balancer in front of an API server does. Applies to connections accepted from now on.
    pub fn set_idle_cut(&self, cut: Option<Duration>) {
        *lock(&self.idle_cut) = cut;
    }

    /// The API server's `--service-account-max-token-expiration`: a TokenRequest asking
    /// longer is granted `cap` (None: no cap), and a token is refused (401) once expired.
    pub fn set_max_token_expiration(&self, cap: Option<Duration>) {
        *lock(&self.max_token_expiration) = cap;
    }
}

/// One accepted connection: its socket (a second handle, to cut it from outside whatever
/// holds the stream: hyper, or an upgraded exec) and when a byte last went either way.
pub(crate) struct Connection {
    socket: std::net::TcpStream,
    started: Instant,
    /// Milliseconds after `started`.
    last_activity: AtomicU64,
    cut: AtomicBool,
}

impl Connection {
    /// The connection of `tcp` and the stream to serve it on (which records its activity).
    pub(crate) fn accept(
        tcp: tokio::net::TcpStream,
    ) -> std::io::Result<(Arc<Connection>, Watched<tokio::net::TcpStream>)> {
        let std = tcp.into_std()?;
        let socket = std.try_clone()?;
        let tcp = tokio::net::TcpStream::from_std(std)?;
        let connection = Arc::new(Connection {
            socket,
            started: Instant::now(),
            last_activity: AtomicU64::new(0),
            cut: AtomicBool::new(false),
        });
        Ok((
            connection.clone(),
            Watched {
                inner: tcp,
                connection,
            },
        ))
    }

    /// Cuts the connection without a TLS `close_notify`: the peer's reads end, its writes
    /// fail.
    pub(crate) fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        let _ = self.socket.shutdown(Shutdown::Both);
    }

    fn touch(&self) {
        let now = self.started.elapsed().as_millis() as u64;
        self.last_activity.store(now, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_activity.load(Ordering::Relaxed));
        self.started.elapsed().saturating_sub(last)
    }

    /// With an idle cut set: watches the connection and cuts it once idle that long; ends
    /// when the connection is cut or `closed` resolves.
    pub(crate) fn watch_idle(self: &Arc<Self>, faults: &Arc<Faults>) {
        let Some(cut) = *lock(&faults.idle_cut) else {
            return;
        };
        let faults = Arc::downgrade(faults);
        let connection = Arc::downgrade(self);
        tokio::spawn(async move {
            let tick = (cut / 8).max(Duration::from_millis(50));
            loop {
                tokio::time::sleep(tick).await;
                // Gone: the connection ended (every handle dropped).
                let Some(connection) = connection.upgrade() else {
                    return;
                };
                if connection.cut.load(Ordering::SeqCst) {
                    return;
                }
                if connection.idle_for() >= cut {
                    connection.cut();
                    if let Some(faults) = faults.upgrade() {
                        faults.record(format!("IdleCut after {cut:?}"));
                    }
                    return;
                }
            }
        });
    }
}

/// A stream that records on its [`Connection`] when bytes went through.
pub(crate) struct Watched<S> {
    inner: S,
    connection: Arc<Connection>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.connection.touch();
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.connection.touch();
        }
        polled
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// What the server loop does with a request before routing it.
pub(crate) enum Before {
    /// Route it.
    Serve,
    /// Route it, then cut the connection before the answer leaves.
    ServeThenCut,
    /// Answer this instead.
    Answer(Reply),
    /// The connection was cut: nothing to answer.
    Cut,
    /// Upgrade an exec, then refuse it on its status channel with this cause.
    Translated(String),
}

/// The fault for this request, applied to its connection.
pub(crate) fn before(
    faults: &Faults,
    connection: &Arc<Connection>,
    method: &str,
    uri: &str,
) -> Before {
    match faults.take(method, uri) {
        None => Before::Serve,
        Some(Fault::Reset) => {
            connection.cut();
            Before::Cut
        }
        Some(Fault::ResetAfterServing) => Before::ServeThenCut,
        Some(Fault::ResetAfter(after)) => {
            let connection = connection.clone();
            tokio::spawn(async move {
                tokio::time::sleep(after).await;
                connection.cut();
            });
            Before::Serve
        }
        Some(Fault::TranslatedRefusal(cause)) => Before::Translated(cause),
        Some(Fault::KubeletLacksPod) => {
            let mut reply = Response::new(full("pod does not exist".to_owned()));
            *reply.status_mut() = StatusCode::NOT_FOUND;
            reply.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            Before::Answer(reply)
        }
        Some(Fault::Status { code, retry_after }) => {
            let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            // The API server's own reasons and words for each.
            let (reason, message) = match code.as_u16() {
                429 => (
                    "TooManyRequests",
                    "the server has received too many requests and has asked us to try again later",
                ),
                503 => (
                    "ServiceUnavailable",
                    "the server is currently unable to handle the request",
                ),
                // What a just-restarted API server's RBAC authorizer answers before its
                // informers have synced (its /readyz fails meanwhile).
                403 => (
                    "Forbidden",
                    "forbidden: RBAC: the API server's authorizer has not synced its informers yet",
                ),
                410 => (
                    "Expired",
                    "the provided continue parameter is too old to display a consistent list result",
                ),
                _ => (
                    "InternalError",
                    "an error on the server (\"apiserver is shutting down\") has prevented the request from succeeding",
                ),
            };
            let details = match retry_after {
                Some(seconds) => json!({"retryAfterSeconds": seconds}),
                None => json!({}),
            };
            let mut reply = status(code, reason, message, details);
            if let Some(seconds) = retry_after
                && let Ok(value) = hyper::header::HeaderValue::from_str(&seconds.to_string())
            {
                reply
                    .headers_mut()
                    .insert(hyper::header::RETRY_AFTER, value);
            }
            Before::Answer(reply)
        }
    }
}
