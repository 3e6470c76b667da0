//! The allowlists of Pod fields this backend honours, and the check that names every other one.

use super::Unsupported;
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

const POD_SPEC_FIELDS: &[&str] = &[
    "containers",
    "initContainers",
    "volumes",
    "securityContext",
    "restartPolicy",
    "os",
    "nodeSelector",
    "automountServiceAccountToken",
    "serviceAccountName",
    "serviceAccount",
    "terminationGracePeriodSeconds",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "tolerations",
    "enableServiceLinks",
    // What every API server fills in (`SetDefaults_PodSpec`, the Priority admission plugin):
    // the scheduler's fields are no node's business, and `dnsPolicy` is judged below.
    "dnsPolicy",
    "schedulerName",
    "priority",
    "priorityClassName",
    "preemptionPolicy",
];
const POD_SECURITY_FIELDS: &[&str] = &[
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "fsGroup",
    "supplementalGroups",
    "seccompProfile",
    "fsGroupChangePolicy",
];
const CONTAINER_FIELDS: &[&str] = &[
    "name",
    "image",
    "imagePullPolicy",
    "command",
    "args",
    "workingDir",
    "env",
    "ports",
    "volumeMounts",
    "resources",
    "securityContext",
    "terminationMessagePath",
    "terminationMessagePolicy",
];
const CONTAINER_SECURITY_FIELDS: &[&str] = &[
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "privileged",
    "allowPrivilegeEscalation",
    "capabilities",
    "seccompProfile",
    "readOnlyRootFilesystem",
];
const VOLUME_FIELDS: &[&str] = &["name", "emptyDir", "persistentVolumeClaim", "hostPath"];
const MOUNT_FIELDS: &[&str] = &["name", "mountPath", "readOnly"];
const PORT_FIELDS: &[&str] = &["name", "containerPort", "protocol"];
const ENV_FIELDS: &[&str] = &["name", "value"];

/// The DNS policies the local engine's resolver stands in for (`ClusterFirst`, the API
/// server's default, with a recorded note: there is no cluster DNS locally; `Default` is
/// the node's resolver, which the engine's is).
pub(super) const DNS_POLICIES_RESOLVED_BY_THE_ENGINE: &[&str] =
    &["ClusterFirst", "ClusterFirstWithHostNet", "Default"];

/// Reports every key of `value` outside `allowed` (null values are absent fields).
fn check_fields(
    value: &Value,
    allowed: &[&str],
    path: &str,
    why: &str,
    out: &mut Vec<Unsupported>,
) {
    if let Value::Object(map) = value {
        for (key, v) in map {
            if !v.is_null() && !allowed.contains(&key.as_str()) {
                out.push(Unsupported {
                    field: format!("{path}.{key}"),
                    reason: why.to_owned(),
                });
            }
        }
    }
}

fn each<'a>(value: &'a Value, key: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    value
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

/// Finds every field the local backend does not honour, by path.
pub fn unsupported_fields(pod: &Pod) -> Vec<Unsupported> {
    let mut out = Vec::new();
    let spec = serde_json::to_value(&pod.spec).unwrap_or(Value::Null);
    let not_mapped = "no local engine equivalent";
    check_fields(&spec, POD_SPEC_FIELDS, "spec", not_mapped, &mut out);
    if let Some(sc) = spec.get("securityContext") {
        check_fields(
            sc,
            POD_SECURITY_FIELDS,
            "spec.securityContext",
            not_mapped,
            &mut out,
        );
    }
    for (i, v) in each(&spec, "volumes") {
        let p = format!("spec.volumes[{i}]");
        check_fields(
            v,
            VOLUME_FIELDS,
            &p,
            "only emptyDir, persistentVolumeClaim and hostPath volumes exist locally",
            &mut out,
        );
    }
    for list in ["containers", "initContainers"] {
        for (i, c) in each(&spec, list) {
            let p = format!("spec.{list}[{i}]");
            check_fields(c, CONTAINER_FIELDS, &p, not_mapped, &mut out);
            if let Some(sc) = c.get("securityContext") {
                check_fields(
                    sc,
                    CONTAINER_SECURITY_FIELDS,
                    &format!("{p}.securityContext"),
                    not_mapped,
                    &mut out,
                );
                if sc.pointer("/seccompProfile/type").and_then(Value::as_str) == Some("Localhost") {
                    out.push(Unsupported {
                        field: format!("{p}.securityContext.seccompProfile"),
                        reason: "Localhost profiles live on a node; the local engine has none"
                            .into(),
                    });
                }
            }
            for (j, m) in each(c, "volumeMounts") {
                check_fields(
                    m,
                    MOUNT_FIELDS,
                    &format!("{p}.volumeMounts[{j}]"),
                    "engine volume mounts have no subPath or propagation settings",
                    &mut out,
                );
            }
            for (j, port) in each(c, "ports") {
                // A host-network Pod's ports are the host's already: the API server defaults
                // their hostPort to the containerPort, which changes nothing.
                let mut port = port.clone();
                if spec["hostNetwork"] == true
                    && port["hostPort"] == port["containerPort"]
                    && let Some(fields) = port.as_object_mut()
                {
                    fields.remove("hostPort");
                }
                let port = &port;
                check_fields(
                    port,
                    PORT_FIELDS,
                    &format!("{p}.ports[{j}]"),
                    "a local Pod publishes no host ports",
                    &mut out,
                );
            }
            for (j, env) in each(c, "env") {
                check_fields(
                    env,
                    ENV_FIELDS,
                    &format!("{p}.env[{j}]"),
                    "no API server to resolve valueFrom locally",
                    &mut out,
                );
            }
            for kind in ["limits", "requests"] {
                if let Some(Value::Object(map)) = c.pointer(&format!("/resources/{kind}")) {
                    for key in map.keys().filter(|k| *k != "cpu" && *k != "memory") {
                        out.push(Unsupported {
                            field: format!("{p}.resources.{kind}.{key}"),
                            reason: "only cpu and memory are enforced by the local engine".into(),
                        });
                    }
                }
            }
        }
    }
    if let Some(policy) = spec.get("dnsPolicy").and_then(Value::as_str)
        && !DNS_POLICIES_RESOLVED_BY_THE_ENGINE.contains(&policy)
    {
        out.push(Unsupported {
            field: "spec.dnsPolicy".into(),
            reason: format!(
                "dnsPolicy {policy} needs the Pod's own resolver configuration (spec.dnsConfig), which the local engine does not write"
            ),
        });
    }
    if spec
        .get("automountServiceAccountToken")
        .and_then(Value::as_bool)
        == Some(true)
    {
        out.push(Unsupported {
            field: "spec.automountServiceAccountToken".into(),
            reason: "the local engine has no service account token to mount".into(),
        });
    }
    for (key, value) in spec
        .get("nodeSelector")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let ok = match key.as_str() {
            "kubernetes.io/os" => value == "linux",
            "kubernetes.io/arch" => value == crate::pod::compose::Arch::of_this_machine().as_str(),
            _ => false,
        };
        if !ok {
            out.push(Unsupported {
                field: format!("spec.nodeSelector[{key}]"),
                reason: format!("the local node does not carry {key}={value}"),
            });
        }
    }
    out
}
