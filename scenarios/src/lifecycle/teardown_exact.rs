//! `lifecycle::teardown_exact` — Kandev's terminal cleanup removes exactly the owned Pod and
//! workspace (checked by UID and the exact owned labels); the nested processes and the Pod's
//! cgroups vanish from the node; look-alikes survive: a neighbouring session (same name
//! prefix, other nonce), a same-name Pod with another UID and a Pod with a foreign
//! `kandev.ai/*` label both make the cleanup fail closed and stay untouched.
//!
//! Can fail when nested processes outlive the Pod (a daemon that escapes the Pod's PID
//! namespace and cgroups), when cleanup deletes a look-alike, or when it deletes an object
//! whose identity does not match the record.

use crate::support::{NO_NODE_VIEW, build_workload, probe_tag, require_success};
use kandev_harness::pod::template::WorkspaceMode;
use kandev_harness::runner::{
    Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, promise, raise_platform_fault,
};
use kandev_harness::session::{RecordMismatch, SessionOptions, terminal_cleanup};
use kandev_report::Capability;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

const REMOVES: Check = Check {
    id: "removes_owned",
    promise: "terminal cleanup removes exactly the owned Pod and its workspace",
    twin: Twin::Mirror(
        "only the terminal cleanup's own deletes decide it (Kandev's, mirrored in terminal_cleanup in harness/src/session/recovery.rs, tested against the API double in harness/tests/kube_backend.rs): nothing of the Pod runs at its deletion or can hold it. Kept in the scenario because it deletes the running Pod and claim by their recorded UIDs and reads the API back",
    ),
};
const VANISH: Check = Check {
    id: "nested_vanish",
    promise: "nested processes and their cgroups vanish from the node when the Pod is deleted",
    twin: Twin::Template("daemon-escapes-pod"),
};
const SURVIVE: Check = Check {
    id: "look_alikes_survive",
    promise: "look-alike objects the run did not tear down survive untouched",
    twin: Twin::Mirror(
        "decided by the cleanup's identity checks alone (verify_recorded in harness/src/session/recovery.rs, tested against the API double in harness/tests/kube_backend.rs: terminal_cleanup_fails_closed_on_a_foreign_uid_or_an_extra_kandev_label); the look-alikes are the harness's. Kept in the scenario because the look-alikes are real objects beside the running Pod",
    ),
};
const FAIL_CLOSED: Check = Check {
    id: "fails_closed",
    promise: "cleanup fails closed on a same-name Pod with another UID or a foreign kandev.ai label",
    twin: Twin::Mirror(
        "decided by the cleanup's identity checks alone (verify_recorded in harness/src/session/recovery.rs, tested against the API double in harness/tests/kube_backend.rs: terminal_cleanup_fails_closed_on_a_foreign_uid_or_an_extra_kandev_label); the look-alikes are the harness's. Kept in the scenario because it is judged on real objects of the backend",
    ),
};

/// How long nested processes may take to die after their Pod is deleted (at least; a node
/// whose settle time is longer gets that).
const PROCESSES_VANISH: Duration = Duration::from_secs(10);

/// Marker prefix of nested processes this scenario starts (tests kill leftovers by it).
pub const MARKER_PREFIX: &str = "kandev-teardown-";

pub fn scenario() -> Scenario {
    Scenario {
        name: "lifecycle::teardown_exact",
        promise: "terminal delete removes exactly the owned Pod and volume (UID-checked), nested processes and their cgroups vanish from the node, and look-alike objects the run does not own survive untouched",
        checks: &[VANISH, REMOVES, SURVIVE, FAIL_CLOSED],
        timeout: Duration::from_secs(300),
        starts_first: false,
        run,
    }
}

/// `nested_vanish`'s cgroup half: the Pod's cgroup seen on the node before the delete (the
/// positive control: a view that cannot find it would read "vanished" afterwards too), and
/// not after.
fn cgroup_vanished(before: Option<&str>, after: Option<&str>) -> Result<(), String> {
    match (before, after) {
        (None, _) => Err(
            "the node showed no cgroup of the Pod before its deletion: its vanishing could not be seen"
                .to_owned(),
        ),
        (Some(_), Some(left)) => Err(format!("the Pod cgroup {left} is still on the node")),
        (Some(_), None) => Ok(()),
    }
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        let Some(node) = ctx.node() else {
            return Ok(Verdict::Lacks(Capability::NodeView, NO_NODE_VIEW.into()));
        };
        ctx.step("launch the owned session and a neighbour");
        let mut sessions = ctx
            .launch_many(vec![SessionOptions::default(), SessionOptions::default()])
            .await?;
        let (Some(neighbour), Some(owned)) = (sessions.pop(), sessions.pop()) else {
            anyhow::bail!("two sessions were launched")
        };
        let tag = probe_tag(ctx, "teardown");
        require_success(
            &build_workload(&owned, &tag).await?,
            &VANISH,
            "build the workload image",
        )?;
        let marker = format!(
            "{MARKER_PREFIX}{}",
            kandev_harness::pod::identity::random_hex(6)
        );
        require_success(
            &owned
                .agent_sh(
                    &format!("docker run -d --network none {tag} sleep 600 {marker}"),
                    Duration::from_secs(60),
                )
                .await?,
            &VANISH,
            "start a nested process",
        )?;
        // A per-node view (the cluster's inspectors) looks only on nodes it knows a Pod on.
        node.track_pod(&owned.pod.uid).await;
        let nested = ctx
            .wait_within(
                "the nested process on the node",
                Duration::from_secs(30),
                || async {
                    let found = node.processes_matching(&marker).await?;
                    Ok((!found.is_empty()).then_some(found))
                },
            )
            .await
            .unwrap_or_default();
        ctx.evidence("nested_processes", &nested);
        promise(!nested.is_empty(), &VANISH, || {
            format!("no nested process with {marker} on the node")
        })?;

        // The positive control of the cgroup half: the node shows the Pod's cgroup before
        // the delete (a view that cannot find it would read "vanished" afterwards too).
        let pod_cgroup = node.pod_cgroup(&owned.pod.uid).await?;
        ctx.evidence("pod_cgroup_before", &pod_cgroup);
        if pod_cgroup.is_none() {
            return Err(kandev_harness::runner::broken(
                &VANISH,
                format!(
                    "{} (on {})",
                    cgroup_vanished(None, None).err().unwrap_or_default(),
                    node.describe()
                ),
            ));
        }

        ctx.step("terminal cleanup of the owned session");
        let recorded = owned.recorded();
        let backend = ctx.backend();
        // A failing delete is evidence here (processes that outlive the Pod keep its cgroup
        // busy): judge by what the node shows, and report the error itself only if the node
        // shows nothing wrong.
        let cleanup = terminal_cleanup(backend.as_ref(), &recorded).await;
        ctx.evidence(
            "cleanup",
            cleanup
                .as_ref()
                .map_err(|e| kandev_harness::error_chain(e.as_ref()))
                .err(),
        );
        ctx.step("nested processes and cgroups vanish from the node");
        // The node forgets a deleted Pod asynchronously: processes die after their container,
        // and a kubelet removes the Pod's cgroup in housekeeping, seconds after the Pod
        // object is gone. Both are polled for the node's settle time (at least
        // PROCESSES_VANISH), and judged on what the node shows then.
        let _ = ctx
            .wait_within(
                "the nested processes and the Pod cgroup to vanish from the node",
                node.settle_time().max(PROCESSES_VANISH),
                || async {
                    let gone = node.processes_matching(&marker).await?.is_empty()
                        && node.pod_cgroup(&recorded.pod.uid).await?.is_none();
                    Ok(gone.then_some(()))
                },
            )
            .await;
        let survivors = node.processes_matching(&marker).await?;
        let cgroup_left = node.pod_cgroup(&recorded.pod.uid).await?;
        ctx.evidence("survivors", &survivors);
        ctx.evidence("pod_cgroup_left", &cgroup_left);
        promise(survivors.is_empty(), &VANISH, || {
            format!("still running after the Pod was deleted: {survivors:?}")
        })?;
        let vanished = cgroup_vanished(pod_cgroup.as_deref(), cgroup_left.as_deref());
        promise(vanished.is_ok(), &VANISH, || {
            vanished.err().unwrap_or_default()
        })?;
        cleanup?;

        ctx.step("the owned Pod and workspace are gone");
        let pod_left = backend
            .pod_uid(&recorded.pod.namespace, &recorded.pod.name)
            .await?;
        let workspace = recorded
            .workspace
            .as_ref()
            .map(|w| w.name.clone())
            .unwrap_or_default();
        let volume_left = backend.get_workspace(&workspace).await?.is_some();
        ctx.evidence(
            "after",
            json!({"pod": pod_left, "workspace_volume_exists": volume_left}),
        );
        promise(pod_left.is_none() && !volume_left, &REMOVES, || {
            format!(
                "left: Pod uid {}, workspace volume {workspace} exists: {volume_left}",
                pod_left.as_deref().unwrap_or("gone")
            )
        })?;

        ctx.step("the neighbour survives");
        let neighbour_uid = backend
            .pod_uid(&neighbour.pod.namespace, &neighbour.pod.name)
            .await?;
        let alive = neighbour
            .agent_sh("docker info --format '{{.ID}}'", Duration::from_secs(30))
            .await?;
        let neighbour_volume = neighbour
            .workspace
            .as_ref()
            .map(|w| w.name.clone())
            .unwrap_or_default();
        let volume_ok = backend.get_workspace(&neighbour_volume).await?.is_some();
        ctx.evidence("neighbour", json!({"pod": neighbour.pod.name, "uid": neighbour_uid, "daemon": alive.stdout.trim(), "workspace_exists": volume_ok}));
        promise(
            neighbour_uid.as_deref() == Some(neighbour.pod.uid.as_str())
                && alive.success()
                && volume_ok,
            &SURVIVE,
            || {
                format!(
                    "the neighbour {} was disturbed: uid {}, daemon {}, workspace exists {volume_ok}",
                    neighbour.pod.name,
                    neighbour_uid.as_deref().unwrap_or("gone"),
                    alive.summary()
                )
            },
        )?;

        // The neighbour has shown what it is for: its own teardown now, and its Pod gone
        // before the look-alikes start, so the scenario never holds more than two task Pods
        // (what --jobs assumes of every scenario: a 2-core Kind node has room for two).
        ctx.step("the neighbour's own teardown");
        terminal_cleanup(backend.as_ref(), &neighbour.recorded()).await?;
        let neighbour_gone = ctx
            .wait_within(
                "the neighbour's Pod to be gone",
                Duration::from_secs(90),
                || async {
                    let uid = backend
                        .pod_uid(&neighbour.pod.namespace, &neighbour.pod.name)
                        .await?;
                    Ok(uid.is_none().then_some(()))
                },
            )
            .await;
        ctx.evidence("neighbour_gone", neighbour_gone.is_ok());

        ctx.step("fail closed on look-alikes");
        let same_name = ctx
            .create_session(SessionOptions {
                identity: Some(owned.identity.clone()),
                workspace_mode: Some(WorkspaceMode::EmptyDir),
                ..Default::default()
            })
            .await?;
        // A lost API server is the cluster's error, not a cleanup that failed open.
        let refused_uid =
            raise_platform_fault(terminal_cleanup(backend.as_ref(), &recorded).await)?;
        let foreign = ctx
            .create_session(SessionOptions {
                workspace_mode: Some(WorkspaceMode::EmptyDir),
                extra_labels: BTreeMap::from([(
                    "kandev.ai/foreign-owner".to_owned(),
                    "someone-else".to_owned(),
                )]),
                ..Default::default()
            })
            .await?;
        let refused_label =
            raise_platform_fault(terminal_cleanup(backend.as_ref(), &foreign.recorded()).await)?;
        let describe = |r: &anyhow::Result<()>| match r {
            Ok(()) => "deleted".to_owned(),
            Err(e) => kandev_harness::error_chain(e.as_ref()),
        };
        ctx.evidence("same_name_other_uid", describe(&refused_uid));
        ctx.evidence("foreign_label", describe(&refused_label));
        let is_refusal = |r: &anyhow::Result<()>| {
            r.as_ref()
                .err()
                .is_some_and(|e| e.downcast_ref::<RecordMismatch>().is_some())
        };
        promise(
            is_refusal(&refused_uid) && is_refusal(&refused_label),
            &FAIL_CLOSED,
            || {
                format!(
                    "same-name Pod: {}; foreign label: {}",
                    describe(&refused_uid),
                    describe(&refused_label)
                )
            },
        )?;
        let still = (
            backend
                .pod_uid(&same_name.pod.namespace, &same_name.pod.name)
                .await?,
            backend
                .pod_uid(&foreign.pod.namespace, &foreign.pod.name)
                .await?,
        );
        promise(
            still.0.as_deref() == Some(same_name.pod.uid.as_str())
                && still.1.as_deref() == Some(foreign.pod.uid.as_str()),
            &SURVIVE,
            || {
                format!(
                    "after the refused cleanups: same-name Pod uid {}, foreign-label Pod uid {}",
                    still.0.as_deref().unwrap_or("gone"),
                    still.1.as_deref().unwrap_or("gone")
                )
            },
        )?;
        Ok(Verdict::Passed)
    })
}

#[cfg(test)]
mod tests {
    use crate::support::fixture_node::{FixtureNode, MARKER, pod_path, run_escape};
    use kandev_harness::node::{CgroupVersion, NodeView};

    /// On a recorded v1 and v2 node, the twin's own escape step (run through sh, the
    /// companion's view of its nested containers' cgroups given as the tree it reads) moves
    /// every nested process out of the Pod's cgroups into the node's own tree: deleting the
    /// Pod's cgroups then leaves them running, and `nested_vanish` sees them there.
    /// A view that never saw the Pod's cgroup cannot see it vanish: that fails the check,
    /// as a cgroup still there does; only seen-then-gone holds.
    #[tokio::test]
    async fn the_cgroup_half_needs_the_pod_cgroup_seen_before_the_delete() {
        use super::cgroup_vanished;
        let node = FixtureNode::new(CgroupVersion::V2);
        let view = node.view();
        let before = view
            .pod_cgroup(crate::support::fixture_node::POD_UID)
            .await
            .unwrap();
        assert_eq!(before.as_deref(), Some(pod_path().as_str()));
        assert!(cgroup_vanished(before.as_deref(), None).is_ok());
        assert!(cgroup_vanished(before.as_deref(), before.as_deref()).is_err());
        // A probe made to fail (a view that looks elsewhere) finds nothing before the delete.
        let mut blind = node.view();
        blind.scope = "elsewhere".into();
        let unseen = blind
            .pod_cgroup(crate::support::fixture_node::POD_UID)
            .await
            .unwrap();
        assert_eq!(unseen, None);
        assert!(cgroup_vanished(unseen.as_deref(), None).is_err());
    }

    #[tokio::test]
    async fn the_teardown_twin_moves_nested_processes_out_on_v1_and_v2_trees() {
        for version in [CgroupVersion::V1, CgroupVersion::V2] {
            let mut node = FixtureNode::new(version);
            // The companion's own view of its cgroups (its cgroup namespace): the nested
            // container's folder lists the nested process.
            let view = node.dir.path().join("companion");
            let nested = match version {
                CgroupVersion::V1 => view.join("memory/docker/9c8b7a6f5e4d"),
                CgroupVersion::V2 => view.join("docker/9c8b7a6f5e4d"),
            };
            std::fs::create_dir_all(&nested).unwrap();
            std::fs::write(nested.join("cgroup.procs"), "105\n").unwrap();
            run_escape(
                "templates/broken/daemon-escapes-pod.yaml",
                &format!("escape {} \"$KANDEV_NODE_CGROUP\"", view.display()),
                &node,
            );
            node.apply_moves();
            let survivors = node.view().processes_matching(MARKER).await.unwrap();
            assert_eq!(survivors.len(), 1, "{version:?}");
            for controller in ["memory", "pids"] {
                let path = survivors[0].cgroup_of(controller).unwrap_or_default();
                assert!(
                    !path.starts_with(&pod_path()) && path.contains("kandev-acceptance-escaped"),
                    "{version:?}: {controller} {path}"
                );
            }
        }
    }
}
