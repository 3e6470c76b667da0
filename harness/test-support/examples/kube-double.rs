//! Serves the wire-level cluster double until interrupted, for trying it by hand: prints
//! `export KUBECONFIG=...` and the context; `--engine` runs its Pods on the engine
//! `DOCKER_HOST` names (the local backend), as the engine tests do.
//!
//! `cargo run -q -p kandev-test-support --example kube-double [-- --engine]`, then
//! `kubectl --context kube-double get --raw /api/v1/namespaces` (raw requests only: the double
//! serves no discovery documents but `/version`, so kubectl's typed commands find no
//! resources). Ctrl-C ends it (and removes its kubeconfig).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let engine = std::env::args().skip(1).any(|a| a == "--engine");
    let double = if engine {
        kandev_test_support::engine::engine_double().await.0
    } else {
        kandev_test_support::cluster_double::start(None).await?
    };
    println!("export KUBECONFIG={}", double.kubeconfig.display());
    println!("# context {}; server {}", double.context, double.server);
    tokio::signal::ctrl_c().await?;
    Ok(())
}
