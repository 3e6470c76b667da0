//! The leak ledger: what a scenario created that outlived its teardown.
//!
//! Before teardown the nested daemon of each of the scenario's Pods is inventoried (its
//! containers, images, volumes, networks and Compose projects die with the Pod, so the
//! inventory says what the deletion had to take along). After teardown the ledger asks the
//! backend for anything still carrying the scenario's labels and the node view for anything
//! still there of its Pods: processes, the Pod's cgroups, the nested containers' cgroups.

use crate::backend::{Backend, ExecRequest, PodRef};
use crate::node::NodeView;
use kandev_report::NestedInventory;
use std::time::Duration;

/// One exec in the companion lists the nested daemon's objects, a section each (four CLI
/// calls: one container listing gives both the containers and their Compose projects).
const INVENTORY_SCRIPT: &str = r#"export DOCKER_HOST="${DOCKER_HOST:-unix:///run/docker/docker.sock}"
ps=$(docker ps -a --no-trunc --format '{{.ID}} {{.Label "com.docker.compose.project"}}')
echo '== containers'; printf '%s\n' "$ps" | cut -d' ' -f1
echo '== images'; docker images -q --no-trunc | sort -u
echo '== volumes'; docker volume ls -q
echo '== networks'; docker network ls --filter type=custom --format '{{.Name}}'
echo '== compose'; printf '%s\n' "$ps" | cut -s -d' ' -f2- | sed '/^$/d' | sort -u
"#;

/// What the nested daemon of each Pod that still exists holds right now (Pods the scenario
/// deleted itself, and Pods without the companion, are left out: there is nothing to ask).
pub async fn nested_inventories(
    backend: &dyn Backend,
    pods: &[PodRef],
    daemon_container: &str,
) -> Vec<NestedInventory> {
    let inventories = pods.iter().map(|pod| async move {
        match backend.pod_uid(&pod.namespace, &pod.name).await {
            Ok(Some(uid)) if uid == pod.uid => {}
            _ => return None,
        }
        let states = backend.container_states(pod).await.unwrap_or_default();
        if !states.iter().any(|c| c.name == daemon_container) {
            return None;
        }
        Some(nested_inventory(backend, pod, daemon_container).await)
    });
    futures_util::future::join_all(inventories)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// What the nested daemon of `pod` holds right now.
pub async fn nested_inventory(
    backend: &dyn Backend,
    pod: &PodRef,
    daemon_container: &str,
) -> NestedInventory {
    let request = ExecRequest::new(daemon_container, &["sh", "-c", INVENTORY_SCRIPT])
        .timeout(Duration::from_secs(20));
    match backend.exec(pod, request).await {
        Ok(out) if out.success() => parse_inventory(&pod.name, &out.stdout_text()),
        Ok(out) => NestedInventory {
            pod: pod.name.clone(),
            error: Some(format!(
                "inventory ended with {}: {}",
                out.exit_text(),
                out.stderr_text().trim()
            )),
            ..Default::default()
        },
        Err(e) => NestedInventory {
            pod: pod.name.clone(),
            error: Some(crate::error_chain(&e)),
            ..Default::default()
        },
    }
}

pub fn parse_inventory(pod: &str, text: &str) -> NestedInventory {
    let mut inventory = NestedInventory {
        pod: pod.to_owned(),
        ..Default::default()
    };
    let mut section = "";
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(name) = line.strip_prefix("== ") {
            section = match name {
                "containers" | "images" | "volumes" | "networks" | "compose" => name,
                _ => "",
            };
            continue;
        }
        let list = match section {
            "containers" => &mut inventory.containers,
            "images" => &mut inventory.images,
            "volumes" => &mut inventory.volumes,
            "networks" => &mut inventory.networks,
            "compose" => &mut inventory.compose_projects,
            _ => continue,
        };
        list.push(line.to_owned());
    }
    inventory
}

/// The ledger after teardown: what still carries the scenario's labels (engine or cluster)
/// and what the node still holds of each of its Pods ([`node_remains_after_teardown`]).
pub async fn remains_after_teardown(
    backend: &dyn Backend,
    node: Option<&dyn NodeView>,
    selector: &[(&str, &str)],
    pods: &[(String, String)],
    nested: &[NestedInventory],
) -> Vec<String> {
    let mut leaks = match backend.list_labelled(selector).await {
        Ok(objects) => objects,
        Err(e) => vec![format!("(labelled-object inventory failed: {e})")],
    };
    if let Some(node) = node {
        leaks.extend(node_remains_after_teardown(node, pods, nested).await);
    }
    leaks
}

/// How often the node is asked again while what it shows of the deleted Pods settles.
const SETTLE_POLL: Duration = Duration::from_millis(250);

/// What the node still holds of each of the scenario's (deleted) Pods: their processes, their
/// cgroups, their nested containers' cgroups. A node forgets a deleted Pod asynchronously
/// (processes die after their container is removed; a kubelet removes the Pod's cgroup in
/// housekeeping), so the node is asked again for up to its [`NodeView::settle_time`]: nothing
/// left as soon as it shows nothing, what it still shows when that time is up.
pub async fn node_remains_after_teardown(
    node: &dyn NodeView,
    pods: &[(String, String)],
    nested: &[NestedInventory],
) -> Vec<String> {
    let last = std::sync::Mutex::new(Vec::new());
    let settled = crate::wait::until(
        "the node to forget the deleted Pods",
        node.settle_time(),
        SETTLE_POLL,
        || async {
            let on_node = node_inventory(node, pods, nested).await;
            let gone = on_node.is_empty();
            if let Ok(mut last) = last.lock() {
                *last = on_node;
            }
            Ok::<_, crate::wait::WaitTimedOut>(gone.then_some(()))
        },
    )
    .await;
    match settled {
        Ok(()) => Vec::new(),
        Err(_) => last.into_inner().unwrap_or_default(),
    }
}

async fn node_inventory(
    node: &dyn NodeView,
    pods: &[(String, String)],
    nested: &[NestedInventory],
) -> Vec<String> {
    let mut on_node = Vec::new();
    for (name, uid) in pods {
        let nested_ids: Vec<String> = nested
            .iter()
            .filter(|n| &n.pod == name)
            .flat_map(|n| n.containers.iter().cloned())
            .collect();
        match node.pod_remains(name, uid, &nested_ids).await {
            Ok(found) => on_node.extend(found.into_iter().map(|f| format!("node: {f}"))),
            Err(e) => on_node.push(format!("(node inventory of pod {name} failed: {e:#})")),
        }
    }
    on_node
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inventory_sections_are_parsed_and_unknown_ones_ignored() {
        let text = "== containers\nabc123\ndef456\n== images\nsha256:1\n== volumes\n\n== networks\nkandev_default\n== compose\nkandev\n== other\nx\n";
        let inv = parse_inventory("p", text);
        assert_eq!(inv.containers, vec!["abc123", "def456"]);
        assert_eq!(inv.images, vec!["sha256:1"]);
        assert!(inv.volumes.is_empty());
        assert_eq!(inv.networks, vec!["kandev_default"]);
        assert_eq!(inv.compose_projects, vec!["kandev"]);
        assert_eq!(inv.error, None);
    }
}
