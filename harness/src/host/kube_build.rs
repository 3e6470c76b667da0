//! The Kubernetes that `harness/scripts/ensure-kind.sh` builds on this host from pinned Go
//! modules (`kind/pins.env`): where its programs are, and the tag of the Kind node image
//! assembled from them. The script and this module compute the same folder and tag from the
//! pins, so that neither needs to be told where the other put them.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The pin file, below the fixtures' root (a checkout, or the fixtures the binary carries).
pub const PINS: &str = "kind/pins.env";

/// Why the local Kubernetes build cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum KubeBuildError {
    #[error("{} cannot be read: {reason}\n  fix: run from a checkout of kandev-acceptance, or set KANDEV_ACCEPTANCE_ROOT to one", path.display())]
    NoPins { path: PathBuf, reason: String },
    #[error("{} pins no {name}\n  fix: add a line {name}=<version> (see the file's comments)", path.display())]
    MissingPin { path: PathBuf, name: &'static str },
    #[error(
        "Kubernetes {version} is not built on this machine (no {}): it is built here from its Go modules\n  fix: bash harness/scripts/ensure-kind.sh (20 to 60 minutes the first time on 2 cores; cached after)",
        bin.join(".complete").display()
    )]
    NotBuilt { version: String, bin: PathBuf },
}

/// The pins of `kind/pins.env` this harness reads, and the hash that keys the build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pins {
    pub kubernetes: String,
    pub kind: String,
    pub etcd: String,
    /// The sha256 (16 hex digits) of the file's lines other than comments and blank ones,
    /// each with its newline: `grep -v ... pins.env | sha256sum` in ensure-kind.sh.
    pub key: String,
}

impl Pins {
    /// The pins of the fixtures' root (`kind/pins.env`).
    pub fn read() -> Result<Self, KubeBuildError> {
        Self::read_from(&crate::paths::workspace_root().join(PINS))
    }

    pub fn read_from(path: &Path) -> Result<Self, KubeBuildError> {
        let text = std::fs::read_to_string(path).map_err(|e| KubeBuildError::NoPins {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        Self::parse(&text, path)
    }

    fn parse(text: &str, path: &Path) -> Result<Self, KubeBuildError> {
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#') && !l.trim().is_empty())
            .collect();
        let pin = |name: &'static str| {
            lines
                .iter()
                .rev()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
                .ok_or(KubeBuildError::MissingPin {
                    path: path.to_owned(),
                    name,
                })
        };
        let mut hasher = Sha256::new();
        for line in &lines {
            hasher.update(line.as_bytes());
            hasher.update(b"\n");
        }
        Ok(Self {
            kubernetes: pin("KUBERNETES_VERSION")?,
            kind: pin("KIND_VERSION")?,
            etcd: pin("ETCD_VERSION")?,
            key: hex::encode(hasher.finalize()).chars().take(16).collect(),
        })
    }

    /// `${KANDEV_KUBE_CACHE:-<cache>/kube}/<key>`: the build's folder.
    pub fn build_dir(&self) -> PathBuf {
        std::env::var_os("KANDEV_KUBE_CACHE")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .unwrap_or_else(|| crate::paths::embedded::cache_home().join("kube"))
            .join(&self.key)
    }

    /// The folder of the built programs, once all of them are built.
    pub fn bin_dir(&self) -> Result<PathBuf, KubeBuildError> {
        let bin = self.build_dir().join("bin");
        if bin.join(".complete").is_file() {
            Ok(bin)
        } else {
            Err(KubeBuildError::NotBuilt {
                version: self.kubernetes.clone(),
                bin,
            })
        }
    }

    /// The Kind node image ensure-kind.sh assembles in this host's engine.
    pub fn node_image(&self) -> String {
        format!(
            "kandev-acceptance/kind-node:{}-{}",
            self.kubernetes, self.key
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key is the one the script's `grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' |
    /// sha256sum | cut -c1-16` prints: a comment or a blank line changes nothing, a pin does.
    #[test]
    fn the_key_hashes_the_pins_as_ensure_kind_does() {
        let path = Path::new("pins.env");
        let a = Pins::parse(
            "# comment\nKUBERNETES_VERSION=v1.37.2\n\nKIND_VERSION=v0.33.0\nETCD_VERSION=v3.7.0\n",
            path,
        )
        .unwrap();
        let b = Pins::parse(
            "KUBERNETES_VERSION=v1.37.2\n  # other words\nKIND_VERSION=v0.33.0\nETCD_VERSION=v3.7.0",
            path,
        )
        .unwrap();
        assert_eq!(a, b);
        // printf 'KUBERNETES_VERSION=v1.37.2\nKIND_VERSION=v0.33.0\nETCD_VERSION=v3.7.0\n' | sha256sum
        assert_eq!(a.key, "6fef19f2c6d3125e");
        assert_eq!(
            a.node_image(),
            "kandev-acceptance/kind-node:v1.37.2-6fef19f2c6d3125e"
        );
        let c = Pins::parse(
            "KUBERNETES_VERSION=v1.37.1\nKIND_VERSION=v0.33.0\nETCD_VERSION=v3.7.0\n",
            path,
        )
        .unwrap();
        assert_ne!(a.key, c.key);
    }

    #[test]
    fn a_missing_pin_is_named_with_its_fix() {
        let e = Pins::parse("KUBERNETES_VERSION=v1.37.2\n", Path::new("kind/pins.env"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("pins no KIND_VERSION"), "{e}");
        assert!(e.contains("fix: add a line KIND_VERSION="), "{e}");
    }

    /// The pins of this checkout: the script's own file parses.
    #[test]
    fn the_checkouts_pins_parse() {
        let pins = Pins::read_from(&crate::paths::build_checkout().join(PINS)).unwrap();
        assert!(pins.kubernetes.starts_with("v1."), "{pins:?}");
    }
}
