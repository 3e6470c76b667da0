//! What the double serves: [`RESOURCES`] (a resource not listed there is answered 404, as by an
//! API server) and `/version`, the one discovery document the harness's client asks for. No
//! `/api`, `/apis` or OpenAPI documents: the harness never reads them (a third-party client
//! such as kubectl, which needs them, is answered 404).

use serde_json::{Value, json};

/// One resource (or subresource) the double serves.
pub(crate) struct Resource {
    /// "" for the core group.
    pub group: &'static str,
    pub version: &'static str,
    /// `pods`, or `pods/exec` for a subresource.
    pub name: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

const fn resource(
    group: &'static str,
    name: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> Resource {
    Resource {
        group,
        version: "v1",
        name,
        kind,
        namespaced,
    }
}

/// Everything the double serves (names and kinds as a v1.36 API server lists them).
pub(crate) const RESOURCES: &[Resource] = &[
    resource("", "pods", "Pod", true),
    resource("", "pods/exec", "PodExecOptions", true),
    resource("", "pods/log", "Pod", true),
    resource("", "pods/portforward", "PodPortForwardOptions", true),
    resource("", "namespaces", "Namespace", false),
    resource("", "persistentvolumeclaims", "PersistentVolumeClaim", true),
    resource("", "serviceaccounts", "ServiceAccount", true),
    resource("", "serviceaccounts/token", "TokenRequest", true),
    resource("", "services", "Service", true),
    resource("", "secrets", "Secret", true),
    resource("", "nodes", "Node", false),
    resource("storage.k8s.io", "storageclasses", "StorageClass", false),
    resource("", "events", "Event", true),
    resource("rbac.authorization.k8s.io", "roles", "Role", true),
    resource(
        "rbac.authorization.k8s.io",
        "rolebindings",
        "RoleBinding",
        true,
    ),
    // Stored as any object is (`launch --node-inspector`'s grant to read nodes); the double's
    // RBAC evaluates namespaced Roles only, so it grants nothing here.
    resource(
        "rbac.authorization.k8s.io",
        "clusterroles",
        "ClusterRole",
        false,
    ),
    resource(
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
    ),
    resource(
        "authorization.k8s.io",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        false,
    ),
    resource(
        "authorization.k8s.io",
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
        false,
    ),
    resource("batch", "jobs", "Job", true),
    // What a run holds while it is alive (`gc` spares it).
    resource("coordination.k8s.io", "leases", "Lease", true),
    resource(
        "authentication.k8s.io",
        "selfsubjectreviews",
        "SelfSubjectReview",
        false,
    ),
];

/// The resource `group`/`version`/`name` (a subresource as `pods/exec`).
pub(crate) fn find(group: &str, version: &str, name: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.name == name)
}

impl Resource {
    /// `v1`, `rbac.authorization.k8s.io/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// `/version` (the server's version as the harness reads it).
pub(crate) fn version() -> Value {
    json!({"major": "1", "minor": "36", "gitVersion": "v1.36.0-kube-double",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "none (a test double)",
        "compiler": "rustc", "platform": "linux/amd64"})
}
