//! What Kandev reserves in a task Pod: its volumes and mount roots, the agentctl port, the
//! label keys it owns, and the one shape a workspace grant may take.

use k8s_openapi::api::core::v1::{ContainerPort, VolumeMount};

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

/// Whether `path` (cleaned first) is `root` or below it.
pub(super) fn is_at_or_below(path: &str, root: &str) -> bool {
    let cleaned = clean_path(path);
    cleaned == root || cleaned.starts_with(&format!("{root}/"))
}

/// Whether a path is at or below one of Kandev's reserved mount roots (cleaned first).
pub fn is_reserved_path(path: &str) -> bool {
    RESERVED_ROOTS.iter().any(|root| is_at_or_below(path, root))
}

/// Whether a port is Kandev's agentctl port, by number or by name.
pub fn is_agentctl_port(port: &ContainerPort) -> bool {
    port.container_port == AGENTCTL_PORT || port.name.as_deref() == Some(AGENTCTL_PORT_NAME)
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
