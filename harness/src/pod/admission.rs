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

use crate::pod::template::{
    AGENTCTL_PORT, AGENTCTL_PORT_NAME, RESERVED_ROOTS, RESERVED_VOLUMES, clean_path,
    is_owned_label, is_workspace_grant,
};
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, NodeSelectorRequirement, NodeSelectorTerm, Pod, PodSpec, Volume,
    VolumeDevice, VolumeMount,
};
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

/// A grant as compared: its access mode (`readOnly` absent = false, a neutral default).
fn grant_modes(container: &Container) -> Vec<bool> {
    container
        .volume_mounts
        .iter()
        .flatten()
        .filter(|m| is_workspace_grant(m))
        .map(|m| m.read_only.unwrap_or(false))
        .collect()
}

fn touches_workspace(mounts: Option<&Vec<VolumeMount>>) -> bool {
    mounts
        .into_iter()
        .flatten()
        .any(|m| m.name == "kandev-workspace")
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
    compare_spec(&ds, &asp, main_container, &mut push);
    out
}

fn compare_spec(
    d: &PodSpec,
    a: &PodSpec,
    main_container: &str,
    push: &mut impl FnMut(&str, String),
) {
    compare_invariants(d, a, push);
    compare_reserved_volumes(d, a, push);
    compare_main_container(d, a, main_container, push);
    compare_env(d, a, push);
    compare_grants(d, a, main_container, push);
    compare_reserved_access(a, main_container, push);
}

/// A field's value as a finding says it: the value, or `(unset)`.
pub fn value_or_unset<T: std::fmt::Display>(value: &Option<T>) -> String {
    value
        .as_ref()
        .map_or_else(|| "(unset)".to_owned(), ToString::to_string)
}

/// Pod invariants: restart policy, node name, OS, token automount, platform selectors and
/// platform node affinity.
fn compare_invariants(d: &PodSpec, a: &PodSpec, push: &mut impl FnMut(&str, String)) {
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
    if d.node_name != a.node_name {
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

/// Reserved volumes: exactly as desired, exactly once; no other volume aliases the claim.
fn compare_reserved_volumes(d: &PodSpec, a: &PodSpec, push: &mut impl FnMut(&str, String)) {
    let claim = d
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "kandev-workspace")
        .and_then(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone());
    for name in RESERVED_VOLUMES {
        let want: Vec<&Volume> = d
            .volumes
            .iter()
            .flatten()
            .filter(|v| v.name == name)
            .collect();
        let got: Vec<&Volume> = a
            .volumes
            .iter()
            .flatten()
            .filter(|v| v.name == name)
            .collect();
        if got.len() != 1 || want.first() != got.first() {
            push(
                &format!("spec.volumes[{name}]"),
                format!(
                    "the reserved volume is not exactly as requested ({} found)",
                    got.len()
                ),
            );
        }
    }
    if let Some(claim) = &claim {
        for v in a
            .volumes
            .iter()
            .flatten()
            .filter(|v| v.name != "kandev-workspace")
        {
            if v.persistent_volume_claim
                .as_ref()
                .is_some_and(|c| &c.claim_name == claim)
            {
                push(
                    &format!("spec.volumes[{}]", v.name),
                    "aliases the workspace claim".into(),
                );
            }
        }
    }
}

/// Container names stay unique; the main container keeps Kandev's command, port and mounts.
fn compare_main_container(
    d: &PodSpec,
    a: &PodSpec,
    main_container: &str,
    push: &mut impl FnMut(&str, String),
) {
    let mut seen = BTreeMap::<&str, usize>::new();
    for c in a
        .containers
        .iter()
        .chain(a.init_containers.iter().flatten())
    {
        *seen.entry(&c.name).or_default() += 1;
    }
    for (name, count) in seen.into_iter().filter(|(_, n)| *n > 1) {
        push(
            "spec.containers",
            format!("container name {name} appears {count} times"),
        );
    }
    let dmain = d.containers.iter().find(|c| c.name == main_container);
    let amain = a.containers.iter().find(|c| c.name == main_container);
    match (dmain, amain) {
        (Some(dc), Some(ac)) => {
            if dc.command != ac.command || dc.args != ac.args || dc.working_dir != ac.working_dir {
                push(
                    &format!("spec.containers[{main_container}]"),
                    "command, args or workingDir changed".into(),
                );
            }
            compare_main_ports(dc, ac, main_container, push);
            compare_main_mounts(dc, ac, main_container, push);
        }
        _ => push(
            "spec.containers",
            format!("the main container {main_container} is missing"),
        ),
    }
}

/// A mount as compared: every field, with only the neutral defaults normalised (an absent
/// `readOnly` is `false`, an absent `subPath`/`subPathExpr` is empty, as in Kandev's Go types).
fn mount_key(m: &VolumeMount) -> impl Ord + '_ {
    (
        m.name.as_str(),
        m.mount_path.as_str(),
        m.read_only.unwrap_or(false),
        m.sub_path.as_deref().unwrap_or(""),
        m.sub_path_expr.as_deref().unwrap_or(""),
        m.mount_propagation.as_deref(),
        m.recursive_read_only.as_deref(),
    )
}

/// `name at path` and every field that is not a neutral default.
fn describe_mount(m: &VolumeMount) -> String {
    let mut text = format!("{} at {}", m.name, m.mount_path);
    if m.read_only == Some(true) {
        text.push_str(" readOnly");
    }
    for (field, value) in [
        ("subPath", m.sub_path.as_deref().filter(|v| !v.is_empty())),
        (
            "subPathExpr",
            m.sub_path_expr.as_deref().filter(|v| !v.is_empty()),
        ),
        ("mountPropagation", m.mount_propagation.as_deref()),
        ("recursiveReadOnly", m.recursive_read_only.as_deref()),
    ] {
        if let Some(value) = value {
            text.push_str(&format!(" {field}={value}"));
        }
    }
    text
}

fn describe_mounts(mounts: &[&VolumeMount]) -> String {
    if mounts.is_empty() {
        return "nothing".into();
    }
    mounts
        .iter()
        .map(|m| describe_mount(m))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether a path is at or below one of Kandev's reserved mount roots (cleaned first).
fn is_reserved_path(path: &str) -> bool {
    let cleaned = clean_path(path);
    RESERVED_ROOTS
        .iter()
        .any(|root| cleaned == *root || cleaned.starts_with(&format!("{root}/")))
}

/// The main container's reserved mounts, exactly as requested and exactly once each
/// (upstream counts them with `reflect.DeepEqual`): per reserved volume, the admitted
/// mounts of that volume must be the requested ones, field by field; any other mount under
/// a reserved root must have been requested as it is.
fn compare_main_mounts(
    dc: &Container,
    ac: &Container,
    main_container: &str,
    push: &mut impl FnMut(&str, String),
) {
    let of = |c: &'_ Container, name: &str| -> Vec<VolumeMount> {
        let mut mounts: Vec<VolumeMount> = c
            .volume_mounts
            .iter()
            .flatten()
            .filter(|m| m.name == name)
            .cloned()
            .collect();
        mounts.sort_by(|a, b| mount_key(a).cmp(&mount_key(b)));
        mounts
    };
    for name in RESERVED_VOLUMES {
        let (want, got) = (of(dc, name), of(ac, name));
        let same = want.len() == got.len()
            && want
                .iter()
                .zip(&got)
                .all(|(w, g)| mount_key(w) == mount_key(g));
        if !same {
            push(
                &format!("spec.containers[{main_container}].volumeMounts[{name}]"),
                format!(
                    "the reserved mount changed from {} to {}",
                    describe_mounts(&want.iter().collect::<Vec<_>>()),
                    describe_mounts(&got.iter().collect::<Vec<_>>())
                ),
            );
        }
    }
    for m in
        ac.volume_mounts.iter().flatten().filter(|m| {
            !RESERVED_VOLUMES.contains(&m.name.as_str()) && is_reserved_path(&m.mount_path)
        })
    {
        let requested = dc
            .volume_mounts
            .iter()
            .flatten()
            .any(|w| mount_key(w) == mount_key(m));
        if !requested {
            push(
                &format!("spec.containers[{main_container}].volumeMounts[{}]", m.name),
                format!(
                    "admission added a mount under a path reserved for Kandev: {}",
                    describe_mount(m)
                ),
            );
        }
    }
}

fn is_agentctl_port(p: &ContainerPort) -> bool {
    p.container_port == AGENTCTL_PORT || p.name.as_deref() == Some(AGENTCTL_PORT_NAME)
}

/// A port as compared: every field, an absent protocol being TCP (the API server's default).
fn port_key(p: &ContainerPort) -> impl Ord + '_ {
    (
        p.container_port,
        p.name.as_deref(),
        p.protocol.as_deref().unwrap_or("TCP"),
        p.host_port,
        p.host_ip.as_deref(),
    )
}

fn describe_port(p: &ContainerPort) -> String {
    let mut text = format!(
        "{}/{}",
        p.container_port,
        p.protocol.as_deref().unwrap_or("TCP")
    );
    if let Some(name) = &p.name {
        text.push_str(&format!(" named {name}"));
    }
    if let Some(host) = p.host_port {
        text.push_str(&format!(" hostPort {host}"));
    }
    if let Some(ip) = &p.host_ip {
        text.push_str(&format!(" hostIP {ip}"));
    }
    text
}

/// The main container's agentctl port: exactly as requested, exactly once (upstream counts
/// ports on 8765 or named `kandev-agentctl` with `reflect.DeepEqual`).
fn compare_main_ports(
    dc: &Container,
    ac: &Container,
    main_container: &str,
    push: &mut impl FnMut(&str, String),
) {
    let of = |c: &'_ Container| -> Vec<ContainerPort> {
        let mut ports: Vec<ContainerPort> = c
            .ports
            .iter()
            .flatten()
            .filter(|p| is_agentctl_port(p))
            .cloned()
            .collect();
        ports.sort_by(|a, b| port_key(a).cmp(&port_key(b)));
        ports
    };
    let (want, got) = (of(dc), of(ac));
    let same = want.len() == got.len()
        && want
            .iter()
            .zip(&got)
            .all(|(w, g)| port_key(w) == port_key(g));
    if !same {
        let list = |ports: &[ContainerPort]| {
            if ports.is_empty() {
                "nothing".to_owned()
            } else {
                ports
                    .iter()
                    .map(describe_port)
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        push(
            &format!("spec.containers[{main_container}].ports[{AGENTCTL_PORT}]"),
            format!(
                "the agentctl port changed from {} to {}",
                list(&want),
                list(&got)
            ),
        );
    }
}

/// A companion's mounts with its workspace grant taken out, as upstream's
/// `companionWithoutWorkspaceGrant`: at most one `kandev-workspace` mount, of exactly the
/// grant's shape; with a grant, no other mount at `/`, at `/workspace` or below it. Returns
/// the remaining mounts (which the reserved-access rules then see) and each mount that broke
/// the grant's rules, with why.
fn companion_mounts_without_grant(
    c: &Container,
) -> (Vec<&VolumeMount>, Vec<(&VolumeMount, &'static str)>) {
    let (mut rest, mut broken) = (Vec::new(), Vec::new());
    let mut grant = None;
    for m in c.volume_mounts.iter().flatten() {
        if m.name != "kandev-workspace" {
            rest.push(m);
        } else if grant.is_some() || !is_workspace_grant(m) {
            broken.push((
                m,
                "workspace grant must be one direct RO/RW mount at /workspace",
            ));
        } else {
            grant = Some(m);
        }
    }
    if grant.is_some() {
        rest.retain(|m| {
            let path = clean_path(&m.mount_path);
            let overlaps = path == "/"
                || path == "/workspace"
                || path.starts_with("/workspace/")
                || "/workspace".starts_with(&format!("{path}/"));
            if overlaps {
                broken.push((m, "workspace grant overlaps another mount"));
            }
            !overlaps
        });
    }
    (rest, broken)
}

/// One container as the reserved-access rules see it.
struct Holder<'a> {
    /// `spec.containers[name]`, `spec.initContainers[name]` or `spec.ephemeralContainers[name]`.
    base: String,
    /// The mounts and ports the rules apply to (none on the main container, whose own are
    /// compared exactly with the request).
    mounts: Vec<&'a VolumeMount>,
    ports: Vec<&'a ContainerPort>,
    devices: Vec<&'a VolumeDevice>,
    /// Mounts that broke the workspace grant's rules (companions only), with why.
    grant_broken: Vec<(&'a VolumeMount, &'static str)>,
    /// Said after a reserved mount: why this container may not have it.
    why: &'static str,
}

/// Every container of the Pod, main, companions, init and ephemeral.
fn holders<'a>(a: &'a PodSpec, main_container: &str) -> Vec<Holder<'a>> {
    let mut out = Vec::new();
    for c in &a.containers {
        let main = c.name == main_container;
        let (mounts, grant_broken) = if main {
            (Vec::new(), Vec::new())
        } else {
            companion_mounts_without_grant(c)
        };
        out.push(Holder {
            base: format!("spec.containers[{}]", c.name),
            mounts,
            ports: if main {
                Vec::new()
            } else {
                c.ports.iter().flatten().collect()
            },
            devices: c.volume_devices.iter().flatten().collect(),
            grant_broken,
            why: "only the main container may mount them; a companion only the exact workspace grant",
        });
    }
    for c in a.init_containers.iter().flatten() {
        out.push(Holder {
            base: format!("spec.initContainers[{}]", c.name),
            mounts: c.volume_mounts.iter().flatten().collect(),
            ports: c.ports.iter().flatten().collect(),
            devices: c.volume_devices.iter().flatten().collect(),
            grant_broken: Vec::new(),
            why: "init containers never receive them, the workspace grant included",
        });
    }
    for c in a.ephemeral_containers.iter().flatten() {
        out.push(Holder {
            base: format!("spec.ephemeralContainers[{}]", c.name),
            mounts: c.volume_mounts.iter().flatten().collect(),
            ports: c.ports.iter().flatten().collect(),
            devices: c.volume_devices.iter().flatten().collect(),
            grant_broken: Vec::new(),
            why: "ephemeral containers never receive them, the workspace grant included",
        });
    }
    out
}

/// A companion holds at most its one exact workspace grant, with no mount overlapping it; no
/// container but the main one holds a reserved volume, a mount under a reserved root (the
/// exact grant aside) or the agentctl port; no container at all a reserved volume device. Absolute, as upstream's `validateAdmittedContainers`: the template rules never
/// let a request hold them, so any found was added by admission.
fn compare_reserved_access(a: &PodSpec, main_container: &str, push: &mut impl FnMut(&str, String)) {
    for Holder {
        base,
        mounts,
        ports,
        devices,
        grant_broken,
        why,
    } in holders(a, main_container)
    {
        for (m, rule) in grant_broken {
            push(
                &format!("{base}.volumeMounts[{}]", m.name),
                format!("{rule}: {}", describe_mount(m)),
            );
        }
        for m in mounts {
            if RESERVED_VOLUMES.contains(&m.name.as_str()) || is_reserved_path(&m.mount_path) {
                push(
                    &format!("{base}.volumeMounts[{}]", m.name),
                    format!(
                        "{} mounts a volume or path reserved for Kandev ({why})",
                        describe_mount(m)
                    ),
                );
            }
        }
        for p in ports.into_iter().filter(|p| is_agentctl_port(p)) {
            push(
                &format!("{base}.ports[{}]", p.container_port),
                format!(
                    "only the main container may carry the agentctl port: {}",
                    describe_port(p)
                ),
            );
        }
        for d in devices {
            if RESERVED_VOLUMES.contains(&d.name.as_str()) || is_reserved_path(&d.device_path) {
                push(
                    &format!("{base}.volumeDevices[{}]", d.name),
                    format!(
                        "a volume device may not use Kandev's reserved volumes or paths: {} at {}",
                        d.name, d.device_path
                    ),
                );
            }
        }
    }
}

/// Every container: no new envFrom, no new reserved environment keys.
fn compare_env(d: &PodSpec, a: &PodSpec, push: &mut impl FnMut(&str, String)) {
    for ac in &a.containers {
        let dc = d.containers.iter().find(|c| c.name == ac.name);
        if ac.env_from.is_some() && dc.and_then(|c| c.env_from.as_ref()).is_none() {
            push(
                &format!("spec.containers[{}].envFrom", ac.name),
                "admission added envFrom".into(),
            );
        }
        for env in ac.env.iter().flatten() {
            let reserved = env.name == "HOME"
                || env.name.starts_with("AGENTCTL_")
                || env.name.starts_with("KANDEV_");
            let requested = dc.is_some_and(|c| c.env.iter().flatten().any(|e| e.name == env.name));
            if reserved && !requested {
                push(
                    &format!("spec.containers[{}].env[{}]", ac.name, env.name),
                    "admission added a reserved variable".into(),
                );
            }
        }
    }
}

/// Workspace grants by container name, both directions. (Init and ephemeral containers never
/// hold one: [`compare_reserved_access`] refuses any workspace mount there.)
fn compare_grants(
    d: &PodSpec,
    a: &PodSpec,
    main_container: &str,
    push: &mut impl FnMut(&str, String),
) {
    for dc in d.containers.iter().filter(|c| c.name != main_container) {
        let want = grant_modes(dc);
        let got = a
            .containers
            .iter()
            .find(|c| c.name == dc.name)
            .map(grant_modes);
        match got {
            None if !want.is_empty() => push(
                &format!("spec.containers[{}]", dc.name),
                "the grant's recipient was removed or renamed".into(),
            ),
            Some(got) if got != want => push(
                &format!("spec.containers[{}].volumeMounts", dc.name),
                format!("workspace grant changed from {want:?} to {got:?} (readOnly per grant)"),
            ),
            _ => {}
        }
    }
    for ac in a.containers.iter().filter(|c| c.name != main_container) {
        let requested = d.containers.iter().any(|c| c.name == ac.name);
        if !requested && touches_workspace(ac.volume_mounts.as_ref()) {
            push(
                &format!("spec.containers[{}]", ac.name),
                "admission added a container with the workspace".into(),
            );
        }
    }
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
mod tests {
    use super::*;
    use crate::pod::compose::{Arch, ComposeInput, WorkspaceSource, compose_pod};
    use crate::pod::identity::SessionIdentity;
    use crate::pod::template;
    use k8s_openapi::api::core::v1::{
        Affinity, ContainerPort, EphemeralContainer, NodeAffinity, NodeSelector,
        NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeClaimVolumeSource,
        PreferredSchedulingTerm, VolumeDevice,
    };

    fn desired() -> Pod {
        let text = std::fs::read_to_string(crate::paths::default_template()).unwrap();
        let t = template::parse(&template::render(&text, "w", "d").text).unwrap();
        let identity = SessionIdentity::new("run", "x::y", 0);
        compose_pod(&ComposeInput {
            template: &t,
            identity: &identity,
            namespace: "ns",
            main_container: "kandev-agent",
            arch: Arch::Amd64,
            workspace: WorkspaceSource::Claim("kandev-x-workspace".into()),
            create_nonce: "nonce",
        })
        .unwrap()
    }

    fn containers(p: &mut Pod) -> &mut Vec<Container> {
        &mut p.spec.as_mut().unwrap().containers
    }

    fn engine(p: &mut Pod) -> &mut Container {
        containers(p)
            .iter_mut()
            .find(|c| c.name == "docker-engine")
            .unwrap()
    }

    fn grant_of(p: &mut Pod) -> &mut VolumeMount {
        engine(p)
            .volume_mounts
            .as_mut()
            .unwrap()
            .iter_mut()
            .find(|m| m.name == "kandev-workspace")
            .unwrap()
    }

    fn push_mount(c: &mut Container, m: VolumeMount) {
        c.volume_mounts.get_or_insert_default().push(m);
    }

    /// Removes the companion's grant and returns it.
    fn take_grant(p: &mut Pod) -> VolumeMount {
        let grant = grant_of(p).clone();
        engine(p)
            .volume_mounts
            .as_mut()
            .unwrap()
            .retain(|m| m.name != "kandev-workspace");
        grant
    }

    fn agent(p: &mut Pod) -> &mut Container {
        containers(p)
            .iter_mut()
            .find(|c| c.name == "kandev-agent")
            .unwrap()
    }

    /// The paths of what `compare` found, in order.
    fn paths_after(mutate: impl FnOnce(&mut Pod)) -> Vec<String> {
        let want = desired();
        let mut got = want.clone();
        mutate(&mut got);
        compare(&want, &got, "kandev-agent")
            .into_iter()
            .map(|m| m.path)
            .collect()
    }

    /// Upstream `validateRequiredMainContainerFields` counts each reserved mount with
    /// `reflect.DeepEqual`: readOnly, subPath and mountPropagation are part of the mount.
    #[test]
    fn main_reserved_mounts_are_compared_exactly() {
        type Change = fn(&mut VolumeMount);
        let changes: [(&str, Change); 4] = [
            ("readOnly", |m| m.read_only = Some(true)),
            ("subPath", |m| m.sub_path = Some("sub".into())),
            ("mountPropagation", |m| {
                m.mount_propagation = Some("HostToContainer".into())
            }),
            ("mountPath", |m| m.mount_path = "/opt/kandev/x".into()),
        ];
        for (field, change) in changes {
            let found = paths_after(|p| {
                let mount = agent(p)
                    .volume_mounts
                    .as_mut()
                    .unwrap()
                    .iter_mut()
                    .find(|m| m.name == "kandev-runtime")
                    .unwrap();
                change(mount);
            });
            assert_eq!(
                found,
                vec!["spec.containers[kandev-agent].volumeMounts[kandev-runtime]"],
                "{field}"
            );
        }
        // An extra mount under a reserved root on the main container is a change too.
        let found = paths_after(|p| {
            agent(p).volume_mounts.as_mut().unwrap().push(VolumeMount {
                name: "cache".into(),
                mount_path: "/run/kandev/cache".into(),
                ..Default::default()
            })
        });
        assert_eq!(
            found,
            vec!["spec.containers[kandev-agent].volumeMounts[cache]"]
        );
    }

    fn mount(name: &str, path: &str) -> VolumeMount {
        VolumeMount {
            name: name.into(),
            mount_path: path.into(),
            ..Default::default()
        }
    }

    fn port(name: Option<&str>, number: i32) -> ContainerPort {
        ContainerPort {
            name: name.map(Into::into),
            container_port: number,
            ..Default::default()
        }
    }

    fn init_with(p: &mut Pod, c: Container) {
        p.spec.as_mut().unwrap().init_containers = Some(vec![c]);
    }

    fn ephemeral_with(p: &mut Pod, c: Container) {
        p.spec.as_mut().unwrap().ephemeral_containers = Some(vec![EphemeralContainer {
            name: c.name,
            image: c.image,
            ports: c.ports,
            volume_mounts: c.volume_mounts,
            volume_devices: c.volume_devices,
            ..Default::default()
        }]);
    }

    fn named(name: &str, mounts: Vec<VolumeMount>, ports: Vec<ContainerPort>) -> Container {
        Container {
            name: name.into(),
            image: Some("busybox".into()),
            volume_mounts: Some(mounts),
            ports: Some(ports),
            ..Default::default()
        }
    }

    /// Upstream `validateAdmittedContainers`: no container but the main one may hold a
    /// reserved volume, a mount under a reserved root (the exact grant aside) or the
    /// agentctl port, whatever the template asked for.
    #[test]
    fn companions_init_and_ephemeral_containers_gain_no_reserved_access() {
        type Mutation = fn(&mut Pod);
        let cases: Vec<(&str, Mutation, &str)> = vec![
            (
                "companion gains kandev-runtime",
                |p| push_mount(engine(p), mount("kandev-runtime", "/rt")),
                "spec.containers[docker-engine].volumeMounts[kandev-runtime]",
            ),
            (
                "companion gains kandev-auth",
                |p| push_mount(engine(p), mount("kandev-auth", "/run/kandev")),
                "spec.containers[docker-engine].volumeMounts[kandev-auth]",
            ),
            (
                "companion mounts under /opt/kandev",
                |p| push_mount(engine(p), mount("docker-data", "/opt/kandev/bin")),
                "spec.containers[docker-engine].volumeMounts[docker-data]",
            ),
            (
                "companion mounts /run/kandev (uncleaned)",
                |p| push_mount(engine(p), mount("docker-socket", "/run//kandev/")),
                "spec.containers[docker-engine].volumeMounts[docker-socket]",
            ),
            (
                "companion gains port 8765",
                |p| {
                    engine(p)
                        .ports
                        .get_or_insert_default()
                        .push(port(None, 8765))
                },
                "spec.containers[docker-engine].ports[8765]",
            ),
            (
                "companion gains a port named kandev-agentctl",
                |p| {
                    engine(p)
                        .ports
                        .get_or_insert_default()
                        .push(port(Some("kandev-agentctl"), 9000))
                },
                "spec.containers[docker-engine].ports[9000]",
            ),
            (
                "init gains kandev-auth",
                |p| init_with(p, named("setup", vec![mount("kandev-auth", "/a")], vec![])),
                "spec.initContainers[setup].volumeMounts[kandev-auth]",
            ),
            (
                "init mounts under /run/kandev",
                |p| init_with(p, named("setup", vec![mount("d", "/run/kandev/x")], vec![])),
                "spec.initContainers[setup].volumeMounts[d]",
            ),
            (
                "init gains port 8765",
                |p| init_with(p, named("setup", vec![], vec![port(None, 8765)])),
                "spec.initContainers[setup].ports[8765]",
            ),
            (
                "ephemeral gains kandev-runtime",
                |p| {
                    ephemeral_with(
                        p,
                        named("debug", vec![mount("kandev-runtime", "/r")], vec![]),
                    )
                },
                "spec.ephemeralContainers[debug].volumeMounts[kandev-runtime]",
            ),
            (
                "ephemeral mounts /opt/kandev",
                |p| ephemeral_with(p, named("debug", vec![mount("d", "/opt/kandev")], vec![])),
                "spec.ephemeralContainers[debug].volumeMounts[d]",
            ),
            (
                "ephemeral gains port 8765",
                |p| ephemeral_with(p, named("debug", vec![], vec![port(None, 8765)])),
                "spec.ephemeralContainers[debug].ports[8765]",
            ),
        ];
        for (name, mutate, path) in cases {
            assert_eq!(paths_after(mutate), vec![path], "{name}");
        }
    }

    /// Upstream `companionWithoutWorkspaceGrant` on every admitted companion: one exact
    /// grant at most, and on its recipient no other mount at `/`, at `/workspace` or below it.
    #[test]
    fn a_grant_recipient_gains_no_other_workspace_mount_and_no_overlapping_mount() {
        type Mutation = fn(&mut Pod);
        const SHAPE: &str = "workspace grant must be one direct RO/RW mount at /workspace";
        const OVERLAP: &str = "workspace grant overlaps another mount";
        let cases: Vec<(&str, Mutation, &str, &str)> = vec![
            (
                "extra kandev-workspace mount elsewhere",
                |p| push_mount(engine(p), mount("kandev-workspace", "/data")),
                "spec.containers[docker-engine].volumeMounts[kandev-workspace]",
                SHAPE,
            ),
            (
                "extra kandev-workspace mount with a subPath",
                |p| {
                    let mut m = mount("kandev-workspace", "/workspace");
                    m.sub_path = Some("repo".into());
                    push_mount(engine(p), m)
                },
                "spec.containers[docker-engine].volumeMounts[kandev-workspace]",
                SHAPE,
            ),
            (
                "another volume at /",
                |p| push_mount(engine(p), mount("docker-data", "/")),
                "spec.containers[docker-engine].volumeMounts[docker-data]",
                OVERLAP,
            ),
            (
                "another volume at /workspace",
                |p| push_mount(engine(p), mount("docker-data", "/workspace/")),
                "spec.containers[docker-engine].volumeMounts[docker-data]",
                OVERLAP,
            ),
            (
                "another volume below /workspace",
                |p| push_mount(engine(p), mount("docker-data", "/workspace/cache")),
                "spec.containers[docker-engine].volumeMounts[docker-data]",
                OVERLAP,
            ),
        ];
        for (name, mutate, path, message) in cases {
            let want = desired();
            let mut got = want.clone();
            mutate(&mut got);
            let found: Vec<(String, String)> = compare(&want, &got, "kandev-agent")
                .into_iter()
                .map(|m| (m.path, m.message))
                .collect();
            assert!(
                found.len() == 1 && found[0].0 == path && found[0].1.starts_with(message),
                "{name}: want [{path}: {message}...], got {found:?}"
            );
        }
    }

    /// Upstream `validateAdmittedPodSpec` compares `nodeName` as it is, also when none was
    /// requested: admission may not pin the Pod to a node.
    #[test]
    fn a_node_name_set_by_admission_is_a_change() {
        let found = paths_after(|p| p.spec.as_mut().unwrap().node_name = Some("node-7".into()));
        assert_eq!(found, vec!["spec.nodeName"]);
    }

    fn requirement(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    fn required(p: &mut Pod, terms: Vec<NodeSelectorTerm>) {
        p.spec.as_mut().unwrap().affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: terms,
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
    }

    fn expressions(requirements: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: Some(requirements),
            match_fields: None,
        }
    }

    /// Upstream `validateAdmittedNodeAffinity`: a platform (`kubernetes.io/os`,
    /// `kubernetes.io/arch`) requirement admission adds must be a match expression the
    /// requested node selector satisfies; a requested one must stay as it is.
    #[test]
    fn platform_node_affinity_is_compared() {
        const REQUIRED: &str =
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
        let found = paths_after(|p| {
            required(
                p,
                vec![expressions(vec![requirement(
                    "kubernetes.io/arch",
                    "In",
                    &["arm64"],
                )])],
            )
        });
        assert_eq!(
            found,
            vec![format!(
                "{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0]"
            )]
        );
        let found = paths_after(|p| {
            required(
                p,
                vec![
                    expressions(vec![requirement(
                        "topology.kubernetes.io/zone",
                        "In",
                        &["a"],
                    )]),
                    expressions(vec![
                        requirement("kubernetes.io/arch", "In", &["amd64"]),
                        requirement("kubernetes.io/os", "NotIn", &["linux"]),
                    ]),
                ],
            )
        });
        assert_eq!(
            found,
            vec![format!(
                "{REQUIRED}.nodeSelectorTerms[1].matchExpressions[1]"
            )]
        );
        let found = paths_after(|p| {
            required(
                p,
                vec![NodeSelectorTerm {
                    match_expressions: None,
                    match_fields: Some(vec![requirement("kubernetes.io/arch", "In", &["amd64"])]),
                }],
            )
        });
        assert_eq!(
            found,
            vec![format!("{REQUIRED}.nodeSelectorTerms[0].matchFields[0]")]
        );
        let found = paths_after(|p| {
            p.spec.as_mut().unwrap().affinity = Some(Affinity {
                node_affinity: Some(NodeAffinity {
                    preferred_during_scheduling_ignored_during_execution: Some(vec![
                        PreferredSchedulingTerm {
                            weight: 1,
                            preference: expressions(vec![requirement(
                                "kubernetes.io/os",
                                "In",
                                &["windows"],
                            )]),
                        },
                    ]),
                    ..Default::default()
                }),
                ..Default::default()
            })
        });
        assert_eq!(
            found,
            vec![
                "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0]"
            ]
        );
        // Compatible with the requested selector (linux/amd64), or not about the platform:
        // neutral.
        let found = paths_after(|p| {
            required(
                p,
                vec![expressions(vec![
                    requirement("kubernetes.io/arch", "In", &["amd64", "arm64"]),
                    requirement("kubernetes.io/os", "Exists", &[]),
                    requirement("kubernetes.io/arch", "NotIn", &["s390x"]),
                    requirement("topology.kubernetes.io/zone", "In", &["a"]),
                ])],
            )
        });
        assert_eq!(found, Vec::<String>::new());
        // A requested platform requirement that admission dropped.
        let mut want = desired();
        required(
            &mut want,
            vec![expressions(vec![requirement(
                "kubernetes.io/arch",
                "In",
                &["amd64"],
            )])],
        );
        let mut got = want.clone();
        got.spec.as_mut().unwrap().affinity = None;
        let found: Vec<String> = compare(&want, &got, "kandev-agent")
            .into_iter()
            .map(|m| m.path)
            .collect();
        assert_eq!(
            found,
            vec![format!(
                "{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0]"
            )]
        );
    }

    /// Upstream `validateAdmittedContainerDevices`: on every container, the main one too.
    #[test]
    fn no_container_gains_a_reserved_volume_device() {
        let device = |name: &str, path: &str| VolumeDevice {
            name: name.into(),
            device_path: path.into(),
        };
        let found = paths_after(|p| {
            agent(p).volume_devices = Some(vec![device("kandev-runtime", "/dev/rt")]);
            engine(p).volume_devices = Some(vec![device("blk", "/workspace/dev")]);
        });
        assert_eq!(
            found,
            vec![
                "spec.containers[kandev-agent].volumeDevices[kandev-runtime]",
                "spec.containers[docker-engine].volumeDevices[blk]",
            ]
        );
    }

    /// Upstream counts the agentctl port with `reflect.DeepEqual` on the main container
    /// too: a changed field, or a second port on 8765, is a change.
    #[test]
    fn the_main_agentctl_port_is_compared_exactly() {
        let found = paths_after(|p| {
            let ports = agent(p).ports.as_mut().unwrap();
            let agentctl = ports.iter_mut().find(|p| p.container_port == 8765).unwrap();
            agentctl.host_port = Some(8765);
        });
        assert_eq!(found, vec!["spec.containers[kandev-agent].ports[8765]"]);
        let found = paths_after(|p| {
            agent(p)
                .ports
                .as_mut()
                .unwrap()
                .push(port(Some("metrics"), 8765))
        });
        assert_eq!(found, vec!["spec.containers[kandev-agent].ports[8765]"]);
    }

    /// The upstream AC-001.3 mutations: each must be caught.
    #[test]
    fn every_upstream_mutation_is_caught() {
        type Mutation = fn(&mut Pod);
        let cases: Vec<(&str, Mutation)> = vec![
            ("removed mount", |p| {
                take_grant(p);
            }),
            ("removed recipient", |p| {
                containers(p).retain(|c| c.name != "docker-engine")
            }),
            ("renamed recipient", |p| engine(p).name = "dockerd".into()),
            ("flipped readOnly", |p| grant_of(p).read_only = Some(true)),
            ("duplicated mount", |p| {
                let g = grant_of(p).clone();
                engine(p).volume_mounts.as_mut().unwrap().push(g);
            }),
            ("duplicated recipient", |p| {
                let c = engine(p).clone();
                containers(p).push(c);
            }),
            ("grant added to a new container", |p| {
                let g = grant_of(p).clone();
                containers(p).push(Container {
                    name: "intruder".into(),
                    volume_mounts: Some(vec![g]),
                    ..Default::default()
                });
            }),
            ("grant moved to init", |p| {
                let g = take_grant(p);
                p.spec.as_mut().unwrap().init_containers = Some(vec![Container {
                    name: "init".into(),
                    volume_mounts: Some(vec![g]),
                    ..Default::default()
                }]);
            }),
            ("grant moved to ephemeral", |p| {
                let g = take_grant(p);
                p.spec.as_mut().unwrap().ephemeral_containers = Some(vec![EphemeralContainer {
                    name: "debug".into(),
                    volume_mounts: Some(vec![g]),
                    ..Default::default()
                }]);
            }),
            ("writable alias of the workspace claim", |p| {
                p.spec
                    .as_mut()
                    .unwrap()
                    .volumes
                    .as_mut()
                    .unwrap()
                    .push(Volume {
                        name: "alias".into(),
                        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                            claim_name: "kandev-x-workspace".into(),
                            read_only: None,
                        }),
                        ..Default::default()
                    });
            }),
            ("create nonce changed", |p| {
                p.metadata
                    .annotations
                    .as_mut()
                    .unwrap()
                    .insert("kandev.ai/create-nonce".into(), "other".into());
            }),
            ("foreign kandev.ai label", |p| {
                p.metadata
                    .labels
                    .as_mut()
                    .unwrap()
                    .insert("kandev.ai/foreign-owner".into(), "x".into());
            }),
            ("main command changed", |p| {
                containers(p)[0].command = Some(vec!["bash".into()])
            }),
            ("token automount turned on", |p| {
                p.spec.as_mut().unwrap().automount_service_account_token = Some(true)
            }),
        ];
        for (name, mutate) in cases {
            let want = desired();
            let mut got = want.clone();
            mutate(&mut got);
            assert!(
                !compare(&want, &got, "kandev-agent").is_empty(),
                "{name} was not caught"
            );
        }
    }

    #[test]
    fn neutral_changes_pass() {
        let want = desired();
        let mut reordered = want.clone();
        containers(&mut reordered).reverse();
        assert_eq!(compare(&want, &reordered, "kandev-agent"), vec![]);
        let mut sidecar = want.clone();
        containers(&mut sidecar).push(Container {
            name: "metrics".into(),
            image: Some("m".into()),
            ..Default::default()
        });
        sidecar
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert("policy.example/checked".into(), "yes".into());
        sidecar
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert("policy.example/note".into(), "x".into());
        assert_eq!(compare(&want, &sidecar, "kandev-agent"), vec![]);
        let mut defaulted = want.clone();
        grant_of(&mut defaulted).read_only = None; // readOnly: false written as absent
        engine(&mut defaulted).termination_message_path = Some("/dev/termination-log".into());
        assert_eq!(compare(&want, &defaulted, "kandev-agent"), vec![]);
    }
}
