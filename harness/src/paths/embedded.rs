//! What the binary carries (`harness/build.rs`): the fixtures a run reads and the static mock
//! agent, written out on first use to folders named by a hash of their content under the
//! user's cache, so that an installed binary needs no checkout and no cargo.
//!
//! A folder is used only once every file in it is the carried bytes and it holds no other
//! file (a build context is hashed whole: a stray file would change an image's tag); anything
//! else is written again, whole, beside it and renamed into place, so a run never sees half a
//! folder, and two runs starting at once both end with the same complete one.

use sha2::{Digest, Sha256};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

mod generated {
    include!(concat!(env!("OUT_DIR"), "/embedded.rs"));
}

/// A carried folder could not be written out (or this build carries no mock agent).
#[derive(Debug, Clone, thiserror::Error)]
pub enum EmbeddedError {
    #[error(
        "write the {what} this binary carries to {}: {reason}\n  fix: make {} writable (or set XDG_CACHE_HOME to a writable folder){}",
        folder.display(),
        folder.parent().unwrap_or(folder).display(),
        match what { Carried::Fixtures => ", or set KANDEV_ACCEPTANCE_ROOT to a checkout of kandev-acceptance", Carried::MockAgent => ", or set KANDEV_MOCK_AGENT_BIN to a static kandev-mock-agent" }
    )]
    Write {
        what: Carried,
        folder: PathBuf,
        reason: String,
    },
    #[error(
        "this kandev-acceptance carries no mock agent: its build could not build one ({reason})\n  fix: set KANDEV_MOCK_AGENT_BIN to a static kandev-mock-agent, or rebuild where `cargo build --release -p kandev-mock-agent` with RUSTFLAGS='-C target-feature=+crt-static' works (Debian: the libc6-dev package)"
    )]
    NoMockAgent { reason: String },
}

/// What a carried folder holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carried {
    Fixtures,
    MockAgent,
}

impl std::fmt::Display for Carried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Carried::Fixtures => "fixtures",
            Carried::MockAgent => "mock agent",
        })
    }
}

/// The file name of the mock agent in its folder (and in images and Pods).
pub const MOCK_AGENT_FILE: &str = "kandev-mock-agent";

/// `$XDG_CACHE_HOME/kandev-acceptance`, else `$HOME/.cache/kandev-acceptance`, else
/// `kandev-acceptance-<uid>` in the temporary folder (no HOME: a service account).
pub fn cache_home() -> PathBuf {
    let set = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(cache) = set("XDG_CACHE_HOME") {
        return cache.join("kandev-acceptance");
    }
    if let Some(home) = set("HOME") {
        return home.join(".cache/kandev-acceptance");
    }
    let uid =
        std::fs::metadata("/proc/self").map_or(0, |m| std::os::unix::fs::MetadataExt::uid(&m));
    std::env::temp_dir().join(format!("kandev-acceptance-{uid}"))
}

/// The carried fixtures, written out (if they are not already) to
/// `<cache>/fixtures-<hash>/`, laid out as the repository (`fixtures/`, `kind/`).
pub fn fixtures_root() -> Result<PathBuf, EmbeddedError> {
    let files: Vec<File<'_>> = generated::FIXTURES
        .iter()
        .map(|(path, bytes)| File {
            path,
            bytes,
            executable: false,
        })
        .collect();
    let folder = cache_home().join(format!("fixtures-{}", content_hash(&files)));
    write_out(&folder, &files).map_err(|reason| EmbeddedError::Write {
        what: Carried::Fixtures,
        folder: folder.clone(),
        reason,
    })?;
    Ok(folder)
}

/// The carried static mock agent, written out (if it is not already) to
/// `<cache>/mock-agent-<hash>/kandev-mock-agent`, executable.
pub fn mock_agent() -> Result<PathBuf, EmbeddedError> {
    let bytes = generated::MOCK_AGENT.map_err(|reason| EmbeddedError::NoMockAgent {
        reason: reason.to_owned(),
    })?;
    let files = [File {
        path: MOCK_AGENT_FILE,
        bytes,
        executable: true,
    }];
    let folder = cache_home().join(format!("mock-agent-{}", content_hash(&files)));
    write_out(&folder, &files).map_err(|reason| EmbeddedError::Write {
        what: Carried::MockAgent,
        folder: folder.clone(),
        reason,
    })?;
    Ok(folder.join(MOCK_AGENT_FILE))
}

/// The relative paths of the carried fixtures, sorted (what `fixtures_root` writes).
pub fn fixture_paths() -> impl Iterator<Item = &'static str> {
    generated::FIXTURES.iter().map(|(path, _)| *path)
}

struct File<'a> {
    path: &'a str,
    bytes: &'a [u8],
    executable: bool,
}

/// 16 hex digits of SHA-256 over every path and its bytes (each length-prefixed).
fn content_hash(files: &[File<'_>]) -> String {
    let mut hasher = Sha256::new();
    for file in files {
        for part in [file.path.as_bytes(), file.bytes] {
            hasher.update((part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
        hasher.update([u8::from(file.executable)]);
    }
    hex::encode(hasher.finalize()).chars().take(16).collect()
}

/// Makes `folder` hold exactly `files`: kept when it already does, else written whole beside
/// it and renamed into place.
fn write_out(folder: &Path, files: &[File<'_>]) -> Result<(), String> {
    if holds_exactly(folder, files) {
        return Ok(());
    }
    let parent = folder
        .parent()
        .ok_or_else(|| format!("{} has no parent folder", folder.display()))?;
    let name = folder
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    std::fs::create_dir_all(parent).map_err(|e| format!("create {}: {e}", parent.display()))?;
    let staging = parent.join(format!(".{name}.{}.partial", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    let written = write_files(&staging, files);
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(e);
    }
    // A folder that holds something else (a file edited, one added) is replaced.
    if folder.exists() {
        let _ = std::fs::remove_dir_all(folder);
    }
    let renamed = std::fs::rename(&staging, folder);
    let _ = std::fs::remove_dir_all(&staging);
    match renamed {
        Ok(()) => Ok(()),
        // Another run renamed its copy into place first.
        Err(_) if holds_exactly(folder, files) => Ok(()),
        Err(e) => Err(format!("rename {} into place: {e}", staging.display())),
    }
}

fn write_files(staging: &Path, files: &[File<'_>]) -> Result<(), String> {
    for file in files {
        let path = staging.join(file.path);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        }
        std::fs::write(&path, file.bytes).map_err(|e| format!("write {}: {e}", path.display()))?;
        let mode = if file.executable { 0o755 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| format!("chmod {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Whether `folder` holds exactly `files` (no other file, the same bytes, executables
/// executable).
fn holds_exactly(folder: &Path, files: &[File<'_>]) -> bool {
    let mut found = Vec::new();
    if list(folder, folder, &mut found).is_err() {
        return false;
    }
    found.sort();
    let mut expected: Vec<&str> = files.iter().map(|f| f.path).collect();
    expected.sort_unstable();
    found == expected
        && files.iter().all(|file| {
            let path = folder.join(file.path);
            let executable =
                std::fs::metadata(&path).is_ok_and(|m| m.permissions().mode() & 0o111 != 0);
            std::fs::read(&path).is_ok_and(|bytes| bytes == file.bytes)
                && (!file.executable || executable)
        })
}

/// Every file below `dir`, as its path below `root` with `/`.
fn list(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            list(root, &path, out)?;
        } else {
            let relative = path.strip_prefix(root).unwrap_or(&path);
            out.push(
                relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/"),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> Vec<File<'static>> {
        vec![
            File {
                path: "fixtures/a.yaml",
                bytes: b"a",
                executable: false,
            },
            File {
                path: "fixtures/images/x/Dockerfile",
                bytes: b"FROM scratch\n",
                executable: false,
            },
            File {
                path: "bin",
                bytes: b"\x7fELF",
                executable: true,
            },
        ]
    }

    #[test]
    fn a_folder_is_written_whole_and_then_kept() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("cache/fixtures-1");
        write_out(&folder, &files()).unwrap();
        assert!(holds_exactly(&folder, &files()));
        assert_eq!(
            std::fs::read(folder.join("fixtures/images/x/Dockerfile")).unwrap(),
            b"FROM scratch\n"
        );
        let mode = std::fs::metadata(folder.join("bin"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        // Kept as it is: the same inode (a rewrite would rename a new file into place).
        let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        let before = inode(&folder.join("fixtures/a.yaml"));
        write_out(&folder, &files()).unwrap();
        assert_eq!(inode(&folder.join("fixtures/a.yaml")), before);
        // Nothing is left beside it.
        let beside: Vec<_> = std::fs::read_dir(dir.path().join("cache"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(beside, [std::ffi::OsString::from("fixtures-1")]);
    }

    #[test]
    fn an_edited_a_stray_or_a_non_executable_file_has_the_folder_written_again() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("fixtures-1");
        let spoil: [&dyn Fn(&Path); 3] = [
            &|f| std::fs::write(f.join("fixtures/a.yaml"), b"edited").unwrap(),
            &|f| std::fs::write(f.join("fixtures/images/x/stray"), b"").unwrap(),
            &|f| {
                std::fs::set_permissions(f.join("bin"), std::fs::Permissions::from_mode(0o644))
                    .unwrap();
            },
        ];
        for spoil in spoil {
            write_out(&folder, &files()).unwrap();
            spoil(&folder);
            assert!(!holds_exactly(&folder, &files()));
            write_out(&folder, &files()).unwrap();
            assert!(holds_exactly(&folder, &files()));
        }
    }

    #[test]
    fn an_unwritable_cache_is_an_error_naming_the_folder() {
        let dir = tempfile::tempdir().unwrap();
        // A file where the cache's parent folder would be.
        std::fs::write(dir.path().join("cache"), b"").unwrap();
        let folder = dir.path().join("cache/fixtures-1");
        let error = write_out(&folder, &files()).unwrap_err();
        assert!(error.contains("cache"), "{error}");
    }

    #[test]
    fn the_carried_fixtures_are_those_a_run_reads() {
        let paths: Vec<&str> = fixture_paths().collect();
        for needed in [
            "fixtures/templates/full-worker.yaml",
            "fixtures/prepare/full-worker-prepare.sh",
            "fixtures/images/worker/Dockerfile",
            "fixtures/images/daemon/Dockerfile",
            "fixtures/images/harness/Dockerfile",
            "kind/cluster.yaml",
        ] {
            assert!(paths.contains(&needed), "{needed} is not carried");
        }
        let mut sorted = paths.clone();
        sorted.sort_unstable();
        assert_eq!(paths, sorted);
        // Each carried file is the checkout's (the build's) file.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for (path, bytes) in generated::FIXTURES {
            assert_eq!(std::fs::read(root.join(path)).unwrap(), *bytes, "{path}");
        }
    }

    #[test]
    fn the_carried_mock_agent_is_a_static_executable() {
        let bytes = generated::MOCK_AGENT.unwrap();
        assert_eq!(&bytes[..5], b"\x7fELF\x02", "a 64-bit ELF file");
        // A static binary has no program interpreter (no PT_INTERP program header): it runs
        // in FROM scratch. ELF64: e_phoff at 0x20, e_phentsize at 0x36, e_phnum at 0x38.
        let at = |offset: usize, len: usize| {
            let mut value = 0u64;
            for (i, byte) in bytes[offset..offset + len].iter().enumerate() {
                value |= u64::from(*byte) << (8 * i);
            }
            usize::try_from(value).unwrap()
        };
        let (table, size, count) = (at(0x20, 8), at(0x36, 2), at(0x38, 2));
        let types: Vec<usize> = (0..count).map(|i| at(table + i * size, 4)).collect();
        const PT_LOAD: usize = 1;
        const PT_INTERP: usize = 3;
        assert!(types.contains(&PT_LOAD), "program headers read: {types:?}");
        assert!(
            !types.contains(&PT_INTERP),
            "the mock agent is dynamic: {types:?}"
        );
    }
}
