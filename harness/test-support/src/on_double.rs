//! The harness's `kube` backend against a [cluster double](crate::cluster_double), as the
//! tests of both packages drive it: the cluster opened and set up as `--backend kube` does it
//! (`cluster::open` + `Cluster::set_up`: namespace, ServiceAccount, Role, RoleBinding, a
//! TokenRequest), the backend of its sessions, clients by token, SelfSubjectAccessReviews,
//! and the small reads and waits those tests share. One copy, so that the files that test the
//! double's rules, its faults and the harness on it set up the same cluster the same way.

use crate::cluster_double::KubeDouble;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kandev_harness::backend::kube::cluster::{self, Cluster};
use kandev_harness::backend::kube::{KubeBackend, ManagedPvc};
use kandev_harness::pod::identity::random_hex;
use kandev_harness::pod::template::WorkspaceMode;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The main container of [`set_up_sessions`]'s backend: the tests' helper Pods name their
/// shell container so.
pub const MAIN: &str = "work";

/// The double's admin client (its kubeconfig), as the harness opens it.
pub async fn admin_client(double: &KubeDouble) -> kube::Client {
    cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .unwrap()
        .admin
}

/// Creates the namespace `ns` with `admin` (an operator's `--namespace`, a test's own).
pub async fn create_namespace(admin: &kube::Client, ns: &str) {
    Api::<k8s_openapi::api::core::v1::Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &typed(json!({"metadata": {"name": ns}})),
        )
        .await
        .unwrap();
}

/// The double's cluster set up as `--backend kube` sets it up for a run `<prefix>-<hex>`, or
/// the error chain that stopped it.
pub async fn set_up(double: &KubeDouble, prefix: &str) -> Result<Cluster, String> {
    let reached = cluster::open(Some(&double.kubeconfig), Some(&double.context))
        .await
        .map_err(|e| kandev_harness::error_chain(&e))?;
    // Reached where the kubeconfig points: the double on this host, never a cluster the
    // environment names.
    assert!(
        reached.server.starts_with("https://127.0.0.1:"),
        "{}",
        reached.server
    );
    let run = format!("{prefix}-{}", random_hex(4));
    Cluster::set_up(reached, None, None, WorkspaceMode::EmptyDir, &run)
        .await
        .map_err(|e| kandev_harness::error_chain(&e))
}

/// The backend of `cluster`'s sessions as `--backend kube` makes it: the executor's client,
/// the operator's for what the executor may not do, `main` the main container.
pub fn session_backend(cluster: &Cluster, main: &str) -> KubeBackend {
    KubeBackend::new(
        cluster.session.clone(),
        &cluster.namespace,
        "kube",
        main,
        ManagedPvc::default(),
    )
    .with_admin(cluster.admin.clone())
}

/// [`set_up`] (panicking with the error chain) and its sessions' backend (main container
/// [`MAIN`]).
pub async fn set_up_sessions(double: &KubeDouble, prefix: &str) -> (Cluster, KubeBackend) {
    let cluster = set_up(double, prefix)
        .await
        .unwrap_or_else(|e| panic!("set up the double's cluster: {e}"));
    let backend = session_backend(&cluster, MAIN);
    (cluster, backend)
}

/// Whether `client` may `verb` `resource` in `ns` (a SelfSubjectAccessReview), or the error
/// (an answer without a status included: a review the server did not answer is no "no").
pub async fn can_i(
    client: &kube::Client,
    ns: &str,
    verb: &str,
    resource: &str,
) -> Result<bool, String> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(ns.into()),
                verb: Some(verb.into()),
                resource: Some(resource.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answered = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| kandev_harness::error_chain(&e))?;
    answered
        .status
        .map(|s| s.allowed)
        .ok_or_else(|| format!("a review of {verb} {resource} in {ns} without a status"))
}

/// A client of `server` (`https://...`) trusting `ca_pem` and sending `token`, as a
/// kubeconfig would make it.
pub async fn client_with(server: &str, ca_pem: &str, token: &str) -> kube::Client {
    let kubeconfig = typed(crate::tls::kubeconfig("c", server, ca_pem, token));
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// `value` as a `K` (a typed object written as JSON).
pub fn typed<K: serde::de::DeserializeOwned>(value: Value) -> K {
    serde_json::from_value(value).unwrap()
}

/// The API status of a failed call (panics on a success or another error).
pub fn refusal<T: std::fmt::Debug>(result: kube::Result<T>) -> kube::core::Status {
    match result {
        Err(kube::Error::Api(status)) => *status,
        other => panic!("not an API error: {other:?}"),
    }
}

/// Polls `probe` every 100 ms until it gives a value (at most `limit`).
pub async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many TokenRequests for the executor's ServiceAccount the double was sent (its first
/// token and every renewal).
pub fn executor_token_requests(double: &KubeDouble) -> usize {
    let path = format!("/serviceaccounts/{}/token", cluster::EXECUTOR);
    double
        .state
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.uri.contains(&path))
        .count()
}
