//! What a v1.36 API server fills into a Pod on create (its defaulting functions, the Pod
//! strategy, and the default admission plugins: `Priority`, `DefaultTolerationSeconds`,
//! `ServiceAccount`'s account name), so that a client reading a Pod back compares what it
//! asked for against a defaulted object, as it would on a real cluster. Written from the API
//! server's rules (`pkg/apis/core/v1/defaults.go`, the Pod strategy's `PrepareForCreate`,
//! the QoS class of `GetPodQOS`), and held to a real API server's answers: the
//! `real_api_server` tests send the task Pod to kube-apiserver v1.37 built here and to the
//! double, and compare (`recorded`).
//! The ServiceAccount plugin's token volume is `serviceaccount`'s.

use kandev_harness::pod::quantity;
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

/// Requests default to the limits a container sets without them, per resource (on a Pod,
/// not on a PodTemplate).
fn default_requests(resources: &mut Value) {
    let Some(limits) = resources["limits"].as_object().cloned() else {
        return;
    };
    for (name, limit) in limits {
        if resources["requests"].get(&name).is_none() {
            resources["requests"][name.as_str()] = limit;
        }
    }
}

/// A resource quantity the QoS class counts: a positive CPU or memory amount.
fn positive(quantity: &Value) -> bool {
    let zero = quantity::parse("0");
    match quantity.as_str().and_then(quantity::parse) {
        Some(q) => Some(q) != zero && !quantity.as_str().unwrap_or_default().starts_with('-'),
        None => quantity.as_f64().is_some_and(|v| v > 0.0),
    }
}

/// The Pod's QoS class, as `GetPodQOS` computes it (after requests were defaulted): from
/// the Pod-level resources when set, else from the containers and init containers. CPU and
/// memory count. `BestEffort` without any request or limit; `Guaranteed` when every
/// container limits both and requests exactly its limits; `Burstable` otherwise. (Pod-level
/// requests are not defaulted here: no template the harness ships sets Pod-level resources.)
pub(crate) fn qos_class(spec: &Value) -> &'static str {
    const COUNTED: [&str; 2] = ["cpu", "memory"];
    let pod_level = &spec["resources"];
    let holders: Vec<&Value> = if COUNTED
        .iter()
        .any(|r| positive(&pod_level["requests"][r]) || positive(&pod_level["limits"][r]))
    {
        vec![pod_level]
    } else {
        ["initContainers", "containers"]
            .iter()
            .filter_map(|f| spec[*f].as_array())
            .flatten()
            .map(|c| &c["resources"])
            .collect()
    };
    let (mut any, mut guaranteed) = (false, true);
    for resources in holders {
        for name in COUNTED {
            let (request, limit) = (&resources["requests"][name], &resources["limits"][name]);
            let (requested, limited) = (positive(request), positive(limit));
            any |= requested || limited;
            let same = quantity::same(
                request.as_str().unwrap_or_default(),
                limit.as_str().unwrap_or_default(),
            );
            if !(limited && requested && same) {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// Removes `object[field]` when it is `false`: a Go `bool` field tagged `omitempty` (not a
/// `*bool`) cannot hold "false as sent", so a real API server answers without it
/// (k8s.io/api/core/v1/types.go; seen on kube-apiserver v1.37 by the real_api_server tests:
/// a mount sent with `readOnly: false` comes back without `readOnly`).
fn omit_false(object: &mut Value, field: &str) {
    if let Some(fields) = object.as_object_mut()
        && fields.get(field) == Some(&Value::Bool(false))
    {
        fields.remove(field);
    }
}

fn default_container(container: &mut Value, requests: bool) {
    for field in ["stdin", "stdinOnce", "tty"] {
        omit_false(container, field);
    }
    for mount in container
        .get_mut("volumeMounts")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        omit_false(mount, "readOnly");
    }
    let image = container["image"].as_str().unwrap_or_default().to_owned();
    default(container, "imagePullPolicy", json!(pull_policy(&image)));
    default(
        container,
        "terminationMessagePath",
        json!("/dev/termination-log"),
    );
    default(container, "terminationMessagePolicy", json!("File"));
    default(container, "resources", json!({}));
    if requests {
        default_requests(&mut container["resources"]);
    }
    if let Some(ports) = container.get_mut("ports").and_then(Value::as_array_mut) {
        for port in ports {
            default(port, "protocol", json!("TCP"));
        }
    }
    if let Some(env) = container.get_mut("env").and_then(Value::as_array_mut) {
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

/// Defaults `pod` (a Pod as JSON) in place, as the API server does before storing it: the
/// spec's defaults, `metadata.generation` 1 (Pod generation, GA since v1.35) and the status a
/// created Pod starts with (`Pending`, its QoS class).
pub(crate) fn default_pod(pod: &mut Value) {
    if !pod["spec"].is_object() {
        return;
    }
    default_spec(&mut pod["spec"], true);
    pod["metadata"]["generation"] = json!(1);
    let qos = qos_class(&pod["spec"]);
    pod["status"] = json!({"phase": "Pending", "qosClass": qos});
}

/// Defaults a Pod template (a Job's `spec.template`) as the API server defaults one: a Pod
/// spec's defaults less the requests a Pod's containers take from their limits.
pub(crate) fn default_template(template: &mut Value) {
    if !template["spec"].is_object() {
        return;
    }
    default_spec(&mut template["spec"], false);
    // A template's metadata is an ObjectMeta too (serialized with its null creation time).
    template["metadata"]["creationTimestamp"] = Value::Null;
}

fn default_spec(spec: &mut Value, requests: bool) {
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        omit_false(spec, field);
    }
    for volume in spec
        .get_mut("volumes")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        // The volume sources' own `bool` flags (`*bool` ones, as `secret.optional`, stay).
        for source in ["persistentVolumeClaim", "nfs", "iscsi", "rbd", "cephfs"] {
            if let Some(source) = volume.get_mut(source) {
                omit_false(source, "readOnly");
            }
        }
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
        if let Some(containers) = spec.get_mut(field).and_then(Value::as_array_mut) {
            containers
                .iter_mut()
                .for_each(|c| default_container(c, requests));
        }
    }
    // `SetDefaults_Pod`: a host-network Pod's ports are host ports (`defaultHostNetworkPorts`;
    // a template's only with the `DefaultHostNetworkHostPortsInPodTemplates` gate, off).
    if requests && spec["hostNetwork"] == true {
        for field in ["initContainers", "containers"] {
            for c in spec[field].as_array_mut().into_iter().flatten() {
                for port in c["ports"].as_array_mut().into_iter().flatten() {
                    if port["hostPort"].as_i64().unwrap_or(0) == 0 {
                        port["hostPort"] = port["containerPort"].clone();
                    }
                }
            }
        }
    }
    if let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        for volume in volumes {
            // `SetDefaults_Volume`: a volume naming no source is an emptyDir.
            if let Some(fields) = volume.as_object_mut()
                && fields.keys().all(|k| k == "name")
            {
                fields.insert("emptyDir".into(), json!({}));
            }
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
    fn the_qos_class_follows_requests_and_limits() {
        let pod = |resources: Vec<Value>| {
            let mut pod = json!({"spec": {"containers": resources.into_iter()
                .map(|r| json!({"name": "c", "image": "i:1", "resources": r}))
                .collect::<Vec<_>>()}});
            default_pod(&mut pod);
            pod
        };
        let status = |p: &Value| p["status"]["qosClass"].as_str().unwrap().to_owned();
        assert_eq!(status(&pod(vec![json!({})])), "BestEffort");
        let limited = pod(vec![json!({"limits": {"cpu": "1", "memory": "1Gi"}})]);
        assert_eq!(status(&limited), "Guaranteed");
        assert_eq!(
            limited["spec"]["containers"][0]["resources"]["requests"],
            json!({"cpu": "1", "memory": "1Gi"}),
            "requests default to the limits"
        );
        assert_eq!(
            status(&pod(vec![
                json!({"requests": {"cpu": "1000m", "memory": "1024Mi"},
                "limits": {"cpu": "1", "memory": "1Gi"}})
            ])),
            "Guaranteed"
        );
        assert_eq!(
            status(&pod(vec![
                json!({"requests": {"cpu": "250m", "memory": "512Mi"},
                "limits": {"cpu": "2", "memory": "4Gi"}})
            ])),
            "Burstable"
        );
        assert_eq!(
            status(&pod(vec![
                json!({"limits": {"cpu": "1", "memory": "1Gi"}}),
                json!({"requests": {"cpu": "1"}}),
            ])),
            "Burstable"
        );
        assert_eq!(limited["metadata"]["generation"], 1);
        assert_eq!(limited["status"]["phase"], "Pending");
    }

    #[test]
    fn host_network_ports_are_host_ports_and_a_bare_volume_is_an_empty_dir() {
        let mut pod = json!({"spec": {"hostNetwork": true, "containers": [
            {"name": "a", "image": "i:1", "ports": [{"containerPort": 80}]}],
            "volumes": [{"name": "scratch"}]}});
        default_pod(&mut pod);
        assert_eq!(pod["spec"]["containers"][0]["ports"][0]["hostPort"], 80);
        assert_eq!(pod["spec"]["volumes"][0]["emptyDir"], json!({}));
        let mut template = json!({"spec": {"hostNetwork": true, "containers": [
            {"name": "a", "image": "i:1", "ports": [{"containerPort": 80}]}]}});
        default_template(&mut template);
        assert!(template["spec"]["containers"][0]["ports"][0]["hostPort"].is_null());
    }

    #[test]
    fn a_pod_tolerating_everything_gets_no_default_tolerations() {
        let mut pod = json!({"spec": {"containers": [],
            "tolerations": [{"operator": "Exists"}]}});
        default_pod(&mut pod);
        assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 1);
    }
}
