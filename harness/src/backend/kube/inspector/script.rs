//! The inspector's shell side, pure and unit-tested: quoting what goes into its scripts, the
//! probe of how it reads `/proc/<pid>/cgroup`, and parsing what its scripts print.

use crate::node::NodeProcess;
use std::collections::BTreeMap;

/// Where the inspector mounts the node's `/sys/fs/cgroup`.
pub const HOST_CGROUP: &str = "/host/cgroup";

/// `text` as one single-quoted shell word.
pub(super) fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// Parses `=== <key>` sections.
pub(super) fn sections(text: &str) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if let Some(key) = line.strip_prefix("=== ") {
            found.push((key.to_owned(), String::new()));
        } else if let Some((_, body)) = found.last_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    found
}

/// `/proc/<pid>/cgroup` lines into the map [`NodeProcess`] keeps.
fn cgroup_map(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
        })
        .collect()
}

/// In whose cgroup namespace the inspector reads `/proc/<pid>/cgroup`: the kernel shows each
/// path relative to the reader's namespace root, and a container on a cgroup v2 node runs in
/// its own (`0::/../../kubelet-kubepods-…` for a process in another Pod).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CgroupReader {
    /// In the node's namespace (`nsenter -t 1 -C`, PID 1's): paths are the node's.
    Node,
    /// In the inspector's own namespace (`why`: nsenter is missing or not permitted): paths
    /// are relative to its root, found at `root` in the node's tree (None: not found, paths
    /// stay as read).
    Own { why: String, root: Option<String> },
}

/// A cgroup path as `reader` read it, as the node's tree has it: the inspector's place in
/// the node's tree joined with what it read, `..` climbing from there (never above the root).
pub fn node_cgroup_path(read: &str, reader: &CgroupReader) -> String {
    let CgroupReader::Own {
        root: Some(root), ..
    } = reader
    else {
        return read.to_owned();
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in root.split('/').chain(read.split('/')) {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            name => parts.push(name),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Finds out how the inspector reads `/proc/<pid>/cgroup`: in the node's cgroup namespace
/// (PID 1's, through `nsenter`) when it can; otherwise in its own, and then where its own
/// namespace root lies in the node's tree (the folder whose `cgroup.procs` lists this shell:
/// host PID namespace), and where its own cgroup is inside its namespace.
pub(super) fn reader_probe() -> String {
    format!(
        r#"if ! command -v nsenter >/dev/null 2>&1; then why='nsenter is missing'
elif ! nsenter -t 1 -C -- true 2>/dev/null; then why='nsenter -t 1 -C is refused'
else echo '=== reader node'; exit 0; fi
echo '=== reader own'; echo "why $why"
if [ -f {HOST_CGROUP}/cgroup.controllers ]; then v2=1; base={HOST_CGROUP}; else v2=; base={HOST_CGROUP}/memory; fi
own=
while IFS=: read -r id ctl path; do
  if [ -n "$v2" ]; then [ "$id" = 0 ] && own=$path
  else case ",$ctl," in *,memory,*) own=$path ;; esac; fi
done < /proc/self/cgroup
echo "self $own"
echo "base $base"
echo "at $(grep -rlx --include=cgroup.procs "$$" "$base" 2>/dev/null | head -n 1)""#
    )
}

/// The reader that `reader_probe`'s output describes.
pub fn cgroup_reader(probe: &str) -> CgroupReader {
    let parsed = sections(probe);
    let Some((key, body)) = parsed.first() else {
        return CgroupReader::Own {
            why: format!("the probe answered {:?}", probe.trim()),
            root: None,
        };
    };
    if key == "reader node" {
        return CgroupReader::Node;
    }
    let field = |name: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .map(str::trim)
            .unwrap_or_default()
            .to_owned()
    };
    let (own, base, at) = (field("self"), field("base"), field("at"));
    // Where this shell's cgroup lies in the node's tree, then its namespace's root above it.
    let placed = at
        .strip_prefix(base.as_str())
        .and_then(|p| p.strip_suffix("cgroup.procs"))
        .filter(|_| !base.is_empty())
        .map(|p| p.trim_end_matches('/'));
    let root = placed.and_then(|placed| {
        let own = own.trim_end_matches('/');
        let root = placed.strip_suffix(own)?;
        Some(if root.is_empty() {
            "/".to_owned()
        } else {
            root.to_owned()
        })
    });
    CgroupReader::Own {
        why: Some(field("why"))
            .filter(|w| !w.is_empty())
            .unwrap_or_else(|| "nsenter cannot be used".into()),
        root,
    }
}

/// The `processes_matching` script's output (`=== <pid> <cmdline>` and the process's
/// `/proc/<pid>/cgroup`) as `reader` read it, with the node's cgroup paths.
pub(super) fn parse_processes(text: &str, reader: &CgroupReader) -> Vec<NodeProcess> {
    let mut found: Vec<NodeProcess> = sections(text)
        .into_iter()
        .filter_map(|(head, body)| {
            let (pid, cmdline) = head.split_once(' ').unwrap_or((&head, ""));
            Some(NodeProcess {
                pid: pid.parse().ok()?,
                cmdline: cmdline.trim().to_owned(),
                cgroups: node_cgroup_map(&body, reader),
            })
        })
        .collect();
    found.sort_by_key(|p| p.pid);
    found
}

/// `/proc/<pid>/cgroup` text as `reader` read it, into the map [`NodeProcess`] keeps, with
/// node-absolute paths.
pub fn node_cgroup_map(text: &str, reader: &CgroupReader) -> BTreeMap<String, String> {
    cgroup_map(text)
        .into_iter()
        .map(|(controllers, path)| (controllers, node_cgroup_path(&path, reader)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const INSPECTOR: &str = "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod7e57_1a5b.slice/cri-containerd-1a5b.scope";
    const NESTED: &str = "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod1111_2222.slice/cri-containerd-c0ffee02.scope/docker/9c8b7a6f";

    /// A v1 node: runtimes keep the host's cgroup namespace, the paths are the node's.
    #[test]
    fn v1_lines_are_the_nodes_paths() {
        let text = "12:pids:/kubepods/burstable/pod1111-2222/c0ffee02/docker/9c8b7a6f\n5:cpu,cpuacct:/kubepods/burstable/pod1111-2222/c0ffee02/docker/9c8b7a6f\n4:memory:/kubepods/burstable/pod1111-2222/c0ffee02/docker/9c8b7a6f\n1:name=systemd:/kubepods/burstable/pod1111-2222/c0ffee02/docker/9c8b7a6f\n0::/\n";
        let expected = "/kubepods/burstable/pod1111-2222/c0ffee02/docker/9c8b7a6f";
        for reader in [
            CgroupReader::Node,
            CgroupReader::Own {
                why: "nsenter is missing".into(),
                root: Some("/".into()),
            },
        ] {
            let map = node_cgroup_map(text, &reader);
            for controllers in ["pids", "cpu,cpuacct", "memory", "name=systemd"] {
                assert_eq!(
                    map.get(controllers).map(String::as_str),
                    Some(expected),
                    "{reader:?}"
                );
            }
        }
    }

    /// v2 read in the node's namespace (through nsenter): the node's paths, as read.
    #[test]
    fn v2_read_in_the_nodes_namespace_is_the_nodes_path() {
        let map = node_cgroup_map(&format!("0::{NESTED}\n"), &CgroupReader::Node);
        assert_eq!(map.get("").map(String::as_str), Some(NESTED));
    }

    /// v2 read in the inspector's own namespace: `/../..` climbs from the inspector's cgroup
    /// to the common ancestor; the node's path is that, from where the inspector sits.
    #[test]
    fn v2_relative_paths_are_resolved_from_the_inspectors_place() {
        let reader = CgroupReader::Own {
            why: "nsenter is missing".into(),
            root: Some(INSPECTOR.into()),
        };
        let read = "0::/../../../kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod1111_2222.slice/cri-containerd-c0ffee02.scope/docker/9c8b7a6f\n";
        let map = node_cgroup_map(read, &reader);
        assert_eq!(map.get("").map(String::as_str), Some(NESTED));
        // The inspector's own processes, and a climb to the root and past it.
        assert_eq!(node_cgroup_path("/", &reader), INSPECTOR);
        assert_eq!(
            node_cgroup_path("/../../../../../init.scope", &reader),
            "/init.scope"
        );
        assert_eq!(node_cgroup_path("/../../../../../../../x", &reader), "/x");
        // Where the inspector sits is unknown: the path stays as read.
        let unknown = CgroupReader::Own {
            why: "nsenter is missing".into(),
            root: None,
        };
        assert_eq!(
            node_cgroup_path("/../../x.slice", &unknown),
            "/../../x.slice"
        );
    }

    /// The probe's recorded answers: through nsenter; without it on v2, placed by the
    /// `cgroup.procs` that lists the probing shell; without it and not placed.
    #[test]
    fn the_reader_probe_says_where_paths_are_relative_to() {
        assert_eq!(cgroup_reader("=== reader node\n"), CgroupReader::Node);
        let own = format!(
            "=== reader own\nwhy nsenter is missing\nself /\nbase /host/cgroup\nat /host/cgroup{INSPECTOR}/cgroup.procs\n"
        );
        assert_eq!(
            cgroup_reader(&own),
            CgroupReader::Own {
                why: "nsenter is missing".into(),
                root: Some(INSPECTOR.into())
            }
        );
        // The shell sits in a sub-cgroup of its namespace's root.
        let nested = format!(
            "=== reader own\nwhy nsenter -t 1 -C is refused\nself /sub\nbase /host/cgroup\nat /host/cgroup{INSPECTOR}/sub/cgroup.procs\n"
        );
        assert_eq!(
            cgroup_reader(&nested),
            CgroupReader::Own {
                why: "nsenter -t 1 -C is refused".into(),
                root: Some(INSPECTOR.into())
            }
        );
        // v1, host namespace: the memory hierarchy's root cgroup.
        let v1 = "=== reader own\nwhy nsenter is missing\nself /\nbase /host/cgroup/memory\nat /host/cgroup/memory/cgroup.procs\n";
        assert!(matches!(cgroup_reader(v1), CgroupReader::Own { root: Some(r), .. } if r == "/"));
        let lost = "=== reader own\nwhy nsenter is missing\nself /\nbase /host/cgroup\nat \n";
        assert!(matches!(
            cgroup_reader(lost),
            CgroupReader::Own { root: None, .. }
        ));
        assert!(matches!(
            cgroup_reader(""),
            CgroupReader::Own { root: None, .. }
        ));
    }

    /// What `processes_matching` makes of the inspector's output: recorded in its own
    /// namespace on a v2 Kind node, each process's cgroup is the node's path below the Pod's.
    #[test]
    fn processes_read_in_the_inspectors_namespace_get_the_nodes_paths() {
        let text = "=== 5001 sleep 600 kandev-nested\n0::/../../../kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod1111_2222.slice/cri-containerd-c0ffee02.scope/docker/9c8b7a6f\n=== 77 sleep 600 kandev-nested\n0::/\n";
        let reader = CgroupReader::Own {
            why: "nsenter is missing".into(),
            root: Some(INSPECTOR.into()),
        };
        let found = parse_processes(text, &reader);
        assert_eq!(
            found.iter().map(|p| p.pid).collect::<Vec<_>>(),
            vec![77, 5001]
        );
        assert_eq!(found[1].cgroup_of("memory"), Some(NESTED));
        assert_eq!(found[0].cgroup_of("memory"), Some(INSPECTOR));
        let pod = "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod1111_2222.slice";
        assert!(
            found[1]
                .cgroup_of("pids")
                .is_some_and(|p| p.starts_with(&format!("{pod}/")))
        );
    }

    #[test]
    fn the_reader_probe_is_valid_shell() {
        let checked = std::process::Command::new("sh")
            .args(["-n", "-c"])
            .arg(reader_probe())
            .status()
            .unwrap();
        assert!(checked.success());
    }

    #[test]
    fn sections_and_cgroup_lines_parse() {
        let parsed = sections(
            "=== 12 sleep 600 kandev-x\n4:memory:/kubepods/pod1\n0::/kubepods/pod1\n=== 13 sh\n",
        );
        assert_eq!(parsed.len(), 2);
        let map = cgroup_map(&parsed[0].1);
        assert_eq!(
            map.get("memory").map(String::as_str),
            Some("/kubepods/pod1")
        );
        assert_eq!(map.get("").map(String::as_str), Some("/kubepods/pod1"));
        assert_eq!(quote("it's"), "'it'\\''s'");
    }
}
