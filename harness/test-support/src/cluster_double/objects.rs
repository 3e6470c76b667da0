//! The verbs on stored objects: create (its admission an ordered list, [`ADMISSION`], then
//! what the cluster does once the object is stored), get, list, update, patch, delete, and
//! pods/log.

use super::request::Ctx;
use super::route::{container_param, param};
use super::runtime::{remove_namespace, remove_pod, remove_volume, run_pod, with_status};
use super::status::{Reply, full, json_reply, not_found, status};
use super::store::{Deletion, Preconditions, Running, add_default_account, now};
use super::{containers, finalizers, patch, serviceaccount, storage};
use base64::Engine;
use futures_util::StreamExt;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

impl Ctx<'_> {
    /// A cluster-scoped object keeps no namespace (`EnsureObjectNamespaceMatchesRequestNamespace`
    /// in apiserver `pkg/registry/rest/meta.go`; the 400 of a namespace other than the
    /// request's is the real API server's to answer).
    fn clear_cluster_namespace(&self, object: &mut Value) {
        if self.route.namespace.is_none()
            && let Some(meta) = object["metadata"].as_object_mut()
        {
            meta.remove("namespace");
        }
    }

    /// A create: the name, the admission steps ([`ADMISSION`]), the store's checks and write,
    /// then what the cluster does once the object is stored.
    pub(crate) async fn create(&self, mut object: Value) -> Reply {
        self.clear_cluster_namespace(&mut object);
        // Named, or named by `Store.Create` from `generateName` (apiserver
        // `pkg/registry/generic/registry/store.go`); neither is validation's 422.
        let meta = &object["metadata"];
        let name = match (meta["name"].as_str(), meta["generateName"].as_str()) {
            (Some(name), _) if !name.is_empty() => name.to_owned(),
            (_, Some(prefix)) => format!(
                "{prefix}{}",
                &uuid::Uuid::new_v4().simple().to_string()[..5]
            ),
            _ => {
                return status(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    &format!("{} is invalid: metadata.name: Required value", self.kind),
                    json!({"kind": self.route.resource}),
                );
            }
        };
        for (_, step) in ADMISSION.iter().filter(|(r, _)| *r == self.route.resource) {
            step(self, &mut object);
        }
        let (key, ns, resource) = (self.key(&name), &self.route.namespace, &self.route.resource);
        let object = {
            let mut store = self.state.store();
            // The `NamespaceLifecycle` admission plugin's 404 (apiserver
            // `pkg/admission/plugin/namespace/lifecycle/admission.go`).
            if let Some(ns) = ns
                && !store
                    .objects
                    .contains_key(&("/namespaces".into(), String::new(), ns.clone()))
            {
                return status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("namespaces \"{ns}\" not found"),
                    json!({"name": ns, "kind": "namespaces"}),
                );
            }
            // The storage's `AlreadyExists` (apiserver `pkg/storage/etcd3/store.go`, `Create`).
            if store.objects.contains_key(&key) {
                return status(
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    &format!("{resource} \"{name}\" already exists"),
                    json!({"name": name, "kind": resource}),
                );
            }
            object["apiVersion"] = json!(self.api_version);
            object["kind"] = json!(self.kind);
            object["metadata"]["name"] = json!(name);
            if let Some(ns) = ns {
                object["metadata"]["namespace"] = json!(ns);
            }
            store.stamp_new(&mut object);
            if self.dry_run(None) {
                return json_reply(StatusCode::CREATED, &object);
            }
            let object = store.put(key.clone(), object);
            // Once stored: the ServiceAccount controller's `default` account
            // (`serviceaccounts_controller.go`), a node's start of its Pod.
            match resource.as_str() {
                "namespaces" => add_default_account(&mut store, &name),
                "pods" if self.state.runtime.is_some() => {
                    store.running.insert(uid(&object), Running::Creating);
                }
                _ => {}
            }
            object
        };
        let reply = json_reply(StatusCode::CREATED, &object);
        let Some(runtime) = self.state.runtime.clone() else {
            return reply;
        };
        match resource.as_str() {
            // The PV controller binds the claim before the create answers (`storage`).
            "persistentvolumeclaims" => {
                if let Err(e) = storage::provision(self.state, key).await {
                    eprintln!("kube double: {e}");
                }
            }
            // The node runs the Pod as stored, under the double's UID (its cgroup is
            // `pod<uid>`, as a kubelet names it); the double's scheduler judged `nodeName` and
            // `nodeSelector` against its Node object, the runtime's one host.
            "pods" => {
                let mut pod = object;
                for (at, field) in [
                    ("metadata", "generateName"),
                    ("spec", "nodeName"),
                    ("spec", "nodeSelector"),
                ] {
                    if let Some(fields) = pod[at].as_object_mut() {
                        fields.remove(field);
                    }
                }
                tokio::spawn(run_pod(self.state.clone(), runtime, uid(&pod), pod));
            }
            _ => {}
        }
        reply
    }

    pub(crate) async fn get(&self, name: &str) -> Reply {
        let found = self.state.store().objects.get(&self.key(name)).cloned();
        match found {
            Some(object) => json_reply(StatusCode::OK, &with_status(self.state, object).await),
            None => not_found(self.route, name),
        }
    }

    pub(crate) async fn list(&self) -> Reply {
        let fields = match self.field_selector() {
            Ok(fields) => fields,
            Err(refused) => return *refused,
        };
        let (items, rv) = {
            let store = self.state.store();
            (self.selected(&store), store.resource_version)
        };
        // Fields are selected on the object as shown: a Pod's status is read from its node.
        let mut shown = Vec::new();
        for item in items {
            let item = with_status(self.state, item).await;
            if self.fields_match(&item, &fields) {
                shown.push(item);
            }
        }
        json_reply(
            StatusCode::OK,
            &json!({"apiVersion": self.api_version, "kind": format!("{}List", self.kind),
                "metadata": {"resourceVersion": rv.to_string()}, "items": shown}),
        )
    }

    /// A PUT: the whole object replaced (its `resourceVersion`, when given, must be the
    /// stored one: 409 otherwise, as the API server's optimistic concurrency answers).
    pub(crate) async fn update(&self, name: &str, object: Value) -> Reply {
        if let Some(refused) = other_name(name, &object) {
            return refused;
        }
        let Some(existing) = self.state.store().objects.get(&self.key(name)).cloned() else {
            return not_found(self.route, name);
        };
        self.commit(name, existing, object).await
    }

    /// A JSON merge patch (the one format `negotiation` lets through, an object) applied to
    /// the stored object, then stored as an update; a patched object of another name is 400
    /// (apiserver `pkg/endpoints/handlers/patch.go`). Whether the patched object decodes
    /// (422 `patch`) is the real API server's to judge.
    pub(crate) async fn patch(&self, name: &str, patch: Value) -> Reply {
        let Some(existing) = self.state.store().objects.get(&self.key(name)).cloned() else {
            return not_found(self.route, name);
        };
        let mut object = existing.clone();
        patch::merge(&mut object, &patch);
        if let Some(refused) = other_name(name, &object) {
            return refused;
        }
        if patch["metadata"].get("resourceVersion").is_none() {
            // No precondition in the patch: it applies to the stored version.
            object["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"].clone();
        }
        self.commit(name, existing, object).await
    }

    /// The 409 an API server answers an update whose resourceVersion is no longer the stored
    /// one (the update's own, or the version read when a concurrent write won).
    fn modified_since(&self, name: &str) -> Reply {
        status(
            StatusCode::CONFLICT,
            "Conflict",
            &format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                self.route.resource
            ),
            json!({"name": name, "kind": self.route.resource}),
        )
    }

    /// Stores `object` in place of `existing` (an update or a patched object): what the
    /// server owns (UID, creation time, name, namespace, kind, a claim's and a namespace's
    /// status) is kept, `resourceVersion` advanced.
    async fn commit(&self, name: &str, existing: Value, mut object: Value) -> Reply {
        // Optimistic concurrency first (the store's `GuaranteedUpdate`, before the
        // strategy's checks): a version that is no number is the versioner's plain error, 500
        // with no reason (`APIObjectVersioner.ObjectResourceVersion` in apiserver
        // `pkg/storage/api_object_versioner.go`); another version is 409.
        let stored_rv = existing["metadata"]["resourceVersion"].clone();
        match object["metadata"]["resourceVersion"].as_str() {
            Some(rv) if !rv.is_empty() && rv.parse::<u64>().is_err() => {
                return status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "",
                    &format!("strconv.ParseUint: parsing {}: invalid syntax", json!(rv)),
                    json!({}),
                );
            }
            Some(rv) if !rv.is_empty() && Some(rv) != stored_rv.as_str() => {
                return self.modified_since(name);
            }
            _ => {}
        }
        self.clear_cluster_namespace(&mut object);
        if self.route.resource == "secrets" {
            prepare_secret(&mut object);
        }
        // What the server owns is kept as stored, or kept absent: a request cannot set the
        // generation (`rest.BeforeUpdate`, apiserver `pkg/registry/rest/update.go`); a Pod's
        // and a Job's strategy advance it when the spec changes (`updatePodGeneration` in
        // kubernetes `pkg/registry/core/pod/strategy.go`, `jobStrategy.PrepareForUpdate`).
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ] {
            keep(&mut object["metadata"], &existing["metadata"], field);
        }
        if matches!(
            self.route.resource.as_str(),
            "pods" | "persistentvolumeclaims" | "namespaces" | "jobs" | "nodes"
        ) {
            keep(&mut object, &existing, "status");
        }
        if matches!(self.route.resource.as_str(), "pods" | "jobs")
            && object["spec"] != existing["spec"]
            && let Some(generation) = existing["metadata"]["generation"].as_i64()
        {
            object["metadata"]["generation"] = json!(generation + 1);
        }
        object["apiVersion"] = json!(self.api_version);
        object["kind"] = json!(self.kind);
        if !self.dry_run(None) {
            let key = self.key(name);
            let mut store = self.state.store();
            if store
                .objects
                .get(&key)
                .map(|o| &o["metadata"]["resourceVersion"])
                != Some(&stored_rv)
            {
                return self.modified_since(name);
            }
            object = store.put(key.clone(), object);
            finalizers::delete_if_finalized(&mut store, &key);
        }
        json_reply(StatusCode::OK, &with_status(self.state, object).await)
    }

    /// pods/log: the container's log as the kubelet serves it (`sinceSeconds`, `limitBytes`:
    /// what the harness asks for), streamed with `follow=true` until the container ends. A
    /// container that has not started (or that the Pod lacks: the harness asks for its own
    /// containers only) is 400, in the API server's words.
    pub(crate) async fn log(&self, name: &str) -> Reply {
        let found = self.state.store().objects.get(&self.key(name)).cloned();
        let Some(pod) = found else {
            return not_found(self.route, name);
        };
        let container = container_param(self.query, &pod);
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        let text_reply = |body| {
            let mut reply = Response::new(body);
            let text = HeaderValue::from_static("text/plain");
            reply.headers_mut().insert(CONTENT_TYPE, text);
            reply
        };
        let Some(docker) = self.state.docker.clone() else {
            // No runtime: a stored Pod that never runs has no log.
            return text_reply(full(String::new()));
        };
        let running = match self.state.runtime_pod(uid) {
            Some(_) => containers::observe(&docker, uid).await,
            None => Vec::new(),
        };
        let Some(id) = running
            .into_iter()
            .find(|c| c.name == container)
            .map(|c| c.id)
        else {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!(
                    "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
                ),
                json!({}),
            );
        };
        let number = |key: &str| param(self.query, key).and_then(|v| v.parse::<u64>().ok());
        let flag = |key: &str| param(self.query, key).is_some_and(|v| v == "true" || v == "1");
        let query = containers::LogQuery {
            follow: flag("follow"),
            since_seconds: number("sinceSeconds"),
        };
        let mut left =
            number("limitBytes").map_or(usize::MAX, |n| usize::try_from(n).unwrap_or(usize::MAX));
        // Pumped through a bounded queue (a slow client slows the reading).
        let (tx, mut rx) = tokio::sync::mpsc::channel::<hyper::body::Bytes>(16);
        let log = containers::log(&docker, &id, &query);
        tokio::spawn(async move {
            tokio::pin!(log);
            while left > 0
                && let Some(mut bytes) = log.next().await
            {
                bytes.truncate(left);
                left -= bytes.len();
                if tx.send(bytes).await.is_err() {
                    return;
                }
            }
        });
        let frames = futures_util::stream::poll_fn(move |cx| {
            rx.poll_recv(cx).map(|bytes| {
                Some(Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(
                    bytes?,
                )))
            })
        });
        text_reply(http_body_util::BodyExt::boxed(
            http_body_util::StreamBody::new(frames),
        ))
    }

    pub(crate) fn delete(&self, name: &str, options: Value) -> Reply {
        let key = self.key(name);
        let mut store = self.state.store();
        let Some(object) = store.objects.get(&key).cloned() else {
            return not_found(self.route, name);
        };
        let uid = uid(&object);
        let preconditions = Preconditions::of(&options);
        if let Err(unmet) = preconditions.check(&object) {
            return status(
                StatusCode::CONFLICT,
                "Conflict",
                &format!(
                    "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: {field} in precondition: {wanted}, {field} in object meta: {actual}",
                    self.route.resource,
                    field = unmet.field,
                    wanted = unmet.wanted,
                    actual = unmet.actual,
                ),
                json!({"name": name, "kind": self.route.resource}),
            );
        }
        if self.dry_run(Some(&options)) {
            // A dry run is answered as the delete would be, and changes nothing (the
            // registry's `Store.Delete` passes `dryrun.IsDryRun` down to the storage, which
            // then writes nothing: apiserver `pkg/registry/generic/registry/store.go`).
            return json_reply(StatusCode::OK, &object);
        }
        store.deletions.push(Deletion {
            resource: self.route.resource.clone(),
            namespace: key.1.clone(),
            name: name.into(),
            uid: uid.clone(),
            precondition_uid: preconditions.uid,
        });
        let mut shown = object.clone();
        shown["metadata"]["deletionTimestamp"] = json!(now());
        let kubelet = self.route.resource == "pods" && self.state.runtime.is_some();
        if let Some(kept) = finalizers::on_delete(&mut store, &key, &object, kubelet) {
            return json_reply(StatusCode::OK, &kept);
        }
        match self.route.resource.as_str() {
            "pods" if self.state.runtime.is_some() => {
                // Terminating until the runtime removed its containers.
                shown = store.put(key.clone(), shown);
                drop(store);
                tokio::spawn(remove_pod(self.state.clone(), key, uid));
            }
            "pods" => {
                // No node runs it: a graceful delete of grace 0, so marked (a change of its
                // own, a resourceVersion the answer shows) and then removed at once
                // (`Store.updateForGracefulDeletionAndFinalizers`, then `deleteImmediately`
                // in apiserver `pkg/registry/generic/registry/store.go`).
                shown = store.put(key.clone(), shown);
                store.delete(&key);
                store.forget_bound_tokens(&uid);
            }
            "namespaces" => {
                shown["status"]["phase"] = json!("Terminating");
                shown = store.put(key.clone(), shown);
                drop(store);
                tokio::spawn(remove_namespace(self.state.clone(), name.to_owned()));
            }
            "persistentvolumeclaims" => {
                store.delete(&key);
                let volume = store.volumes.remove(&uid);
                drop(store);
                if let (Some(runtime), Some(volume)) = (self.state.runtime.clone(), volume) {
                    tokio::spawn(remove_volume(runtime, volume));
                }
            }
            _ => {
                store.delete(&key);
                store.forget_bound_tokens(&uid);
            }
        }
        json_reply(StatusCode::OK, &shown)
    }
}

/// The 400 of a written object whose name is not the URL's (an update's, a patched one's).
fn other_name(name: &str, object: &Value) -> Option<Reply> {
    let named = object["metadata"]["name"].as_str().unwrap_or_default();
    let message =
        format!("the name of the object ({named}) does not match the name on the URL ({name})");
    (named != name).then(|| status(StatusCode::BAD_REQUEST, "BadRequest", &message, json!({})))
}

/// One admission step of a create: the object changed in place, as the API server changes it.
type Step = fn(&Ctx<'_>, &mut Value);

/// A create's admission by resource, in the API server's order: decoding's conversions and
/// defaults, the mutating admission plugins (`AllOrderedPlugins` in kubernetes
/// `pkg/kubeapiserver/options/plugins.go`: `ServiceAccount` before the webhooks), then the
/// strategy's `PrepareForCreate` (in `rest.BeforeCreate`, apiserver `pkg/registry/rest/create.go`).
/// The rest of an API server's admission is the real one's to referee (`real_api_server`).
const ADMISSION: &[(&str, Step)] = &[
    // `stringData` into `data`, winning and never stored (`Convert_v1_Secret_To_core_Secret`
    // in kubernetes `pkg/apis/core/v1/conversion.go`); `type` defaults to `Opaque`
    // (`SetDefaults_Secret`, `defaults.go`). `data` is stored as sent: whether it is base64
    // is the real API server's to judge (the corpus lists it).
    ("secrets", |_, secret| prepare_secret(secret)),
    // `spec.volumeMode` defaults to `Filesystem` (`SetDefaults_PersistentVolumeClaimSpec`);
    // `PrepareForCreate` clears the status (`pkg/registry/core/persistentvolumeclaim/strategy.go`),
    // `Pending` by defaulting (`SetDefaults_PersistentVolumeClaim`). Binding is the PV
    // controller's later update (`storage::provision`).
    ("persistentvolumeclaims", |_, claim| {
        if claim["spec"]["volumeMode"].is_null() {
            claim["spec"]["volumeMode"] = json!("Filesystem");
        }
        claim["status"] = json!({"phase": "Pending"});
    }),
    // The `ServiceAccount` plugin (`serviceaccount`).
    ("pods", |_, pod| serviceaccount::admit(pod)),
    // A mutating webhook: the test's hook (`DoubleState::set_pod_mutator`).
    ("pods", |ctx, pod| {
        let mutator = ctx.state.mutator.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mutate) = mutator.as_ref() {
            mutate(pod);
        }
    }),
    // The Pod strategy's `PrepareForCreate` (`pkg/registry/core/pod/strategy.go`): generation
    // 1, a new Pod's status. The spec is stored as sent, not defaulted (the real API server
    // referees defaulting: `real_api_server/admission.rs`), and the node runs it so.
    ("pods", |_, pod| {
        pod["metadata"]["generation"] = json!(1);
        pod["status"] = json!({"phase": "Pending"});
    }),
    // The Namespace strategy's `PrepareForCreate` (`pkg/registry/core/namespace/strategy.go`).
    ("namespaces", |_, ns| {
        ns["status"] = json!({"phase": "Active"})
    }),
];

/// A Secret's `stringData` merged into `data` and its `type` defaulted, on every write.
fn prepare_secret(secret: &mut Value) {
    if let Some(fields) = secret.as_object_mut()
        && let Some(Value::Object(strings)) = fields.remove("stringData")
    {
        for (key, value) in strings {
            let encoded = base64::engine::general_purpose::STANDARD
                .encode(value.as_str().unwrap_or_default());
            secret["data"][key.as_str()] = json!(encoded);
        }
    }
    if secret["type"].as_str().is_none_or(str::is_empty) {
        secret["type"] = json!("Opaque");
    }
}

/// An object's UID.
fn uid(object: &Value) -> String {
    object["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// `field` of `to` as it is in `from`, or absent when it is absent there.
fn keep(to: &mut Value, from: &Value, field: &str) {
    match from.get(field) {
        Some(kept) => to[field] = kept.clone(),
        None => {
            if let Some(fields) = to.as_object_mut() {
                fields.remove(field);
            }
        }
    }
}
