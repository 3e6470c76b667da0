//! `validate`: Kandev's template rules on a file; creates nothing.

use super::args::{OutputFormat, ValidateArgs};
use super::read_input;
use crate::pod::template::{self, RuleOptions, Severity, WorkspaceMode};
use kandev_report::exit;

pub(crate) fn validate(args: &ValidateArgs) -> u8 {
    let text = match read_input(&args.template, "template") {
        Ok(t) => t,
        Err(code) => return code,
    };
    let mut findings = check_template(
        &text,
        &args.main_container,
        args.workspace_mode,
        args.workspace_claim.as_deref(),
    );
    if args.for_release {
        findings.extend(release_findings(&text));
    }
    let errors = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    match args.format {
        OutputFormat::Json => println!(
            "{}",
            serde_json::json!({"valid": errors == 0, "findings": findings})
        ),
        OutputFormat::Text => {
            for finding in &findings {
                println!("{finding}");
            }
            println!(
                "{}: {errors} errors, {} warnings",
                args.template.display(),
                findings.len() - errors
            );
        }
    }
    if errors == 0 {
        exit::SUCCESS
    } else {
        exit::USAGE
    }
}

/// The release gate's static rules: immutable image references, no placeholder left, the
/// declared capabilities known.
fn release_findings(text: &str) -> Vec<template::TemplateFinding> {
    let Ok(parsed) = template::parse(text) else {
        return Vec::new(); // check_template reported why it does not parse
    };
    let mut findings = crate::pod::release::mutable_references(&parsed, false);
    if let Err(finding) = crate::pod::release::declared_serves(&parsed) {
        findings.push(finding);
    }
    findings
}

/// Parses and checks a template; fixture placeholders count as images.
pub(crate) fn check_template(
    text: &str,
    main_container: &str,
    mode: WorkspaceMode,
    claim: Option<&str>,
) -> Vec<template::TemplateFinding> {
    let rendered = template::render(text, "kandev-acceptance/worker", "kandev-acceptance/daemon");
    match template::parse(&rendered.text) {
        Ok(parsed) => template::validate(
            &parsed,
            &RuleOptions {
                main_container: main_container.into(),
                workspace_mode: mode,
                workspace_claim: claim.map(str::to_owned),
            },
        ),
        Err(findings) => findings,
    }
}
