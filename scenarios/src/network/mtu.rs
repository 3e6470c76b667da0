//! `network::mtu` — nested bridges (the default bridge and a user-defined network) have an
//! MTU no higher than the Pod's interface, and a large transfer (64 MiB over HTTPS) from a
//! nested container to a peer outside the Pod completes within a bound with a matching
//! digest.
//!
//! The Pod's MTU is the network's: on a cluster the CNI's (1450 or lower on VXLAN, Geneve,
//! WireGuard), on the local backend the run's Pod network at `--pod-mtu` (default 1450).
//!
//! Can fail when the daemon's bridge MTU exceeds the Pod's (large packets are then dropped on
//! overlay networks), or when the transfer fails, stalls or corrupts data.

use crate::support::require_success;
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kandev_harness::backend::ExecRequest;
use kandev_harness::runner::{
    Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, broken, promise,
};
use kandev_harness::session::SessionOptions;
use kandev_harness::session::cleanup::CleanupTarget;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const MTU: Check = Check {
    id: "bridge_mtu",
    promise: "nested bridge MTU is no higher than the Pod interface MTU",
    twin: Twin::Template("daemon-mtu-above-pod"),
};
const TRANSFER: Check = Check {
    id: "transfer",
    promise: "a 64 MiB HTTPS transfer from a nested container to a peer outside the Pod completes with a matching digest",
    twin: Twin::Template("daemon-without-iptables"),
};
const TRANSFER_BYTES: u64 = 64 << 20;
const TRANSFER_BOUND: Duration = Duration::from_secs(120);

pub fn scenario() -> Scenario {
    Scenario {
        name: "network::mtu",
        promise: "nested bridge MTU is no higher than the Pod interface MTU; a large transfer (tens of MiB, HTTPS) from a nested container completes with a matching digest",
        checks: &[MTU, TRANSFER],
        timeout: Duration::from_secs(300),
        starts_first: false,
        run,
    }
}

/// The HTTPS peer's port.
const PEER_PORT: u16 = 8443;

/// The HTTPS peer: a Pod outside the session, serving a random file with `openssl s_server`.
/// The digest file appears whole (written aside, then renamed), before the server listens.
fn peer_pod(ctx: &Ctx) -> Pod {
    peer_pod_for(ctx.run_id(), ctx.scenario(), &ctx.images().daemon)
}

/// The peer Pod of `scenario` in `run_id`, running `image` (the daemon image: it has
/// openssl). It declares requests and limits, so that a namespace whose ResourceQuota
/// constrains CPU and memory admits it; the limits leave room for the file it writes (its
/// page cache counts) and the TLS server.
pub fn peer_pod_for(run_id: &str, scenario: &str, image: &str) -> Pod {
    let script = format!(
        "set -e; mkdir -p /srv && cd /srv && openssl req -x509 -newkey rsa:2048 -nodes -keyout k.pem -out c.pem -subj /CN=peer -days 1 2>/dev/null && head -c {TRANSFER_BYTES} /dev/urandom > big.bin && sha256sum big.bin > big.sha.part && mv big.sha.part big.sha && exec openssl s_server -quiet -WWW -accept {PEER_PORT} -cert c.pem -key k.pem"
    );
    Pod {
        metadata: ObjectMeta {
            name: Some(format!(
                "kandev-acceptance-peer-{}",
                kandev_harness::pod::identity::random_hex(4)
            )),
            labels: Some(kandev_harness::pod::identity::harness_labels(
                run_id, scenario,
            )),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "peer".into(),
                image: Some(image.to_owned()),
                command: Some(vec!["/bin/sh".into(), "-c".into(), script]),
                resources: Some(ResourceRequirements {
                    requests: Some(BTreeMap::from([
                        ("cpu".into(), Quantity("100m".into())),
                        ("memory".into(), Quantity("64Mi".into())),
                    ])),
                    limits: Some(BTreeMap::from([
                        ("cpu".into(), Quantity("1".into())),
                        ("memory".into(), Quantity("512Mi".into())),
                    ])),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            ..Default::default()
        }),
        status: None,
    }
}

/// The served file's digest once the peer is ready to serve it: its digest line, then its
/// `/proc/net/tcp{,6}` text with a listener on [`PEER_PORT`].
fn peer_ready(probe: &str) -> Option<String> {
    let sha = probe.split_whitespace().next()?;
    let whole = sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit());
    let listening = crate::daemon::socket_only::tcp_listeners(probe)
        .iter()
        .any(|l| l.ends_with(&format!(":{PEER_PORT}")));
    (whole && listening).then(|| sha.to_owned())
}

fn mtu_of(netinfo: &str, interface: &str) -> Option<u64> {
    let value: Value =
        serde_json::from_str(netinfo.lines().rev().find(|l| l.starts_with('{'))?).ok()?;
    value
        .pointer(&format!("/interfaces/{interface}"))
        .and_then(Value::as_u64)
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        ctx.step("launch the session and the peer outside it");
        let backend = ctx.backend();
        let peer = backend.create_helper_pod(&peer_pod(ctx)).await?;
        ctx.on_teardown(CleanupTarget::Pod(peer.clone()));
        let session = ctx.launch(SessionOptions::default()).await?;

        ctx.step("MTUs");
        let pod_mtu = session
            .agent_sh("i=$(awk '$2 == \"00000000\" {print $1; exit}' /proc/net/route); echo $i; cat /sys/class/net/$i/mtu", Duration::from_secs(10))
            .await?;
        let mut lines = pod_mtu.stdout.lines();
        let (iface, pod) = (
            lines.next().unwrap_or_default().to_owned(),
            lines.next().and_then(|m| m.trim().parse::<u64>().ok()),
        );
        let Some(pod) = pod else {
            return Err(broken(
                &MTU,
                format!(
                    "no MTU for the Pod's default-route interface: {}",
                    pod_mtu.summary()
                ),
            ));
        };
        let client = format!(
            "kandev-acceptance-tls-client:{}",
            ctx.run_id().replace('t', "-")
        );
        let net = format!("mtu-probe-{}", kandev_harness::pod::identity::random_hex(3));
        let build = format!(
            r#"set -eu
d=/workspace/.kandev-acceptance/tls-client; rm -rf "$d"; mkdir -p "$d/root"
for f in /bin/sh "$(command -v openssl)"; do
  cp --parents -L "$f" "$d/root/"
  for lib in $(ldd "$f" | awk '/=>/ {{print $3}} /ld-linux/ {{print $1}}'); do cp --parents -L "$lib" "$d/root/"; done
done
cp /opt/kandev/agentctl "$d/root/workload"
printf 'FROM scratch\nCOPY root/ /\n' > "$d/Dockerfile"
docker build -q --network none -t {client} "$d" >/dev/null
docker network create {net} >/dev/null
docker run --rm {client} /workload netinfo
docker run --rm --network {net} {client} /workload netinfo
docker run -d --rm --name {net}-docker0 --network bridge {client} /workload sleep 120 >/dev/null"#
        );
        let nested = session.agent_sh(&build, Duration::from_secs(180)).await?;
        require_success(
            &nested,
            &TRANSFER,
            "build the TLS client image and read nested MTUs",
        )?;
        // docker0 with a container attached: an empty Linux bridge reads 1500 whatever the
        // daemon configured, and carries nothing; with a port it takes its ports' MTU.
        let bridge = session
            .in_daemon(
                &["cat", "/sys/class/net/docker0/mtu"],
                Duration::from_secs(10),
            )
            .await?;
        let bridge = bridge.stdout_text().trim().parse::<u64>().ok();
        session
            .agent_sh(
                &format!("docker rm -f {net}-docker0 >/dev/null"),
                Duration::from_secs(30),
            )
            .await?;
        let mut infos = nested.stdout.lines().filter(|l| l.starts_with('{'));
        let mut default_net = infos.next().and_then(|l| mtu_of(l, "eth0"));
        let mut user_net = infos.next().and_then(|l| mtu_of(l, "eth0"));
        // A reading that did not come back (seen once in CI under load, not reproduced) is
        // taken once more from a fresh container; what came back is kept as evidence.
        let mut raw = vec![nested.stdout.clone()];
        for (reading, network) in [(&mut default_net, None), (&mut user_net, Some(&net))] {
            if reading.is_none() {
                let again = session
                    .agent_sh(
                        &format!(
                            "docker run --rm {} {client} /workload netinfo",
                            network
                                .map(|n| format!("--network {n}"))
                                .unwrap_or_default()
                        ),
                        Duration::from_secs(60),
                    )
                    .await?;
                *reading = mtu_of(&again.stdout, "eth0");
                raw.push(again.summary());
            }
        }
        let mtus = json!({"pod_interface": iface, "pod": pod, "docker0": bridge, "nested_default_bridge": default_net, "nested_user_network": user_net, "netinfo": raw});
        ctx.evidence("mtu", &mtus);
        let over: Vec<(&str, u64)> = [
            ("docker0", bridge),
            ("nested container on the default bridge", default_net),
            ("nested container on a user-defined network", user_net),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.filter(|v| *v > pod).map(|v| (k, v)))
        .collect();
        promise(
            bridge.is_some() && default_net.is_some() && user_net.is_some(),
            &MTU,
            || format!("could not read every nested MTU: {mtus}"),
        )?;
        promise(over.is_empty(), &MTU, || {
            format!("above the Pod's {pod}: {over:?}")
        })?;

        ctx.step("64 MiB over HTTPS from a nested container");
        let peer_ip = backend
            .pod_ip(&peer)
            .await?
            .ok_or_else(|| anyhow::anyhow!("the peer has no IP"))?;
        let expected = ctx
            .wait_within(
                "the HTTPS peer to be ready",
                Duration::from_secs(60),
                || async {
                    // Ready means the digest is written and the server listens: the digest
                    // file alone appears before `s_server` binds its port.
                    let probe = backend
                        .exec(
                            &peer,
                            ExecRequest::new(
                                "peer",
                                &[
                                    "/bin/sh",
                                    "-c",
                                    "cat /srv/big.sha && { cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true; }",
                                ],
                            )
                            .timeout(Duration::from_secs(10)),
                        )
                        .await?;
                    Ok(probe.success().then(|| peer_ready(&probe.stdout_text())).flatten())
                },
            )
            .await?;
        // s_client's stderr is kept: on a failed fetch it says why (a refused connection, a
        // handshake cut short); the client image is `FROM scratch`, with no file to keep it in.
        let fetch = format!(
            "docker run --rm --network {net} {client} /bin/sh -c 'printf \"GET /big.bin HTTP/1.0\\r\\n\\r\\n\" | openssl s_client -quiet -connect {peer_ip}:{PEER_PORT} | /workload http-body-digest'"
        );
        let started = Instant::now();
        let transfer = session
            .agent_sh(&fetch, TRANSFER_BOUND + Duration::from_secs(30))
            .await?;
        let elapsed = started.elapsed();
        ctx.evidence("peer", json!({"ip": peer_ip, "sha256": expected}));
        ctx.evidence("transfer", &transfer);
        ctx.evidence("elapsed_ms", elapsed.as_millis() as u64);
        require_success(&transfer, &TRANSFER, "the nested HTTPS fetch")?;
        let got: Value = transfer
            .stdout
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or(Value::Null);
        let (size, sha) = (
            got.get("size").and_then(Value::as_u64),
            got.get("sha256").and_then(Value::as_str),
        );
        let status = got
            .get("status")
            .and_then(Value::as_str)
            .unwrap_or("no HTTP status")
            .to_owned();
        ctx.evidence(
            "mib_per_s",
            (TRANSFER_BYTES as f64 / (1 << 20) as f64) / elapsed.as_secs_f64(),
        );
        promise(
            size == Some(TRANSFER_BYTES) && sha == Some(expected.as_str()),
            &TRANSFER,
            || {
                format!(
                    "received {} bytes with sha256 {} ({status}), the peer served {TRANSFER_BYTES} bytes with {expected}",
                    crate::support::or_unknown(size),
                    crate::support::or_unknown(sha)
                )
            },
        )?;
        promise(elapsed <= TRANSFER_BOUND, &TRANSFER, || {
            format!("took {elapsed:?}, bound {TRANSFER_BOUND:?}")
        })?;
        Ok(Verdict::Passed)
    })
}

#[cfg(test)]
mod tests {
    const SHA: &str = "9f2c4b1e0d3a5f6e7c8b9a0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f";

    fn probe(sha_line: &str, tcp: &str) -> String {
        format!("{sha_line}\n  sl  local_address rem_address   st\n{tcp}")
    }

    #[test]
    fn the_peer_is_ready_once_its_digest_is_whole_and_its_port_listens() {
        let listening = "   0: 00000000:20FB 00000000:0000 0A 0\n";
        assert_eq!(
            super::peer_ready(&probe(&format!("{SHA}  big.bin"), listening)),
            Some(SHA.to_owned())
        );
        // The digest written, the server not yet bound (the race CI met).
        let other_port = "   0: 00000000:0947 00000000:0000 0A 0\n";
        assert_eq!(
            super::peer_ready(&probe(&format!("{SHA}  big.bin"), other_port)),
            None
        );
        // The digest file there but still empty.
        assert_eq!(super::peer_ready(&probe("", listening)), None);
    }
}
