//! Where the harness finds its fixtures and writes its reports.

use std::path::PathBuf;

/// The repository root: `KANDEV_ACCEPTANCE_ROOT` if set, else the workspace this binary was
/// built from. Fixtures are resolved from here, never from the current directory.
pub fn workspace_root() -> PathBuf {
    if let Some(root) = std::env::var_os("KANDEV_ACCEPTANCE_ROOT") {
        return PathBuf::from(root);
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
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

pub fn reports() -> PathBuf {
    workspace_root().join("reports")
}
