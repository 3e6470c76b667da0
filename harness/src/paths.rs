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

/// A path as a report shows it: relative to the repository root when it lies below it (the
/// fixtures), so a report names no machine's folders; else as given (an operator's file).
pub fn shown(path: &std::path::Path) -> String {
    path.strip_prefix(workspace_root())
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

pub fn reports() -> PathBuf {
    workspace_root().join("reports")
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
