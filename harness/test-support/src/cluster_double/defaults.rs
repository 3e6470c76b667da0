//! What a v1.33 API server fills into a Pod on create (its defaulting functions and the
//! default admission plugins: `Priority`, `DefaultTolerationSeconds`, `ServiceAccount`'s
//! account name), so that a client reading a Pod back compares what it asked for against a
//! defaulted object, as it would on a real cluster. The ServiceAccount plugin's token volume is
//! not added (see the module doc).

use serde_json::{Value, json};

/// Sets `object[field]` to `value` where the field is absent (or null).
fn default(object: &mut Value, field: &str, value: Value) {
    if object.get(field).is_none_or(Value::is_null) {
        object[field] = value;
    }
}

/// The image pull policy the API server defaults to: `Always` for `:latest` or no tag,
/// `IfNotPresent` otherwise (a digest counts as a tag).
fn pull_policy(image: &str) -> &'static str {
    let last = image.rsplit('/').next().unwrap_or(image);
    if image.contains('@') {
        return "IfNotPresent";
    }
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn default_probe(probe: &mut Value) {
    if !probe.is_object() {
        return;
    }
    default(probe, "timeoutSeconds", json!(1));
    default(probe, "periodSeconds", json!(10));
    default(probe, "successThreshold", json!(1));
    default(probe, "failureThreshold", json!(3));
    if probe["httpGet"].is_object() {
        default(&mut probe["httpGet"], "scheme", json!("HTTP"));
        default(&mut probe["httpGet"], "path", json!("/"));
    }
}

fn default_container(container: &mut Value) {
    let image = container["image"].as_str().unwrap_or_default().to_owned();
    default(container, "imagePullPolicy", json!(pull_policy(&image)));
    default(
        container,
        "terminationMessagePath",
        json!("/dev/termination-log"),
    );
    default(container, "terminationMessagePolicy", json!("File"));
    default(container, "resources", json!({}));
    if let Some(ports) = container["ports"].as_array_mut() {
        for port in ports {
            default(port, "protocol", json!("TCP"));
        }
    }
    if let Some(env) = container["env"].as_array_mut() {
        for var in env {
            if var["valueFrom"]["fieldRef"].is_object() {
                default(&mut var["valueFrom"]["fieldRef"], "apiVersion", json!("v1"));
            }
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(probe) = container.get_mut(probe) {
            default_probe(probe);
        }
    }
}

/// Defaults `pod` (a Pod as JSON) in place, as the API server does before storing it.
pub(crate) fn default_pod(pod: &mut Value) {
    let spec = &mut pod["spec"];
    if !spec.is_object() {
        return;
    }
    default(spec, "restartPolicy", json!("Always"));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "securityContext", json!({}));
    default(spec, "schedulerName", json!("default-scheduler"));
    default(spec, "enableServiceLinks", json!(true));
    // The Priority admission plugin: no priorityClassName, no global default class.
    default(spec, "priority", json!(0));
    default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    default(spec, "serviceAccountName", json!("default"));
    let account = spec["serviceAccountName"].clone();
    default(spec, "serviceAccount", account);
    for field in ["initContainers", "containers", "ephemeralContainers"] {
        if let Some(containers) = spec[field].as_array_mut() {
            containers.iter_mut().for_each(default_container);
        }
    }
    if let Some(volumes) = spec["volumes"].as_array_mut() {
        for volume in volumes {
            for source in ["configMap", "secret", "projected", "downwardAPI"] {
                if volume[source].is_object() {
                    default(&mut volume[source], "defaultMode", json!(420));
                }
            }
            if volume["hostPath"].is_object() {
                default(&mut volume["hostPath"], "type", json!(""));
            }
        }
    }
    // DefaultTolerationSeconds: 300 s on not-ready and unreachable nodes, unless the Pod
    // tolerates them itself.
    let mut tolerations = spec["tolerations"].as_array().cloned().unwrap_or_default();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let tolerated = tolerations.iter().any(|t| {
            (t["key"] == key || (t["key"].is_null() && t["operator"] == "Exists"))
                && (t["effect"].is_null() || t["effect"] == "NoExecute")
        });
        if !tolerated {
            tolerations.push(json!({"key": key, "operator": "Exists",
                "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
    spec["tolerations"] = json!(tolerations);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_pod_gets_what_the_api_server_fills_in() {
        let mut pod = json!({"spec": {"containers": [
            {"name": "a", "image": "debian:bookworm", "ports": [{"containerPort": 80}]},
            {"name": "b", "image": "registry:5000/x", "imagePullPolicy": "Never"},
        ], "volumes": [{"name": "c", "configMap": {"name": "c"}}]}});
        default_pod(&mut pod);
        let spec = &pod["spec"];
        assert_eq!(spec["dnsPolicy"], "ClusterFirst");
        assert_eq!(spec["schedulerName"], "default-scheduler");
        assert_eq!(spec["enableServiceLinks"], true);
        assert_eq!(spec["preemptionPolicy"], "PreemptLowerPriority");
        assert_eq!(spec["serviceAccount"], "default");
        assert_eq!(spec["containers"][0]["imagePullPolicy"], "IfNotPresent");
        assert_eq!(spec["containers"][1]["imagePullPolicy"], "Never");
        assert_eq!(
            spec["containers"][0]["terminationMessagePath"],
            "/dev/termination-log"
        );
        assert_eq!(spec["containers"][0]["ports"][0]["protocol"], "TCP");
        assert_eq!(spec["volumes"][0]["configMap"]["defaultMode"], 420);
        assert_eq!(spec["tolerations"].as_array().unwrap().len(), 2);
        assert_eq!(spec["tolerations"][1]["tolerationSeconds"], 300);
        assert_eq!(pull_policy("localhost:5000/x"), "Always");
        assert_eq!(pull_policy("x@sha256:00"), "IfNotPresent");
    }

    #[test]
    fn a_pod_tolerating_everything_gets_no_default_tolerations() {
        let mut pod = json!({"spec": {"containers": [],
            "tolerations": [{"operator": "Exists"}]}});
        default_pod(&mut pod);
        assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 1);
    }
}
