//! The credentials scan of `image::recipe`: every file of an image's layer folders, by name and
//! by content (private keys, cloud access key ids, bearer tokens, Docker `auths`, `.netrc`,
//! kubeconfig material); a finding names the layer and path, never the value.
//!
//! A crate of its own so that it is compiled optimised in the debug build too (the root
//! Cargo.toml's `[profile.dev.package.kandev-credential-scan]`): the scan reads ~42k files,
//! and std's string searches (`contains`, `find`, `to_ascii_lowercase`, `from_utf8_lossy`) are
//! generic or inline, so they are compiled in the crate that calls them, at its opt-level.
//! Called from the scenarios crate's debug code they cost ~10 s of CPU per catalogue;
//! optimised, the scan is mostly the kernel reading the files. No dependencies: it compiles in
//! about a second.

use std::path::{Path, PathBuf};

/// Folders not scanned by content: Debian's documentation and translations, and test data
/// (Go's standard library sources carry test keys, e.g. crypto/x509's platform_root_key.pem).
const SKIP_CONTENT: [&str; 8] = [
    "usr/share/go-",
    "usr/lib/go-",
    "usr/share/doc/",
    "usr/share/man/",
    "usr/share/locale/",
    "usr/share/zoneinfo/",
    "usr/share/i18n/",
    "/testdata/",
];
/// Files larger than this are not read (secrets live in small files).
const MAX_SCANNED: u64 = 256 * 1024;
/// Compiled code, archives and media: not read by content (their names are still checked).
const BINARY_SUFFIXES: [&str; 12] = [
    ".so", ".a", ".o", ".rlib", ".rmeta", ".png", ".gz", ".xz", ".pak", ".mo", ".pyc", ".bin",
];

/// Walks each layer folder (`names[i]` names `dirs[i]` in findings); returns how many files
/// were read, and each credential found as `<layer> /<path>: <kind>` (never the value).
pub fn scan_layers(dirs: &[PathBuf], names: &[String]) -> (usize, Vec<String>) {
    let mut files = 0;
    let mut found = Vec::new();
    for (dir, name) in dirs.iter().zip(names) {
        let mut stack = vec![dir.clone()];
        while let Some(current) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&current) else {
                continue;
            };
            for entry in entries.flatten() {
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                let path = entry.path();
                if kind.is_dir() {
                    stack.push(path);
                    continue;
                }
                if !kind.is_file() {
                    continue;
                }
                let relative = path
                    .strip_prefix(dir)
                    .unwrap_or(&path)
                    .to_string_lossy()
                    .into_owned();
                if let Some(kind) = secret_by_name(&relative) {
                    found.push(format!("{name} /{relative}: {kind}"));
                    continue;
                }
                if SKIP_CONTENT.iter().any(|s| relative.contains(s))
                    || BINARY_SUFFIXES.iter().any(|s| relative.ends_with(s))
                    || relative.contains(".so.")
                    || entry.metadata().map_or(true, |m| m.len() > MAX_SCANNED)
                {
                    continue;
                }
                files += 1;
                if let Some(kind) = secret_in_file(&path, &relative) {
                    found.push(format!("{name} /{relative}: {kind}"));
                }
            }
        }
    }
    (files, found)
}

/// A file whose name alone says it holds credentials (only when it has content).
pub fn secret_by_name(relative: &str) -> Option<&'static str> {
    let base = relative.rsplit('/').next().unwrap_or_default();
    match base {
        ".netrc" | "_netrc" => Some(".netrc credentials"),
        "id_rsa" | "id_ecdsa" | "id_ed25519" | "id_dsa" => Some("an SSH private key"),
        "credentials" if relative.ends_with(".aws/credentials") => Some("AWS credentials"),
        _ => None,
    }
}

fn secret_in_file(path: &Path, relative: &str) -> Option<&'static str> {
    let bytes = std::fs::read(path).ok()?;
    if !may_hold_secret(&bytes) {
        return None;
    }
    secret_in_decoded(&bytes, relative)
}

/// The tests of [`secret_in_file`] on the file's text (invalid UTF-8 replaced).
fn secret_in_decoded(bytes: &[u8], relative: &str) -> Option<&'static str> {
    let text = String::from_utf8_lossy(bytes);
    if relative.ends_with(".docker/config.json") && text.contains("\"auths\"") {
        let auth = text.contains("\"auth\"") || text.contains("\"identitytoken\"");
        if auth {
            return Some("Docker registry auths");
        }
    }
    if text.contains("client-key-data:")
        || (text.contains("kind: Config") && text.contains("users:") && text.contains("token:"))
    {
        return Some("kubeconfig credentials");
    }
    secret_in_text(&text)
}

/// Whether `bytes` holds, ignoring ASCII case, any string every test below needs to find: the
/// Docker `"auths"` key, kubeconfig's `client-key-data:` or `kind: Config`, a private key's
/// `-----BEGIN `, an access key id's `AKIA`/`ASIA`, `bearer `. When none is there, no test of
/// [`secret_in_decoded`] can hold and the file is not decoded: a quarter of the bytes read are
/// compiled programs, which `from_utf8_lossy` copies with a replacement character for every
/// invalid sequence (most of the scan's CPU). Exact: the strings are ASCII, and the lossy
/// decoding keeps every ASCII byte in place.
fn may_hold_secret(bytes: &[u8]) -> bool {
    // Folded to lower-case ASCII (every other byte a NUL, which no needle holds), the bytes are
    // a `str` that std's vectorised substring search can take.
    let folded: Vec<u8> = bytes
        .iter()
        .map(|b| {
            if b.is_ascii() {
                b.to_ascii_lowercase()
            } else {
                0
            }
        })
        .collect();
    let Ok(folded) = std::str::from_utf8(&folded) else {
        return true;
    };
    [
        "\"auths\"",
        "client-key-data:",
        "kind: config",
        "-----begin ",
        "akia",
        "asia",
        "bearer ",
    ]
    .iter()
    .any(|needle| folded.contains(needle))
}

/// Private keys, cloud access key ids and bearer tokens in `text`.
pub fn secret_in_text(text: &str) -> Option<&'static str> {
    // Every test first searches with `find`/`contains` and walks lines or bytes only around a
    // hit (a byte-by-byte walk of every file cost ~10 s of CPU when this was compiled
    // unoptimised).
    if text.contains("-----BEGIN ")
        && text.lines().any(|l| {
            let l = l.trim();
            l.starts_with("-----BEGIN ") && l.ends_with("PRIVATE KEY-----")
        })
    {
        return Some("a private key");
    }
    if has_access_key_id(text) {
        return Some("a cloud access key id");
    }
    let lower = text.to_ascii_lowercase();
    let mut rest = lower.as_str();
    while let Some(i) = rest.find("bearer ") {
        let token: String = rest[i + 7..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || "._~+/=-".contains(*c))
            .collect();
        if token.len() >= 20 {
            return Some("a bearer token");
        }
        rest = &rest[i + 7..];
    }
    None
}

/// `AKIA`/`ASIA` followed by 16 upper-case letters or digits, as AWS access key ids are.
fn has_access_key_id(text: &str) -> bool {
    let bytes = text.as_bytes();
    ["AKIA", "ASIA"].iter().any(|prefix| {
        text.match_indices(prefix).any(|(i, _)| {
            bytes.get(i..i + 20).is_some_and(|w| {
                w[4..]
                    .iter()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
            }) && (i == 0 || !bytes[i - 1].is_ascii_alphanumeric())
                && bytes.get(i + 20).is_none_or(|b| !b.is_ascii_alphanumeric())
        })
    })
}

/// An `Env` entry that holds a secret: by its value, or a secret-named variable with a value.
pub fn secret_in_env(entry: &str) -> Option<&'static str> {
    let (name, value) = entry.split_once('=')?;
    if let Some(kind) = secret_in_text(value) {
        return Some(kind);
    }
    let upper = name.to_ascii_uppercase();
    let named = [
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "API_KEY",
        "ACCESS_KEY",
    ]
    .iter()
    .any(|s| upper.contains(s));
    (named && !value.is_empty()).then_some("a secret-named variable with a value")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_recognised_without_their_values() {
        assert_eq!(
            secret_in_text("-----BEGIN OPENSSH PRIVATE KEY-----\nabc"),
            Some("a private key")
        );
        assert_eq!(
            secret_in_text("key=AKIAFAKEFAKEFAKEFAKE"),
            Some("a cloud access key id")
        );
        assert_eq!(secret_in_text("xAKIAFAKEFAKEFAKEFAKE"), None);
        assert_eq!(
            secret_in_text("Authorization: Bearer abcdefghijklmnopqrstuvwxyz"),
            Some("a bearer token")
        );
        assert_eq!(secret_in_text("-----BEGIN CERTIFICATE-----"), None);
        assert_eq!(
            secret_in_env("GITHUB_TOKEN=x"),
            Some("a secret-named variable with a value")
        );
        assert_eq!(secret_in_env("PATH=/usr/bin"), None);
        assert_eq!(secret_by_name("root/.netrc"), Some(".netrc credentials"));
    }

    #[test]
    fn the_prefilter_passes_every_needle_in_any_case_and_around_invalid_bytes() {
        for text in [
            &b"x\"auths\"y"[..],
            b"CLIENT-KEY-DATA:",
            b"Kind: Config",
            b"\xff-----BEGIN \xfe",
            b"\x80AkIa",
            b"asia",
            b"\xe2\x82BEARER ",
        ] {
            assert!(may_hold_secret(text), "{text:?}");
        }
        for text in [
            &b""[..],
            b"aki",
            b"bearer",
            b"\xff\xfe----BEGIN",
            b"kind:config",
        ] {
            assert!(!may_hold_secret(text), "{text:?}");
        }
    }

    #[test]
    fn the_prefilter_never_changes_a_verdict() {
        // Texts pieced together from the tests' strings, their near misses and invalid UTF-8:
        // whatever the decoded tests find, the prefiltered scan finds.
        let pieces: [&[u8]; 16] = [
            b"-----BEGIN ",
            b"RSA PRIVATE KEY-----",
            b"\n",
            b"AKIA",
            b"ASIA",
            b"FAKEFAKEFAKEFAKE",
            b"Bearer ",
            b"abcdefghijklmnopqrstu",
            b"\"auths\"",
            b"\"auth\"",
            b"client-key-data:",
            b"kind: Config users: token:",
            b"\xff",
            b"\xe2\x82",
            b"\xc3\xa9",
            b" ",
        ];
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut found = 0;
        for _ in 0..20_000 {
            let mut text = Vec::new();
            for _ in 0..6 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                text.extend_from_slice(pieces[(state % 16) as usize]);
            }
            for relative in ["etc/x", "root/.docker/config.json"] {
                let decoded = secret_in_decoded(&text, relative);
                let filtered = may_hold_secret(&text)
                    .then(|| secret_in_decoded(&text, relative))
                    .flatten();
                assert_eq!(filtered, decoded, "{text:?}");
                found += usize::from(decoded.is_some());
            }
        }
        assert!(found > 1000, "the texts hold secrets often enough: {found}");
    }

    #[test]
    fn a_scan_names_layer_and_path_skips_what_it_should_and_counts_what_it_read() {
        let root = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
        let write = |rel: &str, text: &[u8]| {
            let path = root.path().join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).unwrap_or_else(|e| unreachable!("{e}"));
            }
            std::fs::write(path, text).unwrap_or_else(|e| unreachable!("{e}"));
        };
        write("l1/etc/hosts", b"127.0.0.1 localhost\n");
        write("l1/root/.netrc", b"machine x login y password z\n");
        write(
            "l1/usr/share/doc/k/README",
            b"-----BEGIN RSA PRIVATE KEY-----\n",
        );
        write("l1/usr/lib/x.so", b"AKIAFAKEFAKEFAKEFAKE");
        write(
            "l2/opt/deploy/aws.ini",
            b"[default]\nkey = AKIAFAKEACCEPTANCE00\n",
        );
        // Compiled programs are read too: not UTF-8, decoded only around what they hold.
        write(
            "l2/usr/bin/tool",
            b"\x7fELF\xff\xfe\x00AKIAFAKEFAKEFAKEFAKE\x00\x80",
        );
        write(
            "l2/usr/bin/clean",
            b"\x7fELF\xff\xfe\x00akiaFAKE bearer x \x80",
        );
        write(
            "l2/usr/bin/http",
            b"\xc3\x28 BeArEr abcdefghijklmnopqrstuvwxyz\xff",
        );
        let mut big = b"Bearer abcdefghijklmnopqrstuvwxyz\n".to_vec();
        big.resize(300 * 1024, b' ');
        write("l2/opt/big.txt", &big);
        let dirs = [root.path().join("l1"), root.path().join("l2")];
        let names = ["layer 1/2".to_owned(), "layer 2/2".to_owned()];
        let (files, mut found) = scan_layers(&dirs, &names);
        found.sort();
        assert_eq!(
            files, 5,
            "hosts, aws.ini and the programs are read; the rest skipped"
        );
        assert_eq!(
            found,
            [
                "layer 1/2 /root/.netrc: .netrc credentials",
                "layer 2/2 /opt/deploy/aws.ini: a cloud access key id",
                "layer 2/2 /usr/bin/http: a bearer token",
                "layer 2/2 /usr/bin/tool: a cloud access key id",
            ]
        );
    }
}
