//! Pod invariants as admission may not change them: restart policy, node name, OS, token
//! automount, platform node selectors and platform node affinity.

use super::fields::value_or_unset;
use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, PodSpec};
use std::collections::BTreeMap;

/// Pod invariants: restart policy, node name, OS, token automount, platform selectors and
/// platform node affinity.
/// `bound_by_scheduler`: the admitted Pod as read carries the scheduler's binding (see
/// [`super::bound_by_scheduler`]), so a `nodeName` where none was asked is the binding's.
pub(super) fn compare_invariants(
    d: &PodSpec,
    a: &PodSpec,
    bound_by_scheduler: bool,
    push: &mut impl FnMut(&str, String),
) {
    if d.restart_policy != a.restart_policy {
        push(
            "spec.restartPolicy",
            format!(
                "changed from {} to {}",
                value_or_unset(&d.restart_policy),
                value_or_unset(&a.restart_policy)
            ),
        );
    }
    let bound_here = bound_by_scheduler && d.node_name.is_none() && a.node_name.is_some();
    if d.node_name != a.node_name && !bound_here {
        push(
            "spec.nodeName",
            format!(
                "changed from {} to {}",
                value_or_unset(&d.node_name),
                value_or_unset(&a.node_name)
            ),
        );
    }
    if d.os != a.os {
        push("spec.os", "changed".into());
    }
    if d.automount_service_account_token != a.automount_service_account_token {
        push(
            "spec.automountServiceAccountToken",
            format!(
                "changed from {} to {}",
                value_or_unset(&d.automount_service_account_token),
                value_or_unset(&a.automount_service_account_token)
            ),
        );
    }
    for key in PLATFORM_KEYS {
        let get = |s: &PodSpec| s.node_selector.as_ref().and_then(|n| n.get(key)).cloned();
        if get(d) != get(a) {
            push(
                &format!("spec.nodeSelector[{key}]"),
                format!(
                    "changed from {} to {}",
                    value_or_unset(&get(d)),
                    value_or_unset(&get(a))
                ),
            );
        }
    }
    compare_platform_affinity(d, a, push);
}

/// The node labels that carry the profile's platform.
const PLATFORM_KEYS: [&str; 2] = ["kubernetes.io/os", "kubernetes.io/arch"];

/// One node-affinity requirement on a platform key, where it sits.
struct PlatformRequirement<'a> {
    requirement: &'a NodeSelectorRequirement,
    path: String,
    preferred: bool,
    field: bool,
}

impl PlatformRequirement<'_> {
    /// Compared as upstream's `reflect.DeepEqual` (absent values equal an empty list).
    fn same(&self, other: &PlatformRequirement<'_>) -> bool {
        let values = |r: &NodeSelectorRequirement| r.values.clone().unwrap_or_default();
        self.preferred == other.preferred
            && self.field == other.field
            && self.requirement.key == other.requirement.key
            && self.requirement.operator == other.requirement.operator
            && values(self.requirement) == values(other.requirement)
    }

    /// Whether the Pod's node selector already satisfies it (upstream's
    /// `platformRequirementAllows`): only match expressions `In`, `NotIn`, `Exists`.
    fn allowed_by(&self, selector: Option<&BTreeMap<String, String>>) -> bool {
        let Some(want) = selector
            .and_then(|s| s.get(&self.requirement.key))
            .filter(|v| !v.is_empty())
        else {
            return false;
        };
        let values = self.requirement.values.iter().flatten();
        !self.field
            && match self.requirement.operator.as_str() {
                "In" => values.clone().any(|v| v == want),
                "NotIn" => !values.clone().any(|v| v == want),
                "Exists" => true,
                _ => false,
            }
    }

    fn describe(&self) -> String {
        format!(
            "{} {} {:?}",
            self.requirement.key,
            self.requirement.operator,
            self.requirement.values.clone().unwrap_or_default()
        )
    }
}

/// The platform requirements of a Pod's node affinity, required and preferred terms, match
/// expressions and match fields (upstream's `platformNodeRequirements`).
fn platform_requirements(spec: &PodSpec) -> Vec<PlatformRequirement<'_>> {
    let mut out = Vec::new();
    let Some(affinity) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
    else {
        return out;
    };
    fn add<'a>(
        out: &mut Vec<PlatformRequirement<'a>>,
        term: &'a NodeSelectorTerm,
        base: &str,
        preferred: bool,
    ) {
        for (field, list, requirements) in [
            (false, "matchExpressions", term.match_expressions.as_ref()),
            (true, "matchFields", term.match_fields.as_ref()),
        ] {
            for (i, r) in requirements.into_iter().flatten().enumerate() {
                if PLATFORM_KEYS.contains(&r.key.as_str()) {
                    out.push(PlatformRequirement {
                        requirement: r,
                        path: format!("{base}.{list}[{i}]"),
                        preferred,
                        field,
                    });
                }
            }
        }
    }
    let root = "spec.affinity.nodeAffinity";
    if let Some(required) = &affinity.required_during_scheduling_ignored_during_execution {
        for (t, term) in required.node_selector_terms.iter().enumerate() {
            add(
                &mut out,
                term,
                &format!(
                    "{root}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{t}]"
                ),
                false,
            );
        }
    }
    for (t, term) in affinity
        .preferred_during_scheduling_ignored_during_execution
        .iter()
        .flatten()
        .enumerate()
    {
        add(
            &mut out,
            &term.preference,
            &format!("{root}.preferredDuringSchedulingIgnoredDuringExecution[{t}].preference"),
            true,
        );
    }
    out
}

/// Platform node affinity (upstream's `validateAdmittedNodeAffinity`): each requested
/// requirement stays exactly as it was; one admission added must be a match expression the
/// requested node selector satisfies (so it cannot move the Pod to another platform).
fn compare_platform_affinity(d: &PodSpec, a: &PodSpec, push: &mut impl FnMut(&str, String)) {
    let want = platform_requirements(d);
    let mut matched = vec![false; want.len()];
    for got in platform_requirements(a) {
        let found = want
            .iter()
            .enumerate()
            .find(|(i, w)| !matched[*i] && w.same(&got))
            .map(|(i, _)| i);
        if let Some(i) = found {
            matched[i] = true;
        } else if !got.allowed_by(d.node_selector.as_ref()) {
            push(
                &got.path,
                format!(
                    "admission added platform node affinity {} that the requested node selector does not satisfy",
                    got.describe()
                ),
            );
        }
    }
    for (w, _) in want.iter().zip(&matched).filter(|(_, m)| !**m) {
        push(
            &w.path,
            format!(
                "the requested platform node affinity {} was removed or changed",
                w.describe()
            ),
        );
    }
}
