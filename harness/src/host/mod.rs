//! This host's Docker engine: the connection (with API-version negotiation), the facts a
//! report records about it, the fixture images and the harness image built there. The local
//! backend runs its Pods on it; Kind runs its node on it.

pub mod harness_image;
pub mod images;
pub mod kube_build;

use crate::wait::WaitTimedOut;
use bollard::Docker;
use kandev_report::Environment;
use std::time::Duration;

/// Why this host's engine cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(
        "no container engine answers at {endpoint}: {cause}\n  fix: start one (bash harness/scripts/ensure-engine.sh) or set DOCKER_HOST"
    )]
    Unreachable {
        endpoint: String,
        /// In the message (the fix follows it), so not a `source`: printed once.
        cause: String,
    },
    #[error(transparent)]
    NoAnswer(#[from] WaitTimedOut),
}

/// Is this a 404 from the engine?
pub fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// Connects to the engine named by `DOCKER_HOST` (or the default socket) and negotiates the
/// API version: Debian's engine speaks 1.41 and refuses newer clients.
pub async fn connect_engine() -> Result<Docker, EngineError> {
    let endpoint =
        std::env::var("DOCKER_HOST").unwrap_or_else(|_| "unix:///var/run/docker.sock".into());
    let unreachable = |e: bollard::errors::Error| EngineError::Unreachable {
        endpoint: endpoint.clone(),
        cause: crate::error_chain(&e),
    };
    let docker = Docker::connect_with_defaults().map_err(unreachable)?;
    let docker = tokio::time::timeout(Duration::from_secs(10), docker.negotiate_version())
        .await
        .map_err(|_| WaitTimedOut {
            what: format!("the engine at {endpoint} to answer"),
            waited: Duration::from_secs(10),
        })?
        .map_err(unreachable)?;
    docker.ping().await.map_err(unreachable)?;
    Ok(docker)
}

/// This host's engine as scenarios may see it: questions whose answers are evidence that a
/// session's daemon is its own (never the raw client).
#[derive(Clone)]
pub struct HostEngine {
    docker: Docker,
}

impl HostEngine {
    pub fn new(docker: Docker) -> Self {
        Self { docker }
    }

    /// The engine's client, for the backends built on it.
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// The ID of the image `reference` (a tag or an ID) in this engine, if it has it.
    /// `Ok(None)` only when the engine answers that it has no such image (404): an engine
    /// that did not answer is an error, never evidence that the image is absent.
    pub async fn image_id(
        &self,
        reference: &str,
    ) -> Result<Option<String>, bollard::errors::Error> {
        match self.docker.inspect_image(reference).await {
            // An image the engine shows without an id is still there.
            Ok(image) => Ok(Some(image.id.unwrap_or_default())),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Removes the tag `tag` (the image too when nothing else names it); scenarios use it
    /// for a probe image of their own, with a run-unique tag, that landed here.
    pub async fn remove_tag(&self, tag: &str) -> Result<(), bollard::errors::Error> {
        self.docker
            .remove_image(
                tag,
                None::<bollard::query_parameters::RemoveImageOptions>,
                None,
            )
            .await
            .map(|_| ())
    }

    /// The engine's daemon ID; an error when the engine did not answer or named none.
    pub async fn daemon_id(&self) -> anyhow::Result<String> {
        let info = self
            .docker
            .info()
            .await
            .map_err(|e| anyhow::anyhow!("engine info: {}", crate::error_chain(&e)))?;
        info.id
            .filter(|id| !id.is_empty())
            .ok_or_else(|| anyhow::anyhow!("the engine's info names no daemon ID"))
    }

    /// Connects, and reads the facts the report records (version, kernel, cgroups).
    pub async fn connect() -> anyhow::Result<(Self, Environment)> {
        let docker = connect_engine().await?;
        let version = docker
            .version()
            .await
            .map_err(|e| anyhow::anyhow!("engine version: {}", crate::error_chain(&e)))?;
        let info = docker
            .info()
            .await
            .map_err(|e| anyhow::anyhow!("engine info: {}", crate::error_chain(&e)))?;
        let environment = Environment {
            engine_version: version.version,
            engine_api_version: version.api_version,
            kernel: info.kernel_version,
            operating_system: info.operating_system,
            architecture: info.architecture,
            cgroup_version: info
                .cgroup_version
                .as_ref()
                .map(|v| if format!("{v:?}").contains('2') { 2 } else { 1 }),
            cgroup_driver: info
                .cgroup_driver
                .as_ref()
                .map(|d| format!("{d:?}").to_lowercase()),
            ..Default::default()
        };
        Ok((Self { docker }, environment))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine that does not answer is no evidence that it lacks an image or has no ID:
    /// both questions fail instead of reading "absent".
    #[tokio::test]
    async fn an_engine_that_does_not_answer_is_an_error_not_an_absence() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("no-engine.sock");
        // A socket file no one listens on any more: connections are refused.
        drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
        let docker = Docker::connect_with_unix(
            &socket.display().to_string(),
            5,
            bollard::API_DEFAULT_VERSION,
        )
        .unwrap();
        let engine = HostEngine::new(docker);
        assert!(engine.image_id("kandev-acceptance-probe:x").await.is_err());
        assert!(engine.daemon_id().await.is_err());
    }
}
