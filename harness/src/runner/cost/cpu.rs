//! CPU readings for the run's cost: this process's own CPU, the machine's busy CPU, and the
//! engine's (dockerd, containerd and the shims), taken at the start of a run and at its end.

use kandev_report::{Calls, EngineCpu, RunCost};
use std::time::Duration;

/// This process's CPU (user + system) so far, from `/proc/self/stat`.
pub fn own_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    process_cpu(&stat)
}

/// utime + stime of a `/proc/<pid>/stat` line.
fn process_cpu(stat: &str) -> Option<Duration> {
    // The command may hold spaces and parentheses: fields start after the last ')'.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(ticks(utime + stime))
}

fn ticks(n: u64) -> Duration {
    // USER_HZ is 100 on every Linux the harness runs on.
    Duration::from_millis(n * 10)
}

/// Machine-wide busy CPU so far (user, nice, system, irq, softirq, steal), from `/proc/stat`.
pub fn machine_busy() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|f| f.parse().ok())
        .collect();
    let busy = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|i| v.get(*i))
        .sum::<u64>();
    Some(ticks(busy))
}

/// The engine's CPU so far: its processes found by name (`dockerd`, `containerd`, and the
/// shims `containerd-shim*`) under `proc_root`, in this process's PID namespace only (the
/// daemons inside Pods and Kind nodes run in namespaces of their own and are Pod work). When dockerd and containerd run in cgroups of
/// their own (a systemd unit, or `ensure-engine.sh`'s `kandev-engine`), those cgroups' usage
/// counts (exact: the shims they started and the ones that exited are in it); otherwise the
/// live processes' CPU.
pub fn engine_cpu(proc_root: &std::path::Path, cgroup_root: &std::path::Path) -> Option<EngineCpu> {
    let mut groups = std::collections::BTreeSet::new();
    let mut processes = Duration::ZERO;
    let mut found = false;
    let own_namespace = std::fs::read_link("/proc/self/ns/pid").ok();
    for entry in std::fs::read_dir(proc_root).ok()?.flatten() {
        let dir = entry.path();
        if std::fs::read_link(dir.join("ns/pid")).ok() != own_namespace {
            continue;
        }
        let Ok(comm) = std::fs::read_to_string(dir.join("comm")) else {
            continue;
        };
        let comm = comm.trim();
        let daemon = comm == "dockerd" || comm == "containerd";
        if !daemon && !comm.starts_with("containerd-shim") {
            continue;
        }
        found = true;
        if let Some(cpu) = std::fs::read_to_string(dir.join("stat"))
            .ok()
            .and_then(|s| process_cpu(&s))
        {
            processes += cpu;
        }
        if daemon && let Ok(cgroup) = std::fs::read_to_string(dir.join("cgroup")) {
            groups.insert(cpu_cgroup(&cgroup));
        }
    }
    if !found {
        return None;
    }
    let own: Vec<_> = groups.into_iter().flatten().filter(|g| g != "/").collect();
    let usage: Option<Duration> = if own.is_empty() {
        None
    } else {
        own.iter()
            .map(|g| cgroup_usage(cgroup_root, g))
            .sum::<Option<Duration>>()
    };
    Some(match usage {
        Some(cpu) => EngineCpu {
            cpu_ms: cpu.as_millis() as u64,
            method: format!("cgroups {}", own.join(", ")),
        },
        None => EngineCpu {
            cpu_ms: processes.as_millis() as u64,
            method: "processes (shims of containers removed during the run not counted)".into(),
        },
    })
}

/// The cgroup holding CPU accounting in a `/proc/<pid>/cgroup` (v1 `cpuacct`, else v2).
fn cpu_cgroup(text: &str) -> Option<String> {
    let mut unified = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if controllers.split(',').any(|c| c == "cpuacct") {
            return Some(path.to_owned());
        }
        if controllers.is_empty() {
            unified = Some(path.to_owned());
        }
    }
    unified
}

fn cgroup_usage(root: &std::path::Path, path: &str) -> Option<Duration> {
    let rel = path.trim_start_matches('/');
    if let Ok(v1) = std::fs::read_to_string(root.join("cpuacct").join(rel).join("cpuacct.usage")) {
        return v1.trim().parse().ok().map(Duration::from_nanos);
    }
    let v2 = std::fs::read_to_string(root.join(rel).join("cpu.stat")).ok()?;
    v2.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse().ok())
        .map(Duration::from_micros)
}

/// Readings at the start of a run, to subtract at its end.
#[derive(Debug, Clone)]
pub struct CostStart {
    harness: Option<Duration>,
    machine: Option<Duration>,
    engine: Option<EngineCpu>,
}

/// Where the engine's processes are seen (None: not on this machine).
#[derive(Debug, Clone)]
pub struct EngineHost {
    pub proc_root: std::path::PathBuf,
    pub cgroup_root: std::path::PathBuf,
}

impl CostStart {
    pub fn now(engine: Option<&EngineHost>) -> Self {
        Self {
            harness: own_cpu(),
            machine: machine_busy(),
            engine: engine.and_then(|e| engine_cpu(&e.proc_root, &e.cgroup_root)),
        }
    }

    /// The run's cost from these readings to now.
    pub fn finish(&self, engine: Option<&EngineHost>, calls: Calls) -> RunCost {
        let since = |then: Option<Duration>, now: Option<Duration>| {
            Some(now?.saturating_sub(then?).as_millis() as u64)
        };
        let engine = match (
            &self.engine,
            engine.and_then(|e| engine_cpu(&e.proc_root, &e.cgroup_root)),
        ) {
            (Some(then), Some(now)) => Some(EngineCpu {
                cpu_ms: now.cpu_ms.saturating_sub(then.cpu_ms),
                method: now.method,
            }),
            _ => None,
        };
        RunCost {
            harness_cpu_ms: since(self.harness, own_cpu()).unwrap_or_default(),
            engine,
            machine_busy_ms: since(self.machine, machine_busy()),
            calls,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_process_stat_with_spaces_in_its_name() {
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 1 0 1 1 1";
        assert_eq!(process_cpu(stat), Some(Duration::from_millis(3000)));
    }

    #[test]
    fn finds_the_cpu_cgroup_of_v1_and_v2() {
        let v1 = "9:name=systemd:/\n2:cpu,cpuacct:/system.slice/docker.service\n0::/x";
        assert_eq!(
            cpu_cgroup(v1).as_deref(),
            Some("/system.slice/docker.service")
        );
        assert_eq!(
            cpu_cgroup("0::/kandev-engine\n").as_deref(),
            Some("/kandev-engine")
        );
    }
}
