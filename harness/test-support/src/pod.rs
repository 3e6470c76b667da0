//! A task Pod as the harness composes it for a session, for tests that hand one to a backend,
//! a fake API server or a real client without launching a session.

use k8s_openapi::api::core::v1::Pod;
use kandev_harness::pod::compose::{Arch, ComposeInput, WorkspaceSource, compose_pod};
use kandev_harness::pod::identity::{SessionIdentity, create_nonce};
use kandev_harness::pod::template::TemplateFile;

/// The images [`task_pod`] puts into the template when a test does not care which.
pub const WORKER_IMAGE: &str = "kandev-acceptance/worker:0";
pub const DAEMON_IMAGE: &str = "kandev-acceptance/daemon:0";

/// What differs between the task Pods tests ask for; [`TaskPod::new`] gives the common case
/// (placeholder images, amd64, an emptyDir workspace, the harness's labels on).
pub struct TaskPod<'a> {
    pub namespace: &'a str,
    pub identity: &'a SessionIdentity,
    pub workspace: WorkspaceSource,
    pub arch: Arch,
    pub worker_image: &'a str,
    pub daemon_image: &'a str,
    /// The harness's own labels (run, scenario, session) beside Kandev's, as a session's
    /// Pod carries them; off for a Pod as Kandev alone would compose it.
    pub harness_labels: bool,
}

impl<'a> TaskPod<'a> {
    pub fn new(namespace: &'a str, identity: &'a SessionIdentity) -> Self {
        TaskPod {
            namespace,
            identity,
            workspace: WorkspaceSource::EmptyDir,
            arch: Arch::Amd64,
            worker_image: WORKER_IMAGE,
            daemon_image: DAEMON_IMAGE,
            harness_labels: true,
        }
    }
}

/// The default full-worker template with the images in, composed for the session (main
/// container `kandev-agent`, a fresh create nonce): what a launch asks the backend to create.
pub fn task_pod(spec: TaskPod<'_>) -> anyhow::Result<Pod> {
    let text = std::fs::read_to_string(kandev_harness::paths::default_template())?;
    let file = TemplateFile::parse(text)
        .map_err(|findings| anyhow::anyhow!("the default template: {findings:?}"))?;
    let template = file
        .with_images(spec.worker_image, spec.daemon_image)
        .map_err(|refused| anyhow::anyhow!("the default template: {refused:?}"))?
        .template;
    let mut pod = compose_pod(&ComposeInput {
        template: &template,
        identity: spec.identity,
        namespace: spec.namespace,
        main_container: "kandev-agent",
        arch: spec.arch,
        workspace: spec.workspace,
        create_nonce: &create_nonce(),
    })?;
    if spec.harness_labels {
        pod.metadata
            .labels
            .get_or_insert_default()
            .extend(spec.identity.harness_labels());
    }
    Ok(pod)
}
