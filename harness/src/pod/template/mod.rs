//! Pod templates: a template file parsed once, its image placeholders, strict parsing, and
//! Kandev's template rules.
//!
//! The rules mirror Kandev's `ValidatePodTemplate` and the workspace-grant exception
//! (kandev-contract.md §3). Every finding carries its field path under
//! `config.pod_template_yaml`, as Kandev reports it, and all findings are reported at once.
//!
//! Here: `finding` (a finding and its severity), `parse` (the strict decoding), `reserved`
//! (what Kandev reserves: volumes, roots, the agentctl port, owned labels, the grant's shape),
//! `rules` (the template rules), `images` (the image placeholders and the digest), `file` (a
//! template file read and parsed once, a run's images put into its parsed form).

mod file;
mod finding;
mod images;
mod parse;
mod reserved;
mod rules;

pub use file::{TemplateFile, TemplateWithImages};
pub use finding::{PATH_PREFIX, Severity, TemplateFinding, TemplateRefused, errors};
pub use images::{
    DAEMON_IMAGE_PLACEHOLDER, RenderedTemplate, WORKER_IMAGE_PLACEHOLDER, ignored_image_flag,
    render, sha256_hex,
};
pub use parse::{MAX_TEMPLATE_BYTES, parse};
pub use reserved::{
    AGENTCTL_PORT, AGENTCTL_PORT_NAME, RESERVED_ROOTS, RESERVED_VOLUMES, clean_path,
    is_agentctl_port, is_owned_label, is_reserved_path, is_workspace_grant,
};
pub use rules::{RuleOptions, WorkspaceMode, validate};

#[cfg(test)]
mod tests;
