//! A run's liveness on a cluster: a `coordination.k8s.io/v1` Lease that the run (and a
//! `launch`, for the run it starts) holds from the moment it owns anything there until it
//! has removed what it created, renewed every [`RENEW_EVERY`]. `gc` spares every run whose
//! Lease was renewed less than its `leaseDurationSeconds` ago ([`judge`]), so that it never
//! removes what a run still going uses; a killed run stops renewing and is collected once
//! its Lease has expired (or at once with `--force`).
//!
//! The Lease is the operator's (or, in the cluster, the bookkeeper's) to write, never the
//! executor's: Kandev's Role grants nothing on Leases and needs nothing new for this. It
//! lives in the run's namespace (the one the run creates, or the operator's `--namespace`)
//! and carries the run's labels, so `gc` reads it with the same selector as the run's
//! objects.
//!
//! Time: `renewTime` is written with the holder's clock and judged with `gc`'s, as
//! Kubernetes' own node Leases are; [`LEASE_SECONDS`] minus [`RENEW_EVERY`] is how far the
//! two clocks may disagree before a live run looks expired.

use crate::backend::kube::errors::{ClusterError, setup};
use crate::pod::identity::{LABEL_MANAGED, LABEL_RUN};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::time::Duration;

/// How long a Lease holds without renewal (`spec.leaseDurationSeconds`).
pub const LEASE_SECONDS: i32 = 60;
/// How often the holder renews it.
pub const RENEW_EVERY: Duration = Duration::from_secs(15);

/// Who holds a Lease: the run itself, or the `launch` that started it in the cluster (which
/// holds its own from before the run's Pod starts until it has removed what it created).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    Run,
    Launch,
}

impl Holder {
    fn word(self) -> &'static str {
        match self {
            Self::Run => "run",
            Self::Launch => "launch",
        }
    }
}

/// The Lease's name: `kandev-acceptance-<run|launch>-<run id>` (a DNS subdomain, as
/// `ValidateLease` requires of a Lease's name).
pub fn lease_name(run_id: &str, holder: Holder) -> String {
    format!("kandev-acceptance-{}-{run_id}", holder.word())
}

/// A Lease this process holds and renews until [`RunLease::release`] (or until the process
/// ends: a dropped holder stops renewing, and the Lease expires).
pub struct RunLease {
    api: Api<Lease>,
    pub name: String,
    pub namespace: String,
    renewer: tokio::task::JoinHandle<()>,
}

impl Drop for RunLease {
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

impl RunLease {
    /// Creates the Lease in `namespace` and starts renewing it.
    pub async fn take(
        admin: &Client,
        namespace: &str,
        run_id: &str,
        holder: Holder,
    ) -> Result<Self, ClusterError> {
        let api: Api<Lease> = Api::namespaced(admin.clone(), namespace);
        let name = lease_name(run_id, holder);
        let now = MicroTime(Timestamp::now());
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([
                    (LABEL_MANAGED.to_owned(), "true".to_owned()),
                    (LABEL_RUN.to_owned(), run_id.to_owned()),
                ])),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder_identity(holder)),
                lease_duration_seconds: Some(LEASE_SECONDS),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                ..Default::default()
            }),
        };
        api.create(&PostParams::default(), &lease)
            .await
            .map_err(setup(format!(
                "create the run's lease {name} in namespace {namespace} (gc spares a run while it holds it; your identity needs create, patch and delete on leases.coordination.k8s.io there)"
            )))?;
        let renewer = tokio::spawn(renew(api.clone(), name.clone()));
        Ok(Self {
            api,
            name,
            namespace: namespace.to_owned(),
            renewer,
        })
    }

    /// Stops renewing and gives the Lease up without deleting it, as client-go's leader
    /// election releases one (`holderIdentity` emptied): the run is over but left what it
    /// made (`--keep`, an abort), and `gc` sees a released Lease, not a run whose namespace is
    /// too young to hold one yet.
    pub async fn give_up(self) -> Result<(), String> {
        self.renewer.abort();
        let patch = serde_json::json!({"spec": {"holderIdentity": "", "renewTime": MicroTime(Timestamp::now())}});
        match self
            .api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(crate::error_chain(&e)),
        }
    }

    /// Stops renewing and deletes the Lease (absent is fine): the run is over and removed
    /// what it created.
    pub async fn release(self) -> Result<(), String> {
        self.renewer.abort();
        match self.api.delete(&self.name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(e) => Err(crate::error_chain(&e)),
        }
    }
}

/// `<host>/<pid>`: which process holds the Lease (shown when `gc` spares the run).
fn holder_identity(holder: Holder) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "unknown-host".into());
    format!(
        "kandev-acceptance {} on {host}, pid {}",
        holder.word(),
        std::process::id()
    )
}

/// Renews the Lease every [`RENEW_EVERY`] until aborted; a failure is logged and tried again
/// at the next tick, a Lease removed by someone else (`gc --force`) ends the renewal.
async fn renew(api: Api<Lease>, name: String) {
    loop {
        tokio::time::sleep(RENEW_EVERY).await;
        let patch = serde_json::json!({"spec": {"renewTime": MicroTime(Timestamp::now())}});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {
                tracing::warn!(
                    lease = name,
                    "the run's lease is gone (removed by `gc --force`?): gc no longer sees this run as alive"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(lease = name, error = %crate::error_chain(&e), "renew the run's lease")
            }
        }
    }
}

/// What a Lease says about its run at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    pub run: String,
    pub live: bool,
    /// `lease L in N, held by H, renewed 5 s ago (holds 60 s)`.
    pub evidence: String,
}

/// Judges one Lease: live while it has a holder and `now` is before `renewTime +
/// leaseDurationSeconds`. A Lease without a run label is not the harness's (None); one
/// given up (no holder) or without a renewal time or duration cannot be live.
pub fn judge(lease: &Lease, now: Timestamp) -> Option<Judged> {
    let run = lease.metadata.labels.as_ref()?.get(LABEL_RUN)?.clone();
    let name = lease.metadata.name.clone().unwrap_or_default();
    let namespace = lease.metadata.namespace.clone().unwrap_or_default();
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.unwrap_or_default();
    if holder.is_empty() {
        return Some(Judged {
            run,
            live: false,
            evidence: format!("lease {name} in {namespace}, given up by its run"),
        });
    }
    let (live, when) = match (spec.renew_time, spec.lease_duration_seconds) {
        (Some(MicroTime(renewed)), Some(seconds)) => {
            let ago = now.as_second() - renewed.as_second();
            (
                ago < i64::from(seconds),
                format!("renewed {ago} s ago, holds {seconds} s"),
            )
        }
        _ => (false, "never renewed".to_owned()),
    };
    Some(Judged {
        run,
        live,
        evidence: format!("lease {name} in {namespace}, held by {holder}, {when}"),
    })
}

/// Every harness Lease in `namespace`, judged at `now`; an unreadable list is an error (a
/// run is never judged dead on evidence `gc` did not see).
pub async fn leases_in(
    admin: &Client,
    namespace: &str,
    now: Timestamp,
) -> Result<Vec<(String, Judged)>, ClusterError> {
    let api: Api<Lease> = Api::namespaced(admin.clone(), namespace);
    let listed = api
        .list(&ListParams::default().labels(&format!("{LABEL_MANAGED}=true")))
        .await
        .map_err(|e| ClusterError::Setup {
            what: format!(
                "list the runs' leases in namespace {namespace} (gc spares runs that hold one)\n  fix: grant your identity list on leases.coordination.k8s.io there; or, if you know no run there is alive, pass --force"
            ),
            source: e.into(),
        })?;
    Ok(listed
        .items
        .iter()
        .filter_map(|lease| Some((lease.metadata.name.clone()?, judge(lease, now)?)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(renewed: Option<i64>, seconds: Option<i32>) -> Lease {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "kandev-acceptance-run-r1", "namespace": "ns",
                "labels": {LABEL_MANAGED: "true", LABEL_RUN: "r1"}},
            "spec": {"holderIdentity": "h", "leaseDurationSeconds": seconds,
                "renewTime": renewed.map(|s| MicroTime(Timestamp::from_second(s).unwrap_or_default()))},
        }))
        .unwrap_or_else(|e| unreachable!("{e}"))
    }

    #[test]
    fn a_lease_is_live_until_its_duration_after_the_last_renewal() {
        let now = Timestamp::from_second(1_000_000).unwrap_or_default();
        let live =
            judge(&lease(Some(1_000_000 - 59), Some(60)), now).unwrap_or_else(|| unreachable!());
        assert!(live.live, "{live:?}");
        assert_eq!(live.run, "r1");
        assert!(
            live.evidence.contains("renewed 59 s ago"),
            "{}",
            live.evidence
        );
        let expired =
            judge(&lease(Some(1_000_000 - 60), Some(60)), now).unwrap_or_else(|| unreachable!());
        assert!(!expired.live);
        assert!(!judge(&lease(None, Some(60)), now).is_some_and(|j| j.live));
        assert!(!judge(&lease(Some(1_000_000), None), now).is_some_and(|j| j.live));
        let mut given_up = lease(Some(1_000_000), Some(60));
        if let Some(spec) = given_up.spec.as_mut() {
            spec.holder_identity = Some(String::new());
        }
        assert!(!judge(&given_up, now).is_some_and(|j| j.live), "given up");
        let mut foreign = lease(Some(1_000_000), Some(60));
        foreign.metadata.labels = None;
        assert!(judge(&foreign, now).is_none(), "not the harness's lease");
    }

    #[test]
    fn lease_names_are_dns_subdomains() {
        let name = lease_name("20261203t000000-abc123", Holder::Launch);
        assert_eq!(name, "kandev-acceptance-launch-20261203t000000-abc123");
        assert!(name.len() <= 253);
    }
}
