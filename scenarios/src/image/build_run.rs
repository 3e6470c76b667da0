//! `image::build_run` — `docker build` from a context in `/workspace`, then `docker run`; the
//! output matches, and the image exists only in this session's daemon (not in the engine
//! that runs the Pod).
//!
//! Can fail when the daemon cannot build or run containers (a broken runtime, a socket the
//! agent cannot use), when the output differs, or when the image lands in the host engine
//! (a shared host socket instead of a Pod-local daemon).
//!
//! Whether the image is also in the engine that runs the Pod is judged only where that engine
//! is readable, the local backend's; on a cluster (Kind included: this host's engine is not the
//! node's runtime) `image_local` is `not judged`, with the reason.

use crate::support::{build_workload, probe_tag, require_success};
use kandev_harness::backend::BackendKind;
use kandev_harness::runner::{
    Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, not_judged, promise,
};
use kandev_harness::session::SessionOptions;
use std::time::Duration;

const BUILDS: Check = Check {
    id: "builds",
    promise: "the agent builds an image from a context in /workspace with the Pod's daemon",
    twin: Twin::Template("daemon-data-too-small"),
};
const RUNS: Check = Check {
    id: "runs",
    promise: "the agent runs the built image and its output matches",
    twin: Twin::Template("daemon-runtime-broken"),
};
const LOCAL: Check = Check {
    id: "image_local",
    promise: "the built image exists only in this session's daemon",
    twin: Twin::Template("daemon-proxies-host-engine"),
};

pub fn scenario() -> Scenario {
    Scenario {
        name: "image::build_run",
        promise: "`docker build` from a context in `/workspace`, then `docker run`; output matches; the image exists only in this session's daemon",
        checks: &[BUILDS, RUNS, LOCAL],
        timeout: Duration::from_secs(300),
        starts_first: false,
        run,
    }
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        ctx.step("launch");
        let session = ctx.launch(SessionOptions::default()).await?;

        ctx.step("build");
        let tag = probe_tag(ctx, "build-run");
        let build = build_workload(&session, &tag).await?;
        ctx.evidence("tag", &tag);
        ctx.evidence("build", &build);
        require_success(&build, &BUILDS, "docker build --network none")?;
        let image_id = build
            .stdout
            .trim()
            .lines()
            .last()
            .unwrap_or_default()
            .to_owned();
        promise(image_id.starts_with("sha256:"), &BUILDS, || {
            format!("the build printed no image id: {:?}", build.stdout)
        })?;

        ctx.step("run");
        let nonce = kandev_harness::pod::identity::random_hex(8);
        let run = session
            .agent_sh(
                &format!("docker run --rm --network none {tag} echo {nonce}"),
                Duration::from_secs(120),
            )
            .await?;
        ctx.evidence("run", &run);
        require_success(&run, &RUNS, "docker run")?;
        promise(run.stdout.trim() == nonce, &RUNS, || {
            format!("expected {nonce:?}, got {:?}", run.stdout.trim())
        })?;

        ctx.step("the image is only in the session's daemon");
        let nested = session
            .agent_sh(
                &format!("docker image inspect --format '{{{{.Id}}}}' {tag}"),
                Duration::from_secs(30),
            )
            .await?;
        ctx.evidence("nested_image_id", nested.stdout.trim());
        promise(
            nested.success() && nested.stdout.trim() == image_id,
            &LOCAL,
            || {
                format!(
                    "the session's daemon does not list {tag}: {}",
                    nested.summary()
                )
            },
        )?;
        // The engine that runs the Pod must not have it either. Only the local backend's is
        // reachable from here: on a cluster the node's container runtime holds the Pods'
        // images, and this host's engine (where a Kind node runs) is not it, so comparing
        // against that would judge nothing.
        let engine = match (ctx.config().backend, ctx.host_engine().cloned()) {
            (BackendKind::Local, Some(engine)) => engine,
            (backend, _) => {
                not_judged(
                    &LOCAL,
                    format!(
                        "the {} backend's Pods run on a node's container runtime, whose images are not readable from here (this host's engine, if any, is not it): only the session's daemon was seen to hold the image",
                        backend.name()
                    ),
                );
                return Ok(Verdict::Passed);
            }
        };
        let by_tag = engine
            .image_id(&tag)
            .await
            .map_err(|e| kandev_harness::error_chain(&e));
        let by_id = engine
            .image_id(&image_id)
            .await
            .map_err(|e| kandev_harness::error_chain(&e));
        ctx.evidence("host_engine_by_tag", &by_tag);
        ctx.evidence("host_engine_by_id", &by_id);
        if matches!(by_tag, Ok(Some(_))) {
            // The agent's build landed in the shared engine: remove this scenario's own probe
            // image (by its run-unique tag only) before judging.
            let removed = engine.remove_tag(&tag).await;
            ctx.evidence(
                "host_engine_probe_removed",
                removed.map_err(|e| e.to_string()),
            );
        }
        let lacks = host_engine_lacks(&tag, &by_tag, &by_id);
        promise(lacks.is_ok(), &LOCAL, || lacks.err().unwrap_or_default())?;
        Ok(Verdict::Passed)
    })
}

/// `image_local`'s engine half: the engine that runs the Pod, asked for the probe image by
/// tag and by id, answered that it has neither. An engine that did not answer shows nothing:
/// it fails the check, never reads as "not there".
fn host_engine_lacks(
    tag: &str,
    by_tag: &Result<Option<String>, String>,
    by_id: &Result<Option<String>, String>,
) -> Result<(), String> {
    match (by_tag, by_id) {
        (Ok(None), Ok(None)) => Ok(()),
        (Err(e), _) | (_, Err(e)) => Err(format!(
            "the engine that runs the Pod did not answer whether it has {tag}: {e}"
        )),
        _ => Err(format!(
            "the host's engine also has {tag} ({by_tag:?} / {by_id:?}): the daemon is not Pod-local"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::host_engine_lacks;

    /// Only the engine's own "no such image" for the tag and the id holds; an engine that
    /// failed to answer (a probe made to fail) fails the check, as the image found does.
    #[test]
    fn the_engine_lacks_the_image_only_when_it_says_so() {
        let none = Ok(None);
        let found = Ok(Some("sha256:ab".to_owned()));
        let failed = Err("engine info: connection refused".to_owned());
        assert!(host_engine_lacks("t", &none, &none).is_ok());
        assert!(host_engine_lacks("t", &found, &none).is_err());
        assert!(host_engine_lacks("t", &none, &found).is_err());
        let why = host_engine_lacks("t", &none, &failed).unwrap_err();
        assert!(why.contains("did not answer"), "{why}");
        assert!(host_engine_lacks("t", &failed, &none).is_err());
    }
}
