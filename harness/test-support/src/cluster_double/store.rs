//! What the double holds: the object store (UIDs, resourceVersions), tokens, the runtime's
//! Pods and claim volumes, and what tests read back ([`DoubleState`]).

use super::faults::Faults;
use kandev_harness::backend::local::attach::PodStreams;
use kandev_harness::backend::{Backend, PodRef};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

/// Who a request is from (its bearer token).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// The kubeconfig's user: may do everything (a cluster admin).
    Admin,
    /// A token from `serviceaccounts/<name>/token`: only what Roles bound to it grant.
    ServiceAccount { namespace: String, name: String },
}

impl Identity {
    pub fn user_name(&self) -> String {
        match self {
            Identity::Admin => "kube-double-admin".into(),
            Identity::ServiceAccount { namespace, name } => {
                format!("system:serviceaccount:{namespace}:{name}")
            }
        }
    }
}

/// A DELETE the double carried out, with the UID precondition it came with.
#[derive(Debug, Clone)]
pub struct Deletion {
    pub resource: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub precondition_uid: Option<String>,
}

/// A request as it reached the double (authenticated or not): what a test asserts about
/// how a client speaks to the API server.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// Path and query.
    pub uri: String,
    pub content_type: Option<String>,
    pub accept: Option<String>,
    /// A list asked as a watch (`watch` set and not `0`/`false`), which the double refuses.
    pub watch: bool,
}

/// A mutating admission hook: changes a Pod (as JSON) before it is stored.
pub type PodMutator = Box<dyn Fn(&mut Value) + Send + Sync>;

/// Where a stored Pod's containers are on the runtime.
#[derive(Debug, Clone)]
pub(crate) enum Running {
    Creating,
    Ready(PodRef),
    Failed(String),
    /// Never bound to the node: the scheduler's message (`PodScheduled` False, reason
    /// `Unschedulable`), as the real scheduler words it (`scheduler`).
    Unschedulable(String),
    /// The node cannot pull this container's image: the kubelet's `ErrImagePull`.
    PullFailed {
        container: String,
        image: String,
    },
    /// A volume cannot be set up yet (a Secret it projects does not exist): the kubelet's
    /// `FailedMount`, retried until it can or the Pod is deleted; its message.
    MountFailed(String),
}

/// What a bound token is bound to: it authenticates only while that object (this UID) is
/// stored, as the API server checks a bound service-account token's Pod or Secret.
#[derive(Debug, Clone)]
pub(crate) struct Bound {
    pub key: Key,
    pub uid: String,
}

/// (resource key `group/resource`, namespace or "", name)
pub(crate) type Key = (String, String, String);

/// Where a new object's UID comes from.
#[derive(Default)]
enum Uids {
    /// Random (version 4), as an API server's.
    #[default]
    Random,
    /// `00000000-0000-4000-8000-000000000001`, `...002`, ...: what a test names in advance.
    Counted(u64),
}

/// The stored objects and what the API server keeps about them: one model of UIDs,
/// resourceVersions and DELETE preconditions for the double and for the tower-test fake
/// (`fake_apiserver`), which keeps one of these.
#[derive(Default)]
pub(crate) struct Store {
    /// Read freely; written only through [`Store::create`], [`Store::put`] and
    /// [`Store::delete`] (each a new `resourceVersion`).
    pub objects: BTreeMap<Key, Value>,
    pub resource_version: u64,
    pub tokens: HashMap<String, Identity>,
    /// Tokens bound to an object (a Pod's projected token, a token Secret's), by token.
    pub bound: HashMap<String, Bound>,
    /// By the double's Pod UID.
    pub running: HashMap<String, Running>,
    /// The runtime's volume behind each claim, by the double's claim UID.
    pub volumes: HashMap<String, kandev_harness::backend::WorkspaceRef>,
    pub deletions: Vec<Deletion>,
    pub seen: Vec<Seen>,
    uids: Uids,
}

impl Store {
    /// Who `token` authenticates as: None for a token never issued, or one bound to an
    /// object that is gone (deleted, or replaced by one of the same name).
    pub fn authenticate(&self, token: &str) -> Option<Identity> {
        let identity = self.tokens.get(token)?;
        if let Some(bound) = self.bound.get(token)
            && self
                .objects
                .get(&bound.key)
                .and_then(|o| o["metadata"]["uid"].as_str())
                != Some(bound.uid.as_str())
        {
            return None;
        }
        Some(identity.clone())
    }

    /// Issues a token for the ServiceAccount `namespace`/`name`, bound to the object `key`
    /// (`uid`) when given.
    pub fn issue_token(&mut self, namespace: &str, name: &str, bound: Option<Bound>) -> String {
        let token = format!("double-sa-{}", uuid::Uuid::new_v4().simple());
        self.tokens.insert(
            token.clone(),
            Identity::ServiceAccount {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
            },
        );
        if let Some(bound) = bound {
            self.bound.insert(token.clone(), bound);
        }
        token
    }

    /// Forgets the tokens bound to the object of `uid` (they no longer authenticate anyway).
    pub fn forget_bound_tokens(&mut self, uid: &str) {
        let gone: Vec<String> = self
            .bound
            .iter()
            .filter(|(_, b)| b.uid == uid)
            .map(|(t, _)| t.clone())
            .collect();
        for token in gone {
            self.bound.remove(&token);
            self.tokens.remove(&token);
        }
    }

    /// A store whose UIDs count up from `00000000-0000-4000-8000-000000000001`.
    pub fn counting_uids() -> Store {
        Store {
            uids: Uids::Counted(0),
            ..Store::default()
        }
    }

    /// What the API server sets on every new object, a dry run's too: its UID and creation
    /// time.
    pub fn stamp_new(&mut self, object: &mut Value) {
        let uid = match &mut self.uids {
            Uids::Random => uuid::Uuid::new_v4().to_string(),
            Uids::Counted(n) => {
                *n += 1;
                format!("00000000-0000-4000-8000-{n:012}")
            }
        };
        object["metadata"]["uid"] = json!(uid);
        object["metadata"]["creationTimestamp"] = json!(now());
    }

    /// Stores a new object, stamped ([`Store::stamp_new`]); returns it as stored.
    pub fn create(&mut self, key: Key, mut object: Value) -> Value {
        self.stamp_new(&mut object);
        self.put(key, object)
    }

    /// The stored object of `resource` (`pods`, `roles`: core or the group's own name) named
    /// `name`, in `namespace` (any, if None).
    pub fn find(
        &self,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<(&Key, &Value)> {
        self.objects.iter().find(|((r, ns, n), _)| {
            r.rsplit('/').next() == Some(resource)
                && namespace.is_none_or(|want| want == ns)
                && n == name
        })
    }

    /// Every stored object of `resource`, in every namespace.
    pub fn of_resource<'a>(&'a self, resource: &str) -> impl Iterator<Item = &'a Value> + 'a {
        let resource = resource.to_owned();
        self.objects
            .iter()
            .filter(move |((r, _, _), _)| r.rsplit('/').next() == Some(resource.as_str()))
            .map(|(_, v)| v)
    }

    /// Stores `object` (created or changed) with a resourceVersion of its own, as the API
    /// server versions every write; returns it as stored.
    pub fn put(&mut self, key: Key, mut object: Value) -> Value {
        self.resource_version += 1;
        object["metadata"]["resourceVersion"] = json!(self.resource_version.to_string());
        self.objects.insert(key, object.clone());
        object
    }

    /// Removes an object (its deletion gets a `resourceVersion` of its own, as from an
    /// API server).
    pub fn delete(&mut self, key: &Key) -> Option<Value> {
        let before = self.objects.remove(key)?;
        self.resource_version += 1;
        Some(before)
    }

    /// Records a core v1 Event about `involved` (a stored object), as `component` reports
    /// one (`kubelet`, `job-controller`); `kind` is `Normal` or `Warning`.
    pub fn event(
        &mut self,
        involved: &Value,
        (kind, reason): (&str, &str),
        message: &str,
        component: &str,
    ) {
        let ns = involved["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default();
        let name = involved["metadata"]["name"].as_str().unwrap_or_default();
        let event = format!(
            "{name}.{}",
            &uuid::Uuid::new_v4().simple().to_string()[..16]
        );
        let time = now();
        self.create(
            ("/events".into(), ns.to_owned(), event.clone()),
            json!({"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": event, "namespace": ns},
                "involvedObject": {"apiVersion": involved["apiVersion"], "kind": involved["kind"],
                    "namespace": ns, "name": name, "uid": involved["metadata"]["uid"]},
                "reason": reason, "message": message, "type": kind, "count": 1,
                "source": {"component": component},
                "reportingComponent": component, "reportingInstance": "",
                "firstTimestamp": time, "lastTimestamp": time}),
        );
    }

    /// Removes every object `gone` selects.
    pub fn delete_where(&mut self, gone: impl Fn(&Key) -> bool) {
        let keys: Vec<Key> = self.objects.keys().filter(|k| gone(k)).cloned().collect();
        for key in keys {
            self.delete(&key);
        }
    }
}

/// What the double holds; tests read it (and set an admission hook) through
/// [`KubeDouble::state`](super::KubeDouble::state).
pub struct DoubleState {
    pub(crate) store: Mutex<Store>,
    pub(crate) runtime: Option<Arc<dyn Backend>>,
    /// exec and port-forward streams into the runtime's Pods (on the engine `DOCKER_HOST`
    /// names, where the local backend runs them).
    pub(crate) streams: Option<PodStreams>,
    /// The engine the runtime's Pods run on: their containers' states and logs, read as a
    /// kubelet reads its runtime's.
    pub(crate) docker: Option<bollard::Docker>,
    /// Where the Pods reach the API server ([`KubeDouble::pod_address`](super::KubeDouble::pod_address)).
    pub(crate) pod_address: Option<std::net::SocketAddr>,
    /// The CA of the server certificate (PEM): every Pod's `ca.crt`.
    pub(crate) ca_pem: String,
    /// A folder per Pod (by UID) holding what its secret and token volumes show (the
    /// kubelet's volume folders), removed with the Pod.
    pub(crate) pod_files: std::path::PathBuf,
    pub(crate) mutator: Mutex<Option<PodMutator>>,
    /// What the cluster's own components do beside the API server (`controllers`).
    pub(crate) behaviours: super::behaviours::Behaviours,
    /// The faults and connection limits a test switched on (`faults`).
    pub(crate) faults: std::sync::Arc<Faults>,
}

impl DoubleState {
    pub(crate) fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The faults and connection limits a test switches on.
    pub fn faults(&self) -> &std::sync::Arc<Faults> {
        &self.faults
    }

    /// Sets (or with `None` removes) the mutating admission hook applied to every Pod create.
    pub fn set_pod_mutator(&self, mutator: Option<PodMutator>) {
        *self.mutator.lock().unwrap_or_else(|p| p.into_inner()) = mutator;
    }

    /// A stored object: `resource` is `pods`, `roles`, ... (core or the group's own name).
    pub fn object(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        let store = self.store();
        store
            .find(resource, Some(namespace), name)
            .map(|(_, v)| v.clone())
    }

    /// Every stored object of `resource` (`pods`, `namespaces`, ...), in every namespace.
    pub fn objects(&self, resource: &str) -> Vec<Value> {
        self.store().of_resource(resource).cloned().collect()
    }

    /// Creates a Namespace with `labels` (as another client of the API server would), with
    /// its `default` ServiceAccount.
    pub fn create_namespace(&self, name: &str, labels: &[(&str, &str)]) {
        let mut store = self.store();
        create_namespace_objects(&mut store, name);
        let key: Key = ("/namespaces".into(), String::new(), name.into());
        if let Some(mut namespace) = store.objects.get(&key).cloned() {
            for (k, v) in labels {
                namespace["metadata"]["labels"][*k] = json!(v);
            }
            // Labelled after its create: a change of its own, as an API server versions it.
            store.put(key, namespace);
        }
    }

    /// Stores `object` of core `resource` (`services`, ...) in `namespace` as another client
    /// of the API server would create it (UID, resourceVersion and creationTimestamp set): a
    /// cluster's own objects beside the harness's, for tests that break the cluster.
    pub fn create_object(&self, resource: &str, namespace: &str, mut object: Value) {
        let mut store = self.store();
        let Some(name) = object["metadata"]["name"].as_str().map(str::to_owned) else {
            panic!("create_object: the {resource} object has no metadata.name");
        };
        object["metadata"]["namespace"] = json!(namespace);
        store.create((format!("/{resource}"), namespace.to_owned(), name), object);
    }

    /// Every DELETE carried out so far.
    pub fn deletions(&self) -> Vec<Deletion> {
        self.store().deletions.clone()
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Seen> {
        self.store().seen.clone()
    }

    /// The runtime's Pod behind the double's Pod `uid`, once it is created there.
    pub fn runtime_pod(&self, uid: &str) -> Option<PodRef> {
        match self.store().running.get(uid) {
            Some(Running::Ready(pod)) => Some(pod.clone()),
            _ => None,
        }
    }
}

/// The time now as the API server writes it (RFC 3339, whole seconds).
pub(crate) fn now() -> String {
    timestamp(k8s_openapi::jiff::Timestamp::now())
}

/// `time` as the API server writes a timestamp (RFC 3339, whole seconds).
pub(crate) fn timestamp(time: k8s_openapi::jiff::Timestamp) -> String {
    time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Stores a namespace and its `default` service account (what the controller would create).
pub(crate) fn create_namespace_objects(store: &mut Store, name: &str) {
    store.create(
        ("/namespaces".into(), String::new(), name.into()),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name},
            "status": {"phase": "Active"}}),
    );
    add_default_account(store, name);
}

/// Stores the `default` ServiceAccount of namespace `ns`, as the service-account controller
/// creates it in every namespace.
pub(crate) fn add_default_account(store: &mut Store, ns: &str) {
    store.create(
        ("/serviceaccounts".into(), ns.into(), "default".into()),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": ns}}),
    );
}

/// A DELETE's `preconditions`: the UID and resourceVersion the object must still have.
#[derive(Debug, Clone, Default)]
pub(crate) struct Preconditions {
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// A precondition the stored object does not meet: the field as the API server names it
/// (`UID`, `ResourceVersion`), the wanted and the stored value.
pub(crate) struct Unmet {
    pub field: &'static str,
    pub wanted: String,
    pub actual: String,
}

impl Preconditions {
    /// Read from a DELETE's body (`DeleteOptions`; none without a body).
    pub fn of(options: &Value) -> Preconditions {
        let read = |field: &str| options["preconditions"][field].as_str().map(str::to_owned);
        Preconditions {
            uid: read("uid"),
            resource_version: read("resourceVersion"),
        }
    }

    /// Whether `object` meets them, the UID first, as the API server's store checks them.
    pub fn check(&self, object: &Value) -> Result<(), Unmet> {
        let checks = [
            ("UID", &self.uid, "uid"),
            ("ResourceVersion", &self.resource_version, "resourceVersion"),
        ];
        for (field, wanted, stored) in checks {
            let actual = object["metadata"][stored].as_str().unwrap_or_default();
            if let Some(wanted) = wanted
                && wanted != actual
            {
                return Err(Unmet {
                    field,
                    wanted: wanted.clone(),
                    actual: actual.to_owned(),
                });
            }
        }
        Ok(())
    }
}
