//! The cluster's own components a test switched on (`behaviours`), acting where the
//! double's scheduler and kubelet reach the moments they act at: a Pod reaching the node
//! (a node agent's finalizer; an image pull from a registry the node cannot reach, which
//! hangs), a Pod whose image cannot be pulled (a controller that deletes it before anyone
//! reads why), a Pod that runs (a controller that relabels it). Each acts in the same step
//! as the moment it reacts to, so a client polling the API server never sees the state in
//! between: deterministic where a real controller would race its watch, and never earlier
//! than a real one could act.

use super::behaviours::{Behaviour, registry_host};
use super::store::{DoubleState, Key, Store};
use super::{finalizers, mounts};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

impl DoubleState {
    /// Switches `behaviour` of the cluster's own components on, for every Pod from now on.
    pub fn enable(&self, behaviour: Behaviour) {
        self.behaviours.push(behaviour);
    }
}

/// The stored Pod of `uid` (its key and object), unless it is gone.
fn pod_of(store: &Store, uid: &str) -> Option<(Key, Value)> {
    store
        .objects
        .iter()
        .find(|((r, _, _), o)| r == "/pods" && o["metadata"]["uid"].as_str() == Some(uid))
        .map(|(k, o)| (k.clone(), o.clone()))
}

/// The Pod `uid` reached the node (scheduled, its volumes set up), just before the kubelet
/// pulls its images: a stuck node agent puts its finalizer on it (its own update); a pull
/// from a registry the node cannot reach hangs (the Pod stays `ContainerCreating`) until the
/// Pod is deleted. Whether the kubelet goes on creating its containers.
pub(crate) async fn reaches_node(state: &Arc<DoubleState>, uid: &str, pod: &Value) -> bool {
    let behaviours = state.behaviours.all();
    for behaviour in &behaviours {
        if let Behaviour::StuckNodeFinalizer { finalizer } = behaviour {
            let mut store = state.store();
            if let Some((key, mut stored)) = pod_of(&store, uid)
                && stored["metadata"]["deletionTimestamp"].is_null()
                && !finalizers::of(&stored).contains(finalizer)
            {
                let meta = &mut stored["metadata"];
                if !meta["finalizers"].is_array() {
                    meta["finalizers"] = json!([]);
                }
                if let Some(list) = meta["finalizers"].as_array_mut() {
                    list.push(json!(finalizer));
                }
                store.put(key, stored);
            }
        }
    }
    let unreachable: Vec<&str> = behaviours
        .iter()
        .filter_map(|b| match b {
            Behaviour::UnreachableRegistry { host } => Some(host.as_str()),
            _ => None,
        })
        .collect();
    let mut hanging = None;
    for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
        let image = c["image"].as_str().unwrap_or_default();
        if !unreachable.contains(&registry_host(image)) {
            continue;
        }
        // A node that holds the image does not pull it (`IfNotPresent`).
        let present = match &state.docker {
            Some(docker) => docker.inspect_image(image).await.is_ok(),
            None => false,
        };
        if !present {
            hanging = Some(image.to_owned());
            break;
        }
    }
    let Some(image) = hanging else {
        return true;
    };
    {
        let mut store = state.store();
        if let Some((_, stored)) = pod_of(&store, uid) {
            store.event(
                &stored,
                ("Normal", "Pulling"),
                &format!("Pulling image \"{image}\""),
                "kubelet",
            );
        }
    }
    // No answer from the registry: the pull neither progresses nor fails while the Pod
    // stays. Once it is deleted the kubelet gives up, and its removal goes on.
    loop {
        {
            let mut store = state.store();
            let live = pod_of(&store, uid)
                .is_some_and(|(_, p)| p["metadata"]["deletionTimestamp"].is_null());
            if !live {
                store.running.remove(uid);
                return false;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A container of the Pod `uid` cannot pull its image (the kubelet's `ErrImagePull`, just
/// recorded in `store`): the kubelet's Events say so; a controller reaping such Pods deletes
/// it at once, with grace period 0, in this same step (held only by finalizers).
pub(crate) fn pull_failed(state: &DoubleState, store: &mut Store, uid: &str) {
    let Some((key, pod)) = pod_of(store, uid) else {
        return;
    };
    let failed = match store.running.get(uid) {
        Some(super::store::Running::PullFailed { image, .. }) => image.clone(),
        _ => return,
    };
    let message = format!(
        "Failed to pull image \"{failed}\": failed to pull and unpack image \"{failed}\": failed to resolve reference \"{failed}\": {failed}: not found"
    );
    store.event(&pod, ("Warning", "Failed"), &message, "kubelet");
    store.event(
        &pod,
        ("Warning", "Failed"),
        "Error: ErrImagePull",
        "kubelet",
    );
    if !state
        .behaviours
        .all()
        .contains(&Behaviour::ReapUnpullablePods)
    {
        return;
    }
    store.event(
        &pod,
        ("Normal", "Reaped"),
        &format!("deleted: container image \"{failed}\" cannot be pulled (ErrImagePull)"),
        "pod-reaper",
    );
    // A DELETE with grace period 0: nothing runs, the kubelet has nothing to stop but the
    // volumes it set up.
    store.running.remove(uid);
    if finalizers::on_delete(store, &key, &pod, false).is_none() {
        store.delete(&key);
        store.forget_bound_tokens(uid);
        mounts::remove_pod_folder(state, uid);
    }
}

/// The Pod at `key` runs on the node: every controller relabelling running Pods whose
/// selector it matches patches its metadata (its own update).
pub(crate) fn started(state: &DoubleState, store: &mut Store, key: &Key) {
    for behaviour in state.behaviours.all() {
        let Behaviour::RelabelRunningPods { selector, patch } = behaviour else {
            continue;
        };
        let Some(mut pod) = store.objects.get(key).cloned() else {
            return;
        };
        let labels = &pod["metadata"]["labels"];
        if !selector
            .iter()
            .all(|(k, v)| labels[k].as_str() == Some(v.as_str()))
        {
            continue;
        }
        super::patch::merge(&mut pod["metadata"], &patch);
        store.put(key.clone(), pod);
    }
}
