//! The cgroup tree (v1 or v2): creating, reading and removing Pod cgroups.

use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// A cgroup filesystem root (normally `/sys/fs/cgroup`; tests use fixture trees): v1 has one
/// hierarchy per controller, v2 one unified tree.
#[derive(Debug, Clone)]
pub struct CgroupFs {
    root: PathBuf,
    version: CgroupVersion,
}

/// What the node shows of one Pod cgroup.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct PodCgroupReading {
    pub exists: bool,
    pub memory_limit_bytes: Option<u64>,
    pub memory_usage_bytes: Option<u64>,
    pub memory_peak_bytes: Option<u64>,
    /// CPU time the Pod's processes used, in nanoseconds (v2: `cpu.stat` `usage_usec`; v1:
    /// `cpuacct.usage`).
    pub cpu_usage_nanos: Option<u64>,
    /// OOM kills in the Pod cgroup and everything below it (v1 counts a kill in the victim's
    /// own cgroup, which vanishes when its container exits).
    pub oom_kills: Option<u64>,
    /// How often a memory limit in the Pod's subtree was hit (v1: `memory.failcnt` summed
    /// over the subtree; v2: `max` events, hierarchical).
    pub memory_limit_hits: Option<u64>,
    pub cpu_quota_micros: Option<u64>,
    pub cpu_period_micros: Option<u64>,
    pub pids_limit: Option<u64>,
    pub pids_current: Option<u64>,
    /// Every cgroup at or below the Pod's (relative to the hierarchy root).
    pub cgroups: Vec<String>,
    /// Every process in those cgroups.
    pub pids: Vec<u32>,
}

/// Limits to write on a Pod cgroup.
#[derive(Debug, Clone, Default)]
pub struct CgroupLimits {
    pub memory_bytes: Option<i64>,
    pub cpu_millis: Option<i64>,
    pub pids: Option<i64>,
}

const CPU_PERIOD: i64 = 100_000;

impl CgroupFs {
    pub fn host() -> std::io::Result<Self> {
        Self::at(Path::new("/sys/fs/cgroup"))
    }

    /// Detects the version at `root`: v2 has `cgroup.controllers` at its root.
    pub fn at(root: &Path) -> std::io::Result<Self> {
        if !root.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} is not a cgroup root", root.display()),
            ));
        }
        let version = if root.join("cgroup.controllers").exists() {
            CgroupVersion::V2
        } else {
            CgroupVersion::V1
        };
        Ok(Self {
            root: root.to_owned(),
            version,
        })
    }

    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    /// The folder of `relative` in the hierarchy that holds `controller` (v2: the one tree).
    fn dir(&self, controller: &str, relative: &str) -> PathBuf {
        match self.version {
            CgroupVersion::V2 => self.root.join(relative),
            CgroupVersion::V1 => self.root.join(controller).join(relative),
        }
    }

    /// Every hierarchy root (v1: one per mounted controller, links skipped; v2: the root).
    pub fn hierarchies(&self) -> Vec<PathBuf> {
        match self.version {
            CgroupVersion::V2 => vec![self.root.clone()],
            CgroupVersion::V1 => std::fs::read_dir(&self.root)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .map(|e| e.path())
                .collect(),
        }
    }

    /// Creates the Pod cgroup with its limits, as the kubelet does before any container.
    pub fn create_pod(&self, relative: &str, limits: &CgroupLimits) -> std::io::Result<()> {
        match self.version {
            CgroupVersion::V2 => {
                // Controllers must be enabled on every ancestor for the Pod cgroup to use them.
                let mut current = self.root.clone();
                for part in Path::new(relative).components() {
                    enable_controllers(&current);
                    current = current.join(part);
                    std::fs::create_dir_all(&current)?;
                }
                enable_controllers(&current);
                if let Some(m) = limits.memory_bytes {
                    std::fs::write(current.join("memory.max"), m.to_string())?;
                }
                if let Some(c) = limits.cpu_millis {
                    std::fs::write(
                        current.join("cpu.max"),
                        format!("{} {CPU_PERIOD}", c * CPU_PERIOD / 1000),
                    )?;
                }
                if let Some(p) = limits.pids {
                    std::fs::write(current.join("pids.max"), p.to_string())?;
                }
            }
            CgroupVersion::V1 => {
                let memory = self.dir("memory", relative);
                std::fs::create_dir_all(&memory)?;
                if let Some(m) = limits.memory_bytes {
                    std::fs::write(memory.join("memory.limit_in_bytes"), m.to_string())?;
                }
                let cpu = self.dir("cpu", relative);
                std::fs::create_dir_all(&cpu)?;
                if let Some(c) = limits.cpu_millis {
                    std::fs::write(cpu.join("cpu.cfs_period_us"), CPU_PERIOD.to_string())?;
                    std::fs::write(
                        cpu.join("cpu.cfs_quota_us"),
                        (c * CPU_PERIOD / 1000).to_string(),
                    )?;
                }
                let pids = self.dir("pids", relative);
                std::fs::create_dir_all(&pids)?;
                if let Some(p) = limits.pids {
                    std::fs::write(pids.join("pids.max"), p.to_string())?;
                }
            }
        }
        Ok(())
    }

    /// Removes `relative` and everything below it from every hierarchy (deepest first).
    /// Absent is success; a cgroup that still has processes is an error.
    pub fn remove(&self, relative: &str) -> std::io::Result<()> {
        for hierarchy in self.hierarchies() {
            let dir = hierarchy.join(relative);
            if dir.is_dir() {
                remove_tree(&dir)?;
            }
        }
        Ok(())
    }

    /// The names of the folders directly below `relative` in any hierarchy (e.g. every
    /// `pod<uid>` under the harness's cgroup root).
    pub fn children(&self, relative: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .hierarchies()
            .iter()
            .flat_map(|h| {
                std::fs::read_dir(h.join(relative))
                    .into_iter()
                    .flatten()
                    .flatten()
            })
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// How long ago `relative` was created (modified) in the first hierarchy that has it.
    pub fn age(&self, relative: &str) -> Option<std::time::Duration> {
        self.hierarchies()
            .iter()
            .find_map(|h| std::fs::metadata(h.join(relative)).ok())
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
    }

    /// Every folder of every hierarchy below `below` (relative; empty: the hierarchy's root)
    /// down to `max_depth` levels under it, as `<hierarchy>:<path>` (v1) or `<path>` (v2),
    /// the path from the hierarchy's root, leaving out (with what is below) the folders `skip`
    /// says (given the path relative to the hierarchy, without a leading `/`, and the
    /// folder's name). A hierarchy without `below` has nothing below it.
    pub fn folders(
        &self,
        below: &str,
        max_depth: usize,
        skip: &dyn Fn(&str, &str) -> bool,
    ) -> std::io::Result<std::collections::BTreeSet<String>> {
        let below = below.trim_matches('/');
        let mut found = std::collections::BTreeSet::new();
        for hierarchy in self.hierarchies() {
            let prefix = match self.version {
                CgroupVersion::V2 => String::new(),
                CgroupVersion::V1 => format!(
                    "{}:",
                    hierarchy
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default()
                ),
            };
            let base = hierarchy.join(below);
            if !below.is_empty() && !base.is_dir() {
                continue;
            }
            let mut stack = vec![(base, 0)];
            while let Some((dir, depth)) = stack.pop() {
                if depth >= max_depth {
                    continue;
                }
                // Below the hierarchy's root, a folder removed since its parent was read is
                // gone, and one this process may not read holds nothing it could list (as
                // before); the root itself unreadable is no listing at all.
                let entries = match std::fs::read_dir(&dir) {
                    Ok(entries) => entries,
                    Err(e)
                        if depth > 0
                            && matches!(
                                e.kind(),
                                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
                            ) =>
                    {
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                for entry in entries.flatten() {
                    if !entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                        continue;
                    }
                    let name = entry.file_name().to_string_lossy().into_owned();
                    let path = entry.path();
                    let relative = path
                        .strip_prefix(&hierarchy)
                        .map(|r| r.display().to_string())
                        .unwrap_or_default();
                    if skip(&relative, &name) {
                        continue;
                    }
                    found.insert(format!("{prefix}/{relative}"));
                    stack.push((path, depth + 1));
                }
            }
        }
        Ok(found)
    }

    /// A folder as [`folders`](Self::folders) names it: when it was made and its processes.
    pub fn folder(&self, name: &str) -> Option<(Option<std::time::SystemTime>, Vec<u32>)> {
        let (hierarchy, path) = match (self.version, name.split_once(':')) {
            (CgroupVersion::V1, Some((h, p))) => (self.root.join(h), p),
            _ => (self.root.clone(), name),
        };
        let dir = hierarchy.join(path.trim_start_matches('/'));
        let meta = std::fs::metadata(&dir).ok()?;
        if !meta.is_dir() {
            return None;
        }
        let pids = std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect();
        Some((meta.modified().ok(), pids))
    }

    /// Whether `relative` exists in any hierarchy.
    pub fn exists(&self, relative: &str) -> bool {
        self.hierarchies().iter().any(|h| h.join(relative).is_dir())
    }

    /// The first cgroup below `scope` whose folder name is one of `names` (or a systemd
    /// slice ending in `-<name>.slice`), as the path processes show in `/proc/<pid>/cgroup`
    /// (absolute, without the v1 hierarchy folder).
    pub fn find(&self, scope: &str, names: &[String], max_depth: usize) -> Option<String> {
        fn walk(dir: &Path, names: &[String], depth: usize) -> Option<PathBuf> {
            for entry in std::fs::read_dir(dir).ok()?.flatten() {
                if !entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    continue;
                }
                let name = entry.file_name().to_string_lossy().into_owned();
                if names
                    .iter()
                    .any(|n| name == *n || name.ends_with(&format!("-{n}.slice")))
                {
                    return Some(entry.path());
                }
                if depth > 1
                    && let Some(found) = walk(&entry.path(), names, depth - 1)
                {
                    return Some(found);
                }
            }
            None
        }
        let scope = scope.trim_matches('/');
        self.hierarchies().into_iter().find_map(|hierarchy| {
            let found = walk(&hierarchy.join(scope), names, max_depth)?;
            let relative = found.strip_prefix(&hierarchy).ok()?;
            Some(format!("/{}", relative.display()))
        })
    }

    /// Every cgroup (relative to its hierarchy root, `hierarchy:path`) whose folder name
    /// contains one of `needles`, searched `max_depth` levels deep: traces of nested
    /// containers (their cgroups are named by container ID) wherever a daemon put them.
    pub fn dirs_named(&self, needles: &[String], max_depth: usize) -> Vec<String> {
        fn walk(
            dir: &Path,
            root: &Path,
            needles: &[String],
            depth: usize,
            found: &mut Vec<String>,
        ) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if !entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    continue;
                }
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().into_owned();
                if needles
                    .iter()
                    .any(|n| !n.is_empty() && name.contains(n.as_str()))
                {
                    let relative = path.strip_prefix(root).unwrap_or(&path);
                    found.push(relative.display().to_string());
                } else if depth > 1 {
                    walk(&path, root, needles, depth - 1, found);
                }
            }
        }
        let mut found = Vec::new();
        if needles.iter().all(String::is_empty) {
            return found;
        }
        for hierarchy in self.hierarchies() {
            walk(&hierarchy, &self.root, needles, max_depth, &mut found);
        }
        found.sort();
        found
    }

    /// Reads the Pod cgroup's limits, usage, descendants and member processes.
    pub fn read_pod(&self, relative: &str) -> PodCgroupReading {
        let mut r = PodCgroupReading {
            exists: self.exists(relative),
            ..Default::default()
        };
        if !r.exists {
            return r;
        }
        let num = |path: PathBuf| read_u64(&path);
        match self.version {
            CgroupVersion::V2 => {
                let d = self.dir("", relative);
                r.memory_limit_bytes = num(d.join("memory.max"));
                r.memory_usage_bytes = num(d.join("memory.current"));
                r.memory_peak_bytes = num(d.join("memory.peak"));
                r.oom_kills = keyed(&d.join("memory.events"), "oom_kill");
                r.memory_limit_hits = keyed(&d.join("memory.events"), "max");
                if let Ok(text) = std::fs::read_to_string(d.join("cpu.max")) {
                    let mut parts = text.split_whitespace();
                    r.cpu_quota_micros = parts.next().and_then(|q| q.parse().ok());
                    r.cpu_period_micros = parts.next().and_then(|p| p.parse().ok());
                }
                r.pids_limit = num(d.join("pids.max"));
                r.pids_current = num(d.join("pids.current"));
                r.cpu_usage_nanos = keyed(&d.join("cpu.stat"), "usage_usec").map(|u| u * 1000);
            }
            CgroupVersion::V1 => {
                let m = self.dir("memory", relative);
                // v1 reports "no limit" as a huge page-aligned number.
                r.memory_limit_bytes =
                    num(m.join("memory.limit_in_bytes")).filter(|v| *v < (1 << 62));
                r.memory_usage_bytes = num(m.join("memory.usage_in_bytes"));
                r.memory_peak_bytes = num(m.join("memory.max_usage_in_bytes"));
                r.oom_kills = keyed(&m.join("memory.oom_control"), "oom_kill");
                let c = self.dir("cpu", relative);
                r.cpu_quota_micros = std::fs::read_to_string(c.join("cpu.cfs_quota_us"))
                    .ok()
                    .and_then(|t| t.trim().parse::<i64>().ok())
                    .and_then(|q| u64::try_from(q).ok());
                r.cpu_period_micros = num(c.join("cpu.cfs_period_us"));
                let p = self.dir("pids", relative);
                r.pids_limit = num(p.join("pids.max"));
                r.pids_current = num(p.join("pids.current"));
                r.cpu_usage_nanos = num(self.dir("cpuacct", relative).join("cpuacct.usage"))
                    .or_else(|| num(self.dir("cpu,cpuacct", relative).join("cpuacct.usage")));
            }
        }
        let tree_root = match self.version {
            CgroupVersion::V2 => self.root.clone(),
            CgroupVersion::V1 => self.root.join("memory"),
        };
        let mut stack = vec![tree_root.join(relative)];
        while let Some(dir) = stack.pop() {
            if let Ok(rel) = dir.strip_prefix(&tree_root) {
                r.cgroups.push(format!("/{}", rel.display()));
            }
            // v1 counts kills and limit hits in the memcg concerned: sum the subtree.
            if self.version == CgroupVersion::V1 {
                if dir != tree_root.join(relative)
                    && let Some(kills) = keyed(&dir.join("memory.oom_control"), "oom_kill")
                {
                    r.oom_kills = Some(r.oom_kills.unwrap_or(0) + kills);
                }
                if let Some(hits) = read_u64(&dir.join("memory.failcnt")) {
                    r.memory_limit_hits = Some(r.memory_limit_hits.unwrap_or(0) + hits);
                }
            }
            if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                r.pids
                    .extend(procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
            }
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    stack.push(entry.path());
                }
            }
        }
        r.cgroups.sort();
        r.pids.sort_unstable();
        r
    }
}

fn enable_controllers(dir: &Path) {
    // Best effort: a controller the parent lacks cannot be enabled and is reported by the
    // limits write that needs it.
    for controller in ["+memory", "+cpu", "+pids"] {
        let _ = std::fs::write(dir.join("cgroup.subtree_control"), controller);
    }
}

fn remove_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)?.flatten() {
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            remove_tree(&entry.path())?;
        }
    }
    match std::fs::remove_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        // A fixture tree (tests) holds plain files; a real cgroup folder never does.
        Err(_) if !is_cgroupfs(dir) => std::fs::remove_dir_all(dir),
        Err(e) => Err(std::io::Error::new(
            e.kind(),
            format!("remove cgroup {}: {e}", dir.display()),
        )),
    }
}

fn is_cgroupfs(dir: &Path) -> bool {
    dir.starts_with("/sys/fs/cgroup")
}

fn read_u64(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn keyed(path: &Path, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = std::fs::write(path, text);
    }

    #[test]
    fn v2_tree_limits_and_members() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        write(&root.join("cgroup.controllers"), "cpu memory pids");
        let fs = CgroupFs::at(&root).unwrap();
        assert_eq!(fs.version(), CgroupVersion::V2);
        let limits = CgroupLimits {
            memory_bytes: Some(7 << 30),
            cpu_millis: Some(4000),
            pids: Some(4096),
        };
        assert!(fs.create_pod("kandev-acceptance/podabc", &limits).is_ok());
        let pod = root.join("kandev-acceptance/podabc");
        assert_eq!(
            std::fs::read_to_string(pod.join("cpu.max")).ok().as_deref(),
            Some("400000 100000")
        );
        write(&pod.join("memory.current"), "1048576\n");
        write(
            &pod.join("memory.events"),
            "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
        );
        write(
            &pod.join("docker-engine/docker/nested/cgroup.procs"),
            "42\n43\n",
        );
        write(&pod.join("docker-engine/cgroup.procs"), "7\n");
        write(
            &pod.join("cpu.stat"),
            "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n",
        );
        let r = fs.read_pod("kandev-acceptance/podabc");
        assert_eq!(r.cpu_usage_nanos, Some(2_500_000_000));
        assert!(r.exists);
        assert_eq!(r.memory_limit_bytes, Some(7 << 30));
        assert_eq!(r.memory_usage_bytes, Some(1 << 20));
        assert_eq!(r.oom_kills, Some(1));
        assert_eq!(r.cpu_quota_micros, Some(400_000));
        assert_eq!(r.pids_limit, Some(4096));
        assert_eq!(r.pids, vec![7, 42, 43]);
        assert!(
            r.cgroups
                .contains(&"/kandev-acceptance/podabc/docker-engine/docker/nested".to_string())
        );
        assert!(fs.remove("kandev-acceptance/podabc").is_ok());
        assert!(!fs.exists("kandev-acceptance/podabc"));
    }

    #[test]
    fn v1_hierarchies_limits() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_owned();
        for c in ["memory", "cpu", "pids", "freezer"] {
            let _ = std::fs::create_dir_all(root.join(c));
        }
        let fs = CgroupFs::at(&root).unwrap();
        assert_eq!(fs.version(), CgroupVersion::V1);
        let limits = CgroupLimits {
            memory_bytes: Some(1 << 30),
            cpu_millis: Some(500),
            pids: Some(64),
        };
        assert!(fs.create_pod("kandev-acceptance/podx", &limits).is_ok());
        write(
            &root.join("memory/kandev-acceptance/podx/memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        );
        write(
            &root.join("memory/kandev-acceptance/podx/companion/memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
        );
        write(
            &root.join("cpuacct/kandev-acceptance/podx/cpuacct.usage"),
            "1234567890\n",
        );
        let r = fs.read_pod("kandev-acceptance/podx");
        assert_eq!(r.cpu_usage_nanos, Some(1_234_567_890));
        assert_eq!(r.memory_limit_bytes, Some(1 << 30));
        assert_eq!(r.cpu_quota_micros, Some(50_000));
        assert_eq!(r.pids_limit, Some(64));
        // The Pod's own count plus its subtree's (the companion hit its limit 3 times).
        assert_eq!(r.oom_kills, Some(5));
        let _ = std::fs::create_dir_all(root.join("freezer/kandev-acceptance/podx/child"));
        assert!(fs.remove("kandev-acceptance/podx").is_ok());
        assert!(!fs.exists("kandev-acceptance/podx"));
    }
}
