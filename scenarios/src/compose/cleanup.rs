//! `compose::cleanup` — a Compose project (three services, two networks, a named volume, a
//! read-write bind and a read-only input bind under `/workspace`) comes up and produces its
//! output; the read-only bind refuses writes; `down -v` leaves no container, network or
//! volume with the project's label; the output in the workspace stays. Works with Compose v2
//! (`docker compose`) or v1 (`docker-compose`), whichever the worker has, and reports which.
//!
//! Can fail when the daemon cannot create the project's networks or volumes, when binds do
//! not reach the workspace, when a read-only bind is writable, or when `down -v` leaves
//! objects behind.

use crate::support::{build_workload, probe_tag, require_success, workload_digest};
use kandev_harness::runner::{Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, promise};
use kandev_harness::session::SessionOptions;
use kandev_report::Capability;
use serde_json::json;
use std::time::Duration;

const UP: Check = Check {
    id: "up",
    promise: "the Compose project comes up and produces its output in /workspace",
    twin: Twin::Template("daemon-address-pool-exhausted"),
};
const READ_ONLY: Check = Check {
    id: "read_only_input",
    promise: "a read-only input bind refuses writes",
    twin: Twin::Template("daemon-workspace-binds-writable"),
};
const DOWN: Check = Check {
    id: "down_leaves_nothing",
    promise: "`down -v` leaves no container, network or volume of the project",
    twin: Twin::Worker("worker-compose-keeps-volumes"),
};
const RETAINED: Check = Check {
    id: "output_retained",
    promise: "the project's output stays in the workspace after `down -v`",
    twin: Twin::Worker("worker-compose-removes-binds"),
};

pub fn scenario() -> Scenario {
    Scenario {
        name: "compose::cleanup",
        promise: "a Compose project (services, network, named volume, binds under `/workspace`, a read-only input bind that must refuse writes) comes up, produces its output, and `down -v` leaves no container, network or volume of that project; workspace output retained",
        checks: &[UP, READ_ONLY, DOWN, RETAINED],
        timeout: Duration::from_secs(300),
        starts_first: false,
        run,
    }
}

fn compose_file(tag: &str) -> String {
    format!(
        r#"version: "2.4"
services:
  writer:
    image: {tag}
    command: ["write", "/out/result.bin", "524288", "11"]
    volumes: ["./out:/out", "./input:/input:ro", "cache:/cache"]
    networks: [probe]
  reader:
    image: {tag}
    command: ["digest", "/input/input.txt"]
    volumes: ["./input:/input:ro"]
    networks: [probe]
  readonly-check:
    image: {tag}
    command: ["write", "/input/must-not-exist.bin", "16", "1"]
    volumes: ["./input:/input:ro"]
networks:
  probe: {{}}
volumes:
  cache: {{}}
"#
    )
}

/// The kinds of objects a project leaves, as the listing names them.
const KINDS: [&str; 3] = ["containers", "networks", "volumes"];

/// Lists the project's containers, networks and volumes by its label, one line per kind:
/// `<kind> ok <ids...>` when the listing succeeded, `<kind> failed <why>` when it did not.
fn project_listing(label: &str) -> String {
    format!(
        "for k in 'containers ps -aq' 'networks network ls -q' 'volumes volume ls -q'; do set -- $k; kind=$1; shift; if out=$(docker \"$@\" --filter {label} 2>&1); then echo \"$kind ok\" $out; else echo \"$kind failed\" $out; fi; done"
    )
}

/// Each kind's listing: the ids it showed, or why it failed (absent: it said nothing).
fn parse_listing(stdout: &str) -> std::collections::BTreeMap<String, Result<Vec<String>, String>> {
    let mut kinds = std::collections::BTreeMap::new();
    for line in stdout.lines() {
        let mut words = line.split_whitespace();
        let (Some(kind), Some(status)) = (words.next(), words.next()) else {
            continue;
        };
        let rest: Vec<String> = words.map(str::to_owned).collect();
        let listed = match status {
            "ok" => Ok(rest),
            _ => Err(rest.join(" ")),
        };
        kinds.insert(kind.to_owned(), listed);
    }
    kinds
}

/// What is wrong with `down -v`, judged from the same listing before and after it: the
/// listing before must have seen the project (containers, a network, a volume), `down` must
/// have succeeded, and the listing after must have succeeded for every kind and shown none.
fn judge_down(
    before: &std::collections::BTreeMap<String, Result<Vec<String>, String>>,
    down_ok: bool,
    after: &std::collections::BTreeMap<String, Result<Vec<String>, String>>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    for kind in KINDS {
        match before.get(kind) {
            Some(Ok(ids)) if !ids.is_empty() => {}
            Some(Ok(_)) => wrong.push(format!(
                "before down the listing showed no {kind} of the project: it cannot show that down removed them"
            )),
            Some(Err(why)) => wrong.push(format!("the {kind} listing failed before down: {why}")),
            None => wrong.push(format!("the {kind} listing said nothing before down")),
        }
        match after.get(kind) {
            Some(Ok(ids)) if ids.is_empty() => {}
            Some(Ok(ids)) => wrong.push(format!("{kind} left after down -v: {ids:?}")),
            Some(Err(why)) => wrong.push(format!("the {kind} listing failed after down: {why}")),
            None => wrong.push(format!("the {kind} listing said nothing after down")),
        }
    }
    if !down_ok {
        wrong.push("down -v failed".to_owned());
    }
    wrong
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        ctx.step("launch and find Compose");
        let session = ctx.launch(SessionOptions::default()).await?;
        let which = session
            .agent_sh("if docker compose version >/dev/null 2>&1; then echo 'docker compose'; docker compose version; elif command -v docker-compose >/dev/null; then echo docker-compose; docker-compose version --short; fi", Duration::from_secs(30))
            .await?;
        let mut lines = which.stdout.lines();
        let compose = lines.next().unwrap_or_default().trim().to_owned();
        ctx.evidence(
            "compose",
            json!({"command": compose, "version": lines.next().unwrap_or_default().trim()}),
        );
        if compose.is_empty() {
            return Ok(Verdict::Lacks(Capability::Compose, "the worker image has no Docker Compose (neither the v2 plugin `docker compose` nor v1 `docker-compose`)".into()));
        }

        ctx.step("up");
        let tag = probe_tag(ctx, "compose");
        require_success(
            &build_workload(&session, &tag).await?,
            &UP,
            "build the service image",
        )?;
        let project = format!("kaccept{}", kandev_harness::pod::identity::random_hex(4));
        let marker = kandev_harness::pod::identity::random_hex(8);
        let dir = "/workspace/compose-probe";
        let setup = format!(
            "set -e; mkdir -p {dir}/input {dir}/out; echo input-{marker} > {dir}/input/input.txt; cat > {dir}/docker-compose.yml <<'EOF'\n{}EOF\n/opt/kandev/agentctl write /tmp/expected-result.bin 524288 11",
            compose_file(&tag)
        );
        let prepared = session.agent_sh(&setup, Duration::from_secs(30)).await?;
        require_success(&prepared, &UP, "write the project")?;
        let expected = workload_digest(&prepared.stdout)?;
        let up = session
            .agent_sh(
                &format!("cd {dir} && {compose} -p {project} up --no-color --no-build"),
                Duration::from_secs(180),
            )
            .await?;
        ctx.evidence("up", &up);
        let label = format!("label=com.docker.compose.project={project}");
        let states = session
            .agent_sh(&format!("for s in writer reader readonly-check; do id=$(docker ps -aq --filter {label} --filter label=com.docker.compose.service=$s | head -n1); echo \"$s ${{id:-none}} $(docker inspect -f '{{{{.State.ExitCode}}}}' $id 2>/dev/null)\"; done"), Duration::from_secs(60))
            .await?;
        ctx.evidence(
            "service_exit_codes",
            states.stdout.lines().collect::<Vec<_>>(),
        );
        let exit_of = |service: &str| -> Option<i64> {
            states
                .stdout
                .lines()
                .find(|l| l.starts_with(&format!("{service} ")))
                .and_then(|l| l.split_whitespace().nth(2))
                .and_then(|c| c.parse().ok())
        };
        promise(
            exit_of("writer") == Some(0) && exit_of("reader") == Some(0),
            &UP,
            || format!("services: {}; up: {}", states.stdout.trim(), up.summary()),
        )?;
        let result = session
            .agent()?
            .exec(
                &kandev_harness::session::agent::AgentExec::sh("true", Duration::from_secs(10))
                    .digests(&["/workspace/compose-probe/out/result.bin"]),
            )
            .await?;
        let produced = result.digests.first().cloned();
        ctx.evidence("output", &produced);
        promise(
            produced.as_ref().and_then(|d| d.sha256.clone()) == expected.sha256,
            &UP,
            || {
                format!(
                    "out/result.bin is {}, expected {}",
                    crate::support::digest_text(produced.as_ref()),
                    crate::support::digest_text(Some(&expected))
                )
            },
        )?;
        let reader_id = states
            .stdout
            .lines()
            .find(|l| l.starts_with("reader "))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or("none")
            .to_owned();
        let read = session
            .agent_sh(&format!("docker logs {reader_id}"), Duration::from_secs(30))
            .await?;
        let read_digest = workload_digest(&read.stdout).ok();
        let input = session
            .agent_sh(
                &format!("/opt/kandev/agentctl digest {dir}/input/input.txt"),
                Duration::from_secs(10),
            )
            .await?;
        promise(
            read_digest.is_some()
                && read_digest.as_ref().map(|d| &d.sha256)
                    == workload_digest(&input.stdout)
                        .ok()
                        .as_ref()
                        .map(|d| &d.sha256),
            &UP,
            || {
                format!(
                    "the reader saw {} of the input bind",
                    crate::support::digest_text(read_digest.as_ref())
                )
            },
        )?;

        ctx.step("the read-only input bind refuses writes");
        let leaked = session
            .agent_sh(
                &format!("test -e {dir}/input/must-not-exist.bin && echo written || echo absent"),
                Duration::from_secs(10),
            )
            .await?;
        // The write must fail for the read-only reason (EROFS, as the workload prints it), not
        // for any other: a missing image or a crash also ends non-zero. A service Compose
        // never created shows no such refusal (the check fails, naming it).
        let log = session
            .agent_sh(
                &format!("id=$(docker ps -aq --filter {label} --filter label=com.docker.compose.service=readonly-check | head -n1); if [ -z \"$id\" ]; then echo 'no readonly-check container'; else docker logs \"$id\" 2>&1; fi"),
                Duration::from_secs(30),
            )
            .await?;
        anyhow::ensure!(
            log.success(),
            "reading the readonly-check service's log failed: {}",
            log.summary()
        );
        let exit = exit_of("readonly-check");
        ctx.evidence("readonly_check_exit", exit);
        ctx.evidence("readonly_check_log", log.stdout.trim());
        ctx.evidence("file", leaked.stdout.trim());
        let judged = judge_read_only_write(exit, &log.stdout, &leaked.stdout);
        promise(judged.is_ok(), &READ_ONLY, || {
            judged.err().unwrap_or_default()
        })?;

        ctx.step("down -v");
        // The same listing before and after `down -v`: before, it must show the project's
        // containers, network and volume (the listing can see them); after, it must succeed
        // and show none.
        let listing = project_listing(&label);
        let before = session.agent_sh(&listing, Duration::from_secs(30)).await?;
        ctx.evidence(
            "listed_before_down",
            before.stdout.lines().collect::<Vec<_>>(),
        );
        let down = session
            .agent_sh(
                &format!("cd {dir} && {compose} -p {project} down -v"),
                Duration::from_secs(120),
            )
            .await?;
        ctx.evidence("down", &down);
        let left = session.agent_sh(&listing, Duration::from_secs(30)).await?;
        ctx.evidence("left_after_down", left.stdout.lines().collect::<Vec<_>>());
        let wrong = judge_down(
            &parse_listing(&before.stdout),
            down.success(),
            &parse_listing(&left.stdout),
        );
        promise(wrong.is_empty(), &DOWN, || {
            format!("{}; down: {}", wrong.join("; "), down.summary())
        })?;
        let kept = session
            .agent_sh(
                &format!("test -s {dir}/out/result.bin && echo kept"),
                Duration::from_secs(10),
            )
            .await?;
        promise(kept.stdout.trim() == "kept", &RETAINED, || {
            "out/result.bin is gone after down -v".into()
        })?;
        Ok(Verdict::Passed)
    })
}

/// The write through the read-only input bind, judged: the service must end non-zero, for
/// the read-only reason (EROFS, "Read-only file system" as the workload prints it: a missing
/// image, a crash or a permission refused also end non-zero, and prove nothing of the bind's
/// mode), and the file must be absent. Err: the evidence of what went otherwise.
fn judge_read_only_write(exit: Option<i64>, log: &str, file: &str) -> Result<(), String> {
    let refused_read_only = log.contains("Read-only file system");
    if exit.is_some_and(|c| c != 0) && refused_read_only && file.trim() == "absent" {
        return Ok(());
    }
    Err(format!(
        "the write through the read-only bind ended with {} ({}) and the file is {}",
        kandev_harness::backend::exit_text(exit),
        if refused_read_only {
            "refused as read-only".to_string()
        } else {
            format!("not a read-only refusal: {:?}", log.trim())
        },
        file.trim()
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_a_read_only_refusal_shows_the_bind_read_only() {
        use super::judge_read_only_write as judge;
        let erofs = "touch: cannot touch '/input/must-not-exist.bin': Read-only file system\n";
        assert!(judge(Some(1), erofs, "absent\n").is_ok());
        // A write refused for want of permission on a writable bind, a crash, a service never
        // run, or a file written after all: no evidence of a read-only bind.
        let eacces = "touch: cannot touch '/input/must-not-exist.bin': Permission denied\n";
        let refused = judge(Some(1), eacces, "absent").unwrap_err();
        assert!(refused.contains("not a read-only refusal"), "{refused}");
        assert!(judge(Some(139), "", "absent").is_err());
        assert!(judge(None, "no readonly-check container", "absent").is_err());
        assert!(judge(Some(0), "", "absent").is_err());
        assert!(judge(Some(1), erofs, "written").is_err());
        assert!(judge(Some(1), erofs, "").is_err());
    }

    use super::*;

    const BEFORE: &str = "containers ok a b c\nnetworks ok n1 n2\nvolumes ok v1\n";

    #[test]
    fn down_holds_only_on_listings_that_saw_the_project_then_nothing() {
        let empty = "containers ok\nnetworks ok\nvolumes ok\n";
        assert!(judge_down(&parse_listing(BEFORE), true, &parse_listing(empty)).is_empty());
        // A volume kept.
        let kept = "containers ok\nnetworks ok\nvolumes ok v1\n";
        assert_eq!(
            judge_down(&parse_listing(BEFORE), true, &parse_listing(kept)).len(),
            1
        );
    }

    /// A probe made to fail fails the check: a listing that failed or said nothing after
    /// down, or one that never saw the project before it, is no "nothing left".
    #[test]
    fn a_failed_or_silent_listing_fails_the_check() {
        let empty = "containers ok\nnetworks ok\nvolumes ok\n";
        let failed =
            "containers failed Cannot connect to the Docker daemon\nnetworks ok\nvolumes ok\n";
        assert_eq!(
            judge_down(&parse_listing(BEFORE), true, &parse_listing(failed)).len(),
            1
        );
        assert_eq!(
            judge_down(&parse_listing(BEFORE), true, &parse_listing("")).len(),
            3
        );
        assert_eq!(
            judge_down(&parse_listing(""), true, &parse_listing(empty)).len(),
            3
        );
        assert_eq!(
            judge_down(&parse_listing(empty), true, &parse_listing(empty)).len(),
            3
        );
        assert_eq!(
            judge_down(&parse_listing(BEFORE), false, &parse_listing(empty)).len(),
            1
        );
    }

    /// The listing as the agent runs it, through sh, with a `docker` that fails: every kind
    /// says `failed` (no Docker daemon answers here).
    #[test]
    fn the_listing_reports_a_failing_docker_as_failed() {
        let dir = tempfile::tempdir().unwrap();
        let docker = dir.path().join("docker");
        std::fs::write(
            &docker,
            "#!/bin/sh\necho 'Cannot connect to the Docker daemon' >&2\nexit 1\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&docker, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = std::process::Command::new("sh")
            .args(["-c", &project_listing("label=com.docker.compose.project=p")])
            .env("PATH", format!("{}:/usr/bin:/bin", dir.path().display()))
            .output()
            .unwrap();
        let listed = parse_listing(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(listed.len(), 3, "{listed:?}");
        assert!(listed.values().all(Result::is_err), "{listed:?}");
    }
}
