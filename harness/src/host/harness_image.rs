//! The harness image (`fixtures/images/harness/Dockerfile`): a harness binary, the static mock
//! agent and the repository files a run reads, for a Job that runs the harness inside the
//! cluster. Built from the given binary's bytes (no second compile), on the same local base as
//! the fixture images, and tagged by a hash of the whole context and the base's image id, so an
//! unchanged harness builds nothing.

use super::images::{build_if_missing, context_tar, ensure_base, image_id, image_lock, short_hash};
use anyhow::{Context, anyhow};
use bollard::Docker;
use indicatif::MultiProgress;
use kandev_report::ImageRecord;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The image's repository; its tag is the content hash.
pub const HARNESS_REPOSITORY: &str = "kandev-acceptance/harness";

/// The repository files a run reads at run time (the defaults of `--template` and
/// `--prepare-script`), as absolute paths below the repository root.
pub fn run_files() -> Vec<PathBuf> {
    vec![
        crate::paths::default_template(),
        crate::paths::default_prepare_script(),
    ]
}

/// The running executable's path for [`ensure_harness_image`]: `/proc/self/exe` reads the
/// bytes this process runs even after a rebuild replaced the file it was started from.
pub fn own_executable() -> PathBuf {
    let proc_exe = PathBuf::from("/proc/self/exe");
    if proc_exe.is_file() {
        return proc_exe;
    }
    std::env::current_exe().unwrap_or(proc_exe)
}

/// Builds (or reuses) the harness image from `binary` and `mock_agent` on `base` (if the engine
/// has it, else the debootstrapped bookworm the fixture images use), tagged
/// `kandev-acceptance/harness:<hash>`; its record has the role `harness`. Takes the machine's
/// image lock, as the fixture images do.
pub async fn ensure_harness_image(
    docker: &Docker,
    base: &str,
    binary: &Path,
    mock_agent: &Path,
    progress: &MultiProgress,
) -> anyhow::Result<ImageRecord> {
    let lock = image_lock().await?;
    let result = ensure_locked(docker, base, binary, mock_agent, progress).await;
    drop(lock);
    result
}

async fn ensure_locked(
    docker: &Docker,
    base: &str,
    binary: &Path,
    mock_agent: &Path,
    progress: &MultiProgress,
) -> anyhow::Result<ImageRecord> {
    let files = context_files(binary, mock_agent)?;
    let (base_reference, base_id) = ensure_base(docker, base, progress, &mut Vec::new()).await?;
    let mut parts: Vec<&[u8]> = Vec::new();
    for (path, bytes) in &files {
        parts.push(path.as_bytes());
        parts.push(bytes);
    }
    parts.push(base_id.as_bytes());
    let tag = format!("{HARNESS_REPOSITORY}:{}", short_hash(&parts));
    let fix = |failure: &str| build_fix(failure, &base_reference);
    let built = build_if_missing(
        docker,
        &tag,
        progress,
        "harness image",
        || context_tar(&files),
        HashMap::from([("BASE_IMAGE".to_owned(), base_id.clone())]),
        &fix,
    )
    .await?;
    Ok(ImageRecord {
        role: "harness".into(),
        id: image_id(docker, &tag).await?,
        reference: tag,
        built,
        ran: Vec::new(),
    })
}

/// The build context: the Dockerfile, the two binaries and the run's files (by their paths
/// below the repository root), sorted.
fn context_files(binary: &Path, mock_agent: &Path) -> anyhow::Result<Vec<(String, Vec<u8>)>> {
    let read = |path: &Path, what: &str| {
        std::fs::read(path).with_context(|| format!("read {what} {}", path.display()))
    };
    let dockerfile = crate::paths::fixtures().join("images/harness/Dockerfile");
    let mut files = vec![
        (
            "Dockerfile".to_owned(),
            read(&dockerfile, "the harness image's Dockerfile")?,
        ),
        (
            "kandev-acceptance".to_owned(),
            read(binary, "the harness binary")?,
        ),
        (
            "kandev-mock-agent".to_owned(),
            read(mock_agent, "the mock agent binary")?,
        ),
    ];
    let root = crate::paths::workspace_root();
    for path in run_files() {
        let relative = path
            .strip_prefix(&root)
            .map_err(|_| anyhow!("{} is not below {}", path.display(), root.display()))?
            .to_string_lossy()
            .into_owned();
        files.push((relative, read(&path, "a fixture of the run")?));
    }
    files.sort();
    Ok(files)
}

/// The fix of a failed harness image build: the `--version` check fails when the binary cannot
/// run on the base (an older glibc than the build machine's, or no glibc at all).
fn build_fix(failure: &str, base: &str) -> String {
    if failure.contains("GLIBC_") {
        format!(
            "the harness binary needs a newer glibc than the base {base} has (it was built on a newer distribution): pass --base-image with an image present in the engine whose glibc is at least the build machine's, or build the harness on Debian bookworm"
        )
    } else if failure.contains("kandev-acceptance --version") {
        format!(
            "the harness binary does not run on the base {base}: pass --base-image with a glibc-based Linux image present in the engine, as new as the machine that built the binary"
        )
    } else {
        "the Dockerfile is fixtures/images/harness/Dockerfile; its base needs coreutils (install)"
            .into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_glibc_mismatch_or_a_base_without_glibc_names_base_image() {
        // As the engine's classic builder reports them.
        let glibc = "The command 'kandev-acceptance --version' returned a non-zero code: 1\nkandev-acceptance: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.39' not found (required by kandev-acceptance)";
        let fix = build_fix(glibc, "debian:bookworm");
        assert!(
            fix.contains("newer glibc") && fix.contains("--base-image"),
            "{fix}"
        );
        let scratch = "The command 'kandev-acceptance --version' returned a non-zero code: 1\nexec /usr/local/bin/kandev-acceptance: no such file or directory";
        let fix = build_fix(scratch, "scratch-like");
        assert!(
            fix.contains("does not run on the base scratch-like") && fix.contains("--base-image"),
            "{fix}"
        );
        assert!(build_fix("no space left on device", "b").contains("Dockerfile"));
    }

    #[test]
    fn the_context_holds_the_dockerfile_both_binaries_and_the_run_files() {
        let dir = tempfile::tempdir().unwrap();
        let (binary, agent) = (dir.path().join("h"), dir.path().join("a"));
        std::fs::write(&binary, b"harness").unwrap();
        std::fs::write(&agent, b"agent").unwrap();
        let files = context_files(&binary, &agent).unwrap();
        let names: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "Dockerfile",
                "fixtures/prepare/full-worker-prepare.sh",
                "fixtures/templates/full-worker.yaml",
                "kandev-acceptance",
                "kandev-mock-agent",
            ]
        );
        assert!(files.contains(&("kandev-acceptance".to_owned(), b"harness".to_vec())));
    }
}
