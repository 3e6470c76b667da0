//! The library's layers: each top-level module of `harness/src` uses only the modules listed
//! before it in `LAYERS` (lib.rs says what each holds). A use of a later layer is an import
//! cycle in the making and fails here, naming the file.

const LAYERS: &[&str] = &[
    "error_chain",
    "wait",
    "paths",
    "pod",
    "config",
    "node",
    "host",
    "backend",
    "session",
    "runner",
    "outputs",
    "cli",
];

fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn each_layer_uses_only_the_layers_before_it() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut violations = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap_or(&file);
        let top = relative
            .components()
            .next()
            .map(|c| {
                c.as_os_str()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_owned()
            })
            .unwrap_or_default();
        if top == "lib" {
            continue;
        }
        let Some(own) = LAYERS.iter().position(|l| *l == top) else {
            violations.push(format!(
                "{}: module {top} is not in LAYERS",
                relative.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        // Tests may reach anywhere.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (index, _) in code.match_indices("crate::") {
            let used: String = code[index + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if let Some(layer) = LAYERS.iter().position(|l| *l == used)
                && layer > own
            {
                violations.push(format!("{}: {top} uses {used}", relative.display()));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "layer order broken:\n{}",
        violations.join("\n")
    );
}

/// No two modules of the library (or of the report crate) use each other, directly or round a
/// loop: splitting a file must not leave its halves calling each other. A folder's `mod.rs`
/// and its own children are exempt (`Kinship::Ignored`): the parent holds the trait or types
/// the children implement and dispatches to them.
#[test]
fn no_two_modules_use_each_other_round_a_loop() {
    use kandev_test_support::import_circles::{Kinship, circles};
    let harness = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    for src in [harness.join("src"), harness.join("report/src")] {
        let found = circles(&src, Kinship::Ignored);
        assert!(
            found.is_empty(),
            "modules of {} that use each other:\n{}",
            src.display(),
            found.join("\n")
        );
    }
}
