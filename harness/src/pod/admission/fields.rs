//! How admission compares and says a mount, a port and a field's value: every field, with only
//! the documented neutral defaults normalised.

use k8s_openapi::api::core::v1::{ContainerPort, VolumeMount};

/// A field's value as a finding says it: the value, or `(unset)`.
pub fn value_or_unset<T: std::fmt::Display>(value: &Option<T>) -> String {
    value
        .as_ref()
        .map_or_else(|| "(unset)".to_owned(), ToString::to_string)
}

/// A mount as compared: every field, with only the neutral defaults normalised (an absent
/// `readOnly` is `false`, an absent `subPath`/`subPathExpr` is empty, as in Kandev's Go types).
pub(super) fn mount_key(m: &VolumeMount) -> impl Ord + '_ {
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
pub(super) fn describe_mount(m: &VolumeMount) -> String {
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

pub(super) fn describe_mounts(mounts: &[&VolumeMount]) -> String {
    if mounts.is_empty() {
        return "nothing".into();
    }
    mounts
        .iter()
        .map(|m| describe_mount(m))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A port as compared: every field, an absent protocol being TCP (the API server's default).
pub(super) fn port_key(p: &ContainerPort) -> impl Ord + '_ {
    (
        p.container_port,
        p.name.as_deref(),
        p.protocol.as_deref().unwrap_or("TCP"),
        p.host_port,
        p.host_ip.as_deref(),
    )
}

pub(super) fn describe_port(p: &ContainerPort) -> String {
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
