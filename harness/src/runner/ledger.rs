//! The leak ledger: what a scenario created that outlived its teardown.
//!
//! Before teardown the nested daemon of each of the scenario's Pods is inventoried (its
//! containers, images, volumes, networks and Compose projects die with the Pod, so the
//! inventory says what the deletion had to take along). After teardown the ledger asks the
//! backend for anything still carrying the scenario's labels and the node view for anything
//! still there of its Pods: processes, the Pod's cgroups, the nested containers' cgroups.
//!
//! And the node's cgroup folders, whatever made them: listed when the scenario starts
//! ([`cgroup_baseline`]) and after its teardown ([`cgroups_left`]); a folder made in between
//! that is still there is the scenario's leak (a companion that made a cgroup outside its
//! Pod's leaves it on the node, and `pod_remains` looks only at the Pod's own). Scenarios run
//! in parallel (and other runs on the same node), so a new folder is attributed:
//!
//! - Pod cgroups are left out (each Pod's are checked by its UID, by the Pod's own scenario);
//! - a folder holding processes is the scenario's when one of them is its: `HOSTNAME` one of
//!   its Pods' names, or the short ID of one of its nested containers (what a container
//!   runtime gives a container's processes); another's processes make it another's;
//! - an empty folder is the scenario's: it was made after the scenario's baseline was taken
//!   (else the baseline lists it), so while the scenario ran; another scenario of the run (or
//!   another run on the node) running at that moment reports it too, as nothing in an empty
//!   folder says whose it is.

use crate::backend::{Backend, ExecRequest, PodRef};
use crate::node::{CgroupFolder, NodeFolders, NodeView};
use kandev_report::NestedInventory;
use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

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

/// The node's cgroup folders when a scenario starts, and when that was.
#[derive(Debug, Clone)]
pub struct CgroupBaseline {
    /// Per node its folders, or why they were not listed; Err: the view lists none, and why.
    pub folders: Result<NodeFolders, String>,
    pub started: SystemTime,
}

/// How many times the baseline is listed while a node's listing fails (a folder removed while
/// it was read, an exec cut short), and the pause between: bounded, since every scenario
/// waits for it.
const BASELINE_LISTINGS: usize = 3;
const BASELINE_PAUSE: Duration = Duration::from_secs(1);

/// Lists the node's cgroup folders as the scenario starts: a node whose listing failed is
/// listed again (up to `BASELINE_LISTINGS` times in all), each node keeping its first listing.
pub async fn cgroup_baseline(node: Option<&dyn NodeView>) -> CgroupBaseline {
    let started = SystemTime::now();
    let Some(node) = node else {
        return CgroupBaseline {
            folders: Err("there is no node view".into()),
            started,
        };
    };
    let mut folders = node.cgroup_folders().await;
    for _ in 1..BASELINE_LISTINGS {
        let Ok(listed) = &mut folders else { break };
        if listed.values().all(Result::is_ok) {
            break;
        }
        tokio::time::sleep(BASELINE_PAUSE).await;
        let Ok(again) = node.cgroup_folders().await else {
            continue;
        };
        for (name, listing) in again {
            match listed.get(&name) {
                Some(Ok(_)) => {}
                _ => {
                    listed.insert(name, listing);
                }
            }
        }
    }
    CgroupBaseline { folders, started }
}

/// Whether a folder made while the scenario ran (it is not in the baseline) is its (see the
/// module's rules): by its processes' `HOSTNAME`s when it has processes; an empty one is.
pub fn is_ours(folder: &CgroupFolder, pod_names: &[String], nested_ids: &[String]) -> bool {
    if folder.pids.is_empty() {
        return true;
    }
    folder.hostnames.iter().any(|host| {
        !host.is_empty()
            && (pod_names.iter().any(|p| p == host)
                || (host.len() >= 12 && nested_ids.iter().any(|id| id.starts_with(host.as_str()))))
    })
}

/// What the ledger made of the node's cgroup folders.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupsLeft {
    /// The folders made while the scenario ran that outlived its teardown and are its, on the
    /// nodes compared, as `node: cgroup <folder> ...` lines (empty: none).
    pub left: Vec<String>,
    /// What was not compared, and why (None: every node was): a view that lists no cgroup
    /// folders, a node whose folders could not be listed when the scenario started. Never
    /// "nothing left".
    pub not_compared: Option<String>,
}

/// ` on node <name>`, for a view of several nodes (a view of one names none).
fn on_node(node: &str) -> String {
    if node.is_empty() {
        String::new()
    } else {
        format!(" on node {node}")
    }
}

/// `node <name>: `, for a view of several nodes (a view of one names none).
fn node_prefix(node: &str) -> String {
    if node.is_empty() {
        String::new()
    } else {
        format!("node {node}: ")
    }
}

/// The cgroup folders made while the scenario ran that outlived its teardown and are its,
/// on every node listed when it started (each node's folders compared with its own).
/// Asked again until none is left, for up to the node's settle time (processes die and
/// folders go asynchronously). Err when a node's folders were listed before the scenario and
/// cannot be after it: a failed re-listing is no evidence that nothing is new.
pub async fn cgroups_left(
    node: &dyn NodeView,
    baseline: &CgroupBaseline,
    pod_names: &[String],
    nested_ids: &[String],
) -> Result<CgroupsLeft, String> {
    const NOT_LOOKED_FOR: &str = "so a cgroup the scenario made outside its Pods' is not looked for there (its Pods' own cgroups are)";
    let before = match &baseline.folders {
        Ok(nodes) => nodes,
        Err(why) => {
            return Ok(CgroupsLeft {
                left: Vec::new(),
                not_compared: Some(format!("{why}, {NOT_LOOKED_FOR}")),
            });
        }
    };
    let mut compared = Vec::new();
    let mut unlisted = Vec::new();
    for (name, listing) in before {
        match listing {
            Ok(folders) => compared.push((name.as_str(), folders)),
            Err(why) => unlisted.push(format!("the cgroup folders{} ({why})", on_node(name))),
        }
    }
    let not_compared = if unlisted.is_empty() && compared.is_empty() {
        Some(format!(
            "{} listed the cgroup folders of no node when the scenario started, {NOT_LOOKED_FOR}",
            node.describe()
        ))
    } else {
        (!unlisted.is_empty()).then(|| {
            format!(
                "{} could not list {} when the scenario started (listed {BASELINE_LISTINGS} times), {NOT_LOOKED_FOR}",
                node.describe(),
                unlisted.join("; ")
            )
        })
    };
    if compared.is_empty() {
        return Ok(CgroupsLeft {
            left: Vec::new(),
            not_compared,
        });
    }
    let last = std::sync::Mutex::new(Vec::new());
    // The nodes listed before the scenario whose last listing after it failed, and why.
    let relisting_failed = std::sync::Mutex::new(Vec::new());
    let settled = crate::wait::until(
        "the scenario's cgroup folders to go",
        node.settle_time(),
        SETTLE_POLL,
        || async {
            let now = node.cgroup_folders().await;
            let mut left = Vec::new();
            let mut failed = Vec::new();
            for (name, before) in &compared {
                // Listed before the scenario but not now: no evidence that nothing is left.
                // Asked again until the settle time is up; only a last listing that failed
                // counts.
                let now = match &now {
                    Ok(nodes) => match nodes.get(*name) {
                        Some(Ok(folders)) => folders,
                        Some(Err(why)) => {
                            failed.push(format!("{}{why}", node_prefix(name)));
                            continue;
                        }
                        None => {
                            failed.push(format!("{}not listed", node_prefix(name)));
                            continue;
                        }
                    },
                    Err(why) => {
                        failed.push(why.clone());
                        continue;
                    }
                };
                left.extend(new_and_ours(node, name, before, now, pod_names, nested_ids).await);
            }
            let done = left.is_empty() && failed.is_empty();
            if let Ok(mut last) = last.lock() {
                *last = left;
            }
            if let Ok(mut last) = relisting_failed.lock() {
                *last = failed;
            }
            Ok::<_, crate::wait::WaitTimedOut>(done.then_some(()))
        },
    )
    .await;
    let left = last.into_inner().unwrap_or_default();
    let failed = relisting_failed.into_inner().unwrap_or_default();
    if settled.is_err() && !failed.is_empty() {
        return Err(format!(
            "the node's cgroup folders were listed before the scenario but could not be listed after its teardown ({}: {}): no folder it made can be ruled out{}",
            node.describe(),
            failed.join("; "),
            if left.is_empty() {
                String::new()
            } else {
                format!("; elsewhere: {}", left.join("; "))
            }
        ));
    }
    Ok(CgroupsLeft {
        left: if settled.is_ok() { Vec::new() } else { left },
        not_compared,
    })
}

/// The folders of `node_name` listed `now` but not `before` that are the scenario's, as leak
/// lines. New folders below a new folder that is another's (its processes carry another
/// HOSTNAME: a container another program started meanwhile, a Kind node of another cluster
/// with its systemd units' folders) are that one's too. Sorted, a folder comes before what is
/// below it.
async fn new_and_ours(
    node: &dyn NodeView,
    node_name: &str,
    before: &BTreeSet<String>,
    now: &BTreeSet<String>,
    pod_names: &[String],
    nested_ids: &[String],
) -> Vec<String> {
    let mut left = Vec::new();
    let mut theirs: Vec<&String> = Vec::new();
    for path in now.difference(before) {
        if theirs
            .iter()
            .any(|t| path.starts_with(t.as_str()) && path[t.len()..].starts_with('/'))
        {
            continue;
        }
        let Some(folder) = node.cgroup_folder(node_name, path).await else {
            continue;
        };
        if !is_ours(&folder, pod_names, nested_ids) {
            // Another's only by a HOSTNAME that is not the scenario's; processes without one
            // leave what is below to be judged on its own.
            if folder.hostnames.iter().any(|h| !h.is_empty()) {
                theirs.push(path);
            }
            continue;
        }
        left.push(format!(
            "node: cgroup {path}{} (made during the scenario, outside its Pods' cgroups; processes {:?})",
            on_node(node_name),
            folder.pids
        ));
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(pids: &[u32], hostnames: &[&str], created: Option<SystemTime>) -> CgroupFolder {
        CgroupFolder {
            path: "/kandev-acceptance-escaped".into(),
            created,
            pids: pids.to_vec(),
            hostnames: hostnames.iter().map(|h| (*h).to_owned()).collect(),
        }
    }

    /// Attribution under concurrency: processes say whose a new folder is; an empty one is
    /// the scenario's.
    #[test]
    fn a_new_cgroup_is_the_scenarios_by_its_processes() {
        let pods = vec!["kandev-0123456789abcdef".to_owned()];
        let nested = vec!["9c8b7a6f5e4d3c2b1a09".to_owned()];
        let ours = |f: &CgroupFolder| is_ours(f, &pods, &nested);
        assert!(ours(&folder(&[7], &["kandev-0123456789abcdef"], None)));
        assert!(ours(&folder(&[7, 8], &["", "9c8b7a6f5e4d"], None)));
        assert!(!ours(&folder(&[7], &["kandev-ffffffffffffffff"], None)));
        assert!(!ours(&folder(&[7], &[""], None)));
        assert!(ours(&folder(&[], &[], Some(SystemTime::now()))));
    }

    /// On a recorded node: a folder a companion made outside its Pod's cgroup during the
    /// scenario, still there after teardown, is reported; one made before is not; Pod
    /// cgroups are left out of the listing.
    #[tokio::test]
    async fn a_cgroup_made_outside_the_pod_during_the_scenario_is_a_leak() {
        use crate::node::{CgroupFs, HostNode};
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("cgroup");
        std::fs::create_dir_all(
            root.join("kandev-acceptance/pod0c0ffee0-1111-2222-3333-444455556666/x"),
        )
        .unwrap();
        std::fs::write(root.join("cgroup.controllers"), "memory").unwrap();
        std::fs::create_dir_all(root.join("system.slice")).unwrap();
        let node = HostNode {
            cgroups: CgroupFs::at(&root).unwrap(),
            proc_root: tmp.path().join("proc"),
            scope: "kandev-acceptance".into(),
            description: "fixture".into(),
            settle: Duration::from_millis(0),
            ledger: crate::node::LedgerFolders::HostButScope,
        };
        let baseline = cgroup_baseline(Some(&node)).await;
        let listed = baseline.folders.clone().unwrap()[""].clone().unwrap();
        // Neither the folder Pods are made under (the view's scope) nor Pod cgroups.
        assert_eq!(listed, BTreeSet::from(["/system.slice".to_owned()]));
        // Made by the companion during the scenario, empty once its process was killed.
        std::fs::create_dir_all(root.join("kandev-acceptance-escaped")).unwrap();
        let compared = |left: CgroupsLeft| {
            assert_eq!(left.not_compared, None, "listed before, so compared");
            left.left
        };
        let left = compared(cgroups_left(&node, &baseline, &[], &[]).await.unwrap());
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(left[0].contains("/kandev-acceptance-escaped"));
        std::fs::remove_dir(root.join("kandev-acceptance-escaped")).unwrap();
        assert_eq!(
            compared(cgroups_left(&node, &baseline, &[], &[]).await.unwrap()),
            Vec::<String>::new()
        );
        // Another program's container started meanwhile (a Kind node of another cluster):
        // its folder holds a process of another HOSTNAME, and the empty folders below it
        // (its systemd units') are its too, not the scenario's.
        let other = root.join("docker/4d2f8c1b9e7a");
        for unit in ["system.slice", "kubelet.slice/kubelet-kubepods.slice"] {
            std::fs::create_dir_all(other.join(unit)).unwrap();
        }
        std::fs::write(other.join("cgroup.procs"), "9\n").unwrap();
        std::fs::create_dir_all(tmp.path().join("proc/9")).unwrap();
        std::fs::write(
            tmp.path().join("proc/9/environ"),
            "container=docker\0HOSTNAME=other-control-plane\0",
        )
        .unwrap();
        let left = compared(cgroups_left(&node, &baseline, &[], &[]).await.unwrap());
        assert!(
            left.iter().all(|l| !l.contains("4d2f8c1b9e7a")),
            "{left:#?}"
        );
        // The positive control: an empty folder made beside it is the scenario's.
        std::fs::create_dir_all(root.join("docker/escaped")).unwrap();
        let left = compared(cgroups_left(&node, &baseline, &[], &[]).await.unwrap());
        assert!(
            left.len() == 2 && left.iter().all(|l| l.contains("/docker")),
            "the new /docker and /docker/escaped: {left:#?}"
        );
        std::fs::remove_dir_all(root.join("docker")).unwrap();
        // A view that lists folders but could not when the scenario started: not compared,
        // saying why, never "nothing left".
        let unlisted = CgroupBaseline {
            folders: Ok(NodeFolders::from([(
                String::new(),
                Err("unreadable".into()),
            )])),
            started: SystemTime::now(),
        };
        let left = cgroups_left(&node, &unlisted, &[], &[]).await.unwrap();
        let why = left.not_compared.unwrap_or_default();
        assert!(
            why.contains("when the scenario started") && why.contains("unreadable"),
            "{why}"
        );
        // A tree that cannot be listed again is an error, not "nothing new".
        std::fs::remove_dir_all(&root).unwrap();
        let why = cgroups_left(&node, &baseline, &[], &[]).await.unwrap_err();
        assert!(
            why.contains("could not be listed after its teardown"),
            "{why}"
        );
    }

    /// Nodes as a cluster's view shows them: each a host view of its own tree, keyed by its
    /// name; a node `down` is not listed (why), for the listings `down` still counts.
    struct Nodes {
        nodes: std::collections::BTreeMap<String, crate::node::HostNode>,
        down: std::sync::Mutex<std::collections::BTreeMap<String, (String, usize)>>,
    }

    #[async_trait::async_trait]
    impl NodeView for Nodes {
        fn describe(&self) -> String {
            "the test's nodes".into()
        }
        fn settle_time(&self) -> Duration {
            Duration::ZERO
        }
        async fn pod_cgroup(&self, _: &str) -> anyhow::Result<Option<String>> {
            Ok(None)
        }
        async fn read_cgroup(&self, _: &str) -> anyhow::Result<crate::node::PodCgroupReading> {
            Ok(Default::default())
        }
        async fn processes_matching(
            &self,
            _: &str,
        ) -> anyhow::Result<Vec<crate::node::NodeProcess>> {
            Ok(Vec::new())
        }
        async fn kernel_memcg_ooms(&self, _: &str) -> Option<Vec<String>> {
            None
        }
        async fn pod_remains(&self, _: &str, _: &str, _: &[String]) -> anyhow::Result<Vec<String>> {
            Ok(Vec::new())
        }
        async fn cgroup_folders(&self) -> Result<NodeFolders, String> {
            let mut listed = NodeFolders::new();
            for (name, node) in &self.nodes {
                let down = match self.down.lock().unwrap().get_mut(name) {
                    Some((why, listings)) if *listings > 0 => {
                        *listings -= 1;
                        Some(why.clone())
                    }
                    _ => None,
                };
                let listing = match down {
                    Some(why) => Err(why),
                    None => node.cgroup_folders().await?.remove("").unwrap(),
                };
                listed.insert(name.clone(), listing);
            }
            Ok(listed)
        }
        async fn cgroup_folder(&self, node: &str, folder: &str) -> Option<CgroupFolder> {
            self.nodes.get(node)?.cgroup_folder("", folder).await
        }
    }

    /// Issue 41, item 5, on a view of several nodes (`--node-inspector`): each node's folders
    /// are compared with its own (a folder one node had before is new on another, and named
    /// with its node); a node not listed when the scenario started, after the retries, is not
    /// compared and is named with why, the others still are; one listed then that cannot be
    /// listed after the scenario is an error, not "nothing new"; a listing that failed once
    /// at the start is retried.
    #[tokio::test(start_paused = true)]
    async fn each_node_is_compared_with_its_own_folders() {
        use crate::node::{CgroupFs, HostNode};
        let tmp = tempfile::tempdir().unwrap();
        let tree = |name: &str| {
            let root = tmp.path().join(name);
            std::fs::create_dir_all(root.join("system.slice")).unwrap();
            std::fs::write(root.join("cgroup.controllers"), "memory").unwrap();
            HostNode {
                cgroups: CgroupFs::at(&root).unwrap(),
                proc_root: tmp.path().join("proc"),
                scope: String::new(),
                description: name.into(),
                settle: Duration::ZERO,
                ledger: crate::node::LedgerFolders::HostButScope,
            }
        };
        let view = Nodes {
            nodes: [("node-a", tree("a")), ("node-b", tree("b"))]
                .map(|(n, t)| (n.to_owned(), t))
                .into(),
            down: Default::default(),
        };
        std::fs::create_dir_all(tmp.path().join("a/escaped")).unwrap();
        // Down for the first listing only: the baseline's retry lists it.
        view.down
            .lock()
            .unwrap()
            .insert("node-b".into(), ("an exec cut short".into(), 1));
        let baseline = cgroup_baseline(Some(&view)).await;
        let listed = baseline.folders.clone().unwrap();
        assert!(listed.values().all(Result::is_ok), "{listed:?}");
        std::fs::create_dir_all(tmp.path().join("b/escaped")).unwrap();
        let left = cgroups_left(&view, &baseline, &[], &[]).await.unwrap();
        assert_eq!(left.not_compared, None);
        assert_eq!(left.left.len(), 1, "{left:?}");
        assert!(
            left.left[0].starts_with("node: cgroup /escaped on node node-b "),
            "{left:?}"
        );
        // node-b's inspector did not start: not compared, named; node-a still is.
        std::fs::remove_dir(tmp.path().join("b/escaped")).unwrap();
        view.down.lock().unwrap().insert(
            "node-b".into(),
            ("its inspector Pod did not start".into(), BASELINE_LISTINGS),
        );
        let baseline = cgroup_baseline(Some(&view)).await;
        std::fs::create_dir_all(tmp.path().join("a/made")).unwrap();
        let left = cgroups_left(&view, &baseline, &[], &[]).await.unwrap();
        let why = left.not_compared.unwrap_or_default();
        assert!(
            why.contains("on node node-b (its inspector Pod did not start)")
                && !why.contains("node-a"),
            "{why}"
        );
        assert!(
            left.left.len() == 1 && left.left[0].contains("/made on node node-a"),
            "{:?}",
            left.left
        );
        // node-a listed before the scenario, not after it: an error naming it.
        view.down
            .lock()
            .unwrap()
            .insert("node-a".into(), ("exec refused".into(), usize::MAX));
        let why = cgroups_left(&view, &baseline, &[], &[]).await.unwrap_err();
        assert!(
            why.contains("could not be listed after its teardown")
                && why.contains("node node-a: exec refused"),
            "{why}"
        );
    }

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
