//! What the engine tests start from: this host's engine with the fixture images on it (built
//! from `fixtures/images` when missing, reused by content otherwise), a local backend running
//! Pods there, the wire-level cluster double whose Pods run on it, and the harness image.

use crate::cluster_double::{self, KubeDouble};
use kandev_harness::backend::Backend;
use kandev_harness::backend::local::LocalBackend;
use kandev_harness::host::connect_engine;
use kandev_harness::host::harness_image::ensure_harness_image;
use kandev_harness::host::images::{
    DEFAULT_BASE_IMAGE, ImageConfig, ImageSet, ensure_images, mock_agent_binary,
};
use kandev_report::ImageRecord;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// This host's engine and the fixture images on it.
pub struct FixtureEngine {
    pub docker: bollard::Docker,
    pub images: ImageSet,
    /// The mock agent's static binary (what bootstrap uploads as agentctl).
    pub mock_agent_binary: PathBuf,
}

/// The fixture images and the mock agent's binary, ensured once per test process: the tests of
/// one binary run in parallel, and on a fresh engine each would otherwise build the same images
/// at once (minutes of duplicated work on two cores; a build stream cut short under that load
/// failed one of them).
static FIXTURES: tokio::sync::OnceCell<(ImageSet, PathBuf)> = tokio::sync::OnceCell::const_new();

/// The harness image and the binary it holds, ensured once per test process (as [`FIXTURES`]).
static HARNESS: tokio::sync::OnceCell<(PathBuf, ImageRecord)> = tokio::sync::OnceCell::const_new();

impl FixtureEngine {
    /// Connects to the engine and ensures the fixture images (Debian bookworm base).
    pub async fn start() -> Self {
        // A client per caller: each test has its own runtime, and a client's connections
        // belong to the runtime that made them.
        let docker = connect_engine().await.unwrap();
        let (images, binary) = FIXTURES
            .get_or_init(|| async {
                let docker = connect_engine().await.unwrap();
                let root = kandev_harness::paths::workspace_root();
                let binary = mock_agent_binary().await.unwrap();
                let images = ensure_images(
                    &docker,
                    &ImageConfig {
                        base_image: DEFAULT_BASE_IMAGE.into(),
                        worker_image: None,
                        daemon_image: None,
                        images_dir: root.join("fixtures/images"),
                        mock_agent_binary: binary.clone(),
                    },
                    &indicatif::MultiProgress::with_draw_target(
                        indicatif::ProgressDrawTarget::hidden(),
                    ),
                )
                .await
                .unwrap();
                (images, binary)
            })
            .await
            .clone();
        Self {
            docker,
            images,
            mock_agent_binary: binary,
        }
    }

    /// The harness image holding `binary` (a test's `env!("CARGO_BIN_EXE_kandev-acceptance")`)
    /// and the mock agent, on the fixture images' base: built once per process, reused by
    /// content otherwise. One binary per process: a second, different one is a test's mistake.
    pub async fn harness_image(&self, binary: &Path) -> ImageRecord {
        let (built_from, record) = HARNESS
            .get_or_init(|| async {
                let docker = connect_engine().await.unwrap();
                let record = ensure_harness_image(
                    &docker,
                    DEFAULT_BASE_IMAGE,
                    binary,
                    &self.mock_agent_binary,
                    &indicatif::MultiProgress::with_draw_target(
                        indicatif::ProgressDrawTarget::hidden(),
                    ),
                )
                .await
                .unwrap();
                (binary.to_owned(), record)
            })
            .await;
        assert_eq!(built_from, binary, "one harness image per test process");
        record.clone()
    }

    /// The runtime for a cluster double on this engine: [`FixtureEngine::local_backend`], a
    /// Pod without a harness run label labelled with this process's
    /// [`test_run_id`](crate::labelled::test_run_id) on the engine, so that `gc` finds what a
    /// killed test left, and what a test that panicked left removed when its runtime ends
    /// ([`TestLabelled`](crate::labelled::TestLabelled)).
    pub fn double_runtime(&self) -> Arc<dyn Backend> {
        Arc::new(crate::labelled::TestLabelled::new(
            self.local_backend(),
            &self.images.mock_agent,
        ))
    }

    /// A local backend running Pods on this engine (pids limit 4096).
    pub fn local_backend(&self) -> Arc<dyn Backend> {
        Arc::new(LocalBackend::new(
            self.docker.clone(),
            self.images.mock_agent.clone(),
            4096,
        ))
    }
}

/// The fixture images, and the cluster double with its Pods on this host's engine. A Pod that
/// carries no harness run label (one a test posts itself) runs labelled with this process's
/// [`test_run_id`](crate::labelled::test_run_id), so that `gc` finds what a killed test left.
pub async fn engine_double() -> (KubeDouble, ImageSet) {
    let engine = FixtureEngine::start().await;
    let double = cluster_double::start(Some(engine.double_runtime()))
        .await
        .unwrap();
    (double, engine.images)
}
