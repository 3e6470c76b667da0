//! `image::recipe` — the worker recipe as an artefact (AC-002.1, AC-002.3), judged from the
//! images the run uses: the worker's config (platform of the node, user 1000:1000,
//! `WORKDIR /workspace`); no credentials in the worker or daemon image (config env, labels,
//! history, and every layer's files: private keys, cloud access keys, bearer tokens, Docker
//! `auths`, `.netrc`, kubeconfig material; a finding names the layer and path, never the
//! value); the tools the recipe promises present outside `/workspace` and `/run/kandev`, with
//! their versions; every pin of `/opt/full-worker/pins.env` a digest, checksum or exact
//! version; the caches pointed under `/workspace` and created only after the repository clone
//! (the prepare flow run with a repository bundle).
//!
//! A check is judged only on what was seen: without an engine holding the images (a run
//! inside a cluster), `image_config` and `no_credentials` are `not judged`, with the reason,
//! and the checks judged in the running Pod go on; a layer store other than overlay2 leaves
//! `no_credentials` not judged (config, env and history still scanned); an image without a
//! pins file leaves `pins` not judged and the scenario `incompatible`; a pins probe that
//! failed, or a pins file that pins nothing, fails `pins`.
//!
//! Can fail when the image runs as root or elsewhere than the workspace, carries a secret,
//! lacks a tool, pins by tag, or when preparation creates the caches before the clone.
//! Image references immutable for release gating are `validate --for-release`'s and
//! `run --gate-profile release`'s (harness/src/pod/release.rs), not repeated here.

use anyhow::Context;
use kandev_credential_scan::{scan_layers, secret_in_env, secret_in_text};
use kandev_harness::runner::{
    Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, not_judged, promise,
};
use kandev_harness::session::SessionOptions;
use kandev_report::FindingLevel;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const CONFIG: Check = Check {
    id: "image_config",
    promise: "the worker image is built for the node's platform, runs as 1000:1000 and works in /workspace",
    twin: Twin::Worker("worker-runs-as-root"),
};
const NO_CREDENTIALS: Check = Check {
    id: "no_credentials",
    promise: "neither the worker nor the daemon image carries credentials (config or layer files)",
    twin: Twin::Worker("worker-with-credentials"),
};
const TOOLS: Check = Check {
    id: "tools",
    promise: "every tool the recipe promises is in the worker image, outside /workspace and /run/kandev",
    twin: Twin::Worker("worker-without-node"),
};
const PINS: Check = Check {
    id: "pins",
    promise: "every pin of the recipe's pins file is a digest, a checksum or an exact version",
    twin: Twin::Worker("worker-unpinned"),
};
const CACHES: Check = Check {
    id: "caches_after_clone",
    promise: "the tool caches point under /workspace and are created only after the repository clone",
    twin: Twin::Prepare("caches-before-clone"),
};

/// The recipe's pins file.
pub const PINS_FILE: &str = "/opt/full-worker/pins.env";
/// The cache variables the recipe points under the workspace, and the folders preparation
/// creates for them.
const CACHE_VARS: [&str; 8] = [
    "npm_config_cache",
    "npm_config_prefix",
    "npm_config_store_dir",
    "PNPM_HOME",
    "PIP_CACHE_DIR",
    "GOCACHE",
    "GOMODCACHE",
    "CARGO_HOME",
];
/// Why the images' own checks are not judged when no engine holding them is reachable.
const NO_ENGINE: &str = "no engine holding the run's images is reachable from here (the images were not built on this host and the cluster's nodes are not on it): the images' config and layers cannot be read";
const BUNDLE: &str = "/tmp/kandev-acceptance-recipe.bundle";

pub fn scenario() -> Scenario {
    Scenario {
        name: "image::recipe",
        promise: "the worker recipe as an artefact: platform, user 1000:1000 and /workspace; no credentials in any image layer or config; the promised tools outside the mounts with versions; pins immutable; caches under /workspace created after the clone",
        checks: &[CONFIG, NO_CREDENTIALS, TOOLS, PINS, CACHES],
        timeout: Duration::from_secs(300),
        starts_first: false,
        run,
    }
}

/// The node's platform as images name it.
fn node_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        // The engine the run's images are in: the one running the Pods (local), else this
        // host's, where the run built them (kind, a cluster double) if it has the worker.
        let engine = match ctx.host_engine().cloned() {
            Some(engine) => Some(engine),
            None => match kandev_harness::host::connect_engine().await {
                Ok(docker) => {
                    let engine = kandev_harness::host::HostEngine::new(docker);
                    matches!(engine.image_id(&ctx.images().worker).await, Ok(Some(_)))
                        .then_some(engine)
                }
                Err(_) => None,
            },
        };
        // The session first: a scenario that fails keeps its Pod's evidence.
        ctx.step("launch with a repository bundle");
        let mut session = ctx
            .create_session(SessionOptions {
                profile_env: BTreeMap::from([(
                    "KANDEV_REPOSITORY_BUNDLE".to_owned(),
                    BUNDLE.to_owned(),
                )]),
                ..SessionOptions::default()
            })
            .await?;
        let repo = session
            .in_main(
                &[
                    "sh",
                    "-c",
                    &format!(
                        "set -e; export HOME=/tmp; r=$(mktemp -d /tmp/kandev-acceptance-repo.XXXXXX); cd $r; git init -q; echo recipe > README.md; git add README.md; git -c user.email=acceptance@kandev.invalid -c user.name=acceptance commit -q -m recipe; git bundle create {BUNDLE} --all 2>/dev/null; git rev-parse HEAD; cd /; rm -rf $r"
                    ),
                ],
                Duration::from_secs(60),
            )
            .await?;
        anyhow::ensure!(
            repo.success(),
            "create the repository bundle in the agent container: {}",
            repo.stderr_text().trim()
        );
        let commit = repo.stdout_text().trim().to_owned();
        session.write_bootstrap_files().await?;
        let prepared = session.run_prepare().await?;
        ctx.evidence(
            "prepare_output",
            format!("{}{}", prepared.stdout_text(), prepared.stderr_text()),
        );
        anyhow::ensure!(
            prepared.success(),
            "the prepare script failed ({}): {}",
            prepared.exit_text(),
            prepared.stderr_text().trim()
        );
        session.mark_prepared_and_start().await?;
        session.connect().await?;

        ctx.step("worker image config");
        let worker_ref = ctx.images().worker.clone();
        let daemon_ref = ctx.images().daemon.clone();
        // Without an engine holding the images, their config and layers are unseen: those two
        // checks are not judged (with the reason); the checks judged in the running Pod go on.
        let worker = match &engine {
            Some(engine) => Some(engine.docker().inspect_image(&worker_ref).await?),
            None => {
                for check in [&CONFIG, &NO_CREDENTIALS] {
                    not_judged(check, NO_ENGINE);
                }
                None
            }
        };
        // The image's environment (the caches' variables): from its config, else as the main
        // container runs with it (the image's Env and the Pod's, which the template keeps
        // apart from these variables).
        let env = match &worker {
            Some(worker) => worker
                .config
                .as_ref()
                .and_then(|c| c.env.clone())
                .unwrap_or_default(),
            None => {
                let environ = session
                    .in_main(&["cat", "/proc/1/environ"], Duration::from_secs(20))
                    .await?;
                anyhow::ensure!(
                    environ.success(),
                    "read the main container's environment: {}",
                    environ.stderr_text().trim()
                );
                environ
                    .stdout_text()
                    .split('\0')
                    .filter(|e| !e.is_empty())
                    .map(str::to_owned)
                    .collect()
            }
        };
        if let (Some(engine), Some(worker)) = (&engine, &worker) {
            let config = worker.config.clone().unwrap_or_default();
            let user = config.user.clone().unwrap_or_default();
            let workdir = config.working_dir.clone().unwrap_or_default();
            let os = worker.os.clone().unwrap_or_default();
            let arch = worker.architecture.clone().unwrap_or_default();
            ctx.evidence(
                "worker",
                json!({"reference": worker_ref, "id": worker.id, "platform": format!("{os}/{arch}"), "user": user, "working_dir": workdir}),
            );
            let mut wrong = Vec::new();
            if os != "linux" || arch != node_arch() {
                wrong.push(format!(
                    "platform {os}/{arch}, the node runs linux/{}",
                    node_arch()
                ));
            }
            if user != "1000:1000" {
                wrong.push(format!("config user {user:?} (expected \"1000:1000\")"));
            }
            if workdir != "/workspace" {
                wrong.push(format!("WorkingDir {workdir:?} (expected \"/workspace\")"));
            }
            promise(wrong.is_empty(), &CONFIG, || wrong.join("; "))?;
            scan_credentials(ctx, engine, &worker_ref, &daemon_ref).await?;
        }

        ctx.step("recipe tools");
        let mut script = String::new();
        let recipe: Vec<&str> = kandev_harness::config::recipe_tools();
        let optional: Vec<&str> = kandev_harness::config::RECIPE_OPTIONAL_TOOLS
            .split(',')
            .collect();
        for name in recipe.iter().chain(optional.iter()) {
            let tool = crate::worker::toolchain::tool(name)
                .ok_or_else(|| anyhow::anyhow!("the recipe names an unknown tool {name}"))?;
            script.push_str(&format!(
                "p=$(command -v {bin}) && v=$({version} 2>&1) && echo \"{name} $p $(echo \"$v\" | head -n1)\" || echo \"{name} missing\"\n",
                bin = tool.binary,
                version = tool.version,
            ));
        }
        let tools = session.agent_sh(&script, Duration::from_secs(120)).await?;
        let mut versions = BTreeMap::new();
        let mut wrong = Vec::new();
        for line in tools.stdout.lines() {
            let mut parts = line.splitn(3, ' ');
            let (Some(name), Some(path)) = (parts.next(), parts.next()) else {
                continue;
            };
            let version = parts.next().unwrap_or_default();
            if path == "missing" {
                if optional.contains(&name) {
                    ctx.finding(
                        FindingLevel::Warning,
                        "recipe.optional_tool_missing",
                        format!("the recipe's {name} is not in the worker image"),
                        json!({"tool": name}),
                    );
                } else {
                    wrong.push(format!("{name} is missing"));
                }
                continue;
            }
            if ["/workspace/", "/run/kandev/"]
                .iter()
                .any(|m| path.starts_with(m))
            {
                wrong.push(format!("{name} at {path}, on a mounted path"));
            }
            versions.insert(name.to_owned(), json!({"path": path, "version": version}));
        }
        ctx.evidence("tools", &versions);
        for name in &recipe {
            if !versions.contains_key(*name) && !wrong.iter().any(|w| w.starts_with(name)) {
                wrong.push(format!("{name}: no answer ({})", tools.summary()));
            }
        }
        promise(wrong.is_empty(), &TOOLS, || wrong.join("; "))?;

        ctx.step("pins");
        let pins = session
            .agent_sh(&pins_probe(PINS_FILE), Duration::from_secs(20))
            .await?;
        ctx.evidence("pins", pins.stdout.lines().collect::<Vec<_>>());
        let pins_verdict = judge_pins(pins.success(), &pins.stdout);
        match &pins_verdict {
            Pins::Absent => not_judged(
                &PINS,
                format!("the worker image has no {PINS_FILE}: there are no pins to judge"),
            ),
            Pins::Wrong(wrong) => {
                promise(false, &PINS, || {
                    format!(
                        "{PINS_FILE}: {}; probe: {}",
                        wrong.join("; "),
                        pins.summary()
                    )
                })?;
            }
            Pins::Immutable(count) => {
                ctx.evidence("pins_judged", count);
                promise(true, &PINS, String::new)?;
            }
        }

        ctx.step("caches after the clone");
        let mut wrong = Vec::new();
        let mut dirs = Vec::new();
        for var in CACHE_VARS {
            match env.iter().find_map(|e| e.strip_prefix(&format!("{var}="))) {
                Some(value) if value.starts_with("/workspace/") => dirs.push(value.to_owned()),
                Some(value) => wrong.push(format!("{var}={value} is not under /workspace")),
                None => wrong.push(format!("the image sets no {var}")),
            }
        }
        let order = session
            .agent_sh(
                &format!(
                    "cd /workspace && echo \"head $(git rev-parse HEAD 2>&1)\" && echo \"origin $(git remote get-url origin 2>&1)\" && for f in README.md .git/HEAD .git/config; do echo \"clone $(stat -c %.9Z $f) $f\"; done; for d in {}; do echo \"cache $(stat -c %.9Z $d 2>/dev/null || echo absent) $d\"; done",
                    dirs.join(" ")
                ),
                Duration::from_secs(30),
            )
            .await?;
        ctx.evidence("clone_and_caches", order.stdout.lines().collect::<Vec<_>>());
        let line = |prefix: &str| {
            order
                .stdout
                .lines()
                .find_map(|l| l.strip_prefix(prefix))
                .unwrap_or_default()
                .to_owned()
        };
        if line("head ") != commit {
            wrong.push(format!(
                "/workspace is not the clone of the bundle: HEAD {:?}, the bundle's {commit:?}",
                line("head ")
            ));
        }
        if line("origin ") != BUNDLE {
            wrong.push(format!(
                "the clone's origin is {:?}, not the repository {BUNDLE}",
                line("origin ")
            ));
        }
        let times = |kind: &str| -> Vec<(f64, String)> {
            order
                .stdout
                .lines()
                .filter_map(|l| l.strip_prefix(kind))
                .filter_map(|l| {
                    let (t, path) = l.split_once(' ')?;
                    Some((t.parse::<f64>().ok()?, path.to_owned()))
                })
                .collect()
        };
        let clone = times("clone ");
        let caches = times("cache ");
        if caches.len() != dirs.len() {
            wrong.push(format!(
                "cache folders missing after preparation: {}",
                order
                    .stdout
                    .lines()
                    .filter(|l| l.contains(" absent "))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        let last_clone = clone.iter().map(|(t, _)| *t).fold(0.0_f64, f64::max);
        for (t, path) in &caches {
            if *t < last_clone {
                wrong.push(format!(
                    "{path} was created {:.3}s before the clone's files were",
                    last_clone - t
                ));
            }
        }
        if clone.is_empty() {
            wrong.push("no file of the clone in /workspace".into());
        }
        promise(wrong.is_empty(), &CACHES, || wrong.join("; "))?;

        if pins_verdict == Pins::Absent {
            return Ok(Verdict::Incompatible(format!(
                "the worker image has no {PINS_FILE}: its pins cannot be judged (the rest held)"
            )));
        }
        Ok(Verdict::Passed)
    })
}

/// The credentials scan of the worker and daemon images (config env, labels, history, every
/// layer's files); a layer store it cannot read leaves the check not judged.
async fn scan_credentials(
    ctx: &mut Ctx,
    engine: &kandev_harness::host::HostEngine,
    worker_ref: &str,
    daemon_ref: &str,
) -> anyhow::Result<()> {
    ctx.step("credentials scan");
    let started = Instant::now();
    let mut found = Vec::new();
    let mut scanned = Vec::new();
    for (role, reference) in [("worker", worker_ref), ("daemon", daemon_ref)] {
        let image = engine.docker().inspect_image(reference).await?;
        let env = image
            .config
            .as_ref()
            .and_then(|c| c.env.clone())
            .unwrap_or_default();
        for entry in &env {
            if let Some(kind) = secret_in_env(entry) {
                let name = entry.split('=').next().unwrap_or_default();
                found.push(format!("{role} image config Env {name}: {kind}"));
            }
        }
        let labels = image
            .config
            .as_ref()
            .and_then(|c| c.labels.clone())
            .unwrap_or_default();
        for (key, value) in &labels {
            if let Some(kind) = secret_in_text(value) {
                found.push(format!("{role} image config label {key}: {kind}"));
            }
        }
        // A history the engine did not give is no history without credentials.
        let history = engine
            .docker()
            .image_history(reference)
            .await
            .with_context(|| format!("read the {role} image's history ({reference})"))?;
        for (i, entry) in history.iter().enumerate() {
            if let Some(kind) = secret_in_text(&entry.created_by) {
                found.push(format!("{role} image history entry {i}: {kind}"));
            }
        }
        let driver = image.graph_driver.clone();
        let layers = image
            .root_fs
            .as_ref()
            .and_then(|r| r.layers.clone())
            .unwrap_or_default();
        let Some(dirs) = driver
            .as_ref()
            .filter(|d| d.name == "overlay2")
            .map(|d| layer_dirs(&d.data))
            .filter(|dirs| !dirs.is_empty() && dirs.iter().all(|d| d.is_dir()))
        else {
            // The config, env and history were read; the layers' files were not.
            not_judged(
                &NO_CREDENTIALS,
                format!(
                    "the {role} image's layers are not readable from here (storage driver {}; the overlay2 layer folders of the local engine are read): its files were not scanned",
                    driver.map_or_else(|| "unknown".to_owned(), |d| d.name)
                ),
            );
            scanned.push(json!({"image": role, "layers": layers.len(), "files_scanned": null}));
            continue;
        };
        let names: Vec<String> = dirs
            .iter()
            .enumerate()
            .map(|(i, _)| {
                let diff = layers
                    .get(i)
                    .map(|d| d.trim_start_matches("sha256:").chars().take(12).collect())
                    .unwrap_or_else(|| "?".to_owned());
                format!("{role} layer {}/{} ({diff})", i + 1, dirs.len())
            })
            .collect();
        let (files, hits) = tokio::task::spawn_blocking(move || scan_layers(&dirs, &names)).await?;
        scanned.push(json!({"image": role, "layers": layers.len(), "files_scanned": files}));
        if let Some(why) = scan_unseen(role, files) {
            not_judged(&NO_CREDENTIALS, why);
        }
        found.extend(hits);
    }
    ctx.evidence("scanned", &scanned);
    ctx.evidence("scan_ms", started.elapsed().as_millis() as u64);
    ctx.evidence("credentials_found", &found);
    promise(found.is_empty(), &NO_CREDENTIALS, || found.join("; "))?;

    Ok(())
}

/// Why a layer scan shows nothing, when it read no file: an image has files (its fixture
/// worker, thousands), so a scan that read none looked in the wrong place, and its silence
/// is no evidence of an image without credentials.
fn scan_unseen(role: &str, files_scanned: usize) -> Option<String> {
    (files_scanned == 0).then(|| {
        format!(
            "the scan of the {role} image's layer folders read no file: its files were not seen"
        )
    })
}

/// The image's layer folders, bottom first (overlay2: `LowerDir` lists them top first).
fn layer_dirs(data: &std::collections::HashMap<String, String>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = data
        .get("LowerDir")
        .map(|l| l.split(':').rev().map(PathBuf::from).collect())
        .unwrap_or_default();
    if let Some(upper) = data.get("UpperDir") {
        dirs.push(PathBuf::from(upper));
    }
    dirs
}

/// The agent's probe of the pins file: a line saying whether it is there, then its text. The
/// marker line is the probe's positive control: output without it (a probe that failed, or
/// said nothing) is no evidence that there are no pins.
fn pins_probe(file: &str) -> String {
    format!("if [ -f {file} ]; then echo '#present'; cat {file}; else echo '#absent'; fi")
}

/// What the pins probe showed.
#[derive(Debug, PartialEq, Eq)]
enum Pins {
    /// The image has no pins file (the scenario is then `incompatible`, the check not judged).
    Absent,
    /// The pins are wrong, or could not be read: each reason.
    Wrong(Vec<String>),
    /// Every pin is immutable; how many there are (at least one).
    Immutable(usize),
}

/// Judges the pins probe's answer: only its exit status and its marker line make its output
/// evidence; a pins file that pins nothing pins nothing.
fn judge_pins(success: bool, stdout: &str) -> Pins {
    let mut lines = stdout.lines();
    let marker = lines.next().map(str::trim);
    if !success {
        return Pins::Wrong(vec!["the probe of the pins file failed".into()]);
    }
    match marker {
        Some("#absent") => Pins::Absent,
        Some("#present") => {
            let text: Vec<&str> = lines.collect();
            let text = text.join("\n");
            let wrong = mutable_pins(&text);
            let count = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .count();
            if !wrong.is_empty() {
                Pins::Wrong(wrong)
            } else if count == 0 {
                Pins::Wrong(vec!["the pins file pins nothing".into()])
            } else {
                Pins::Immutable(count)
            }
        }
        _ => Pins::Wrong(vec![
            "the probe of the pins file did not say whether it exists".into(),
        ]),
    }
}

/// The pins of a pins file that are neither a digest, a checksum nor an exact version.
pub fn mutable_pins(text: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            wrong.push(format!("{line:?} is not KEY=VALUE"));
            continue;
        };
        let value = value.trim_matches(|c| c == '"' || c == '\'');
        if !(is_digest(value) || is_checksum(key, value) || is_exact_version(value)) {
            wrong.push(format!(
                "{key}={value} is neither a digest (@sha256:<64 hex>), a checksum (_SHA256=<64 hex>) nor an exact version"
            ));
        }
    }
    wrong
}

fn is_hex64(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn is_digest(value: &str) -> bool {
    value
        .rsplit_once("@sha256:")
        .is_some_and(|(name, hex)| !name.is_empty() && is_hex64(hex))
}

fn is_checksum(key: &str, value: &str) -> bool {
    key.ends_with("_SHA256") && is_hex64(value)
}

/// `[epoch:]v?N.N[.N...][suffix]`: at least major.minor, then a Debian-style revision.
fn is_exact_version(value: &str) -> bool {
    let value = match value.split_once(':') {
        Some((epoch, rest)) if !epoch.is_empty() && epoch.bytes().all(|b| b.is_ascii_digit()) => {
            rest
        }
        _ => value,
    };
    let value = value.strip_prefix('v').unwrap_or(value);
    let numeric: String = value
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let suffix = &value[numeric.len()..];
    let parts: Vec<&str> = numeric.split('.').collect();
    // One number is exact only with a revision after it (Debian's 20250419+deb13u1).
    (parts.len() >= 2 || !suffix.is_empty())
        && parts.iter().all(|p| !p.is_empty())
        && suffix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+~-.".contains(c))
        && (suffix.is_empty() || suffix.starts_with(['-', '+', '~']))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A probe that failed or said nothing, and a pins file without pins, never read as
    /// "every pin immutable"; no pins file is not judged (the scenario incompatible).
    #[test]
    fn only_a_pins_file_seen_whole_with_immutable_pins_holds() {
        assert_eq!(
            judge_pins(true, "#present\nA=1.2.3\n# c\n"),
            Pins::Immutable(1)
        );
        assert_eq!(judge_pins(true, "#absent\n"), Pins::Absent);
        assert!(matches!(judge_pins(true, ""), Pins::Wrong(_)));
        assert!(matches!(judge_pins(false, ""), Pins::Wrong(_)));
        assert!(matches!(
            judge_pins(false, "#present\nA=1.2.3\n"),
            Pins::Wrong(_)
        ));
        assert!(matches!(
            judge_pins(true, "#present\n# only comments\n"),
            Pins::Wrong(_)
        ));
        assert!(matches!(
            judge_pins(true, "#present\nA=latest\n"),
            Pins::Wrong(_)
        ));
        // The probe as the agent runs it (through sh), on real files.
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pins.env");
        let probe = |file: &std::path::Path| {
            let out = std::process::Command::new("sh")
                .args(["-c", &pins_probe(&file.display().to_string())])
                .output()
                .unwrap();
            judge_pins(out.status.success(), &String::from_utf8_lossy(&out.stdout))
        };
        assert_eq!(probe(&file), Pins::Absent);
        std::fs::write(&file, "").unwrap();
        assert!(matches!(probe(&file), Pins::Wrong(_)));
        std::fs::write(&file, "A_VERSION=9.15.9\n").unwrap();
        assert_eq!(probe(&file), Pins::Immutable(1));
    }

    /// A scan that read no file is not a clean image; one that read files judges.
    #[test]
    fn a_layer_scan_that_read_nothing_judges_nothing() {
        let empty = tempfile::tempdir().unwrap();
        let (files, hits) = scan_layers(&[empty.path().to_owned()], &["worker layer 1/1".into()]);
        assert_eq!((files, hits.len()), (0, 0));
        assert!(
            scan_unseen("worker", files)
                .unwrap()
                .contains("read no file")
        );
        std::fs::write(empty.path().join("etc-motd"), "hello").unwrap();
        let (files, _) = scan_layers(&[empty.path().to_owned()], &["worker layer 1/1".into()]);
        assert_eq!(scan_unseen("worker", files), None);
    }

    #[test]
    fn pins_are_digests_checksums_or_exact_versions() {
        let good = "# c\nA_VERSION=9.15.9\nA_SHA256=cf86a7ad764406395d4286a6d09d730711720acc6d93e9dce9ac7ac4dc4a28a7\nB=x/y@sha256:cf86a7ad764406395d4286a6d09d730711720acc6d93e9dce9ac7ac4dc4a28a7\nC=2:1.24~2\nG=20250419+deb13u1\nD=26.1.5+dfsg1-9+deb13u1+b1\nE=156.0.8078.79-1~deb13u1\nF=v2.9.0\n";
        assert_eq!(mutable_pins(good), Vec::<String>::new());
        for bad in [
            "A=latest",
            "A=moby/buildkit:v0.26.3",
            "A=9",
            "A=1.x",
            "A=^1.2.3",
            "A_SHA256=abc",
            "B=x@sha256:abc",
            "nonsense",
        ] {
            assert_eq!(mutable_pins(bad).len(), 1, "{bad}");
        }
    }
}
