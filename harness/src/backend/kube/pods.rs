//! Task and helper Pods through the executor identity: create (with Kandev's admission
//! comparison, rolled back by exact UID), wait until a container runs (surfacing a Pod that
//! will not start), read back, delete.

use super::backend::KubeBackend;
use super::deletes::{POLL, delete_exact};
use super::errors::{is_status, other};
use super::status::Scheduling;
use crate::backend::{BackendError, ContainerState, HostSharing, PodRef, Result};
use crate::pod::admission::{self, AdmissionMutated};
use crate::pod::identity::ANNOTATION_CREATE_NONCE;
use crate::wait::{self, WaitTimedOut};
use anyhow::anyhow;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Api;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Created as requested, with no admission comparison (a helper has no main container
/// or Kandev labels to compare); an ambiguous create is not retried by name, since a
/// helper carries no create nonce to prove the object is this create's.
pub(super) async fn create_helper(backend: &KubeBackend, pod: &Pod) -> Result<PodRef> {
    crate::backend::check_helper_labels(pod)?;
    // A helper runs the run's images too (the MTU peer the daemon image): it pulls them as
    // the task Pod does.
    let mut pod = pod.clone();
    super::pull_secrets::carry_planned(&mut pod, &backend.pull_secrets);
    let pod = &pod;
    let name = pod.metadata.name.clone().unwrap_or_default();
    let created = backend
        .pods()
        .create(&KubeBackend::post_params(), pod)
        .await
        .map_err(|e| BackendError::Create {
            what: "helper pod",
            name: name.clone(),
            source: e.into(),
        })?;
    Ok(PodRef {
        namespace: backend.namespace.clone(),
        name,
        uid: created.uid().unwrap_or_default(),
    })
}

/// The object at `name` when it carries `nonce`, the create nonce a failed create sent: that
/// create made it, whatever its client heard. The answer may be an error though the write was
/// done: a timeout, a 5xx, or a 409 to the repeat of a create answered 504 (`resilience`
/// resolves that one already when the object carries the create's labels and annotations,
/// the nonce among them; this reads it at the create's own level, whatever the answer). A
/// nonce is drawn per create (`identity::create_nonce`): no other create's object carries it.
pub(super) async fn made_by_this_create<K>(
    api: &Api<K>,
    name: &str,
    nonce: Option<&String>,
) -> Option<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let nonce = nonce.filter(|n| !n.is_empty())?;
    let found = api.get_opt(name).await.ok()??;
    (found.meta().annotations.as_ref()?.get(ANNOTATION_CREATE_NONCE) == Some(nonce)).then(|| {
        tracing::info!(
            "create of {name} was answered with an error, but the object of that name carries its create nonce: that create made it"
        );
        found
    })
}

/// Creates a Kandev task Pod and compares the admitted Pod with it.
pub(super) async fn create(backend: &KubeBackend, pod: &Pod) -> Result<PodRef> {
    // The run's `--image-pull-secret` copies, after the template's own: the admission
    // comparison below holds the admitted Pod to the Pod as sent, with them.
    let mut pod = pod.clone();
    super::pull_secrets::carry_planned(&mut pod, &backend.pull_secrets);
    let pod = &pod;
    let name = pod.metadata.name.clone().unwrap_or_default();
    let admitted = match backend
        .pods()
        .create(&KubeBackend::post_params(), pod)
        .await
    {
        Ok(admitted) => admitted,
        Err(e) => {
            // An ambiguous create (timeout, 5xx, or 409 after a retry): the exact name is
            // ours only if it carries this create's nonce.
            let nonce = pod.annotations().get(ANNOTATION_CREATE_NONCE);
            match made_by_this_create(&backend.pods(), &name, nonce).await {
                Some(found) => found,
                None if is_status(&e, 409) => {
                    return Err(BackendError::Create {
                        what: "pod",
                        name,
                        source: anyhow!(
                            "a Pod of that name already exists (without this create's nonce): {e}"
                        ),
                    });
                }
                None => {
                    return Err(BackendError::Create {
                        what: "pod",
                        name,
                        source: e.into(),
                    });
                }
            }
        }
    };
    let uid = admitted.uid().unwrap_or_default();
    let mismatches = admission::compare(pod, &admitted, &backend.main_container);
    if !mismatches.is_empty() {
        // Roll back only the exact object this create made; no labels needed.
        let _ = delete_exact(
            &backend.delete_policy(),
            &backend.pods(),
            "pod",
            &name,
            &uid,
        )
        .await;
        return Err(other(
            "admission of the Pod",
            AdmissionMutated {
                what: "pod",
                name,
                uid,
                mismatches,
            },
        ));
    }
    Ok(PodRef {
        namespace: backend.namespace.clone(),
        name,
        uid,
    })
}

/// How long a claim the scheduler reports missing may stay missing before the Pod is judged
/// unable to start: the scheduler's informer may not have seen a claim created a moment ago.
pub const CLAIM_GRACE: Duration = Duration::from_secs(15);

/// Whether the API server holds `claim` (and is not deleting it).
async fn claim_exists(backend: &KubeBackend, claim: &str) -> Result<bool> {
    let found = backend
        .pvcs()
        .get_opt(claim)
        .await
        .map_err(|e| other(format!("get persistentvolumeclaim {claim}"), e))?;
    Ok(found.is_some_and(|c| c.metadata.deletion_timestamp.is_none()))
}

/// Polls until `container` runs, or the Pod's status says it will not start. A Pod the
/// scheduler has not placed is waited on (capacity frees, a claim is provisioned, a node is
/// added), its latest message kept for the timeout's diagnosis; a selector no node matches is
/// fatal at once, a claim still missing after [`CLAIM_GRACE`] then.
pub(super) async fn wait_running(
    backend: &KubeBackend,
    pod: &PodRef,
    container: &str,
    timeout: Duration,
) -> Result<()> {
    // Polled GETs (bounded): Kandev's Role grants no `list`, which a watch starts with.
    // The last reason seen names why the container is not running when time runs out.
    let why = std::sync::Mutex::new(String::new());
    let started = Instant::now();
    // When the scheduler first said the claim is missing (reset once it says otherwise).
    let claim_missing_since = std::sync::Mutex::new(None::<Instant>);
    // Some(true): running; Some(false): it will not start (`fatal` says why).
    let fatal = std::sync::Mutex::new(None::<String>);
    let ended = wait::until("the Pod", timeout, POLL, || async {
        let found = backend
            .pods()
            .get_opt(&pod.name)
            .await
            .map_err(|e| other(format!("get pod {}", pod.name), e))?;
        let reason = match &found {
            Some(p) if KubeBackend::container_running(p, &pod.uid, container) => {
                return Ok(Some(true));
            }
            Some(p) if p.uid().as_deref() != Some(pod.uid.as_str()) => {
                "a Pod of that name with another UID replaced it".to_owned()
            }
            Some(p) => {
                let mut cause = KubeBackend::cannot_start(p);
                let scheduling = KubeBackend::scheduling(p);
                // The API server holds the claim the scheduler calls missing: its informer
                // lags behind (seen on real Kind after the API server's restart: `not found`
                // for a minute while the claim existed), which no grace judges; only the
                // Pod's own bound ends that wait.
                // A claim that cannot be read (an identity without `get persistentvolumeclaims`,
                // as Kandev's in empty-dir mode; the API server restarting) is judged by the
                // scheduler's words and the grace alone, as before any read.
                let lagging = match &scheduling {
                    Some(Scheduling::MissingClaim { claim, .. }) => {
                        claim_exists(backend, claim).await.unwrap_or(false)
                    }
                    _ => false,
                };
                let mut since = claim_missing_since.lock().unwrap_or_else(|e| e.into_inner());
                match &scheduling {
                    Some(Scheduling::MissingClaim { .. }) if lagging => *since = None,
                    Some(Scheduling::MissingClaim { claim, message }) => {
                        let first = *since.get_or_insert_with(Instant::now);
                        if first.elapsed() >= CLAIM_GRACE {
                            cause = Some(format!(
                                "claim {claim} is still missing after {} s (Unschedulable): {message}",
                                CLAIM_GRACE.as_secs()
                            ));
                        }
                    }
                    _ => *since = None,
                }
                if let Some(cause) = cause {
                    if let Ok(mut fatal) = fatal.lock() {
                        *fatal = Some(cause);
                    }
                    return Ok(Some(false));
                }
                match scheduling {
                    Some(judged) => format!(
                        "phase Pending; the scheduler has not placed it yet (Unschedulable): {}",
                        judged.message()
                    ),
                    None => KubeBackend::waiting_reason(p, container),
                }
            }
            None => {
                // Deleted by someone else before it ran: whatever its status said about why
                // went with it (a cause left only in its Events is not named here).
                if let Ok(mut fatal) = fatal.lock() {
                    *fatal = Some(format!(
                        "it was deleted before container {container} ran (not by this launch); its status went with it"
                    ));
                }
                return Ok(Some(false));
            }
        };
        if let Ok(mut why) = why.lock() {
            *why = reason;
        }
        Ok(None)
    })
    .await;
    if let Some(cause) = fatal.lock().ok().and_then(|f| f.clone()) {
        return Err(BackendError::CannotStart {
            pod: pod.name.clone(),
            cause,
        });
    }
    match ended {
        Ok(true) => Ok(()),
        Ok(false) | Err(BackendError::WaitTimedOut(_)) => Err(WaitTimedOut {
            what: format!(
                "container {container} of pod {} to run: {}",
                pod.name,
                why.lock().map(|w| w.clone()).unwrap_or_default()
            ),
            waited: started.elapsed(),
        }
        .into()),
        Err(e) => Err(e),
    }
}

pub(super) async fn container_states(
    backend: &KubeBackend,
    pod: &PodRef,
) -> Result<Vec<ContainerState>> {
    let found = backend
        .pods()
        .get_opt(&pod.name)
        .await
        .map_err(|e| other(format!("get pod {}", pod.name), e))?;
    let Some(found) = found.filter(|p| p.uid().as_deref() == Some(pod.uid.as_str())) else {
        return Ok(Vec::new());
    };
    Ok(found
        .status
        .into_iter()
        .flat_map(|s| {
            s.init_container_statuses
                .into_iter()
                .flatten()
                .chain(s.container_statuses.into_iter().flatten())
        })
        .map(|c| ContainerState {
            running: c.state.as_ref().and_then(|s| s.running.as_ref()).is_some(),
            exit_code: c
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .map(|t| i64::from(t.exit_code)),
            restarts: u32::try_from(c.restart_count).unwrap_or(0),
            // The kubelet's `imageID` (empty until the runtime created the container).
            image_id: Some(c.image_id).filter(|id| !id.is_empty()),
            image: c.image,
            name: c.name,
        })
        .collect())
}

/// Deletes the Pod by its exact UID and waits until it is gone.
pub(super) async fn delete(backend: &KubeBackend, pod: &PodRef) -> Result<()> {
    delete_exact(
        &backend.delete_policy(),
        &backend.pods(),
        "pod",
        &pod.name,
        &pod.uid,
    )
    .await
    .map(|_| ())
}

pub(super) async fn uid(
    backend: &KubeBackend,
    namespace: &str,
    name: &str,
) -> Result<Option<String>> {
    let api: Api<Pod> = Api::namespaced(backend.client.clone(), namespace);
    api.get_opt(name)
        .await
        .map(|p| p.and_then(|p| p.uid()))
        .map_err(|e| other(format!("get pod {name}"), e))
}

pub(super) async fn labels(
    backend: &KubeBackend,
    namespace: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, String>>> {
    let api: Api<Pod> = Api::namespaced(backend.client.clone(), namespace);
    api.get_opt(name)
        .await
        .map(|p| p.map(|p| p.labels().clone()))
        .map_err(|e| other(format!("get pod {name}"), e))
}

/// The Pod as the API server stores it (None when gone or replaced).
pub(super) async fn object(backend: &KubeBackend, pod: &PodRef) -> Result<Option<Pod>> {
    Ok(backend
        .pods()
        .get_opt(&pod.name)
        .await
        .map_err(|e| other(format!("get pod {}", pod.name), e))?
        .filter(|p| p.uid().as_deref() == Some(pod.uid.as_str())))
}

/// Host paths and host namespaces of the Pod object the API server returns.
pub(super) async fn host_sharing(backend: &KubeBackend, pod: &PodRef) -> Result<HostSharing> {
    let found = backend
        .pods()
        .get_opt(&pod.name)
        .await
        .map_err(|e| other(format!("get pod {}", pod.name), e))?
        .filter(|p| p.uid().as_deref() == Some(pod.uid.as_str()))
        .ok_or_else(|| other(format!("get pod {}", pod.name), anyhow!("it is gone")))?;
    let spec = found.spec.unwrap_or_default();
    let mut sharing = HostSharing::default();
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
    {
        for m in c.volume_mounts.iter().flatten() {
            let host_path = spec
                .volumes
                .iter()
                .flatten()
                .find(|v| v.name == m.name)
                .and_then(|v| v.host_path.as_ref());
            if let Some(h) = host_path {
                sharing.host_paths.push(format!("{}: {}", c.name, h.path));
            }
        }
    }
    for (ns, set) in [
        ("network", spec.host_network),
        ("pid", spec.host_pid),
        ("ipc", spec.host_ipc),
    ] {
        if set == Some(true) {
            sharing.host_namespaces.push(format!("pod: {ns}"));
        }
    }
    Ok(sharing)
}

pub(super) async fn ip(backend: &KubeBackend, pod: &PodRef) -> Result<Option<String>> {
    let found = backend
        .pods()
        .get_opt(&pod.name)
        .await
        .map_err(|e| other(format!("get pod {}", pod.name), e))?;
    Ok(found.and_then(|p| p.status).and_then(|s| s.pod_ip))
}
