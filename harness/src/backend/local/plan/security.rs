//! securityContext as engine settings: the user, the added groups and the security options.

use super::Unsupported;
use k8s_openapi::api::core::v1::{PodSecurityContext, SecurityContext};

/// The container's setting, else the Pod's.
fn effective<T: Clone>(container: Option<&T>, pod: Option<&T>) -> Option<T> {
    container.or(pod).cloned()
}

/// The engine `user` (`uid[:gid]`) and whether the image's user must be checked
/// (`runAsNonRoot` without a numeric user).
pub(super) fn user_spec(
    sc: Option<&SecurityContext>,
    psc: Option<&PodSecurityContext>,
    path: &str,
) -> Result<(Option<String>, bool), Unsupported> {
    let uid = effective(
        sc.and_then(|s| s.run_as_user.as_ref()),
        psc.and_then(|s| s.run_as_user.as_ref()),
    );
    let gid = effective(
        sc.and_then(|s| s.run_as_group.as_ref()),
        psc.and_then(|s| s.run_as_group.as_ref()),
    );
    let non_root = effective(
        sc.and_then(|s| s.run_as_non_root.as_ref()),
        psc.and_then(|s| s.run_as_non_root.as_ref()),
    )
    .unwrap_or(false);
    if non_root && uid == Some(0) {
        return Err(Unsupported {
            field: format!("{path}.securityContext.runAsNonRoot"),
            reason: "runAsNonRoot is set but runAsUser is 0; the kubelet refuses to start this container".into(),
        });
    }
    let user = match (uid, gid) {
        (Some(u), Some(g)) => Some(format!("{u}:{g}")),
        (Some(u), None) => Some(u.to_string()),
        (None, Some(_)) => {
            return Err(Unsupported {
                field: format!("{path}.securityContext.runAsGroup"),
                reason: "runAsGroup without runAsUser cannot be expressed for the engine; set runAsUser too".into(),
            });
        }
        (None, None) => None,
    };
    let unknown_user = user.is_none();
    Ok((user, non_root && unknown_user))
}

/// The groups every container of the Pod is added to: `fsGroup`, then `supplementalGroups`.
pub(super) fn added_groups(psc: Option<&PodSecurityContext>) -> Vec<String> {
    let mut group_add: Vec<String> = psc
        .and_then(|s| s.fs_group)
        .iter()
        .map(i64::to_string)
        .collect();
    group_add.extend(
        psc.and_then(|s| s.supplemental_groups.clone())
            .unwrap_or_default()
            .iter()
            .map(i64::to_string),
    );
    group_add
}

/// The engine's `security_opt` for a container.
pub(super) fn security_options(
    sc: Option<&SecurityContext>,
    psc: Option<&PodSecurityContext>,
    privileged: bool,
) -> Vec<String> {
    let mut security_opt = Vec::new();
    if sc.and_then(|s| s.allow_privilege_escalation) == Some(false) {
        security_opt.push("no-new-privileges:true".to_owned());
    }
    // Kubernetes runs a container unconfined unless a seccomp profile is asked for.
    let seccomp = effective(
        sc.and_then(|s| s.seccomp_profile.as_ref()),
        psc.and_then(|s| s.seccomp_profile.as_ref()),
    );
    if seccomp.as_ref().map(|p| p.type_.as_str()) != Some("RuntimeDefault") && !privileged {
        security_opt.push("seccomp=unconfined".to_owned());
    }
    security_opt
}
