//! The node's processes (read from `/proc`) and the kernel's memcg OOM records.

use serde::Serialize;
use std::path::{Path, PathBuf};

/// A process on the node, with the cgroup path of each hierarchy it belongs to.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NodeProcess {
    pub pid: u32,
    pub cmdline: String,
    /// `controller list -> path` from `/proc/<pid>/cgroup` (v2: the key is empty).
    pub cgroups: std::collections::BTreeMap<String, String>,
}

impl NodeProcess {
    /// The path of the hierarchy holding `controller` (v2: the unified path).
    pub fn cgroup_of(&self, controller: &str) -> Option<&str> {
        self.cgroups
            .iter()
            .find(|(k, _)| k.split(',').any(|c| c == controller))
            .or_else(|| self.cgroups.get_key_value(""))
            .map(|(_, v)| v.as_str())
    }
}

/// Each process's pid and `/proc/<pid>` folder.
pub(super) fn process_dirs(proc_root: &Path) -> impl Iterator<Item = (u32, PathBuf)> {
    std::fs::read_dir(proc_root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((pid, entry.path()))
        })
}

/// One process read from its `/proc/<pid>` folder (None: it is gone, or has no cmdline).
fn read_process(pid: u32, dir: &Path) -> Option<NodeProcess> {
    let raw = std::fs::read(dir.join("cmdline")).ok()?;
    let cmdline = String::from_utf8_lossy(&raw)
        .replace('\0', " ")
        .trim()
        .to_owned();
    let cgroups = std::fs::read_to_string(dir.join("cgroup"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
        })
        .collect();
    Some(NodeProcess {
        pid,
        cmdline,
        cgroups,
    })
}

/// Every process of the node (from `proc_root`, normally `/proc`) whose command line contains
/// `needle`.
pub fn processes_matching(proc_root: &Path, needle: &str) -> Vec<NodeProcess> {
    let mut found: Vec<NodeProcess> = process_dirs(proc_root)
        .filter_map(|(pid, dir)| read_process(pid, &dir))
        .filter(|p| p.cmdline.contains(needle))
        .collect();
    found.sort_by_key(|p| p.pid);
    found
}

/// The parent pid from `/proc/<pid>/stat` (after the command's closing parenthesis: state,
/// then ppid).
fn parent_of(dir: &Path) -> Option<u32> {
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The pids of a Pod's process tree from `<pid> <ppid> <1 when it carries the Pod's
/// HOSTNAME, else 0>` lines: the carriers and all their descendants.
pub fn pod_tree(text: &str) -> Vec<u32> {
    let mut children: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
    let mut stack = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace().map(str::parse::<u32>);
        let (Some(Ok(pid)), Some(Ok(ppid)), Some(Ok(carrier))) =
            (words.next(), words.next(), words.next())
        else {
            continue;
        };
        children.entry(ppid).or_default().push(pid);
        if carrier == 1 {
            stack.push(pid);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    while let Some(pid) = stack.pop() {
        if seen.insert(pid) {
            stack.extend(children.get(&pid).into_iter().flatten().copied());
        }
    }
    seen.into_iter().collect()
}

/// Every process of the Pod `pod_name` (see [`super::NodeView::pod_processes`]): those whose
/// environment holds `HOSTNAME=<pod name>`, and all their descendants.
pub fn pod_processes(proc_root: &Path, pod_name: &str) -> Vec<NodeProcess> {
    let hostname = format!("HOSTNAME={pod_name}");
    let mut children: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
    let mut dirs: std::collections::BTreeMap<u32, PathBuf> = Default::default();
    let mut stack = Vec::new();
    for (pid, dir) in process_dirs(proc_root) {
        if let Some(parent) = parent_of(&dir) {
            children.entry(parent).or_default().push(pid);
        }
        let in_pod = std::fs::read(dir.join("environ"))
            .map(|env| env.split(|b| *b == 0).any(|v| v == hostname.as_bytes()))
            .unwrap_or(false);
        if in_pod {
            stack.push(pid);
        }
        dirs.insert(pid, dir);
    }
    let mut seen = std::collections::BTreeSet::new();
    while let Some(pid) = stack.pop() {
        if seen.insert(pid) {
            stack.extend(children.get(&pid).into_iter().flatten().copied());
        }
    }
    seen.into_iter()
        .filter_map(|pid| read_process(pid, dirs.get(&pid)?))
        .collect()
}

/// Memory-cgroup OOM kills the kernel logged whose constraining cgroup (`oom_memcg=`) lies at
/// or below `cgroup_path`: the node's own record of where a limit killed a process. None
/// when the kernel log cannot be read (`dmesg` missing or not permitted).
pub fn kernel_memcg_ooms(cgroup_path: &str) -> Option<Vec<String>> {
    let output = std::process::Command::new("dmesg").output().ok()?;
    if !output.status.success() {
        return None;
    }
    Some(memcg_ooms_in(
        &String::from_utf8_lossy(&output.stdout),
        cgroup_path,
    ))
}

/// The memcg OOM records of a kernel log (`dmesg` text) at or below `cgroup_path`.
///
/// The kernel names the constraining cgroup from the root of the host's tree, while a node
/// view names the Pod's cgroup as the node's processes see it: on Kind the node is a container
/// whose own cgroup (`/system.slice/docker-<id>.scope` on a v2 host, `/docker/<id>` on v1) is
/// the root of the node's view, and the kernel's record carries it in front. A record names
/// the Pod when its path, or its path with leading segments removed (that host prefix), is
/// `cgroup_path` or lies below it; the Pod's cgroup names its UID, so no other Pod's record
/// matches.
pub fn memcg_ooms_in(log: &str, cgroup_path: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("oom-kill:constraint=CONSTRAINT_MEMCG"))
        .filter(|l| {
            l.split(',')
                .find_map(|field| field.trim().strip_prefix("oom_memcg="))
                .is_some_and(|memcg| names_cgroup(memcg, cgroup_path))
        })
        .map(|l| l.trim().to_owned())
        .collect()
}

/// Whether `memcg` (host-rooted, as the kernel logs it) is `cgroup_path` (as the node view
/// sees it) or below it, once a host prefix of whole segments is removed from its front.
fn names_cgroup(memcg: &str, cgroup_path: &str) -> bool {
    let wanted = cgroup_path.trim_end_matches('/');
    if wanted.is_empty() || !wanted.starts_with('/') {
        return false;
    }
    // Every suffix of `memcg` that starts at a segment boundary.
    memcg.match_indices('/').any(|(i, _)| {
        let rest = &memcg[i..];
        rest == wanted || rest.starts_with(&format!("{wanted}/"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod1111_2222.slice";

    /// Recorded on a Kind node of a cgroup v2 host (the kernel's line, the node's container
    /// `docker-<id>.scope` in front), and the same Pod's record on the node's own root.
    /// The carriers of the Pod's HOSTNAME and every descendant, however deep; nothing else.
    #[test]
    fn a_pods_tree_is_its_hostname_carriers_and_their_descendants() {
        let text = "1 0 0\n90 1 0\n100 90 1\n102 90 1\n103 102 0\n104 1 0\n105 104 0\n106 103 0\n200 1 0\nnot a line\n";
        // 104/105: a shim reparented to the node's init is not the Pod's by the tree.
        assert_eq!(pod_tree(text), [100, 102, 103, 106]);
    }

    #[test]
    fn kind_records_with_the_hosts_prefix_name_the_pods_node_relative_cgroup() {
        let log = format!(
            "[ 812.4] workload invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0\n\
             [ 812.5] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=cri-containerd-c0ffee.scope,mems_allowed=0,oom_memcg=/system.slice/docker-4f2a9d.scope{POD},task_memcg=/system.slice/docker-4f2a9d.scope{POD}/cri-containerd-c0ffee.scope/docker/9c8b7a,task=workload,pid=4242,uid=0\n\
             [ 812.6] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=x,mems_allowed=0,oom_memcg=/system.slice/docker-4f2a9d.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod9999_0000.slice,task_memcg=/x,task=other,pid=77,uid=0\n\
             [ 812.7] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=y,mems_allowed=0,oom_memcg={POD}/cri-containerd-c0ffee.scope,task_memcg={POD}/cri-containerd-c0ffee.scope,task=hog,pid=88,uid=0\n"
        );
        let found = memcg_ooms_in(&log, POD);
        assert_eq!(found.len(), 2, "{found:#?}");
        assert!(found[0].contains("pid=4242") && found[1].contains("pid=88"));
        // A v1 Kind node (`/docker/<id>` in front) and the local engine (no prefix).
        let v1 = "oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/docker/4f2a9d/kubepods/burstable/pod1111-2222/c0ffee,task=w,pid=1";
        assert_eq!(
            memcg_ooms_in(v1, "/kubepods/burstable/pod1111-2222").len(),
            1
        );
        let local =
            "oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/kandev-acceptance/podabc,task=w,pid=1";
        assert_eq!(memcg_ooms_in(local, "/kandev-acceptance/podabc").len(), 1);
        // A segment is whole: pod1111-22223 is not below pod1111-2222.
        let other = "oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg=/docker/x/kubepods/burstable/pod1111-22223,task=w,pid=1";
        assert!(memcg_ooms_in(other, "/kubepods/burstable/pod1111-2222").is_empty());
        assert!(memcg_ooms_in(local, "").is_empty());
    }
}
