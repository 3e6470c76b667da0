//! A fake Kubernetes API server behind a `tower-test` mock service: Pods and PVCs of one
//! namespace in memory, create/get/list/delete with the API server's semantics that the
//! backend relies on (UIDs, resourceVersions, delete preconditions, `Status` bodies from
//! `fixtures/kube/`), and hooks for what a real cluster does on its own: admission that
//! mutates a created object, a status update racing a delete, a Pod's status.

use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

pub type Mutation = Box<dyn Fn(&mut Value) + Send>;

#[derive(Default)]
pub struct State {
    /// `pods` / `persistentvolumeclaims` -> name -> object.
    pub objects: BTreeMap<String, BTreeMap<String, Value>>,
    /// Every request: method, path with query, body.
    pub requests: Vec<(String, String, Value)>,
    /// Applied to each created Pod / PVC before it is stored (mutating admission).
    pub mutate_pod: Option<Mutation>,
    pub mutate_pvc: Option<Mutation>,
    /// The `status` a created Pod gets.
    pub pod_status: Option<Value>,
    /// Bump the object's resourceVersion right after answering the GET after this many more
    /// (a status update racing a delete).
    pub bump_after_gets: Option<usize>,
    /// `verb resource[/subresource]` the caller may do (SelfSubjectAccessReview answers).
    pub allowed: Vec<String>,
    /// Pod Security admission refuses privileged Pods (dry runs included).
    pub reject_privileged: bool,
    /// Service accounts a token was requested for.
    pub tokens: Vec<String>,
    /// How many SelfSubjectAccessReviews still answer "not allowed" whatever `allowed` says
    /// (a RoleBinding just created, not yet seen by the authorizer's cache).
    pub ssar_denials: usize,
    /// How many more GETs of the namespace's `default` ServiceAccount answer 404 before the
    /// service-account controller has created it (a namespace just created). Unless stored
    /// explicitly, `default` exists, as in every namespace of a real cluster.
    pub default_service_account_missing_gets: usize,
    next_uid: u64,
    next_version: u64,
}

impl State {
    pub fn get(&self, resource: &str, name: &str) -> Option<&Value> {
        self.objects.get(resource).and_then(|o| o.get(name))
    }

    /// The DELETE requests' bodies for `resource/name`.
    pub fn deletes(&self, resource: &str, name: &str) -> Vec<Value> {
        self.requests
            .iter()
            .filter(|(m, p, _)| {
                let path = p.split('?').next().unwrap_or_default();
                m == "DELETE" && path.ends_with(&format!("/{resource}/{name}"))
            })
            .map(|(_, _, b)| b.clone())
            .collect()
    }

    /// Stores an object as if something else had created it (a look-alike, a claim).
    pub fn insert(&mut self, resource: &str, mut object: Value) -> String {
        let uid = self.uid();
        object["metadata"]["uid"] = json!(uid);
        object["metadata"]["resourceVersion"] = json!(self.version());
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self.objects
            .entry(resource.into())
            .or_default()
            .insert(name, object);
        uid
    }

    fn uid(&mut self) -> String {
        self.next_uid += 1;
        format!("00000000-0000-4000-8000-{:012}", self.next_uid)
    }

    fn version(&mut self) -> String {
        self.next_version += 1;
        self.next_version.to_string()
    }
}

fn fixture(name: &str) -> Value {
    // This crate is `harness/test-support/`: the workspace root is two folders up.
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .join("fixtures/kube")
        .join(name);
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

fn status(name: &str, object: &str) -> Value {
    let text = fixture(name).to_string().replace("NAME", object);
    serde_json::from_str(&text).unwrap()
}

fn matches_selector(object: &Value, selector: &str) -> bool {
    selector.split(',').filter(|s| !s.is_empty()).all(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        object["metadata"]["labels"][k].as_str() == Some(v)
    })
}

fn query_param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| {
            v.replace("%3D", "=")
                .replace("%2C", ",")
                .replace("%2F", "/")
                .replace("%3A", ":")
        })
    })
}

fn answer(state: &mut State, method: &str, path: &str, query: &str, body: Value) -> (u16, Value) {
    if path == "/version" {
        return (200, fixture("version.json"));
    }
    if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" && method == "POST" {
        let attributes = &body["spec"]["resourceAttributes"];
        let mut asked = format!(
            "{} {}",
            attributes["verb"].as_str().unwrap_or_default(),
            attributes["resource"].as_str().unwrap_or_default()
        );
        if let Some(sub) = attributes["subresource"].as_str() {
            asked.push('/');
            asked.push_str(sub);
        }
        let mut review = body.clone();
        let allowed = if state.ssar_denials > 0 {
            state.ssar_denials -= 1;
            false
        } else {
            state.allowed.contains(&asked)
        };
        review["status"] = json!({"allowed": allowed});
        return (201, review);
    }
    // /api/v1/... or /apis/<group>/<version>/...; then namespaces[/ns[/resource[/name[/sub]]]].
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let rest = match parts.as_slice() {
        ["api", "v1", rest @ ..] => rest,
        ["apis", _, _, rest @ ..] => rest,
        _ => return (404, status("status-404.json", path)),
    };
    let (resource, name) = match rest {
        ["namespaces"] => ("namespaces".to_owned(), None),
        ["namespaces", name] => ("namespaces".to_owned(), Some(name.to_string())),
        ["namespaces", _, resource] => (resource.to_string(), None),
        ["namespaces", _, resource, name] => (resource.to_string(), Some(name.to_string())),
        ["namespaces", _, "serviceaccounts", account, "token"] if method == "POST" => {
            if state.get("serviceaccounts", account).is_none() {
                return (404, status("status-404.json", account));
            }
            let mut answer = body.clone();
            answer["status"] = json!({"token": format!("token-of-{account}"), "expirationTimestamp": "2026-11-30T04:00:00Z"});
            state.tokens.push(account.to_string());
            return (201, answer);
        }
        _ => return (404, status("status-404.json", path)),
    };
    match (method, name) {
        ("POST", None) => {
            let mut object = body;
            let name = object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let privileged = object["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["securityContext"]["privileged"] == json!(true));
            if resource == "pods" && privileged && state.reject_privileged {
                return (403, status("status-403-pod-security.json", &name));
            }
            // The ServiceAccount admission plugin: a Pod needs its account (dry runs too).
            if resource == "pods"
                && state.default_service_account_missing_gets > 0
                && object["spec"]["serviceAccountName"].is_null()
            {
                let namespace = rest.get(1).copied().unwrap_or_default();
                let text = status("status-403-service-account.json", &name)
                    .to_string()
                    .replace("POD_NS", namespace);
                return (403, serde_json::from_str(&text).unwrap());
            }
            if query.contains("dryRun=All") {
                return (201, object);
            }
            if state.get(&resource, &name).is_some() {
                return (409, status("status-409-exists.json", &name));
            }
            let (uid, version) = (state.uid(), state.version());
            object["metadata"]["uid"] = json!(uid);
            object["metadata"]["resourceVersion"] = json!(version);
            object["metadata"]["creationTimestamp"] = json!("2026-11-30T00:00:00Z");
            let mutation = match resource.as_str() {
                "pods" => state.mutate_pod.as_ref(),
                "persistentvolumeclaims" => state.mutate_pvc.as_ref(),
                _ => None,
            };
            if let Some(mutate) = mutation {
                mutate(&mut object);
            }
            if resource == "pods"
                && let Some(status) = &state.pod_status
            {
                object["status"] = status.clone();
            }
            state
                .objects
                .entry(resource)
                .or_default()
                .insert(name, object.clone());
            (201, object)
        }
        ("GET", None) => {
            let selector = query_param(query, "labelSelector").unwrap_or_default();
            let items: Vec<Value> = state
                .objects
                .get(&resource)
                .into_iter()
                .flat_map(|o| o.values())
                .filter(|o| matches_selector(o, &selector))
                .cloned()
                .collect();
            let kind = match resource.as_str() {
                "pods" => "PodList",
                "namespaces" => "NamespaceList",
                _ => "PersistentVolumeClaimList",
            };
            (
                200,
                json!({"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": "99"}, "items": items}),
            )
        }
        ("GET", Some(name)) => {
            let answer = match state.get(&resource, &name) {
                Some(o) => (200, o.clone()),
                None if resource == "serviceaccounts" && name == "default" => {
                    if state.default_service_account_missing_gets > 0 {
                        state.default_service_account_missing_gets -= 1;
                        (404, status("status-404.json", &name))
                    } else {
                        let namespace = rest.get(1).copied().unwrap_or_default();
                        (
                            200,
                            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                                "metadata": {"name": "default", "namespace": namespace,
                                    "uid": "00000000-0000-4000-8000-00000000d0d0", "resourceVersion": "1"}}),
                        )
                    }
                }
                None => (404, status("status-404.json", &name)),
            };
            // The object changes right after this read was answered (a status update).
            if let Some(n) = state.bump_after_gets.as_mut() {
                if *n == 0 {
                    state.bump_after_gets = None;
                    let version = state.version();
                    if let Some(o) = state
                        .objects
                        .get_mut(&resource)
                        .and_then(|o| o.get_mut(&name))
                    {
                        o["metadata"]["resourceVersion"] = json!(version);
                    }
                } else {
                    *n -= 1;
                }
            }
            answer
        }
        ("DELETE", Some(name)) => {
            let Some(current) = state.get(&resource, &name).cloned() else {
                return (404, status("status-404.json", &name));
            };
            let pre = &body["preconditions"];
            if let Some(uid) = pre["uid"].as_str()
                && Some(uid) != current["metadata"]["uid"].as_str()
            {
                return (409, status("status-409-precondition.json", &name));
            }
            if let Some(version) = pre["resourceVersion"].as_str()
                && Some(version) != current["metadata"]["resourceVersion"].as_str()
            {
                // Between the read and the delete, the status moved on.
                return (409, status("status-409-precondition.json", &name));
            }
            state.objects.get_mut(&resource).map(|o| o.remove(&name));
            (200, current)
        }
        _ => (405, json!({"kind": "Status", "code": 405})),
    }
}

/// A kube client whose requests the fake answers, and the fake's state.
pub fn start(namespace: &str) -> (kube::Client, Arc<Mutex<State>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let state = Arc::new(Mutex::new(State::default()));
    let shared = state.clone();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            let method = request.method().to_string();
            let path = request.uri().path().to_owned();
            let query = request.uri().query().unwrap_or_default().to_owned();
            let bytes = request
                .into_body()
                .collect_bytes()
                .await
                .unwrap_or_default();
            let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let (code, answer) = {
                let mut state = shared.lock().unwrap();
                state
                    .requests
                    .push((method.clone(), format!("{path}?{query}"), body.clone()));
                answer(&mut state, &method, &path, &query, body)
            };
            let response = Response::builder()
                .status(StatusCode::from_u16(code).unwrap())
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                .unwrap();
            send.send_response(response);
        }
    });
    (kube::Client::new(service, namespace), state)
}

pub fn running_status() -> Value {
    fixture("pod-status-running.json")
}

pub fn image_pull_backoff_status() -> Value {
    fixture("pod-status-image-pull-backoff.json")
}
