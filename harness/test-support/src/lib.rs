//! Helpers shared by the tests of `kandev-harness` and `kandev-scenarios` (a dev-dependency
//! of both, never of a shipped binary): a fake Kubernetes API server (tower-test, in process),
//! a wire-level cluster double (HTTPS, kubeconfig, websocket exec and port-forward) and the
//! harness's `kube` backend set up against it as `--backend kube` does (`on_double`), the
//! engine tests' starting point (the fixture images on this host's engine; the double's own
//! Pods there labelled for `gc`, `labelled`), and validation of
//! the harness's outputs against the formats' own schemas (vendored in `schemas/` beside this
//! crate's manifest), fixture Kind nodes (`node`: cgroup trees and `/proc` texts as real nodes
//! have them) and the import-circle check the crates' module graphs are held to.

// Test support: failing loudly with unwrap/panic is the point here, as in the tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod cluster_double;
pub mod connect_proxy;
pub mod engine;
pub mod fake_apiserver;
pub mod harness_env;
pub mod import_circles;
pub mod labelled;
pub mod node;
pub mod on_double;
pub mod pod;
pub mod real_api_server;
pub mod schemas;
pub mod tls;
