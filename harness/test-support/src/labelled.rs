//! The runtime the engine tests give the cluster double: the local backend, with every Pod that
//! carries no harness run label stamped with the harness's `managed` label and this test
//! process's own run id ([`test_run_id`]) before it reaches the engine.
//!
//! A test that posts a Pod of its own through the double and panics before it deletes it, or
//! is killed, leaves that Pod's containers on the engine. A panic ends the test's runtime, which drops the double's tasks and with them
//! this backend: its drop removes every Pod created through it and not deleted since (from a
//! thread of its own with an engine client of its own: a drop cannot await, and the dying
//! runtime no longer serves its client; testcontainers' `async_drop` keeps a drop-worker
//! thread for the same reason). A killed
//! test runs no drop: its Pods' labels let `gc --run <id>` find them. The labels go on the
//! engine's copy only (the API object the double stores and serves is the client's); Pods a
//! harness run creates through the double already carry their run's labels and are left as
//! they are.
//!
//! Why not testcontainers, the crate the design names for throwaway containers: these
//! containers are created by the system under test (the double's Pods, through the harness's
//! local backend), not by the test, so no handle of a test could own them; a drop-based guard
//! does not run when a test is killed (testcontainers-rs has no reaper container, and its
//! `watchdog` feature handles SIGINT/SIGTERM/SIGQUIT only); and testcontainers 0.28 (bollard
//! 0.21) sends API version 1.53 without negotiating (`core/client/bollard_client.rs`, `init`:
//! `API_DEFAULT_VERSION`), which Debian's dockerd 20.10 refuses: "client version 1.53 is too
//! new. Maximum supported API version is 1.41".

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kandev_harness::backend::local::LocalBackend;
use kandev_harness::backend::{
    Backend, ConnectionTest, ContainerState, ExecOutput, ExecRequest, HostSharing, PodRef, Result,
    WorkspaceRef,
};
use kandev_harness::pod::identity::{LABEL_MANAGED, LABEL_POD_UID, LABEL_RUN};
use kandev_harness::pod::template::WorkspaceMode;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// How long a drop waits for the engine to remove what the test left.
const DROP_REMOVAL_BOUND: Duration = Duration::from_secs(120);

/// This test process's run id (a harness run id, made once): the `acceptance.kandev.ai/run`
/// label of the double's Pods that carry none. `kandev-acceptance gc --run <id>` removes what
/// such a test left; `gc` (every run) finds them by `managed`.
pub fn test_run_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        let id = kandev_harness::pod::identity::new_run_id();
        eprintln!(
            "kandev-test-support: the cluster double's own Pods on this engine carry {LABEL_RUN}={id}; \
             after a killed test: kandev-acceptance gc --run {id}"
        );
        id
    })
}

/// `pod` as the engine gets it: the harness's `managed` label and [`test_run_id`] added when
/// it carries no run label.
pub fn labelled(pod: &Pod) -> Pod {
    let mut pod = pod.clone();
    let labels = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
    if !labels.contains_key(LABEL_RUN) {
        labels.insert(LABEL_MANAGED.into(), "true".into());
        labels.insert(LABEL_RUN.into(), test_run_id().into());
    }
    pod
}

/// A local backend forwarding every call to `inner`, Pods labelled by [`labelled`] on
/// creation, and those not deleted through it removed when it is dropped.
pub struct TestLabelled {
    inner: Arc<dyn Backend>,
    /// `inner`'s infra image, for the engine client the drop makes.
    infra_image: String,
    /// Pods created through this backend and not deleted since, by UID.
    live: Mutex<BTreeMap<String, PodRef>>,
}

impl TestLabelled {
    /// `inner`: a [`LocalBackend`] with the infra image `infra_image`.
    pub fn new(inner: Arc<dyn Backend>, infra_image: &str) -> Self {
        Self {
            inner,
            infra_image: infra_image.to_owned(),
            live: Mutex::default(),
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, PodRef>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `create`, with the Pod tracked from before it starts when it names its UID (the
    /// double's do): a create the test's end cuts short leaves containers of that UID, which
    /// the drop then removes too. A failed create removed what it made.
    async fn tracked(
        &self,
        pod: &Pod,
        create: impl std::future::Future<Output = Result<PodRef>>,
    ) -> Result<PodRef> {
        let early = pod.metadata.uid.clone().map(|uid| PodRef {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid,
        });
        if let Some(early) = &early {
            self.live().insert(early.uid.clone(), early.clone());
        }
        match create.await {
            Ok(created) => {
                self.live().insert(created.uid.clone(), created.clone());
                Ok(created)
            }
            Err(e) => {
                if let Some(early) = early {
                    self.live().remove(&early.uid);
                }
                Err(e)
            }
        }
    }
}

impl Drop for TestLabelled {
    fn drop(&mut self) {
        let left: Vec<PodRef> = std::mem::take(&mut *self.live()).into_values().collect();
        if left.is_empty() {
            return;
        }
        let infra_image = self.infra_image.clone();
        let names: Vec<String> = left.iter().map(|p| p.name.clone()).collect();
        let (done, removed) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let removal = async {
                let docker = kandev_harness::host::connect_engine().await?;
                let backend = LocalBackend::new(docker, infra_image, 4096);
                // The engine may still finish a create the ended runtime had sent: removed
                // until two looks, half a second apart, find nothing of these Pods.
                let deadline = std::time::Instant::now() + DROP_REMOVAL_BOUND / 2;
                let mut quiet = 0;
                while quiet < 2 {
                    let mut found = false;
                    for pod in &left {
                        let selector = [(LABEL_POD_UID, pod.uid.as_str())];
                        if !backend.list_labelled(&selector).await?.is_empty() {
                            found = true;
                            backend.delete_pod(pod).await?;
                        }
                    }
                    quiet = if found { 0 } else { quiet + 1 };
                    if std::time::Instant::now() > deadline {
                        anyhow::bail!("the engine still creates them");
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                anyhow::Ok(())
            };
            let result = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(anyhow::Error::from)
                .and_then(|runtime| runtime.block_on(removal));
            let _ = done.send(result);
        });
        let problem = match removed.recv_timeout(DROP_REMOVAL_BOUND) {
            Ok(Ok(())) => return,
            Ok(Err(e)) => format!("{e:#}"),
            Err(_) => format!("not done within {DROP_REMOVAL_BOUND:?}"),
        };
        eprintln!(
            "kandev-test-support: removing the Pods a test left on the engine ({}) failed: {problem}; \
             kandev-acceptance gc --run {} removes them",
            names.join(", "),
            test_run_id()
        );
    }
}

#[async_trait]
impl Backend for TestLabelled {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn keep_hint(&self, pod: &PodRef, container: &str) -> String {
        self.inner.keep_hint(pod, container)
    }
    fn unenforced(&self, pod: &Pod) -> Vec<String> {
        self.inner.unenforced(pod)
    }
    fn plumbing_listeners(&self) -> Vec<(String, &'static str)> {
        self.inner.plumbing_listeners()
    }
    async fn pod_object(&self, pod: &PodRef) -> Result<Option<Pod>> {
        self.inner.pod_object(pod).await
    }
    async fn restricted_identity(&self) -> Result<Option<(String, Arc<dyn Backend>)>> {
        self.inner.restricted_identity().await
    }
    async fn connection_test(&self, mode: WorkspaceMode) -> Result<Option<ConnectionTest>> {
        self.inner.connection_test(mode).await
    }
    async fn pod_exposures(&self, pod: &PodRef) -> Result<Vec<String>> {
        self.inner.pod_exposures(pod).await
    }
    async fn create_workspace(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
        annotations: &BTreeMap<String, String>,
    ) -> Result<WorkspaceRef> {
        self.inner.create_workspace(name, labels, annotations).await
    }
    async fn delete_workspace(&self, workspace: &WorkspaceRef) -> Result<()> {
        self.inner.delete_workspace(workspace).await
    }
    async fn get_workspace(&self, name: &str) -> Result<Option<WorkspaceRef>> {
        self.inner.get_workspace(name).await
    }
    async fn workspace_labels(&self, name: &str) -> Result<Option<BTreeMap<String, String>>> {
        self.inner.workspace_labels(name).await
    }
    async fn create_pod(&self, pod: &Pod) -> Result<PodRef> {
        self.tracked(pod, self.inner.create_pod(&labelled(pod)))
            .await
    }
    async fn create_helper_pod(&self, pod: &Pod) -> Result<PodRef> {
        self.tracked(pod, self.inner.create_helper_pod(&labelled(pod)))
            .await
    }
    async fn wait_running(&self, pod: &PodRef, container: &str, timeout: Duration) -> Result<()> {
        self.inner.wait_running(pod, container, timeout).await
    }
    async fn container_states(&self, pod: &PodRef) -> Result<Vec<ContainerState>> {
        self.inner.container_states(pod).await
    }
    async fn exec(&self, pod: &PodRef, request: ExecRequest) -> Result<ExecOutput> {
        self.inner.exec(pod, request).await
    }
    async fn port_exchange(
        &self,
        pod: &PodRef,
        container: &str,
        port: u16,
        request: &[u8],
        timeout: Duration,
    ) -> Result<Vec<u8>> {
        self.inner
            .port_exchange(pod, container, port, request, timeout)
            .await
    }
    async fn logs(&self, pod: &PodRef, container: &str) -> Result<String> {
        self.inner.logs(pod, container).await
    }
    async fn diagnostics(&self, pod: &PodRef) -> Vec<(String, String)> {
        self.inner.diagnostics(pod).await
    }
    async fn delete_pod(&self, pod: &PodRef) -> Result<()> {
        self.inner.delete_pod(pod).await?;
        self.live().remove(&pod.uid);
        Ok(())
    }
    async fn pod_uid(&self, namespace: &str, name: &str) -> Result<Option<String>> {
        self.inner.pod_uid(namespace, name).await
    }
    async fn pod_labels(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        self.inner.pod_labels(namespace, name).await
    }
    async fn host_sharing(&self, pod: &PodRef) -> Result<HostSharing> {
        self.inner.host_sharing(pod).await
    }
    async fn pod_ip(&self, pod: &PodRef) -> Result<Option<String>> {
        self.inner.pod_ip(pod).await
    }
    async fn list_labelled(&self, selector: &[(&str, &str)]) -> Result<Vec<String>> {
        self.inner.list_labelled(selector).await
    }
    async fn remove_labelled(
        &self,
        selector: &[(&str, &str)],
        dry_run: bool,
    ) -> Result<Vec<String>> {
        self.inner.remove_labelled(selector, dry_run).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_without_a_run_label_gets_the_tests_and_one_with_keeps_its_own() {
        let mut pod = Pod::default();
        pod.metadata.labels = Some(BTreeMap::from([("app".into(), "web".into())]));
        let stamped = labelled(&pod);
        let labels = stamped.metadata.labels.unwrap();
        assert_eq!(labels["app"], "web");
        assert_eq!(labels[LABEL_MANAGED], "true");
        assert_eq!(labels[LABEL_RUN], test_run_id());

        let mut run = Pod::default();
        run.metadata.labels = Some(BTreeMap::from([
            (LABEL_MANAGED.into(), "true".into()),
            (LABEL_RUN.into(), "20260101t000000-abcdef".into()),
        ]));
        assert_eq!(labelled(&run).metadata.labels, run.metadata.labels);
        assert_eq!(labelled(&Pod::default()).metadata.labels.unwrap().len(), 2);
    }
}
