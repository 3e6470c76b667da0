//! `cgroup::accounting` — seen from the node, not from inside the Pod: the Pod's cgroup has
//! finite memory, cpu and pids limits; every nested process's cgroup lies under the Pod's;
//! nested memory is charged to the Pod; a nested process that allocates beyond the Pod's
//! memory budget is killed inside that budget (an OOM kill in the Pod's subtree, the Pod's
//! peak within its limit) and the Pod's agent and daemon are unharmed. Reports the measured
//! limit, usage, peak and OOM kills.
//!
//! A Pod `pids.max` is required where the backend always sets one (local); a kubelet sets one
//! only with `podPidsLimit` configured, so on a cluster an unlimited one is the finding
//! `cgroup.pids_unlimited` (memory and cpu stay required everywhere).
//!
//! Can fail when a container has no limit (the Pod's budget becomes unlimited), when the
//! daemon places nested containers outside the Pod's cgroup (they escape the measured
//! budget), or when a hog beyond the budget survives.

use crate::support::{NO_NODE_VIEW, build_workload, probe_tag, require_success};
use kandev_harness::node::PodCgroupReading;
use kandev_harness::runner::{
    Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, broken, not_judged, promise,
};
use kandev_harness::session::{Session, SessionOptions};
use kandev_report::Capability;
use kandev_report::FindingLevel;
use serde_json::json;
use std::time::Duration;

const FINITE: Check = Check {
    id: "limits_finite",
    promise: "the Pod's memory and cpu limits are finite (its pids limit, the node's to set, is reported)",
    twin: Twin::Template("daemon-without-limits"),
};
const CHARGED: Check = Check {
    id: "charged",
    promise: "a nested process's memory is charged inside the Pod's cgroup (its own memory cgroup, below the Pod's, holds at least 16 MiB)",
    twin: Twin::Template("daemon-escapes-pod-cgroup"),
};
const INSIDE: Check = Check {
    id: "nested_inside",
    promise: "every nested process's cgroup lies under the Pod's cgroup, and every other process's of the Pod (its containers' and their descendants: the daemon, containerd, the shims), for memory, cpu and pids",
    twin: Twin::Template("daemon-escapes-pod-pids"),
};
const KILLED: Check = Check {
    id: "hog_killed",
    promise: "a nested memory hog beyond the Pod's budget is killed inside the budget: SIGKILL, and an OOM kill of the hog itself (the nested daemon's OOMKilled, a kernel record naming its container's memcg, or its own cgroup's count)",
    twin: Twin::Template("daemon-nested-data-ulimit"),
};
const UNHARMED: Check = Check {
    id: "pod_unharmed",
    promise: "the Pod's agent and daemon survive the nested hog (same processes, daemon answering)",
    twin: Twin::Template("daemon-oom-target"),
};
/// What the nested holder allocates and keeps.
const HELD_MIB: u64 = 32;
/// What its own memory cgroup must hold of it (Kandev's acceptance asks for 16 MiB).
const CHARGED_MIB: u64 = 16;

pub fn scenario() -> Scenario {
    Scenario {
        name: "cgroup::accounting",
        promise: "every nested process's cgroup lies under the Pod's cgroup; the Pod's limits are finite; a nested memory hog beyond the budget is killed inside the Pod budget; nothing escapes the measured Pod budget",
        checks: &[FINITE, CHARGED, INSIDE, UNHARMED, KILLED],
        timeout: Duration::from_secs(300),
        starts_first: false,
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

/// The Pod cgroup's limits judged against the promise.
#[derive(Debug, PartialEq, Eq)]
struct LimitsVerdict {
    /// Limits the promise needs that the Pod cgroup lacks.
    missing: Vec<&'static str>,
    /// No pids limit: a finding, not a failure.
    pids_unlimited: bool,
}

/// Memory and cpu come from the template's limits and are required. The pids limit is none
/// of the template's: a kubelet sets it only with `podPidsLimit` > 0, and the local backend
/// sets its own `--pod-pids-limit` as that kubelet would, so judging it would judge the
/// harness; an unlimited one is reported.
fn judge_limits(reading: &PodCgroupReading) -> LimitsVerdict {
    let mut missing = Vec::new();
    if !reading.exists || reading.memory_limit_bytes.is_none() {
        missing.push("memory");
    }
    if !reading.exists || reading.cpu_quota_micros.is_none() {
        missing.push("cpu");
    }
    LimitsVerdict {
        missing,
        pids_unlimited: reading.exists && reading.pids_limit.is_none(),
    }
}

/// The controllers whose cgroup a Pod's process must have inside the Pod's (v1: one hierarchy
/// each; v2: the one unified path stands for all).
const CONTROLLERS: [&str; 3] = ["memory", "cpu", "pids"];

/// What is wrong with where the Pod's processes are: each cgroup (memory, cpu, pids; v2 the
/// unified one) outside `pod_path`, and a positive control: the enumeration must show the
/// nested holder (`marker`) and the Pod's daemon (`dockerd`), else it shows nothing.
fn judge_inside(
    processes: &[kandev_harness::node::NodeProcess],
    pod_path: &str,
    marker: &str,
) -> Vec<String> {
    let mut wrong = Vec::new();
    let inside = |path: &str| path == pod_path || path.starts_with(&format!("{pod_path}/"));
    for p in processes {
        for c in CONTROLLERS {
            match p.cgroup_of(c) {
                Some(path) if inside(path) => {}
                Some(path) => wrong.push(format!("pid {} `{}` {c}:{path}", p.pid, p.cmdline)),
                None => wrong.push(format!("pid {} `{}` shows no {c} cgroup", p.pid, p.cmdline)),
            }
        }
    }
    if !processes.iter().any(|p| p.cmdline.contains(marker)) {
        wrong.push(format!(
            "the Pod's processes as enumerated do not include the nested holder ({marker}): the enumeration is no evidence"
        ));
    }
    if !processes.iter().any(|p| {
        p.cmdline
            .split_whitespace()
            .next()
            .is_some_and(|a| a.ends_with("dockerd"))
    }) {
        wrong.push(
            "the Pod's processes as enumerated do not include its dockerd: the enumeration is no evidence"
                .to_owned(),
        );
    }
    wrong
}

/// Why the Pod's peak does not show it inside its budget.
#[derive(Debug, PartialEq, Eq)]
struct PeakUnseen(String);

/// What ties an OOM kill to the hog itself (`hog_id`, its container's full id): the nested
/// daemon's `OOMKilled` (containerd's OOM event for its cgroup), a kernel record whose killed
/// task's memcg (`task_memcg=`) is the hog's container's, or the hog's own cgroup counting a
/// kill. None: no kill seen of the hog; a kill counted elsewhere in the Pod is no evidence.
fn hog_kill_evidence(
    hog_id: &str,
    oom_killed: Option<bool>,
    new_records: &[String],
    hog_cgroup_kills: Option<u64>,
) -> Option<String> {
    if oom_killed == Some(true) {
        return Some("the nested daemon says OOMKilled".into());
    }
    if !hog_id.is_empty()
        && let Some(record) = new_records.iter().find(|r| {
            r.split(',')
                .find_map(|f| f.trim().strip_prefix("task_memcg="))
                .is_some_and(|memcg| memcg.contains(hog_id))
        })
    {
        return Some(format!("the kernel's record: {record}"));
    }
    hog_cgroup_kills
        .filter(|k| *k > 0)
        .map(|k| format!("the hog's own cgroup counts {k} OOM kill(s)"))
}

/// The Pod's memory peak against its limit: the evidence that the Pod stayed inside its
/// budget. A node that shows no peak (cgroup v2 has `memory.peak` from Linux 5.19) leaves it
/// unseen, never within.
fn judge_peak(peak: Option<u64>, limit: u64) -> Result<(), PeakUnseen> {
    match peak {
        Some(peak) if peak <= limit => Ok(()),
        Some(peak) => Err(PeakUnseen(format!(
            "the Pod's peak {peak} bytes exceeds its limit {limit}"
        ))),
        None => Err(PeakUnseen(format!(
            "the node shows no memory peak (cgroup v2 has memory.peak from Linux 5.19): whether the Pod stayed inside its {limit}-byte budget is unseen"
        ))),
    }
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        let Some(node) = ctx.node() else {
            return Ok(Verdict::Lacks(Capability::NodeView, NO_NODE_VIEW.into()));
        };
        ctx.step("launch");
        let session = ctx.launch(SessionOptions::default()).await?;
        let pod_path = node.pod_cgroup(&session.pod.uid).await?.ok_or_else(|| {
            broken(
                &FINITE,
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
        let backend = ctx.config().backend;
        let verdict = judge_limits(&reading);
        promise(verdict.missing.is_empty(), &FINITE, || {
            format!(
                "Pod cgroup {pod_path} has no {} limit: {}",
                verdict.missing.join(", "),
                figures(&reading)
            )
        })?;
        if verdict.pids_unlimited {
            ctx.finding(
                FindingLevel::Warning,
                "cgroup.pids_unlimited",
                "the Pod cgroup has no pids limit: the node's kubelet sets pids.max only with podPidsLimit > 0 in its configuration (kind/cluster.yaml sets 4096; the local backend, --pod-pids-limit), so nested processes can exhaust the node's pids",
                json!({"backend": backend, "pod_cgroup": pod_path, "pids_limit": reading.pids_limit, "pids_current": reading.pids_current}),
            );
        }

        ctx.step("nested memory from the node");
        let tag = probe_tag(ctx, "accounting");
        require_success(
            &build_workload(&session, &tag).await?,
            &CHARGED,
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
        require_success(&held, &CHARGED, "start the nested accounting container")?;
        // The nested process and the memory it holds, in its own memory cgroup, seen from
        // the node (within 30 s: a loaded machine starts it late); when that never shows, the
        // checks below say what was seen.
        let holder_charge = |nested: &[kandev_harness::node::NodeProcess]| {
            nested
                .iter()
                .find_map(|p| p.cgroup_of("memory").map(str::to_owned))
        };
        let _ = ctx
            .wait_within(
                "the nested process and its memory on the node",
                Duration::from_secs(30),
                || async {
                    let nested = node.processes_matching(&marker).await?;
                    let Some(own) = holder_charge(&nested) else {
                        return Ok(None);
                    };
                    let usage = node.read_cgroup(&own).await?.memory_usage_bytes;
                    Ok((usage.unwrap_or(0) >= CHARGED_MIB << 20).then_some(()))
                },
            )
            .await;
        let nested = node.processes_matching(&marker).await?;
        ctx.evidence("nested_processes", &nested);
        promise(!nested.is_empty(), &CHARGED, || {
            format!("no process with {marker} on the node")
        })?;
        let own = holder_charge(&nested).unwrap_or_default();
        let own_reading = node.read_cgroup(&own).await?;
        ctx.evidence(
            "nested_memory_cgroup",
            json!({"path": own, "memory_usage_bytes": own_reading.memory_usage_bytes}),
        );
        promise(own.starts_with(&format!("{pod_path}/")), &CHARGED, || {
            format!(
                "the nested process's memory is charged to {own:?}, outside the Pod's {pod_path}"
            )
        })?;
        promise(
            own_reading.memory_usage_bytes.unwrap_or(0) >= CHARGED_MIB << 20,
            &CHARGED,
            || {
                format!(
                    "the nested process's memory cgroup {own} holds {} bytes, below the {CHARGED_MIB} MiB of the {HELD_MIB} MiB it allocated",
                    crate::support::or_unknown(own_reading.memory_usage_bytes)
                )
            },
        )?;

        ctx.step("every process of the Pod from the node");
        // Every process of the Pod (its containers' and all their descendants: the daemon,
        // containerd, the shims, every nested process), not only the marker's: on cgroup v2
        // a process has one path for every controller, so the marker's alone would repeat
        // `charged`. The holder and the daemon must be among them (the enumeration's positive
        // control).
        match node.pod_processes(&session.pod.name).await {
            Ok(processes) => {
                ctx.evidence(
                    "pod_processes",
                    processes
                        .iter()
                        .map(|p| json!({"pid": p.pid, "cmdline": p.cmdline, "cgroups": p.cgroups}))
                        .collect::<Vec<_>>(),
                );
                let wrong = judge_inside(&processes, &pod_path, &marker);
                promise(wrong.is_empty(), &INSIDE, || {
                    format!("outside {pod_path}: {}", wrong.join("; "))
                })?;
            }
            Err(e) => not_judged(
                &INSIDE,
                format!(
                    "the node view cannot enumerate the Pod's processes: {}",
                    kandev_harness::error_chain(e.as_ref())
                ),
            ),
        }
        let with_nested = node.read_cgroup(&pod_path).await?;
        ctx.evidence("figures_with_nested", figures(&with_nested));

        ctx.step("a nested hog beyond the Pod's budget");
        // The agent and the daemon as processes (each container's PID 1 and its start time),
        // to tell "survived" from "died and was restarted".
        let processes_before = pod_processes(&session).await;
        ctx.evidence("pod_processes_before_hog", &processes_before);
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
        // First: a daemon the hog took (the kernel's victim, or restarted) also takes the
        // evidence of how the hog ended, which only it can name.
        ctx.step("the agent and the daemon are unharmed");
        let processes_after = pod_processes(&session).await;
        ctx.evidence("pod_processes_after_hog", &processes_after);
        let readable = |v: &serde_json::Value| {
            v.as_object().is_some_and(|o| {
                o.values().all(|s| {
                    s.as_str()
                        .is_some_and(|s| s.chars().all(|c| c.is_ascii_digit()))
                })
            })
        };
        promise(
            readable(&processes_before) && processes_after == processes_before,
            &UNHARMED,
            || {
                format!(
                    "the Pod's processes changed across the hog: {processes_before:?} -> {processes_after:?}"
                )
            },
        )?;
        let alive = session
            .agent_sh("docker info --format '{{.ID}}'", Duration::from_secs(30))
            .await?;
        promise(alive.success(), &UNHARMED, || alive.summary())?;
        ctx.step("the hog was killed, inside the budget");
        let completed = hog
            .stdout
            .contains(&format!("allocated {hog_mib} MiB in total"));
        promise(!completed && hog.exit_code != Some(0), &KILLED, || {
            format!(
                "the hog allocated all {hog_mib} MiB (the Pod's limit is {limit} bytes): its memory was not charged to the Pod"
            )
        })?;
        // Killed, not failed: the OOM killer's SIGKILL (docker run's 128 + 9), as the nested
        // daemon saw its container end. An allocation refused (a ulimit, a failed mmap) ends
        // the hog too, with an error of its own: that is no kill.
        let state = session
            .agent_sh(
                &format!("docker inspect --format '{{{{.Id}}}} {{{{.State.ExitCode}}}} {{{{.State.OOMKilled}}}}' {hog_name}"),
                Duration::from_secs(30),
            )
            .await?;
        ctx.evidence("hog_state_id_exit_code_oom_killed", state.stdout.trim());
        let inspected: Vec<&str> = state.stdout.split_whitespace().collect();
        let (hog_id, hog_exit, oom_killed) = match (state.success(), inspected.as_slice()) {
            (true, [id, exit, oom]) => (Some(*id), Some(*exit), Some(*oom == "true")),
            _ => (None, None, None),
        };
        let exit_137 = hog.exit_code == Some(137) || hog_exit == Some("137");
        promise(exit_137, &KILLED, || {
            format!(
                "the hog ended but was not killed by SIGKILL (its container's id, exit code and OOMKilled, docker inspect: {}): {}",
                state.summary(),
                hog.summary()
            )
        })?;
        // The kill must be the hog's own, not one counted elsewhere in the Pod (dockerd's,
        // the agent's): the nested daemon's OOMKilled, a kernel record whose killed task's
        // memcg is the hog's container, or the hog's own cgroup counting a kill.
        let logged_after = node.kernel_memcg_ooms(&pod_path).await;
        let new_log_lines: Vec<String> = match (&logged_before, &logged_after) {
            (Some(b), Some(a)) => a.iter().filter(|l| !b.contains(l)).cloned().collect(),
            _ => Vec::new(),
        };
        ctx.evidence("kernel_oom_records", &new_log_lines);
        let hog_cgroup_kills =
            match hog_id.and_then(|id| after.cgroups.iter().find(|c| c.contains(id))) {
                Some(path) => node.read_cgroup(path).await.ok().and_then(|r| r.oom_kills),
                None => None,
            };
        ctx.evidence("hog_cgroup_oom_kills", hog_cgroup_kills);
        match hog_id {
            // Nothing read that could show a kill: the kernel's log unread, the hog's cgroup
            // gone with it (runc removes it), and OOMKilled, which containerd may miss, false.
            Some(_)
                if logged_after.is_none()
                    && hog_cgroup_kills.is_none()
                    && oom_killed != Some(true) =>
            {
                not_judged(
                    &KILLED,
                    format!(
                        "nothing read could show the hog's OOM kill: the node's kernel log was not readable, its cgroup was gone, and the nested daemon's OOMKilled is false (containerd may miss it); hog: {}",
                        hog.summary()
                    ),
                )
            }
            Some(id) => {
                let tied = hog_kill_evidence(id, oom_killed, &new_log_lines, hog_cgroup_kills);
                ctx.evidence("hog_kill_evidence", &tied);
                promise(tied.is_some(), &KILLED, || {
                    format!(
                        "no OOM kill of the hog itself (container {id}): its OOMKilled is false, no new kernel record names its memcg ({} read), and its own cgroup counts none ({hog_cgroup_kills:?}); the Pod's subtree: {} -> {}; hog: {}",
                        if logged_after.is_some() {
                            "the log"
                        } else {
                            "no log"
                        },
                        figures(&before),
                        figures(&after),
                        hog.summary()
                    )
                })?;
            }
            None => not_judged(
                &KILLED,
                format!(
                    "the nested daemon is gone, so the hog's container cannot be named to tie an OOM kill to it (docker inspect: {})",
                    state.summary()
                ),
            ),
        }
        // The peak is the evidence that the Pod stayed inside its budget: a node that shows
        // none (cgroup v2 before Linux 5.19 has no memory.peak) leaves that half unseen.
        match judge_peak(after.memory_peak_bytes, limit) {
            Ok(()) => promise(true, &KILLED, String::new)?,
            Err(PeakUnseen(why)) if after.memory_peak_bytes.is_none() => {
                not_judged(&KILLED, format!("Pod cgroup {pod_path}: {why}"))
            }
            Err(PeakUnseen(why)) => promise(false, &KILLED, || why)?,
        }

        session
            .agent_sh(&format!("docker rm -f {hog_name}"), Duration::from_secs(60))
            .await?;

        Ok(Verdict::Passed)
    })
}

/// PID 1 of the agent's and the daemon's containers with its start time (`/proc/1/stat`
/// field 22): a process that died and was restarted reads differently. A read that did not
/// succeed (an exec killed or cut while the node reclaims the hog's memory: seen on real Kind,
/// an exit with no output) is read again, up to three times; one that never succeeds reads as
/// the error, which is no start time and so never "unchanged".
async fn pod_processes(session: &Session) -> serde_json::Value {
    let cmd = ["cat", "/proc/1/stat"];
    let mut read = [String::new(), String::new()];
    for (i, slot) in read.iter_mut().enumerate() {
        for attempt in 1..=3 {
            // Bounds generous for a machine still busy with the hog's OOM kill.
            let out = if i == 0 {
                session.in_main(&cmd, Duration::from_secs(30)).await
            } else {
                session.in_daemon(&cmd, Duration::from_secs(30)).await
            };
            *slot = match out {
                Ok(out) if out.success() => match start_time(&out.stdout_text()) {
                    Some(start) => {
                        *slot = start;
                        break;
                    }
                    None => format!("no start time in {:?}", out.stdout_text()),
                },
                Ok(out) => format!(
                    "unreadable (attempt {attempt}): {}: {}",
                    out.exit_text(),
                    out.stderr_text().trim()
                ),
                Err(e) => format!("unreadable (attempt {attempt}): {e}"),
            };
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    let [agent, daemon] = read;
    json!({"agent_pid1_start": agent, "daemon_pid1_start": daemon})
}

/// Field 22 of a `/proc/<pid>/stat` line (after the command's parenthesised name).
fn start_time(stat: &str) -> Option<String> {
    stat.rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().nth(19))
        .filter(|s| s.chars().all(|c| c.is_ascii_digit()))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_kill_of_the_hog_itself_shows_it_killed() {
        let id = "4f1c0ffee";
        let hog = format!(
            "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/kandev-acceptance/pod1,task_memcg=/kandev-acceptance/pod1/engine/docker/{id},task=probe,pid=9,uid=0"
        );
        let dockerd = "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/kandev-acceptance/pod1,task_memcg=/kandev-acceptance/pod1/engine,task=dockerd,pid=7,uid=0".to_owned();
        assert!(hog_kill_evidence(id, Some(false), std::slice::from_ref(&hog), None).is_some());
        assert!(hog_kill_evidence(id, Some(true), &[], None).is_some());
        assert!(hog_kill_evidence(id, None, &[], Some(1)).is_some());
        // Another process killed in the Pod, or nothing counted: no kill of the hog.
        assert!(
            hog_kill_evidence(id, Some(false), std::slice::from_ref(&dockerd), Some(0)).is_none()
        );
        assert!(hog_kill_evidence(id, Some(false), &[], None).is_none());
    }

    fn reading(memory: bool, cpu: bool, pids: bool) -> PodCgroupReading {
        PodCgroupReading {
            exists: true,
            memory_limit_bytes: memory.then_some(4 << 30),
            cpu_quota_micros: cpu.then_some(200_000),
            cpu_period_micros: Some(100_000),
            pids_limit: pids.then_some(4096),
            ..Default::default()
        }
    }

    /// The memory cgroup of the nested holder as `charged` judges it: below the Pod's.
    fn holder_charged(processes: &[kandev_harness::node::NodeProcess], pod: &str) -> bool {
        processes
            .iter()
            .filter(|p| p.cmdline.contains(crate::support::fixture_node::MARKER))
            .filter_map(|p| p.cgroup_of("memory"))
            .any(|path| path.starts_with(&format!("{pod}/")))
    }

    /// On a recorded v1 and v2 node: the good Pod holds `charged` and `nested_inside` (every
    /// process of the Pod, the daemon, containerd and the shim too, enumerated from the node,
    /// not the holder alone); each twin's own escape step, run through sh against the tree,
    /// breaks exactly its check: `daemon-escapes-pod-cgroup` `charged` (the holder's memory
    /// leaves the Pod), `daemon-escapes-pod-pids` `nested_inside` (v1: the holder's pids; v2:
    /// the shim, the holder's memory still charged inside).
    #[tokio::test]
    async fn the_cgroup_twins_break_their_checks_on_v1_and_v2_trees() {
        use crate::support::fixture_node::{FixtureNode, MARKER, POD_NAME, pod_path, run_escape};
        use kandev_harness::node::{CgroupVersion, NodeView};
        for version in [CgroupVersion::V1, CgroupVersion::V2] {
            let good = FixtureNode::new(version);
            let view = good.view();
            assert_eq!(view.cgroups.version(), version);
            assert_eq!(
                view.pod_cgroup(crate::support::fixture_node::POD_UID)
                    .await
                    .unwrap(),
                Some(pod_path())
            );
            let processes = view.pod_processes(POD_NAME).await.unwrap();
            // The Pod's six processes, not the node's shim or sshd.
            assert_eq!(
                processes.iter().map(|p| p.pid).collect::<Vec<_>>(),
                [100, 101, 102, 103, 104, 105],
                "{version:?}"
            );
            assert_eq!(
                judge_inside(&processes, &pod_path(), MARKER),
                Vec::<String>::new()
            );
            assert!(holder_charged(&processes, &pod_path()));
            // An enumeration without the holder or the daemon is no evidence.
            assert!(!judge_inside(&processes[..2], &pod_path(), MARKER).is_empty());

            let mut charged_twin = FixtureNode::new(version);
            run_escape(
                "templates/broken/daemon-escapes-pod-cgroup.yaml",
                "escape 105 104",
                &charged_twin,
            );
            charged_twin.apply_moves();
            let processes = charged_twin.view().pod_processes(POD_NAME).await.unwrap();
            assert!(
                !holder_charged(&processes, &pod_path()),
                "{version:?}: {processes:?}"
            );

            let mut inside_twin = FixtureNode::new(version);
            run_escape(
                "templates/broken/daemon-escapes-pod-pids.yaml",
                "escape 105 104",
                &inside_twin,
            );
            inside_twin.apply_moves();
            let processes = inside_twin.view().pod_processes(POD_NAME).await.unwrap();
            assert!(
                holder_charged(&processes, &pod_path()),
                "{version:?}: {processes:?}"
            );
            let wrong = judge_inside(&processes, &pod_path(), MARKER);
            let escaped = match version {
                CgroupVersion::V1 => "pid 105",
                CgroupVersion::V2 => "pid 104",
            };
            assert!(
                !wrong.is_empty() && wrong.iter().all(|w| w.starts_with(escaped) && w.contains("/kandev-acceptance-escaped")),
                "{version:?}: {wrong:?}"
            );
            // The marker's process alone (what the check looked at before) shows nothing
            // wrong on v2: the shim is what left.
            if version == CgroupVersion::V2 {
                let marker_only: Vec<_> = processes
                    .iter()
                    .filter(|p| p.cmdline.contains(MARKER))
                    .cloned()
                    .collect();
                assert!(marker_only.iter().all(|p| {
                    p.cgroup_of("pids")
                        .is_some_and(|c| c.starts_with(&pod_path()))
                }));
            }
        }
    }

    /// A missing peak is unseen (the check not judged), never within the budget.
    #[test]
    fn a_missing_peak_never_reads_as_within_the_budget() {
        assert_eq!(judge_peak(Some(100), 100), Ok(()));
        assert!(judge_peak(Some(101), 100).is_err());
        assert!(judge_peak(None, 100).is_err());
        // The v2 reading of a kernel without memory.peak: the reader leaves it out.
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::write(root.join("cgroup.controllers"), "memory").unwrap();
        let pod = root.join("kandev-acceptance/podx");
        std::fs::create_dir_all(&pod).unwrap();
        std::fs::write(pod.join("memory.max"), "1073741824\n").unwrap();
        std::fs::write(pod.join("memory.current"), "1000\n").unwrap();
        let fs = kandev_harness::node::CgroupFs::at(root).unwrap();
        let reading = fs.read_pod("kandev-acceptance/podx");
        assert_eq!(reading.memory_peak_bytes, None);
        assert!(judge_peak(reading.memory_peak_bytes, 1 << 30).is_err());
    }

    #[test]
    fn finite_limits_pass() {
        assert_eq!(
            judge_limits(&reading(true, true, true)),
            LimitsVerdict {
                missing: vec![],
                pids_unlimited: false
            }
        );
    }

    #[test]
    fn an_unlimited_pids_max_is_a_finding_not_a_failure() {
        assert_eq!(
            judge_limits(&reading(true, true, false)),
            LimitsVerdict {
                missing: vec![],
                pids_unlimited: true
            }
        );
    }

    #[test]
    fn memory_and_cpu_stay_required_on_every_backend() {
        assert_eq!(
            judge_limits(&reading(false, true, true)).missing,
            vec!["memory"]
        );
        assert_eq!(
            judge_limits(&reading(true, false, true)).missing,
            vec!["cpu"]
        );
        let absent = PodCgroupReading::default();
        assert_eq!(
            judge_limits(&absent).missing,
            vec!["memory", "cpu"],
            "a cgroup that is not there has no limits"
        );
    }
}
