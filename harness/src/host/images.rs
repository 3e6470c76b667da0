//! Images, built locally and reused by content.
//!
//! No registry is reachable on the machines this runs on, so every image is built here:
//! a Debian base (a configured local image, else `debootstrap` + import), the `docker-engine`
//! companion and the worker from `fixtures/images/`, and a `FROM scratch` image holding the
//! static mock agent (the infra container and the fsGroup helper). Each tag carries a hash
//! of everything that goes into the image, so a second run builds nothing.

use super::is_not_found;
use anyhow::{Context, anyhow, bail};
use bollard::Docker;
use bollard::query_parameters::{BuildImageOptionsBuilder, CreateImageOptionsBuilder};
use futures_util::StreamExt;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use kandev_report::ImageRecord;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub const DEBIAN_SUITE: &str = "bookworm";
/// The base the images are built from when the engine has it (`--base-image`'s default).
pub const DEFAULT_BASE_IMAGE: &str = "debian:bookworm";
pub const DEBIAN_MIRROR: &str = "http://deb.debian.org/debian";

/// Where the images come from.
#[derive(Debug, Clone)]
pub struct ImageConfig {
    /// Used as the base when present in the engine; otherwise a base is bootstrapped.
    pub base_image: String,
    /// An operator's own worker image (skips building the fixture worker).
    pub worker_image: Option<String>,
    /// An operator's own docker-engine image (skips building the fixture daemon).
    pub daemon_image: Option<String>,
    pub images_dir: PathBuf,
    pub mock_agent_binary: PathBuf,
}

/// The images of a run.
#[derive(Debug, Clone)]
pub struct ImageSet {
    pub worker: String,
    pub daemon: String,
    pub mock_agent: String,
    pub records: Vec<ImageRecord>,
}

pub(super) fn short_hash(parts: &[&[u8]]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hex::encode(hasher.finalize()).chars().take(16).collect()
}

pub(super) async fn image_id(docker: &Docker, reference: &str) -> anyhow::Result<Option<String>> {
    match docker.inspect_image(reference).await {
        Ok(image) => Ok(image.id),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("inspect image {reference}")),
    }
}

/// The image builds under way, as their spinners show them (also when no terminal draws
/// them): what a log without a live view reports every so often ([`building`]).
static BUILDING: std::sync::Mutex<Vec<ProgressBar>> = std::sync::Mutex::new(Vec::new());

/// Each image build under way: what it builds, for how long, and its last line.
pub fn building() -> Vec<(String, Duration, String)> {
    let Ok(mut bars) = BUILDING.lock() else {
        return Vec::new();
    };
    bars.retain(|bar| !bar.is_finished());
    bars.iter()
        .map(|bar| (bar.prefix(), bar.elapsed(), bar.message()))
        .collect()
}

fn spinner(progress: &MultiProgress, what: &str) -> ProgressBar {
    let bar = progress.add(ProgressBar::new_spinner());
    if let Ok(mut bars) = BUILDING.lock() {
        bars.push(bar.clone());
    }
    bar.set_style(
        ProgressStyle::with_template("{spinner} {prefix:.bold} {elapsed:>4} {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_prefix(what.to_owned());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// Builds (or reuses) every image of the run. Concurrent runs on one machine take turns
/// (a lock file), so a cold engine builds each image once, not once per run.
pub async fn ensure_images(
    docker: &Docker,
    config: &ImageConfig,
    progress: &MultiProgress,
) -> anyhow::Result<ImageSet> {
    let lock = image_lock().await?;
    let result = ensure_images_locked(docker, config, progress).await;
    drop(lock);
    result
}

/// The machine-wide image lock (held until the file is dropped): image builds take turns.
pub(super) async fn image_lock() -> anyhow::Result<std::fs::File> {
    let lock_path = std::env::temp_dir().join("kandev-acceptance-images.lock");
    tokio::task::spawn_blocking(move || -> anyhow::Result<std::fs::File> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .with_context(|| format!("open the image lock {}", lock_path.display()))?;
        file.lock()
            .with_context(|| format!("lock {}", lock_path.display()))?;
        Ok(file)
    })
    .await
    .context("wait for the image lock")?
}

async fn ensure_images_locked(
    docker: &Docker,
    config: &ImageConfig,
    progress: &MultiProgress,
) -> anyhow::Result<ImageSet> {
    let mut records = Vec::new();
    let binary = std::fs::read(&config.mock_agent_binary).with_context(|| {
        format!(
            "read the mock agent binary {}",
            config.mock_agent_binary.display()
        )
    })?;
    let agent_tag = format!("kandev-acceptance/mock-agent:{}", short_hash(&[&binary]));
    let built = build_if_missing(docker, &agent_tag, progress, "mock-agent image", || {
        context_tar(&[("Dockerfile", b"FROM scratch\nCOPY kandev-mock-agent /kandev-mock-agent\nENTRYPOINT [\"/kandev-mock-agent\"]\n".to_vec()), ("kandev-mock-agent", binary.clone())])
    }, HashMap::new(), &fixture_fix)
    .await?;
    records.push(ImageRecord {
        role: "mock-agent".into(),
        reference: agent_tag.clone(),
        id: image_id(docker, &agent_tag).await?,
        built,
        ran: Vec::new(),
    });

    let need_base = config.worker_image.is_none() || config.daemon_image.is_none();
    let base = if need_base {
        Some(ensure_base(docker, &config.base_image, progress, &mut records).await?)
    } else {
        None
    };

    let daemon = match (&config.daemon_image, &base) {
        (Some(reference), _) => {
            let id = image_id(docker, reference).await?.ok_or_else(|| anyhow!("daemon image {reference} is not in the engine\n  fix: build or load it first (no registry pulls)"))?;
            records.push(ImageRecord {
                role: "daemon".into(),
                reference: reference.clone(),
                id: Some(id),
                built: false,
                ran: Vec::new(),
            });
            reference.clone()
        }
        (None, Some((_, base_id))) => {
            build_fixture(
                docker,
                config,
                progress,
                "daemon",
                &[("BASE_IMAGE", base_id.as_str())],
                &mut records,
            )
            .await?
        }
        (None, None) => bail!("no base image for the daemon build"),
    };
    let worker = match (&config.worker_image, &base) {
        (Some(reference), _) => {
            let id = image_id(docker, reference).await?.ok_or_else(|| anyhow!("worker image {reference} is not in the engine\n  fix: build or load it first (no registry pulls)"))?;
            records.push(ImageRecord {
                role: "worker".into(),
                reference: reference.clone(),
                id: Some(id),
                built: false,
                ran: Vec::new(),
            });
            reference.clone()
        }
        // The worker installs its own Docker CLI (Debian trixie's, as the daemon's).
        (None, Some((_, base_id))) => {
            build_fixture(
                docker,
                config,
                progress,
                "worker",
                &[("BASE_IMAGE", base_id.as_str())],
                &mut records,
            )
            .await?
        }
        (None, None) => bail!("no base image for the worker build"),
    };
    Ok(ImageSet {
        worker,
        daemon,
        mock_agent: agent_tag,
        records,
    })
}

/// `base_image` if the engine has it, else a debootstrapped Debian (built once): its reference
/// and image id.
pub(super) async fn ensure_base(
    docker: &Docker,
    base_image: &str,
    progress: &MultiProgress,
    records: &mut Vec<ImageRecord>,
) -> anyhow::Result<(String, String)> {
    if let Some(id) = image_id(docker, base_image).await? {
        records.push(ImageRecord {
            role: "base".into(),
            reference: base_image.to_owned(),
            id: Some(id.clone()),
            built: false,
            ran: Vec::new(),
        });
        return Ok((base_image.to_owned(), id));
    }
    let tag = format!(
        "kandev-acceptance/base:{DEBIAN_SUITE}-{}",
        short_hash(&[
            DEBIAN_SUITE.as_bytes(),
            DEBIAN_MIRROR.as_bytes(),
            b"minbase"
        ])
    );
    if let Some(id) = image_id(docker, &tag).await? {
        records.push(ImageRecord {
            role: "base".into(),
            reference: tag.clone(),
            id: Some(id.clone()),
            built: false,
            ran: Vec::new(),
        });
        return Ok((tag, id));
    }
    let bar = spinner(progress, "base image");
    bar.set_message(format!(
        "{base_image} is not in the engine: debootstrap {DEBIAN_SUITE} from {DEBIAN_MIRROR}"
    ));
    let rootfs = tempfile::Builder::new()
        .prefix("kandev-acceptance-rootfs-")
        .tempdir()
        .context("create a folder for debootstrap")?;
    let output = tokio::process::Command::new("debootstrap")
        .args(["--variant=minbase", DEBIAN_SUITE])
        .arg(rootfs.path())
        .arg(DEBIAN_MIRROR)
        .output()
        .await
        .map_err(|e| anyhow!("run debootstrap: {e}\n  fix: install it (apt-get install debootstrap, as bash harness/scripts/ensure-engine.sh does) or pass --base-image with a Debian image present in the engine"))?;
    if !output.status.success() {
        let log = String::from_utf8_lossy(&output.stdout);
        let tail: Vec<&str> = log.lines().rev().take(10).collect();
        bail!(
            "debootstrap {DEBIAN_SUITE} failed ({}):\n{}\n  fix: check that {DEBIAN_MIRROR} is reachable and that this runs as root, or pass --base-image",
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    bar.set_message("importing the root filesystem");
    let tar = tokio::process::Command::new("tar")
        .arg("-C")
        .arg(rootfs.path())
        .args(["--numeric-owner", "-cf", "-", "."])
        .output()
        .await
        .context("archive the root filesystem")?;
    if !tar.status.success() {
        bail!(
            "tar of the debootstrapped root filesystem failed: {}",
            String::from_utf8_lossy(&tar.stderr)
        );
    }
    let (repo, tag_part) = tag.split_once(':').unwrap_or((tag.as_str(), "latest"));
    let options = CreateImageOptionsBuilder::default()
        .from_src("-")
        .repo(repo)
        .tag(tag_part)
        .build();
    let mut stream = docker.create_image(
        Some(options),
        Some(bollard::body_full(tar.stdout.into())),
        None,
    );
    while let Some(item) = stream.next().await {
        let info = item.context("import the base root filesystem")?;
        if let Some(error) = info.error_detail.and_then(|d| d.message) {
            bail!("import the base root filesystem: {error}");
        }
    }
    let id = image_id(docker, &tag)
        .await?
        .ok_or_else(|| anyhow!("the imported base {tag} is missing"))?;
    bar.finish_with_message(format!("built {tag}"));
    records.push(ImageRecord {
        role: "base".into(),
        reference: tag.clone(),
        id: Some(id.clone()),
        built: true,
        ran: Vec::new(),
    });
    Ok((tag, id))
}

/// Builds `fixtures/images/<name>` (tagged by Dockerfile, context and build arguments).
async fn build_fixture(
    docker: &Docker,
    config: &ImageConfig,
    progress: &MultiProgress,
    name: &str,
    args: &[(&str, &str)],
    records: &mut Vec<ImageRecord>,
) -> anyhow::Result<String> {
    let dir = config.images_dir.join(name);
    let files = read_context(&dir)?;
    let mut parts: Vec<&[u8]> = Vec::new();
    for (path, bytes) in &files {
        parts.push(path.as_bytes());
        parts.push(bytes);
    }
    for (k, v) in args {
        parts.push(k.as_bytes());
        parts.push(v.as_bytes());
    }
    let tag = format!("kandev-acceptance/{name}:{}", short_hash(&parts));
    let buildargs: HashMap<String, String> = args
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let built = build_if_missing(
        docker,
        &tag,
        progress,
        &format!("{name} image"),
        || context_tar(&files),
        buildargs,
        &fixture_fix,
    )
    .await?;
    records.push(ImageRecord {
        role: name.into(),
        reference: tag.clone(),
        id: image_id(docker, &tag).await?,
        built,
        ran: Vec::new(),
    });
    Ok(tag)
}

fn read_context(dir: &Path) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current)
            .with_context(|| format!("read build context {}", current.display()))?
        {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                stack.push(path);
            } else {
                let relative = path
                    .strip_prefix(dir)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned();
                files.push((relative, std::fs::read(&path)?));
            }
        }
    }
    files.sort();
    Ok(files)
}

pub(super) fn context_tar(files: &[(impl AsRef<Path>, Vec<u8>)]) -> anyhow::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o755);
        header.set_cksum();
        builder.append_data(&mut header, path, bytes.as_slice())?;
    }
    Ok(builder.into_inner()?)
}

/// The fix of a failed fixture image build.
fn fixture_fix(_failure: &str) -> String {
    "the Dockerfile is under fixtures/images/; apt needs a reachable Debian mirror".into()
}

/// Builds `tag` from a context unless the engine already has it; returns whether it built.
/// A failed build's error names the engine's error, the log's tail and `fix` of them (the
/// error and the tail, one text).
pub(super) async fn build_if_missing(
    docker: &Docker,
    tag: &str,
    progress: &MultiProgress,
    what: &str,
    context: impl FnOnce() -> anyhow::Result<Vec<u8>>,
    buildargs: HashMap<String, String>,
    fix: &(dyn Fn(&str) -> String + Sync),
) -> anyhow::Result<bool> {
    if image_id(docker, tag).await?.is_some() {
        tracing::info!(image = tag, "reusing image built from the same content");
        return Ok(false);
    }
    let bar = spinner(progress, what);
    let labels = HashMap::from([(
        crate::pod::identity::LABEL_MANAGED.to_owned(),
        "true".to_owned(),
    )]);
    let options = BuildImageOptionsBuilder::default()
        .dockerfile("Dockerfile")
        .t(tag)
        .rm(true)
        .forcerm(true)
        .networkmode("host")
        .buildargs(&buildargs)
        .labels(&labels)
        .build();
    let mut stream = docker.build_image(options, None, Some(bollard::body_full(context()?.into())));
    let mut log = Vec::<String>::new();
    while let Some(item) = stream.next().await {
        // bollard hands the engine's error (a failed step) over as an `Err` item; an item's
        // own error detail is kept for answers it passes through.
        let error = match item {
            Ok(info) => {
                if let Some(line) = info
                    .stream
                    .as_deref()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                {
                    let line = without_colours(line);
                    bar.set_message(line.chars().take(100).collect::<String>());
                    log.push(line);
                }
                info.error_detail.and_then(|d| d.message)
            }
            Err(bollard::errors::Error::DockerStreamError { error }) => Some(error),
            // The answer's transport broke off ("bytes remaining on stream", seen once on a
            // fresh engine after the last step had run): the engine tags the image only once
            // its build succeeded, so the tag decides.
            Err(e) => match image_id(docker, tag).await {
                Ok(Some(_)) => {
                    tracing::warn!(image = tag, error = %crate::error_chain(&e), "the build's answer broke off after the image was tagged");
                    break;
                }
                _ => Some(crate::error_chain(&e)),
            },
        };
        if let Some(error) = error {
            let tail = log
                .iter()
                .rev()
                .take(15)
                .rev()
                .cloned()
                .collect::<Vec<_>>()
                .join("\n");
            bar.abandon_with_message("failed");
            let fix = fix(&format!("{error}\n{tail}"));
            bail!("build {tag} failed: {error}\n{tail}\n  fix: {fix}");
        }
    }
    bar.finish_with_message(format!("built {tag}"));
    Ok(true)
}

/// A build log line without the terminal colour codes the engine puts around a step's stderr.
fn without_colours(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // ESC [ parameters... final letter
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The static mock agent: `KANDEV_MOCK_AGENT_BIN` when set (a static `kandev-mock-agent`
/// built elsewhere, e.g. for another architecture), else the one this binary carries
/// (`harness/build.rs` builds it with `+crt-static` along with the harness), written out to the
/// user's cache on first use. No cargo at run time.
pub async fn mock_agent_binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("KANDEV_MOCK_AGENT_BIN") {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!(
                "KANDEV_MOCK_AGENT_BIN={} is not a file\n  fix: point it at a static kandev-mock-agent, or unset it to use the one this binary carries",
                path.display()
            );
        }
        return Ok(path);
    }
    Ok(
        tokio::task::spawn_blocking(crate::paths::embedded::mock_agent)
            .await
            .context("write out the mock agent")??,
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_build_log_line_loses_its_colour_codes() {
        assert_eq!(
            super::without_colours("\u{1b}[91mexec /usr/local/bin/x: no such file\u{1b}[0m"),
            "exec /usr/local/bin/x: no such file"
        );
    }
}
