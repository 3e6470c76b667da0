//! What the double serves, as an API server's discovery documents describe it: `/version`,
//! `/api` (APIVersions), `/api/v1` and `/apis/<group>/<version>` (APIResourceList),
//! `/apis` (APIGroupList) and `/apis/<group>` (APIGroup). [`RESOURCES`] is also what the
//! router serves: a resource not listed there is answered 404, as by an API server.
//!
//! **Legacy discovery only.** kubectl (client-go 1.26+) first asks for the aggregated
//! discovery document (`Accept: application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,
//! ...,application/json`) and decides what it got from the answer's `Content-Type`: only a
//! media type with `g=apidiscovery.k8s.io;v=v2` (or `v2beta1`) and `as=APIGroupDiscoveryList`
//! is read as aggregated; anything else is parsed as the legacy `APIVersions`/`APIGroupList`
//! and the client then fetches each group version's `APIResourceList`
//! (client-go `discovery/discovery_client.go`, `downloadLegacy`/`downloadAPIs`: "Switch on
//! content-type server responded with: aggregated or unaggregated", `isV2ContentType`). The
//! double answers those with `Content-Type: application/json`, as an API server without
//! aggregated discovery (before 1.26, or with the `AggregatedDiscoveryEndpoint` feature off)
//! does; kubectl's request lists plain `application/json` last for exactly that server
//! (KEP-3352, "Aggregated Discovery": clients fall back to the legacy endpoints).

use serde_json::{Value, json};

/// One resource (or subresource) the double serves.
pub(crate) struct Resource {
    /// "" for the core group.
    pub group: &'static str,
    pub version: &'static str,
    /// `pods`, or `pods/exec` for a subresource.
    pub name: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub verbs: &'static [&'static str],
    pub short_names: &'static [&'static str],
    pub categories: &'static [&'static str],
    /// A subresource whose kind is of another group (TokenRequest): (group, version).
    pub kind_group: Option<(&'static str, &'static str)>,
}

/// The verbs the double carries out on a stored resource (no `update`: see the router;
/// no `deletecollection`).
const STORED: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

const fn resource(
    group: &'static str,
    name: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short_names: &'static [&'static str],
) -> Resource {
    Resource {
        group,
        version: "v1",
        name,
        singular,
        kind,
        namespaced,
        verbs: STORED,
        short_names,
        categories: &[],
        kind_group: None,
    }
}

const fn sub(
    group: &'static str,
    name: &'static str,
    kind: &'static str,
    verbs: &'static [&'static str],
) -> Resource {
    Resource {
        group,
        version: "v1",
        name,
        singular: "",
        kind,
        namespaced: true,
        verbs,
        short_names: &[],
        categories: &[],
        kind_group: None,
    }
}

/// Everything the double serves (names, kinds, short names and verbs as a v1.36 API server
/// lists them, less the verbs the double does not carry out).
pub(crate) const RESOURCES: &[Resource] = &[
    Resource {
        categories: &["all"],
        ..resource("", "pods", "pod", "Pod", true, &["po"])
    },
    sub("", "pods/exec", "PodExecOptions", &["create", "get"]),
    sub("", "pods/log", "Pod", &["get"]),
    sub(
        "",
        "pods/portforward",
        "PodPortForwardOptions",
        &["create", "get"],
    ),
    resource("", "namespaces", "namespace", "Namespace", false, &["ns"]),
    resource(
        "",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        "PersistentVolumeClaim",
        true,
        &["pvc"],
    ),
    resource(
        "",
        "serviceaccounts",
        "serviceaccount",
        "ServiceAccount",
        true,
        &["sa"],
    ),
    Resource {
        kind_group: Some(("authentication.k8s.io", "v1")),
        ..sub("", "serviceaccounts/token", "TokenRequest", &["create"])
    },
    Resource {
        categories: &["all"],
        ..resource("", "services", "service", "Service", true, &["svc"])
    },
    resource("", "secrets", "secret", "Secret", true, &[]),
    resource("", "nodes", "node", "Node", false, &["no"]),
    resource(
        "",
        "resourcequotas",
        "resourcequota",
        "ResourceQuota",
        true,
        &["quota"],
    ),
    resource(
        "",
        "limitranges",
        "limitrange",
        "LimitRange",
        true,
        &["limits"],
    ),
    resource(
        "storage.k8s.io",
        "storageclasses",
        "storageclass",
        "StorageClass",
        false,
        &["sc"],
    ),
    resource("", "events", "event", "Event", true, &["ev"]),
    resource("events.k8s.io", "events", "event", "Event", true, &["ev"]),
    resource(
        "rbac.authorization.k8s.io",
        "roles",
        "role",
        "Role",
        true,
        &[],
    ),
    resource(
        "rbac.authorization.k8s.io",
        "rolebindings",
        "rolebinding",
        "RoleBinding",
        true,
        &[],
    ),
    Resource {
        verbs: &["create"],
        ..resource(
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            "selfsubjectaccessreview",
            "SelfSubjectAccessReview",
            false,
            &[],
        )
    },
    Resource {
        verbs: &["create"],
        ..resource(
            "authorization.k8s.io",
            "selfsubjectrulesreviews",
            "selfsubjectrulesreview",
            "SelfSubjectRulesReview",
            false,
            &[],
        )
    },
    Resource {
        categories: &["all"],
        ..resource("batch", "jobs", "job", "Job", true, &[])
    },
    Resource {
        verbs: &["create"],
        ..resource(
            "authentication.k8s.io",
            "selfsubjectreviews",
            "selfsubjectreview",
            "SelfSubjectReview",
            false,
            &[],
        )
    },
];

/// The groups, in the order an API server lists them (core first, then by priority).
const GROUPS: &[&str] = &[
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "batch",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
];

/// The resource `group`/`version`/`name` (a subresource as `pods/exec`).
pub(crate) fn find(group: &str, version: &str, name: &str) -> Option<&'static Resource> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.name == name)
}

fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

impl Resource {
    /// `v1`, `rbac.authorization.k8s.io/v1`.
    pub fn api_version(&self) -> String {
        api_version(self.group, self.version)
    }

    fn listed(&self) -> Value {
        let mut entry = json!({
            "name": self.name, "singularName": self.singular, "namespaced": self.namespaced,
            "kind": self.kind, "verbs": self.verbs,
        });
        if !self.short_names.is_empty() {
            entry["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            entry["categories"] = json!(self.categories);
        }
        if let Some((group, version)) = self.kind_group {
            entry["group"] = json!(group);
            entry["version"] = json!(version);
        }
        entry
    }
}

/// `/version` (what `kubectl version` prints as the server's).
pub(crate) fn version() -> Value {
    json!({"major": "1", "minor": "36", "gitVersion": "v1.36.0-kube-double",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "none (a test double)",
        "compiler": "rustc", "platform": "linux/amd64"})
}

/// The discovery document at `path`, if `path` is one.
pub(crate) fn document(path: &str) -> Option<Value> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let group_entry = |group: &str| {
        let version = json!({"groupVersion": api_version(group, "v1"), "version": "v1"});
        json!({"name": group, "versions": [version], "preferredVersion": version})
    };
    Some(match segments.as_slice() {
        ["api"] => json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
        ["apis"] => json!({"kind": "APIGroupList", "apiVersion": "v1",
            "groups": GROUPS.iter().map(|g| group_entry(g)).collect::<Vec<_>>()}),
        ["apis", group] if GROUPS.contains(group) => {
            let mut entry = group_entry(group);
            entry["kind"] = json!("APIGroup");
            entry["apiVersion"] = json!("v1");
            entry
        }
        ["version"] => version(),
        ["openapi", "v3"] => openapi_paths(),
        ["openapi", "v3", "api", "v1"] => openapi("", "v1"),
        ["openapi", "v3", "apis", group, "v1"] if GROUPS.contains(group) => openapi(group, "v1"),
        ["api", "v1"] => resource_list("", "v1"),
        ["apis", group, "v1"] if GROUPS.contains(group) => resource_list(group, "v1"),
        _ => return None,
    })
}

fn resource_list(group: &str, version: &str) -> Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1",
        "groupVersion": api_version(group, version),
        "resources": RESOURCES.iter().filter(|r| r.group == group && r.version == version)
            .map(Resource::listed).collect::<Vec<_>>()})
}

/// `/openapi/v3`: where each group version's OpenAPI document is (kube-openapi
/// `handler3.OpenAPIV3Discovery`).
fn openapi_paths() -> Value {
    let mut paths = serde_json::Map::new();
    paths.insert(
        "api/v1".into(),
        json!({"serverRelativeURL": "/openapi/v3/api/v1?hash=kube-double"}),
    );
    for group in GROUPS {
        paths.insert(
            format!("apis/{group}/v1"),
            json!({"serverRelativeURL": format!("/openapi/v3/apis/{group}/v1?hash=kube-double")}),
        );
    }
    json!({"paths": paths})
}

/// A group version's OpenAPI v3 document, reduced to what kubectl reads of it: each
/// object's PATCH operation with its `x-kubernetes-group-version-kind` and the
/// `fieldValidation` query parameter. `kubectl apply`/`create -f` validate through it: kubectl
/// asks whether the server validates fields itself (kubectl `resource/query_param_verifier_v3.go`,
/// `supportsQueryParamV3`: the PATCH operation of the kind names `fieldValidation`), and
/// without any OpenAPI document fails with "failed to download openapi" unless
/// `--validate=false`. No schemas and no `requestBody`: kubectl then computes an apply's
/// strategic merge patch from its own compiled-in types (`apply/patcher.go`, the "builtins"
/// fallback), as it does for a server whose document lacks the patch's media types.
fn openapi(group: &str, version: &str) -> Value {
    let mut paths = serde_json::Map::new();
    for r in RESOURCES
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .filter(|r| !r.name.contains('/') && r.verbs.contains(&"patch"))
    {
        let prefix = if group.is_empty() {
            "/api/v1".to_owned()
        } else {
            format!("/apis/{group}/{version}")
        };
        let path = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", r.name)
        } else {
            format!("{prefix}/{}/{{name}}", r.name)
        };
        paths.insert(
            path,
            json!({"patch": {
                "operationId": format!("patch{}", r.kind),
                "parameters": [
                    {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                    {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                    {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
                ],
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": r.kind},
            }}),
        );
    }
    json!({"openapi": "3.0.0", "info": {"title": "Kubernetes (kube-double)", "version": "v1.36.0"},
        "paths": paths, "components": {}})
}
