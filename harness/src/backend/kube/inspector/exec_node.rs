//! One node seen through an exec-capable helper container: its Pods' cgroups (copied out and
//! read with the same [`CgroupFs`] code as on this host), its processes and their cgroups,
//! the kernel's OOM records, and what is left of a Pod.

use super::script::{
    CgroupReader, HOST_CGROUP, cgroup_reader, parse_processes, quote, reader_probe, sections,
};
use crate::backend::{Backend, ExecRequest, PodRef};
use crate::node::{
    CgroupFs, NESTED_CGROUP_DEPTH, NodeProcess, NodeView, POD_CGROUP_DEPTH, PodCgroupReading,
};
use anyhow::{Context, bail};
use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// The files [`CgroupFs::read_pod`] reads (v1 and v2).
const CGROUP_FILES: [&str; 17] = [
    "cgroup.procs",
    "cpu.max",
    "cpu.stat",
    "cpuacct.usage",
    "cpu.cfs_period_us",
    "cpu.cfs_quota_us",
    "memory.current",
    "memory.events",
    "memory.failcnt",
    "memory.limit_in_bytes",
    "memory.max",
    "memory.max_usage_in_bytes",
    "memory.oom_control",
    "memory.peak",
    "memory.usage_in_bytes",
    "pids.current",
    "pids.max",
];

/// One node seen through an exec-capable helper container.
pub struct ExecNode {
    pub backend: Arc<dyn Backend>,
    pub pod: PodRef,
    pub container: String,
    pub description: String,
    /// How `/proc/<pid>/cgroup` is read there (found out on first use).
    reader: tokio::sync::OnceCell<CgroupReader>,
}

/// The names a Pod's cgroup folder has: cgroupfs driver, then systemd driver.
fn pod_cgroup_patterns(pod_uid: &str) -> [String; 2] {
    [
        format!("pod{pod_uid}"),
        format!("*pod{}.slice", pod_uid.replace('-', "_")),
    ]
}

impl ExecNode {
    pub fn new(
        backend: Arc<dyn Backend>,
        pod: PodRef,
        container: &str,
        description: impl Into<String>,
    ) -> Self {
        Self {
            backend,
            pod,
            container: container.to_owned(),
            description: description.into(),
            reader: tokio::sync::OnceCell::new(),
        }
    }

    async fn sh(&self, script: &str) -> anyhow::Result<String> {
        self.run(&[], script).await
    }

    /// How this inspector reads `/proc/<pid>/cgroup` (probed once).
    async fn reader(&self) -> anyhow::Result<&CgroupReader> {
        self.reader
            .get_or_try_init(|| async {
                let reader = cgroup_reader(&self.sh(&reader_probe()).await?);
                if let CgroupReader::Own { why, root } = &reader {
                    tracing::warn!(
                        inspector = %self.pod.name,
                        "reading process cgroups in the inspector's own cgroup namespace ({why}); its root in the node's tree: {root:?}"
                    );
                }
                Ok(reader)
            })
            .await
    }

    /// Runs `script` where `/proc/<pid>/cgroup` shows the node's paths: in the node's cgroup
    /// namespace when the inspector can enter it, else in its own (the reader says which).
    async fn sh_reading_cgroups(&self, script: &str) -> anyhow::Result<(String, &CgroupReader)> {
        let reader = self.reader().await?;
        let text = match reader {
            CgroupReader::Node => {
                self.run(&["nsenter", "-t", "1", "-C", "--"], script)
                    .await?
            }
            CgroupReader::Own { .. } => self.sh(script).await?,
        };
        Ok((text, reader))
    }

    /// `sh -c script` in the inspector, behind `prefix` (a command that runs its arguments).
    async fn run(&self, prefix: &[&str], script: &str) -> anyhow::Result<String> {
        // Processes vanish while the loops read /proc: only the scripts' output counts.
        let script = format!("{script}\nexit 0");
        let mut argv = prefix.to_vec();
        argv.extend(["sh", "-c", &script]);
        let request = ExecRequest::new(&self.container, &argv).timeout(Duration::from_secs(60));
        let out = self
            .backend
            .exec(&self.pod, request)
            .await
            .with_context(|| format!("node inspector {}", self.pod.name))?;
        if !out.success() {
            bail!(
                "node inspector {} ended with {}: {}",
                self.pod.name,
                out.exit_text(),
                out.stderr_text().trim()
            );
        }
        Ok(out.stdout_text())
    }

    /// Every folder of the node's tree (its `/sys/fs/cgroup`, whole: the inspector sees the
    /// node's root, whatever the node's cgroup version), Pods' cgroups left out with what is
    /// below them. Err unless every hierarchy was listed by a `find` that exited 0 and listed
    /// the hierarchy's root, and the script ended: a listing cut short is no evidence that
    /// nothing is new.
    pub async fn list_cgroup_folders(&self) -> Result<std::collections::BTreeSet<String>, String> {
        let text = self
            .sh(&folders_script(HOST_CGROUP))
            .await
            .map_err(|e| format!("the listing did not run: {e:#}"))?;
        parse_folders(&text)
    }

    /// One folder as [`list_cgroup_folders`](Self::list_cgroup_folders) names it: when it was
    /// made and its processes' `HOSTNAME`s. None when it is gone or the reading was cut short.
    pub async fn read_cgroup_folder(&self, folder: &str) -> Option<crate::node::CgroupFolder> {
        let (hierarchy, path) = match folder.split_once(':') {
            Some((h, p)) => (format!("/{h}"), p),
            None => (String::new(), folder),
        };
        let dir = format!("{HOST_CGROUP}{hierarchy}/{}", path.trim_start_matches('/'));
        let script = format!(
            r#"d={}
[ -d "$d" ] || exit 0
echo "made $(stat -c %Y "$d")"
for p in $(cat "$d/cgroup.procs" 2>/dev/null); do
  h=$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | sed -n 's/^HOSTNAME=//p' | head -n 1)
  printf 'pid\t%s\t%s\n' "$p" "$h"
done
echo end"#,
            quote(&dir)
        );
        let text = self.sh(&script).await.ok()?;
        parse_folder(folder, &text)
    }
}

#[async_trait]
impl NodeView for ExecNode {
    fn describe(&self) -> String {
        match self.reader.get() {
            Some(CgroupReader::Own { why, root }) => format!(
                "{} (process cgroups read in the inspector's own cgroup namespace, {why}: {})",
                self.description,
                match root {
                    Some(root) => format!("resolved from its place {root} in the node's tree"),
                    None => "left as read, its place in the node's tree was not found".into(),
                }
            ),
            _ => self.description.clone(),
        }
    }

    fn settle_time(&self) -> Duration {
        crate::node::KUBELET_SETTLE
    }

    async fn pod_cgroup(&self, pod_uid: &str) -> anyhow::Result<Option<String>> {
        let [plain, slice] = pod_cgroup_patterns(pod_uid);
        let script = format!(
            "{}\nfor h in \"$@\"; do d=$(find \"{HOST_CGROUP}/$h\" -maxdepth {} -type d \\( -name {} -o -name {} \\) -print 2>/dev/null | head -n 1); if [ -n \"$d\" ]; then echo \"${{d#{HOST_CGROUP}/$h}}\"; exit 0; fi; done",
            hierarchies(HOST_CGROUP),
            POD_CGROUP_DEPTH,
            quote(&plain),
            quote(&slice)
        );
        let found = self.sh(&script).await?;
        let path = found.trim();
        Ok((!path.is_empty()).then(|| format!("/{}", path.trim_start_matches('/'))))
    }

    async fn read_cgroup(&self, path: &str) -> anyhow::Result<PodCgroupReading> {
        // The path goes into a shell script: cgroup paths are plain names.
        if !path
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/-_.:@".contains(c))
            || path.contains("..")
        {
            bail!("not a cgroup path: {path:?}");
        }
        let names: Vec<String> = CGROUP_FILES.iter().map(|f| format!("-name {f}")).collect();
        let script = format!(
            "{}\n[ -f {HOST_CGROUP}/cgroup.controllers ] && echo '=== file cgroup.controllers'\nfor h in \"$@\"; do base=\"{HOST_CGROUP}/$h\"; [ -d \"$base{path}\" ] || continue; find \"$base{path}\" -type d | while read -r d; do echo \"=== dir ${{d#{HOST_CGROUP}/}}\"; done; find \"$base{path}\" -type f \\( {} \\) | while read -r f; do echo \"=== file ${{f#{HOST_CGROUP}/}}\"; cat \"$f\" 2>/dev/null; done; done",
            hierarchies(HOST_CGROUP),
            names.join(" -o ")
        );
        let text = self.sh(&script).await?;
        let tree = tempfile::tempdir().context("a folder for the inspector's cgroup copy")?;
        for (key, body) in sections(&text) {
            let (kind, relative) = key.split_once(' ').unwrap_or(("", ""));
            if relative.contains("..") {
                continue;
            }
            let target = tree.path().join(relative);
            match kind {
                "dir" => std::fs::create_dir_all(&target)?,
                "file" => {
                    if let Some(parent) = target.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::write(&target, body)?;
                }
                _ => {}
            }
        }
        let cgroups = CgroupFs::at(tree.path())?;
        Ok(cgroups.read_pod(path.trim_start_matches('/')))
    }

    async fn processes_matching(&self, needle: &str) -> anyhow::Result<Vec<NodeProcess>> {
        let script = format!(
            "needle={}\nfor p in /proc/[0-9]*; do c=$(tr '\\0' ' ' < \"$p/cmdline\" 2>/dev/null) || continue; case \"$c\" in *\"$needle\"*) ;; *) continue ;; esac; case \"$c\" in *'needle='*) continue ;; esac; echo \"=== ${{p#/proc/}} $c\"; cat \"$p/cgroup\" 2>/dev/null; done",
            quote(needle)
        );
        let (text, reader) = self.sh_reading_cgroups(&script).await?;
        Ok(parse_processes(&text, reader))
    }

    async fn pod_processes(&self, pod_name: &str) -> anyhow::Result<Vec<NodeProcess>> {
        // The node's process tree and which processes carry the Pod's HOSTNAME, then those
        // and their descendants read as processes_matching reads them.
        let tree = format!(
            "host={}\nfor p in /proc/[0-9]*; do ppid=$(sed 's/.*) //' \"$p/stat\" 2>/dev/null | cut -d' ' -f2) || continue; [ -n \"$ppid\" ] || continue; h=0; tr '\\0' '\\n' < \"$p/environ\" 2>/dev/null | grep -qx \"$host\" && h=1; echo \"${{p#/proc/}} $ppid $h\"; done",
            quote(&format!("HOSTNAME={pod_name}"))
        );
        let pids = crate::node::pod_tree(&self.sh(&tree).await?);
        if pids.is_empty() {
            return Ok(Vec::new());
        }
        let list: Vec<String> = pids.iter().map(u32::to_string).collect();
        let script = format!(
            "for pid in {}; do p=/proc/$pid; c=$(tr '\\0' ' ' < \"$p/cmdline\" 2>/dev/null) || continue; echo \"=== $pid $c\"; cat \"$p/cgroup\" 2>/dev/null; done",
            list.join(" ")
        );
        let (text, reader) = self.sh_reading_cgroups(&script).await?;
        Ok(parse_processes(&text, reader))
    }

    async fn cgroup_folders(&self) -> Result<crate::node::NodeFolders, String> {
        Ok(crate::node::NodeFolders::from([(
            String::new(),
            self.list_cgroup_folders().await,
        )]))
    }

    async fn cgroup_folder(&self, _node: &str, folder: &str) -> Option<crate::node::CgroupFolder> {
        self.read_cgroup_folder(folder).await
    }

    async fn kernel_memcg_ooms(&self, path: &str) -> Option<Vec<String>> {
        let log = self.sh("dmesg").await.ok()?;
        Some(crate::node::memcg_ooms_in(&log, path))
    }

    async fn pod_remains(
        &self,
        pod_name: &str,
        pod_uid: &str,
        nested_ids: &[String],
    ) -> anyhow::Result<Vec<String>> {
        let [plain, slice] = pod_cgroup_patterns(pod_uid);
        let mut needles = vec![plain.clone(), slice.trim_start_matches('*').to_owned()];
        needles.extend(nested_ids.iter().filter(|i| !i.is_empty()).cloned());
        let cases = needles
            .iter()
            .map(|n| format!("*{}*", n.replace('\'', "")))
            .collect::<Vec<_>>()
            .join("|");
        let mut names = vec![
            format!("-name {}", quote(&plain)),
            format!("-name {}", quote(&slice)),
        ];
        names.extend(
            nested_ids
                .iter()
                .filter(|i| !i.is_empty())
                .map(|i| format!("-name {}", quote(&format!("*{i}*")))),
        );
        let script = format!(
            "host={}\nfor p in /proc/[0-9]*; do cg=$(cat \"$p/cgroup\" 2>/dev/null) || continue; hit=; case \"$cg\" in {cases}) hit=1 ;; esac; if [ -z \"$hit\" ] && tr '\\0' '\\n' < \"$p/environ\" 2>/dev/null | grep -qx \"$host\"; then hit=1; fi; [ -n \"$hit\" ] && echo \"process/${{p#/proc/}} \\`$(tr '\\0' ' ' < \"$p/cmdline\" 2>/dev/null)\\`\"; done\nfind {HOST_CGROUP} -maxdepth {} -type d \\( {} \\) 2>/dev/null | sed 's#^{HOST_CGROUP}/#cgroup/#'",
            quote(&format!("HOSTNAME={pod_name}")),
            // One more level on v1: the hierarchy's folder.
            NESTED_CGROUP_DEPTH + 1,
            names.join(" -o ")
        );
        // Matched by the names in the path, which a relative path read in the inspector's
        // own namespace has too; in the node's namespace when possible all the same.
        let (text, _) = self.sh_reading_cgroups(&script).await?;
        let mut remains: Vec<String> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        remains.sort();
        remains.dedup();
        Ok(remains)
    }
}

/// Sets the script's arguments to the hierarchy folders below `root` (the inspector's
/// [`HOST_CGROUP`]; v2: the root itself, as "").
fn hierarchies(root: &str) -> String {
    format!(
        r#"if [ -f {root}/cgroup.controllers ]; then set -- ""; else set --; for h in {root}/*/; do [ -L "${{h%/}}" ] || set -- "$@" "$(basename "$h")"; done; fi"#
    )
}

/// The script that lists every folder of the tree at `root` (see [`parse_folders`]): per
/// hierarchy, each folder `find` printed (the hierarchy's root among them, the positive
/// control), then `find`'s exit status.
fn folders_script(root: &str) -> String {
    // GNU find's -ignore_readdir_race: a folder removed between its parent's reading and its
    // own (a container stopped meanwhile) is gone, not an error, as the host's listing takes
    // it (`CgroupFs::folders`); busybox find has no such option.
    format!(
        r#"{}
command -v find >/dev/null || {{ echo 'missing find'; exit 0; }}
race=
find {root} -maxdepth 0 -ignore_readdir_race >/dev/null 2>&1 && race=-ignore_readdir_race
printf 'hierarchies\t%s\n' "$#"
for h in "$@"; do
  top="{root}${{h:+/$h}}"
  {{ find "$top" $race -maxdepth {} -type d 2>&1; echo "exit $?"; }} | while IFS= read -r d; do
    case "$d" in
      "$top"|"$top"/*) printf 'folder\t%s\t%s\n' "$h" "${{d#"$top"}}" ;;
      "exit "*) printf 'listed\t%s\t%s\n' "$h" "${{d#exit }}" ;;
      *) printf 'said\t%s\t%s\n' "$h" "$d" ;;
    esac
  done
done
echo end"#,
        hierarchies(root),
        crate::node::LEDGER_CGROUP_DEPTH,
    )
}

/// The inspector's folder listing ([`folders_script`]): `hierarchies\t<n>`, then per
/// hierarchy the `folder\t<h>\t<path>` lines of what its `find` printed (`said\t<h>\t<line>`
/// for anything else it said) and `listed\t<h>\t<find's exit status>`, then `end`. Named as
/// [`CgroupFs::folders`] names them (`<h>:<path>` on v1, `<path>` on v2), Pods' cgroups left
/// out with what is below them. A hierarchy counts only when its `find` exited 0 and listed
/// its root (`folder\t<h>\t`): Err, saying which did not, unless every one did.
fn parse_folders(text: &str) -> Result<std::collections::BTreeSet<String>, String> {
    #[derive(Default)]
    struct Hierarchy<'a> {
        exit: Option<&'a str>,
        root_listed: bool,
        said: Vec<&'a str>,
    }
    let mut expected = None;
    let mut ended = false;
    let mut hierarchies: std::collections::BTreeMap<&str, Hierarchy> = Default::default();
    let mut found = std::collections::BTreeSet::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        match fields.as_slice() {
            ["missing find"] => {
                return Err("the inspector's image has no `find`: pass --node-inspector-image with one (it needs sh, find, tr, dmesg)".into());
            }
            ["hierarchies", n] => expected = n.trim().parse::<usize>().ok(),
            ["listed", h, exit] => hierarchies.entry(h).or_default().exit = Some(exit.trim()),
            ["said", h, said] => hierarchies.entry(h).or_default().said.push(said),
            ["folder", h, path] => {
                let hierarchy = hierarchies.entry(h).or_default();
                if path.is_empty() {
                    hierarchy.root_listed = true;
                    continue;
                }
                if path.split('/').any(crate::node::is_pod_cgroup) {
                    continue;
                }
                found.insert(if h.is_empty() {
                    (*path).to_owned()
                } else {
                    format!("{h}:{path}")
                });
            }
            ["end"] => ended = true,
            _ => {}
        }
    }
    let name = |h: &str| {
        if h.is_empty() {
            "the cgroup tree".to_owned()
        } else {
            format!("hierarchy {h}")
        }
    };
    let mut wrong = Vec::new();
    for (h, hierarchy) in &hierarchies {
        match hierarchy.exit {
            Some("0") if hierarchy.root_listed => {}
            Some("0") => wrong.push(format!("{}: find did not list its root", name(h))),
            Some(exit) => wrong.push(format!(
                "{}: find exited {exit}{}",
                name(h),
                hierarchy
                    .said
                    .first()
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default()
            )),
            None => wrong.push(format!("{}: not listed to its end", name(h))),
        }
    }
    let listed = hierarchies.values().filter(|h| h.exit.is_some()).count();
    match expected {
        None => wrong.insert(0, "the listing did not start".into()),
        Some(0) => wrong.insert(0, format!("no cgroup hierarchy under {HOST_CGROUP}")),
        Some(n) if n != listed => wrong.insert(0, format!("{listed} of {n} hierarchies listed")),
        Some(_) => {}
    }
    if !ended {
        wrong.push("the listing was cut short".into());
    }
    if wrong.is_empty() {
        Ok(found)
    } else {
        Err(wrong.join("; "))
    }
}

/// One folder's reading: `made <seconds>`, `pid\t<pid>\t<HOSTNAME>` lines, `end`. None when
/// the folder is gone or the reading was cut short.
fn parse_folder(folder: &str, text: &str) -> Option<crate::node::CgroupFolder> {
    let mut created = None;
    let (mut pids, mut hostnames) = (Vec::new(), Vec::new());
    let mut ended = false;
    for line in text.lines() {
        if let Some(seconds) = line.strip_prefix("made ") {
            created = seconds
                .trim()
                .parse::<u64>()
                .ok()
                .map(|s| std::time::UNIX_EPOCH + Duration::from_secs(s));
        } else if let Some(rest) = line.strip_prefix("pid\t") {
            let (pid, host) = rest.split_once('\t').unwrap_or((rest, ""));
            if let Ok(pid) = pid.trim().parse() {
                pids.push(pid);
                hostnames.push(host.trim().to_owned());
            }
        } else if line == "end" {
            ended = true;
        }
    }
    (ended && created.is_some()).then(|| crate::node::CgroupFolder {
        path: folder.to_owned(),
        created,
        pids,
        hostnames,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_counts_only_when_every_hierarchy_was_listed_to_the_end() {
        let v1 = "hierarchies\t2\nfolder\tmemory\t\nfolder\tmemory\t/kubepods\nfolder\tmemory\t/kubepods/burstable/pod0f3c2a44-1b5e-4c1a-9d2e-3f4a5b6c7d8e\nfolder\tmemory\t/kubepods/burstable/pod0f3c2a44-1b5e-4c1a-9d2e-3f4a5b6c7d8e/abc\nlisted\tmemory\t0\nfolder\tpids\t\nfolder\tpids\t/escaped\nlisted\tpids\t0\nend\n";
        let found = parse_folders(v1).unwrap();
        assert_eq!(
            found,
            ["memory:/kubepods", "pids:/escaped"]
                .map(str::to_owned)
                .into()
        );
        let v2 = "hierarchies\t1\nfolder\t\t\nfolder\t\t/kubepods.slice\nfolder\t\t/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0f3c2a44_1b5e_4c1a_9d2e_3f4a5b6c7d8e.slice\nlisted\t\t0\nend\n";
        assert_eq!(
            parse_folders(v2).unwrap(),
            ["/kubepods.slice".to_owned()].into()
        );
        // Cut short, a hierarchy missing, none at all: no listing, saying why.
        let why = |text: &str| parse_folders(text).unwrap_err();
        assert!(
            why("hierarchies\t2\nfolder\tmemory\t\nlisted\tmemory\t0\nend\n")
                .contains("1 of 2 hierarchies listed")
        );
        assert!(why("hierarchies\t1\nfolder\t\t\nlisted\t\t0\n").contains("cut short"));
        assert!(why("hierarchies\t0\nend\n").contains("no cgroup hierarchy"));
        assert!(why("").contains("did not start"));
        assert!(why("missing find\n").contains("--node-inspector-image"));
    }

    /// Issue 41, item 5: a hierarchy counts only when its `find` exited 0, and, the positive
    /// control, listed the hierarchy's root: a `find` that failed part-way printed some folders
    /// and left others out, which is no evidence that nothing is new.
    #[test]
    fn a_hierarchy_whose_find_failed_or_missed_its_root_is_no_listing() {
        let failed = "hierarchies\t2\nfolder\tmemory\t\nfolder\tmemory\t/a\nsaid\tmemory\tfind: '/host/cgroup/memory/b': Input/output error\nlisted\tmemory\t1\nfolder\tpids\t\nlisted\tpids\t0\nend\n";
        let why = parse_folders(failed).unwrap_err();
        assert!(
            why.contains("hierarchy memory: find exited 1")
                && why.contains("Input/output error")
                && !why.contains("pids"),
            "{why}"
        );
        let rootless = "hierarchies\t1\nfolder\t\t/a\nlisted\t\t0\nend\n";
        let why = parse_folders(rootless).unwrap_err();
        assert!(
            why.contains("the cgroup tree: find did not list its root"),
            "{why}"
        );
        // The same listings with the status and the root: counted.
        assert!(parse_folders(&failed.replace("listed\tmemory\t1", "listed\tmemory\t0")).is_ok());
        assert!(
            parse_folders(&rootless.replace("folder\t\t/a", "folder\t\t\nfolder\t\t/a")).is_ok()
        );
    }

    /// The listing script itself, run here on a v1 and a v2 tree: it names every folder as
    /// this host's own listing does (`CgroupFs::folders`, Pods' cgroups left out), and
    /// counts.
    #[test]
    fn the_listing_script_lists_a_tree_as_the_host_does() {
        for v2 in [true, false] {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path().join("cgroup");
            let hierarchies: &[&str] = if v2 { &[""] } else { &["memory", "pids"] };
            for h in hierarchies {
                let base = root.join(h);
                for dir in [
                    "kubepods/burstable/pod0f3c2a44-1b5e-4c1a-9d2e-3f4a5b6c7d8e/abc",
                    "system.slice/a/b/c/d/e/f/g",
                    "escaped",
                ] {
                    std::fs::create_dir_all(base.join(dir)).unwrap();
                }
            }
            if v2 {
                std::fs::write(root.join("cgroup.controllers"), "memory pids").unwrap();
            } else {
                std::os::unix::fs::symlink(root.join("memory"), root.join("memory,x")).unwrap();
            }
            let out = std::process::Command::new("sh")
                .args(["-c", &folders_script(root.to_str().unwrap())])
                .output()
                .unwrap();
            let listed = parse_folders(&String::from_utf8_lossy(&out.stdout)).unwrap();
            let host = CgroupFs::at(&root)
                .unwrap()
                .folders("", crate::node::LEDGER_CGROUP_DEPTH, &|_, name| {
                    crate::node::is_pod_cgroup(name)
                })
                .unwrap();
            assert_eq!(listed, host, "v2 {v2}");
            assert!(listed.iter().any(|f| f.ends_with("/escaped")), "{listed:?}");
        }
    }

    #[test]
    fn a_folder_reading_names_its_processes_hosts_or_nothing() {
        let folder = parse_folder(
            "memory:/escaped",
            "made 1767225600\npid\t42\tkandev-pod\npid\t43\t\nend\n",
        )
        .unwrap();
        assert_eq!(folder.pids, vec![42, 43]);
        assert_eq!(
            folder.hostnames,
            vec!["kandev-pod".to_owned(), String::new()]
        );
        assert!(folder.created.is_some());
        assert!(parse_folder("memory:/gone", "").is_none());
        assert!(parse_folder("memory:/cut", "made 1767225600\npid\t42\tx\n").is_none());
    }
}
