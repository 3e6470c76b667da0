//! `validate`: Kandev's template rules on a file; creates nothing.

use super::args::{OutputFormat, ValidateArgs};
use super::read_input;
use crate::pod::template::{self, RuleOptions, Severity, WorkspaceMode};
use k8s_openapi::api::core::v1::PodTemplate;
use kandev_report::exit;

pub(crate) fn validate(args: &ValidateArgs) -> u8 {
    let text = match read_input(&args.template, "template") {
        Ok(t) => t,
        Err(code) => return code,
    };
    let findings = match template::parse(&text) {
        Ok(parsed) => {
            let mut findings = check_rules(
                &parsed,
                &args.main_container,
                args.workspace_mode,
                args.workspace_claim.as_deref(),
            );
            if args.for_release {
                findings.extend(release_findings(&parsed));
            }
            findings
        }
        Err(findings) => findings,
    };
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
                "{}: {}, {}",
                args.template.display(),
                crate::outputs::gate::counted(errors, "error"),
                crate::outputs::gate::counted(findings.len() - errors, "warning")
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
fn release_findings(parsed: &PodTemplate) -> Vec<template::TemplateFinding> {
    let mut findings = crate::pod::release::mutable_references(parsed, false);
    if let Err(finding) = crate::pod::release::declared_serves(parsed) {
        findings.push(finding);
    }
    findings
}

/// Kandev's rules on a parsed template; fixture placeholders count as images (the rules ask
/// only that an image is named).
pub(crate) fn check_rules(
    parsed: &PodTemplate,
    main_container: &str,
    mode: WorkspaceMode,
    claim: Option<&str>,
) -> Vec<template::TemplateFinding> {
    template::validate(
        parsed,
        &RuleOptions {
            main_container: main_container.into(),
            workspace_mode: mode,
            workspace_claim: claim.map(str::to_owned),
        },
    )
}
