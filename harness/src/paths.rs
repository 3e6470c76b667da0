//! Where the harness finds its fixtures and writes its reports.
//!
//! A run reads fixtures (the default template and prepare script, the fixture images' build
//! contexts, the twins, the Kind configuration) below a root laid out as the repository
//! (`fixtures/`, `kind/`), the first of:
//!
//! 1. `KANDEV_ACCEPTANCE_ROOT`, when set (the harness image sets it);
//! 2. the checkout this binary was built from, when the binary runs from that checkout's
//!    `target/` (a development build, `cargo acceptance`): developers edit fixtures, and the
//!    next run reads them with no rebuild. An installed copy (`cargo install`, a release
//!    archive) never reads the checkout it came from, even while it is there: it runs what it
//!    carries, as it would on any other machine;
//! 3. the fixtures the binary carries (built in by `scenarios/build.rs`, handed over by its
//!    `main`: [`embedded::carry`]), written on first use to `fixtures-<hash>/` under the
//!    user's cache ([`embedded::cache_home`]): an installed binary runs from any directory
//!    with no checkout. The same bytes give the same image tags: a fixture image's tag hashes
//!    its build context, not where it lies.
//!
//! Never from the current directory. Reports go to `./reports` of the current directory,
//! whichever the fixtures' source (`--report-dir` says otherwise): where a user or a CI job
//! runs the harness is where they look, not the checkout it was built from or a cache. The
//! report records which fixtures ran and their digest ([`fixtures_record`]).

mod carried;
pub mod embedded;

pub use carried::CARRIED;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Where the fixtures come from (the order above).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `KANDEV_ACCEPTANCE_ROOT`.
    Variable,
    /// The checkout this binary was built from.
    Checkout,
    /// The copy the binary carries, written out under the user's cache.
    Embedded,
}

/// Why the fixtures cannot be read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PathsError {
    #[error(
        "KANDEV_ACCEPTANCE_ROOT={} holds no fixtures/ folder\n  fix: point it at a checkout of kandev-acceptance (or a folder laid out as one), or unset it to use the fixtures this binary carries",
        root.display()
    )]
    NoFixtures { root: PathBuf },
    #[error(transparent)]
    Embedded(#[from] embedded::EmbeddedError),
}

struct Resolved {
    source: Source,
    root: PathBuf,
    problem: Option<PathsError>,
}

/// Resolved once per process: the environment is read, and the carried fixtures written out,
/// on first use.
static RESOLVED: OnceLock<Resolved> = OnceLock::new();

fn resolved() -> &'static Resolved {
    RESOLVED.get_or_init(resolve)
}

fn resolve() -> Resolved {
    if let Some(root) = std::env::var_os("KANDEV_ACCEPTANCE_ROOT").filter(|r| !r.is_empty()) {
        let root = PathBuf::from(root);
        let problem = (!root.join("fixtures").is_dir())
            .then(|| PathsError::NoFixtures { root: root.clone() });
        return Resolved {
            source: Source::Variable,
            root,
            problem,
        };
    }
    let checkout = build_checkout();
    let built_here =
        std::env::current_exe().is_ok_and(|exe| exe.starts_with(checkout.join("target")));
    if built_here && checkout.join("fixtures").is_dir() {
        return Resolved {
            source: Source::Checkout,
            root: checkout,
            problem: None,
        };
    }
    match embedded::fixtures_root() {
        Ok(root) => Resolved {
            source: Source::Embedded,
            root,
            problem: None,
        },
        // Paths below the cache still name the files; `ready` reports why they are missing.
        Err(e) => Resolved {
            source: Source::Embedded,
            root: embedded::cache_home(),
            problem: Some(e.into()),
        },
    }
}

/// The workspace this binary was built from (it may have moved or be gone since).
pub fn build_checkout() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// The command a hint tells its reader to type: `cargo acceptance` when this binary runs from
/// the checkout it was built in and the current directory lies in that checkout (no
/// `kandev-acceptance` is on the PATH there; the checkout's cargo alias is), else
/// `kandev-acceptance` (an installed binary, the harness image).
pub fn command() -> &'static str {
    static COMMAND: OnceLock<&'static str> = OnceLock::new();
    COMMAND.get_or_init(|| {
        let checkout = build_checkout();
        let built_here =
            std::env::current_exe().is_ok_and(|exe| exe.starts_with(checkout.join("target")));
        let inside = std::env::current_dir().is_ok_and(|dir| dir.starts_with(&checkout));
        if built_here && inside && checkout.join(".cargo/config.toml").is_file() {
            "cargo acceptance"
        } else {
            "kandev-acceptance"
        }
    })
}

/// The root fixtures are read from, once they can be: a command that reads fixtures asks
/// this first, so that a missing or unwritable root is one clear error and not a missing file.
pub fn ready() -> Result<&'static Path, PathsError> {
    let resolved = resolved();
    match &resolved.problem {
        Some(problem) => Err(problem.clone()),
        None => Ok(&resolved.root),
    }
}

/// Where the fixtures come from.
pub fn source() -> Source {
    resolved().source
}

/// The root fixtures are read from (see the module's order); [`ready`] says whether they can
/// be.
pub fn workspace_root() -> PathBuf {
    resolved().root.clone()
}

/// A path as a report shows it: relative to the fixtures' root when it lies below it (the
/// fixtures), so a report names no machine's folders; else as given (an operator's file).
pub fn shown(path: &Path) -> String {
    path.strip_prefix(&resolved().root)
        .unwrap_or(path)
        .display()
        .to_string()
}

pub fn fixtures() -> PathBuf {
    workspace_root().join("fixtures")
}

/// The default template: Kandev's full-worker recipe shape.
pub fn default_template() -> PathBuf {
    fixtures().join("templates/full-worker.yaml")
}

/// The default full-worker prepare script (bounded `docker info` gate, then preparation).
pub fn default_prepare_script() -> PathBuf {
    fixtures().join("prepare/full-worker-prepare.sh")
}

/// The Kind cluster configuration (`--kind-config`'s default).
pub fn kind_config() -> PathBuf {
    workspace_root().join("kind/cluster.yaml")
}

/// The default report folder: `./reports` of the current directory (see the module doc).
pub fn reports() -> PathBuf {
    std::env::current_dir().unwrap_or_default().join("reports")
}

impl Source {
    /// As a report names it.
    pub fn name(self) -> &'static str {
        match self {
            Source::Variable => "KANDEV_ACCEPTANCE_ROOT",
            Source::Checkout => "checkout",
            Source::Embedded => "embedded",
        }
    }
}

/// Which fixtures this run reads, and a digest of their content: every file of [`CARRIED`]
/// below the root, by relative path and bytes (sorted), so two runs that read the same
/// fixtures record the same digest wherever they lie (the carried copy gives the checkout's).
/// None when they cannot all be read.
pub fn fixtures_record() -> Option<kandev_report::FixturesRecord> {
    use sha2::{Digest, Sha256};
    let root = &resolved().root;
    let mut files = Vec::new();
    let mut folders = Vec::new();
    for entry in CARRIED {
        let path = root.join(entry);
        if path.is_dir() {
            folders.push(path);
        } else {
            files.push(path);
        }
    }
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).ok()? {
            let path = entry.ok()?.path();
            if path.is_dir() {
                folders.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut hasher = Sha256::new();
    for file in &files {
        let relative = file.strip_prefix(root).ok()?.to_string_lossy().into_owned();
        let bytes = std::fs::read(file).ok()?;
        hasher.update((relative.len() as u64).to_le_bytes());
        hasher.update(relative.as_bytes());
        hasher.update((bytes.len() as u64).to_le_bytes());
        hasher.update(&bytes);
    }
    Some(kandev_report::FixturesRecord {
        source: source().name().to_owned(),
        files: files.len(),
        sha256: format!("sha256:{}", hex::encode(hasher.finalize())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_below_the_repository_is_shown_relative_and_any_other_as_given() {
        assert_eq!(
            shown(&default_template()),
            "fixtures/templates/full-worker.yaml"
        );
        assert_eq!(
            shown(std::path::Path::new("/etc/kandev/template.yaml")),
            "/etc/kandev/template.yaml"
        );
    }
}
