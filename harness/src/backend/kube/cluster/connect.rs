//! Reaching a cluster: the kubeconfig client of an explicitly named context (never the
//! ambient current one), bounded so that an unreachable cluster fails in seconds, through
//! the proxy kubectl would use (`proxy`), retrying what a control plane's faults fail as
//! client-go does (`resilience`), and, for the executor, with a token renewed before the
//! expiry the API server granted ([`RefreshedToken`]).

use super::proxy::proxy_for;
use super::resilience;
use crate::backend::kube::errors::ClusterError;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config};
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How long the first answer of the API server may take before the run gives up.
pub const REACH_TIMEOUT: Duration = Duration::from_secs(10);

/// How a client bounds its calls. Deliberately no read timeout: kube's `read_timeout` wraps
/// the socket, and an exec or a port-forward keeps that socket after the upgrade, so any
/// command answering after it would be cut (kube 5 leaves it unset for that reason). Each
/// exec and port-forward is bounded by its own deadline instead (as Kandev bounds each exec by
/// its context), and every request by how long the API server may take to start answering.
#[derive(Debug, Clone, Copy)]
pub struct ClientBounds {
    /// Establishing the connection (an unreachable cluster fails fast).
    pub connect: Duration,
    /// Until the response head arrives (for exec and port-forward: the upgrade), retries
    /// included; the stream after an upgrade is not bounded by it.
    pub answer: Duration,
}

impl Default for ClientBounds {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(5),
            answer: Duration::from_secs(60),
        }
    }
}

/// The client of `config`, every request bounded by `bounds.answer` (a tower timeout around
/// the request future, which ends at the response head), its retries included:
/// `resilience`'s, for 429, 503 and 504 as kube-rs's own policy would retry them, and for lost
/// connections, 500 with Retry-After and 410 Gone, as client-go retries them.
pub fn client_of(config: Config, bounds: ClientBounds) -> Result<Client, kube::Error> {
    build(config, bounds, None)
}

/// The stack every client of the harness has, on kube-rs's own (base URI, credentials,
/// HTTP): `resilience`'s retries (429/503/504 among them: kube-rs's own retry layer is off, as
/// it would hide a 504 from the layers that resolve a create's 409 after it), the bearer
/// token of `token` when given, and the answer bound around them all, its expiry named.
fn build(
    mut config: Config,
    bounds: ClientBounds,
    token: Option<RefreshedToken>,
) -> Result<Client, kube::Error> {
    config.default_retry = false;
    let bearer = token.map(|token| {
        tower::util::MapRequestLayer::new(move |mut req: http::Request<kube::client::Body>| {
            let header = format!("Bearer {}", token.current());
            if let Ok(mut value) = http::HeaderValue::from_str(&header) {
                value.set_sensitive(true);
                req.headers_mut().insert(http::header::AUTHORIZATION, value);
            }
            req
        })
    });
    let waited = bounds.answer;
    let named = tower::util::MapErrLayer::new(move |e: tower::BoxError| -> tower::BoxError {
        if e.is::<tower::timeout::error::Elapsed>() {
            Box::new(NoAnswer { waited })
        } else {
            e
        }
    });
    Ok(kube::client::ClientBuilder::try_from(config)?
        // A service tower's retry can call again (kube's own stack is not Clone).
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&tower::retry::RetryLayer::new(resilience::Policy::default()))
        .with_layer(&resilience::ReconcileLayer)
        .with_layer(&tower::util::option_layer(bearer))
        .with_layer(&tower::timeout::TimeoutLayer::new(bounds.answer))
        .with_layer(&named)
        .build())
}

/// A request that had no answer within the client's bound, its retries included.
#[derive(Debug, thiserror::Error)]
#[error(
    "the API server gave no answer within {waited:?} (retries of throttled, unavailable and lost requests included)\n  fix: check the cluster's health and load (`kubectl get --raw /readyz?verbose`), then rerun"
)]
pub struct NoAnswer {
    pub waited: Duration,
}

/// A bearer token that changes while a run lasts: a TokenRequest's, requested again before
/// the expiry the API server granted (a cluster may cap a token's lifetime far below what
/// was asked: `--service-account-max-token-expiration`, often an hour). Clones share it; the
/// renewing task ends when the last clone is dropped.
#[derive(Clone)]
pub struct RefreshedToken {
    current: Arc<RwLock<String>>,
    _renewal: Arc<AbortOnDrop>,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How much of a token's granted lifetime passes before it is renewed (the kubelet renews a
/// projected token at 80 %; earlier here, so a slow renewal still lands in time).
const RENEW_AT: f64 = 2.0 / 3.0;

impl RefreshedToken {
    /// `first`, valid for `lifetime`; renewed by `renew` (a new token and its lifetime; None
    /// when there is nothing to renew any more) each time two thirds of the current one has
    /// passed. A failed renewal is tried again while the current token lasts (logged).
    pub fn start<F, Fut>(first: String, lifetime: Duration, renew: F) -> Self
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = Result<Option<(String, Duration)>, String>> + Send,
    {
        let current = Arc::new(RwLock::new(first));
        let written = current.clone();
        let task = tokio::spawn(async move {
            let mut lifetime = lifetime;
            let mut wait = lifetime.mul_f64(RENEW_AT).max(Duration::from_millis(200));
            loop {
                tokio::time::sleep(wait).await;
                match renew().await {
                    // Nothing to renew any more (the account is gone: the run tore it down).
                    Ok(None) => return,
                    Ok(Some((token, granted))) => {
                        *written.write().unwrap_or_else(|p| p.into_inner()) = token;
                        lifetime = granted;
                        wait = lifetime.mul_f64(RENEW_AT).max(Duration::from_millis(200));
                    }
                    Err(e) => {
                        tracing::warn!("renewing the executor's token: {e}; trying again");
                        wait = (lifetime / 10)
                            .clamp(Duration::from_millis(200), Duration::from_secs(10));
                    }
                }
            }
        });
        Self {
            current,
            _renewal: Arc::new(AbortOnDrop(task)),
        }
    }

    /// The token to send now.
    pub fn current(&self) -> String {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// [`client_of`] whose every request carries `token` (its current value) as its bearer
/// token; `config`'s own credentials are not used.
pub fn client_with_token(
    mut config: Config,
    bounds: ClientBounds,
    token: RefreshedToken,
) -> Result<Client, kube::Error> {
    config.auth_info = kube::config::AuthInfo::default();
    build(config, bounds, Some(token))
}

/// The kubeconfig client of an explicitly named context, with the default [`ClientBounds`].
pub async fn client_for(
    path: Option<&Path>,
    context: Option<&str>,
) -> Result<(Client, Config, String), ClusterError> {
    client_for_bounded(path, context, ClientBounds::default()).await
}

/// [`client_for`] with explicit bounds.
pub async fn client_for_bounded(
    path: Option<&Path>,
    context: Option<&str>,
    bounds: ClientBounds,
) -> Result<(Client, Config, String), ClusterError> {
    let shown = path
        .map(|p| p.display().to_string())
        .or_else(|| std::env::var("KUBECONFIG").ok())
        .unwrap_or_else(|| "~/.kube/config".into());
    let kubeconfig = match path {
        Some(p) => Kubeconfig::read_from(p),
        None => Kubeconfig::read(),
    }
    .map_err(|e| ClusterError::Kubeconfig {
        path: shown.clone(),
        cause: crate::error_chain(&e),
    })?;
    let available: Vec<String> = kubeconfig.contexts.iter().map(|c| c.name.clone()).collect();
    let Some(context) = context else {
        return Err(ClusterError::NoContext { available });
    };
    if !available.iter().any(|c| c == context) {
        return Err(ClusterError::ContextMissing {
            context: context.into(),
            available,
        });
    }
    // The context's cluster's `proxy-url`, which wins over the environment (`proxy`).
    let kubeconfig_proxy = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| {
            kubeconfig
                .clusters
                .iter()
                .find(|n| n.name == c.cluster)?
                .cluster
                .as_ref()?
                .proxy_url
                .clone()
        });
    let options = KubeConfigOptions {
        context: Some(context.into()),
        ..Default::default()
    };
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &options)
        .await
        .map_err(|e| match e {
            // kube-rs reads NO_PROXY here whenever a proxy is set, and refuses what it cannot
            // parse; an empty entry never gets here (`cli::main` drops it, as Go does).
            KubeconfigError::ParseNoProxy(cause) => ClusterError::NoProxy {
                problem: crate::error_chain(&cause),
            },
            e => ClusterError::Kubeconfig {
                path: shown,
                cause: crate::error_chain(&e),
            },
        })?;
    config.connect_timeout = Some(bounds.connect);
    set_proxy(&mut config, kubeconfig_proxy.as_deref())?;
    let client = client_of(config.clone(), bounds).map_err(|e| ClusterError::Setup {
        what: format!("a client for context {context}"),
        source: e.into(),
    })?;
    Ok((client, config, context.to_owned()))
}

/// Sets `config`'s proxy as kubectl would choose it ([`proxy_for`]): the kubeconfig's
/// `proxy-url`, else `HTTPS_PROXY`/`HTTP_PROXY` unless `NO_PROXY` or loopback says otherwise.
fn set_proxy(config: &mut Config, kubeconfig_proxy: Option<&str>) -> Result<(), ClusterError> {
    config.proxy_url = proxy_for(&config.cluster_url, kubeconfig_proxy, |name| {
        std::env::var(name).ok()
    })
    .map_err(|(source, problem)| ClusterError::Proxy {
        source_name: source.to_string(),
        problem,
    })?
    .map(|(uri, _)| uri);
    Ok(())
}

/// The API server's version, or [`ClusterError::Unreachable`] within [`REACH_TIMEOUT`].
pub async fn reach(client: &Client, context: &str, server: &str) -> Result<String, ClusterError> {
    let unreachable = |reason: String| ClusterError::Unreachable {
        context: context.into(),
        server: server.into(),
        reason,
    };
    match tokio::time::timeout(REACH_TIMEOUT, client.apiserver_version()).await {
        Ok(Ok(info)) => Ok(info.git_version),
        Ok(Err(e)) => Err(unreachable(crate::error_chain(&e))),
        Err(_) => Err(unreachable(format!("no answer within {REACH_TIMEOUT:?}"))),
    }
}

/// A cluster whose API server answered: the operator's client and what it answered.
pub struct Reached {
    pub admin: Client,
    pub config: Config,
    pub context: String,
    pub server: String,
    pub server_version: String,
}

/// The client of an explicitly named context, with the API server reached (fast failure).
pub async fn open(path: Option<&Path>, context: Option<&str>) -> Result<Reached, ClusterError> {
    let (admin, config, context) = client_for(path, context).await?;
    open_with(admin, config, context).await
}

/// [`open`] with a client in hand.
pub async fn open_with(
    admin: Client,
    config: Config,
    context: String,
) -> Result<Reached, ClusterError> {
    let server = config.cluster_url.to_string();
    let server_version = reach(&admin, &context, &server).await?;
    Ok(Reached {
        admin,
        config,
        context,
        server,
        server_version,
    })
}

/// The name in-cluster runs show where a context is shown (there is no kubeconfig).
pub const IN_CLUSTER: &str = "in-cluster";

/// Inside a Pod (`--in-cluster`): the session client is the Pod's own service account, read
/// from the environment and the mounted token and CA exactly as Kandev's backend reads them
/// (`rest.InClusterConfig`; kube-rs's `Config::incluster`, whose token file is re-read when
/// it rotates). The bookkeeping client (evidence, the ledger, sweeps: what the operator's
/// identity does outside) uses the same server and CA with the token in `bookkeeper_token`,
/// or the Pod's own identity when none is given. Returns the reached cluster (its `admin` is
/// the bookkeeper) and the session client.
pub async fn open_in_cluster(
    bookkeeper_token: Option<&Path>,
) -> Result<(Reached, Client), ClusterError> {
    let bounds = ClientBounds::default();
    let mut config = Config::incluster().map_err(|e| ClusterError::NotInCluster {
        cause: crate::error_chain(&e),
    })?;
    config.connect_timeout = Some(bounds.connect);
    // In a Pod as well: client-go's transport reads the environment there too.
    set_proxy(&mut config, None)?;
    let client = |config: &Config, what: &str| {
        client_of(config.clone(), bounds).map_err(|e| ClusterError::Setup {
            what: what.into(),
            source: e.into(),
        })
    };
    let session = client(&config, "the in-cluster service account's client")?;
    let admin_config = match bookkeeper_token {
        Some(path) => {
            // Read once here so that a missing or empty file is named now, not as a 401 later.
            let token =
                std::fs::read_to_string(path).map_err(|e| ClusterError::BookkeeperToken {
                    path: path.display().to_string(),
                    cause: e.to_string(),
                })?;
            if token.trim().is_empty() {
                return Err(ClusterError::BookkeeperToken {
                    path: path.display().to_string(),
                    cause: "the file is empty".into(),
                });
            }
            let mut admin = config.clone();
            admin.auth_info = kube::config::AuthInfo {
                token_file: Some(path.display().to_string()),
                ..Default::default()
            };
            admin
        }
        None => config.clone(),
    };
    let admin = client(&admin_config, "the bookkeeper's client")?;
    let server = admin_config.cluster_url.to_string();
    let server_version = reach(&admin, IN_CLUSTER, &server).await?;
    Ok((
        Reached {
            admin,
            config: admin_config,
            context: IN_CLUSTER.into(),
            server,
            server_version,
        },
        session,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Virtual time (a paused clock): the schedule, not how fast it runs.
    #[tokio::test(start_paused = true)]
    async fn a_token_is_renewed_at_two_thirds_of_its_lifetime_until_nothing_is_left() {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let token = RefreshedToken::start("first".into(), Duration::from_secs(30), move || {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move { Ok((n < 3).then(|| (format!("renewed-{n}"), Duration::from_secs(30)))) }
        });
        tokio::time::sleep(Duration::from_secs(19)).await;
        assert_eq!(token.current(), "first");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(token.current(), "renewed-1", "renewed at 20 s of 30");
        tokio::time::sleep(Duration::from_secs(20)).await;
        assert_eq!(token.current(), "renewed-2");
        // The third renewal finds nothing to renew: no more are asked.
        tokio::time::sleep(Duration::from_secs(300)).await;
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(token.current(), "renewed-2");
    }
}
