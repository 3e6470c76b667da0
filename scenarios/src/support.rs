//! Helpers shared by scenarios: template variants, the nested workload image, checks.

use anyhow::{Context, anyhow};
use k8s_openapi::api::core::v1::{Container, PodTemplate};
use kandev_harness::runner::{Check, Ctx, broken};
use kandev_harness::session::Session;
use kandev_harness::session::agent::{AgentExecResult, FileDigest};
use std::time::Duration;

pub mod docker_ping;

/// The named container of a template (mutable, for variants).
pub fn container_mut<'a>(
    template: &'a mut PodTemplate,
    name: &str,
) -> anyhow::Result<&'a mut Container> {
    template
        .template
        .as_mut()
        .and_then(|t| t.spec.as_mut())
        .and_then(|s| s.containers.iter_mut().find(|c| c.name == name))
        .ok_or_else(|| anyhow!("the template has no container {name}"))
}

/// The run's template with the daemon container's command replaced (the upstream fixture's
/// "unavailable daemon" variant replaces `exec dockerd ...` the same way).
pub fn with_daemon_command(ctx: &Ctx, argv: &[&str]) -> anyhow::Result<PodTemplate> {
    let mut template = ctx.template().clone();
    let daemon = container_mut(&mut template, &ctx.config().daemon_container)?;
    daemon.command = Some(argv.iter().map(|s| (*s).to_owned()).collect());
    daemon.args = None;
    Ok(template)
}

/// Fails `check` when an agent command did not succeed (a step towards judging it, not a pass
/// of it).
pub fn require_success(result: &AgentExecResult, check: &Check, what: &str) -> anyhow::Result<()> {
    if result.success() {
        Ok(())
    } else {
        Err(broken(check, format!("{what}: {}", result.summary())))
    }
}

/// Parses the digest line the workload (`kandev-mock-agent digest|write`) prints.
pub fn workload_digest(stdout: &str) -> anyhow::Result<FileDigest> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or_else(|| anyhow!("no digest in output {stdout:?}"))?;
    serde_json::from_str(line).context("decode the workload's digest")
}

/// Folder (in the workspace) for the nested workload's build context.
pub const WORKLOAD_CONTEXT: &str = "/workspace/.kandev-acceptance/workload";

/// Builds the nested workload image (`FROM scratch` + the static mock agent) inside the
/// session's daemon, with `--network none`: no registry and no base image needed.
/// Returns the agent's build result (the image id on stdout when it worked).
pub async fn build_workload(session: &Session, tag: &str) -> anyhow::Result<AgentExecResult> {
    let script = format!(
        r#"set -eu
d={WORKLOAD_CONTEXT}
mkdir -p "$d"
cp /opt/kandev/agentctl "$d/workload"
printf 'FROM scratch\nCOPY workload /workload\nENTRYPOINT ["/workload"]\n' > "$d/Dockerfile"
docker build -q --network none -t {tag} "$d""#
    );
    session.agent_sh(&script, Duration::from_secs(180)).await
}

/// A tag unique to this scenario run.
pub fn probe_tag(ctx: &Ctx, what: &str) -> String {
    format!(
        "kandev-acceptance-{what}:{}",
        ctx.run_id().replace('t', "-")
    )
}

/// A file the agent digested, as a diagnosis says it: `sha256 <hex> (<n> bytes)`, or that it
/// is missing.
pub fn digest_text(digest: Option<&FileDigest>) -> String {
    match digest {
        Some(d) if d.exists => format!(
            "sha256 {} ({} bytes)",
            or_unknown(d.sha256.as_deref()),
            or_unknown(d.size)
        ),
        _ => "no such file".to_owned(),
    }
}

/// A value that may be missing, printed plainly for a diagnosis ("unknown" when absent),
/// never as Rust's `Some(..)`.
pub fn or_unknown<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "unknown".to_owned(), |v| v.to_string())
}

/// The ID of the daemon the session's agent reaches (`docker info`); fails `check` when the
/// agent cannot ask.
pub async fn daemon_id(session: &Session, check: &Check) -> anyhow::Result<String> {
    let info = session
        .agent_sh("docker info --format '{{.ID}}'", Duration::from_secs(30))
        .await?;
    require_success(&info, check, "docker info")?;
    Ok(info.stdout.trim().to_owned())
}

/// Why a scenario that needs the node's own view (processes, cgroups, kernel records) is
/// skipped when the backend has none.
pub const NO_NODE_VIEW: &str = "no node view: the node's processes and cgroups cannot be read from here (local: the host's cgroup filesystem is not readable; Kind: the node container is not on this host's engine; other clusters: pass --node-inspector to admit a privileged inspector Pod on the session's node)";

#[cfg(test)]
mod tests {
    use super::*;

    /// README's table of the cgroup twins: a row per twin, each version list spelled out.
    #[test]
    fn the_cgroup_twins_table_has_a_row_per_twin() {
        let table = cgroup_twins_table();
        assert_eq!(table.lines().count(), CGROUP_TWINS.len() + 2);
        assert!(table.contains(
            "| `fixtures/templates/broken/daemon-escapes-pod-pids.yaml` | `cgroup::accounting/nested_inside` | v1, v2 | v1 | v1, v2 (`cgroup/accounting.rs::the_cgroup_twins_break_their_checks_on_v1_and_v2_trees`) |"
        ), "{table}");
    }

    #[test]
    fn absent_values_print_as_unknown() {
        assert_eq!(or_unknown(Some(0u32)), "0");
        assert_eq!(or_unknown(Some("0644")), "0644");
        assert_eq!(or_unknown(None::<u32>), "unknown");
    }
}

/// The cgroup twins, the cgroup versions each is made for, and those it has been proven to
/// break its check on. `works_on`: the versions its fixture handles (`scenarios/tests/twins.rs`
/// runs it on a node of such a version and skips it, saying so, on another); `engine`: a whole
/// run on a node of that version (the twin test); `fixture_trees`: the twin's own escape step
/// (the function between `escape:begin` and `escape:end` in the fixture) run through `sh`
/// against a recorded tree of that version, and the scenario's judgement of what the node then
/// shows (the unit test `tree_test` names). The development machines are v1; Kind nodes and
/// most CI runners are v2. `docs/catalogue.md` states this table (`cgroup_twins_table`);
/// `twins.rs` keeps both equal to the catalogue's cgroup twins.
pub struct CgroupTwin {
    /// Under `fixtures/`.
    pub fixture: &'static str,
    /// `<scenario>/<check>`.
    pub check: &'static str,
    pub works_on: &'static [CgroupVersion],
    pub engine: &'static [CgroupVersion],
    pub fixture_trees: &'static [CgroupVersion],
    /// The unit test that proves it on `fixture_trees` (`<file>::<test>` under `scenarios/src`).
    pub tree_test: Option<&'static str>,
}

use kandev_harness::node::CgroupVersion;

pub const CGROUP_TWINS: &[CgroupTwin] = &[
    CgroupTwin {
        fixture: "templates/broken/daemon-without-limits.yaml",
        check: "cgroup::accounting/limits_finite",
        works_on: &[CgroupVersion::V1, CgroupVersion::V2],
        engine: &[CgroupVersion::V1],
        fixture_trees: &[],
        tree_test: None,
    },
    CgroupTwin {
        fixture: "templates/broken/daemon-escapes-pod-cgroup.yaml",
        check: "cgroup::accounting/charged",
        works_on: &[CgroupVersion::V1, CgroupVersion::V2],
        engine: &[CgroupVersion::V1],
        fixture_trees: &[CgroupVersion::V1, CgroupVersion::V2],
        tree_test: Some(
            "cgroup/accounting.rs::the_cgroup_twins_break_their_checks_on_v1_and_v2_trees",
        ),
    },
    CgroupTwin {
        fixture: "templates/broken/daemon-escapes-pod-pids.yaml",
        check: "cgroup::accounting/nested_inside",
        works_on: &[CgroupVersion::V1, CgroupVersion::V2],
        engine: &[CgroupVersion::V1],
        fixture_trees: &[CgroupVersion::V1, CgroupVersion::V2],
        tree_test: Some(
            "cgroup/accounting.rs::the_cgroup_twins_break_their_checks_on_v1_and_v2_trees",
        ),
    },
    CgroupTwin {
        fixture: "templates/broken/daemon-nested-data-ulimit.yaml",
        check: "cgroup::accounting/hog_killed",
        works_on: &[CgroupVersion::V1, CgroupVersion::V2],
        engine: &[CgroupVersion::V1],
        fixture_trees: &[],
        tree_test: None,
    },
    CgroupTwin {
        fixture: "templates/broken/daemon-oom-target.yaml",
        check: "cgroup::accounting/pod_unharmed",
        works_on: &[CgroupVersion::V1, CgroupVersion::V2],
        engine: &[CgroupVersion::V1],
        fixture_trees: &[],
        tree_test: None,
    },
    CgroupTwin {
        fixture: "templates/broken/daemon-escapes-pod.yaml",
        check: "lifecycle::teardown_exact/nested_vanish",
        works_on: &[CgroupVersion::V1, CgroupVersion::V2],
        engine: &[CgroupVersion::V1],
        fixture_trees: &[CgroupVersion::V1, CgroupVersion::V2],
        tree_test: Some(
            "lifecycle/teardown_exact.rs::the_teardown_twin_moves_nested_processes_out_on_v1_and_v2_trees",
        ),
    },
];

/// Whether a twin of a cgroup check is made for `version` (the twin test runs it on such a
/// node, and skips it, saying so, on others).
pub fn cgroup_twin_claims(twin: &CgroupTwin, version: CgroupVersion) -> bool {
    twin.works_on.contains(&version)
}

/// [`CGROUP_TWINS`] as a Markdown table, as `docs/catalogue.md` states it.
pub fn cgroup_twins_table() -> String {
    let versions = |v: &[CgroupVersion]| {
        if v.is_empty() {
            "none".to_owned()
        } else {
            v.iter()
                .map(|v| match v {
                    CgroupVersion::V1 => "v1",
                    CgroupVersion::V2 => "v2",
                })
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    let mut out = String::from(
        "| cgroup twin | check | made for | proven on a node | proven on recorded trees |\n| --- | --- | --- | --- | --- |\n",
    );
    for twin in CGROUP_TWINS {
        out.push_str(&format!(
            "| `fixtures/{}` | `{}` | {} | {} | {} |\n",
            twin.fixture,
            twin.check,
            versions(twin.works_on),
            versions(twin.engine),
            match twin.tree_test {
                Some(test) => format!("{} (`{test}`)", versions(twin.fixture_trees)),
                None => versions(twin.fixture_trees),
            }
        ));
    }
    out
}

/// A node recorded as files, for the cgroup twins' tests: a cgroup tree (v1: a hierarchy per
/// controller; v2: one) and a `/proc` of the processes of one Pod laid out as the local
/// backend lays them out (`/kandev-acceptance/pod<uid>/<container>`, nested containers under
/// the daemon's `docker/<id>`), with a process of the node outside it.
#[cfg(test)]
pub mod fixture_node {
    use kandev_harness::node::{CgroupFs, CgroupVersion, HostNode};
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    pub const POD_UID: &str = "0c0ffee0-1111-2222-3333-444455556666";
    pub const POD_NAME: &str = "kandev-0123456789abcdef";
    pub const NESTED_ID: &str = "9c8b7a6f5e4d";
    pub const MARKER: &str = "kandev-accounting-abc123";
    /// The v1 hierarchies the tree has (their folder names).
    const V1: [&str; 4] = ["memory", "cpu,cpuacct", "pids", "cpuset"];

    pub fn pod_path() -> String {
        format!("/kandev-acceptance/pod{POD_UID}")
    }

    /// pid, ppid, argv, HOSTNAME, cgroup path (the same in every hierarchy at first).
    fn processes() -> Vec<(u32, u32, &'static str, String, String)> {
        let pod = pod_path();
        vec![
            (
                90,
                1,
                "containerd-shim-runc-v2 -namespace moby",
                String::new(),
                "/system.slice/containerd.service".into(),
            ),
            (100, 90, "/pause", POD_NAME.into(), format!("{pod}/infra")),
            (
                101,
                90,
                "/opt/kandev/agentctl serve",
                POD_NAME.into(),
                format!("{pod}/kandev-agent"),
            ),
            (
                102,
                90,
                "dockerd --host=unix:///run/docker/docker.sock --group=1000",
                POD_NAME.into(),
                format!("{pod}/docker-engine"),
            ),
            (
                103,
                102,
                "containerd --config /var/run/docker/containerd/containerd.toml",
                POD_NAME.into(),
                format!("{pod}/docker-engine"),
            ),
            (
                104,
                102,
                "/usr/bin/containerd-shim-runc-v2 -namespace moby -id 9c8b7a6f5e4d",
                POD_NAME.into(),
                format!("{pod}/docker-engine"),
            ),
            (
                105,
                104,
                "/workload alloc 32 300 kandev-accounting-abc123",
                NESTED_ID.into(),
                format!("{pod}/docker-engine/docker/{NESTED_ID}"),
            ),
            (
                200,
                1,
                "/usr/sbin/sshd -D",
                String::new(),
                "/system.slice/ssh.service".into(),
            ),
        ]
    }

    pub struct FixtureNode {
        pub dir: tempfile::TempDir,
        pub version: CgroupVersion,
        /// Each process's path per hierarchy (v2: the key is empty).
        paths: BTreeMap<u32, BTreeMap<String, String>>,
    }

    impl FixtureNode {
        pub fn new(version: CgroupVersion) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let node = Self {
                dir,
                version,
                paths: BTreeMap::new(),
            };
            let cgroup = node.cgroup_root();
            let hierarchies: Vec<String> = match version {
                CgroupVersion::V2 => {
                    std::fs::create_dir_all(&cgroup).unwrap();
                    std::fs::write(cgroup.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
                    vec![String::new()]
                }
                CgroupVersion::V1 => V1.iter().map(|h| (*h).to_owned()).collect(),
            };
            let mut node = node;
            for (pid, ppid, argv, hostname, path) in processes() {
                for h in &hierarchies {
                    node.paths
                        .entry(pid)
                        .or_default()
                        .insert(h.clone(), path.clone());
                    let folder = cgroup.join(h).join(path.trim_start_matches('/'));
                    std::fs::create_dir_all(&folder).unwrap();
                    let procs = folder.join("cgroup.procs");
                    let mut text = std::fs::read_to_string(&procs).unwrap_or_default();
                    text.push_str(&format!("{pid}\n"));
                    std::fs::write(procs, text).unwrap();
                }
                let proc = node.proc_root().join(pid.to_string());
                std::fs::create_dir_all(&proc).unwrap();
                let command = argv.split_whitespace().next().unwrap_or_default();
                std::fs::write(
                    proc.join("stat"),
                    format!("{pid} ({command}) S {ppid} {pid} {pid} 0 -1"),
                )
                .unwrap();
                std::fs::write(proc.join("cmdline"), argv.replace(' ', "\0") + "\0").unwrap();
                let environ = if hostname.is_empty() {
                    "PATH=/usr/bin\0".to_owned()
                } else {
                    format!("PATH=/usr/bin\0HOSTNAME={hostname}\0")
                };
                std::fs::write(proc.join("environ"), environ).unwrap();
                node.write_proc_cgroup(pid);
            }
            node
        }

        pub fn cgroup_root(&self) -> PathBuf {
            self.dir.path().join("cgroup")
        }

        pub fn proc_root(&self) -> PathBuf {
            self.dir.path().join("proc")
        }

        /// `/proc/<pid>/cgroup` as the kernel writes it for the process's current paths.
        fn write_proc_cgroup(&self, pid: u32) {
            let paths = self.paths.get(&pid).cloned().unwrap_or_default();
            let text = match self.version {
                CgroupVersion::V2 => format!("0::{}\n", paths.get("").cloned().unwrap_or_default()),
                CgroupVersion::V1 => {
                    let mut lines: Vec<String> = V1
                        .iter()
                        .enumerate()
                        .map(|(i, h)| {
                            format!(
                                "{}:{h}:{}",
                                12 - i,
                                paths.get(*h).cloned().unwrap_or_default()
                            )
                        })
                        .collect();
                    lines.push("0::/".into());
                    lines.join("\n") + "\n"
                }
            };
            std::fs::write(self.proc_root().join(pid.to_string()).join("cgroup"), text).unwrap();
        }

        /// What the kernel does with a pid written into a `cgroup.procs` file: the process
        /// is in that folder (of that hierarchy) and no longer in its old one, and
        /// `/proc/<pid>/cgroup` says so. A pid listed where the process is not is a move.
        pub fn apply_moves(&mut self) {
            let root = self.cgroup_root();
            let hierarchies: Vec<String> = match self.version {
                CgroupVersion::V2 => vec![String::new()],
                CgroupVersion::V1 => V1.iter().map(|h| (*h).to_owned()).collect(),
            };
            let mut moves = Vec::new();
            for h in hierarchies {
                let base = root.join(&h);
                let mut stack = vec![base.clone()];
                while let Some(dir) = stack.pop() {
                    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                        if entry.path().is_dir() {
                            stack.push(entry.path());
                        }
                    }
                    let procs =
                        std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                    let relative = format!("/{}", dir.strip_prefix(&base).unwrap().display());
                    for pid in procs
                        .split_whitespace()
                        .filter_map(|p| p.parse::<u32>().ok())
                    {
                        let current = self.paths.get(&pid).and_then(|p| p.get(&h));
                        if current.is_some_and(|c| *c != relative) {
                            moves.push((pid, h.clone(), relative.clone()));
                        }
                    }
                }
            }
            for (pid, h, to) in moves {
                if let Some(from) = self
                    .paths
                    .get_mut(&pid)
                    .and_then(|p| p.insert(h.clone(), to))
                {
                    let old = root
                        .join(&h)
                        .join(from.trim_start_matches('/'))
                        .join("cgroup.procs");
                    let kept: String = std::fs::read_to_string(&old)
                        .unwrap_or_default()
                        .split_whitespace()
                        .filter(|p| *p != pid.to_string())
                        .map(|p| format!("{p}\n"))
                        .collect();
                    std::fs::write(old, kept).unwrap();
                }
                self.write_proc_cgroup(pid);
            }
        }

        /// The harness's node view of it.
        pub fn view(&self) -> HostNode {
            HostNode {
                cgroups: CgroupFs::at(&self.cgroup_root()).unwrap(),
                proc_root: self.proc_root(),
                scope: "kandev-acceptance".into(),
                description: format!("fixture node ({:?})", self.version),
                settle: std::time::Duration::from_secs(0),
                ledger: kandev_harness::node::LedgerFolders::HostButScope,
            }
        }
    }

    /// The escape step of a twin fixture: the lines between `# escape:begin` and
    /// `# escape:end`, its YAML block's indentation removed.
    pub fn escape_step(fixture: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures")
            .join(fixture);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text
            .lines()
            .skip_while(|l| l.trim() != "# escape:begin")
            .take_while(|l| l.trim() != "# escape:end")
            .collect();
        assert!(!lines.is_empty(), "{} has no escape step", path.display());
        let indent = lines[0].len() - lines[0].trim_start().len();
        lines
            .iter()
            .map(|l| l.get(indent..).unwrap_or_else(|| l.trim_start()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Runs `call` after the fixture's escape step, through `sh`, with the node's cgroup root
    /// as `KANDEV_NODE_CGROUP` and no namespace to enter (the tree is plain files).
    pub fn run_escape(fixture: &str, call: &str, node: &FixtureNode) {
        let script = format!("{}\n{call}", escape_step(fixture));
        let out = std::process::Command::new("sh")
            .args(["-c", &script])
            .env("KANDEV_NODE_CGROUP", node.cgroup_root())
            .env("KANDEV_ENTER_NODE_CGROUPNS", "env")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{fixture}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
