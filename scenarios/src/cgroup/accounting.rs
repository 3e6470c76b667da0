//! `cgroup::accounting` — seen from the node, not from inside the Pod: the Pod's cgroup has
//! finite memory, cpu and pids limits; every nested process's cgroup lies under the Pod's;
//! nested memory is charged to the Pod; a nested process that allocates beyond the Pod's
//! memory budget is killed inside that budget (an OOM kill in the Pod's subtree, the Pod's
//! peak within its limit) and the Pod's agent and daemon are unharmed. Reports the measured
//! limit, usage, peak and OOM kills.
//!
//! Can fail when a container has no limit (the Pod's budget becomes unlimited), when the
//! daemon places nested containers outside the Pod's cgroup (they escape the measured
//! budget), or when a hog beyond the budget survives.

use crate::support::{NO_NODE_VIEW, build_workload, probe_tag, require_success};
use kandev_harness::node::PodCgroupReading;
use kandev_harness::runner::{Ctx, Scenario, ScenarioFuture, Verdict, broken, promise};
use kandev_harness::session::SessionOptions;
use serde_json::json;
use std::time::Duration;

const FINITE: &str = "the Pod's memory, cpu and pids limits are finite";
const INSIDE: &str = "every nested process's cgroup lies under the Pod's cgroup";
const CHARGED: &str = "nested memory is charged to the Pod's cgroup";
const KILLED: &str = "a nested memory hog beyond the Pod's budget is killed inside the budget";
const UNHARMED: &str = "the Pod's agent and daemon survive the nested hog";
const HELD_MIB: u64 = 32;

pub fn scenario() -> Scenario {
    Scenario {
        name: "cgroup::accounting",
        promise: "every nested process's cgroup lies under the Pod's cgroup; the Pod's limits are finite; a nested memory hog beyond the budget is killed inside the Pod budget; nothing escapes the measured Pod budget",
        timeout: Duration::from_secs(300),
        run,
    }
}

fn figures(r: &PodCgroupReading) -> serde_json::Value {
    json!({
        "memory_limit_bytes": r.memory_limit_bytes, "memory_usage_bytes": r.memory_usage_bytes,
        "memory_peak_bytes": r.memory_peak_bytes, "oom_kills": r.oom_kills, "memory_limit_hits": r.memory_limit_hits,
        "cpu_quota_micros": r.cpu_quota_micros, "cpu_period_micros": r.cpu_period_micros,
        "pids_limit": r.pids_limit, "pids_current": r.pids_current, "cgroups": r.cgroups.len(),
    })
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        let Some(node) = ctx.node() else {
            return Ok(Verdict::Skipped(NO_NODE_VIEW.into()));
        };
        ctx.step("launch");
        let session = ctx.launch(SessionOptions::default()).await?;
        let pod_path = node.pod_cgroup(&session.pod.uid).await?.ok_or_else(|| {
            broken(
                FINITE,
                format!(
                    "no cgroup of Pod {} on {}",
                    session.pod.uid,
                    node.describe()
                ),
            )
        })?;

        ctx.step("the Pod's limits");
        ctx.evidence("node", node.describe());
        let reading = node.read_cgroup(&pod_path).await?;
        ctx.evidence("pod_cgroup", &pod_path);
        ctx.evidence("figures", figures(&reading));
        promise(
            reading.exists
                && reading.memory_limit_bytes.is_some()
                && reading.cpu_quota_micros.is_some()
                && reading.pids_limit.is_some(),
            FINITE,
            || format!("Pod cgroup {pod_path}: {}", figures(&reading)),
        )?;

        ctx.step("nested processes from the node");
        let tag = probe_tag(ctx, "accounting");
        require_success(
            &build_workload(&session, &tag).await?,
            INSIDE,
            "build the workload image",
        )?;
        let marker = format!(
            "kandev-accounting-{}",
            kandev_harness::pod::identity::random_hex(6)
        );
        let held = session
            .agent_sh(
                &format!("docker run -d --network none {tag} alloc {HELD_MIB} 300 {marker}"),
                Duration::from_secs(60),
            )
            .await?;
        require_success(&held, INSIDE, "start the nested accounting container")?;
        // The nested process holding its memory, seen from the node (within 10 s); when it
        // never shows, the checks below say what was seen.
        let _ = ctx
            .wait_within(
                "the nested process and its memory on the node",
                Duration::from_secs(10),
                || async {
                    let nested = node.processes_matching(&marker).await?;
                    let usage = node
                        .read_cgroup(&pod_path)
                        .await?
                        .memory_usage_bytes
                        .unwrap_or(0);
                    Ok((!nested.is_empty() && usage >= HELD_MIB << 20).then_some(()))
                },
            )
            .await;
        let nested = node.processes_matching(&marker).await?;
        ctx.evidence("nested_processes", &nested);
        promise(!nested.is_empty(), INSIDE, || {
            format!("no process with {marker} on the node")
        })?;
        let outside: Vec<String> = nested
            .iter()
            .flat_map(|p| {
                ["memory", "cpu", "pids"].into_iter().filter_map(|c| {
                    let path = p.cgroup_of(c)?;
                    (!path.starts_with(&format!("{pod_path}/")))
                        .then(|| format!("pid {} {c}:{path}", p.pid))
                })
            })
            .collect();
        promise(outside.is_empty(), INSIDE, || {
            format!("outside {pod_path}: {outside:?}")
        })?;
        let with_nested = node.read_cgroup(&pod_path).await?;
        ctx.evidence("figures_with_nested", figures(&with_nested));
        promise(
            with_nested.memory_usage_bytes.unwrap_or(0) >= HELD_MIB << 20,
            CHARGED,
            || {
                format!(
                    "the Pod's usage {:?} is below the {HELD_MIB} MiB a nested process holds",
                    with_nested.memory_usage_bytes
                )
            },
        )?;

        ctx.step("a nested hog beyond the Pod's budget");
        let limit = reading.memory_limit_bytes.unwrap_or(0);
        let hog_mib = limit / (1 << 20) + 256;
        let before = node.read_cgroup(&pod_path).await?;
        let logged_before = node.kernel_memcg_ooms(&pod_path).await;
        // Not `--rm`: on cgroup v1 the kill is counted in the victim's own memcg, which must
        // still exist when the node view reads the subtree.
        let hog_name = format!("hog-{}", kandev_harness::pod::identity::random_hex(4));
        let hog = session
            .agent_sh(&format!("docker run --name {hog_name} --network none {tag} alloc {hog_mib} 0 {marker}-hog"), Duration::from_secs(240))
            .await?;
        let after = node.read_cgroup(&pod_path).await?;
        ctx.evidence("hog_mib", hog_mib);
        ctx.evidence("hog", hog.summary());
        ctx.evidence("figures_after_hog", figures(&after));
        let completed = hog
            .stdout
            .contains(&format!("allocated {hog_mib} MiB in total"));
        promise(!completed && hog.exit_code != Some(0), KILLED, || {
            format!(
                "the hog allocated all {hog_mib} MiB (the Pod's limit is {limit} bytes): its memory was not charged to the Pod"
            )
        })?;
        // Counters where the kernel keeps them (v2; v1 on older kernels), and the kernel log,
        // which names the cgroup whose limit constrained the kill.
        let logged_after = node.kernel_memcg_ooms(&pod_path).await;
        let new_log_lines: Vec<String> = match (&logged_before, &logged_after) {
            (Some(b), Some(a)) => a.iter().filter(|l| !b.contains(l)).cloned().collect(),
            _ => Vec::new(),
        };
        ctx.evidence("kernel_oom_records", &new_log_lines);
        let killed_in_pod = after.oom_kills.unwrap_or(0) > before.oom_kills.unwrap_or(0)
            || after.memory_limit_hits.unwrap_or(0) > before.memory_limit_hits.unwrap_or(0)
            || !new_log_lines.is_empty();
        promise(killed_in_pod, KILLED, || {
            format!(
                "no OOM kill, memory-limit hit or kernel OOM record in the Pod's subtree ({} -> {}); hog: {}",
                figures(&before),
                figures(&after),
                hog.summary()
            )
        })?;
        promise(
            after.memory_peak_bytes.unwrap_or(0) <= limit,
            KILLED,
            || {
                format!(
                    "the Pod's peak {:?} exceeds its limit {limit}",
                    after.memory_peak_bytes
                )
            },
        )?;

        session
            .agent_sh(&format!("docker rm -f {hog_name}"), Duration::from_secs(60))
            .await?;

        ctx.step("the agent and the daemon are unharmed");
        let alive = session
            .agent_sh("docker info --format '{{.ID}}'", Duration::from_secs(30))
            .await?;
        promise(alive.success(), UNHARMED, || alive.summary())?;
        Ok(Verdict::Passed)
    })
}
