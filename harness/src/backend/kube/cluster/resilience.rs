//! What a client does when the control plane fails a request: the retries every client of the
//! harness makes, as client-go makes them, on top of kube-rs's own.
//!
//! - **429, 503, 504**: sent again, honouring `Retry-After` up to `MAX_RETRY_AFTER` (a longer
//!   wait: the answer stands), as kube-rs's own `RetryPolicy` (`kube::client::retry`,
//!   `server_retry`) would: 429 and 503 any request (the server says it did not process it),
//!   504 only a request safe to repeat after a lost connection (below). Here, not there (`connect::build` turns `Config::default_retry`
//!   off): kube-rs's retry sits below these layers, so what came after a 504 was invisible to
//!   them, and a 504 may come after the write was done (the API server's request timeout
//!   answers while the storage write goes on: `staging/src/k8s.io/apiserver/pkg/endpoints/
//!   handlers/finisher`). An answer after a 504 is marked as one after a lost connection.
//! - **500 with `Retry-After`**: any request, as client-go's `checkWait`
//!   (`staging/src/k8s.io/client-go/rest/request.go`: any 5xx and 429 with the header); 500
//!   without it is the server's answer and stands.
//! - **410 Gone on a read**: read again from scratch, without `continue` and
//!   `resourceVersion`, as client-go's pager (`tools/pager/pager.go`, `FullListIfExpired`)
//!   and reflector relist.
//! - **The connection lost** (reset, closed without TLS `close_notify`, closed before the
//!   answer): a request that never reached the server (the connection could not be made) is
//!   sent again, whatever it is; one that may have reached it only when it is **safe to
//!   repeat**: reads (GET, HEAD; a port-forward's upgrade, which does nothing until bytes
//!   flow; not an exec's, whose command may already run), reviews (access, rules and self
//!   reviews, token reviews: they change nothing), TokenRequests (a second token; the unseen
//!   first expires), dry runs, deletes with preconditions (a repeat answers 404 or 409, which
//!   the callers read again), and creates of a named object (a repeat answering 409
//!   AlreadyExists is resolved below). client-go repeats only GETs after a reset
//!   (`request.go`, `IsErrorRetryable` in `request`); the rest are safe for the reasons given.
//!   Anything else (updates, patches, a create without a name, an exec) is not repeated: its
//!   error names the lost connection and what to do.
//! - **A create repeated after a lost connection and answered 409**: the object of that name
//!   is read, and when it carries every label and annotation the create asked for (the run's
//!   label, the session's create nonce), it is the one the lost create made: answered as
//!   created. Otherwise the 409 stands (someone else's object).
//! - **A create answered 504, sent again, then answered 409**: resolved as after a lost
//!   connection (above): every create of a named object (the set-up's namespace, account,
//!   Role and binding among them) is taken when the object carries its labels and
//!   annotations and is not being deleted. The Pod and claim creates carry a create nonce, so the object is theirs only
//!   when it carries that (`pods::made_by_this_create` reads it again at its level).
//!
//! Built from tower's retry machinery (`tower::retry::Policy`, the trait kube-rs's
//! `RetryPolicy` implements) over a buffered service, inside the client's answer bound, so a
//! request and its retries together take at most `ClientBounds::answer`.

use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::client::Body;
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tower::{BoxError, Layer, Service};

/// How many times a request is sent again after a lost connection (client-go: 10, each after
/// a second; here a backoff from 100 ms, within the answer bound).
pub const RESET_RETRIES: u32 = 6;

/// How many times a request is sent again when the connection could not be made for a
/// reason that may pass ([`transient`]: it never reached the API server, so anything may be
/// sent again; a certificate refused or a name not found gets `RESET_RETRIES`, so that its
/// cause is named before the reach bound): a restarting API server refuses
/// until it listens (its static Pod's container killed: real Kind took about 10 s), and
/// behind a proxy (Kind's port mapping, a load balancer) the proxy accepts and then ends the
/// TLS handshake; about 30 s with the backoff capped. Real Kind's containerd restarted showed
/// the second for about 20 s: the node's containerd 1.7 (then) took the control plane's
/// host-network sandboxes for leaked shims and the kubelet started them again.
pub const NOT_CONNECTED_RETRIES: u32 = 18;

/// How many times a request answered 429, 503 or 504 is sent again (kube-rs's
/// `RetryPolicy::server_retry`: 15), within the answer bound.
pub const THROTTLED_RETRIES: u32 = 15;

/// The first wait before sending again; doubled each time, up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// How many times an exec, attach or port-forward whose upgrade was answered with a 5xx, or
/// with the kubelet's own 404, is sent again, a second apart: the stream never started, so
/// nothing ran. A kubelet or container runtime restarting answers so ("error dialing
/// backend", "dial unix /run/containerd/containerd.sock": real Kind showed both) for a few
/// seconds; a restarted kubelet then answers "pod does not exist" until it has read its Pods
/// back from the API server (real Kind's kubelet-restart fault showed it; see
/// [`kubelet_lacks_the_pod`]).
pub(crate) const UPGRADE_RETRIES: u32 = 30;

/// The wait between two upgrades sent again.
pub(crate) const UPGRADE_PAUSE: Duration = Duration::from_secs(1);

/// The longest `Retry-After` honoured for a 500 (longer: the 500 stands).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(20);

/// How a request may be repeated after its connection was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repeat {
    /// Not at all (it may have changed something a repeat would change again).
    Never,
    /// As it is.
    Safe,
    /// As it is; a 409 AlreadyExists then means the lost create may have made it: the
    /// object at `item` is ours if it carries `labels` and `annotations`.
    CreateByName {
        item: String,
        labels: serde_json::Map<String, Value>,
        annotations: serde_json::Map<String, Value>,
    },
}

/// Review kinds: creating one changes nothing.
const REVIEWS: [&str; 6] = [
    "selfsubjectaccessreviews",
    "selfsubjectrulesreviews",
    "selfsubjectreviews",
    "subjectaccessreviews",
    "localsubjectaccessreviews",
    "tokenreviews",
];

/// How `req` may be repeated after a lost connection (its body, JSON, read when it matters).
pub fn repeat_of(
    method: &Method,
    uri: &http::Uri,
    headers: &http::HeaderMap,
    body: &[u8],
) -> Repeat {
    let path = uri.path().trim_end_matches('/');
    let query = uri.query().unwrap_or_default();
    let last = path.rsplit('/').next().unwrap_or_default();
    let upgrade = headers.contains_key(http::header::UPGRADE);
    if *method == Method::GET || *method == Method::HEAD {
        // An exec or attach may already run its command; a port-forward does nothing yet.
        return if upgrade && (last == "exec" || last == "attach") {
            Repeat::Never
        } else {
            Repeat::Safe
        };
    }
    let dry_run = query
        .split('&')
        .any(|pair| pair.eq_ignore_ascii_case("dryRun=All"));
    let json: Option<Value> = serde_json::from_slice(body).ok();
    if *method == Method::DELETE {
        let preconditions = json
            .as_ref()
            .and_then(|b| b.get("preconditions"))
            .and_then(Value::as_object)
            .is_some_and(|p| {
                p.values()
                    .any(|v| v.as_str().is_some_and(|s| !s.is_empty()))
            });
        return if preconditions || dry_run {
            Repeat::Safe
        } else {
            Repeat::Never
        };
    }
    if *method != Method::POST {
        return if dry_run { Repeat::Safe } else { Repeat::Never };
    }
    if dry_run || REVIEWS.contains(&last) || last == "token" {
        return Repeat::Safe;
    }
    let Some(body) = json else {
        return Repeat::Never;
    };
    let metadata = &body["metadata"];
    let Some(name) = metadata["name"].as_str().filter(|n| !n.is_empty()) else {
        return Repeat::Never;
    };
    let map = |field: &str| metadata[field].as_object().cloned().unwrap_or_default();
    Repeat::CreateByName {
        item: format!("{path}/{name}"),
        labels: map("labels"),
        annotations: map("annotations"),
    }
}

/// Whether `error` is a lost connection; `Some(true)` when the request never left (the
/// connection could not be made), `Some(false)` when it may have reached the server.
pub fn lost_connection(error: &(dyn std::error::Error + 'static)) -> Option<bool> {
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut lost = false;
    while let Some(e) = current {
        if let Some(client) = e.downcast_ref::<hyper_util::client::legacy::Error>()
            && client.is_connect()
        {
            return Some(true);
        }
        if let Some(h) = e.downcast_ref::<hyper::Error>()
            && (h.is_incomplete_message()
                || h.is_closed()
                || h.is_canceled()
                || h.is_body_write_aborted())
        {
            lost = true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            if matches!(
                io.kind(),
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof | NotConnected
            ) {
                lost = true;
            }
        }
        current = e.source();
    }
    lost.then_some(false)
}

/// Whether `error`'s connection failed in a way that may pass when the API server is back:
/// anything but a certificate refused (rustls's verdicts reach here as `InvalidData`) or a
/// name not found (hyper-util's "dns error"), which no wait mends. Refused (nothing
/// listens), reset, cut during the TLS handshake (a proxy whose backend is gone: rustls's
/// "tls handshake eof" is an `UnexpectedEof`), timed out, unreachable, or a proxy's CONNECT
/// refused (its own error type) all may.
pub fn transient(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(e) = current {
        let certificate = e
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::InvalidData);
        if certificate || e.to_string().starts_with("dns error") {
            return false;
        }
        current = e.source();
    }
    true
}

/// Whether `error` is the API server's address refusing the connection (nothing listens:
/// a restarting API server), not a connection that timed out or was cut.
pub fn refused(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(e) = current {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        current = e.source();
    }
    false
}

/// A response that came after the connection was lost at least once (so a 409 to a create
/// may be the lost create's own object).
#[derive(Debug, Clone, Copy)]
struct AfterLostConnection;

/// The retry policy: per request (tower clones it for each), how often its connection was
/// lost, the 500s and 410s it was answered, and the 429s, 503s and 504s.
#[derive(Debug, Clone)]
pub struct Policy {
    repeat: Option<Repeat>,
    lost: u32,
    answered: u32,
    throttled: u32,
    /// A 504 was answered: the write may have been done before the API server gave up.
    timed_out: bool,
    backoff: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            repeat: None,
            lost: 0,
            answered: 0,
            throttled: 0,
            timed_out: false,
            backoff: FIRST_BACKOFF,
        }
    }
}

/// `Retry-After` in whole seconds, whatever its length (a 429's or 503's: the answer bound
/// holds the wait and its retries together).
fn retry_after_any<B>(response: &Response<B>) -> Option<Duration> {
    let seconds: u64 = response
        .headers()
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds))
}

/// A 500's `Retry-After`, when present and honoured (up to `MAX_RETRY_AFTER`).
fn retry_after<B>(response: &Response<B>) -> Option<Duration> {
    retry_after_any(response).filter(|wait| *wait <= MAX_RETRY_AFTER)
}

/// `uri` without the query parameters that pin a read to an old state.
fn from_scratch(uri: &http::Uri) -> Option<http::Uri> {
    let query: Vec<&str> = uri
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|p| {
            !p.is_empty()
                && !p.starts_with("continue=")
                && !p.starts_with("resourceVersion=")
                && !p.starts_with("resourceVersionMatch=")
        })
        .collect();
    let path = if query.is_empty() {
        uri.path().to_owned()
    } else {
        format!("{}?{}", uri.path(), query.join("&"))
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(path.parse().ok()?);
    http::Uri::from_parts(parts).ok()
}

impl<B> tower::retry::Policy<Request<Body>, Response<B>, BoxError> for Policy {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        req: &mut Request<Body>,
        result: &mut Result<Response<B>, BoxError>,
    ) -> Option<Self::Future> {
        match result {
            Ok(response) => {
                let status = response.status();
                // A 504 may come after the write was done: repeated only what is safe to
                // repeat after a lost connection. A wait longer than `MAX_RETRY_AFTER` is
                // not waited out: the answer stands (the answer bound would end it unanswered).
                let timed_out = status == StatusCode::GATEWAY_TIMEOUT;
                let wait = match retry_after_any(response) {
                    Some(asked) if asked > MAX_RETRY_AFTER => None,
                    Some(asked) => Some(asked),
                    None => Some(self.backoff),
                };
                if matches!(
                    status,
                    StatusCode::TOO_MANY_REQUESTS
                        | StatusCode::SERVICE_UNAVAILABLE
                        | StatusCode::GATEWAY_TIMEOUT
                ) && self.throttled < THROTTLED_RETRIES
                    && !(timed_out && self.repeat.as_ref().is_none_or(|r| *r == Repeat::Never))
                    && let Some(wait) = wait
                {
                    self.throttled += 1;
                    self.timed_out |= timed_out;
                    self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                    return Some(tokio::time::sleep(wait));
                }
                if status == StatusCode::INTERNAL_SERVER_ERROR
                    && self.answered < RESET_RETRIES
                    && let Some(wait) = retry_after(response)
                {
                    self.answered += 1;
                    return Some(tokio::time::sleep(wait));
                }
                if (status.is_server_error() || kubelet_lacks_the_pod(status, response.headers()))
                    && req.headers().contains_key(http::header::UPGRADE)
                    && self.answered < UPGRADE_RETRIES
                {
                    self.answered += 1;
                    return Some(tokio::time::sleep(UPGRADE_PAUSE));
                }
                if status == StatusCode::GONE
                    && req.method() == Method::GET
                    && self.answered == 0
                    && let Some(uri) = from_scratch(req.uri())
                {
                    self.answered += 1;
                    *req.uri_mut() = uri;
                    return Some(tokio::time::sleep(FIRST_BACKOFF));
                }
                if self.lost > 0 || self.timed_out {
                    response.extensions_mut().insert(AfterLostConnection);
                }
                None
            }
            Err(error) => {
                let never_sent = lost_connection(error.as_ref())?;
                let repeat = self.repeat.clone().unwrap_or(Repeat::Never);
                let limit = if never_sent && transient(error.as_ref()) {
                    NOT_CONNECTED_RETRIES
                } else {
                    RESET_RETRIES
                };
                if self.lost >= limit || (!never_sent && repeat == Repeat::Never) {
                    return None;
                }
                self.lost += 1;
                let wait = self.backoff;
                self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
                Some(tokio::time::sleep(wait))
            }
        }
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        let body = req.body().try_clone()?;
        // Each time: tower asks the service's shared policy first, then clones it for the
        // request's own retries.
        let bytes = once_bytes(&body);
        self.repeat = Some(repeat_of(req.method(), req.uri(), req.headers(), &bytes));
        let mut copy = Request::builder()
            .method(req.method().clone())
            .uri(req.uri().clone())
            .version(req.version())
            .body(body)
            .ok()?;
        *copy.headers_mut() = req.headers().clone();
        *copy.extensions_mut() = req.extensions().clone();
        Some(copy)
    }
}

/// Whether an upgrade's answer is the kubelet's 404 rather than the API server's: the API
/// server answers a Pod it does not hold with a JSON `Status` (`reason: NotFound`) before it
/// proxies anything; the kubelet's streaming server answers a Pod its pod manager does not
/// hold (yet: a restarted kubelet) with a plain-text "pod does not exist"
/// (`pkg/kubelet/server/server.go`, `getExec`, `getPortForward`: `response.WriteError(
/// http.StatusNotFound, fmt.Errorf("pod does not exist"))`), which the API server passes on.
fn kubelet_lacks_the_pod(status: StatusCode, headers: &http::HeaderMap) -> bool {
    let json = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|t| t.to_str().ok())
        .is_some_and(|t| t.contains("json"));
    status == StatusCode::NOT_FOUND && !json
}

/// The bytes of a whole body (kube-rs's bodies of requests are whole: `Kind::Once`).
fn once_bytes(body: &Body) -> Vec<u8> {
    let Some(copy) = body.try_clone() else {
        return Vec::new();
    };
    let collected = copy.collect();
    // A whole body is ready at once; anything else is not read.
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    let mut collected = std::pin::pin!(collected);
    match collected.as_mut().poll(&mut cx) {
        Poll::Ready(Ok(c)) => c.to_bytes().to_vec(),
        _ => Vec::new(),
    }
}

/// The layer that resolves a create's 409 after a lost connection, and names a lost
/// connection that was not repeated.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReconcileLayer;

impl<S> Layer<S> for ReconcileLayer {
    type Service = Reconcile<S>;
    fn layer(&self, inner: S) -> Reconcile<S> {
        Reconcile { inner }
    }
}

#[derive(Debug, Clone)]
pub struct Reconcile<S> {
    inner: S,
}

/// A lost connection the client did not (or no longer) repeat, named with the request.
#[derive(Debug, thiserror::Error)]
#[error(
    "the connection to the API server was lost during {method} {path} ({why}): {cause}; a load balancer, proxy or restarting API server cut it\n  fix: check the cluster's health and its load balancer's timeouts, then rerun (the run's summary names the `gc` command that removes what it left)"
)]
pub struct ConnectionLost {
    pub method: String,
    pub path: String,
    pub why: String,
    pub cause: String,
}

type DynBody = kube::client::DynBody;

impl<S> Service<Request<Body>> for Reconcile<S>
where
    S: Service<Request<Body>, Response = Response<Box<DynBody>>, Error = BoxError>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Box<DynBody>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let repeat = repeat_of(
            req.method(),
            req.uri(),
            req.headers(),
            &once_bytes(req.body()),
        );
        let (method, path) = (req.method().to_string(), req.uri().path().to_owned());
        let headers = req.headers().clone();
        let again = Resend {
            method: req.method().clone(),
            uri: req.uri().clone(),
            headers: headers.clone(),
            body: once_bytes(req.body()),
        };
        // The service that was ready serves this request; a clone serves the read after it.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let response = match inner.call(req).await {
                Ok(response) => response,
                Err(error) => {
                    let Some(never_sent) = lost_connection(error.as_ref()) else {
                        return Err(error);
                    };
                    let why = if never_sent && refused(error.as_ref()) {
                        format!(
                            "the API server refused the connection, tried {} times over about 30 s",
                            NOT_CONNECTED_RETRIES + 1
                        )
                    } else if never_sent && transient(error.as_ref()) {
                        format!(
                            "the connection could not be made, tried {} times over about 30 s",
                            NOT_CONNECTED_RETRIES + 1
                        )
                    } else if never_sent {
                        format!(
                            "the connection could not be made, tried {} times",
                            RESET_RETRIES + 1
                        )
                    } else if repeat == Repeat::Never {
                        "not repeated: the request is not safe to repeat".to_owned()
                    } else {
                        format!("tried {} times", RESET_RETRIES + 1)
                    };
                    return Err(Box::new(ConnectionLost {
                        method,
                        path,
                        why,
                        cause: crate::error_chain(error.as_ref()),
                    }));
                }
            };
            let response = if response.status() == StatusCode::FORBIDDEN {
                until_ready(&mut inner, &again, response).await?
            } else {
                response
            };
            let Repeat::CreateByName {
                item,
                labels,
                annotations,
            } = repeat
            else {
                return Ok(response);
            };
            if response.status() != StatusCode::CONFLICT
                || response.extensions().get::<AfterLostConnection>().is_none()
                || (labels.is_empty() && annotations.is_empty())
            {
                return Ok(response);
            }
            // The lost create may have made it: read it, and answer it as created if ours.
            let mut read = Request::builder()
                .method(Method::GET)
                .uri(item)
                .body(Body::empty())?;
            // As the create was sent: its credentials (a bearer layer above this one set
            // them) and what it accepts.
            for name in [http::header::ACCEPT, http::header::AUTHORIZATION] {
                if let Some(value) = headers.get(&name) {
                    read.headers_mut().insert(name, value.clone());
                }
            }
            let read_again = Resend {
                method: Method::GET,
                uri: read.uri().clone(),
                headers: read.headers().clone(),
                body: Vec::new(),
            };
            tower::ServiceExt::ready(&mut inner).await?;
            let mut found = inner.call(read).await?;
            if found.status() == StatusCode::FORBIDDEN {
                found = until_ready(&mut inner, &read_again, found).await?;
            }
            if found.status() != StatusCode::OK {
                return Ok(response);
            }
            let (mut parts, body) = found.into_parts();
            let bytes = body.collect().await?.to_bytes();
            let object: Value = serde_json::from_slice(&bytes).unwrap_or_default();
            let carries = |field: &str, wanted: &serde_json::Map<String, Value>| {
                wanted
                    .iter()
                    .all(|(k, v)| object["metadata"][field].get(k) == Some(v))
            };
            // One being deleted is an earlier one's (a killed run's of the same id, say).
            let deleting = !object["metadata"]["deletionTimestamp"].is_null();
            if deleting || !(carries("labels", &labels) && carries("annotations", &annotations)) {
                return Ok(response);
            }
            tracing::info!(
                "{method} {path}: the create was answered 409 after a lost connection; the object carries its labels and annotations: the lost create made it"
            );
            parts.status = StatusCode::CREATED;
            let body: Box<DynBody> =
                Box::new(http_body_util::Full::new(bytes).map_err(|never| match never {}));
            Ok(Response::from_parts(parts, body))
        })
    }
}

/// A request as it was sent, to send it again.
struct Resend {
    method: Method,
    uri: http::Uri,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

impl Resend {
    fn request(&self) -> Result<Request<Body>, BoxError> {
        let mut req = Request::builder()
            .method(self.method.clone())
            .uri(self.uri.clone())
            .body(Body::from(self.body.clone()))?;
        *req.headers_mut() = self.headers.clone();
        Ok(req)
    }
}

/// How long a 403 from an API server not yet ready is sent again (within the answer bound).
const NOT_READY_RETRIES: u32 = 40;

/// How long a `/readyz` refused (401, 403) is taken for a server not ready: a cluster that
/// refuses it for good costs each 403 this much more.
const READYZ_REFUSED_RETRIES: u32 = 10;

/// A 403 from an API server that says itself it is not ready is not its answer: right after
/// a start (a restart of its static Pod) it serves requests before its informers have synced,
/// and its RBAC authorizer, reading them, denies what the executor was granted (real Kind
/// showed "cannot get resource pods" after the API server's container was killed). Its
/// `/readyz` fails until then (`informer-sync`, `poststarthook/rbac/bootstrap-roles`:
/// k8s.io/apiserver `pkg/server/config.go`, `NewInformerSyncHealthz`), and authorization
/// comes before anything is done, so the request is sent again, once a second, while
/// `/readyz` fails. A 401 or 403 from `/readyz` itself may be the same unsynced authorizer
/// (RBAC allows that path to everyone through the bootstrap binding
/// `system:public-info-viewer`, which it has not read yet: after real Kind's containerd
/// restart, which restarted the API server, a 403 stood that a ready server would not have
/// given), or a cluster that refuses `/readyz` to this identity for good: it is taken as not
/// ready for `READYZ_REFUSED_RETRIES` seconds, then the 403 stands. A 403 from a ready server
/// stands.
async fn until_ready<S>(
    inner: &mut S,
    again: &Resend,
    mut response: Response<Box<DynBody>>,
) -> Result<Response<Box<DynBody>>, BoxError>
where
    S: Service<Request<Body>, Response = Response<Box<DynBody>>, Error = BoxError>,
{
    for attempt in 0..NOT_READY_RETRIES {
        let mut readyz = Request::builder()
            .method(Method::GET)
            .uri(ready_uri(&again.uri))
            .body(Body::empty())?;
        if let Some(value) = again.headers.get(http::header::AUTHORIZATION) {
            readyz
                .headers_mut()
                .insert(http::header::AUTHORIZATION, value.clone());
        }
        tower::ServiceExt::ready(&mut *inner).await?;
        // Ready (200), or no say (404: a server that does not serve /readyz): the 403
        // stands. Not ready: its checks fail (500), it refuses /readyz itself (401, 403:
        // above; for a while), or it does not answer.
        match inner.call(readyz).await {
            Ok(r) if r.status().is_server_error() => {}
            Ok(r)
                if (r.status() == StatusCode::UNAUTHORIZED
                    || r.status() == StatusCode::FORBIDDEN)
                    && attempt < READYZ_REFUSED_RETRIES => {}
            Ok(_) => return Ok(response),
            Err(_) => {}
        }
        tracing::info!(
            "{} {}: answered 403 by an API server not ready (/readyz fails): sent again",
            again.method,
            again.uri.path()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        tower::ServiceExt::ready(&mut *inner).await?;
        response = inner.call(again.request()?).await?;
        if response.status() != StatusCode::FORBIDDEN {
            return Ok(response);
        }
    }
    Ok(response)
}

/// `/readyz` on the server of `uri` (kube-rs's base-URI layer below fills in a bare path).
fn ready_uri(uri: &http::Uri) -> http::Uri {
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/readyz"));
    http::Uri::from_parts(parts).unwrap_or_else(|_| http::Uri::from_static("/readyz"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repeat(method: Method, uri: &str, body: &str) -> Repeat {
        repeat_of(
            &method,
            &uri.parse().unwrap_or_default(),
            &http::HeaderMap::new(),
            body.as_bytes(),
        )
    }

    #[test]
    fn requests_safe_to_repeat_are_told_from_the_rest() {
        let ns = "/api/v1/namespaces/n";
        assert_eq!(
            repeat(Method::GET, &format!("{ns}/pods/p"), ""),
            Repeat::Safe
        );
        assert_eq!(
            repeat(
                Method::POST,
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                "{}"
            ),
            Repeat::Safe
        );
        assert_eq!(
            repeat(Method::POST, &format!("{ns}/serviceaccounts/e/token"), "{}"),
            Repeat::Safe
        );
        assert_eq!(
            repeat(Method::POST, &format!("{ns}/pods?&dryRun=All"), "{}"),
            Repeat::Safe
        );
        assert_eq!(
            repeat(
                Method::DELETE,
                &format!("{ns}/pods/p"),
                r#"{"preconditions":{"uid":"u"}}"#
            ),
            Repeat::Safe
        );
        assert_eq!(
            repeat(Method::DELETE, &format!("{ns}/pods/p"), "{}"),
            Repeat::Never
        );
        assert_eq!(
            repeat(Method::PUT, &format!("{ns}/secrets/s"), "{}"),
            Repeat::Never
        );
        assert_eq!(
            repeat(Method::PATCH, &format!("{ns}/pods/p"), "{}"),
            Repeat::Never
        );
        assert_eq!(
            repeat(
                Method::POST,
                &format!("{ns}/pods"),
                r#"{"metadata":{"generateName":"x-"}}"#
            ),
            Repeat::Never
        );
        let create = repeat(
            Method::POST,
            &format!("{ns}/pods?"),
            r#"{"metadata":{"name":"p","labels":{"run":"r"},"annotations":{"kandev.ai/create-nonce":"n"}}}"#,
        );
        let Repeat::CreateByName {
            item,
            labels,
            annotations,
        } = create
        else {
            unreachable!("{create:?}")
        };
        assert_eq!(item, format!("{ns}/pods/p"));
        assert_eq!(labels["run"], "r");
        assert_eq!(annotations["kandev.ai/create-nonce"], "n");
        let mut upgrade = http::HeaderMap::new();
        upgrade.insert(
            http::header::UPGRADE,
            http::HeaderValue::from_static("websocket"),
        );
        let exec = repeat_of(
            &Method::GET,
            &format!("{ns}/pods/p/exec?command=ls")
                .parse()
                .unwrap_or_default(),
            &upgrade,
            b"",
        );
        assert_eq!(exec, Repeat::Never, "an exec's command may already run");
        let forward = repeat_of(
            &Method::GET,
            &format!("{ns}/pods/p/portforward?ports=8765")
                .parse()
                .unwrap_or_default(),
            &upgrade,
            b"",
        );
        assert_eq!(forward, Repeat::Safe);
    }

    #[test]
    fn the_kubelets_404_is_told_from_the_api_servers() {
        let mut text = http::HeaderMap::new();
        text.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        let mut status = http::HeaderMap::new();
        status.insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        assert!(kubelet_lacks_the_pod(StatusCode::NOT_FOUND, &text));
        assert!(kubelet_lacks_the_pod(
            StatusCode::NOT_FOUND,
            &http::HeaderMap::new()
        ));
        assert!(!kubelet_lacks_the_pod(StatusCode::NOT_FOUND, &status));
        assert!(!kubelet_lacks_the_pod(StatusCode::FORBIDDEN, &text));
    }

    #[test]
    fn a_read_answered_gone_is_read_again_from_scratch() {
        let uri: http::Uri =
            "https://h/api/v1/pods?limit=5&continue=abc&resourceVersion=7&labelSelector=x"
                .parse()
                .unwrap_or_default();
        assert_eq!(
            from_scratch(&uri).map(|u| u.to_string()).as_deref(),
            Some("https://h/api/v1/pods?limit=5&labelSelector=x")
        );
    }

    #[test]
    fn lost_connections_are_told_from_other_errors() {
        let reset = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        assert_eq!(lost_connection(&reset), Some(false));
        let eof = std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "peer closed connection without sending TLS close_notify",
        );
        assert_eq!(lost_connection(&eof), Some(false));
        let other = std::io::Error::other("bad certificate");
        assert_eq!(lost_connection(&other), None);
    }

    /// What passes once the API server is back is sent again for about 30 s; a certificate
    /// refused is not waited on so long (its cause is named within the reach bound).
    #[test]
    fn a_connection_that_passes_is_told_from_one_that_will_not() {
        use std::io::{Error, ErrorKind};
        // rustls's words when a proxy ends the handshake (Kind's port mapping, the API
        // server gone).
        assert!(transient(&Error::new(
            ErrorKind::UnexpectedEof,
            "tls handshake eof"
        )));
        assert!(transient(&Error::from(ErrorKind::ConnectionRefused)));
        assert!(transient(&Error::from(ErrorKind::TimedOut)));
        assert!(transient(&Error::from(ErrorKind::HostUnreachable)));
        assert!(!transient(&Error::new(
            ErrorKind::InvalidData,
            "invalid peer certificate: UnknownIssuer"
        )));
        // hyper-util's connector names a failed lookup so, over the resolver's error.
        #[derive(Debug)]
        struct Dns(Error);
        impl std::fmt::Display for Dns {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("dns error")
            }
        }
        impl std::error::Error for Dns {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        assert!(!transient(&Dns(Error::other("failed to lookup address"))));
    }
}
