//! The verbs on stored objects: create (with the double's admission and defaulting), get,
//! list, update, patch, delete, and pods/log.

use super::request::Ctx;
use super::route::param;
use super::runtime::{remove_namespace, remove_pod, run_pod, with_status};
use super::status::{Reply, full, json_reply, not_found, status};
use super::store::{Deletion, Preconditions, Running, add_default_account, now};
use super::{defaults, patch};
use hyper::{Response, StatusCode};
use serde_json::{Value, json};
use std::time::Duration;

/// The patch formats the double applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Patch {
    /// RFC 6902.
    Json,
    /// RFC 7386.
    Merge,
    /// Kubernetes' strategic merge patch.
    StrategicMerge,
}

impl Ctx<'_> {
    /// Removes a volume provisioned for a claim that was then refused.
    fn discard(&self, volume: Option<kandev_harness::backend::WorkspaceRef>) {
        if let (Some(runtime), Some(volume)) = (self.state.runtime.clone(), volume) {
            tokio::spawn(async move {
                let _ = runtime.delete_workspace(&volume).await;
            });
        }
    }

    pub(crate) async fn create(&self, mut object: Value) -> Reply {
        if !object.is_object() {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "the body is not an object",
                json!({}),
            );
        }
        let dry_run = param(self.query, "dryRun") == Some("All");
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
        // What the runtime is asked to run: the Pod as admitted, before defaulting.
        let for_runtime = object.clone();
        // A claim is a volume on the runtime (provisioned at once, then bound: below).
        let mut volume = None;
        if self.route.resource == "persistentvolumeclaims"
            && !dry_run
            && let Some(runtime) = self.state.runtime.clone()
        {
            let map = |field: &str| -> std::collections::BTreeMap<String, String> {
                serde_json::from_value(object["metadata"][field].clone()).unwrap_or_default()
            };
            let exists = self.state.store().objects.contains_key(&self.key(&name));
            if !exists {
                match runtime
                    .create_workspace(&name, &map("labels"), &map("annotations"))
                    .await
                {
                    Ok(created) => volume = Some(created),
                    Err(e) => {
                        return status(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            "InternalError",
                            &format!("provisioning claim {name}: {e}"),
                            json!({}),
                        );
                    }
                }
            }
        }
        let key = self.key(&name);
        let reply = {
            let mut store = self.state.store();
            if let Some(ns) = &ns
                && !store
                    .objects
                    .contains_key(&("/namespaces".into(), String::new(), ns.clone()))
            {
                self.discard(volume.take());
                return status(
                    StatusCode::NOT_FOUND,
                    "NotFound",
                    &format!("namespaces \"{ns}\" not found"),
                    json!({"name": ns, "kind": "namespaces"}),
                );
            }
            if store.objects.contains_key(&key) {
                self.discard(volume.take());
                return status(
                    StatusCode::CONFLICT,
                    "AlreadyExists",
                    &format!("{} \"{name}\" already exists", self.route.resource),
                    json!({"name": name, "kind": self.route.resource}),
                );
            }
            if self.route.resource == "pods" {
                let account = object["spec"]["serviceAccountName"]
                    .as_str()
                    .unwrap_or("default")
                    .to_owned();
                let ns = ns.clone().unwrap_or_default();
                if !store.objects.contains_key(&(
                    "/serviceaccounts".into(),
                    ns.clone(),
                    account.clone(),
                )) {
                    return status(
                        StatusCode::FORBIDDEN,
                        "Forbidden",
                        &format!(
                            "pods \"{name}\" is forbidden: error looking up service account {ns}/{account}: serviceaccount \"{account}\" not found"
                        ),
                        json!({"name": name, "kind": "pods"}),
                    );
                }
                object["spec"]["serviceAccountName"] = json!(account);
                defaults::default_pod(&mut object);
            }
            if self.route.resource == "persistentvolumeclaims" {
                // As an API server admits a claim: `PrepareForCreate` clears the status
                // (pkg/registry/core/persistentvolumeclaim/strategy.go), and decoding
                // defaults `status.phase` to `Pending` and `spec.volumeMode` to `Filesystem`
                // (`SetDefaults_PersistentVolumeClaim`, `SetDefaults_PersistentVolumeClaimSpec`
                // in pkg/apis/core/v1/defaults.go). Binding is the PV controller's later
                // update (below, when a volume was provisioned); with no storage class and
                // no volume the claim stays `Pending`, as on a cluster without a provisioner.
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
            if dry_run {
                store.stamp_new(&mut object);
                return json_reply(StatusCode::CREATED, &object);
            }
            object = store.create(key.clone(), object);
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
            if let Some(volume) = volume {
                store.volumes.insert(uid.clone(), volume);
                // Provisioned at once: bound as the PV controller binds a claim (a later
                // update, its own resourceVersion), to a volume named as provisioners name
                // theirs (`pvc-<uid>`), the status carrying the volume's modes and capacity.
                let mut bound = object.clone();
                bound["spec"]["volumeName"] = json!(format!("pvc-{uid}"));
                bound["status"] = json!({
                    "phase": "Bound",
                    "accessModes": object["spec"]["accessModes"],
                    "capacity": {"storage": object["spec"]["resources"]["requests"]["storage"]},
                });
                store.put(key, bound);
            }
            reply
        };
        if self.route.resource == "pods"
            && let Some(runtime) = self.state.runtime.clone()
        {
            let uid = object["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            // The runtime's Pod carries the double's UID (its cgroup is `pod<uid>`, as a
            // kubelet names it); scheduling is the double's business, not the runtime's.
            let mut for_runtime = for_runtime;
            for_runtime["metadata"]["uid"] = json!(uid);
            if let Some(spec) = for_runtime["spec"].as_object_mut() {
                spec.remove("nodeName");
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
        let (items, rv): (Vec<Value>, u64) = {
            let store = self.state.store();
            let items = self
                .selected(&store, &fields, None)
                .into_iter()
                .map(|(_, o)| o)
                .collect();
            (items, store.resource_version)
        };
        let mut shown = Vec::with_capacity(items.len());
        for item in items {
            shown.push(with_status(self.state, item).await);
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
        if object["metadata"]["name"].as_str() != Some(name) {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!(
                    "the name of the object ({}) does not match the name on the URL ({name})",
                    object["metadata"]["name"].as_str().unwrap_or_default()
                ),
                json!({}),
            );
        }
        let Some(existing) = self.state.store().objects.get(&self.key(name)).cloned() else {
            return not_found(self.route, name);
        };
        self.commit(name, existing, object).await
    }

    /// A PATCH applied to the stored object, then stored as an update.
    pub(crate) async fn patch(&self, name: &str, kind: Patch, patch: Value) -> Reply {
        let Some(existing) = self.state.store().objects.get(&self.key(name)).cloned() else {
            return not_found(self.route, name);
        };
        let mut object = existing.clone();
        let applied = match kind {
            Patch::Json => patch::json_patch(&mut object, &patch),
            Patch::Merge => {
                patch::merge(&mut object, &patch);
                Ok(())
            }
            Patch::StrategicMerge => patch::strategic(&mut object, &patch),
        };
        if let Err(e) = applied {
            return status(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                &format!(
                    "the patch does not apply to {} \"{name}\": {e}",
                    self.route.resource
                ),
                json!({"name": name, "kind": self.route.resource}),
            );
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
    /// server owns (UID, creation time, name, namespace, kind, a Pod's spec but for what may
    /// change, a claim's and a namespace's status) is kept, `resourceVersion` advanced.
    async fn commit(&self, name: &str, existing: Value, mut object: Value) -> Reply {
        if !object.is_object() {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "the body is not an object",
                json!({}),
            );
        }
        let stored_rv = existing["metadata"]["resourceVersion"].clone();
        match object["metadata"]["resourceVersion"].as_str() {
            Some(rv) if !rv.is_empty() && Some(rv) != stored_rv.as_str() => {
                return self.modified_since(name);
            }
            _ => {}
        }
        if self.route.resource == "pods" {
            // Only what the API server lets change on a Pod (its metadata here; the spec's
            // mutable fields, images and the like, are refused too: the double's runtime
            // Pod could not follow them).
            let mut spec = object.clone();
            defaults::default_pod(&mut spec);
            if spec["spec"] != existing["spec"] {
                return status(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "Invalid",
                    &format!(
                        "Pod \"{name}\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative) (the double changes none of them)"
                    ),
                    json!({"name": name, "kind": "Pod"}),
                );
            }
            object["spec"] = existing["spec"].clone();
        }
        if matches!(
            self.route.resource.as_str(),
            "pods" | "persistentvolumeclaims" | "namespaces"
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
        if param(self.query, "dryRun") != Some("All") {
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
            object = store.put(key, object);
        }
        json_reply(StatusCode::OK, &with_status(self.state, object).await)
    }

    pub(crate) async fn log(&self, name: &str) -> Reply {
        let found = self.state.store().objects.get(&self.key(name)).cloned();
        let Some(pod) = found else {
            return not_found(self.route, name);
        };
        let container = param(self.query, "container")
            .map(str::to_owned)
            .or_else(|| {
                pod["spec"]["containers"][0]["name"]
                    .as_str()
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        let uid = pod["metadata"]["uid"].as_str().unwrap_or_default();
        let text = match (self.state.runtime.clone(), self.state.runtime_pod(uid)) {
            (Some(runtime), Some(pod)) => match runtime.logs(&pod, &container).await {
                Ok(text) => text,
                Err(e) => {
                    return status(
                        StatusCode::BAD_REQUEST,
                        "BadRequest",
                        &format!("container \"{container}\": {e}"),
                        json!({}),
                    );
                }
            },
            _ => String::new(),
        };
        let mut reply = Response::new(full(text));
        reply.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("text/plain"),
        );
        reply
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
        store.deletions.push(Deletion {
            resource: self.route.resource.clone(),
            namespace: key.1.clone(),
            name: name.into(),
            uid: uid.clone(),
            precondition_uid: preconditions.uid,
            precondition_resource_version: preconditions.resource_version,
        });
        let mut shown = object.clone();
        shown["metadata"]["deletionTimestamp"] = json!(now());
        match self.route.resource.as_str() {
            "pods" if self.state.runtime.is_some() => {
                // Terminating until the runtime removed its containers.
                shown = store.put(key.clone(), shown);
                drop(store);
                tokio::spawn(remove_pod(self.state.clone(), key, uid));
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
                    // In use by a Pod still terminating: retried until it is free.
                    tokio::spawn(async move {
                        for _ in 0..120 {
                            if runtime.delete_workspace(&volume).await.is_ok() {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    });
                }
            }
            _ => {
                store.delete(&key);
            }
        }
        json_reply(StatusCode::OK, &shown)
    }
}
