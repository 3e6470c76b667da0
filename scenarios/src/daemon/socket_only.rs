//! `daemon::socket_only` — the Pod's daemon answers only on `/run/docker/docker.sock`
//! (group 1000, not world-accessible), and no other socket file answers as a Docker API: none
//! the agent can see, none under the workspace, the socket folder or a mount the daemon shares
//! with the agent, as the daemon sees them; nothing listens on TCP or UDP in the Pod's network
//! namespace but the loopback control port (every socket table read whole, the control port
//! seen in the same listing); every daemon of the companion (found by the socket it holds,
//! whatever its name) holds only unix sockets, its own socket among them, and is configured
//! with no other host, and no TCP listener of the companion's processes, in whatever network
//! namespace, answers as a Docker API; the agent stays UID/GID 1000 with
//! no capabilities (bounding set included), no privilege escalation, a seccomp filter and no
//! service-account token; the running Pod (as the backend runs it, not as requested) has no
//! host path or host namespace, and the daemon the agent reaches is the Pod's own: the one the
//! companion's dockerd answers on that socket (on every backend), and locally not the engine
//! that runs the Pod.
//!
//! Can fail when the daemon also listens on TCP (the DinD image's default entrypoint does),
//! when its socket is also reachable inside the workspace (a bind mount of its folder there)
//! or through another socket file on a folder the agent shares (a proxy), when a renamed daemon
//! binary serves TCP,
//! when the socket is world-accessible or owned by another group, when a daemon is configured
//! with a tcp:// host the listener scan cannot see, when the agent keeps capabilities, or when
//! the Pod shares a host path or namespace or reaches a host daemon.

use kandev_harness::backend::BackendKind;
use kandev_harness::runner::{
    Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, not_judged, promise,
};
use kandev_harness::session::SessionOptions;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

/// The kernel's socket tables and the daemons' sockets, read and judged (also by
/// `isolation::cross_session`, which enumerates the peer's listeners from them).
pub(crate) mod sockets;

use kandev_harness::pod::template::AGENTCTL_PORT;

/// The control port agentctl listens on, loopback only.
fn control_port() -> String {
    format!("127.0.0.1:{}", AGENTCTL_PORT)
}

const SOCKET: Check = Check {
    id: "socket_private",
    promise: "the daemon socket is /run/docker/docker.sock, group 1000, not world-accessible",
    twin: Twin::Template("daemon-socket-world-accessible"),
};
const ONE_SOCKET: Check = Check {
    id: "one_socket_only",
    promise: "no socket file but the private one answers as a Docker API: none the agent can see (its whole view searched), none under /workspace, /run/docker or any mount the daemon shares with the agent (read from both mount tables) as each daemon (and every container it starts with the workspace bound) sees them; the private socket, found the same way, answers in both; and no abstract unix socket of the Pod's network namespace answers as one (every listener in its table asked)",
    twin: Twin::Template("daemon-socket-in-workspace"),
};
const NO_TCP: Check = Check {
    id: "no_tcp_listener",
    promise: "no TCP listener in the Pod besides the loopback control port, nor a UDP one (every socket table of the Pod's network namespace read whole, the control port seen in it)",
    twin: Twin::Template("daemon-tcp-listener"),
};
const NO_TCP_CONFIG: Check = Check {
    id: "no_tcp_host",
    promise: "every daemon process (named dockerd, or holding /run/docker/docker.sock whatever its name) holds only unix sockets, its own socket among them, and is configured with no other host (no tcp://, fd:// or host:port, on its command line or in daemon.json); no TCP listener any process of the daemon's container holds, in whatever network namespace, answers as a Docker API",
    twin: Twin::Template("daemon-tcp-host-unseen"),
};
const AGENT: Check = Check {
    id: "agent_unprivileged",
    promise: "the agent stays UID/GID 1000 with no capabilities (effective, permitted, bounding), no privilege escalation, a seccomp filter and no service-account token",
    twin: Twin::Template("agent-capabilities-kept"),
};
const NO_HOST: Check = Check {
    id: "no_host_access",
    promise: "the running Pod has no host path or host namespace; the agent's daemon is the Pod's own",
    twin: Twin::Template("pod-host-ipc"),
};

pub fn scenario() -> Scenario {
    Scenario {
        name: "daemon::socket_only",
        promise: "the daemon is reachable only through `/run/docker/docker.sock` (group 1000); no TCP listener in the Pod; agent stays UID 1000 without capabilities",
        checks: &[SOCKET, ONE_SOCKET, NO_TCP, NO_TCP_CONFIG, AGENT, NO_HOST],
        timeout: Duration::from_secs(300),
        starts_first: false,
        run,
    }
}

/// Whether the agent's daemon is the Pod's own: the agent got an ID (`agent`, None when its
/// `docker info` failed), the companion asked its own socket and got the same (`companion`,
/// None when that failed), a dockerd of the companion holds that socket, and it is not the
/// engine that runs the Pod (`host`: locally its ID, or why it could not be read; None on a
/// cluster, whose runtime is no daemon to compare). A failed probe is no evidence: it fails.
fn is_pods_own_daemon(
    agent: Option<&str>,
    companion: Option<&str>,
    socket_held: bool,
    host: Option<Result<&str, &str>>,
) -> bool {
    let not_host = |agent: &str| match host {
        None => true,
        Some(Ok(host)) => agent != host,
        Some(Err(_)) => false,
    };
    match (agent, companion) {
        (Some(agent), Some(companion)) => {
            !agent.is_empty() && agent == companion && socket_held && not_host(agent)
        }
        _ => false,
    }
}

/// Listening TCP sockets from `/proc/net/tcp{,6}` text (state 0A), as `addr:port`.
pub fn tcp_listeners(proc_net: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in proc_net.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(state)) = (fields.get(1), fields.get(3)) else {
            continue;
        };
        if *state != "0A" {
            continue;
        }
        let Some((addr, port)) = local.split_once(':') else {
            continue;
        };
        let Ok(port) = u16::from_str_radix(port, 16) else {
            continue;
        };
        let addr = match addr.len() {
            8 => u32::from_str_radix(addr, 16)
                .map(|a| std::net::Ipv4Addr::from(a.swap_bytes()).to_string())
                .unwrap_or_default(),
            _ => format!("[{addr}]"),
        };
        out.push(format!("{addr}:{port}"));
    }
    out
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        ctx.step("launch");
        let session = ctx.launch(SessionOptions::default()).await?;

        ctx.step("the socket");
        let stat = session
            .agent_sh(
                "stat -c '%F|%u|%g|%a' /run/docker/docker.sock; echo \"$DOCKER_HOST\"",
                Duration::from_secs(20),
            )
            .await?;
        ctx.evidence("stat", stat.stdout.trim());
        let mut lines = stat.stdout.lines();
        let fields: Vec<&str> = lines.next().unwrap_or_default().split('|').collect();
        let docker_host = lines.next().unwrap_or_default().trim().to_owned();
        let mode = fields
            .get(3)
            .and_then(|m| u32::from_str_radix(m, 8).ok())
            .unwrap_or(0o777);
        promise(
            fields.first() == Some(&"socket")
                && fields.get(2) == Some(&"1000")
                && mode & 0o007 == 0
                && docker_host == "unix:///run/docker/docker.sock",
            &SOCKET,
            || format!("stat {:?}, DOCKER_HOST={docker_host:?}", stat.stdout.trim()),
        )?;

        ctx.step("every process of the daemon's container and the sockets it holds");
        // Every process, not only those named dockerd: a daemon is one that holds the
        // private socket, whatever its executable is called.
        let probe = session
            .in_daemon(
                &["sh", "-c", &sockets::daemon_probe()],
                Duration::from_secs(30),
            )
            .await?;
        let (processes, complete) = sockets::parse_processes(&probe.stdout_text());
        let daemons: Vec<sockets::DaemonProcess> = processes
            .iter()
            .filter(|p| p.is_daemon())
            .cloned()
            .collect();

        ctx.step("every socket file the agent sees, and what each daemon shares with it");
        // The agent's view whole (every socket file it can see, whichever volume put it
        // there); each daemon's in its own mount namespace (nsenter -m), which is what every
        // container it starts with the workspace bound sees: a mount made in a namespace only
        // the daemon has shows there and not to the agent (nor to an exec into the
        // companion). There, the workspace, the socket folder and every mount it shares with
        // the agent, enumerated from the two mount tables.
        let roots: Vec<String> = sockets::AGENT_ROOTS
            .iter()
            .map(|r| (*r).to_owned())
            .collect();
        let in_agent = session
            .agent_sh(
                &sockets::socket_files_probe(&roots),
                Duration::from_secs(120),
            )
            .await?;
        let agent_mounts = session
            .agent_sh("cat /proc/self/mountinfo", Duration::from_secs(20))
            .await?;
        let agent_mounts_parsed = sockets::parse_mountinfo(&agent_mounts.stdout);
        let mut wrong = sockets::judge_socket_files("the agent's view", &in_agent.stdout);
        // No file at all: an abstract unix socket, in the Pod's network namespace, which the
        // agent shares.
        let abstract_sockets = session
            .agent_sh(&sockets::abstract_sockets_probe(), Duration::from_secs(60))
            .await?;
        wrong.extend(sockets::judge_abstract_sockets(&abstract_sockets.stdout));
        if !agent_mounts.success() || agent_mounts_parsed.is_empty() {
            wrong.push(format!(
                "the agent's mount table could not be read, so what it shares with the daemon is unknown: {}",
                agent_mounts.summary()
            ));
        }
        let mut daemon_text = String::new();
        let mut daemon_roots = BTreeMap::new();
        for daemon in &daemons {
            let pid = daemon.pid.to_string();
            let mounts = session
                .in_daemon(
                    &["cat", &format!("/proc/{pid}/mountinfo")],
                    Duration::from_secs(20),
                )
                .await?;
            let shared = sockets::shared_paths(
                &agent_mounts_parsed,
                &sockets::parse_mountinfo(&mounts.stdout_text()),
            );
            if !mounts.success() || shared.is_empty() {
                wrong.push(format!(
                    "{}: its mount table shows nothing it shares with the agent ({}): its view of what they share is unknown",
                    daemon.describe(),
                    mounts.exit_text()
                ));
            }
            let roots = sockets::outermost(
                sockets::SHARED_ROOTS
                    .iter()
                    .map(|r| (*r).to_owned())
                    .chain(shared),
            );
            let found = session
                .in_daemon(
                    &[
                        "nsenter",
                        "-t",
                        &pid,
                        "-m",
                        "--",
                        "sh",
                        "-c",
                        &sockets::socket_files_probe(&roots),
                    ],
                    Duration::from_secs(90),
                )
                .await?;
            daemon_text.push_str(&format!("=== dockerd {pid}\n{}", found.stdout_text()));
            daemon_roots.insert(daemon.describe(), roots);
        }
        daemon_text.push_str("=== all\n");
        ctx.evidence(
            "socket_files",
            json!({"agent": in_agent.stdout.lines().collect::<Vec<_>>(), "abstract": abstract_sockets.stdout.lines().collect::<Vec<_>>(), "daemons": daemon_text.lines().collect::<Vec<_>>(), "daemon_roots": daemon_roots}),
        );
        wrong.extend(sockets::judge_daemon_socket_files(&daemon_text));
        // A Docker API seen elsewhere fails the check. With none seen, a search that did not
        // find the private socket answering (its control), or had no daemon or mount table to
        // search by, is no evidence that none answers: not judged.
        let (found, unseen) = sockets::found_and_unseen(wrong);
        if found.is_empty() && !unseen.is_empty() {
            not_judged(
                &ONE_SOCKET,
                format!(
                    "the socket search is no evidence that no other socket file answers: {}",
                    unseen.join("; ")
                ),
            );
        } else {
            promise(found.is_empty(), &ONE_SOCKET, || {
                found
                    .iter()
                    .chain(&unseen)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            })?;
        }

        ctx.step("every listening socket in the Pod's network namespace");
        // Every family's table read whole by the agent: the loopback control port must be in
        // the same listing (its positive control), and nothing else may listen on TCP or UDP
        // but the backend's own plumbing (the local engine's embedded DNS on the run's
        // network), which is left out, and shown.
        let net = session
            .agent_sh(&sockets::netns_probe("/proc/net"), Duration::from_secs(20))
            .await?;
        let tables = sockets::Tables::parse(&net.stdout);
        let listeners: Vec<String> = tables.listeners().map(sockets::Socket::describe).collect();
        ctx.evidence("listeners", &listeners);
        let plumbing = ctx.backend().plumbing_listeners();
        ctx.evidence("backend_plumbing_excluded", &plumbing);
        let plumbing: Vec<String> = plumbing.into_iter().map(|(address, _)| address).collect();
        let mut wrong = sockets::judge_pod_listeners(&tables, &control_port(), &plumbing);
        if !net.success() {
            wrong.push(format!("the listing failed: {}", net.summary()));
        }
        // Every TCP listener that fails the check, whatever process holds it, asked from the
        // agent whether it is a Docker API: the diagnosis says which one serves the daemon.
        let foreign: Vec<String> = tables
            .listeners()
            .filter(|s| s.family.starts_with("tcp") && s.local != control_port())
            .map(|s| s.local.clone())
            .filter(|local| wrong.iter().any(|w| w.ends_with(&format!(" {local}"))))
            .collect();
        if !foreign.is_empty() {
            let asked = session
                .agent_sh(
                    &sockets::ask_addresses_probe(&foreign),
                    Duration::from_secs(20 + 20 * foreign.len() as u64),
                )
                .await?;
            ctx.evidence(
                "listeners_asked_from_the_agent",
                asked.stdout.lines().collect::<Vec<_>>(),
            );
            wrong.extend(sockets::docker_apis_among(&asked.stdout));
        }
        promise(wrong.is_empty(), &NO_TCP, || wrong.join("; "))?;

        ctx.step(
            "the daemon's sockets and configured hosts, and every TCP listener of its container",
        );
        // Each daemon's configuration file, as it names it (absent: the default file, which
        // dockerd does without; a file named on its command line must be there).
        let mut config_hosts = BTreeMap::new();
        for daemon in &daemons {
            let (_, file) = daemon.configured();
            let named = daemon.argv.iter().any(|a| a.starts_with("--config-file"));
            let read = session
                .in_daemon(
                    &[
                        "sh",
                        "-c",
                        "if [ -e \"$1\" ]; then echo '#present'; cat \"$1\"; else echo '#absent'; fi",
                        "sh",
                        &file,
                    ],
                    Duration::from_secs(20),
                )
                .await?;
            let text = read.stdout_text();
            let hosts = match text.split_once('\n') {
                _ if !read.success() => Err(format!("could not be read: {}", read.exit_text())),
                Some(("#absent", _)) if !named => Ok(Vec::new()),
                Some(("#absent", _)) => Err("is named on the command line but missing".into()),
                Some(("#present", body)) => sockets::config_hosts(body),
                _ => Err(format!(
                    "the probe said neither present nor absent: {text:?}"
                )),
            };
            config_hosts.insert(daemon.pid, hosts);
        }
        ctx.evidence(
            "daemons",
            daemons
                .iter()
                .map(|d| {
                    json!({
                        "pid": d.pid,
                        "comm": d.comm,
                        "argv": d.argv,
                        "configured_hosts": d.configured().0,
                        "config_file": d.configured().1,
                        "config_file_hosts": match config_hosts.get(&d.pid) {
                            Some(Ok(hosts)) => json!(hosts),
                            Some(Err(why)) => json!({"error": why}),
                            None => json!(null),
                        },
                        "sockets_held": d.held().iter().map(|s| format!("{}{}", s.describe(), if s.listening { " (listening)" } else { "" })).collect::<Vec<_>>(),
                    })
                })
                .collect::<Vec<_>>(),
        );
        // Every TCP listener a process of the container holds, in whatever network namespace
        // (one of its own: `unshare --net`), asked whether it is a Docker API.
        let listeners = sockets::held_tcp_listeners(&processes);
        let asked = session
            .in_daemon(
                &["sh", "-c", &sockets::ask_listeners_probe(&listeners)],
                Duration::from_secs(30 + 20 * listeners.len() as u64),
            )
            .await?;
        ctx.evidence(
            "daemon_container_tcp_listeners",
            json!({"held": listeners.iter().map(|l| format!("{} ({}) tcp {}", l.pid, l.comm, l.local)).collect::<Vec<_>>(), "asked": asked.stdout_text().lines().collect::<Vec<_>>()}),
        );
        let mut wrong = sockets::judge_daemons(&daemons, complete, &config_hosts);
        let (asked_wrong, untold) =
            sockets::judge_asked_listeners(&listeners, &asked.stdout_text());
        wrong.extend(asked_wrong);
        if !probe.success() {
            wrong.push(format!(
                "the daemon's socket listing failed ({}): {}",
                probe.exit_text(),
                probe.stderr_text().trim()
            ));
        }
        // An HTTP server that may be a daemon refusing this client is no evidence either way.
        if wrong.is_empty() && !untold.is_empty() {
            not_judged(
                &NO_TCP_CONFIG,
                format!(
                    "a listener could not be told apart from a Docker API: {}",
                    untold.join("; ")
                ),
            );
        } else {
            promise(wrong.is_empty(), &NO_TCP_CONFIG, || {
                wrong
                    .iter()
                    .chain(&untold)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            })?;
        }

        ctx.step("the agent's identity");
        let identity = session.agent()?.identity().await?;
        ctx.evidence("identity", &identity);
        let field = |k: &str| {
            identity
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let all_1000 = |k: &str| {
            let ids = field(k);
            !ids.is_empty() && ids.split_whitespace().all(|u| u == "1000")
        };
        // The template drops ALL: nothing effective, permitted or left in the bounding set
        // (a capability added back to a non-root container lands in the bounding set only).
        let no_caps = ["capeff", "capprm", "capbnd"]
            .iter()
            .all(|k| !field(k).is_empty() && field(k).trim_start_matches('0').is_empty());
        let token = session
            .agent_sh(
                "ls -A /var/run/secrets/kubernetes.io/serviceaccount /run/secrets/kubernetes.io/serviceaccount 2>/dev/null; grep -i serviceaccount /proc/self/mountinfo || true",
                Duration::from_secs(20),
            )
            .await?;
        ctx.evidence("service_account_token", token.stdout.trim());
        promise(
            all_1000("uid")
                && all_1000("gid")
                && no_caps
                && field("nonewprivs") == "1"
                && field("seccomp") == "2"
                && token.success()
                && token.stdout.trim().is_empty(),
            &AGENT,
            || {
                format!(
                    "{identity}; service-account mounts: {:?}",
                    token.stdout.trim()
                )
            },
        )?;

        ctx.step("no host path or namespace in the running Pod");
        let sharing = session.backend().host_sharing(&session.pod).await?;
        let nested = session
            .agent_sh("docker info --format '{{.ID}}'", Duration::from_secs(30))
            .await?;
        // The daemon the agent reaches, asked from inside the companion on the same socket:
        // with a dockerd of the companion holding that socket (the step above), the agent's
        // daemon is the Pod's own, on every backend.
        let own = session
            .in_daemon(
                &[
                    "docker",
                    "-H",
                    "unix:///run/docker/docker.sock",
                    "info",
                    "--format",
                    "{{.ID}}",
                ],
                Duration::from_secs(30),
            )
            .await?;
        let socket_held = daemons.iter().any(|d| {
            d.held()
                .iter()
                .any(|s| s.family == "unix" && s.listening && s.local == sockets::DAEMON_SOCKET)
        });
        // Locally the engine that runs the Pod is this host's: its ID must differ too. On a
        // cluster the node's runtime is no Docker daemon the agent could reach by an ID.
        let host = match (ctx.config().backend, ctx.host_engine()) {
            (BackendKind::Local, Some(engine)) => Some(
                engine
                    .daemon_id()
                    .await
                    .map_err(|e| kandev_harness::error_chain(e.as_ref())),
            ),
            (BackendKind::Local, None) => {
                Some(Err("the local backend has no engine to ask".to_owned()))
            }
            _ => None,
        };
        ctx.evidence("running_pod_host_sharing", &sharing);
        ctx.evidence(
            "daemon_ids",
            json!({"agent": nested.stdout.trim(), "companion_on_its_socket": own.stdout_text().trim(), "companion_dockerd_holds_the_socket": socket_held, "engine_running_the_pod": host}),
        );
        promise(
            sharing.host_paths.is_empty() && sharing.host_namespaces.is_empty(),
            &NO_HOST,
            || {
                format!(
                    "the running Pod mounts host paths {:?} and joins host namespaces {:?}",
                    sharing.host_paths, sharing.host_namespaces
                )
            },
        )?;
        let agent_id = nested.stdout.trim().to_owned();
        let companion_id = own.success().then(|| own.stdout_text().trim().to_owned());
        promise(
            is_pods_own_daemon(
                nested.success().then_some(agent_id.as_str()),
                companion_id.as_deref(),
                socket_held,
                host.as_ref().map(|h| h.as_deref().map_err(String::as_str)),
            ),
            &NO_HOST,
            || {
                format!(
                    "the agent's daemon {agent_id:?} is not shown to be the Pod's own: from inside the companion the socket answers {:?} ({}), a dockerd of the companion holds it: {socket_held}, the engine that runs the Pod is {}",
                    own.stdout_text().trim(),
                    own.exit_text(),
                    match &host {
                        None => "no daemon (a node's runtime)".to_owned(),
                        Some(Ok(id)) => id.clone(),
                        Some(Err(why)) => format!("unread ({why})"),
                    }
                )
            },
        )?;
        Ok(Verdict::Passed)
    })
}

#[cfg(test)]
mod tests {
    /// The second half of no_host_access on every backend: the same ID from the agent and
    /// from the companion on its own socket, which its dockerd holds; any probe that failed
    /// (no ID), a socket no dockerd of the companion holds (a proxy), or the engine running
    /// the Pod's ID fails it.
    #[test]
    fn the_agents_daemon_is_the_pods_own_only_on_all_the_evidence() {
        use super::is_pods_own_daemon as own;
        assert!(own(Some("A"), Some("A"), true, None));
        assert!(own(Some("A"), Some("A"), true, Some(Ok("HOST"))));
        assert!(!own(Some("A"), Some("A"), true, Some(Ok("A"))));
        // Locally the engine's ID is part of the evidence: unread, it is no "not the engine".
        assert!(!own(
            Some("A"),
            Some("A"),
            true,
            Some(Err("engine info: refused"))
        ));
        assert!(!own(Some("A"), Some("A"), false, None));
        assert!(!own(Some("A"), Some("B"), true, None));
        assert!(!own(None, Some("A"), true, None));
        assert!(!own(Some("A"), None, true, None));
        assert!(!own(Some(""), Some(""), true, None));
    }

    #[test]
    fn parses_proc_net_tcp() {
        let text = "  sl  local_address rem_address   st\n   0: 0100007F:223D 00000000:0000 0A 0\n   1: 00000000:0947 00000000:0000 0A 0\n   2: 0100007F:223D 0100007F:9C40 01 0\n";
        assert_eq!(
            super::tcp_listeners(text),
            vec!["127.0.0.1:8765".to_string(), "0.0.0.0:2375".to_string()]
        );
    }
}
