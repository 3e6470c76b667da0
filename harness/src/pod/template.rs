//! Pod templates: rendering image placeholders, strict parsing, and Kandev's template rules.
//!
//! The rules mirror Kandev's `ValidatePodTemplate` and the workspace-grant exception
//! (kandev-contract.md §3). Every finding carries its field path under
//! `config.pod_template_yaml`, as Kandev reports it, and all findings are reported at once.

use k8s_openapi::api::core::v1::{Container, NodeSelectorTerm, PodSpec, PodTemplate, VolumeMount};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Kandev's `MaxPodTemplateBytes`.
pub const MAX_TEMPLATE_BYTES: usize = 256 * 1024;
/// Prefix of every template finding's path.
pub const PATH_PREFIX: &str = "config.pod_template_yaml";
/// Placeholder for the worker image in fixture templates (Kandev's recipe uses the same).
pub const WORKER_IMAGE_PLACEHOLDER: &str = "FULL_WORKER_IMAGE_REQUIRED";
/// Placeholder for the docker-engine companion image in fixture templates.
pub const DAEMON_IMAGE_PLACEHOLDER: &str = "DOCKER_ENGINE_IMAGE_REQUIRED";

pub const RESERVED_VOLUMES: [&str; 3] = ["kandev-runtime", "kandev-auth", "kandev-workspace"];
pub const RESERVED_ROOTS: [&str; 3] = ["/opt/kandev", "/run/kandev", "/workspace"];
pub const AGENTCTL_PORT: i32 = 8765;
pub const AGENTCTL_PORT_NAME: &str = "kandev-agentctl";
/// The `app.kubernetes.io/*` label keys Kandev reserves (besides every `kandev.ai/*` key).
const RESERVED_APP_LABELS: [&str; 4] = [
    "app.kubernetes.io/component",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/name",
];

/// Whether Kandev owns this label key: a reserved `app.kubernetes.io/*` key or any
/// `kandev.ai/*` key. Templates may not set them; admission may not change them; terminal
/// cleanup compares them exactly.
pub fn is_owned_label(key: &str) -> bool {
    key.starts_with("kandev.ai/") || RESERVED_APP_LABELS.contains(&key)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Error,
    Warning,
}

/// One problem (or warning) in a template, with the field path that holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TemplateFinding {
    pub severity: Severity,
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for TemplateFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tag = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{tag}: {}: {}", self.path, self.message)
    }
}

/// The three workspace modes of a Kandev profile.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceMode {
    ManagedPvc,
    EmptyDir,
    ExistingClaim,
}

/// What the rules need besides the template itself.
#[derive(Debug, Clone)]
pub struct RuleOptions {
    pub main_container: String,
    pub workspace_mode: WorkspaceMode,
    /// The workspace claim name in PVC modes (for the claim-alias rule).
    pub workspace_claim: Option<String>,
}

/// A template's text after rendering, with the digest the report records.
#[derive(Debug, Clone)]
pub struct RenderedTemplate {
    pub text: String,
    pub sha256: String,
}

/// `sha256:<hex>` of a template's text, as reports record it.
pub fn sha256_hex(text: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// Substitutes the fixture placeholders with the images of this run. Templates that name
/// real images (operators' own) pass through unchanged.
pub fn render(text: &str, worker_image: &str, daemon_image: &str) -> RenderedTemplate {
    let text = text
        .replace(WORKER_IMAGE_PLACEHOLDER, worker_image)
        .replace(DAEMON_IMAGE_PLACEHOLDER, daemon_image);
    let sha256 = sha256_hex(&text);
    RenderedTemplate { text, sha256 }
}

fn error(path: impl Into<String>, message: impl Into<String>) -> TemplateFinding {
    TemplateFinding {
        severity: Severity::Error,
        path: path.into(),
        message: message.into(),
    }
}

fn warning(path: impl Into<String>, message: impl Into<String>) -> TemplateFinding {
    TemplateFinding {
        severity: Severity::Warning,
        path: path.into(),
        message: message.into(),
    }
}

/// Parses one strict `v1/PodTemplate` document. Unknown fields are errors (found by
/// comparing the document with its typed round trip), as Kandev decodes strictly.
pub fn parse(text: &str) -> Result<PodTemplate, Vec<TemplateFinding>> {
    if text.len() > MAX_TEMPLATE_BYTES {
        return Err(vec![error(
            PATH_PREFIX,
            format!(
                "is {} bytes; the limit is {MAX_TEMPLATE_BYTES} bytes",
                text.len()
            ),
        )]);
    }
    if text.trim().is_empty() {
        return Err(vec![error(
            PATH_PREFIX,
            "is empty; provide one v1/PodTemplate document",
        )]);
    }
    let depth = flow_depth(text);
    if depth > MAX_FLOW_DEPTH {
        return Err(vec![error(
            PATH_PREFIX,
            format!(
                "nests [ ] / {{ }} collections {depth} deep; a Pod template needs far fewer than {MAX_FLOW_DEPTH}"
            ),
        )]);
    }
    let mut documents = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        match <Value as serde::Deserialize>::deserialize(document) {
            Ok(value) => documents.push(value),
            Err(e) => return Err(vec![error(PATH_PREFIX, format!("is not valid YAML: {e}"))]),
        }
    }
    documents.retain(|d| !d.is_null());
    let document = match documents.as_slice() {
        [one] => one.clone(),
        [] => {
            return Err(vec![error(
                PATH_PREFIX,
                "is empty; provide one v1/PodTemplate document",
            )]);
        }
        many => {
            return Err(vec![error(
                PATH_PREFIX,
                format!(
                    "holds {} YAML documents; exactly one is allowed",
                    many.len()
                ),
            )]);
        }
    };
    let mut findings = Vec::new();
    if document.get("apiVersion").and_then(Value::as_str) != Some("v1") {
        findings.push(error(format!("{PATH_PREFIX}.apiVersion"), "must be v1"));
    }
    if document.get("kind").and_then(Value::as_str) != Some("PodTemplate") {
        findings.push(error(format!("{PATH_PREFIX}.kind"), "must be PodTemplate"));
    }
    let template: PodTemplate = match serde_json::from_value(document.clone()) {
        Ok(t) => t,
        Err(e) => {
            findings.push(error(
                PATH_PREFIX,
                format!("does not decode as a v1/PodTemplate: {e}"),
            ));
            return Err(findings);
        }
    };
    match serde_json::to_value(&template) {
        Ok(round_trip) => unknown_fields(&document, &round_trip, PATH_PREFIX, &mut findings),
        Err(e) => findings.push(error(PATH_PREFIX, format!("cannot be re-encoded: {e}"))),
    }
    if findings.is_empty() {
        Ok(template)
    } else {
        Err(findings)
    }
}

/// Deepest flow-collection nesting a template may have. The YAML scanner slows down
/// superlinearly on deep flow nesting, so deeper input is refused before it is parsed.
const MAX_FLOW_DEPTH: usize = 100;

/// The deepest `[`/`{` nesting outside quotes and comments (an upper bound: brackets inside
/// plain scalars count too, which only errs towards refusing absurd input).
fn flow_depth(text: &str) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut single, mut double, mut comment, mut escaped) = (false, false, false, false);
    let mut previous = '\n';
    for c in text.chars() {
        if comment {
            comment = c != '\n';
        } else if double {
            double = escaped || c != '"';
            escaped = !escaped && c == '\\';
        } else if single {
            single = c != '\'';
        } else {
            match c {
                '#' if previous.is_whitespace() => comment = true,
                '"' => double = true,
                '\'' => single = true,
                '[' | '{' => {
                    depth += 1;
                    deepest = deepest.max(depth);
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        previous = c;
    }
    deepest
}

/// Reports every field of `input` that the typed round trip dropped.
fn unknown_fields(input: &Value, typed: &Value, path: &str, findings: &mut Vec<TemplateFinding>) {
    match (input, typed) {
        (Value::Object(input), Value::Object(typed)) => {
            for (key, value) in input {
                let child = format!("{path}.{key}");
                match typed.get(key) {
                    Some(typed_value) => unknown_fields(value, typed_value, &child, findings),
                    None if value.is_null() => {}
                    None => findings.push(error(child, "is not a known field (strict decoding)")),
                }
            }
        }
        (Value::Array(input), Value::Array(typed)) => {
            for (i, (value, typed_value)) in input.iter().zip(typed).enumerate() {
                unknown_fields(value, typed_value, &format!("{path}[{i}]"), findings);
            }
        }
        _ => {}
    }
}

fn is_at_or_below(path: &str, root: &str) -> bool {
    let cleaned = clean_path(path);
    cleaned == root || cleaned.starts_with(&format!("{root}/"))
}

/// Lexically cleans an absolute path (`//a/./b/../c/` -> `/a/c`), as Go's `path.Clean`.
pub fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The exact grant shape: `{name: kandev-workspace, mountPath: /workspace, readOnly: bool}`.
pub fn is_workspace_grant(mount: &VolumeMount) -> bool {
    mount.name == "kandev-workspace"
        && mount.mount_path == "/workspace"
        && mount.sub_path.is_none()
        && mount.sub_path_expr.is_none()
        && mount.mount_propagation.is_none()
        && mount.recursive_read_only.is_none()
}

fn touches_workspace(mount: &VolumeMount) -> bool {
    mount.name == "kandev-workspace" || is_at_or_below(&mount.mount_path, "/workspace")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Main,
    Ordinary,
    Init,
}

/// Applies Kandev's template rules; returns every error and warning at once.
pub fn validate(template: &PodTemplate, options: &RuleOptions) -> Vec<TemplateFinding> {
    let mut findings = Vec::new();
    let root = format!("{PATH_PREFIX}.template");
    let Some(pod) = template.template.as_ref() else {
        findings.push(error(format!("{PATH_PREFIX}.template"), "is required"));
        return findings;
    };
    if let Some(meta) = &pod.metadata {
        let m = format!("{root}.metadata");
        let forbidden = [
            ("name", meta.name.is_some()),
            ("generateName", meta.generate_name.is_some()),
            ("namespace", meta.namespace.is_some()),
            ("uid", meta.uid.is_some()),
            ("resourceVersion", meta.resource_version.is_some()),
            ("generation", meta.generation.is_some()),
            ("creationTimestamp", meta.creation_timestamp.is_some()),
            ("deletionTimestamp", meta.deletion_timestamp.is_some()),
            ("ownerReferences", meta.owner_references.is_some()),
            ("finalizers", meta.finalizers.is_some()),
            ("managedFields", meta.managed_fields.is_some()),
        ];
        for (field, set) in forbidden {
            if set {
                findings.push(error(format!("{m}.{field}"), "is reserved for Kandev"));
            }
        }
        for key in meta.labels.iter().flatten().map(|(k, _)| k) {
            if is_owned_label(key) {
                findings.push(error(
                    format!("{m}.labels[{key}]"),
                    "is a label key reserved for Kandev",
                ));
            }
        }
        for key in meta.annotations.iter().flatten().map(|(k, _)| k) {
            if key.starts_with("kandev.ai/") {
                findings.push(error(
                    format!("{m}.annotations[{key}]"),
                    "is an annotation key reserved for Kandev",
                ));
            }
        }
    }
    let Some(spec) = pod.spec.as_ref() else {
        findings.push(error(format!("{root}.spec"), "is required"));
        return findings;
    };
    validate_spec(spec, &format!("{root}.spec"), options, &mut findings);
    findings
}

fn validate_spec(
    spec: &PodSpec,
    s: &str,
    options: &RuleOptions,
    findings: &mut Vec<TemplateFinding>,
) {
    if spec.restart_policy.is_some() {
        findings.push(error(
            format!("{s}.restartPolicy"),
            "is reserved for Kandev",
        ));
    }
    if spec.node_name.is_some() {
        findings.push(error(format!("{s}.nodeName"), "is reserved for Kandev"));
    }
    if spec.os.is_some() {
        findings.push(error(
            format!("{s}.os"),
            "is reserved for Kandev (set by the profile platform)",
        ));
    }
    for key in spec.node_selector.iter().flatten().map(|(k, _)| k) {
        if key == "kubernetes.io/os" || key == "kubernetes.io/arch" {
            findings.push(error(
                format!("{s}.nodeSelector[{key}]"),
                "is reserved for Kandev (set by the profile platform)",
            ));
        }
    }
    validate_node_affinity(spec, s, findings);
    for (i, volume) in spec.volumes.iter().flatten().enumerate() {
        let v = format!("{s}.volumes[{i}]");
        if RESERVED_VOLUMES.contains(&volume.name.as_str()) {
            findings.push(error(
                format!("{v}.name"),
                format!("volume name {} is reserved for Kandev", volume.name),
            ));
        }
        if let (Some(claim), Some(pvc)) =
            (&options.workspace_claim, &volume.persistent_volume_claim)
            && options.workspace_mode != WorkspaceMode::EmptyDir
            && &pvc.claim_name == claim
        {
            findings.push(error(
                format!("{v}.persistentVolumeClaim.claimName"),
                "workspace claim must only be referenced by the owned workspace volume",
            ));
        }
        if volume.host_path.is_some() {
            findings.push(warning(
                format!("{v}.hostPath"),
                "hostPath volumes expose the node's filesystem",
            ));
        }
    }
    if spec.automount_service_account_token == Some(true) {
        findings.push(warning(
            format!("{s}.automountServiceAccountToken"),
            "mounts a service-account token into the task Pod",
        ));
    }
    for (field, set) in [
        ("hostNetwork", spec.host_network == Some(true)),
        ("hostPID", spec.host_pid == Some(true)),
        ("hostIPC", spec.host_ipc == Some(true)),
    ] {
        if set {
            findings.push(warning(
                format!("{s}.{field}"),
                "shares a host namespace with the task Pod",
            ));
        }
    }

    let mut names = std::collections::BTreeMap::<&str, usize>::new();
    let mut main_count = 0;
    for (i, c) in spec.containers.iter().enumerate() {
        *names.entry(&c.name).or_default() += 1;
        let role = if c.name == options.main_container {
            main_count += 1;
            Role::Main
        } else {
            Role::Ordinary
        };
        validate_container(c, &format!("{s}.containers[{i}]"), role, findings);
    }
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        *names.entry(&c.name).or_default() += 1;
        validate_container(c, &format!("{s}.initContainers[{i}]"), Role::Init, findings);
    }
    for (i, c) in spec.ephemeral_containers.iter().flatten().enumerate() {
        let p = format!("{s}.ephemeralContainers[{i}]");
        if c.env_from.is_some() {
            findings.push(error(
                format!("{p}.envFrom"),
                "is not allowed; list env entries explicitly",
            ));
        }
        for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
            if RESERVED_VOLUMES.contains(&m.name.as_str())
                || RESERVED_ROOTS
                    .iter()
                    .any(|r| is_at_or_below(&m.mount_path, r))
            {
                findings.push(error(
                    format!("{p}.volumeMounts[{j}]"),
                    "ephemeral containers cannot mount Kandev's reserved volumes or paths (the workspace grant is for ordinary containers only)",
                ));
            }
        }
    }
    for (name, count) in names {
        if count > 1 {
            findings.push(error(
                format!("{s}.containers"),
                format!("container name {name} is used {count} times"),
            ));
        }
    }
    if main_count == 0 {
        findings.push(error(
            format!("{s}.containers"),
            format!("must contain the main container {}", options.main_container),
        ));
    }
}

/// Node affinity on the platform keys is the profile's (upstream's `validateNodeAffinity`):
/// every match expression or match field on `kubernetes.io/os` / `kubernetes.io/arch`, in
/// required and preferred terms, is refused at its `key`.
fn validate_node_affinity(spec: &PodSpec, s: &str, findings: &mut Vec<TemplateFinding>) {
    let Some(affinity) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
    else {
        return;
    };
    let base = format!("{s}.affinity.nodeAffinity");
    let mut terms: Vec<(String, &NodeSelectorTerm)> = Vec::new();
    if let Some(required) = &affinity.required_during_scheduling_ignored_during_execution {
        for (i, term) in required.node_selector_terms.iter().enumerate() {
            terms.push((
                format!(
                    "{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
                ),
                term,
            ));
        }
    }
    for (i, term) in affinity
        .preferred_during_scheduling_ignored_during_execution
        .iter()
        .flatten()
        .enumerate()
    {
        terms.push((
            format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"),
            &term.preference,
        ));
    }
    for (path, term) in terms {
        for (list, requirements) in [
            ("matchExpressions", term.match_expressions.as_ref()),
            ("matchFields", term.match_fields.as_ref()),
        ] {
            for (j, r) in requirements.into_iter().flatten().enumerate() {
                if r.key == "kubernetes.io/os" || r.key == "kubernetes.io/arch" {
                    findings.push(error(
                        format!("{path}.{list}[{j}].key"),
                        "is reserved for Kandev (set by the profile platform)",
                    ));
                }
            }
        }
    }
}

fn validate_container(c: &Container, p: &str, role: Role, findings: &mut Vec<TemplateFinding>) {
    if c.image.as_deref().unwrap_or("").is_empty() {
        findings.push(error(format!("{p}.image"), "is required"));
    }
    if role == Role::Main {
        for (field, set) in [
            ("command", c.command.is_some()),
            ("args", c.args.is_some()),
            ("workingDir", c.working_dir.is_some()),
        ] {
            if set {
                findings.push(error(format!("{p}.{field}"), "is reserved for Kandev"));
            }
        }
    }
    if c.env_from.is_some() {
        findings.push(error(
            format!("{p}.envFrom"),
            "is not allowed; list env entries explicitly",
        ));
    }
    for (j, env) in c.env.iter().flatten().enumerate() {
        if env.name == "HOME"
            || env.name.starts_with("AGENTCTL_")
            || env.name.starts_with("KANDEV_")
        {
            findings.push(error(
                format!("{p}.env[{j}].name"),
                format!("{} is reserved for Kandev", env.name),
            ));
        }
    }
    for (j, port) in c.ports.iter().flatten().enumerate() {
        if port.container_port == AGENTCTL_PORT || port.name.as_deref() == Some(AGENTCTL_PORT_NAME)
        {
            findings.push(error(
                format!("{p}.ports[{j}]"),
                "port 8765 / kandev-agentctl is reserved for Kandev",
            ));
        }
        if port.host_port.is_some() {
            findings.push(warning(
                format!("{p}.ports[{j}].hostPort"),
                "binds a port on the node",
            ));
        }
    }
    if c.security_context.as_ref().and_then(|s| s.privileged) == Some(true) {
        findings.push(warning(
            format!("{p}.securityContext.privileged"),
            "runs privileged: the container can control the node",
        ));
    }
    let mounts: Vec<&VolumeMount> = c.volume_mounts.iter().flatten().collect();
    let grants = mounts.iter().filter(|m| touches_workspace(m)).count();
    let has_grant = role == Role::Ordinary && mounts.iter().any(|m| is_workspace_grant(m));
    for (j, m) in mounts.iter().enumerate() {
        let mp = format!("{p}.volumeMounts[{j}]");
        if touches_workspace(m) && role == Role::Ordinary {
            if !is_workspace_grant(m) || grants > 1 {
                findings.push(error(
                    mp,
                    "workspace grant must be one direct RO/RW mount at /workspace",
                ));
            }
            continue;
        }
        if RESERVED_VOLUMES.contains(&m.name.as_str())
            || RESERVED_ROOTS
                .iter()
                .any(|r| is_at_or_below(&m.mount_path, r))
        {
            let why = match role {
                Role::Init => "init containers cannot mount Kandev's reserved volumes or paths",
                _ => "mounts a volume or path reserved for Kandev",
            };
            findings.push(error(mp, why));
            continue;
        }
        if has_grant {
            let cleaned = clean_path(&m.mount_path);
            if cleaned == "/" || "/workspace".starts_with(&format!("{cleaned}/")) {
                findings.push(error(mp, "workspace grant overlaps another mount"));
            }
        }
    }
    for (j, d) in c.volume_devices.iter().flatten().enumerate() {
        if RESERVED_VOLUMES.contains(&d.name.as_str())
            || RESERVED_ROOTS
                .iter()
                .any(|r| is_at_or_below(&d.device_path, r))
        {
            findings.push(error(
                format!("{p}.volumeDevices[{j}]"),
                "uses a volume or path reserved for Kandev",
            ));
        }
    }
}

/// Errors only.
pub fn errors(findings: &[TemplateFinding]) -> impl Iterator<Item = &TemplateFinding> {
    findings.iter().filter(|f| f.severity == Severity::Error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> RuleOptions {
        RuleOptions {
            main_container: "kandev-agent".into(),
            workspace_mode: WorkspaceMode::ManagedPvc,
            workspace_claim: Some("kandev-0011223344556677-workspace".into()),
        }
    }

    fn check(text: &str) -> Vec<TemplateFinding> {
        match parse(text) {
            Ok(t) => validate(&t, &options()),
            Err(f) => f,
        }
    }

    const GOOD: &str = r#"
apiVersion: v1
kind: PodTemplate
template:
  spec:
    containers:
      - name: kandev-agent
        image: worker
      - name: docker-engine
        image: daemon
        volumeMounts:
          - {name: kandev-workspace, mountPath: /workspace, readOnly: false}
"#;

    #[test]
    fn the_grant_shape_passes() {
        assert_eq!(errors(&check(GOOD)).count(), 0, "{:?}", check(GOOD));
    }

    #[test]
    fn every_fixture_template_parses() {
        let root = crate::paths::workspace_root();
        for entry in std::fs::read_dir(root.join("fixtures/templates"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            if entry.path().extension().is_some_and(|e| e == "yaml") {
                let findings = check(&render(&text, "w", "d").text);
                assert_eq!(
                    errors(&findings).count(),
                    0,
                    "{}: {findings:?}",
                    entry.path().display()
                );
            }
        }
    }

    #[test]
    fn grant_variants_are_rejected_with_paths() {
        for (mount, expected) in [
            (
                "{name: kandev-workspace, mountPath: /workspace/}",
                "one direct RO/RW mount",
            ),
            (
                "{name: kandev-workspace, mountPath: /other}",
                "one direct RO/RW mount",
            ),
            (
                "{name: kandev-workspace, mountPath: /workspace, subPath: x}",
                "one direct RO/RW mount",
            ),
            (
                "{name: kandev-auth, mountPath: /workspace}",
                "one direct RO/RW mount",
            ),
            (
                "{name: data, mountPath: /workspace/cache}",
                "one direct RO/RW mount",
            ),
        ] {
            let text = GOOD.replace(
                "{name: kandev-workspace, mountPath: /workspace, readOnly: false}",
                mount,
            );
            let findings = check(&text);
            let hit = errors(&findings).find(|f| f.message.contains(expected));
            let hit = hit.map(|f| f.path.as_str()).unwrap_or("none");
            assert_eq!(
                hit, "config.pod_template_yaml.template.spec.containers[1].volumeMounts[0]",
                "{mount}"
            );
        }
    }

    #[test]
    fn unknown_fields_and_multiple_documents_are_errors() {
        let findings = check(&GOOD.replace(
            "image: worker",
            "image: worker\n        imagePullPolcy: Never",
        ));
        assert!(
            findings
                .iter()
                .any(|f| f.path.ends_with("containers[0].imagePullPolcy")),
            "{findings:?}"
        );
        let findings = check(&format!("{GOOD}\n---\n{GOOD}"));
        assert!(
            findings
                .iter()
                .any(|f| f.message.contains("2 YAML documents")),
            "{findings:?}"
        );
    }

    #[test]
    fn all_problems_are_reported_at_once() {
        let text = GOOD
            .replace(
                "    containers:",
                "    restartPolicy: Never\n    containers:",
            )
            .replace("image: worker", "image: worker\n        command: [x]");
        let findings = check(&text);
        assert!(errors(&findings).count() >= 2, "{findings:?}");
    }

    /// Upstream `validateNodeAffinity` / `reservedSelectorPath`: the platform keys are the
    /// profile's, in required and preferred terms, match expressions and match fields.
    #[test]
    fn platform_node_affinity_is_reserved() {
        let text = GOOD.replace(
            "    containers:",
            r#"    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
            - matchExpressions:
                - {key: topology.kubernetes.io/zone, operator: In, values: [a]}
            - matchFields:
                - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 1
            preference:
              matchExpressions:
                - {key: kubernetes.io/os, operator: In, values: [linux]}
    containers:"#,
        );
        let findings = check(&text);
        let found: Vec<(&str, &str)> = errors(&findings)
            .map(|f| (f.path.as_str(), f.message.as_str()))
            .collect();
        let base = "config.pod_template_yaml.template.spec.affinity.nodeAffinity";
        assert_eq!(
            found,
            vec![
                (
                    format!("{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[1].matchFields[0].key").as_str(),
                    "is reserved for Kandev (set by the profile platform)"
                ),
                (
                    format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].key").as_str(),
                    "is reserved for Kandev (set by the profile platform)"
                ),
            ]
        );
    }

    #[test]
    fn clean_path_matches_go() {
        assert_eq!(clean_path("/workspace/"), "/workspace");
        assert_eq!(clean_path("//a/./b/../c"), "/a/c");
        assert_eq!(clean_path("/"), "/");
    }
}
