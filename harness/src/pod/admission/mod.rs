//! Admission comparison: the Pod an API server admitted against the one Kandev asked for, as
//! Kandev's `ValidateAdmittedPod` does (kandev-contract.md §5). Mutating admission may add
//! unrelated labels, annotations and compatible fields; it may not touch what Kandev owns:
//! identity, owned labels and `kandev.ai/*` annotations (the create nonce), Pod invariants,
//! the main container's command, port and reserved mounts (each compared field by field),
//! reserved volumes, and the workspace grants, which are compared by container name in both
//! directions. No other container (companion, init, ephemeral) may hold a reserved volume, a
//! mount under a reserved root (the exact grant aside) or the agentctl port, and no container
//! a reserved volume device, whatever was requested.
//!
//! Only documented neutral defaults are normalised (`readOnly: false` equals an absent
//! `readOnly`, an empty `subPath` an absent one, as Kandev's Go types cannot tell them
//! apart; an absent port protocol is TCP, the API server's default). A mismatch means the
//! created Pod is deleted by its exact UID and the launch fails naming what changed.
//!
//! Here: the entry ([`compare`]) and the metadata it compares itself; `invariants` (Pod
//! invariants, platform node affinity), `main_container` (its command, port and reserved
//! mounts), `workspace` (reserved volumes, grants by container name), `reserved_access` (what
//! no other container may gain), `fields` (how a mount, a port or a value is compared and said).

mod fields;
mod invariants;
mod main_container;
mod reserved_access;
mod workspace;

pub use fields::value_or_unset;

use crate::pod::template::is_owned_label;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use std::collections::BTreeMap;

/// One thing admission changed that Kandev owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionMismatch {
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for AdmissionMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The owned entries: labels Kandev owns, or (annotations) every `kandev.ai/*` key.
fn owned(map: Option<&BTreeMap<String, String>>, labels: bool) -> BTreeMap<&str, &str> {
    map.into_iter()
        .flatten()
        .filter(|(k, _)| {
            if labels {
                is_owned_label(k)
            } else {
                k.starts_with("kandev.ai/")
            }
        })
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

/// Compares the admitted Pod with the desired one; empty means admission kept Kandev's terms.
pub fn compare(desired: &Pod, admitted: &Pod, main_container: &str) -> Vec<AdmissionMismatch> {
    let mut out = Vec::new();
    let mut push = |path: &str, message: String| {
        out.push(AdmissionMismatch {
            path: path.to_owned(),
            message,
        })
    };

    let (dm, am) = (&desired.metadata, &admitted.metadata);
    if dm.name != am.name || dm.namespace != am.namespace {
        push(
            "metadata.name",
            format!(
                "changed from {}/{} to {}/{}",
                value_or_unset(&dm.namespace),
                value_or_unset(&dm.name),
                value_or_unset(&am.namespace),
                value_or_unset(&am.name)
            ),
        );
    }
    if am.owner_references.as_ref().is_some_and(|o| !o.is_empty()) {
        push(
            "metadata.ownerReferences",
            "admission added owner references".into(),
        );
    }
    if am.finalizers.as_ref().is_some_and(|f| !f.is_empty()) {
        push("metadata.finalizers", "admission added finalizers".into());
    }
    for (what, labels, d, a) in [
        (
            "metadata.labels",
            true,
            dm.labels.as_ref(),
            am.labels.as_ref(),
        ),
        (
            "metadata.annotations",
            false,
            dm.annotations.as_ref(),
            am.annotations.as_ref(),
        ),
    ] {
        let (d, a) = (owned(d, labels), owned(a, labels));
        for (k, v) in &d {
            match a.get(k) {
                None => push(&format!("{what}[{k}]"), "an owned key was removed".into()),
                Some(found) if found != v => push(
                    &format!("{what}[{k}]"),
                    format!("changed from {v:?} to {found:?}"),
                ),
                Some(_) => {}
            }
        }
        for k in a.keys().filter(|k| !d.contains_key(*k)) {
            push(&format!("{what}[{k}]"), "an owned key was added".into());
        }
    }

    let (ds, asp) = (
        desired.spec.clone().unwrap_or_default(),
        admitted.spec.clone().unwrap_or_default(),
    );
    compare_spec(
        &ds,
        &asp,
        bound_by_scheduler(admitted),
        main_container,
        &mut push,
    );
    out
}

/// Whether the Pod as read carries the scheduler's binding: `PodScheduled=True`, which the
/// Binding subresource writes together with `spec.nodeName` (kubernetes
/// `pkg/registry/core/pod/storage/storage.go`, `assignPod`: `setPodNodeAndMetadata`, then
/// `UpdatePodCondition(... PodScheduled, ConditionTrue)`). A create's own answer never
/// carries it (`podStrategy.PrepareForCreate` resets the status to `Pending`, no
/// conditions), so a `nodeName` in that answer is admission's; only a Pod read back after
/// a lost create (the run's retries) can have been bound already. Limit: a Pod admission
/// pinned and its kubelet already reported is read back with the same condition.
fn bound_by_scheduler(admitted: &Pod) -> bool {
    admitted
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "PodScheduled" && c.status == "True")
        })
}

/// Every rule on the spec, in the order their findings are reported.
fn compare_spec(
    d: &PodSpec,
    a: &PodSpec,
    bound_by_scheduler: bool,
    main_container: &str,
    push: &mut impl FnMut(&str, String),
) {
    invariants::compare_invariants(d, a, bound_by_scheduler, push);
    workspace::compare_reserved_volumes(d, a, push);
    main_container::compare_main_container(d, a, main_container, push);
    reserved_access::compare_env(d, a, push);
    workspace::compare_grants(d, a, main_container, push);
    reserved_access::compare_reserved_access(a, main_container, push);
}

/// An admitted object that differs from the requested one where Kandev owns it.
#[derive(Debug, thiserror::Error)]
#[error(
    "admission changed what Kandev owns on {what} {name} (deleted by its UID {uid}): {}",
    .mismatches.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
)]
pub struct AdmissionMutated {
    pub what: &'static str,
    pub name: String,
    pub uid: String,
    pub mismatches: Vec<AdmissionMismatch>,
}

#[cfg(test)]
mod tests;
