//! The run's own sections of `report.html`: the counts (scenarios, checks, a filtered or cut
//! short run), which come before the scenarios; the environment (resources, cost, engine,
//! cluster, template, gate, images), after them; and the run level (setup steps, run teardown,
//! leftovers).

use super::markup::{badge, cleanup_table, escape, or_dash, secs, step_class};
use kandev_report::Report;
use std::fmt::Write as _;

/// The counts, first after the verdict: a line each, so that the scenarios follow at once.
pub(super) fn counts(h: &mut String, report: &Report) {
    let s = &report.summary;
    h.push_str("<section id=\"summary\">\n<h2>Summary</h2>\n<p class=\"counts\">");
    let _ = write!(
        h,
        "<span id=\"scenario-count\">{} scenarios:</span>",
        s.total
    );
    for (class, label, n) in [
        ("passed", "passed", s.passed),
        ("failed", "failed", s.failed),
        ("leaked", "leaked", s.leaked),
        ("errored", "errored", s.errored),
        ("timed_out", "timed out", s.timed_out),
        ("cancelled", "cancelled", s.cancelled),
        ("skipped", "skipped", s.skipped),
        ("incompatible", "incompatible", s.incompatible),
        ("passed", "flaky", s.flaky),
    ] {
        if n > 0 || label == "passed" || label == "failed" {
            let _ = write!(h, "<span>{} {n}</span>", badge(class, label));
        }
    }
    let c = &s.checks;
    let _ = write!(
        h,
        "</p>\n<p id=\"check-count\">{}: {} passed ({} system, {} mirror), {} failed, {} not judged, {} not reached. System checks can be broken by the cluster, template, images or prepare script; mirror checks only by the harness's mirror of Kandev, so they say nothing of the system. A check not judged could not be judged on this backend: nothing is claimed for it, and a release gate fails it.</p>\n",
        c.kinds_line(),
        c.passed,
        c.system.passed,
        c.mirror.passed,
        c.failed,
        c.not_judged,
        c.not_reached
    );
    if let Some(selection) = report.selection.as_ref().filter(|s| s.filtered) {
        let _ = writeln!(
            h,
            "<p id=\"filtered\" class=\"verdict bad\">A filtered run: {} of {} scenarios selected; it vouches only for those, and cannot pass a release gate. Left out: {}</p>",
            selection.selected.len(),
            selection.selected.len() + selection.left_out.len(),
            escape(&selection.left_out.join(", "))
        );
    }
    if report.interrupted {
        h.push_str("<p class=\"verdict bad\">The run was interrupted before every scenario finished.</p>\n");
    }
    if report.deadline_exceeded {
        h.push_str("<p class=\"verdict bad\">The run's --deadline passed before every scenario finished.</p>\n");
    }
    h.push_str("</section>\n");
}

/// What the run ran on and with, after the scenarios: resources, cost, the environment and
/// the images. Long values (digests, registry references) wrap: the page fits 1400 px.
pub(super) fn environment(h: &mut String, report: &Report) {
    h.push_str("<section id=\"environment-section\">\n<h2>Environment</h2>\n");
    if let Some(used) = &report.summary.resources {
        let _ = writeln!(
            h,
            "<p id=\"resources\">Resources of {} Pods: {} (CPU summed over the scenarios, memory the largest scenario's peak)</p>",
            used.pods,
            escape(&used.describe())
        );
    }
    if let Some(cost) = &report.cost {
        let _ = writeln!(
            h,
            "<p id=\"cost\">Cost of the run itself: {}</p>",
            escape(&crate::outputs::console::console_line(cost))
        );
    }
    let e = &report.environment;
    let gate = &report.gate;
    let requires = if gate.requires.is_empty() {
        "nothing".to_owned()
    } else {
        gate.requires
            .iter()
            .map(|c| c.name())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let cgroup = match (e.cgroup_version, &e.cgroup_driver) {
        (Some(v), Some(d)) => format!("v{v} ({d})"),
        (Some(v), None) => format!("v{v}"),
        (None, _) => "—".into(),
    };
    h.push_str("<table id=\"environment\">\n");
    for (name, value) in [
        ("run id", report.run_id.clone()),
        ("backend", report.backend.clone()),
        ("harness", report.harness_version.clone()),
        ("started", report.started_at.clone()),
        ("finished", report.finished_at.clone()),
        ("duration", secs(report.duration_ms)),
        (
            "engine",
            match (&e.engine_version, &e.engine_api_version) {
                (Some(v), Some(api)) => format!("{v} (API {api})"),
                (v, _) => or_dash(v.as_ref()),
            },
        ),
        ("kubernetes", or_dash(e.kubernetes_version.as_ref())),
        ("kind", or_dash(e.kind_version.as_ref())),
        ("kind node image", or_dash(e.kind_node_image.as_ref())),
        ("kernel", or_dash(e.kernel.as_ref())),
        ("operating system", or_dash(e.operating_system.as_ref())),
        ("architecture", or_dash(e.architecture.as_ref())),
        ("cgroup", cgroup),
        ("node MTU", or_dash(e.node_mtu)),
        (
            "template",
            e.template
                .as_ref()
                .map(|t| match &t.source_sha256 {
                    Some(file) => format!("{} (file {file}, rendered {})", t.path, t.sha256),
                    None => format!("{} {}", t.path, t.sha256),
                })
                .unwrap_or_else(|| "—".into()),
        ),
        (
            "gate",
            if gate.source.is_empty() {
                format!("{} profile, requires {requires}", gate.profile.name())
            } else {
                format!(
                    "{} profile, requires {requires} ({})",
                    gate.profile.name(),
                    gate.source
                )
            },
        ),
        ("configuration", report.configuration.sha256.clone()),
    ] {
        let _ = writeln!(
            h,
            "<tr><th>{}</th><td class=\"mono\">{}</td></tr>",
            escape(name),
            escape(&value)
        );
    }
    h.push_str("</table>\n");
    if !e.images.is_empty() {
        h.push_str("<h3>Images</h3>\n<table id=\"images\"><colgroup><col class=\"role\"><col class=\"reference\"><col class=\"id\"><col class=\"built\"><col class=\"ran\"></colgroup><tr><th>role</th><th>reference</th><th>id</th><th>built by this run</th><th>what the Pods' containers ran</th></tr>\n");
        for image in &e.images {
            let ran = image
                .ran
                .iter()
                .map(|ran| {
                    let mark = if image.is(ran) {
                        ""
                    } else {
                        "NOT THE RECORDED IMAGE: "
                    };
                    format!(
                        "{mark}{} ({}, {} containers)",
                        ran.image, ran.image_id, ran.containers
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            let _ = writeln!(
                h,
                "<tr data-role=\"{}\" data-agrees=\"{}\"><td>{}</td><td class=\"mono\">{}</td><td class=\"mono\">{}</td><td>{}</td><td class=\"mono\">{}</td></tr>",
                escape(&image.role),
                image.disagreements().is_empty(),
                escape(&image.role),
                escape(&image.reference),
                escape(&or_dash(image.id.as_ref())),
                if image.built { "built" } else { "reused" },
                if ran.is_empty() {
                    "—".to_owned()
                } else {
                    escape(&ran)
                }
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("</section>\n");
}

pub(super) fn run_level(h: &mut String, report: &Report) {
    h.push_str("<section id=\"run-level\">\n<h2>Run</h2>\n");
    if !report.setup.is_empty() {
        h.push_str("<h3>Setup steps</h3>\n<table class=\"setup\"><tr><th>step</th><th>outcome</th><th>at</th><th>took</th><th>error</th></tr>\n");
        for st in &report.setup {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td class=\"duration\">+{}</td><td class=\"duration\">{}</td><td>{}</td></tr>",
                escape(&st.name),
                badge(step_class(st.outcome), step_class(st.outcome)),
                secs(st.offset_ms),
                secs(st.duration_ms),
                escape(st.error.as_deref().unwrap_or(""))
            );
        }
        h.push_str("</table>\n");
    }
    if !report.teardown.is_empty() {
        h.push_str("<h3>Run teardown</h3>\n");
        cleanup_table(h, &report.teardown);
    }
    let _ = writeln!(
        h,
        "<h3>Left behind</h3>\n<p id=\"leftovers\">{}</p>",
        if report.leftovers.is_empty() {
            "nothing".to_owned()
        } else {
            escape(&report.leftovers.join(", "))
        }
    );
    h.push_str("</section>\n");
}
