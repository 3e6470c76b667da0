//! Import circles of a crate's modules: two modules (files) that use each other, directly or
//! round a loop. A module uses another when it names it or an item of it through `crate::`,
//! `super::` or (a parent) a child's name in its code; declaring a child module, or naming
//! one in a comment, is no use of it. This crate is held to [`Kinship::Counted`] (its own
//! test below); the harness's library and the report crate to [`Kinship::Ignored`]
//! (`harness/tests/layers.rs`), where a folder's `mod.rs` holds the trait or types its
//! children implement and dispatches to them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module path (`cluster_double::store`, "" for the crate root) -> its file's code, tests cut.
fn modules(src: &Path) -> BTreeMap<String, String> {
    fn walk(dir: &Path, prefix: &[String], out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                let mut inner = prefix.to_vec();
                inner.push(name);
                walk(&path, &inner, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let mut module = prefix.to_vec();
                if name != "mod" && name != "lib" {
                    module.push(name);
                }
                let text = std::fs::read_to_string(&path).unwrap();
                // A file's own tests may reach anywhere; comments (doc links) use nothing.
                let code = text.split("#[cfg(test)]").next().unwrap_or_default();
                let code: Vec<&str> = code
                    .lines()
                    .map(|line| line.split("//").next().unwrap_or_default())
                    .collect();
                out.insert(module.join("::"), code.join("\n"));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, &[], &mut out);
    out
}

fn parent(module: &str) -> String {
    module
        .rsplit_once("::")
        .map(|(p, _)| p.to_owned())
        .unwrap_or_default()
}

fn join(base: &str, name: &str) -> String {
    if base.is_empty() {
        name.to_owned()
    } else {
        format!("{base}::{name}")
    }
}

/// The paths a piece of code names from `start` (`crate`, `super`, a child's name): each
/// path's segments, a `{...}` group expanded one level.
fn paths_from(code: &str, start: &str) -> Vec<Vec<String>> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    for (at, _) in code.match_indices(&format!("{start}::")) {
        if code[..at].chars().next_back().is_some_and(is_ident) || code[..at].ends_with("::") {
            continue;
        }
        let rest = &code[at + start.len() + 2..];
        let mut segments = Vec::new();
        let mut rest = rest;
        loop {
            let ident: String = rest.chars().take_while(|c| is_ident(*c)).collect();
            if ident.is_empty() {
                break;
            }
            segments.push(ident.clone());
            rest = &rest[ident.len()..];
            match rest.strip_prefix("::") {
                Some(more) => rest = more,
                None => break,
            }
        }
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or_default();
            for item in group.split(',') {
                let first: String = item.trim().chars().take_while(|c| is_ident(*c)).collect();
                if !first.is_empty() {
                    let mut path = segments.clone();
                    path.push(first);
                    found.push(path);
                }
            }
        } else {
            found.push(segments);
        }
    }
    found
}

/// The module a path names: its longest prefix that is a module.
fn target(base: &str, segments: &[String], known: &BTreeSet<String>) -> String {
    let mut module = base.to_owned();
    for segment in segments {
        let inner = join(&module, segment);
        if !known.contains(&inner) {
            break;
        }
        module = inner;
    }
    module
}

/// Whether a module's use of its own ancestor or descendant counts toward a circle.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kinship {
    /// Every use counts: a parent that re-exports a child which uses the parent is a circle.
    Counted,
    /// Only uses between modules that are not each other's ancestor: siblings and cousins.
    Ignored,
}

/// Every import circle among the modules under `src` (a crate's `src` folder), each as
/// `a -> b -> a` (the crate root named `lib`); empty when there is none.
pub fn circles(src: &Path, kinship: Kinship) -> Vec<String> {
    let modules = modules(src);
    let known: BTreeSet<String> = modules.keys().cloned().collect();
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in &modules {
        let mut used = BTreeSet::new();
        for path in paths_from(code, "crate") {
            used.insert(target("", &path, &known));
        }
        for path in paths_from(code, "super") {
            let mut base = parent(module);
            let mut path = path.as_slice();
            while path.first().is_some_and(|s| s == "super") {
                base = parent(&base);
                path = &path[1..];
            }
            used.insert(target(&base, path, &known));
        }
        for child in known
            .iter()
            .filter(|k| parent(k) == *module && *k != module)
        {
            let name = child.rsplit("::").next().unwrap_or_default();
            if !paths_from(code, name).is_empty() {
                used.insert(child.clone());
            }
        }
        used.remove(module);
        if kinship == Kinship::Ignored {
            let kin = |a: &str, b: &str| a.is_empty() || b.starts_with(&format!("{a}::"));
            used.retain(|other| !kin(other, module) && !kin(module, other));
        }
        uses.insert(module.clone(), used);
    }
    // Every loop, found by a depth-first walk from each module.
    let mut circles = BTreeSet::new();
    for start in uses.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, trail)) = stack.pop() {
            for next in uses.get(&at).into_iter().flatten() {
                if next == start {
                    circles.insert(trail.join(" -> ") + " -> " + start);
                } else if !trail.contains(next) && next > start {
                    let mut longer = trail.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    let name = |m: &str| {
        if m.is_empty() {
            "lib".to_owned()
        } else {
            m.to_owned()
        }
    };
    circles
        .iter()
        .map(|c| c.split(" -> ").map(name).collect::<Vec<_>>().join(" -> "))
        .collect()
}

#[test]
fn no_two_modules_use_each_other_directly_or_round_a_loop() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let circles = circles(&src, Kinship::Counted);
    assert!(
        circles.is_empty(),
        "modules that use each other:\n{}",
        circles.join("\n")
    );
}
