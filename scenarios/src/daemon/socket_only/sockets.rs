//! The sockets `daemon::socket_only` enumerates, read from the kernel's own tables: every
//! socket of every family (`/proc/net/{tcp,tcp6,udp,udp6,unix}`) in the Pod's network
//! namespace, and every socket the daemon process holds (its `/proc/<pid>/fd` links to
//! socket inodes, looked up in its own network namespace's tables), with its configured
//! hosts (`-H`/`--host` in any spelling, `daemon.json`'s `hosts`).
//!
//! Each listing carries its positive control, so that an empty or failed read never reads as
//! "nothing listens": the loopback control port in the Pod's listing, the daemon's own
//! socket among the unix listeners it holds.

use crate::support::docker_ping::{ANSWERED, PING_FUNCTION, Ping, UNIX_PING_FUNCTION, ping_answer};
use std::collections::{BTreeMap, BTreeSet};

/// The socket tables read, in the order the probes print them.
pub const FAMILIES: [&str; 5] = ["tcp", "tcp6", "udp", "udp6", "unix"];
/// The families a kernel without IPv6 (`ipv6.disable=1`) has no table for: absent, no socket
/// of them can exist.
const IPV6_FAMILIES: [&str; 2] = ["tcp6", "udp6"];
/// The daemon's own socket: the one place it may answer.
pub const DAEMON_SOCKET: &str = "/run/docker/docker.sock";

/// One socket of a kernel table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Socket {
    /// `tcp`, `tcp6`, `udp`, `udp6` or `unix`.
    pub family: String,
    /// `addr:port` (IPv6 as `[addr]:port`); for unix the path (`@name` when abstract, empty
    /// when unnamed).
    pub local: String,
    pub inode: u64,
    /// A listener: TCP `LISTEN`, an unconnected bound UDP socket, a unix socket accepting
    /// connections.
    pub listening: bool,
}

impl Socket {
    /// As the diagnosis names it: `tcp 0.0.0.0:2375`, `unix /run/docker/docker.sock`.
    pub fn describe(&self) -> String {
        format!("{} {}", self.family, self.local)
    }
}

/// `addr:port` of a `/proc/net/tcp{,6}`/`udp{,6}` local address (hex, host byte order
/// words).
fn inet_address(hex: &str) -> Option<String> {
    let (addr, port) = hex.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    match addr.len() {
        8 => {
            let word = u32::from_str_radix(addr, 16).ok()?;
            Some(format!(
                "{}:{port}",
                std::net::Ipv4Addr::from(word.swap_bytes())
            ))
        }
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_mut(4).enumerate() {
                let word = u32::from_str_radix(addr.get(i * 8..i * 8 + 8)?, 16).ok()?;
                chunk.copy_from_slice(&word.swap_bytes().to_be_bytes());
            }
            Some(format!("[{}]:{port}", std::net::Ipv6Addr::from(bytes)))
        }
        _ => None,
    }
}

/// The sockets of one kernel table's text (its header line skipped).
pub fn parse_table(family: &str, text: &str) -> Vec<Socket> {
    let mut out = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if family == "unix" {
            // Num RefCount Protocol Flags Type St Inode [Path]
            let (Some(flags), Some(inode)) = (fields.get(3), fields.get(6)) else {
                continue;
            };
            let (Ok(flags), Ok(inode)) = (u32::from_str_radix(flags, 16), inode.parse::<u64>())
            else {
                continue;
            };
            out.push(Socket {
                family: family.to_owned(),
                local: fields.get(7).map(|p| (*p).to_owned()).unwrap_or_default(),
                inode,
                // __SO_ACCEPTCON: the socket listens.
                listening: flags & 0x0001_0000 != 0,
            });
        } else {
            // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let (Some(local), Ok(inode)) = (inet_address(local), inode.parse::<u64>()) else {
                continue;
            };
            let listening = match family {
                // TCP_LISTEN
                "tcp" | "tcp6" => *state == "0A",
                // TCP_CLOSE on a UDP socket: bound, unconnected, receiving from anyone.
                _ => *state == "07",
            };
            out.push(Socket {
                family: family.to_owned(),
                local,
                inode,
                listening,
            });
        }
    }
    out
}

/// The script that prints every socket table of the network namespace it runs in: a
/// section per family (`== <family>`), then the table, or `!! absent <family>` (no such
/// table) or `!! failed <family>`; `== end` when all were read.
pub fn netns_probe(proc_net: &str) -> String {
    format!(
        "for f in {}; do echo \"== $f\"; if [ ! -e {proc_net}/$f ]; then echo \"!! absent $f\"; elif ! cat {proc_net}/$f; then echo \"!! failed $f\"; fi; done; echo '== end'",
        FAMILIES.join(" ")
    )
}

/// A network namespace's socket tables as [`netns_probe`] printed them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Tables {
    pub sockets: Vec<Socket>,
    /// Families whose table was read.
    pub read: BTreeSet<String>,
    /// Families without a table (a kernel without IPv6).
    pub absent: BTreeSet<String>,
    /// Families whose table could not be read.
    pub failed: BTreeSet<String>,
    /// The probe reached its end.
    pub complete: bool,
}

impl Tables {
    pub fn parse(text: &str) -> Self {
        let mut tables = Tables::default();
        let mut family: Option<String> = None;
        let mut body: BTreeMap<String, String> = BTreeMap::new();
        for line in text.lines() {
            if let Some(name) = line.strip_prefix("== ") {
                let name = name.trim();
                if name == "end" {
                    tables.complete = true;
                    family = None;
                } else if FAMILIES.contains(&name) {
                    family = Some(name.to_owned());
                    body.entry(name.to_owned()).or_default();
                } else {
                    family = None;
                }
                continue;
            }
            if let Some(rest) = line.strip_prefix("!! ") {
                let mut words = rest.split_whitespace();
                match (words.next(), words.next()) {
                    (Some("absent"), Some(f)) => {
                        tables.absent.insert(f.to_owned());
                    }
                    (Some(_), Some(f)) => {
                        tables.failed.insert(f.to_owned());
                    }
                    _ => {}
                }
                continue;
            }
            if let Some(f) = &family {
                let text = body.entry(f.clone()).or_default();
                text.push_str(line);
                text.push('\n');
            }
        }
        for (f, text) in body {
            if tables.absent.contains(&f) || tables.failed.contains(&f) {
                continue;
            }
            tables.sockets.extend(parse_table(&f, &text));
            tables.read.insert(f);
        }
        tables
    }

    /// What keeps these tables from being the whole evidence: a table that failed or is
    /// missing (only the IPv6 ones may be absent), a probe that did not reach its end.
    pub fn incomplete(&self) -> Vec<String> {
        let mut wrong = Vec::new();
        if !self.complete {
            wrong.push("the socket listing did not reach its end".to_owned());
        }
        for f in FAMILIES {
            if self.failed.contains(f) {
                wrong.push(format!("/proc/net/{f} could not be read"));
            } else if self.absent.contains(f) && !IPV6_FAMILIES.contains(&f) {
                wrong.push(format!("/proc/net/{f} is missing"));
            } else if !self.read.contains(f) && !self.absent.contains(f) {
                wrong.push(format!("/proc/net/{f} was not listed"));
            }
        }
        wrong
    }

    pub fn listeners(&self) -> impl Iterator<Item = &Socket> {
        self.sockets.iter().filter(|s| s.listening)
    }
}

/// The folders every daemon's view is searched in whatever its mounts: the workspace and the
/// socket folder, the two the recipe shares between the agent and the companion (and the
/// workspace also with every container the daemon starts with it bound). The mounts the
/// daemon's namespace shares with the agent's are added to them ([`shared_paths`]).
pub const SHARED_ROOTS: [&str; 2] = ["/workspace", "/run/docker"];

/// The agent's view is searched whole: every socket file it can see is one it could reach,
/// whichever volume (a folder it shares with the companion, a host path it shares with
/// another session's Pod) put it there.
pub const AGENT_ROOTS: [&str; 1] = ["/"];

/// `path` quoted for sh.
fn sh_quote(path: &str) -> String {
    format!("'{}'", path.replace('\'', r"'\''"))
}

/// The shell function `ask_unix SOCKET FAILED` both unix probes share: `docker -H unix://SOCKET
/// version` (5 s), printing `api SOCKET` when it succeeds; on an HTTP error back ([`ANSWERED`]:
/// a daemon refusing this client, or any web server's 404) `answered SOCKET`, then `| #cli`
/// the CLI's error line, `| > ` each line a raw `/_ping` printed ([`UNIX_PING_FUNCTION`]) and
/// `| #exit N`, which [`ping_answer`] judges; FAILED when no connection was made (the
/// abstract probe's `unasked`: the name the table shows is not the socket's), else `other`.
fn ask_unix_function() -> String {
    UNIX_PING_FUNCTION.to_owned()
        + r#"ask_unix() {
  out=$(timeout 5 docker -H "unix://$1" version --format '{{.Server.Version}}' 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo "api $1"
  elif printf '%s' "$out" | grep -q '"#
        + ANSWERED
        + r#"'; then
    echo "answered $1"; printf '%s\n' "$out" | grep '"#
        + ANSWERED
        + r#"' | sed 's/^/| #cli /'
    ping=$(docker_ping_unix "$1" 2>&1); rc=$?
    printf '%s\n' "$ping" | sed 's/^/| > /'; echo "| #exit $rc"
  elif printf '%s' "$out" | grep -q -e 'Failed to initialize' -e 'Cannot connect to the Docker daemon' -e 'connection refused' -e 'no such file or directory'; then echo "$2 $1"
  else echo "other $1"; fi
}
"#
}

/// The script that finds every socket file under `roots` (`/proc` and `/sys` left out: no
/// socket file lives there) and asks each whether a Docker API answers there
/// ([`ask_unix_function`]: `api PATH`, `answered PATH` with its `/_ping`, or `other PATH` a
/// line), then `== end`. What the walk cannot read (a nested container's private folder) is
/// not judged by its exit status: the private socket found answering is the probe's control.
pub fn socket_files_probe(roots: &[String]) -> String {
    let roots: Vec<String> = roots.iter().map(|r| sh_quote(r)).collect();
    // The functions reach `find`'s shells as one argument, whatever quotes they hold.
    format!(
        "ASK=$(cat <<'KANDEV_ASK'\n{}KANDEV_ASK\n)\nfind {} \\( -path /proc -o -path /sys \\) -prune -o -type s -exec sh -c \"$ASK\nfor s; do ask_unix \\\"\\$s\\\" other; done\" sh {{}} + 2>/dev/null\necho \"== end\"\n",
        ask_unix_function(),
        roots.join(" ")
    )
}

/// The script that asks every listening abstract unix socket of the network namespace it
/// runs in whether a Docker API answers there ([`ask_unix_function`]): `api @NAME`,
/// `answered @NAME` with its `/_ping`, `other @NAME` (something else answered, or nothing
/// within 5 s) or `unasked @NAME` (no connection was made: the name as the table shows it is
/// not the socket's, as when it holds a NUL byte, or the CLI cannot take it, as a name with a
/// space) a line, then `== abstract end` once the table was read (its header seen: the read's
/// control). An abstract socket has no file, no mode and no mount to hide it: every process
/// of the network namespace may connect (`/proc/net/unix` lists the namespace's; flags
/// `00010000` a listener; the path, spaces and all, is what follows the inode; the kernel
/// shows an abstract name as `@` and its NUL bytes as `@`). Run by the agent, it asks what the
/// agent reaches in the Pod's namespace.
pub fn abstract_sockets_probe() -> String {
    ask_unix_function()
        + r#"if names=$(awk 'NR == 1 { head = ($1 == "Num" && $8 == "Path") } NR > 1 && $4 == "00010000" { p = $0; sub(/^ *[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ +[^ ]+ /, "", p); if (substr(p, 1, 1) == "@") print substr(p, 2) } END { exit head ? 0 : 1 }' /proc/net/unix); then
  printf '%s\n' "$names" | while IFS= read -r n; do
    [ -n "$n" ] || continue
    ask_unix "@$n" unasked
  done
  echo "== abstract end"
fi
"#
}

/// What [`ask_unix_function`] found of each unix socket in `text`, judged in `view`: a Docker
/// API that answered the CLI (`api`, unless it is `except`, the private socket), or refused it
/// while its `/_ping` shows one, is wrong ([`ANSWERS_ELSEWHERE`]); one whose `/_ping` could not
/// be read is no evidence, said so (not a finding: [`found_and_unseen`]).
fn judge_unix_answers(view: &str, what: &str, text: &str, except: Option<&str>) -> Vec<String> {
    answers(text)
        .into_iter()
        .filter(|a| Some(a.rest) != except)
        .filter_map(|a| match (a.word, a.ping) {
            ("api", _) => Some(format!("{view}: {ANSWERS_ELSEWHERE}{what}{}", a.rest)),
            (_, Some(Ping::DockerApi(sign))) => Some(format!(
                "{view}: {ANSWERS_ELSEWHERE}{what}{} ({sign}), refusing the Docker CLI",
                a.rest
            )),
            (_, Some(Ping::Unanswered(why))) => Some(format!(
                "{view}: {what}{} answers the Docker CLI with an HTTP error, and its /_ping gave no answer to judge: {why}",
                a.rest
            )),
            _ => None,
        })
        .collect()
}

/// What [`abstract_sockets_probe`] printed, judged: nothing may answer as a Docker API, and
/// the table must have been read and every listener asked (else that one is no evidence).
/// Returns what is wrong, worded as [`judge_socket_files`] words it ([`found_and_unseen`]
/// splits them).
pub fn judge_abstract_sockets(text: &str) -> Vec<String> {
    const VIEW: &str = "the Pod's network namespace";
    if !text.lines().any(|l| l.trim() == "== abstract end") {
        return vec![format!(
            "{VIEW}: its unix socket table (/proc/net/unix) was not read, so no abstract socket was asked"
        )];
    }
    let mut wrong = judge_unix_answers(VIEW, "the abstract unix socket ", text, None);
    wrong.extend(text.lines().filter_map(|l| {
        l.strip_prefix("unasked ").map(|name| {
            format!("{VIEW}: the abstract unix socket {name} could not be asked (no connection made to the name the table shows)")
        })
    }));
    wrong
}

/// `roots` without any that lies under another (each socket file found once).
pub fn outermost(roots: impl IntoIterator<Item = String>) -> Vec<String> {
    let roots: BTreeSet<String> = roots.into_iter().collect();
    let under = |inner: &str, outer: &str| {
        inner != outer
            && (outer == "/"
                || inner
                    .strip_prefix(outer)
                    .is_some_and(|rest| rest.starts_with('/')))
    };
    roots
        .iter()
        .filter(|r| !roots.iter().any(|o| under(r, o)))
        .cloned()
        .collect()
}

/// One line of `/proc/<pid>/mountinfo`: the filesystem (`major:minor`), the folder of it
/// mounted (`root`), where (`point`), and its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub device: String,
    pub root: String,
    pub point: String,
    pub fstype: String,
}

/// A mountinfo path with the kernel's octal escapes (`\040` for a space) undone.
fn unescape_mount_path(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mounts of a `/proc/<pid>/mountinfo` text.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (head, tail) = line.split_once(" - ")?;
            let fields: Vec<&str> = head.split_whitespace().collect();
            Some(Mount {
                device: (*fields.get(2)?).to_owned(),
                root: unescape_mount_path(fields.get(3)?),
                point: unescape_mount_path(fields.get(4)?),
                fstype: tail.split_whitespace().next()?.to_owned(),
            })
        })
        .collect()
}

/// Kernel filesystems no socket file can be created on, and which every container mounts
/// afresh: not sharing.
const NO_SOCKET_FILESYSTEMS: [&str; 13] = [
    "proc",
    "sysfs",
    "cgroup",
    "cgroup2",
    "devpts",
    "mqueue",
    "securityfs",
    "debugfs",
    "tracefs",
    "bpf",
    "pstore",
    "configfs",
    "fusectl",
];

/// Where, in the daemon's mount namespace, it sees a folder the agent sees too: a mount of
/// the same filesystem (`major:minor`) whose folder overlaps one the agent has mounted (the
/// same volume, host path or subtree of either), as the daemon's path of the overlap. What
/// the two share, enumerated from their own mount tables rather than from the recipe's
/// volume names.
pub fn shared_paths(agent: &[Mount], daemon: &[Mount]) -> BTreeSet<String> {
    let within = |inner: &str, outer: &str| {
        outer == "/"
            || inner == outer
            || inner
                .strip_prefix(outer)
                .is_some_and(|rest| rest.starts_with('/'))
    };
    let mut paths = BTreeSet::new();
    for d in daemon
        .iter()
        .filter(|m| !NO_SOCKET_FILESYSTEMS.contains(&m.fstype.as_str()))
    {
        for a in agent.iter().filter(|a| a.device == d.device) {
            if within(&d.root, &a.root) {
                paths.insert(d.point.clone());
            } else if within(&a.root, &d.root) {
                let rest = a.root[d.root.len()..].trim_start_matches('/');
                let point = d.point.trim_end_matches('/');
                paths.insert(if rest.is_empty() {
                    d.point.clone()
                } else {
                    format!("{point}/{rest}")
                });
            }
        }
    }
    paths
}

/// What the per-daemon searches printed, judged: each daemon's view as
/// [`judge_socket_files`] judges one (a `=== dockerd PID` section each, `=== all` at the end),
/// and at least one daemon found. Returns what is wrong.
pub fn judge_daemon_socket_files(text: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    if !text.lines().any(|l| l.trim() == "=== all") {
        wrong.push("the daemons' socket search did not reach its end".to_owned());
    }
    let mut daemons = 0;
    for section in text.split("=== dockerd ").skip(1) {
        daemons += 1;
        let (pid, body) = section.split_once('\n').unwrap_or((section, ""));
        wrong.extend(judge_socket_files(
            &format!("daemon {}'s mount namespace", pid.trim()),
            body,
        ));
    }
    if daemons == 0 {
        wrong.push("no daemon process was found to search its view".to_owned());
    }
    wrong
}

/// What [`socket_files_probe`] printed in `view` (`the agent's view`, ...), judged: the
/// private socket must be found answering, and nothing else may answer. Returns what is wrong.
pub fn judge_socket_files(view: &str, text: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    if !text.lines().any(|l| l.trim() == "== end") {
        wrong.push(format!("{view}: the socket search did not reach its end"));
    }
    let answering: BTreeSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("api "))
        .collect();
    if !answering.contains(DAEMON_SOCKET) {
        wrong.push(format!(
            "{view}: the private socket {DAEMON_SOCKET} was not found answering, so the search is no evidence that no other socket does"
        ));
    }
    wrong.extend(judge_unix_answers(view, "", text, Some(DAEMON_SOCKET)));
    wrong
}

/// How [`judge_socket_files`] names a socket file other than the private one that answers.
const ANSWERS_ELSEWHERE: &str = "a Docker API answers on ";

/// What the socket searches' judgements said, split: a Docker API found answering elsewhere
/// (the break, seen), and what kept a search from being evidence (its control unseen, cut
/// short, no daemon or mount table to search by): with nothing found, those leave the check
/// not judged, never passed.
pub fn found_and_unseen(wrong: Vec<String>) -> (Vec<String>, Vec<String>) {
    wrong
        .into_iter()
        .partition(|w| w.contains(&format!(": {ANSWERS_ELSEWHERE}")))
}

/// Every port a TCP socket of `tables` listens on (IPv4 and IPv6, any address): what another
/// Pod could try, enumerated from the Pod's own tables rather than a list of known ports.
pub fn tcp_listening_ports(tables: &Tables) -> BTreeSet<u16> {
    tables
        .listeners()
        .filter(|s| s.family == "tcp" || s.family == "tcp6")
        .filter_map(|s| s.local.rsplit_once(':')?.1.parse().ok())
        .collect()
}

/// What the Pod's network namespace shows, judged: every TCP and UDP listener must be the
/// loopback control port `control` (`127.0.0.1:8765`), which must be there (the listing's
/// positive control), or the backend's plumbing (one listener per protocol at each of
/// `plumbing`'s addresses). Returns what is wrong (empty: the promise holds).
pub fn judge_pod_listeners(tables: &Tables, control: &str, plumbing: &[String]) -> Vec<String> {
    let mut wrong = tables.incomplete();
    let control_seen = tables
        .listeners()
        .any(|s| s.family == "tcp" && s.local == control);
    if !control_seen {
        wrong.push(format!(
            "the listing does not show the control port {control} listening: it is no evidence that nothing else listens"
        ));
    }
    let mut excused: BTreeSet<(String, String)> = BTreeSet::new();
    for socket in tables.listeners().filter(|s| s.family != "unix") {
        if socket.family == "tcp" && socket.local == control {
            continue;
        }
        let address = socket
            .local
            .rsplit_once(':')
            .map(|(a, _)| a)
            .unwrap_or_default();
        let protocol = socket.family.trim_end_matches('6').to_owned();
        // The resolver holds one listener per protocol there; a second (a Pod process
        // binding the same address) is the Pod's own and counts.
        if plumbing.iter().any(|p| p == address) && excused.insert((protocol, address.to_owned())) {
            continue;
        }
        wrong.push(format!("listening: {}", socket.describe()));
    }
    wrong
}

/// The script the daemon's container runs: for every process (not only those named
/// `dockerd`: a renamed daemon binary is a daemon all the same), its argv (a line each), its
/// `comm`, the socket inodes its descriptors hold, and, for one that holds any or is named
/// `dockerd`, its network namespace's tables; then `=== end`.
pub fn daemon_probe() -> String {
    format!(
        r#"for p in /proc/[0-9]*; do
  pid=${{p#/proc/}}
  comm=$(cat $p/comm 2>/dev/null) || continue
  socks=$(for fd in $p/fd/*; do readlink "$fd"; done 2>/dev/null | grep '^socket:')
  echo "=== process $pid"
  tr '\0' '\n' < $p/cmdline
  echo "=== comm $pid"
  echo "$comm"
  echo "=== fds $pid"
  [ -z "$socks" ] || echo "$socks"
  echo "=== tables $pid"
  if [ -n "$socks" ] || [ "$comm" = dockerd ]; then
  {}
  fi
done
echo "=== end""#,
        netns_probe("$p/net")
    )
}

/// One process of the daemon's container as [`daemon_probe`] showed it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DaemonProcess {
    pub pid: u32,
    /// Its `comm` (the executable's name, as renamed).
    pub comm: String,
    pub argv: Vec<String>,
    /// The socket inodes its descriptors hold.
    pub inodes: BTreeSet<u64>,
    /// Its network namespace's tables (empty for a process that holds no socket).
    pub tables: Tables,
}

impl DaemonProcess {
    /// A Docker daemon, whatever its executable is called: one that holds the listening
    /// private socket (a renamed `dockerd` does), or one named `dockerd`.
    pub fn is_daemon(&self) -> bool {
        self.comm == "dockerd"
            || self
                .held()
                .iter()
                .any(|s| s.family == "unix" && s.listening && s.local == DAEMON_SOCKET)
    }

    /// As a diagnosis names it: `daemon 7 (dockerd)`.
    pub fn describe(&self) -> String {
        format!("daemon {} ({})", self.pid, self.comm)
    }

    /// The sockets it holds, as its network namespace lists them.
    pub fn held(&self) -> Vec<&Socket> {
        self.tables
            .sockets
            .iter()
            .filter(|s| self.inodes.contains(&s.inode))
            .collect()
    }

    /// The hosts its command line configures (`-H X`, `-HX`, `-H=X`, `--host X`,
    /// `--host=X`), and the config file it reads (`--config-file`, default
    /// `/etc/docker/daemon.json`).
    pub fn configured(&self) -> (Vec<String>, String) {
        let mut hosts = Vec::new();
        let mut config = "/etc/docker/daemon.json".to_owned();
        let mut args = self.argv.iter().skip(1);
        while let Some(arg) = args.next() {
            let value = |inline: Option<&str>, args: &mut dyn Iterator<Item = &String>| {
                inline
                    .map(str::to_owned)
                    .or_else(|| args.next().cloned())
                    .unwrap_or_default()
            };
            if arg == "-H" || arg == "--host" {
                hosts.push(value(None, &mut args));
            } else if let Some(v) = arg.strip_prefix("--host=") {
                hosts.push(v.to_owned());
            } else if let Some(v) = arg.strip_prefix("-H") {
                hosts.push(v.strip_prefix('=').unwrap_or(v).to_owned());
            } else if arg == "--config-file" {
                config = value(None, &mut args);
            } else if let Some(v) = arg.strip_prefix("--config-file=") {
                config = v.to_owned();
            }
        }
        (hosts, config)
    }
}

/// The daemon processes [`daemon_probe`] printed ([`DaemonProcess::is_daemon`]), and whether it
/// reached its end.
#[cfg(test)]
pub fn parse_daemons(text: &str) -> (Vec<DaemonProcess>, bool) {
    let (processes, complete) = parse_processes(text);
    (
        processes
            .into_iter()
            .filter(DaemonProcess::is_daemon)
            .collect(),
        complete,
    )
}

/// Every process [`daemon_probe`] printed, and whether it reached its end.
pub fn parse_processes(text: &str) -> (Vec<DaemonProcess>, bool) {
    let mut daemons: Vec<DaemonProcess> = Vec::new();
    let mut section = "";
    let mut tables = String::new();
    let mut complete = false;
    let finish_tables = |daemons: &mut Vec<DaemonProcess>, tables: &mut String| {
        if let Some(last) = daemons.last_mut()
            && !tables.is_empty()
        {
            last.tables = Tables::parse(tables);
        }
        tables.clear();
    };
    for line in text.lines() {
        if let Some(head) = line.strip_prefix("=== ") {
            let mut words = head.split_whitespace();
            match (
                words.next(),
                words.next().and_then(|p| p.parse::<u32>().ok()),
            ) {
                (Some("process"), Some(pid)) => {
                    finish_tables(&mut daemons, &mut tables);
                    daemons.push(DaemonProcess {
                        pid,
                        ..Default::default()
                    });
                    section = "argv";
                }
                (Some("comm"), Some(_)) => section = "comm",
                (Some("fds"), Some(_)) => section = "fds",
                (Some("tables"), Some(_)) => section = "tables",
                (Some("end"), _) => {
                    finish_tables(&mut daemons, &mut tables);
                    complete = true;
                    section = "";
                }
                _ => section = "",
            }
            continue;
        }
        let Some(daemon) = daemons.last_mut() else {
            continue;
        };
        match section {
            "argv" if !line.is_empty() => daemon.argv.push(line.to_owned()),
            "comm" if daemon.comm.is_empty() => daemon.comm = line.trim().to_owned(),
            "fds" => {
                if let Some(inode) = line
                    .trim()
                    .strip_prefix("socket:[")
                    .and_then(|r| r.strip_suffix(']'))
                    .and_then(|i| i.parse().ok())
                {
                    daemon.inodes.insert(inode);
                }
            }
            "tables" => {
                tables.push_str(line);
                tables.push('\n');
            }
            _ => {}
        }
    }
    if !complete {
        finish_tables(&mut daemons, &mut tables);
    }
    (daemons, complete)
}

/// The `hosts` of a `daemon.json` text (none when it names none); an error when it is not
/// JSON (dockerd would refuse to start, so the text is not what it runs with).
pub fn config_hosts(text: &str) -> Result<Vec<String>, String> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    Ok(match value.get("hosts") {
        Some(serde_json::Value::Array(hosts)) => hosts
            .iter()
            .map(|h| h.as_str().map_or_else(|| h.to_string(), str::to_owned))
            .collect(),
        Some(serde_json::Value::String(host)) => vec![host.clone()],
        Some(other) => vec![other.to_string()],
        None => Vec::new(),
    })
}

/// A configured host that is not the daemon's own socket: `tcp://`, `fd://` (sockets a
/// service manager passes in), a bare `host:port` or `:port` (dockerd reads it as TCP), a
/// unix socket elsewhere.
pub fn foreign_host(host: &str) -> bool {
    host.trim() != format!("unix://{DAEMON_SOCKET}")
}

/// Judges the daemon processes: at least one was seen, whole; each holds its own socket
/// [`DAEMON_SOCKET`] among its unix listeners (the positive control); none holds a TCP or
/// UDP socket or an abstract unix listener (reachable from the Pod's network namespace); no
/// host configured on its command line or in its config file (`config_hosts`, by pid) is
/// other than its own socket. Returns what is wrong.
pub fn judge_daemons(
    daemons: &[DaemonProcess],
    complete: bool,
    config_hosts: &BTreeMap<u32, Result<Vec<String>, String>>,
) -> Vec<String> {
    let mut wrong = Vec::new();
    if !complete {
        wrong.push("the daemon's socket listing did not reach its end".to_owned());
    }
    if daemons.is_empty() {
        wrong.push(format!("no daemon process (named dockerd, or holding {DAEMON_SOCKET} whatever its name) in the daemon's container"));
    }
    for daemon in daemons {
        let pid = daemon.pid;
        let name = daemon.describe();
        wrong.extend(
            daemon
                .tables
                .incomplete()
                .into_iter()
                .map(|w| format!("{name}: {w}")),
        );
        let held = daemon.held();
        if !held
            .iter()
            .any(|s| s.family == "unix" && s.listening && s.local == DAEMON_SOCKET)
        {
            wrong.push(format!(
                "{name}: its own socket {DAEMON_SOCKET} is not among the unix listeners it holds: the listing is no evidence of what else it holds"
            ));
        }
        for socket in &held {
            match socket.family.as_str() {
                "unix" if socket.listening && socket.local.starts_with('@') => wrong.push(format!(
                    "{name} listens on the abstract unix socket {}",
                    socket.local
                )),
                "unix" => {}
                _ => wrong.push(format!("{name} holds {}", socket.describe())),
            }
        }
        let (hosts, config) = daemon.configured();
        for host in hosts.iter().filter(|h| foreign_host(h)) {
            wrong.push(format!("{name} is configured with the host {host:?}"));
        }
        match config_hosts.get(&pid) {
            Some(Ok(hosts)) => {
                for host in hosts.iter().filter(|h| foreign_host(h)) {
                    wrong.push(format!("{name}: {config} names the host {host:?}"));
                }
            }
            Some(Err(why)) => wrong.push(format!("{name}: {config}: {why}")),
            None => wrong.push(format!("{name}: {config} was not read")),
        }
    }
    wrong
}

/// A TCP listener a process of the daemon's container holds, to ask in that process's own
/// network namespace whether it is a Docker API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldListener {
    pub pid: u32,
    pub comm: String,
    /// As its table lists it: `0.0.0.0:2375`, `[::]:2375`.
    pub local: String,
}

impl HeldListener {
    /// The addresses a client in the same namespace connects to, in turn: the wildcard as
    /// loopback; the IPv6 wildcard as IPv4 loopback first (a dual-stack listener, as
    /// dockerd's `tcp://0.0.0.0:P` is, takes it, and a container's IPv6 loopback is often
    /// disabled), then IPv6's.
    pub fn dials(&self) -> Vec<String> {
        let (addr, port) = self.local.rsplit_once(':').unwrap_or((&self.local, ""));
        match addr {
            "0.0.0.0" => vec![format!("127.0.0.1:{port}")],
            "[::]" => vec![format!("127.0.0.1:{port}"), format!("[::1]:{port}")],
            other => vec![format!("{other}:{port}")],
        }
    }

    /// The shell line that asks it through `ask`, each command run after `prefix` (`timeout
    /// 5` or `nsenter -t PID -n timeout 5`), address after address until one answers, and
    /// prints `ANSWER tail`, then (for `answered`) what followed, each line after `| `.
    fn ask_line(&self, prefix: &str, tail: &str) -> String {
        let hosts: Vec<String> = self
            .dials()
            .iter()
            .map(|d| sh_quote(&format!("tcp://{d}")))
            .collect();
        // The kernel table's address in `tail`: digits, dots, colons and brackets only (see
        // `inet_address`), safe inside the double quotes.
        format!(
            "a=other; for h in {}; do a=$(ask '{prefix}' \"$h\"); [ \"$a\" = other ] || break; done; printf '%s\\n' \"$a\" | sed '1s/$/ {tail}/; 1!s/^/| /'\n",
            hosts.join(" ")
        )
    }
}

/// Every TCP listener any process of `processes` holds (each socket once): whatever process
/// holds it, a listener may serve a Docker API (a renamed daemon, a proxy).
pub fn held_tcp_listeners(processes: &[DaemonProcess]) -> Vec<HeldListener> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for process in processes {
        for socket in process.held() {
            if socket.listening
                && (socket.family == "tcp" || socket.family == "tcp6")
                && seen.insert(socket.inode)
            {
                out.push(HeldListener {
                    pid: process.pid,
                    comm: process.comm.clone(),
                    local: socket.local.clone(),
                });
            }
        }
    }
    out
}

/// The shell functions both probes below share: `ask PREFIX HOST` runs the Docker CLI's
/// `docker -H HOST version` (5 s) after PREFIX (word-split) and prints `api` when it
/// succeeds, `unasked` when `nsenter` failed, `other` when nothing HTTP answered; on an HTTP
/// error back ([`ANSWERED`]: a daemon refusing this client, or any web server's 404) it
/// prints `answered`, then the CLI's error line (`#cli ...`), what a raw `/_ping`
/// ([`PING_FUNCTION`]) printed (each line after `> `, so that no body line reads as ours),
/// and `#exit N`: [`ping_answer`] judges them.
fn ask_functions() -> String {
    format!(
        r##"{PING_FUNCTION}ask() {{
  out=$($1 docker -H "$2" version --format '{{{{.Server.Version}}}}' 2>&1); rc=$?
  if [ $rc -eq 0 ]; then echo api
  elif printf '%s' "$out" | grep -q '^nsenter:'; then echo unasked
  elif printf '%s' "$out" | grep -q '{ANSWERED}'; then
    echo answered; printf '%s\n' "$out" | grep '{ANSWERED}' | sed 's/^/#cli /'
    hp=${{2#tcp://}}; ping=$(docker_ping "$1" "${{hp%:*}}" "${{hp##*:}}" 2>&1); rc=$?
    printf '%s\n' "$ping" | sed 's/^/> /'; echo "#exit $rc"
  else echo other; fi
}}
"##
    )
}

/// The script that asks, in the daemon's container, the private socket (the control: the
/// CLI and `nsenter` work there) and then each of `listeners` in its holder's network
/// namespace (`nsenter -n`), whether a Docker API answers ([`ask_functions`]): `control
/// ANSWER`, then `ANSWER PID ADDR` a line; then `== end`.
pub fn ask_listeners_probe(listeners: &[HeldListener]) -> String {
    let mut script = ask_functions();
    script.push_str(
        "echo \"control $(ask \"nsenter -t $$ -n timeout 5\" unix:///run/docker/docker.sock | head -n 1)\"\n",
    );
    for l in listeners {
        script.push_str(&l.ask_line(
            &format!("nsenter -t {} -n timeout 5", l.pid),
            &format!("{} {}", l.pid, l.local),
        ));
    }
    script.push_str("echo '== end'\n");
    script
}

/// The script that asks, from where it runs, each of `locals` (TCP addresses as the kernel
/// table lists them) whether a Docker API answers ([`ask_functions`]): `ANSWER ADDR` a line;
/// then `== end`.
pub fn ask_addresses_probe(locals: &[String]) -> String {
    let mut script = ask_functions();
    for local in locals {
        let listener = HeldListener {
            pid: 0,
            comm: String::new(),
            local: local.clone(),
        };
        script.push_str(&listener.ask_line("timeout 5", local));
    }
    script.push_str("echo '== end'\n");
    script
}

/// One answer in an asking probe's output: its word (`api`, `answered`, ...), the rest of its
/// line, and for `answered` what its `/_ping` showed.
struct Answer<'a> {
    word: &'a str,
    rest: &'a str,
    ping: Option<Ping>,
}

/// The answers of [`ask_listeners_probe`] or [`ask_addresses_probe`], in order.
fn answers(text: &str) -> Vec<Answer<'_>> {
    let mut out: Vec<Answer> = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some((word, rest)) = line.trim().split_once(' ') else {
            continue;
        };
        let (mut cli, mut code, mut ping) = (String::new(), None, String::new());
        while let Some(more) = lines.peek().and_then(|l| l.strip_prefix("| ")) {
            if let Some(error) = more.strip_prefix("#cli ") {
                cli.push_str(error);
            } else if let Some(status) = more.strip_prefix("#exit ") {
                code = status.trim().parse().ok();
            } else if let Some(line) = more.strip_prefix("> ").or(more.strip_prefix(">")) {
                ping.push_str(line);
                ping.push('\n');
            }
            lines.next();
        }
        let ping = (word == "answered").then(|| ping_answer(&cli, code, &ping));
        out.push(Answer { word, rest, ping });
    }
    out
}

/// The addresses [`ask_addresses_probe`] found answering as a Docker API, or with an HTTP
/// error whose `/_ping` could not be read, said so.
pub fn docker_apis_among(text: &str) -> Vec<String> {
    answers(text)
        .into_iter()
        .filter_map(|answer| {
            let local = answer.rest;
            match (answer.word, answer.ping) {
                ("api", _) => Some(format!("a Docker API answers the agent on tcp {local}")),
                (_, Some(Ping::DockerApi(sign))) => Some(format!(
                    "a Docker API ({sign}) answers the agent on tcp {local}, refusing its Docker CLI"
                )),
                (_, Some(Ping::Unanswered(why))) => Some(format!(
                    "tcp {local} answers the agent's Docker CLI with an HTTP error, and its /_ping gave no answer to judge: {why}"
                )),
                _ => None,
            }
        })
        .collect()
}

/// What [`ask_listeners_probe`] printed for `listeners`, judged: the control answered, every
/// listener was asked, and none answered as a Docker API (by the CLI, or by its `/_ping`
/// when it refused the CLI). Returns what is wrong, and apart the listeners that answered
/// the CLI with an HTTP error and whose `/_ping` could not be read (no evidence either way:
/// with nothing wrong, the check is not judged).
pub fn judge_asked_listeners(listeners: &[HeldListener], text: &str) -> (Vec<String>, Vec<String>) {
    let (mut wrong, mut untold) = (Vec::new(), Vec::new());
    if !text.lines().any(|l| l.trim() == "== end") {
        wrong.push(
            "the asking of the daemon container's TCP listeners did not reach its end".to_owned(),
        );
    }
    if !text.lines().any(|l| l.trim() == "control api") {
        wrong.push(format!(
            "the daemon's container could not ask even its private socket {DAEMON_SOCKET} (no Docker CLI or nsenter?): its TCP listeners were not asked"
        ));
    }
    let answers = answers(text);
    for l in listeners {
        let tail = format!("{} {}", l.pid, l.local);
        let answer = answers.iter().find(|a| a.rest == tail);
        match answer.map(|a| (a.word, a.ping.as_ref())) {
            Some(("api", _)) => wrong.push(format!(
                "a Docker API answers on tcp {} in the network namespace of process {} ({})",
                l.local, l.pid, l.comm
            )),
            Some((_, Some(Ping::DockerApi(sign)))) => wrong.push(format!(
                "a Docker API ({sign}) answers on tcp {} in the network namespace of process {} ({}), refusing the Docker CLI",
                l.local, l.pid, l.comm
            )),
            Some((_, Some(Ping::Unanswered(why)))) => untold.push(format!(
                "tcp {} in the network namespace of process {} ({}) answers the Docker CLI with an HTTP error, and its /_ping gave no answer to judge: {why}",
                l.local, l.pid, l.comm
            )),
            Some(("other", _) | (_, Some(Ping::Other))) => {}
            _ => wrong.push(format!(
                "tcp {} of process {} ({}) was not asked (its network namespace could not be entered)",
                l.local, l.pid, l.comm
            )),
        }
    }
    (wrong, untold)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100007F:223D 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 5001 1 0 100 0 0 10 0\n   1: 0B00007F:A1B2 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5002 1 0 100 0 0 10 0\n   2: 0100007F:223D 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 5003 1 0 100 0 0 10 0\n";
    const UDP: &str = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n  1: 0B00007F:C350 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 6001 2 0 0\n";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000000000000000000001000000:0947 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 7001 1 0 100 0 0 10 0\n";
    const UNIX: &str = "Num       RefCount Protocol Flags    Type St Inode Path\n0000000000000000: 00000002 00000000 00010000 0001 01 8001 /run/docker/docker.sock\n0000000000000000: 00000002 00000000 00010000 0001 01 8002 /run/dockerd/containerd/containerd.sock\n0000000000000000: 00000003 00000000 00000000 0001 03 8003\n";

    fn listing(tcp: &str, udp: &str, tcp6: &str) -> String {
        format!(
            "== tcp\n{tcp}== tcp6\n{tcp6}== udp\n{udp}== udp6\n!! absent udp6\n== unix\n{UNIX}== end\n"
        )
    }

    #[test]
    fn tables_are_parsed_with_addresses_states_and_inodes() {
        let sockets = parse_table("tcp", TCP);
        assert_eq!(
            sockets
                .iter()
                .map(|s| (s.local.as_str(), s.listening, s.inode))
                .collect::<Vec<_>>(),
            [
                ("127.0.0.1:8765", true, 5001),
                ("127.0.0.11:41394", true, 5002),
                ("127.0.0.1:8765", false, 5003)
            ]
        );
        assert_eq!(parse_table("tcp6", TCP6)[0].local, "[::1]:2375");
        assert_eq!(parse_table("udp", UDP)[0].local, "127.0.0.11:50000");
        let unix = parse_table("unix", UNIX);
        assert_eq!(unix.len(), 3);
        assert!(unix[0].listening && unix[0].local == DAEMON_SOCKET);
        assert!(!unix[2].listening && unix[2].local.is_empty());
    }

    #[test]
    fn a_docker_api_on_any_socket_but_the_private_one_is_named_and_the_control_is_required() {
        let good = "other /workspace/app.sock\napi /run/docker/docker.sock\n== end\n";
        assert_eq!(judge_socket_files("agent", good), Vec::<String>::new());
        let bound = "api /workspace/.engine/docker.sock\napi /run/docker/docker.sock\n== end\n";
        assert_eq!(
            judge_socket_files("daemon", bound),
            vec!["daemon: a Docker API answers on /workspace/.engine/docker.sock".to_owned()]
        );
        // No control seen (the CLI missing, the socket unreadable): nothing found is no evidence.
        let blind = "other /run/docker/docker.sock\n== end\n";
        assert!(judge_socket_files("agent", blind)[0].contains("was not found answering"));
        assert!(
            judge_socket_files("agent", "api /run/docker/docker.sock\n")[0]
                .contains("did not reach its end")
        );
    }

    /// A Docker API found elsewhere fails the check, whatever else the searches missed; a
    /// search without its control, with nothing found, is no evidence either way.
    #[test]
    fn a_search_without_its_control_finds_nothing_and_judges_nothing() {
        let mut wrong = judge_socket_files("the agent's view", "other /run/docker/docker.sock\n");
        let (found, unseen) = found_and_unseen(wrong.clone());
        assert!(found.is_empty());
        assert_eq!(unseen.len(), 2, "{unseen:?}");
        wrong.extend(judge_daemon_socket_files(
            "=== dockerd 7\napi /opt/engine/docker.sock\napi /run/docker/docker.sock\n== end\n=== all\n",
        ));
        let (found, unseen) = found_and_unseen(wrong);
        assert_eq!(
            found,
            vec![
                "daemon 7's mount namespace: a Docker API answers on /opt/engine/docker.sock"
                    .to_owned()
            ]
        );
        assert_eq!(unseen.len(), 2);
    }

    #[test]
    fn every_daemons_own_view_is_judged_and_one_must_be_found() {
        let good = "=== dockerd 7\napi /run/docker/docker.sock\n== end\n=== all\n";
        assert_eq!(judge_daemon_socket_files(good), Vec::<String>::new());
        let hidden = "=== dockerd 7\napi /workspace/.engine/docker.sock\napi /run/docker/docker.sock\n== end\n=== all\n";
        assert_eq!(
            judge_daemon_socket_files(hidden),
            vec!["daemon 7's mount namespace: a Docker API answers on /workspace/.engine/docker.sock".to_owned()]
        );
        assert_eq!(
            judge_daemon_socket_files("=== all\n"),
            vec!["no daemon process was found to search its view".to_owned()]
        );
    }

    #[test]
    fn every_listening_tcp_port_is_enumerated_whatever_its_number_or_family() {
        let tables = Tables::parse(&listing(TCP, UDP, TCP6));
        // 8765 and 41394 listen on IPv4, 2375 on IPv6; the connected socket and UDP do not count.
        assert_eq!(
            tcp_listening_ports(&tables).into_iter().collect::<Vec<_>>(),
            [2375, 8765, 41394]
        );
    }

    #[test]
    fn the_pod_listing_holds_with_only_the_control_port_and_the_plumbing() {
        let empty6 = TCP6.lines().next().unwrap_or_default().to_owned() + "\n";
        let tables = Tables::parse(&listing(TCP, UDP, &empty6));
        assert_eq!(tables.incomplete(), Vec::<String>::new());
        let plumbing = vec!["127.0.0.11".to_owned()];
        assert_eq!(
            judge_pod_listeners(&tables, "127.0.0.1:8765", &plumbing),
            Vec::<String>::new()
        );
        // Without the plumbing excused, the resolver's two listeners count.
        assert_eq!(judge_pod_listeners(&tables, "127.0.0.1:8765", &[]).len(), 2);
        // A TCP listener on IPv6 counts.
        let tables = Tables::parse(&listing(TCP, UDP, TCP6));
        assert_eq!(
            judge_pod_listeners(&tables, "127.0.0.1:8765", &plumbing),
            vec!["listening: tcp6 [::1]:2375".to_owned()]
        );
    }

    /// A probe made to fail fails the check: an empty read, a table that could not be read,
    /// a listing cut short, or one without the control port is no evidence of "nothing".
    #[test]
    fn an_empty_failed_or_partial_listing_fails() {
        let plumbing = vec!["127.0.0.11".to_owned()];
        assert!(!judge_pod_listeners(&Tables::parse(""), "127.0.0.1:8765", &plumbing).is_empty());
        let failed = listing(TCP, UDP, TCP6).replace(
            &format!("== tcp\n{TCP}"),
            "== tcp\ncat: /proc/net/tcp: Permission denied\n!! failed tcp\n",
        );
        let wrong = judge_pod_listeners(&Tables::parse(&failed), "127.0.0.1:8765", &plumbing);
        assert!(
            wrong
                .iter()
                .any(|w| w.contains("/proc/net/tcp could not be read")),
            "{wrong:?}"
        );
        assert!(
            wrong.iter().any(|w| w.contains("control port")),
            "{wrong:?}"
        );
        let cut = listing(TCP, UDP, TCP6).replace("== end\n", "");
        assert!(
            judge_pod_listeners(&Tables::parse(&cut), "127.0.0.1:8765", &plumbing)
                .iter()
                .any(|w| w.contains("did not reach its end"))
        );
        let no_control = listing(
            &TCP.replace(
                "0100007F:223D 00000000:0000 0A",
                "0100007F:223D 00000000:0000 07",
            ),
            UDP,
            TCP6,
        );
        assert!(
            judge_pod_listeners(&Tables::parse(&no_control), "127.0.0.1:8765", &plumbing)
                .iter()
                .any(|w| w.contains("control port"))
        );
        // Only the IPv6 tables may be absent (a kernel without IPv6).
        let no_udp =
            listing(TCP, UDP, TCP6).replace(&format!("== udp\n{UDP}"), "== udp\n!! absent udp\n");
        assert!(
            Tables::parse(&no_udp)
                .incomplete()
                .iter()
                .any(|w| w.contains("/proc/net/udp is missing"))
        );
    }

    /// The probe as a container runs it (sh), on this host's own tables: complete, every
    /// table read (or IPv6 absent).
    #[test]
    fn the_netns_probe_reads_every_table() {
        let out = std::process::Command::new("sh")
            .args(["-c", &netns_probe("/proc/net")])
            .output()
            .unwrap();
        let tables = Tables::parse(&String::from_utf8_lossy(&out.stdout));
        assert_eq!(tables.incomplete(), Vec::<String>::new());
        assert!(tables.read.contains("unix"));
        let broken = std::process::Command::new("sh")
            .args(["-c", &netns_probe("/nonexistent")])
            .output()
            .unwrap();
        assert!(
            !Tables::parse(&String::from_utf8_lossy(&broken.stdout))
                .incomplete()
                .is_empty()
        );
    }

    fn daemon_text(argv: &str, fds: &str, tcp: &str) -> String {
        format!(
            "=== process 7\n{argv}=== comm 7\ndockerd\n=== fds 7\n{fds}=== tables 7\n{}=== end\n",
            listing(tcp, UDP, TCP6)
        )
    }

    const GOOD_ARGV: &str = "dockerd\n--host=unix:///run/docker/docker.sock\n--group=1000\n";
    const HEADER: &str = "  sl  local_address rem_address   st\n";

    fn config(hosts: &[&str]) -> BTreeMap<u32, Result<Vec<String>, String>> {
        BTreeMap::from([(7, Ok(hosts.iter().map(|h| (*h).to_owned()).collect()))])
    }

    #[test]
    fn a_daemon_holding_only_its_socket_holds() {
        let (daemons, complete) = parse_daemons(&daemon_text(
            GOOD_ARGV,
            "socket:[8001]\nsocket:[8002]\n",
            TCP,
        ));
        assert!(complete);
        assert_eq!(daemons.len(), 1);
        assert_eq!(daemons[0].argv[0], "dockerd");
        assert_eq!(
            judge_daemons(&daemons, complete, &config(&[])),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_daemon_holding_a_tcp_listener_or_configured_with_any_network_host_fails() {
        // The listener it holds in its own network namespace (unshare --net).
        let tcp = format!(
            "{HEADER}   0: 00000000:0947 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 9001 1\n"
        );
        let (daemons, complete) = parse_daemons(&daemon_text(
            GOOD_ARGV,
            "socket:[8001]\nsocket:[9001]\n",
            &tcp,
        ));
        assert_eq!(
            judge_daemons(&daemons, complete, &config(&[])),
            vec!["daemon 7 (dockerd) holds tcp 0.0.0.0:2375".to_owned()]
        );
        // Every spelling of a host that is not the socket.
        for argv in [
            "dockerd\n-H\ntcp://0.0.0.0:2375\n",
            "dockerd\n-Htcp://0.0.0.0:2375\n",
            "dockerd\n-H=0.0.0.0:2375\n",
            "dockerd\n--host\n:2375\n",
            "dockerd\n--host=fd://\n",
            "dockerd\n-H\nunix:///workspace/docker.sock\n",
        ] {
            let (daemons, complete) = parse_daemons(&daemon_text(
                &format!("{GOOD_ARGV}{}", &argv["dockerd\n".len()..]),
                "socket:[8001]\n",
                TCP,
            ));
            let wrong = judge_daemons(&daemons, complete, &config(&[]));
            assert_eq!(wrong.len(), 1, "{argv}: {wrong:?}");
            assert!(wrong[0].contains("configured with the host"), "{wrong:?}");
        }
        // daemon.json's hosts, from the file the command line names.
        let (daemons, complete) = parse_daemons(&daemon_text(
            &format!("{GOOD_ARGV}--config-file\n/etc/d.json\n"),
            "socket:[8001]\n",
            TCP,
        ));
        assert_eq!(daemons[0].configured().1, "/etc/d.json");
        let wrong = judge_daemons(&daemons, complete, &config(&["tcp://127.0.0.1:2376"]));
        assert_eq!(
            wrong,
            vec![
                "daemon 7 (dockerd): /etc/d.json names the host \"tcp://127.0.0.1:2376\""
                    .to_owned()
            ]
        );
        assert_eq!(
            config_hosts(r#"{"hosts": ["unix:///run/docker/docker.sock", "tcp://0.0.0.0:2375"]}"#),
            Ok(vec![
                "unix:///run/docker/docker.sock".to_owned(),
                "tcp://0.0.0.0:2375".to_owned()
            ])
        );
        assert!(config_hosts("{").is_err());
        assert_eq!(config_hosts(""), Ok(vec![]));
    }

    /// A probe made to fail fails the check: no daemon seen, its own socket not among what
    /// it holds (descriptors unreadable), a listing cut short, a config file not read.
    #[test]
    fn a_daemon_listing_without_its_positive_control_fails() {
        let (none, complete) = parse_daemons("=== end\n");
        assert!(!judge_daemons(&none, complete, &BTreeMap::new()).is_empty());
        let (daemons, complete) = parse_daemons(&daemon_text(GOOD_ARGV, "", TCP));
        let wrong = judge_daemons(&daemons, complete, &config(&[]));
        assert!(
            wrong.iter().any(|w| w.contains("its own socket")),
            "{wrong:?}"
        );
        let cut = daemon_text(GOOD_ARGV, "socket:[8001]\n", TCP).replace("=== end\n", "");
        let (daemons, complete) = parse_daemons(&cut);
        assert!(!judge_daemons(&daemons, complete, &config(&[])).is_empty());
        let (daemons, complete) = parse_daemons(&daemon_text(GOOD_ARGV, "socket:[8001]\n", TCP));
        assert!(!judge_daemons(&daemons, complete, &BTreeMap::new()).is_empty());
        let abstract_listener = daemon_text(GOOD_ARGV, "socket:[8001]\nsocket:[8009]\n", TCP)
            .replace(
                "== end\n=== end",
                "0000000000000000: 00000002 00000000 00010000 0001 01 8009 @dockerd-debug\n== end\n=== end",
            );
        let (daemons, complete) = parse_daemons(&abstract_listener);
        assert_eq!(
            judge_daemons(&daemons, complete, &config(&[])),
            vec![
                "daemon 7 (dockerd) listens on the abstract unix socket @dockerd-debug".to_owned()
            ]
        );
    }

    /// A daemon is the process that holds the private socket, whatever its executable is
    /// called: a renamed dockerd serving TCP is judged as one, named by its pid and comm; a
    /// process that holds neither that socket nor the name is not one.
    #[test]
    fn a_renamed_daemon_holding_the_private_socket_is_a_daemon() {
        let tcp = format!(
            "{HEADER}   0: 00000000:0947 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0 0 9001 1\n"
        );
        let renamed = daemon_text(GOOD_ARGV, "socket:[8001]\nsocket:[9001]\n", &tcp)
            .replace("=== comm 7\ndockerd\n", "=== comm 7\nengine-api\n");
        let (daemons, complete) = parse_daemons(&renamed);
        assert_eq!(daemons.len(), 1);
        assert_eq!(
            judge_daemons(&daemons, complete, &config(&[])),
            vec!["daemon 7 (engine-api) holds tcp 0.0.0.0:2375".to_owned()]
        );
        // A proxy holding a TCP listener but not the private socket: no daemon, but its
        // listener is one to ask.
        let proxy = daemon_text(GOOD_ARGV, "socket:[9001]\n", &tcp)
            .replace("=== comm 7\ndockerd\n", "=== comm 7\nperl\n");
        let (processes, _) = parse_processes(&proxy);
        assert!(!processes[0].is_daemon());
        assert_eq!(
            held_tcp_listeners(&processes),
            vec![HeldListener {
                pid: 7,
                comm: "perl".into(),
                local: "0.0.0.0:2375".into()
            }]
        );
        assert_eq!(
            held_tcp_listeners(&processes)[0].dials(),
            ["127.0.0.1:2375"]
        );
    }

    #[test]
    fn every_held_listener_is_asked_and_a_docker_api_or_an_unasked_one_fails() {
        let listeners = vec![
            HeldListener {
                pid: 7,
                comm: "engine-api".into(),
                local: "0.0.0.0:2375".into(),
            },
            HeldListener {
                pid: 9,
                comm: "web".into(),
                local: "[::]:8080".into(),
            },
        ];
        let none = (Vec::<String>::new(), Vec::<String>::new());
        // Nothing HTTP, or a web server whose /_ping carries no Api-Version: nothing wrong.
        let good = "control api\nother 7 0.0.0.0:2375\nanswered 9 [::]:8080\n| #cli Error response from daemon: page not found\n| > HTTP/1.0 404 Not Found\n| > Server: BaseHTTP/0.6\n| #exit 0\n== end\n";
        assert_eq!(judge_asked_listeners(&listeners, good), none);
        // A daemon refusing the CLI: its /_ping carries Api-Version.
        let refusing = good.replace("Server: BaseHTTP/0.6", "Api-Version: 1.41");
        assert_eq!(
            judge_asked_listeners(&listeners, &refusing).0,
            vec!["a Docker API (Api-Version 1.41) answers on tcp [::]:8080 in the network namespace of process 9 (web), refusing the Docker CLI".to_owned()]
        );
        let api = "control api\napi 7 0.0.0.0:2375\nother 9 [::]:8080\n== end\n";
        assert_eq!(
            judge_asked_listeners(&listeners, api).0,
            vec!["a Docker API answers on tcp 0.0.0.0:2375 in the network namespace of process 7 (engine-api)".to_owned()]
        );
        // An HTTP error back with no client to read /_ping raw: untold, not wrong.
        let untold = "control api\nother 7 0.0.0.0:2375\nanswered 9 [::]:8080\n| #cli Error response from daemon: page not found\n| > no HTTP client (curl, python3, perl or wget) here\n| #exit 127\n== end\n";
        let (wrong, untold) = judge_asked_listeners(&listeners, untold);
        assert!(wrong.is_empty(), "{wrong:?}");
        assert!(
            untold.len() == 1
                && untold[0].contains("[::]:8080")
                && untold[0].contains("no HTTP client"),
            "{untold:?}"
        );
        // No control (no CLI), a listener left unasked or not entered, the probe cut short.
        let blind = "control other\nother 7 0.0.0.0:2375\nunasked 9 [::]:8080\n";
        let (wrong, _) = judge_asked_listeners(&listeners, blind);
        assert_eq!(wrong.len(), 3, "{wrong:?}");
        assert!(
            wrong
                .iter()
                .any(|w| w.contains("could not ask even its private socket"))
        );
        assert!(
            wrong
                .iter()
                .any(|w| w.contains("[::]:8080 of process 9 (web) was not asked"))
        );
        assert!(wrong.iter().any(|w| w.contains("did not reach its end")));
        // The IPv6 wildcard asked on IPv4's loopback first (dual-stack), then IPv6's.
        assert!(
            ask_listeners_probe(&listeners)
                .contains("for h in 'tcp://127.0.0.1:8080' 'tcp://[::1]:8080'; do a=$(ask 'nsenter -t 9 -n timeout 5' \"$h\")")
        );
    }

    #[test]
    fn the_agents_answers_name_each_docker_api_among_the_listeners() {
        let text = "api 0.0.0.0:2377\nother 127.0.0.1:9000\nanswered 127.0.0.1:3000\n| #cli Error response from daemon: 404 page not found\n| > HTTP/1.1 404 Not Found\n| #exit 0\nanswered [::]:2376\n| #cli Error response from daemon: x\n| #exit 124\n== end\n";
        assert_eq!(
            docker_apis_among(text),
            vec![
                "a Docker API answers the agent on tcp 0.0.0.0:2377".to_owned(),
                "tcp [::]:2376 answers the agent's Docker CLI with an HTTP error, and its /_ping gave no answer to judge: no HTTP answer read (exit 124): ".to_owned()
            ]
        );
        let script = ask_addresses_probe(&["0.0.0.0:2377".to_owned()]);
        assert!(
            script.contains("for h in 'tcp://127.0.0.1:2377'; do a=$(ask 'timeout 5' \"$h\")"),
            "{script}"
        );
        assert!(
            script.contains("sed '1s/$/ 0.0.0.0:2377/; 1!s/^/| /'"),
            "{script}"
        );
    }

    /// The mounts two mount tables share: the same filesystem and an overlapping folder (a
    /// volume both mount, a subfolder of one the other mounts whole), at the daemon's path;
    /// per-container files and kernel filesystems are not shared.
    #[test]
    fn what_the_daemon_shares_with_the_agent_is_read_from_both_mount_tables() {
        let agent = parse_mountinfo(
            "1 0 0:50 / / rw - overlay overlay rw\n\
             2 1 0:5 / /proc rw - proc proc rw\n\
             3 1 0:20 / /sys ro - sysfs sysfs ro\n\
             4 1 8:1 /var/lib/docker/volumes/p-workspace/_data /workspace rw - ext4 /dev/sda1 rw\n\
             5 1 0:60 / /run/docker rw - tmpfs tmpfs rw\n\
             6 1 8:1 /var/lib/docker/containers/agent/hosts /etc/hosts rw - ext4 /dev/sda1 rw\n\
             7 1 8:1 /srv/shared/engine\\040proxy /opt/engine rw - ext4 /dev/sda1 rw\n",
        );
        let daemon = parse_mountinfo(
            "1 0 0:51 / / rw - overlay overlay rw\n\
             2 1 0:5 / /proc rw - proc proc rw\n\
             3 1 0:20 / /sys ro - sysfs sysfs ro\n\
             4 1 8:1 /var/lib/docker/volumes/p-workspace/_data /workspace rw - ext4 /dev/sda1 rw\n\
             5 1 0:60 / /run/docker rw - tmpfs tmpfs rw\n\
             6 1 8:1 /var/lib/docker/containers/daemon/hosts /etc/hosts rw - ext4 /dev/sda1 rw\n\
             7 1 8:1 /srv/shared /mnt/shared rw - ext4 /dev/sda1 rw\n\
             8 1 0:60 / /workspace/.engine rw - tmpfs tmpfs rw\n",
        );
        assert_eq!(agent[6].point, "/opt/engine");
        assert_eq!(agent[6].root, "/srv/shared/engine proxy");
        assert_eq!(
            shared_paths(&agent, &daemon)
                .into_iter()
                .collect::<Vec<_>>(),
            [
                "/mnt/shared/engine proxy",
                "/run/docker",
                "/workspace",
                "/workspace/.engine"
            ]
        );
        assert_eq!(
            outermost(
                shared_paths(&agent, &daemon)
                    .into_iter()
                    .chain(SHARED_ROOTS.iter().map(|r| (*r).to_owned()))
            ),
            ["/mnt/shared/engine proxy", "/run/docker", "/workspace"]
        );
        assert_eq!(outermost(["/".to_owned(), "/workspace".to_owned()]), ["/"]);
    }

    /// The socket search as a container runs it (sh, find, the Docker CLI), on this host: a
    /// socket file under a quoted root with a space is found and asked; /proc is left out.
    #[test]
    fn the_socket_search_finds_every_socket_file_under_its_roots() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("a b");
        std::fs::create_dir(&folder).unwrap();
        let path = folder.join("x.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let out = std::process::Command::new("sh")
            .args([
                "-c",
                &socket_files_probe(&[dir.path().display().to_string()]),
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            text.lines()
                .any(|l| l == format!("other {}", path.display())),
            "{text}"
        );
        assert!(text.lines().any(|l| l == "== end"), "{text}");
    }

    /// Every process's TCP listeners, whatever it is called, as the probe enumerates them
    /// through a real shell on this host; then asked in its own network namespace through
    /// nsenter and the Docker CLI: a server that answers as a Docker API is named, and so is
    /// one that refuses this client its `/version` (403) while its `/_ping` carries
    /// `Api-Version`; a web server answering 404 (the CLI's `Error response from daemon`
    /// too) and a plain listener are not.
    #[test]
    fn an_abstract_socket_answering_as_a_docker_api_is_found_and_an_unread_table_judges_nothing() {
        let read = "other @containerd-shim/abc.sock\napi @kandev-engine\n== abstract end\n";
        assert_eq!(
            judge_abstract_sockets(read),
            vec![
                "the Pod's network namespace: a Docker API answers on the abstract unix socket @kandev-engine"
                    .to_owned()
            ]
        );
        let (found, unseen) = found_and_unseen(judge_abstract_sockets(read));
        assert_eq!((found.len(), unseen.len()), (1, 0));
        assert!(judge_abstract_sockets("other @x\n== abstract end\n").is_empty());
        // A listener that could not be asked is no evidence either way.
        let (found, unseen) =
            found_and_unseen(judge_abstract_sockets("unasked @a@b\n== abstract end\n"));
        assert_eq!((found.len(), unseen.len()), (0, 1), "{unseen:?}");
        // Cut short, or the table unread: nothing was asked, no evidence either way.
        let (found, unseen) = found_and_unseen(judge_abstract_sockets("other @x\n"));
        assert_eq!((found.len(), unseen.len()), (0, 1), "{unseen:?}");
    }

    /// The abstract-socket probe through a real shell: a Docker API served on an abstract
    /// socket (no file anywhere) is asked and found, a listener that is not one is not, and
    /// the table's read is its control.
    #[test]
    #[ignore = "needs python3 and the Docker CLI: bash harness/scripts/ensure-test-deps.sh, then cargo test --workspace -- --include-ignored"]
    fn every_abstract_listener_of_the_namespace_is_asked() {
        use std::process::Command;
        let script = r#"
import http.server, json, os, socketserver, sys, socket
mode = sys.argv[1]
name = "\0kandev-probe-test-%s-%d" % (mode, os.getpid())
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"OK" if self.path.endswith("/_ping") else json.dumps({"Version": "0.0-abstract", "ApiVersion": "1.41", "MinAPIVersion": "1.12", "Os": "linux", "Arch": "amd64"}).encode()
        self.send_response(200); self.send_header("Api-Version", "1.41")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    do_HEAD = do_GET
    def address_string(self): return "abstract"
    def log_message(self, *a): pass
if mode.startswith("api"):
    s = socketserver.UnixStreamServer(name, H)
    print(0, flush=True)
    s.serve_forever()
s = socket.socket(socket.AF_UNIX); s.bind(name); s.listen()
print(0, flush=True)
while True:
    c, _ = s.accept(); c.close()
"#;
        let api = crate::support::docker_ping::PythonServer::start(script, "api");
        let spaced = crate::support::docker_ping::PythonServer::start(script, "api spaced");
        let plain = crate::support::docker_ping::PythonServer::start(script, "plain");
        let out = Command::new("sh")
            .args(["-c", &abstract_sockets_probe()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let api_name = format!("@kandev-probe-test-api-{}", api.pid());
        // The CLI takes no host with a space: asked by no one, so no evidence (not "other").
        let spaced_name = format!("@kandev-probe-test-api spaced-{}", spaced.pid());
        assert!(text.contains(&format!("unasked {spaced_name}\n")), "{text}");
        let plain_name = format!("@kandev-probe-test-plain-{}", plain.pid());
        assert!(text.contains(&format!("api {api_name}\n")), "{text}");
        assert!(text.contains(&format!("other {plain_name}\n")), "{text}");
        let wrong = judge_abstract_sockets(&text);
        assert!(
            wrong.iter().any(|w| w.ends_with(&api_name))
                && !wrong.iter().any(|w| w.contains(&plain_name)),
            "{wrong:?}"
        );
    }

    /// The socket-file probe through a real shell, on sockets that answer the Docker CLI with
    /// an HTTP error: a daemon refusing this client (its answers carry `Api-Version`) is
    /// found, a web server's 404 is not, and one whose `/_ping` cannot be read leaves the
    /// search no evidence (not "other"). Each answers the abstract probe the same way.
    #[test]
    #[ignore = "needs python3 and the Docker CLI: bash harness/scripts/ensure-test-deps.sh, then cargo test --workspace -- --include-ignored"]
    fn a_unix_socket_refusing_the_cli_is_told_apart_by_its_ping() {
        use std::process::Command;
        let script = r#"
import http.server, os, socketserver, sys
mode, where = sys.argv[1].split(" ", 1)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if mode == "silent" and self.path.endswith("/_ping"):
            self.close_connection = True; return
        body = b'{"message":"refused"}'
        self.send_response(403 if mode != "web" else 404)
        if mode == "refusing": self.send_header("Api-Version", "1.41")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def address_string(self): return "unix"
    def log_message(self, *a): pass
s = socketserver.UnixStreamServer(where.replace("@", "\0", 1), H)
print(0, flush=True)
s.serve_forever()
"#;
        let dir = tempfile::tempdir().unwrap();
        let at = |mode: &str| {
            dir.path()
                .join(format!("{mode}.sock"))
                .display()
                .to_string()
        };
        let servers: Vec<_> = ["refusing", "web", "silent"]
            .iter()
            .flat_map(|mode| {
                let abstract_name = format!("@kandev-refusing-test-{mode}-{}", std::process::id());
                [
                    crate::support::docker_ping::PythonServer::start(
                        script,
                        &format!("{mode} {}", at(mode)),
                    ),
                    crate::support::docker_ping::PythonServer::start(
                        script,
                        &format!("{mode} {abstract_name}"),
                    ),
                ]
            })
            .collect();
        let probe = |script: String| {
            let out = Command::new("sh").args(["-c", &script]).output().unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let files = probe(socket_files_probe(&[dir.path().display().to_string()]));
        let (found, unseen) = found_and_unseen(judge_socket_files("view", &files));
        assert!(
            found.len() == 1
                && found[0].contains(&at("refusing"))
                && found[0].contains("Api-Version"),
            "{found:?}\n{files}"
        );
        assert!(
            unseen
                .iter()
                .any(|u| u.contains(&at("silent")) && u.contains("no answer to judge")),
            "{unseen:?}\n{files}"
        );
        assert!(
            !unseen.iter().chain(&found).any(|w| w.contains(&at("web"))),
            "{files}"
        );
        let abstracts = probe(abstract_sockets_probe());
        let (found, unseen) = found_and_unseen(judge_abstract_sockets(&abstracts));
        let pid = std::process::id();
        assert!(
            found
                .iter()
                .any(|f| f.contains(&format!("refusing-test-refusing-{pid}"))),
            "{found:?}"
        );
        assert!(
            unseen
                .iter()
                .any(|u| u.contains(&format!("refusing-test-silent-{pid}"))),
            "{unseen:?}"
        );
        assert!(
            !found
                .iter()
                .chain(&unseen)
                .any(|w| w.contains(&format!("refusing-test-web-{pid}"))),
            "{abstracts}"
        );
        drop(servers);
    }

    #[test]
    #[ignore = "needs root (nsenter), python3 and the Docker CLI: bash harness/scripts/ensure-test-deps.sh, then cargo test --workspace -- --include-ignored"]
    fn a_listener_of_any_process_answering_as_a_docker_api_is_found_and_named() {
        use std::process::Command;
        let script = r#"
import http.server, json, sys, socket
mode = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ping = self.path.endswith("/_ping")
        if mode == "web":
            code, body = 404, b"404 page not found"
        elif ping:
            code, body = 200, b"OK"
        elif mode == "refusing":
            code, body = 403, json.dumps({"message": "forbidden"}).encode()
        else:
            code, body = 200, json.dumps({"Version": "0.0-renamed", "ApiVersion": "1.41", "MinAPIVersion": "1.12", "Os": "linux", "Arch": "amd64"}).encode()
        self.send_response(code)
        if mode != "web":
            self.send_header("Api-Version", "1.41")
        self.send_header("Content-Type", "application/json" if mode != "web" else "text/plain")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    do_HEAD = do_GET
    def log_message(self, *a): pass
if mode != "plain":
    s = http.server.HTTPServer(("127.0.0.1", 0), H); port = s.server_address[1]
else:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); port = s.getsockname()[1]
print(port, flush=True)
if mode != "plain":
    s.serve_forever()
while True:
    c, _ = s.accept(); c.close()
"#;
        let servers: Vec<_> = ["api", "refusing", "web", "plain"]
            .into_iter()
            .map(|mode| crate::support::docker_ping::PythonServer::start(script, mode))
            .collect();
        let out = Command::new("sh")
            .args(["-c", &daemon_probe()])
            .output()
            .unwrap();
        let (processes, complete) = parse_processes(&String::from_utf8_lossy(&out.stdout));
        assert!(complete);
        let listeners: Vec<HeldListener> = held_tcp_listeners(&processes)
            .into_iter()
            .filter(|l| servers.iter().any(|server| server.pid() == l.pid))
            .collect();
        let asked = Command::new("sh")
            .args(["-c", &ask_listeners_probe(&listeners)])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&asked.stdout);
        let (wrong, untold) = judge_asked_listeners(&listeners, &text);
        let ports: Vec<u16> = servers.iter().map(|server| server.port).collect();
        drop(servers);
        assert_eq!(listeners.len(), 4, "{listeners:?}");
        // The web server's /_ping was read (curl, python3 or perl here): told apart.
        assert!(untold.is_empty(), "{untold:?}\n{text}");
        // This host has no private socket: the control is missing, and said so.
        assert!(
            wrong
                .iter()
                .any(|w| w.contains("could not ask even its private socket")),
            "{wrong:?}"
        );
        for port in &ports[..2] {
            assert!(
                wrong.iter().any(|w| w.starts_with("a Docker API")
                    && w.contains(&format!(" answers on tcp 127.0.0.1:{port} "))),
                "{port}: {wrong:?}"
            );
        }
        assert_eq!(wrong.len(), 3, "{wrong:?}");
    }

    /// The daemon probe as the companion runs it (sh), on this host: whatever dockerd
    /// processes it sees, it reaches its end.
    #[test]
    fn the_daemon_probe_runs_to_its_end() {
        let out = std::process::Command::new("sh")
            .args(["-c", &daemon_probe()])
            .output()
            .unwrap();
        let (_, complete) = parse_daemons(&String::from_utf8_lossy(&out.stdout));
        assert!(complete);
    }
}
