//! `template::grant_rules` — the run's template passes Kandev's template rules.
//!
//! A mirror check: only Kandev's rules (mirrored in `harness/src/pod/template/rules.rs`)
//! decide it, and `run` applies them before anything else, refusing a template that breaks one
//! (exit 2, every finding with its field path, nothing created, no report). So in a report it
//! can only ever read passed: it says that the run's template was judged by the rules, not
//! that something of the system was seen to hold. The refusal itself is tested with
//! `fixtures/templates/broken/main-command-overridden.yaml` (`scenarios/tests/twins.rs`). Each
//! upstream rejection case (AC-001.2), applied to the fixture template, is a unit test below:
//! only the rules themselves (Kandev's validator, mirrored in `harness/src/pod/template/rules.rs`)
//! decide those, so they are no check of the system.

use kandev_harness::pod::template::{self, RuleOptions, Severity};
use kandev_harness::runner::{Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, promise};
use std::time::Duration;

const PASSES: Check = Check {
    id: "passes",
    promise: "the template passes Kandev's rules",
    twin: Twin::Mirror(
        "only Kandev's rules decide it (mirrored in harness/src/pod/template/rules.rs, a unit test per upstream case), and run applies them before anything is created: a template that breaks one is refused with exit 2 and no report (fixtures/templates/broken/main-command-overridden.yaml, scenarios/tests/twins.rs), so in a report it reads passed whenever there is a report. Kept in the scenario because the report records the rules' findings on the run's template (its warnings) as that scenario's evidence",
    ),
};

pub fn scenario() -> Scenario {
    Scenario {
        name: "template::grant_rules",
        promise: "the template passes Kandev's rules (a template that breaks one is refused before anything is created)",
        checks: &[PASSES],
        timeout: Duration::from_secs(60),
        starts_first: false,
        run,
    }
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        let options = RuleOptions {
            main_container: ctx.config().main_container.clone(),
            workspace_mode: ctx.config().workspace_mode,
            workspace_claim: None,
        };
        ctx.step("the run's template");
        let findings = template::validate(ctx.template(), &options);
        let errors: Vec<String> = template::errors(&findings)
            .map(ToString::to_string)
            .collect();
        let warnings: Vec<String> = findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
            .map(ToString::to_string)
            .collect();
        ctx.evidence("errors", &errors);
        ctx.evidence("warnings", &warnings);
        promise(errors.is_empty(), &PASSES, || errors.join("; "))?;

        Ok(Verdict::Passed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::container_mut;
    use k8s_openapi::api::core::v1::{Container, PodTemplate, Volume, VolumeDevice, VolumeMount};

    type Mutation = fn(&mut PodTemplate, &str) -> anyhow::Result<()>;

    fn grant_mount(template: &mut PodTemplate, daemon: &str) -> anyhow::Result<VolumeMount> {
        let c = container_mut(template, daemon)?;
        c.volume_mounts
            .iter()
            .flatten()
            .find(|m| template::is_workspace_grant(m))
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("{daemon} has no workspace grant"))
    }

    fn set_grant(
        template: &mut PodTemplate,
        daemon: &str,
        edit: impl Fn(&mut VolumeMount),
    ) -> anyhow::Result<()> {
        for m in container_mut(template, daemon)?
            .volume_mounts
            .iter_mut()
            .flatten()
        {
            if template::is_workspace_grant(m) {
                edit(m);
            }
        }
        Ok(())
    }

    fn spec(
        template: &mut PodTemplate,
    ) -> anyhow::Result<&mut k8s_openapi::api::core::v1::PodSpec> {
        template
            .template
            .as_mut()
            .and_then(|t| t.spec.as_mut())
            .ok_or_else(|| anyhow::anyhow!("no spec"))
    }

    /// The upstream rejection cases (kandev-contract.md, AC-001.2), as edits of the template.
    fn mutations() -> Vec<(&'static str, Mutation)> {
        vec![
            ("grant redirected to /other", |t, d| {
                set_grant(t, d, |m| m.mount_path = "/other".into())
            }),
            ("grant with a trailing slash", |t, d| {
                set_grant(t, d, |m| m.mount_path = "/workspace/".into())
            }),
            ("grant with subPath", |t, d| {
                set_grant(t, d, |m| m.sub_path = Some("src".into()))
            }),
            ("grant with subPathExpr", |t, d| {
                set_grant(t, d, |m| m.sub_path_expr = Some("$(POD)".into()))
            }),
            ("grant with mountPropagation", |t, d| {
                set_grant(t, d, |m| {
                    m.mount_propagation = Some("HostToContainer".into())
                })
            }),
            ("grant with recursiveReadOnly", |t, d| {
                set_grant(t, d, |m| m.recursive_read_only = Some("Disabled".into()))
            }),
            ("duplicate grant on one container", |t, d| {
                let grant = grant_mount(t, d)?;
                container_mut(t, d)?
                    .volume_mounts
                    .get_or_insert_default()
                    .push(grant);
                Ok(())
            }),
            ("extra mount under /workspace", |t, d| {
                let m = VolumeMount {
                    name: "docker-data".into(),
                    mount_path: "/workspace/cache".into(),
                    ..Default::default()
                };
                container_mut(t, d)?
                    .volume_mounts
                    .get_or_insert_default()
                    .push(m);
                Ok(())
            }),
            ("extra mount at /", |t, d| {
                let m = VolumeMount {
                    name: "docker-data".into(),
                    mount_path: "/".into(),
                    ..Default::default()
                };
                container_mut(t, d)?
                    .volume_mounts
                    .get_or_insert_default()
                    .push(m);
                Ok(())
            }),
            ("grant naming kandev-auth", |t, d| {
                set_grant(t, d, |m| m.name = "kandev-auth".into())
            }),
            ("grant naming kandev-runtime", |t, d| {
                set_grant(t, d, |m| m.name = "kandev-runtime".into())
            }),
            ("template defines kandev-workspace", |t, _| {
                spec(t)?.volumes.get_or_insert_default().push(Volume {
                    name: "kandev-workspace".into(),
                    empty_dir: Some(Default::default()),
                    ..Default::default()
                });
                Ok(())
            }),
            ("volumeDevices using the workspace", |t, d| {
                let device = VolumeDevice {
                    name: "kandev-workspace".into(),
                    device_path: "/workspace/dev".into(),
                };
                container_mut(t, d)?
                    .volume_devices
                    .get_or_insert_default()
                    .push(device);
                Ok(())
            }),
            ("grant on an init container", |t, d| {
                let grant = grant_mount(t, d)?;
                let init = Container {
                    name: "init-grant".into(),
                    image: Some("busybox".into()),
                    volume_mounts: Some(vec![grant]),
                    ..Default::default()
                };
                spec(t)?.init_containers.get_or_insert_default().push(init);
                Ok(())
            }),
            ("duplicate container names", |t, d| {
                let copy = container_mut(t, d)?.clone();
                spec(t)?.containers.push(copy);
                Ok(())
            }),
            ("command on the main container", |t, _| {
                let main = spec(t)?
                    .containers
                    .first_mut()
                    .ok_or_else(|| anyhow::anyhow!("no containers"))?;
                main.command = Some(vec!["sh".into()]);
                Ok(())
            }),
            ("restartPolicy set", |t, _| {
                spec(t)?.restart_policy = Some("Never".into());
                Ok(())
            }),
        ]
    }

    /// Every upstream rejection case, applied to the fixture template, is rejected at the
    /// mutated field before anything is created.
    #[test]
    fn every_upstream_rejection_case_applied_to_the_fixture_template_is_rejected() {
        let text = std::fs::read_to_string(kandev_harness::paths::default_template()).unwrap();
        let fixture = template::parse(&text).unwrap();
        let options = RuleOptions {
            main_container: "kandev-agent".into(),
            workspace_mode: template::WorkspaceMode::ManagedPvc,
            workspace_claim: None,
        };
        assert!(
            template::errors(&template::validate(&fixture, &options))
                .next()
                .is_none()
        );
        let mut accepted = Vec::new();
        for (name, mutate) in mutations() {
            let mut variant = fixture.clone();
            mutate(&mut variant, "docker-engine").unwrap();
            if template::errors(&template::validate(&variant, &options))
                .next()
                .is_none()
            {
                accepted.push(name);
            }
        }
        assert!(accepted.is_empty(), "accepted: {accepted:?}");
    }
}
