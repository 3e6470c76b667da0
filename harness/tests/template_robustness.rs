//! Robustness of template input: whatever an operator passes (random bytes, truncated or
//! huge documents, deep nesting, wrong types, several documents), parsing and Kandev's rules
//! never panic, stay bounded in time, and end in findings or an accepted template.

// A test file: failing loudly with unwrap/panic is the point here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kandev_harness::pod::template::{self, RuleOptions, WorkspaceMode};
use proptest::prelude::*;
use std::time::{Duration, Instant};

fn full_worker() -> String {
    std::fs::read_to_string(kandev_harness::paths::default_template()).unwrap()
}

/// Parses and validates; returns the number of errors (0 = accepted).
fn check(text: &str) -> usize {
    let started = Instant::now();
    let findings = match template::parse(text) {
        Ok(t) => template::validate(
            &t,
            &RuleOptions {
                main_container: "kandev-agent".into(),
                workspace_mode: WorkspaceMode::ManagedPvc,
                workspace_claim: Some("kandev-0011223344556677-workspace".into()),
            },
        ),
        Err(findings) => {
            assert!(!findings.is_empty(), "a rejected template must say why");
            findings
        }
    };
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{} bytes took {:?}",
        text.len(),
        started.elapsed()
    );
    for f in &findings {
        assert!(f.path.starts_with(template::PATH_PREFIX), "{f}");
        assert!(!f.message.is_empty());
    }
    template::errors(&findings).count()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_text_never_panics(text in ".{0,400}") {
        check(&text);
    }

    #[test]
    fn random_bytes_as_lossy_text_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        check(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn every_truncation_of_the_fixture_is_a_finding_or_accepted(cut in 0usize..4000) {
        let text = full_worker();
        let mut cut = cut.min(text.len());
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        check(&text[..cut]);
    }

    #[test]
    fn replacing_any_line_with_garbage_never_panics(line in 0usize..80, garbage in "[ -~]{0,40}") {
        let text = full_worker();
        let mut lines: Vec<&str> = text.lines().collect();
        if line < lines.len() {
            lines[line] = &garbage;
        }
        check(&lines.join("\n"));
    }

    #[test]
    fn wrong_types_are_findings(path in prop::sample::select(vec![
        "template", "template.spec", "template.spec.containers", "template.spec.securityContext",
        "template.spec.volumes", "template.metadata", "apiVersion", "kind",
    ]), value in prop::sample::select(vec!["42", "true", "\"text\"", "[1, 2]", "{a: b}", "null", "~"])) {
        let mut doc: serde_yaml::Value = serde_yaml::from_str(&full_worker()).unwrap();
        let mut node = &mut doc;
        let parts: Vec<&str> = path.split('.').collect();
        for part in &parts[..parts.len() - 1] {
            node = node.get_mut(*part).unwrap();
        }
        node[*parts.last().unwrap()] = serde_yaml::from_str(value).unwrap();
        check(&serde_yaml::to_string(&doc).unwrap());
    }
}

#[test]
fn the_fixture_is_accepted() {
    assert_eq!(check(&template::render(&full_worker(), "w", "d").text), 0);
}

#[test]
fn deep_nesting_is_a_finding_not_a_stack_overflow() {
    for depth in [100, 1_000, 100_000] {
        assert_eq!(check(&"[".repeat(depth)), 1);
        assert!(check(&format!("a: {}", "{b: ".repeat(depth))) >= 1);
    }
}

#[test]
fn a_huge_document_is_refused_by_size_before_it_is_parsed() {
    // A valid template made huge by a comment: the one finding is its size (a parse would
    // have found nothing to refuse).
    let huge = format!("{}\n# {}\n", full_worker(), "x".repeat(300 * 1024));
    let findings = template::parse(&huge).unwrap_err();
    assert!(
        findings.len() == 1 && findings[0].message.contains("the limit is 262144 bytes"),
        "{findings:?}"
    );
}

#[test]
fn several_documents_are_one_finding() {
    let text = full_worker();
    let findings = template::parse(&format!("{text}\n---\n{text}")).unwrap_err();
    assert!(
        findings
            .iter()
            .any(|f| f.message.contains("exactly one is allowed")),
        "{findings:?}"
    );
}
