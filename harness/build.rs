//! Names the build for the report's `harness_version` (and `--version`): the crate version
//! plus the git commit it was built from, `0.1.0+0123456789ab`, with `-dirty` when tracked
//! files differed from that commit. Without git (a source archive) the commit comes from
//! `KANDEV_ACCEPTANCE_COMMIT` (a release pipeline sets it), else it is `unknown`.
//!
//! It reruns only when the answer can change: HEAD moved (the HEAD file, the ref it points to,
//! packed refs), the index changed (a commit, an add, a checkout), harness's own sources
//! changed (which rebuild the crate anyway) or the variable did. An edit elsewhere that is not
//! staged shows as `-dirty` at the next of those, not before: rerunning on every change of the
//! tree would rebuild this crate for every edit of a scenario or fixture.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `git args` in the crate's folder, trimmed; None when git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Reruns this script when `path` changes. Only a file that exists: cargo counts a missing
/// one as changed on every build (a ref that lives only in packed-refs, no packed-refs at
/// all). A loose ref that is packed later disappears, which reruns the script, and the next
/// run watches packed-refs instead.
fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into()));
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    println!("cargo:rerun-if-env-changed=KANDEV_ACCEPTANCE_COMMIT");
    println!("cargo:rerun-if-changed=src");
    let commit = git(&dir, &["rev-parse", "--short=12", "HEAD"]);
    let build = match commit {
        Some(commit) => {
            // A worktree keeps HEAD and its index in its own git dir, refs in the common one
            // (git prints them relative to `dir` or absolute: joined, both are right).
            for (asked, files) in [
                ("--git-dir", &["HEAD", "index"][..]),
                ("--git-common-dir", &["packed-refs"][..]),
            ] {
                if let Some(git_dir) = git(&dir, &["rev-parse", asked]) {
                    for file in files {
                        watch(&dir.join(&git_dir).join(file));
                    }
                }
            }
            if let (Some(reference), Some(common)) = (
                git(&dir, &["symbolic-ref", "-q", "HEAD"]),
                git(&dir, &["rev-parse", "--git-common-dir"]),
            ) {
                watch(&dir.join(&common).join(reference));
            }
            let dirty = git(&dir, &["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            format!("{commit}{}", if dirty { "-dirty" } else { "" })
        }
        None => std::env::var("KANDEV_ACCEPTANCE_COMMIT")
            .ok()
            .filter(|c| !c.trim().is_empty())
            .unwrap_or_else(|| "unknown".into()),
    };
    println!("cargo:rustc-env=KANDEV_ACCEPTANCE_BUILD={version}+{build}");
}
