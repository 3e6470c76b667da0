//! `lifecycle::replacement_snapshot` — a replacement Pod (after the recorded one went missing)
//! is composed from the **launch snapshot**, never from the profile as it is now (Kandev's
//! AC-001.4, `recreateMissingKubernetesPod`): the session is launched with a second companion
//! (`observer`, no workspace grant), then the profile is edited (a workspace grant added to
//! the observer, its image changed), the Pod deleted and replaced. From the running
//! replacement: the observer has no `/workspace` and still runs the recorded image; the
//! recorded grant (the daemon's) is kept; the claim is the same object (name and UID) with the
//! task's files; platform, images and volumes are the recorded ones.
//!
//! Can fail when a replacement recomposes from the edited profile, loses the recorded grant or
//! mounts another claim.

use crate::support::container_mut;
use k8s_openapi::api::core::v1::{Container, Pod, PodTemplate, VolumeMount};
use kandev_harness::backend::ExecRequest;
use kandev_harness::runner::{Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, promise};
use kandev_harness::session::{Session, SessionOptions};
use serde_json::json;
use std::time::Duration;

const OBSERVER: &str = "observer";

const EDIT_IGNORED: Check = Check {
    id: "edit_ignored",
    promise: "the replacement runs the recorded template: a grant and an image added by a later profile edit are not in it, and its platform, images and volumes are the launched Pod's",
    twin: Twin::Mirror(
        "only the replacement's composition decides it (Kandev's, mirrored in harness/src/session/snapshot.rs and unit-tested there and in this scenario), which no template, image or prepare script reaches. Kept in the scenario because it compares the launched and the replacement Pod as the backend reads them back",
    ),
};
const GRANT_KEPT: Check = Check {
    id: "grant_kept",
    promise: "the recorded workspace grant is kept: the replacement's companion sees the task's files",
    twin: Twin::Template("daemon-hides-workspace-on-restart"),
};
const SAME_CLAIM: Check = Check {
    id: "same_claim",
    promise: "the replacement mounts the same claim (name and UID) with the task's files",
    twin: Twin::Mirror(
        "the claim is chosen by the replacement (Kandev's, mirrored in harness/src/session/recovery.rs) and checked by name and UID before anything is created; whether the task's files survive is grant_kept's, judged before it. Kept in the scenario because the claim's UID and the task's files are read from the running replacement",
    ),
};

/// What is wrong with the task's file as every dockerd of the companion sees it (the probe's
/// `== dockerd PID` sections, then `== end`): none found, the listing cut short, or a daemon
/// whose view lacks `marker`. Empty: the grant holds.
fn grant_seen_by_daemons(text: &str, marker: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    if !text.lines().any(|l| l == "== end") {
        wrong.push("the listing did not reach its end".to_owned());
    }
    let mut daemons = 0;
    for section in text.split("== dockerd ").skip(1) {
        daemons += 1;
        let (pid, body) = section.split_once('\n').unwrap_or((section, ""));
        let seen = body.lines().next().unwrap_or_default().trim();
        if seen != marker {
            wrong.push(format!("dockerd {pid} sees {seen:?}"));
        }
    }
    if daemons == 0 {
        wrong.push("no dockerd process was found to read its view".to_owned());
    }
    wrong
}

pub fn scenario() -> Scenario {
    Scenario {
        name: "lifecycle::replacement_snapshot",
        promise: "a replacement after a lost Pod composes the launch snapshot with the same claim, never the edited profile",
        checks: &[EDIT_IGNORED, GRANT_KEPT, SAME_CLAIM],
        timeout: Duration::from_secs(240),
        starts_first: false,
        run,
    }
}

/// The run's template with a second companion that has no workspace grant: the daemon's
/// image running `sleep`, unprivileged.
fn with_observer(template: &PodTemplate, daemon: &str) -> anyhow::Result<PodTemplate> {
    let mut template = template.clone();
    let image = container_mut(&mut template, daemon)?.image.clone();
    let observer: Container = serde_json::from_value(json!({
        "name": OBSERVER,
        "image": image,
        "command": ["sleep", "infinity"],
        "securityContext": {
            "runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": true,
            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
        },
        "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}, "requests": {"cpu": "10m", "memory": "16Mi"}},
    }))?;
    if let Some(spec) = template.template.as_mut().and_then(|t| t.spec.as_mut()) {
        spec.containers.push(observer);
    }
    Ok(template)
}

/// The profile edited after the launch: the observer gets a workspace grant and the worker's
/// image.
fn edited(launched: &PodTemplate, main: &str) -> anyhow::Result<PodTemplate> {
    let mut template = launched.clone();
    let worker_image = container_mut(&mut template, main)?.image.clone();
    let observer = container_mut(&mut template, OBSERVER)?;
    observer.image = worker_image;
    observer.volume_mounts = Some(vec![VolumeMount {
        name: "kandev-workspace".into(),
        mount_path: "/workspace".into(),
        ..Default::default()
    }]);
    Ok(template)
}

/// What a composed Pod runs, for comparing the replacement with the launched Pod: the
/// platform (node selector), every container's image and mounts, and the volumes.
fn shape(pod: &Pod) -> serde_json::Value {
    let spec = pod.spec.clone().unwrap_or_default();
    let containers: Vec<_> = spec
        .containers
        .iter()
        .map(|c| {
            let mounts: Vec<_> = c
                .volume_mounts
                .iter()
                .flatten()
                .map(|m| json!([m.name, m.mount_path, m.read_only.unwrap_or(false)]))
                .collect();
            json!({"name": c.name, "image": c.image, "mounts": mounts})
        })
        .collect();
    json!({
        "node_selector": spec.node_selector,
        "containers": containers,
        "volumes": spec.volumes,
    })
}

/// `sh -c script` in the observer: its exit code and output.
async fn in_observer(session: &Session, script: &str) -> anyhow::Result<(Option<i64>, String)> {
    let request =
        ExecRequest::new(OBSERVER, &["sh", "-c", script]).timeout(Duration::from_secs(20));
    let out = session.backend().exec(&session.pod, request).await?;
    Ok((
        out.exit_code,
        format!("{}{}", out.stdout_text(), out.stderr_text())
            .trim()
            .to_owned(),
    ))
}

/// Whether the observer's filesystem is the daemon image's (it has `dockerd`) and whether it
/// sees a `/workspace`.
const OBSERVER_PROBE: &str = "if command -v dockerd >/dev/null; then echo image=daemon; else echo image=other; fi; if [ -e /workspace ]; then echo workspace=present; else echo workspace=absent; fi";

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        if ctx.config().workspace_mode == kandev_harness::pod::template::WorkspaceMode::EmptyDir {
            return Ok(Verdict::Incompatible(
                "workspace mode empty_dir: Kandev refuses to replace a Pod whose workspace was an emptyDir (it is gone with the Pod); run with managed-pvc or existing-claim".into(),
            ));
        }
        ctx.step("launch with a second companion that has no workspace grant");
        let launched = with_observer(ctx.template(), &ctx.config().daemon_container)?;
        let session = ctx
            .launch(SessionOptions {
                template: Some(launched.clone()),
                ..Default::default()
            })
            .await?;
        let marker = kandev_harness::pod::identity::random_hex(6);
        let wrote = session
            .agent_sh(
                &format!("echo {marker} > /workspace/snapshot-{marker}.txt && echo ok"),
                Duration::from_secs(20),
            )
            .await?;
        anyhow::ensure!(
            wrote.success(),
            "write the task's file: {}",
            wrote.summary()
        );
        let before = in_observer(&session, OBSERVER_PROBE).await?;
        ctx.evidence(
            "launched",
            json!({"pod_uid": session.pod.uid, "observer": before.1, "snapshot_template_hash": session.snapshot.template_hash}),
        );
        anyhow::ensure!(
            before.1.lines().collect::<Vec<_>>() == ["image=daemon", "workspace=absent"],
            "the launched observer is not as composed (daemon image, no workspace): {}",
            before.1
        );

        // The Pods as the backend holds them (on a cluster, as the API server stores them).
        let read_back = |pod: Option<Pod>, which: &str| {
            pod.ok_or_else(|| anyhow::anyhow!("the {which} Pod could not be read back"))
        };
        let launched_pod = read_back(ctx.backend().pod_object(&session.pod).await?, "launched")?;

        ctx.step("edit the profile, lose the Pod, replace it");
        let profile_now = edited(&launched, &ctx.config().main_container)?;
        ctx.backend().delete_pod(&session.pod).await?;
        let replacement = ctx.replace(&session, Some(profile_now)).await?;
        let after = in_observer(&replacement, OBSERVER_PROBE).await?;
        let replaced_pod = read_back(
            ctx.backend().pod_object(&replacement.pod).await?,
            "replacement",
        )?;
        let (launched_shape, replaced_shape) = (shape(&launched_pod), shape(&replaced_pod));
        ctx.evidence(
            "replacement",
            json!({"pod_uid": replacement.pod.uid, "observer": after.1, "shape": replaced_shape, "launched_shape": launched_shape}),
        );

        ctx.step("the replacement runs the recorded template");
        promise(
            after.0 == Some(0)
                && after.1.lines().collect::<Vec<_>>() == ["image=daemon", "workspace=absent"],
            &EDIT_IGNORED,
            || {
                format!(
                    "the replacement's observer runs as the edited profile says: {}",
                    after.1.replace('\n', ", ")
                )
            },
        )?;
        promise(launched_shape == replaced_shape, &EDIT_IGNORED, || {
            format!(
                "the replacement's platform, images or volumes differ from the launched Pod's: launched {launched_shape}, replacement {replaced_shape}"
            )
        })?;

        ctx.step("the recorded grant is kept");
        // Read in the daemon's own mount namespace (`/proc/<pid>/root`), which is what the
        // containers it starts bind: a daemon started in a namespace of its own can see
        // another /workspace than an exec into its container does.
        let file = format!("workspace/snapshot-{marker}.txt");
        let daemon_sees = replacement
            .in_daemon(
                &[
                    "sh",
                    "-c",
                    r#"for p in /proc/[0-9]*; do [ "$(cat "$p/comm" 2>/dev/null)" = dockerd ] || continue; echo "== dockerd ${p#/proc/}"; cat "$p/root/$1" 2>&1 || echo "!! unreadable"; echo; done; echo "== end""#,
                    "sh",
                    &file,
                ],
                Duration::from_secs(20),
            )
            .await?;
        let text = daemon_sees.stdout_text();
        ctx.evidence("daemon_sees", text.trim());
        let wrong = grant_seen_by_daemons(&text, &marker);
        promise(
            daemon_sees.success() && wrong.is_empty(),
            &GRANT_KEPT,
            || {
                format!(
                    "the replacement's {} daemon does not see the task's file /{file}: {}{}",
                    replacement.daemon_container(),
                    wrong.join("; "),
                    if daemon_sees.success() {
                        String::new()
                    } else {
                        format!(" (the probe: {})", daemon_sees.exit_text())
                    }
                )
            },
        )?;

        ctx.step("the same claim, with the task's files");
        let claim = match &replacement.workspace {
            Some(ws) => ctx.backend().get_workspace(&ws.name).await?,
            None => None,
        };
        let file = replacement
            .agent_sh(
                &format!("cat /workspace/snapshot-{marker}.txt"),
                Duration::from_secs(20),
            )
            .await?;
        ctx.evidence(
            "claims",
            json!({"recorded": session.workspace.as_ref().map(|w| (&w.name, &w.uid)), "replacement": claim.as_ref().map(|w| (&w.name, &w.uid))}),
        );
        promise(
            claim.is_some()
                && claim.as_ref().map(|c| (&c.name, &c.uid))
                    == session.workspace.as_ref().map(|w| (&w.name, &w.uid)),
            &SAME_CLAIM,
            || {
                format!(
                    "the replacement mounts {}, recorded {}",
                    claim.as_ref().map_or_else(
                        || "no claim".to_owned(),
                        |c| format!("{} (uid {})", c.name, c.uid)
                    ),
                    session.workspace.as_ref().map_or_else(
                        || "no claim".to_owned(),
                        |w| format!("{} (uid {})", w.name, w.uid)
                    )
                )
            },
        )?;
        promise(
            file.success() && file.stdout.trim() == marker,
            &SAME_CLAIM,
            || format!("the task's file in the replacement: {}", file.summary()),
        )?;
        Ok(Verdict::Passed)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use kandev_harness::pod::compose::{Arch, ComposeInput, WorkspaceSource, compose_pod};
    use kandev_harness::pod::identity::SessionIdentity;
    use kandev_harness::pod::template::{self, RuleOptions, WorkspaceMode};

    #[test]
    fn every_daemon_must_see_the_marker_and_one_must_be_found() {
        assert!(grant_seen_by_daemons("== dockerd 7\nm1\n\n== end\n", "m1").is_empty());
        assert_eq!(
            grant_seen_by_daemons(
                "== dockerd 7\ncat: x: No such file or directory\n!! unreadable\n\n== end\n",
                "m1"
            ),
            vec!["dockerd 7 sees \"cat: x: No such file or directory\"".to_owned()]
        );
        assert_eq!(
            grant_seen_by_daemons("== end\n", "m1"),
            vec!["no dockerd process was found to read its view".to_owned()]
        );
        assert!(
            grant_seen_by_daemons("== dockerd 7\nm1\n", "m1")[0].contains("did not reach its end")
        );
    }

    fn fixture() -> PodTemplate {
        let text = include_str!("../../../fixtures/templates/full-worker.yaml");
        let rendered = template::render(text, "worker@sha256:1", "daemon@sha256:2");
        template::parse(&rendered.text).unwrap()
    }

    fn compose(template: &PodTemplate, identity: &SessionIdentity) -> Pod {
        compose_pod(&ComposeInput {
            template,
            identity,
            namespace: "ns",
            main_container: "kandev-agent",
            arch: Arch::Amd64,
            workspace: WorkspaceSource::Claim("claim".into()),
            create_nonce: "n",
        })
        .unwrap()
    }

    /// Both profiles are valid templates (the edit is one an operator can make), and a Pod
    /// recomposed from the edited profile — the replacement path this scenario guards
    /// against — differs from the launched Pod in exactly what `edit_ignored` compares.
    #[test]
    fn a_replacement_from_the_edited_profile_is_told_apart() {
        let launched = with_observer(&fixture(), "docker-engine").unwrap();
        let edited = edited(&launched, "kandev-agent").unwrap();
        let options = RuleOptions {
            main_container: "kandev-agent".into(),
            workspace_mode: WorkspaceMode::ManagedPvc,
            workspace_claim: None,
        };
        for t in [&launched, &edited] {
            let findings = template::validate(t, &options);
            assert_eq!(template::errors(&findings).count(), 0, "{findings:?}");
        }
        let identity = SessionIdentity::new("r1", "lifecycle::replacement_snapshot", 0);
        let from_snapshot = shape(&compose(&launched, &identity));
        assert_eq!(from_snapshot, shape(&compose(&launched, &identity)));
        let from_edit = shape(&compose(&edited, &identity));
        assert_ne!(from_snapshot, from_edit);
        let observer = |s: &serde_json::Value| {
            s["containers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == OBSERVER)
                .cloned()
                .unwrap()
        };
        assert_eq!(observer(&from_snapshot)["image"], "daemon@sha256:2");
        assert_eq!(observer(&from_edit)["image"], "worker@sha256:1");
        assert_eq!(observer(&from_snapshot)["mounts"], json!([]));
        assert_eq!(
            observer(&from_edit)["mounts"],
            json!([["kandev-workspace", "/workspace", false]])
        );
    }
}
