//! The documentation is tested like code: `README.md`, every `docs/*.md`, and every other
//! Markdown file of the repository (`kind/README.md`, `fixtures/kube/README.md`, ...).
//!
//! - Every relative link (`[text](path)`, `[text](path#anchor)`, `[text](#anchor)`, images
//!   too) names a file or folder that exists, and an anchor that a heading of the linked file
//!   makes (GitHub's rule: lowercase, every character but letters, digits, ` `, `-` and `_`
//!   dropped, spaces as `-`, a repeated heading `-1`, `-2`, ...).
//! - Every `cargo acceptance ...` or `kandev-acceptance ...` command quoted in a fenced `sh`
//!   block parses with the binary's own command line (`kandev_harness::cli::command()`). The
//!   conventions a quoted command may use (`docs/development.md` states them too): a `\` at a
//!   line's end continues it; `# ...` at a word's start is a comment; `&&`, `||`, `|` (each
//!   after a space), `;` and `$(...)` separate commands; `>`, `>>` and `2>` redirections are
//!   dropped with their target; `[...]` is optional (the command is parsed without every
//!   optional part, then with all of them, brackets removed); `a|b` inside a word offers
//!   alternatives (each is parsed); a lone `...` stands for arguments left out; placeholders
//!   (`ID`, `FILE`, `<digest>`) are plain values, so a flag whose value is typed (a number, a
//!   capability) is quoted with an example value instead; but `<run-id>`, which `--run` and
//!   `--run-id` check, stands for a run id (read as [`EXAMPLE_RUN_ID`]) wherever it appears.
//! - README's exit codes table lists exactly the codes `kandev_report::exit` defines.
//! - `docs/examples/github-workflow.yml` is the workflow `docs/ci.md` quotes, valid YAML with
//!   the steps `docs/ci.md` describes, and every command it runs parses as above.
//!
//! The checker's own test feeds it a bad flag, a missing file and a missing anchor, and
//! expects each found.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    kandev_harness::paths::workspace_root()
}

/// Every Markdown file of the repository (build output, runs' reports and hidden folders left
/// out), as paths relative to the root, with their text; README.md first.
fn documents() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read the folder {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if path.is_dir() {
                // reports/ holds runs' folders (written by root in CI), not documentation.
                let skipped =
                    name == "target" || name.starts_with('.') || path == root().join("reports");
                if !skipped {
                    walk(&path, found);
                }
            } else if name.ends_with(".md") {
                found.push(path.strip_prefix(root()).unwrap().to_owned());
            }
        }
    }
    let mut paths = Vec::new();
    walk(&root(), &mut paths);
    paths.sort_by_key(|path| (path != Path::new("README.md"), path.clone()));
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(root().join(&path)).unwrap();
            (path, text)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Markdown: fenced blocks, headings, links

/// A fenced code block: its info string (`sh`, `yaml`, ...), its first line's number and
/// its text.
struct Fence {
    info: String,
    line: usize,
    text: String,
}

/// The document split into its prose (fenced blocks blanked, so line numbers stay) and its
/// fenced blocks. A fence opens and closes with ``` or ~~~ indented at most 3 spaces.
fn split_fences(text: &str) -> (String, Vec<Fence>) {
    let mut prose = String::new();
    let mut fences = Vec::new();
    let mut open: Option<(String, Fence)> = None;
    for (i, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"]
            .into_iter()
            .find(|m| indent <= 3 && trimmed.starts_with(m));
        let closes = matches!(&open, Some((m, _)) if trimmed.trim() == m.as_str());
        match (&mut open, marker) {
            (None, Some(m)) => {
                let fence = Fence {
                    info: trimmed.trim_start_matches(m).trim().to_owned(),
                    line: i + 1,
                    text: String::new(),
                };
                open = Some((m.to_owned(), fence));
            }
            (Some(_), _) if closes => {
                if let Some((_, fence)) = open.take() {
                    fences.push(fence);
                }
            }
            (Some((_, fence)), _) => {
                fence.text.push_str(line);
                fence.text.push('\n');
            }
            (None, None) => prose.push_str(line),
        }
        prose.push('\n');
    }
    (prose, fences)
}

/// `text` without its inline code spans (a run of backticks to the next run as long).
fn without_code_spans(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let run = rest[start..].chars().take_while(|c| *c == '`').count();
        let after = &rest[start + run..];
        let closing = "`".repeat(run);
        match after.find(&closing) {
            Some(end) => {
                // Keep the line count: a span may cross lines.
                out.extend(after[..end].chars().filter(|c| *c == '\n'));
                rest = &after[end + run..];
            }
            None => {
                out.push_str(&rest[start..start + run]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// GitHub's anchor of a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor the headings of a Markdown text make.
fn anchors(text: &str) -> BTreeSet<String> {
    let (prose, _) = split_fences(text);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose.lines() {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&line[hashes..]);
        let count = seen.entry(base.clone()).or_insert(0);
        out.insert(if *count == 0 {
            base.clone()
        } else {
            format!("{base}-{count}")
        });
        *count += 1;
    }
    out
}

/// Every link target in a document's prose, with its line number.
fn links(text: &str) -> Vec<(usize, String)> {
    let (prose, _) = split_fences(text);
    let prose = without_code_spans(&prose);
    let mut out = Vec::new();
    for (i, line) in prose.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or_default();
            out.push((i + 1, target.to_owned()));
            rest = &after[end..];
        }
    }
    out
}

/// What is wrong with the links of `doc` (a path relative to `root`, with its text).
fn link_problems(root: &Path, doc: &Path, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (line, target) in links(text) {
        if ["http://", "https://", "mailto:"]
            .iter()
            .any(|scheme| target.starts_with(scheme))
        {
            continue;
        }
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target.as_str(), None),
        };
        let file = if path.is_empty() {
            root.join(doc)
        } else {
            root.join(doc.parent().unwrap_or(Path::new(""))).join(path)
        };
        let at = format!("{}:{line}: ({target})", doc.display());
        if !file.exists() {
            problems.push(format!("{at}: {} does not exist", file.display()));
            continue;
        }
        if let Some(anchor) = anchor {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            if !anchors(&text).contains(anchor) {
                problems.push(format!(
                    "{at}: no heading of {} makes the anchor #{anchor}",
                    file.display()
                ));
            }
        }
    }
    problems
}

// ---------------------------------------------------------------------------------------
// Commands: a small shell-like reading, with the documentation's conventions

#[derive(Debug, PartialEq)]
enum Token {
    Word(String),
    /// `&&`, `||`, `|`, `;`, `$(`, `)`: where one command ends.
    Separator,
}

/// One logical line (continuations joined) as words and separators; quotes removed,
/// comments and redirections dropped, `${{ ... }}` (GitHub expressions) kept whole.
fn lex(line: &str) -> Vec<Token> {
    let chars: Vec<char> = line.chars().collect();
    let mut tokens = Vec::new();
    let mut word: Option<String> = None;
    let (mut single, mut double) = (false, false);
    // The double-quote state outside each open `$(`.
    let mut substitutions: Vec<bool> = Vec::new();
    let mut skip_next_word = false;
    let mut i = 0;
    let finish = |word: &mut Option<String>, skip: &mut bool, tokens: &mut Vec<Token>| {
        if let Some(w) = word.take() {
            if *skip {
                *skip = false;
            } else {
                tokens.push(Token::Word(w));
            }
        }
    };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let at_start = word.is_none();
        if single {
            if c == '\'' {
                single = false;
            } else {
                word.get_or_insert_with(String::new).push(c);
            }
            i += 1;
            continue;
        }
        if c == '$' && next == Some('{') && chars.get(i + 2) == Some(&'{') {
            let text: String = chars[i..].iter().collect();
            let end = text.find("}}").map_or(text.len(), |e| e + 2);
            word.get_or_insert_with(String::new).push_str(&text[..end]);
            i += text[..end].chars().count();
            continue;
        }
        if c == '$' && next == Some('(') {
            finish(&mut word, &mut skip_next_word, &mut tokens);
            tokens.push(Token::Separator);
            substitutions.push(double);
            double = false;
            i += 2;
            continue;
        }
        if c == '"' {
            double = !double;
            word.get_or_insert_with(String::new);
            i += 1;
            continue;
        }
        if double {
            word.get_or_insert_with(String::new).push(c);
            i += 1;
            continue;
        }
        match c {
            '\'' => {
                single = true;
                word.get_or_insert_with(String::new);
                i += 1;
            }
            c if c.is_whitespace() => {
                finish(&mut word, &mut skip_next_word, &mut tokens);
                i += 1;
            }
            '#' if at_start => break,
            ')' if !substitutions.is_empty() => {
                finish(&mut word, &mut skip_next_word, &mut tokens);
                tokens.push(Token::Separator);
                double = substitutions.pop().unwrap_or(false);
                i += 1;
            }
            ';' => {
                finish(&mut word, &mut skip_next_word, &mut tokens);
                tokens.push(Token::Separator);
                i += 1;
            }
            '&' | '|' if at_start && (next == Some(c) || c == '|') => {
                tokens.push(Token::Separator);
                i += if next == Some(c) { 2 } else { 1 };
            }
            '>' if at_start
                || word
                    .as_deref()
                    .is_some_and(|w| w.chars().all(|d| d.is_ascii_digit())) =>
            {
                // A redirection: drop it and its target (attached, or the next word).
                word = None;
                i += 1;
                while i < chars.len() && matches!(chars[i], '>' | '&') {
                    i += 1;
                }
                if i < chars.len() && !chars[i].is_whitespace() {
                    while i < chars.len() && !chars[i].is_whitespace() && chars[i] != ';' {
                        i += 1;
                    }
                } else {
                    skip_next_word = true;
                }
            }
            c => {
                word.get_or_insert_with(String::new).push(c);
                i += 1;
            }
        }
    }
    finish(&mut word, &mut skip_next_word, &mut tokens);
    tokens
}

/// The logical lines of a shell text: `\`-continued lines joined, with the first line's
/// number (1-based, within `text`).
fn logical_lines(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut continued = false;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_end();
        let (body, continues) = match trimmed.strip_suffix('\\') {
            Some(body) => (body, true),
            None => (trimmed, false),
        };
        match (continued, out.last_mut()) {
            (true, Some((_, last))) => {
                last.push(' ');
                last.push_str(body);
            }
            _ => out.push((i + 1, body.to_owned())),
        }
        continued = continues;
    }
    out
}

/// The arguments of every `cargo acceptance` / `kandev-acceptance` command in a shell text
/// (after the program's name), with their line numbers.
fn commands(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    for (line, logical) in logical_lines(text) {
        let tokens = lex(&logical);
        for segment in tokens.split(|t| *t == Token::Separator) {
            let words: Vec<&str> = segment
                .iter()
                .filter_map(|t| match t {
                    Token::Word(w) => Some(w.as_str()),
                    Token::Separator => None,
                })
                .collect();
            let start = words.iter().enumerate().find_map(|(i, w)| {
                if *w == "kandev-acceptance" || w.ends_with("/kandev-acceptance") {
                    Some(i + 1)
                } else if *w == "cargo" && words.get(i + 1) == Some(&"acceptance") {
                    Some(i + 2)
                } else {
                    None
                }
            });
            if let Some(start) = start {
                out.push((
                    line,
                    words[start..].iter().map(|w| (*w).to_owned()).collect(),
                ));
            }
        }
    }
    out
}

/// The concrete argument lists a documented command stands for: without every `[...]`
/// group, then with all of them; in each, every alternative of an `a|b` word once (the
/// other words at their first). A lone `...` is dropped.
fn variants(args: &[String]) -> Result<Vec<Vec<String>>, String> {
    let mut bare = Vec::new();
    let mut full = Vec::new();
    let mut depth = 0usize;
    for arg in args.iter().filter(|a| a.as_str() != "...") {
        let opens = arg.starts_with('[');
        let closes = arg.ends_with(']');
        let inner = arg.trim_start_matches('[').trim_end_matches(']');
        if opens {
            depth += 1;
        }
        if depth > 1 {
            return Err(format!("nested [ ] in {args:?}"));
        }
        if depth == 0 {
            bare.push(inner.to_owned());
        }
        if !inner.is_empty() {
            full.push(inner.to_owned());
        }
        if closes {
            depth = depth
                .checked_sub(1)
                .ok_or_else(|| format!("a ] without [ in {args:?}"))?;
        }
    }
    if depth != 0 {
        return Err(format!("a [ without ] in {args:?}"));
    }
    let mut out = Vec::new();
    for words in [bare, full] {
        let first: Vec<String> = words
            .iter()
            .map(|w| w.split('|').next().unwrap_or_default().to_owned())
            .collect();
        out.push(first.clone());
        for (i, word) in words.iter().enumerate() {
            for alternative in word.split('|').skip(1) {
                let mut variant = first.clone();
                variant[i] = alternative.to_owned();
                out.push(variant);
            }
        }
    }
    out.dedup();
    Ok(out)
}

/// What `<run-id>` in a documented command is read as: a run id as the harness makes them.
const EXAMPLE_RUN_ID: &str = "20261203t141500-3fa9c1";

/// What `<digest>` in a documented command is read as: a sha256 digest's hex.
const EXAMPLE_DIGEST: &str = "3fa9c1d2e4b5a6978f0e1d2c3b4a59687f6e5d4c3b2a19087f6e5d4c3b2a1908";

/// What an image reference a workflow takes from its inputs is read as.
const EXAMPLE_IMAGE: &str = "registry.example/image@sha256:3fa9c1d2e4b5a6978f0e1d2c3b4a59687f6e5d4c3b2a19087f6e5d4c3b2a1908";

/// Why a documented command does not parse, or parses and is refused before any work (none:
/// it would run).
fn command_problems(args: &[String]) -> Vec<String> {
    let args: Vec<String> = args
        .iter()
        .map(|arg| {
            arg.replace("<run-id>", EXAMPLE_RUN_ID)
                .replace("<digest>", EXAMPLE_DIGEST)
        })
        .collect();
    let variants = match variants(&args) {
        Ok(v) => v,
        Err(e) => return vec![e],
    };
    let mut problems = Vec::new();
    for variant in variants {
        let argv: Vec<String> = std::iter::once("kandev-acceptance".to_owned())
            .chain(variant.iter().cloned())
            .collect();
        let parsed = kandev_harness::cli::command().try_get_matches_from(&argv);
        if parsed.is_ok()
            && let Err(refusal) = kandev_harness::cli::refused_at_once(&argv)
        {
            let first = refusal.lines().next().unwrap_or_default().to_owned();
            problems.push(format!(
                "`kandev-acceptance {}`: refused: {first}",
                variant.join(" ")
            ));
        }
        if let Err(e) = parsed {
            use clap::error::ErrorKind::*;
            if !matches!(
                e.kind(),
                DisplayHelp | DisplayVersion | DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let first = e.to_string().lines().next().unwrap_or_default().to_owned();
                problems.push(format!(
                    "`kandev-acceptance {}`: {first}",
                    variant.join(" ")
                ));
            }
        }
    }
    problems
}

/// Every documented command of a Markdown text that does not parse, at its line.
fn markdown_command_problems(doc: &Path, text: &str) -> (usize, Vec<String>) {
    let (_, fences) = split_fences(text);
    let mut count = 0;
    let mut problems = Vec::new();
    for fence in fences
        .iter()
        .filter(|f| matches!(f.info.as_str(), "sh" | "bash" | "shell" | "console"))
    {
        for (line, args) in commands(&fence.text) {
            count += 1;
            for problem in command_problems(&args) {
                problems.push(format!(
                    "{}:{}: {problem}",
                    doc.display(),
                    fence.line + line
                ));
            }
        }
    }
    (count, problems)
}

/// The scenarios of the catalogue, as `docs/catalogue.md`'s checks table lists them (a test in
/// `scenarios/tests/twins.rs` keeps that table equal to the registry).
fn catalogue_scenarios(catalogue: &str) -> BTreeSet<String> {
    catalogue
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split_once('/'))
        .map(|(scenario, _)| scenario.to_owned())
        .filter(|scenario| scenario.contains("::"))
        .collect()
}

/// Every evidence folder a text names (`reports/<run-id>/NAME/` or `<run>/NAME/`) that is not a
/// scenario's: the run writes a scenario's evidence under its name with `::` written `-`
/// (`runner/evidence.rs`).
fn evidence_folder_problems(doc: &Path, text: &str, scenarios: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    for prefix in ["reports/<run-id>/", "<run>/"] {
        for (at, _) in text.match_indices(prefix) {
            let rest = &text[at + prefix.len()..];
            let Some((folder, _)) = rest.split_once('/') else {
                continue;
            };
            if folder.is_empty()
                || !folder
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            {
                continue;
            }
            if !scenarios.contains(&folder.replacen('-', "::", 1)) {
                let line = text[..at].lines().count().max(1);
                problems.push(format!(
                    "{}:{line}: {prefix}{folder}/ is no scenario's evidence folder (a scenario's is its name with :: written -)",
                    doc.display()
                ));
            }
        }
    }
    problems
}

// ---------------------------------------------------------------------------------------
// The tests

#[test]
fn every_link_in_the_docs_resolves() {
    let mut problems = Vec::new();
    let mut count = 0;
    for (path, text) in documents() {
        count += links(&text).len();
        problems.extend(link_problems(&root(), &path, &text));
    }
    assert!(
        count > 50,
        "only {count} links found: is the link reader broken?"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_command_the_docs_quote_parses() {
    let mut problems = Vec::new();
    let mut per_doc = Vec::new();
    for (path, text) in documents() {
        let (count, found) = markdown_command_problems(&path, &text);
        per_doc.push((path, count));
        problems.extend(found);
    }
    // Every reader's document quotes commands (a reader that found none was misread).
    let for_a_reader = |path: &Path| path == Path::new("README.md") || path.starts_with("docs");
    for (path, count) in per_doc.iter().filter(|(path, _)| for_a_reader(path)) {
        assert!(
            *count > 0,
            "{} quotes no command the test found",
            path.display()
        );
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The evidence folders the docs name are folders a run writes.
#[test]
fn every_evidence_folder_the_docs_name_is_a_scenarios() {
    let catalogue = std::fs::read_to_string(root().join("docs/catalogue.md")).unwrap();
    let scenarios = catalogue_scenarios(&catalogue);
    assert!(scenarios.len() >= 20, "{scenarios:?}");
    let mut named = 0;
    let mut problems = Vec::new();
    for (doc, text) in documents() {
        named += text.matches("reports/<run-id>/").count() + text.matches("<run>/").count();
        problems.extend(evidence_folder_problems(&doc, &text, &scenarios));
    }
    assert!(
        named > 0,
        "no evidence folder named in the docs: the scan is broken"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // What it is there to find.
    let planted = "under `reports/<run-id>/pods/` and `<run>/browser-launch/screenshot.png`";
    let found = evidence_folder_problems(Path::new("x.md"), planted, &scenarios);
    assert!(
        found.len() == 1 && found[0].contains("reports/<run-id>/pods/"),
        "{found:?}"
    );
}

#[test]
fn readme_lists_exactly_the_exit_codes_the_harness_defines() {
    use kandev_report::exit;
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = readme
        .split_once("\n## Exit codes")
        .map(|(_, rest)| rest.split("\n## ").next().unwrap_or_default())
        .expect("README has an \"Exit codes\" section");
    let listed: BTreeSet<u8> = section
        .lines()
        .filter_map(|line| line.strip_prefix("| "))
        .filter_map(|row| row.split(" |").next()?.trim().parse().ok())
        .collect();
    let defined: BTreeSet<u8> = [
        exit::SUCCESS,
        exit::SCENARIO_FAILED,
        exit::USAGE,
        exit::ENVIRONMENT,
        exit::LEAKED,
        exit::NOTHING_SELECTED,
        exit::INTERRUPTED,
    ]
    .into();
    assert_eq!(listed, defined, "README's exit codes table");
    for code in listed {
        assert_ne!(
            exit::meaning(code),
            exit::meaning(u8::MAX),
            "exit::meaning has no words for {code}"
        );
    }
}

/// The example workflow: `docs/ci.md` quotes it whole, and it does what `docs/ci.md` says.
#[test]
fn the_example_workflow_is_the_one_ci_md_quotes_and_its_commands_parse() {
    example_workflow(
        "docs/examples/github-workflow.yml",
        "workflow",
        &[
            "run --gate-profile release",
            "gc --run",
            "report diff",
            "gate",
        ],
    );
}

/// The variant a newcomer copies first: the fixture images, nothing to configure (no
/// repository variable, no input), no release gate.
#[test]
fn the_fixture_workflow_needs_no_variables_and_ci_md_quotes_it() {
    let path = "docs/examples/github-workflow-fixtures.yml";
    example_workflow(
        path,
        "workflow-fixtures",
        &["run", "gc --run", "report diff"],
    );
    let file = std::fs::read_to_string(root().join(path)).unwrap();
    for configured in [
        "vars.",
        "inputs.",
        "secrets.",
        "--worker-image",
        "--daemon-image",
    ] {
        assert!(!file.contains(configured), "{path} uses {configured}");
    }
}

/// An example workflow: `docs/ci.md` quotes it exactly between its `<!-- MARKER:begin -->`
/// and `<!-- MARKER:end -->`, it publishes on a hang, and every `kandev-acceptance` command in
/// it parses and is not refused; `wanted` are the commands it must run.
fn example_workflow(path: &str, marker: &str, wanted: &[&str]) {
    let file = std::fs::read_to_string(root().join(path)).unwrap();
    let ci = std::fs::read_to_string(root().join("docs/ci.md")).unwrap();
    let quoted = ci
        .split_once(&format!("<!-- {marker}:begin -->\n```yaml\n"))
        .and_then(|(_, rest)| rest.split_once(&format!("```\n<!-- {marker}:end -->")))
        .map(|(quoted, _)| quoted)
        .unwrap_or_else(|| panic!("docs/ci.md quotes the workflow between its {marker} markers"));
    assert_eq!(quoted, file, "docs/ci.md quotes {path} exactly");

    let workflow: serde_yaml::Value = serde_yaml::from_str(&file).unwrap();
    assert_eq!(
        workflow["permissions"]["checks"].as_str(),
        Some("write"),
        "the JUnit check run needs checks: write"
    );
    let jobs = workflow["jobs"].as_mapping().expect("jobs");
    let steps: Vec<&serde_yaml::Value> = jobs
        .values()
        .flat_map(|job| job["steps"].as_sequence().expect("steps").iter())
        .collect();
    let uses = |action: &str| {
        steps
            .iter()
            .filter(|s| s["uses"].as_str().is_some_and(|u| u.starts_with(action)))
            .collect::<Vec<_>>()
    };
    let junit = uses("mikepenz/action-junit-report");
    assert!(
        junit.iter().any(|s| s["with"]["report_paths"]
            .as_str()
            .is_some_and(|p| p.contains("RUN_ID") && p.ends_with("junit.xml"))),
        "a step publishes this run's junit.xml"
    );
    assert!(
        !uses("actions/upload-artifact").is_empty(),
        "a step uploads the report"
    );
    // A hung run still publishes: the report is uploaded and the JUnit published whatever
    // ended the job (a timeout is `cancelled()`), and the run ends itself before the job's
    // timeout (--deadline below it).
    for action in ["actions/upload-artifact", "mikepenz/action-junit-report"] {
        assert!(
            uses(action)
                .iter()
                .all(|s| s["if"].as_str() == Some("always()")),
            "{action} runs `if: always()`"
        );
    }
    let minutes = |text: &str| -> Option<u64> { text.strip_suffix('m')?.parse().ok() };
    for job in jobs.values() {
        let job_minutes = job["timeout-minutes"]
            .as_u64()
            .expect("the job's timeout-minutes");
        for step in job["steps"].as_sequence().expect("steps") {
            let Some(script) = step["run"].as_str() else {
                continue;
            };
            if !script.contains("kandev-acceptance run ") {
                continue;
            }
            let deadline = script
                .split_whitespace()
                .skip_while(|w| *w != "--deadline")
                .nth(1)
                .and_then(minutes)
                .expect("the run step passes --deadline <N>m");
            let step_minutes = step["timeout-minutes"].as_u64().unwrap_or(job_minutes);
            assert!(
                deadline < step_minutes && step_minutes <= job_minutes,
                "--deadline {deadline}m below the step's {step_minutes} and the job's {job_minutes} minutes"
            );
        }
    }

    // `$NAME` in a step is the workflow's `env:` value, a GitHub expression in it an example
    // value (`1`).
    let mut env: Vec<(String, String)> = std::iter::once(&workflow)
        .chain(jobs.values())
        .filter_map(|level| level["env"].as_mapping())
        .flatten()
        .map(|(name, value)| {
            let value = value.as_str().unwrap_or_default();
            (
                name.as_str().unwrap_or_default().to_owned(),
                // An image is a release's (pinned by digest, as `gate` requires); the rest
                // are numbers and names.
                with_expressions_as(
                    value,
                    if name.as_str().is_some_and(|n| n.ends_with("_IMAGE")) {
                        EXAMPLE_IMAGE
                    } else {
                        "1"
                    },
                ),
            )
        })
        .collect();
    env.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    let mut problems = Vec::new();
    let mut subcommands = BTreeSet::new();
    for step in &steps {
        let Some(script) = step["run"].as_str() else {
            continue;
        };
        for (_, args) in commands(script) {
            let args: Vec<String> = args
                .iter()
                .map(|arg| {
                    env.iter().fold(arg.clone(), |arg, (name, value)| {
                        arg.replace(&format!("${{{name}}}"), value)
                            .replace(&format!("${name}"), value)
                    })
                })
                .collect();
            problems.extend(command_problems(&args));
            let key = match args.first().map(String::as_str) {
                Some("run") if args.windows(2).any(|w| w == ["--gate-profile", "release"]) => {
                    "run --gate-profile release"
                }
                Some("run") => "run",
                Some("report") if args.get(1).map(String::as_str) == Some("diff") => "report diff",
                Some("gc") if args.iter().any(|a| a == "--run") => "gc --run",
                Some("gate") => "gate",
                _ => continue,
            };
            subcommands.insert(key);
        }
    }
    assert!(problems.is_empty(), "{path}:\n{}", problems.join("\n"));
    for wanted in wanted {
        assert!(
            subcommands.contains(wanted),
            "{path} runs no `kandev-acceptance {wanted}`"
        );
    }
}

/// `text` with every GitHub expression `${{ ... }}` replaced by `example`.
fn with_expressions_as(text: &str, example: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${{") {
        out.push_str(&rest[..start]);
        out.push_str(example);
        rest = rest[start..]
            .find("}}")
            .map_or("", |end| &rest[start + end + 2..]);
    }
    out.push_str(rest);
    out
}

/// The checker finds what it is there to find: a flag the command line does not have, a file
/// that does not exist, an anchor no heading makes; and reads the conventions as documented.
#[test]
fn the_checker_finds_a_bad_flag_a_missing_file_and_a_missing_anchor() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("docs")).unwrap();
    std::fs::write(
        dir.path().join("docs/other.md"),
        "# Other\n\n## A `flag`: yes\n",
    )
    .unwrap();
    let doc = Path::new("docs/this.md");
    let text = "# This\n\n\
        [fine](other.md#a-flag-yes) [self](#this) [gone](missing.md) [no anchor](other.md#nowhere)\n\
        `[not a link](nowhere.md)`\n\n\
        ```sh\n\
        cargo acceptance run --backend kube --context C \\\n    [--namespace N] [--keep never|on-failure]   # fine\n\
        ref=$(target/release/kandev-acceptance image harness) && kandev-acceptance gc --run <run-id> > out.txt\n\
        kandev-acceptance run --no-such-flag --run-id <run-id>\n\
        cargo acceptance run [--keep sometimes]\n\
        cargo acceptance gc --backend kind [--dry-run]\n\
        kandev-acceptance gate --report r --worker-image w@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa --daemon-image d@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n\
        ```\n";
    std::fs::write(dir.path().join(doc), text).unwrap();

    let links = link_problems(dir.path(), doc, text);
    assert_eq!(links.len(), 2, "{links:#?}");
    assert!(links[0].contains("missing.md does not exist"), "{links:#?}");
    assert!(links[1].contains("#nowhere"), "{links:#?}");

    let (count, problems) = markdown_command_problems(doc, text);
    assert_eq!(
        count, 7,
        "run, image harness, gc, the two bad runs, and the two that parse but are refused"
    );
    assert_eq!(problems.len(), 5, "{problems:#?}");
    assert!(problems[0].contains("--no-such-flag"), "{problems:#?}");
    assert!(problems[1].contains("sometimes"), "{problems:#?}");
    // Parsed, then refused before any work, as the binary would (each variant of the gc).
    for problem in &problems[2..4] {
        assert!(
            problem.contains("gc --backend kind")
                && problem.contains("refused: gc --backend kind removes"),
            "{problems:#?}"
        );
    }
    assert!(
        problems[4].contains("refused: gate binds the template"),
        "{problems:#?}"
    );

    assert_eq!(
        variants(&["a".into(), "[--b".into(), "x|y]".into(), "...".into()]).unwrap(),
        vec![
            vec!["a".to_owned()],
            vec!["a".to_owned(), "--b".into(), "x".into()],
            vec!["a".to_owned(), "--b".into(), "y".into()],
        ]
    );
    assert_eq!(
        lex(r#"FOO=1 x "a b" 'c d' 2>/dev/null >> log ${{ e f }} # gone"#),
        ["FOO=1", "x", "a b", "c d", "${{ e f }}"]
            .map(|w| Token::Word(w.to_owned()))
            .into_iter()
            .collect::<Vec<_>>()
    );
}
