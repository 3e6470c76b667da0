//! What the double serves: [`RESOURCES`] (a resource not listed there is answered 404, as by an
//! API server) and `/version`, the one discovery document the harness's client asks for. No
//! `/api`, `/apis` or OpenAPI documents: the harness never reads them (a third-party client
//! such as kubectl, which needs them, is answered 404).

use serde_json::{Value, json};

/// One resource (or subresource) the double serves, in version `v1` of its group.
pub(crate) struct Resource {
    /// "" for the core group.
    pub group: &'static str,
    /// `pods`, or `pods/exec` for a subresource.
    pub name: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

const fn resource(group: &'static str, name: &'static str, kind: &'static str) -> Resource {
    Resource {
        group,
        name,
        kind,
        namespaced: true,
    }
}

const fn cluster_scoped(group: &'static str, name: &'static str, kind: &'static str) -> Resource {
    Resource {
        namespaced: false,
        ..resource(group, name, kind)
    }
}

const RBAC: &str = "rbac.authorization.k8s.io";
const AUTHZ: &str = "authorization.k8s.io";

/// Everything the double serves (names and kinds as a v1.36 API server lists them).
pub(crate) const RESOURCES: &[Resource] = &[
    resource("", "pods", "Pod"),
    resource("", "pods/exec", "PodExecOptions"),
    resource("", "pods/log", "Pod"),
    resource("", "pods/portforward", "PodPortForwardOptions"),
    cluster_scoped("", "namespaces", "Namespace"),
    resource("", "persistentvolumeclaims", "PersistentVolumeClaim"),
    resource("", "serviceaccounts", "ServiceAccount"),
    resource("", "serviceaccounts/token", "TokenRequest"),
    resource("", "services", "Service"),
    resource("", "secrets", "Secret"),
    cluster_scoped("", "nodes", "Node"),
    cluster_scoped("storage.k8s.io", "storageclasses", "StorageClass"),
    resource("", "events", "Event"),
    resource(RBAC, "roles", "Role"),
    resource(RBAC, "rolebindings", "RoleBinding"),
    // Stored as any object is (`launch --node-inspector`'s grant to read nodes); the double's
    // RBAC evaluates namespaced Roles only, so it grants nothing here.
    cluster_scoped(RBAC, "clusterroles", "ClusterRole"),
    cluster_scoped(RBAC, "clusterrolebindings", "ClusterRoleBinding"),
    cluster_scoped(AUTHZ, "selfsubjectaccessreviews", "SelfSubjectAccessReview"),
    cluster_scoped(AUTHZ, "selfsubjectrulesreviews", "SelfSubjectRulesReview"),
    resource("batch", "jobs", "Job"),
    // What a run holds while it is alive (`gc` spares it).
    resource("coordination.k8s.io", "leases", "Lease"),
    cluster_scoped(
        "authentication.k8s.io",
        "selfsubjectreviews",
        "SelfSubjectReview",
    ),
];

/// The resource `group`/`version`/`name` (a subresource as `pods/exec`).
pub(crate) fn find(group: &str, version: &str, name: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && version == "v1" && r.name == name)
}

impl Resource {
    /// `v1`, `rbac.authorization.k8s.io/v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            "v1".to_owned()
        } else {
            format!("{}/v1", self.group)
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
