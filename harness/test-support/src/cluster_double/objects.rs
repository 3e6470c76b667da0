//! The verbs on stored objects: create (with the double's admission), get,
//! list, update, patch, delete, and pods/log.

use super::request::Ctx;
use super::route::{container_param, param};
use super::runtime::{remove_namespace, remove_pod, remove_volume, run_pod, with_status};
use super::status::{Reply, full, json_reply, not_found, status, unknown_status};
use super::store::{Deletion, Preconditions, Running, add_default_account, now};
use super::{containers, finalizers, patch, secrets, serviceaccount, storage};
use futures_util::StreamExt;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

impl Ctx<'_> {
    /// A body a create or an update cannot decode as an object at all (400). Whether it
    /// decodes as this resource's kind (its `kind`, the types of its fields) is the real API
    /// server's to judge (`tests/real_api_server/corpus.rs`).
    fn undecodable(&self, object: &Value) -> Option<Reply> {
        (!object.is_object()).then(|| {
            status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "the body is not an object",
                json!({}),
            )
        })
    }

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

    pub(crate) async fn create(&self, mut object: Value) -> Reply {
        if let Some(refused) = self.undecodable(&object) {
            return refused;
        }
        self.clear_cluster_namespace(&mut object);
        let dry_run = self.dry_run(None);
        let name = match object["metadata"]["name"].as_str() {
            Some(n) if !n.is_empty() => n.to_owned(),
            _ => match object["metadata"]["generateName"].as_str() {
                Some(prefix) => format!(
                    "{prefix}{}",
                    &uuid::Uuid::new_v4().simple().to_string()[..5]
                ),
                None => {
                    return status(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "Invalid",
                        &format!("{} is invalid: metadata.name: Required value", self.kind),
                        json!({"kind": self.route.resource}),
                    );
                }
            },
        };
        let ns = self.route.namespace.clone();
        if self.route.resource == "pods" {
            let mutator = self.state.mutator.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(mutate) = mutator.as_ref() {
                mutate(&mut object);
            }
        }
        // What the runtime is asked to run: the Pod as admitted (set below).
        let mut for_runtime = None;
        if self.route.resource == "secrets" {
            secrets::prepare(&mut object);
        }
        let key = self.key(&name);
        // A claim, bound before the create answers (`storage`).
        let mut provision_now = None;
        let reply = {
            let mut store = self.state.store();
            if let Some(ns) = &ns
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
            if store.objects.contains_key(&key) {
                return status(
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    &format!("{} \"{name}\" already exists", self.route.resource),
                    json!({"name": name, "kind": self.route.resource}),
                );
            }
            if self.route.resource == "pods" {
                serviceaccount::admit(&mut object);
                // The Pod strategy's `PrepareForCreate` (kubernetes
                // `pkg/registry/core/pod/strategy.go`): generation 1, a new Pod's status. The
                // spec is stored as sent: the API server's defaulting is the real one's to
                // referee (`tests/real_api_server/admission.rs` runs the harness's admission
                // comparison on it), and the node runs the Pod as stored.
                object["metadata"]["generation"] = json!(1);
                object["status"] = json!({"phase": "Pending"});
                for_runtime = Some(object.clone());
            }
            if self.route.resource == "persistentvolumeclaims" {
                // As an API server admits a claim: `PrepareForCreate` clears the status
                // (pkg/registry/core/persistentvolumeclaim/strategy.go), and decoding
                // defaults `status.phase` to `Pending` and `spec.volumeMode` to `Filesystem`
                // (`SetDefaults_PersistentVolumeClaim`, `SetDefaults_PersistentVolumeClaimSpec`
                // in pkg/apis/core/v1/defaults.go). Binding is the PV controller's later
                // update (`storage::provision`, once stored); without a runtime the claim
                // stays `Pending`, as on a cluster without a provisioner.
                if object["spec"]["volumeMode"].is_null()
                    && let Some(spec) = object["spec"].as_object_mut()
                {
                    spec.insert("volumeMode".into(), json!("Filesystem"));
                }
                object["status"] = json!({"phase": "Pending"});
            }
            if self.route.resource == "namespaces" {
                object["status"] = json!({"phase": "Active"});
            }
            object["apiVersion"] = json!(self.api_version);
            object["kind"] = json!(self.kind);
            object["metadata"]["name"] = json!(name);
            if let Some(ns) = &ns {
                object["metadata"]["namespace"] = json!(ns);
            }
            store.stamp_new(&mut object);
            if dry_run {
                return json_reply(StatusCode::CREATED, &object);
            }
            object = store.put(key.clone(), object);
            let uid = object["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            if self.route.resource == "namespaces" {
                add_default_account(&mut store, &name);
            }
            if self.route.resource == "pods" && self.state.runtime.is_some() {
                store.running.insert(uid.clone(), Running::Creating);
            }
            let reply = json_reply(StatusCode::CREATED, &object);
            if self.route.resource == "persistentvolumeclaims" && self.state.runtime.is_some() {
                provision_now = Some(key);
            }
            reply
        };
        if let Some(key) = provision_now
            && let Err(e) = storage::provision(self.state, key).await
        {
            eprintln!("kube double: {e}");
        }
        if let Some(runtime) = self.state.runtime.clone()
            && let Some(mut for_runtime) = for_runtime
        {
            let uid = object["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            // The runtime's Pod carries the double's UID (its cgroup is `pod<uid>`, as a
            // kubelet names it) and name; scheduling is the double's business, not the
            // runtime's.
            for_runtime["metadata"]["uid"] = json!(uid);
            for_runtime["metadata"]["name"] = object["metadata"]["name"].clone();
            for_runtime["metadata"]["namespace"] = object["metadata"]["namespace"].clone();
            if let Some(meta) = for_runtime["metadata"].as_object_mut() {
                meta.remove("generateName");
            }
            if let Some(spec) = for_runtime["spec"].as_object_mut() {
                // The double's scheduler judged both against its Node object (whose labels a
                // test may change); the runtime's one host is that node.
                spec.remove("nodeName");
                spec.remove("nodeSelector");
            }
            let state = self.state.clone();
            tokio::spawn(run_pod(state, runtime, uid, for_runtime));
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
        // A Pod's status is read from its node: status fields are selected on it after.
        let (by_status, by_store): (Vec<_>, Vec<_>) = fields
            .into_iter()
            .partition(|(field, _, _)| field.starts_with("status."));
        let (items, rv): (Vec<Value>, u64) = {
            let store = self.state.store();
            let items = self
                .selected(&store, &by_store)
                .into_iter()
                .map(|(_, o)| o)
                .collect();
            (items, store.resource_version)
        };
        let mut shown = Vec::with_capacity(items.len());
        for item in items {
            let item = with_status(self.state, item).await;
            if self.fields_match(&item, &by_status) {
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
        if let Some(refused) = self.undecodable(&object) {
            return refused;
        }
        if let Some(refused) = other_name(name, &object) {
            return refused;
        }
        let Some(existing) = self.state.store().objects.get(&self.key(name)).cloned() else {
            return not_found(self.route, name);
        };
        self.commit(name, existing, object).await
    }

    /// A JSON merge patch (the one format `negotiation` lets through) applied to the stored
    /// object, then stored as an update; refused as the API server's patch handler refuses
    /// it (apiserver `pkg/endpoints/handlers/patch.go`): a body that is no object is 400
    /// (`error decoding patch`), a patched object of another name 400. Whether the patched
    /// object decodes (422 `patch`) is the real API server's to judge.
    pub(crate) async fn patch(&self, name: &str, patch: Value) -> Reply {
        let Some(existing) = self.state.store().objects.get(&self.key(name)).cloned() else {
            return not_found(self.route, name);
        };
        if !patch.is_object() {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "error decoding patch: the patch is not a JSON object",
                json!({}),
            );
        }
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
                return unknown_status(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("strconv.ParseUint: parsing {}: invalid syntax", json!(rv)),
                );
            }
            Some(rv) if !rv.is_empty() && Some(rv) != stored_rv.as_str() => {
                return self.modified_since(name);
            }
            _ => {}
        }
        self.clear_cluster_namespace(&mut object);
        if self.route.resource == "secrets" {
            secrets::prepare(&mut object);
        }
        // `rest.BeforeUpdate` (apiserver `pkg/registry/rest/update.go`): a request cannot set
        // the generation; a Pod's and a Job's strategy advance it when the spec changes
        // (`updatePodGeneration` in kubernetes `pkg/registry/core/pod/strategy.go`,
        // `jobStrategy.PrepareForUpdate` in `pkg/registry/batch/job/strategy.go`).
        match existing["metadata"].get("generation") {
            Some(generation) => object["metadata"]["generation"] = generation.clone(),
            None => {
                if let Some(meta) = object["metadata"].as_object_mut() {
                    meta.remove("generation");
                }
            }
        }
        if matches!(self.route.resource.as_str(), "pods" | "jobs")
            && object["spec"] != existing["spec"]
            && let Some(generation) = existing["metadata"]["generation"].as_i64()
        {
            object["metadata"]["generation"] = json!(generation + 1);
        }
        if matches!(
            self.route.resource.as_str(),
            "pods" | "persistentvolumeclaims" | "namespaces" | "jobs" | "nodes"
        ) && let Some(fields) = object.as_object_mut()
        {
            match existing.get("status") {
                Some(kept) => fields.insert("status".into(), kept.clone()),
                None => fields.remove("status"),
            };
        }
        object["apiVersion"] = json!(self.api_version);
        object["kind"] = json!(self.kind);
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            match existing["metadata"].get(field) {
                Some(v) => object["metadata"][field] = v.clone(),
                None => {
                    if let Some(meta) = object["metadata"].as_object_mut() {
                        meta.remove(field);
                    }
                }
            }
        }
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
    /// container that has not started is 400, in the API server's words.
    pub(crate) async fn log(&self, name: &str) -> Reply {
        let found = self.state.store().objects.get(&self.key(name)).cloned();
        let Some(pod) = found else {
            return not_found(self.route, name);
        };
        let container = container_param(self.query, &pod);
        let known = ["initContainers", "containers"].iter().any(|list| {
            pod["spec"][*list]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["name"].as_str() == Some(container.as_str()))
        });
        if !known {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!("container {container} is not valid for pod {name}"),
                json!({}),
            );
        }
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        let text_reply = |body| {
            let mut reply = Response::new(body);
            reply.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain"),
            );
            reply
        };
        let Some(docker) = self.state.docker.clone() else {
            // No runtime: a stored Pod that never runs has no log.
            return text_reply(full(String::new()));
        };
        let id = match self.state.runtime_pod(uid) {
            Some(_) => containers::observe(&docker, uid)
                .await
                .into_iter()
                .find(|c| c.name == container)
                .map(|c| c.id),
            None => None,
        };
        let Some(id) = id else {
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
        let (tx, rx) = tokio::sync::mpsc::channel::<hyper::body::Bytes>(16);
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
        let frames = futures_util::stream::unfold(rx, |mut rx| async move {
            let bytes = rx.recv().await?;
            Some((
                Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(bytes)),
                rx,
            ))
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
        let uid = object["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
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
    let named = object["metadata"]["name"].as_str();
    (named != Some(name)).then(|| {
        status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                named.unwrap_or_default()
            ),
            json!({}),
        )
    })
}
