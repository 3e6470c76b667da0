//! Exact deletes, as Kandev deletes: by UID and resourceVersion preconditions (read again
//! after a conflict), then polled until the object is gone; one that only finalizers still
//! hold is given [`DeletePolicy::finalizer_patience`], then the error names them.

use super::errors::{is_status, other};
use crate::backend::{BackendError, Result};
use crate::wait;
use anyhow::anyhow;
use kube::api::{Api, DeleteParams, Preconditions};
use std::time::{Duration, Instant};

/// How often waits read the object again (Kandev polls every 100 ms; this is gentler).
pub(super) const POLL: Duration = Duration::from_millis(250);

/// How deletes wait and how long a Pod's containers get to stop.
#[derive(Debug, Clone)]
pub struct DeletePolicy {
    /// How long a delete waits until the object is gone.
    pub timeout: Duration,
    /// Grace period of Pod deletes.
    pub grace_seconds: i64,
    /// How long a delete waits once only finalizers hold the object (its deletion grace
    /// period over: `deletionGracePeriodSeconds` 0) for the controllers owning them to
    /// remove them, within `timeout`. A controller finishing its cleanup takes seconds;
    /// one that has not within this long is stuck or gone, and waiting on would only delay
    /// the error naming it (Kandev's own calls are bounded by its 30 s request timeout).
    pub finalizer_patience: Duration,
}

impl Default for DeletePolicy {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(120),
            grace_seconds: 2,
            finalizer_patience: FINALIZER_PATIENCE,
        }
    }
}

/// [`DeletePolicy::finalizer_patience`]'s default.
pub const FINALIZER_PATIENCE: Duration = Duration::from_secs(30);

/// Deletes the object `name` only while it still has `uid`, with the resourceVersion
/// read just before as a second precondition (a concurrent change makes the API server
/// refuse, and the identity is checked again); then waits until it is gone.
pub(super) async fn delete_exact<K>(
    policy: &DeletePolicy,
    api: &Api<K>,
    what: &'static str,
    name: &str,
    uid: &str,
) -> Result<bool>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut deleted = false;
    for _attempt in 0..5 {
        let current = api
            .get_opt(name)
            .await
            .map_err(|e| other(format!("get {what} {name}"), e))?;
        let Some(current) = current else {
            return Ok(deleted);
        };
        let found = current.meta().uid.clone().unwrap_or_default();
        if found != uid {
            if deleted {
                // Gone, and a new object of that name exists: not ours to touch.
                return Ok(true);
            }
            return Err(BackendError::UidMismatch {
                what,
                name: name.to_owned(),
                expected: uid.to_owned(),
                found,
            });
        }
        if current.meta().deletion_timestamp.is_some() {
            deleted = true;
            break;
        }
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_owned()),
                resource_version: current.meta().resource_version.clone(),
            }),
            grace_period_seconds: (what == "pod")
                .then_some(u32::try_from(policy.grace_seconds).unwrap_or(0)),
            ..Default::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => {
                deleted = true;
                break;
            }
            Err(e) if is_status(&e, 404) => return Ok(deleted),
            // The resourceVersion moved (status updates): read again, check again.
            Err(e) if is_status(&e, 409) => continue,
            Err(e) => {
                return Err(BackendError::Delete {
                    what,
                    name: name.to_owned(),
                    source: e.into(),
                });
            }
        }
    }
    if !deleted {
        return Err(BackendError::Delete {
            what,
            name: name.to_owned(),
            source: anyhow!("its resourceVersion kept changing; gave up after 5 attempts"),
        });
    }
    // Polled GETs, as Kandev waits: its Role grants no `list`, which a watch starts with.
    // Finalizers the object still carried, and since when only they hold it.
    let started = Instant::now();
    let held = std::sync::Mutex::new((Vec::<String>::new(), None::<Instant>));
    let gone = format!("{what} {name} (uid {uid}) to be gone");
    let waited = wait::until(&gone, policy.timeout, POLL, || async {
        let current = api
            .get_opt(name)
            .await
            .map_err(|e| other(format!("wait until {what} {name} is gone"), e))?;
        let Some(current) = current.filter(|c| c.meta().uid.as_deref() == Some(uid)) else {
            return Ok(Some(true));
        };
        let meta = current.meta();
        let finalizers = meta.finalizers.clone().unwrap_or_default();
        let grace_over = meta.deletion_grace_period_seconds.is_none_or(|g| g == 0);
        let mut held = held.lock().unwrap_or_else(|p| p.into_inner());
        let since = match (finalizers.is_empty() || !grace_over, held.1) {
            (true, _) => None,
            (false, Some(since)) => Some(since),
            (false, None) => Some(Instant::now()),
        };
        *held = (finalizers.clone(), since);
        if since.is_some_and(|s| s.elapsed() >= policy.finalizer_patience) {
            return Err(BackendError::DeleteHeld {
                what,
                name: name.to_owned(),
                uid: uid.to_owned(),
                finalizers,
                waited: started.elapsed(),
            });
        }
        Ok(None)
    })
    .await;
    match waited {
        // Out of time while finalizers (and something else) still held it: name them.
        Err(BackendError::WaitTimedOut(_)) => {
            let (finalizers, _) = held.into_inner().unwrap_or_else(|p| p.into_inner());
            if finalizers.is_empty() {
                waited
            } else {
                Err(BackendError::DeleteHeld {
                    what,
                    name: name.to_owned(),
                    uid: uid.to_owned(),
                    finalizers,
                    waited: started.elapsed(),
                })
            }
        }
        other => other,
    }
}

/// Deletes `name` if it is still the object of `uid` (what the run's create returned): a UID
/// precondition, so it is safe to repeat after a lost connection and never removes another
/// object of that name. Ok(true): the run's object was already gone, answered 404, or 409 when
/// the name is another object's now (k8s.io/apiserver v0.37.2 pkg/storage/interfaces.go
/// `Preconditions.Check`, pkg/storage/errors/storage.go `InterpretDeleteError`), which stays.
pub(crate) async fn delete_recorded<K>(
    api: &Api<K>,
    name: &str,
    uid: Option<String>,
) -> std::result::Result<bool, String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(false),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(true),
        Err(e) => Err(crate::error_chain(&e)),
    }
}
