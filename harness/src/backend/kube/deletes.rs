//! Exact deletes, as Kandev deletes: by UID and resourceVersion preconditions (read again
//! after a conflict), then polled until the object is gone.

use super::errors::{is_status, other};
use crate::backend::{BackendError, Result};
use crate::wait;
use anyhow::anyhow;
use kube::api::{Api, DeleteParams, Preconditions};
use std::time::Duration;

/// How often waits read the object again (Kandev polls every 100 ms; this is gentler).
pub(super) const POLL: Duration = Duration::from_millis(250);

/// How deletes wait and how long a Pod's containers get to stop.
#[derive(Debug, Clone)]
pub struct DeletePolicy {
    /// How long a delete waits until the object is gone.
    pub timeout: Duration,
    /// Grace period of Pod deletes.
    pub grace_seconds: i64,
}

impl Default for DeletePolicy {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(120),
            grace_seconds: 2,
        }
    }
}

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
    let gone = format!("{what} {name} (uid {uid}) to be gone");
    wait::until(&gone, policy.timeout, POLL, || async {
        let current = api
            .get_opt(name)
            .await
            .map_err(|e| other(format!("wait until {what} {name} is gone"), e))?;
        Ok(current
            .is_none_or(|c| c.meta().uid.as_deref() != Some(uid))
            .then_some(true))
    })
    .await
}
