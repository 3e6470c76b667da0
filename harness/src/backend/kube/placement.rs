//! Which nodes a task Pod can be placed on, judged as the scheduler's filters judge them, so
//! that `--jobs` (`capacity`) and the platform (`platform`) are read from those nodes only,
//! not from nodes the Pod would never run on (a control plane, a GPU pool tainted for its own
//! workloads, nodes the template's `nodeSelector` leaves out):
//!
//! - **NodeUnschedulable**: a cordoned node, unless the Pod tolerates
//!   `node.kubernetes.io/unschedulable:NoSchedule`
//!   (`pkg/scheduler/framework/plugins/nodeunschedulable`, `Filter`).
//! - **TaintToleration**: a `NoSchedule` or `NoExecute` taint no toleration of the Pod
//!   tolerates (`pkg/scheduler/framework/plugins/tainttoleration`, `Filter`:
//!   `FindMatchingUntoleratedTaint`); `PreferNoSchedule` only scores.
//! - **NodeAffinity**: the Pod's `nodeSelector` and its required node affinity
//!   (`k8s.io/component-helpers/scheduling/corev1/nodeaffinity`, `GetRequiredNodeAffinity`
//!   and `RequiredNodeAffinity.Match`).
//!
//! The Pod is the template's, with what Kandev's composition sets: `kubernetes.io/os: linux`
//! and, when the run's architecture is known, `kubernetes.io/arch` (`pod::compose`).

use crate::pod::compose::Arch;
use k8s_openapi::api::core::v1::{
    Node, NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint, Toleration,
};
use std::collections::BTreeMap;

/// Whether `toleration` tolerates `taint` (k8s.io/api `core/v1/toleration.go`,
/// `ToleratesTaint`): an empty effect or key matches any; `Exists` any value, `Equal` (or no
/// operator) the same value; `Gt`/`Lt` (alpha, `TaintTolerationComparisonOperators`) when
/// the taint's integer value is greater or less than the toleration's.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or_default();
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    let value = toleration.value.as_deref().unwrap_or_default();
    let taint_value = taint.value.as_deref().unwrap_or_default();
    let numbers = || Some((value.parse::<i64>().ok()?, taint_value.parse::<i64>().ok()?));
    match toleration.operator.as_deref().unwrap_or_default() {
        "" | "Equal" => value == taint_value,
        "Exists" => true,
        "Gt" => numbers().is_some_and(|(t, n)| n > t),
        "Lt" => numbers().is_some_and(|(t, n)| n < t),
        _ => false,
    }
}

/// One requirement of a node selector term on `labels` (k8s.io/apimachinery
/// `labels/selector.go`, `Requirement.Matches`, as `nodeSelectorRequirementsAsSelector`
/// builds it).
fn requirement_matches(r: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let found = labels.get(&r.key);
    let compare = |greater: bool| {
        let (Some(found), [bound]) = (found, values) else {
            return false;
        };
        match (found.parse::<i64>(), bound.parse::<i64>()) {
            (Ok(f), Ok(b)) => (f > b) == greater && f != b,
            _ => false,
        }
    };
    match r.operator.as_str() {
        "In" => found.is_some_and(|v| values.contains(v)),
        "NotIn" => found.is_none_or(|v| !values.contains(v)),
        "Exists" => found.is_some(),
        "DoesNotExist" => found.is_none(),
        "Gt" => compare(true),
        "Lt" => compare(false),
        _ => false,
    }
}

/// A term matches when all its requirements do; a term with none matches no node
/// (`nodeaffinity.go`: "nil or empty term selects no objects"). `matchFields` knows only
/// `metadata.name`.
fn term_matches(term: &NodeSelectorTerm, name: &str, labels: &BTreeMap<String, String>) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    let by_name = BTreeMap::from([("metadata.name".to_owned(), name.to_owned())]);
    expressions.iter().all(|r| requirement_matches(r, labels))
        && fields.iter().all(|r| {
            r.key == "metadata.name"
                && matches!(r.operator.as_str(), "In" | "NotIn")
                && requirement_matches(r, &by_name)
        })
}

/// Why the task Pod of `template` cannot be placed on `node` (None: it can), with the run's
/// `arch` pinned when known (else the template's own `kubernetes.io/arch`, if any).
pub fn excluded(node: &Node, template: &PodSpec, arch: Option<Arch>) -> Option<String> {
    let spec = node.spec.clone().unwrap_or_default();
    let tolerations = template.tolerations.as_deref().unwrap_or_default();
    let tolerated = |taint: &Taint| tolerations.iter().any(|t| tolerates(t, taint));
    if spec.unschedulable == Some(true) {
        let cordon = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        if !tolerated(&cordon) {
            return Some("cordoned (spec.unschedulable)".into());
        }
    }
    if let Some(taint) = spec
        .taints
        .iter()
        .flatten()
        .find(|t| (t.effect == "NoSchedule" || t.effect == "NoExecute") && !tolerated(t))
    {
        let value = taint
            .value
            .as_deref()
            .filter(|v| !v.is_empty())
            .map(|v| format!("={v}"))
            .unwrap_or_default();
        return Some(format!(
            "taint {}{value}:{} not tolerated by the template",
            taint.key, taint.effect
        ));
    }
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let mut selector = template.node_selector.clone().unwrap_or_default();
    selector.insert("kubernetes.io/os".into(), "linux".into());
    if let Some(arch) = arch {
        selector.insert("kubernetes.io/arch".into(), arch.as_str().into());
    }
    if let Some((key, want)) = selector
        .iter()
        .find(|(k, v)| labels.get(k.as_str()) != Some(v))
    {
        let has = labels
            .get(key)
            .map_or("no such label".to_owned(), |v| v.clone());
        return Some(format!("nodeSelector {key}={want} does not match ({has})"));
    }
    let required = template
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    if let Some(required) = required {
        let name = node.metadata.name.clone().unwrap_or_default();
        if !required
            .node_selector_terms
            .iter()
            .any(|t| term_matches(t, &name, &labels))
        {
            return Some("the template's required node affinity does not match".into());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn node(labels: Value, spec: Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n1", "labels": labels}, "spec": spec}))
            .unwrap_or_default()
    }

    fn template(spec: Value) -> PodSpec {
        let mut value = json!({"containers": []});
        if let (Some(v), Some(extra)) = (value.as_object_mut(), spec.as_object()) {
            v.extend(extra.clone());
        }
        serde_json::from_value(value).unwrap_or_default()
    }

    fn linux(arch: &str, extra: Value) -> Value {
        let mut labels = json!({"kubernetes.io/os": "linux", "kubernetes.io/arch": arch});
        if let (Some(l), Some(extra)) = (labels.as_object_mut(), extra.as_object()) {
            l.extend(extra.clone());
        }
        labels
    }

    #[test]
    fn taints_count_only_when_no_toleration_of_the_template_tolerates_them() {
        let gpu = node(
            linux("amd64", json!({})),
            json!({"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}),
        );
        let none = template(json!({}));
        assert_eq!(
            excluded(&gpu, &none, Some(Arch::Amd64)).as_deref(),
            Some("taint nvidia.com/gpu=present:NoSchedule not tolerated by the template")
        );
        for toleration in [
            json!({"key": "nvidia.com/gpu", "operator": "Exists"}),
            json!({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}),
            json!({"operator": "Exists"}),
        ] {
            let tolerant = template(json!({"tolerations": [toleration]}));
            assert_eq!(
                excluded(&gpu, &tolerant, Some(Arch::Amd64)),
                None,
                "{toleration}"
            );
        }
        for toleration in [
            json!({"key": "nvidia.com/gpu", "value": "absent"}),
            json!({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}),
            json!({"key": "other", "operator": "Exists"}),
        ] {
            let not = template(json!({"tolerations": [toleration]}));
            assert!(
                excluded(&gpu, &not, Some(Arch::Amd64)).is_some(),
                "{toleration}"
            );
        }
        // PreferNoSchedule only scores; NoExecute filters as NoSchedule does.
        let soft = node(
            linux("amd64", json!({})),
            json!({"taints": [{"key": "k", "effect": "PreferNoSchedule"}]}),
        );
        assert_eq!(excluded(&soft, &none, Some(Arch::Amd64)), None);
        let evicting = node(
            linux("amd64", json!({})),
            json!({"taints": [{"key": "k", "effect": "NoExecute"}]}),
        );
        assert!(excluded(&evicting, &none, Some(Arch::Amd64)).is_some());
        // Comparison operators (alpha): the taint's value greater than the toleration's.
        let sla = Taint {
            key: "sla".into(),
            value: Some("950".into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let gt = |v: &str| Toleration {
            key: Some("sla".into()),
            operator: Some("Gt".into()),
            value: Some(v.into()),
            ..Default::default()
        };
        assert!(tolerates(&gt("750"), &sla));
        assert!(!tolerates(&gt("990"), &sla));
    }

    #[test]
    fn a_cordoned_node_counts_only_for_a_template_tolerating_the_cordon() {
        let cordoned = node(linux("amd64", json!({})), json!({"unschedulable": true}));
        assert!(excluded(&cordoned, &template(json!({})), Some(Arch::Amd64)).is_some());
        let tolerant = template(json!({"tolerations": [
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}));
        assert_eq!(excluded(&cordoned, &tolerant, Some(Arch::Amd64)), None);
    }

    #[test]
    fn the_templates_node_selector_and_required_affinity_exclude_nodes() {
        let pool = |name: &str| linux("amd64", json!({"pool": name}));
        let agents = node(pool("agents"), json!({}));
        let batch = node(pool("batch"), json!({}));
        let selecting = template(json!({"nodeSelector": {"pool": "agents"}}));
        assert_eq!(excluded(&agents, &selecting, Some(Arch::Amd64)), None);
        assert_eq!(
            excluded(&batch, &selecting, Some(Arch::Amd64)).as_deref(),
            Some("nodeSelector pool=agents does not match (batch)")
        );
        // The composed Pod is pinned to linux and the run's architecture.
        let windows = node(
            json!({"kubernetes.io/os": "windows", "kubernetes.io/arch": "amd64"}),
            json!({}),
        );
        assert!(excluded(&windows, &template(json!({})), Some(Arch::Amd64)).is_some());
        assert!(excluded(&agents, &template(json!({})), Some(Arch::Arm64)).is_some());
        // Unknown arch: the template's own pin, if any, decides.
        let arm = template(json!({"nodeSelector": {"kubernetes.io/arch": "arm64"}}));
        assert!(excluded(&agents, &arm, None).is_some());
        assert_eq!(excluded(&agents, &template(json!({})), None), None);
        let affinity = |expressions: Value| {
            template(
                json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]}}}}),
            )
        };
        let not_batch =
            affinity(json!([{"key": "pool", "operator": "NotIn", "values": ["batch"]}]));
        assert_eq!(excluded(&agents, &not_batch, Some(Arch::Amd64)), None);
        assert!(excluded(&batch, &not_batch, Some(Arch::Amd64)).is_some());
        let labelled = affinity(json!([{"key": "gpu", "operator": "Exists"}]));
        assert!(excluded(&agents, &labelled, Some(Arch::Amd64)).is_some());
        let by_name = template(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}}),
        );
        assert_eq!(excluded(&agents, &by_name, Some(Arch::Amd64)), None);
        let empty_term = template(
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{}]}}}}),
        );
        assert!(excluded(&agents, &empty_term, Some(Arch::Amd64)).is_some());
    }
}
