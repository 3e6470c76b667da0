//! The `kube` backend's connection to an API server as a real one's path treats it, against
//! the wire-level cluster double: proxies (a kubeconfig `proxy-url`), the faults a control
//! plane produces (429 with Retry-After, 500 and 503, connection resets on any request and in
//! the middle of an exec and a port-forward, 410 Gone), token lifetimes a cluster caps, and a
//! load balancer's idle cuts.
//!
//! Without a runtime (no engine needed) unless `#[ignore]`d: the engine tests need
//! `bash harness/scripts/ensure-engine.sh`, then `cargo test --workspace -- --include-ignored`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kandev_harness::backend::kube::cluster;
use kandev_test_support::cluster_double::{self, KubeDouble};
use kandev_test_support::connect_proxy;
use serde_json::Value;

/// A copy of the double's kubeconfig whose cluster has `proxy-url: proxy`.
fn kubeconfig_through(
    double: &KubeDouble,
    proxy: &str,
    dir: &std::path::Path,
) -> std::path::PathBuf {
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(&double.kubeconfig).unwrap()).unwrap();
    config["clusters"][0]["cluster"]["proxy-url"] = Value::String(proxy.into());
    let path = dir.join("kubeconfig");
    std::fs::write(&path, serde_json::to_vec(&config).unwrap()).unwrap();
    path
}

/// A kubeconfig cluster's `proxy-url` is used (kube was built without `http-proxy`: every
/// client failed with ProxyProtocolDisabled), and the API server is reached through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_is_reached_through_a_kubeconfig_proxy_url() {
    let double = cluster_double::start(None).await.unwrap();
    let proxy = connect_proxy::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig_through(&double, &proxy.url, dir.path());
    let reached = cluster::open(Some(&config), Some(&double.context))
        .await
        .unwrap_or_else(|e| panic!("{}", kandev_harness::error_chain(&e)));
    assert!(reached.server_version.starts_with('v'));
    let port = double.server.rsplit(':').next().unwrap();
    assert_eq!(
        proxy.targets().first().map(String::as_str),
        Some(&*format!("127.0.0.1:{port}"))
    );
}
