//! `isolation::cross_session` — two concurrent sessions have distinct daemons: different
//! daemon IDs; a container, image, volume and network created in one are invisible to the
//! other; neither daemon is reachable from the other Pod; the workspaces are separate.
//!
//! Can fail when two Pods share one daemon (a shared host socket folder, a shared data root),
//! when one session's objects show up in the other (two daemons on one containerd), when a
//! daemon answers over the network (on any port the peer listens on, and any its NAT table
//! forwards elsewhere: every one is asked), or when the workspaces are shared (a companion
//! syncing `/workspace` with a host folder: session B looks for A's marker over a short
//! window).

use crate::daemon::socket_only::sockets;
use crate::support::docker_ping::{ANSWERED, Ping, ping_answer, ping_script};
use crate::support::{build_workload, daemon_id, probe_tag, require_success};
use kandev_harness::pod::template::AGENTCTL_PORT;
use kandev_harness::runner::{
    Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, broken, not_judged, promise,
};
use kandev_harness::session::SessionOptions;
use serde_json::json;
use std::time::Duration;

const DISTINCT: Check = Check {
    id: "distinct_daemons",
    promise: "two sessions have distinct daemon IDs",
    twin: Twin::Template("shared-host-socket"),
};
const INVISIBLE: Check = Check {
    id: "objects_invisible",
    promise: "containers, images, volumes and networks of one session are invisible to the other",
    twin: Twin::Template("daemons-share-containerd"),
};
const UNREACHABLE: Check = Check {
    id: "daemons_unreachable",
    promise: "neither session can reach the other's daemon (on any TCP port the peer listens on or its NAT table forwards, enumerated from its own tables)",
    twin: Twin::Template("daemon-tcp-listener"),
};
const WORKSPACES: Check = Check {
    id: "workspaces_separate",
    promise: "the two sessions' workspaces are separate",
    twin: Twin::Template("daemon-syncs-workspace-to-host"),
};

/// How long session B keeps looking for session A's marker, and how often, at the end of the
/// scenario (A writes it at the start): a workspace shared asynchronously (a sync loop, a
/// network filesystem's attribute cache) shows it late.
const MARKER_WINDOW: Duration = Duration::from_secs(2);
const MARKER_INTERVAL: Duration = Duration::from_millis(200);

/// The script the companion runs to show its network namespace's NAT tables, the Pod's: a
/// port forwarded by DNAT or REDIRECT has no listener in the Pod's socket tables (the listener
/// is in another namespace, a nested container's as the nested daemon publishes one), yet the
/// peer reaches it at the Pod's IP. Every `*-save` there is (the legacy and the nft backends
/// each show only their own rules) and `nft list ruleset` (native nftables rules, which
/// neither shows): each after `== NAME`, or `== NAME failed`; then `== end`.
pub fn nat_probe() -> String {
    r#"for t in iptables-legacy-save iptables-nft-save iptables-save ip6tables-legacy-save ip6tables-nft-save ip6tables-save; do
  command -v "$t" >/dev/null 2>&1 || continue
  if out=$("$t" -t nat 2>&1); then echo "== $t"; printf '%s\n' "$out"; else echo "== $t failed: $out" | head -n 3; fi
done
if command -v nft >/dev/null 2>&1; then
  if out=$(nft list ruleset 2>&1); then echo "== nft"; printf '%s\n' "$out"; else echo "== nft failed: $out" | head -n 3; fi
fi
echo "== end"
"#
    .to_owned()
}

/// The ports of one forwarding rule's port list (`a,b:c` for iptables, `a` `b-c` for nft).
fn port_list<'a>(
    specs: impl Iterator<Item = &'a str>,
    range: char,
    rule: &str,
    ports: &mut std::collections::BTreeSet<u16>,
) -> Result<(), String> {
    for spec in specs {
        let (low, high) = spec.split_once(range).unwrap_or((spec, spec));
        let (Ok(low), Ok(high)) = (low.parse::<u16>(), high.parse::<u16>()) else {
            return Err(format!("a rule's ports cannot be read: {rule}"));
        };
        if high.saturating_sub(low) > 64 {
            return Err(format!(
                "a rule forwards {low} to {high}, too many to ask: {rule}"
            ));
        }
        ports.extend(low..=high);
    }
    Ok(())
}

/// The destination ports [`nat_probe`]'s tables forward (DNAT or REDIRECT rules' `--dport`,
/// `--dports` and their ranges; nftables' `dport`), or why they cannot be told: no NAT table
/// of the peer's address family read (`v6`; its `*nat` header is the read's control), legacy
/// rules only a tool that did not run shows, a rule that forwards every port (or all but
/// some), ports it does not name, or the probe cut short.
pub fn nat_forwarded_ports(text: &str, v6: bool) -> Result<Vec<u16>, String> {
    if !text.lines().any(|l| l.trim() == "== end") {
        return Err("the NAT tables' listing did not reach its end".into());
    }
    let family = if v6 { "ip6tables" } else { "iptables" };
    let (mut section, mut read_family, mut legacy_read, mut legacy_hidden) =
        ("", false, false, false);
    let mut ports = std::collections::BTreeSet::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("== ") {
            section = name;
            continue;
        }
        let rule = line.trim();
        if rule == "*nat" && section.starts_with(family) {
            read_family = true;
            legacy_read |= section.contains("legacy");
        }
        legacy_hidden |= rule.contains("iptables-legacy tables present");
        let words: Vec<&str> = rule.split_whitespace().collect();
        if section == "nft" {
            if !words.iter().any(|w| *w == "dnat" || *w == "redirect") {
                continue;
            }
            let Some(at) = words.iter().position(|w| *w == "dport") else {
                return Err(format!(
                    "an nftables rule forwards ports it does not name: {rule}"
                ));
            };
            if words.get(at + 1) == Some(&"!=") {
                return Err(format!(
                    "an nftables rule forwards every port but some: {rule}"
                ));
            }
            let named = words[at + 1..]
                .iter()
                .take_while(|w| !matches!(**w, "dnat" | "redirect" | "counter" | "meta"))
                .map(|w| w.trim_matches(|c| c == '{' || c == '}' || c == ','))
                .filter(|w| !w.is_empty());
            port_list(named, '-', rule, &mut ports)?;
            continue;
        }
        let target = words.windows(2).find(|w| w[0] == "-j").map(|w| w[1]);
        if !rule.starts_with("-A ") || !matches!(target, Some("DNAT" | "REDIRECT")) {
            continue;
        }
        let given: Vec<usize> = (0..words.len())
            .filter(|i| words[*i] == "--dport" || words[*i] == "--dports")
            .collect();
        if given.is_empty() {
            return Err(format!("a rule forwards every port: {rule}"));
        }
        for i in given {
            if i > 0 && words[i - 1] == "!" {
                return Err(format!("a rule forwards every port but some: {rule}"));
            }
            let list = words.get(i + 1).copied().unwrap_or_default();
            port_list(list.split(','), ':', rule, &mut ports)?;
        }
    }
    if !read_family {
        let said: Vec<&str> = text.lines().filter(|l| l.starts_with("== ")).collect();
        return Err(format!(
            "no {family} NAT table was read ({})",
            said.join("; ")
        ));
    }
    if legacy_hidden && !legacy_read {
        return Err("legacy iptables rules are present that only iptables-legacy-save shows, and it did not run".into());
    }
    Ok(ports.into_iter().collect())
}

pub fn scenario() -> Scenario {
    Scenario {
        name: "isolation::cross_session",
        promise: "two concurrent sessions have distinct daemon IDs; containers, images and volumes of one are invisible to the other; neither can reach the other's daemon; workspaces are separate",
        checks: &[DISTINCT, INVISIBLE, UNREACHABLE, WORKSPACES],
        timeout: Duration::from_secs(300),
        starts_first: false,
        run,
    }
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        ctx.step("launch two sessions at once");
        let mut sessions = ctx
            .launch_many(vec![SessionOptions::default(), SessionOptions::default()])
            .await?;
        let (Some(b), Some(a)) = (sessions.pop(), sessions.pop()) else {
            anyhow::bail!("two sessions were launched")
        };

        ctx.step("session A writes a marker into its workspace");
        let marker = format!(
            "/workspace/isolation-marker-{}",
            kandev_harness::pod::identity::random_hex(4)
        );
        let wrote = a
            .agent_sh(
                &format!("echo a > {marker} && test -s {marker} && echo written"),
                Duration::from_secs(10),
            )
            .await?;
        require_success(&wrote, &WORKSPACES, "session A writes its marker")?;
        if wrote.stdout.trim() != "written" {
            return Err(broken(
                &WORKSPACES,
                format!(
                    "session A's marker {marker} is not in its own workspace: {}",
                    wrote.summary()
                ),
            ));
        }
        let written = std::time::Instant::now();

        ctx.step("daemon IDs");
        let (id_a, id_b) = (
            daemon_id(&a, &DISTINCT).await?,
            daemon_id(&b, &DISTINCT).await?,
        );
        ctx.evidence("daemon_ids", json!({"a": id_a, "b": id_b}));
        promise(id_a != id_b, &DISTINCT, || {
            format!("both sessions report daemon {id_a}")
        })?;

        ctx.step("objects of one session are invisible to the other");
        let tag = probe_tag(ctx, "isolation");
        require_success(
            &build_workload(&a, &tag).await?,
            &INVISIBLE,
            "build in session A",
        )?;
        let suffix = kandev_harness::pod::identity::random_hex(4);
        let create = format!(
            "set -e; docker volume create iso-vol-{suffix} >/dev/null; docker network create iso-net-{suffix} >/dev/null; docker create --name iso-ctr-{suffix} --network none {tag} sleep 60 >/dev/null; echo created"
        );
        let created = a.agent_sh(&create, Duration::from_secs(60)).await?;
        require_success(&created, &INVISIBLE, "create objects in session A")?;
        let probe = format!(
            "for o in 'container inspect iso-ctr-{suffix}' 'image inspect {tag}' 'volume inspect iso-vol-{suffix}' 'network inspect iso-net-{suffix}'; do if docker $o >/dev/null 2>&1; then echo \"visible: $o\"; else echo \"absent: $o\"; fi; done"
        );
        let in_a = a.agent_sh(&probe, Duration::from_secs(60)).await?;
        let in_b = b.agent_sh(&probe, Duration::from_secs(60)).await?;
        ctx.evidence("seen_from_a", in_a.stdout.lines().collect::<Vec<_>>());
        ctx.evidence("seen_from_b", in_b.stdout.lines().collect::<Vec<_>>());
        promise(
            in_a.stdout.matches("visible:").count() == 4,
            &INVISIBLE,
            || {
                format!(
                    "session A does not see its own objects: {}",
                    in_a.stdout.trim()
                )
            },
        )?;
        let leaked: Vec<&str> = in_b
            .stdout
            .lines()
            .filter(|l| l.starts_with("visible:"))
            .collect();
        promise(leaked.is_empty(), &INVISIBLE, || {
            format!("session B sees session A's {leaked:?}")
        })?;

        ctx.step("neither daemon is reachable from the other Pod");
        let backend = ctx.backend();
        let mut ips = Vec::new();
        for session in [&a, &b] {
            let ip = backend
                .pod_ip(&session.pod)
                .await?
                .filter(|ip| !ip.is_empty());
            ips.push(ip.ok_or_else(|| {
                broken(
                    &UNREACHABLE,
                    format!(
                        "the backend reports no IP for Pod {}: its daemon's reachability over the network cannot be probed",
                        session.pod.name
                    ),
                )
            })?);
        }
        ctx.evidence("pod_ips", json!({"a": ips[0], "b": ips[1]}));
        // Every TCP port the peer listens on, from the peer's own socket tables (read whole,
        // the control port seen in them as the listing's positive control), not a list of
        // known ports: a daemon on 2377 is as reachable as one on 2375.
        let mut peer_ports = Vec::new();
        for session in [&a, &b] {
            let net = session
                .agent_sh(&sockets::netns_probe("/proc/net"), Duration::from_secs(20))
                .await?;
            let tables = sockets::Tables::parse(&net.stdout);
            let mut unusable = tables.incomplete();
            if !net.success() {
                unusable.push(format!("the listing failed: {}", net.summary()));
            }
            let ports = sockets::tcp_listening_ports(&tables);
            if !ports.iter().any(|p| i32::from(*p) == AGENTCTL_PORT) {
                unusable.push(format!(
                    "the listing does not show the control port {AGENTCTL_PORT}: it is no evidence of what else listens"
                ));
            }
            if !unusable.is_empty() {
                return Err(broken(
                    &UNREACHABLE,
                    format!(
                        "the listening ports of Pod {} could not be enumerated: {}",
                        session.pod.name,
                        unusable.join("; ")
                    ),
                ));
            }
            peer_ports.push(ports);
        }
        ctx.evidence(
            "listening_ports",
            json!({"a": peer_ports[0], "b": peer_ports[1]}),
        );
        let mut reached = Vec::new();
        let mut unasked = Vec::new();
        // And every port the peer's NAT table forwards, which no socket table shows.
        let mut forwarded = Vec::new();
        for ((session, ports), ip) in [&a, &b].into_iter().zip(peer_ports.iter_mut()).zip(&ips) {
            let nat = session
                .in_daemon(&["sh", "-c", &nat_probe()], Duration::from_secs(20))
                .await?;
            let text = format!("{}{}", nat.stdout_text(), nat.stderr_text());
            match nat_forwarded_ports(&text, ip.contains(':')) {
                Ok(more) => {
                    forwarded.push(json!(more));
                    ports.extend(more);
                }
                Err(why) => {
                    forwarded.push(json!(why));
                    unasked.push(format!(
                        "the ports Pod {}'s NAT table forwards could not be told: {why}",
                        session.pod.name
                    ));
                }
            }
        }
        ctx.evidence(
            "nat_forwarded_ports",
            json!({"a": forwarded[0], "b": forwarded[1]}),
        );
        let mut attempts = Vec::new();
        for (from, to_ip, ports) in [(&b, &ips[0], &peer_ports[0]), (&a, &ips[1], &peer_ports[1])] {
            // An IPv6 Pod IP (a single-stack IPv6 cluster) is bracketed in a URL.
            let to_ip = &match to_ip.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V6(v6)) => format!("[{v6}]"),
                _ => to_ip.to_string(),
            };
            for &port in ports {
                let attempt = from
                    .agent_sh(
                        &format!("DOCKER_HOST=tcp://{to_ip}:{port} timeout 5 docker ps -aq"),
                        Duration::from_secs(20),
                    )
                    .await?;
                attempts.push(json!({"from": from.pod.name, "to": format!("{to_ip}:{port}"), "result": attempt.summary()}));
                if attempt.success() {
                    reached.push(format!(
                        "{} reached tcp://{to_ip}:{port} and listed its containers [{}]",
                        from.pod.name,
                        attempt
                            .stdout
                            .split_whitespace()
                            .collect::<Vec<_>>()
                            .join(" ")
                    ));
                    continue;
                }
                // Something answered the CLI over HTTP with an error: a daemon that refuses
                // this identity (an authorization plugin) is as reachable as one that lists,
                // so its /_ping decides, not the CLI's exit.
                if attempt.stderr.contains(ANSWERED) {
                    let ping = from
                        .agent_sh(&ping_script(to_ip, port), Duration::from_secs(20))
                        .await?;
                    let text = format!("{}{}", ping.stdout, ping.stderr);
                    attempts.push(json!({"from": from.pod.name, "to": format!("{to_ip}:{port}"), "ping": text.trim()}));
                    match ping_answer(&attempt.stderr, ping.exit_code, &text) {
                        Ping::DockerApi(sign) => reached.push(format!(
                            "{} reached tcp://{to_ip}:{port}: a Docker API ({sign}) that refused the listing ({})",
                            from.pod.name,
                            attempt.stderr.lines().find(|l| l.contains(ANSWERED)).unwrap_or_default().trim()
                        )),
                        Ping::Other => {}
                        Ping::Unanswered(why) => unasked.push(format!(
                            "tcp://{to_ip}:{port} answered the Docker CLI from {} with an HTTP error, and its /_ping gave no answer to judge: {why}",
                            from.pod.name
                        )),
                    }
                    continue;
                }
                // Not a Docker API there: the CLI tried and was refused, dropped (the 5 s
                // bound) or answered by something else (the control port, a loopback-only
                // listener). A probe that could not run (no CLI, no `timeout`) proves nothing;
                // the CLI itself reached its own daemon in the daemon-ID step above.
                let probe_ran = attempt.exit_code == Some(124)
                    || (attempt.exit_code == Some(1) && !attempt.stderr.trim().is_empty());
                if !probe_ran {
                    ctx.evidence("probes", &attempts);
                    return Err(broken(
                        &UNREACHABLE,
                        format!(
                            "the probe of tcp://{to_ip}:{port} from {} could not run: {}",
                            from.pod.name,
                            attempt.summary()
                        ),
                    ));
                }
            }
            let sockets = from
                .agent_sh("ls -A /run/docker", Duration::from_secs(10))
                .await?;
            ctx.evidence(
                &format!("socket_folder_{}", from.pod.name),
                sockets.stdout.split_whitespace().collect::<Vec<_>>(),
            );
        }
        ctx.evidence("probes", &attempts);
        if reached.is_empty() && !unasked.is_empty() {
            // Nothing seen reached, but a listener that answered could not be told apart
            // from a Docker API: no pass on what was not seen.
            not_judged(&UNREACHABLE, unasked.join("; "));
        } else {
            promise(reached.is_empty(), &UNREACHABLE, || reached.join("; "))?;
        }

        ctx.step("workspaces are separate: session B looks for session A's marker");
        // Sharing can be asynchronous (a sync loop, a network filesystem's attribute cache):
        // A wrote its marker before the other checks, and B looks again and again over a
        // window at the end, not once right after A's write.
        let looks = MARKER_WINDOW.as_millis() / MARKER_INTERVAL.as_millis() + 1;
        let interval = format!("{:.3}", MARKER_INTERVAL.as_secs_f64());
        let since_written = written.elapsed();
        let looked = std::time::Instant::now();
        let seen = b
            .agent_sh(
                &format!(
                    "i=1; while :; do if test -e {marker}; then echo \"present at look $i\"; exit 0; fi; [ $i -lt {looks} ] || break; i=$((i + 1)); sleep {interval}; done; echo absent"
                ),
                MARKER_WINDOW + Duration::from_secs(10),
            )
            .await?;
        // The whole call, exec round trip included.
        let exec_ms = looked.elapsed().as_millis();
        ctx.evidence(
            "marker_in_b",
            json!({
                "marker": marker,
                "result": seen.stdout.trim(),
                "looks": looks,
                "interval_ms": MARKER_INTERVAL.as_millis(),
                "window_ms": MARKER_WINDOW.as_millis(),
                "exec_ms": exec_ms,
                "since_written_ms": since_written.as_millis() as u64,
            }),
        );
        require_success(&seen, &WORKSPACES, "session B looks for the marker")?;
        promise(seen.stdout.trim() == "absent", &WORKSPACES, || {
            format!(
                "session B sees session A's {marker} ({}, looking every {} ms for up to {} ms, from {} ms after A wrote it)",
                seen.stdout.trim(),
                MARKER_INTERVAL.as_millis(),
                MARKER_WINDOW.as_millis(),
                since_written.as_millis()
            )
        })?;
        Ok(Verdict::Passed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::docker_ping::PythonServer;
    use std::process::Command;

    /// An HTTP server on this host: a daemon behind an authorization plugin (`authz`: `/_ping`
    /// answers, everything else is denied; `deny-all`: `/_ping` denied too) or a plain file
    /// server (`files`: 404 everywhere); its port.
    fn server(mode: &str) -> PythonServer {
        let script = r#"
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if sys.argv[1] == "authz" and self.path.endswith("/_ping"):
            self.send_response(200); self.send_header("Api-Version", "1.41"); self.send_header("Content-Length", "2"); self.end_headers(); self.wfile.write(b"OK"); return
        if sys.argv[1] in ("authz", "deny-all"):
            body = json.dumps({"message": "authorization denied by plugin authz-broker: no listing"}).encode()
            self.send_response(403); self.send_header("Content-Type", "application/json")
        else:
            body = b"<html>File not found</html>"
            self.send_response(404); self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    do_HEAD = do_GET
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;
        PythonServer::start(script, mode)
    }

    #[test]
    fn every_port_a_nat_rule_forwards_is_asked_and_one_that_forwards_all_is_told() {
        let table = |rules: &str| {
            format!("== iptables-save\n*nat\n:PREROUTING ACCEPT [0:0]\n{rules}COMMIT\n== end\n")
        };
        let rules = "-A PREROUTING -p tcp -m tcp --dport 2377 -j DNAT --to-destination 169.254.77.2:2377\n\
            -A DOCKER ! -i docker0 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 172.17.0.2:80\n\
            -A PREROUTING -p tcp -m multiport --dports 9000,9100:9101 -j REDIRECT --to-ports 2375\n\
            -A POSTROUTING -s 172.17.0.0/16 ! -o docker0 -j MASQUERADE\n";
        let read = |text: &str| nat_forwarded_ports(text, false);
        assert_eq!(read(&table(rules)), Ok(vec![2377, 8080, 9000, 9100, 9101]));
        assert_eq!(read(&table("")), Ok(vec![]));
        let said = |text: String, words: &str| {
            let answer = read(&text);
            assert!(
                answer.as_ref().is_err_and(|e| e.contains(words)),
                "{answer:?}"
            );
        };
        said(
            table("-A PREROUTING -p tcp -j DNAT --to-destination 10.0.0.9\n"),
            "every port",
        );
        // A negation forwards every port but those named.
        said(
            table("-A PREROUTING -p tcp -m tcp ! --dport 22 -j DNAT --to-destination 10.0.0.9\n"),
            "every port but some",
        );
        // Native nftables rules, which no *-save shows.
        let nft = |rule: &str| {
            format!(
                "== iptables-save\n*nat\nCOMMIT\n== nft\ntable ip nat {{\n  chain p {{\n    {rule}\n  }}\n}}\n== end\n"
            )
        };
        assert_eq!(
            read(&nft("tcp dport { 2377, 2380-2381 } dnat to 10.0.0.9")),
            Ok(vec![2377, 2380, 2381])
        );
        said(
            nft("tcp dport != 22 dnat to 10.0.0.9"),
            "every port but some",
        );
        said(nft("ip daddr 10.0.0.1 dnat to 10.0.0.9"), "does not name");
        // Legacy rules only iptables-legacy-save shows, when it did not run.
        said("== iptables-save\n# Warning: iptables-legacy tables present, use iptables-legacy-save to see them\n*nat\nCOMMIT\n== end\n".into(), "legacy");
        // No table of the peer's family read is no evidence of none, nor a listing cut short.
        said(
            "== iptables-save failed: Permission denied\n== end\n".into(),
            "no iptables NAT table was read",
        );
        let v4_only = table("");
        assert!(nat_forwarded_ports(&v4_only, true).is_err_and(|e| e.contains("ip6tables")));
        assert!(read("== iptables-save\n*nat\n").is_err());
    }

    /// The NAT probe through a real shell in a fresh network namespace (`unshare --net`) with a
    /// DNAT rule of its own: the forwarded port is found, where no socket table shows it.
    #[test]
    #[ignore = "needs root (unshare) and iptables: bash harness/scripts/ensure-test-deps.sh, then cargo test --workspace -- --include-ignored"]
    fn a_port_forwarded_by_dnat_in_a_namespace_is_found() {
        let script = format!(
            "iptables -t nat -A PREROUTING -p tcp --dport 2377 -j DNAT --to-destination 169.254.77.2:2377 && {}",
            nat_probe()
        );
        let out = Command::new("unshare")
            .args(["--net", "sh", "-c", &script])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            nat_forwarded_ports(&text, false),
            Ok(vec![2377]),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The probe as the scenario runs it, through a real shell with the real Docker CLI: a
    /// daemon that refuses the listing is still a Docker API by its /_ping, a file server that
    /// answers the CLI with its 404 page is not.
    #[test]
    #[ignore = "needs python3 and the Docker CLI: bash harness/scripts/ensure-test-deps.sh, then cargo test --workspace -- --include-ignored"]
    fn a_daemon_refusing_the_listing_is_reached_and_a_file_server_is_not() {
        // A plugin that lets /_ping through, one that refuses it too (default deny), none.
        for (mode, expect_api) in [("authz", true), ("deny-all", true), ("files", false)] {
            let server = server(mode);
            let port = server.port;
            let cli = Command::new("sh")
                .args([
                    "-c",
                    &format!("DOCKER_HOST=tcp://127.0.0.1:{port} timeout 5 docker ps -aq"),
                ])
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&cli.stderr);
            assert!(
                !cli.status.success() && stderr.contains(ANSWERED),
                "{stderr}"
            );
            let ping = Command::new("sh")
                .args(["-c", &ping_script("127.0.0.1", port)])
                .output()
                .unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&ping.stdout),
                String::from_utf8_lossy(&ping.stderr)
            );
            let answer = ping_answer(&stderr, ping.status.code(), &text);
            drop(server);
            assert_eq!(
                matches!(answer, Ping::DockerApi(_)),
                expect_api,
                "{mode}: {answer:?} from {text}"
            );
        }
    }
}
