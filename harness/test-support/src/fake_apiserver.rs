//! A fake Kubernetes API server behind a `tower-test` mock service, for the kube backend's
//! mocked-API tests: create/get/list/delete with the API server's semantics the backend
//! relies on. Its objects live in the cluster double's store (`cluster_double::store`: UIDs,
//! counted here so a test can name them, resourceVersions, the DELETE preconditions' check);
//! its answers are the `Status` bodies recorded in `fixtures/kube/`. On top, what a test
//! scripts of a real cluster: admission that mutates a created object, a status update racing
//! a delete, a Pod's status, SelfSubjectAccessReview answers, Pod Security refusing the
//! privileged companion, a namespace whose `default` ServiceAccount is not made yet.

use crate::cluster_double::discovery;
use crate::cluster_double::route::{Route, matches_selector, param, parse_route, query_pairs};
use crate::cluster_double::store::{Key, Preconditions, Store, add_default_account};
use http::{Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, Mutex};

pub type Mutation = Box<dyn Fn(&mut Value) + Send>;

#[derive(Default)]
pub struct State {
    /// The stored objects, with their UIDs and resourceVersions.
    store: Store,
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
    /// `verb resource[/subresource]` the caller may do (SelfSubjectAccessReview answers);
    /// empty: everything, as a cluster-admin (Kind's own identity) may.
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
    /// explicitly, `default` exists, as in every namespace of a real cluster: it is stored
    /// when first read.
    pub default_service_account_missing_gets: usize,
}

impl State {
    /// The stored `resource` (`pods`, `roles`, ...) named `name`, in any namespace.
    pub fn get(&self, resource: &str, name: &str) -> Option<&Value> {
        self.store
            .find(resource, None, name)
            .map(|(_, object)| object)
    }

    /// Every stored object of `resource`.
    pub fn objects(&self, resource: &str) -> Vec<&Value> {
        self.store.of_resource(resource).collect()
    }

    /// Whether nothing is stored that a client created: a namespace's `default`
    /// ServiceAccount, which the fake makes when it is first read (as the service-account
    /// controller makes it), does not count.
    pub fn is_empty(&self) -> bool {
        self.store
            .objects
            .iter()
            .all(|((resource, _, name), _)| resource == "/serviceaccounts" && name == "default")
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

    /// Stores an object as if something else had created it (a look-alike, a claim); its UID.
    pub fn insert(&mut self, resource: &str, object: Value) -> String {
        let group = discovery::RESOURCES
            .iter()
            .find(|r| r.name == resource)
            .map(|r| r.group)
            .unwrap_or_default();
        let key = (
            format!("{group}/{resource}"),
            object["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            object["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
        let stored = self.store.create(key, object);
        stored["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Changes the stored `resource` object `name` behind the client's back (as an admission
    /// hook, a controller or another actor would): a write, with a resourceVersion of its own.
    pub fn edit(&mut self, resource: &str, name: &str, edit: impl FnOnce(&mut Value)) {
        let Some((key, object)) = self.store.find(resource, None, name) else {
            panic!("edit: no {resource} {name} is stored");
        };
        let (key, mut object) = (key.clone(), object.clone());
        edit(&mut object);
        self.store.put(key, object);
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

fn answer(
    state: &mut State,
    method: &str,
    path: &str,
    query: &[(String, String)],
    body: Value,
) -> (u16, Value) {
    if path == "/version" {
        return (200, fixture("version.json"));
    }
    if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" && method == "POST" {
        return access_review(state, body);
    }
    // Namespaces, and namespaced resources (a namespace's Pods, claims, RBAC objects, ...).
    let route = parse_route(path)
        .filter(|r| r.namespace.is_some() || (r.resource == "namespaces" && r.sub.is_none()));
    let Some(route) = route else {
        return (404, status("status-404.json", path));
    };
    let namespace = route.namespace.clone().unwrap_or_default();
    let key = |name: &str| -> Key { (route.key(), namespace.clone(), name.to_owned()) };
    match (method, route.name.as_deref(), route.sub.as_deref()) {
        ("POST", Some(account), Some("token")) if route.resource == "serviceaccounts" => {
            if !state.store.objects.contains_key(&key(account)) {
                return (404, status("status-404.json", account));
            }
            let mut answer = body;
            answer["status"] = json!({"token": format!("token-of-{account}"), "expirationTimestamp": "2026-11-30T04:00:00Z"});
            state.tokens.push(account.to_owned());
            (201, answer)
        }
        (_, _, Some(_)) => (404, status("status-404.json", path)),
        ("POST", None, None) => {
            let name = body["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            create(state, &route, query, key(&name), body)
        }
        ("GET", None, None) => {
            let selector = param(query, "labelSelector").unwrap_or_default();
            let items: Vec<Value> = state
                .store
                .objects
                .iter()
                .filter(|((r, ns, _), o)| {
                    *r == route.key()
                        && route.namespace.as_ref().is_none_or(|want| want == ns)
                        && matches_selector(&o["metadata"]["labels"], selector)
                })
                .map(|(_, o)| o.clone())
                .collect();
            let kind = discovery::find(&route.group, &route.version, &route.resource)
                .map(|r| format!("{}List", r.kind))
                .unwrap_or_else(|| "List".into());
            let version = state.store.resource_version.to_string();
            (
                200,
                json!({"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": version}, "items": items}),
            )
        }
        ("GET", Some(name), None) => get(state, &route, key(name)),
        ("DELETE", Some(name), None) => {
            let key = key(name);
            let Some(current) = state.store.objects.get(&key).cloned() else {
                return (404, status("status-404.json", name));
            };
            if Preconditions::of(&body).check(&current).is_err() {
                // Between the read and the delete, the object changed (or is another one).
                return (409, status("status-409-precondition.json", name));
            }
            state.store.delete(&key);
            (200, current)
        }
        _ => (405, json!({"kind": "Status", "code": 405})),
    }
}

/// A SelfSubjectAccessReview answered from `allowed` (after any scripted denials).
fn access_review(state: &mut State, body: Value) -> (u16, Value) {
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
        state.allowed.is_empty() || state.allowed.contains(&asked)
    };
    review["status"] = json!({"allowed": allowed});
    (201, review)
}

fn create(
    state: &mut State,
    route: &Route,
    query: &[(String, String)],
    key: Key,
    mut object: Value,
) -> (u16, Value) {
    let name = key.2.clone();
    let pods = route.resource == "pods";
    let privileged = object["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["securityContext"]["privileged"] == json!(true));
    if pods && privileged && state.reject_privileged {
        return (403, status("status-403-pod-security.json", &name));
    }
    // The ServiceAccount admission plugin: a Pod needs its account (dry runs too).
    if pods
        && state.default_service_account_missing_gets > 0
        && object["spec"]["serviceAccountName"].is_null()
    {
        let text = status("status-403-service-account.json", &name)
            .to_string()
            .replace("POD_NS", &key.1);
        return (403, serde_json::from_str(&text).unwrap());
    }
    if param(query, "dryRun") == Some("All") {
        return (201, object);
    }
    if state.store.objects.contains_key(&key) {
        return (409, status("status-409-exists.json", &name));
    }
    let mutation = match route.resource.as_str() {
        "pods" => state.mutate_pod.as_ref(),
        "persistentvolumeclaims" => state.mutate_pvc.as_ref(),
        _ => None,
    };
    if let Some(mutate) = mutation {
        mutate(&mut object);
    }
    if pods && let Some(status) = &state.pod_status {
        object["status"] = status.clone();
    }
    (201, state.store.create(key, object))
}

fn get(state: &mut State, route: &Route, key: Key) -> (u16, Value) {
    let name = key.2.clone();
    let answer = match state.store.objects.get(&key) {
        Some(object) => (200, object.clone()),
        None if route.resource == "serviceaccounts" && name == "default" => {
            if state.default_service_account_missing_gets > 0 {
                state.default_service_account_missing_gets -= 1;
                (404, status("status-404.json", &name))
            } else {
                // Made by the service-account controller when the namespace appeared.
                add_default_account(&mut state.store, &key.1);
                (200, state.store.objects[&key].clone())
            }
        }
        None => (404, status("status-404.json", &name)),
    };
    // The object changes right after this read was answered (a status update).
    if let Some(n) = state.bump_after_gets.as_mut() {
        if *n == 0 {
            state.bump_after_gets = None;
            if let Some(object) = state.store.objects.get(&key).cloned() {
                state.store.put(key, object);
            }
        } else {
            *n -= 1;
        }
    }
    answer
}

/// A kube client whose requests the fake answers, and the fake's state.
pub fn start(namespace: &str) -> (kube::Client, Arc<Mutex<State>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let state = Arc::new(Mutex::new(State {
        // Counted UIDs: a test names the UID a create returned.
        store: Store::counting_uids(),
        ..State::default()
    }));
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
                answer(&mut state, &method, &path, &query_pairs(Some(&query)), body)
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
