//! `gate`: release gating on a report, for exactly the artefacts a release ships (the
//! judgement itself is `outputs::gate::refusals`: kandev-report's one rule under the release
//! profile, plus the catalogue, the artefacts and the age). It shows the report's own verdict
//! first.

use super::args::{GateArgs, OutputFormat};
use super::read_input;
use crate::outputs::gate::{Expectations, passed_line, refusals, scenarios_line};
use crate::pod::release::is_immutable;
use crate::runner::Scenario;
use kandev_report::{Capability, exit};

pub(crate) fn gate(args: &GateArgs, registry: &[Scenario]) -> u8 {
    if let Err(problem) = refused(args) {
        eprintln!("error: {problem}");
        return exit::USAGE;
    }
    let report = match super::report::read(&super::report::report_file(&args.report)) {
        Ok(report) => report,
        Err(code) => return code,
    };
    let digest_of = |path: &std::path::PathBuf, what: &str| {
        read_input(path, what).map(|text| crate::pod::template::sha256_hex(&text))
    };
    let template_sha256 = match &args.template {
        Some(path) => match digest_of(path, "template") {
            Ok(digest) => Some(digest),
            Err(code) => return code,
        },
        None => None,
    };
    let prepare_script_sha256 = match &args.prepare_script {
        Some(path) => match digest_of(path, "prepare script") {
            Ok(digest) => Some(digest),
            Err(code) => return code,
        },
        None => None,
    };
    let expectations = Expectations {
        worker_image: args.worker_image.clone(),
        daemon_image: args.daemon_image.clone(),
        template_sha256,
        prepare_script_sha256,
        max_age_ms: args.max_age.map(|seconds| seconds * 1000),
        // As the release profile: every capability the report's backend can have at all.
        requires: args
            .require
            .as_ref()
            .map_or_else(|| Capability::offered_by(&report.backend), |r| r.0.clone()),
        catalogue: registry
            .iter()
            .map(|s| {
                (
                    s.name.to_owned(),
                    s.checks
                        .iter()
                        .map(|c| (s.check_id(c), c.twin.kind()))
                        .collect(),
                )
            })
            .collect(),
        now_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
    };
    let reasons = refusals(&report, &expectations);
    // What the report says of itself, as its run judged it (the gate judges it again, by the
    // same rule under the release profile, and adds what a release ships).
    let own = kandev_report::verdict_of(&report);
    let mut context = format!(
        "  the report's own verdict ({} gate, as its run judged it): {}",
        own.profile.name(),
        own.brief()
    );
    if let Some(selection) = report.selection.as_ref().filter(|s| s.filtered) {
        context.push_str(&format!(
            "\n  a filtered run: {} scenarios selected, left out: {}",
            selection.selected.len(),
            selection.left_out.join(", ")
        ));
    }
    let headline = if reasons.is_empty() {
        format!(
            "PASS: run {} ({}) gates {} and {}: {}, {}{}{}",
            report.run_id,
            report.finished_at,
            args.worker_image,
            args.daemon_image,
            scenarios_line(&report),
            passed_line(&report),
            if args.no_template {
                "; the template is not bound (--no-template)"
            } else {
                ""
            },
            // What the verdict does not cover (scenarios the backend lacked), on lines of their own.
            match crate::outputs::console::unjudged_for_lack(&report) {
                lack if lack.is_empty() => String::new(),
                lack => format!("\n{}", lack.trim_end()),
            }
        )
    } else {
        format!(
            "REFUSED: run {} does not gate this release ({}):",
            report.run_id,
            crate::outputs::gate::counted(reasons.len(), "reason")
        )
    };
    match args.format {
        OutputFormat::Text => {
            println!("{headline}");
            for reason in &reasons {
                println!("  - {reason}");
            }
            println!("{context}");
        }
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "passed": reasons.is_empty(),
                "run_id": report.run_id,
                "worker_image": args.worker_image,
                "daemon_image": args.daemon_image,
                "headline": headline,
                "reasons": reasons,
                "own_verdict": {"profile": own.profile.name(), "brief": own.brief()},
            }))
            .unwrap_or_default()
        ),
    }
    if reasons.is_empty() {
        exit::SUCCESS
    } else {
        exit::GATE_REFUSED
    }
}

/// What `gate` refuses before it reads anything: an image not pinned by digest, and no word
/// on the template.
pub(super) fn refused(args: &GateArgs) -> Result<(), String> {
    for (flag, image) in [
        ("--worker-image", &args.worker_image),
        ("--daemon-image", &args.daemon_image),
    ] {
        if !is_immutable(image) {
            return Err(format!(
                "{flag} {image:?} is not name@sha256:<digest>\n  fix: a release gates exactly one image: pass its digest reference"
            ));
        }
    }
    if args.template.is_none() && !args.no_template {
        return Err("gate binds the template the release ships, and none was given\n  fix: pass --template FILE (the run must have used exactly it), or --no-template when the release ships none (the PASS line then says the template is not bound)".into());
    }
    Ok(())
}
