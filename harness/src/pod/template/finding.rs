//! A template finding: an error or a warning, at the field path under
//! `config.pod_template_yaml` that holds it, as Kandev reports it.

use serde::Serialize;

/// Prefix of every template finding's path.
pub const PATH_PREFIX: &str = "config.pod_template_yaml";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Error,
    Warning,
}

/// One problem (or warning) in a template, with the field path that holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TemplateFinding {
    pub severity: Severity,
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for TemplateFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tag = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(f, "{tag}: {}: {}", self.path, self.message)
    }
}

pub(super) fn error(path: impl Into<String>, message: impl Into<String>) -> TemplateFinding {
    TemplateFinding {
        severity: Severity::Error,
        path: path.into(),
        message: message.into(),
    }
}

pub(super) fn warning(path: impl Into<String>, message: impl Into<String>) -> TemplateFinding {
    TemplateFinding {
        severity: Severity::Warning,
        path: path.into(),
        message: message.into(),
    }
}

/// Errors only.
pub fn errors(findings: &[TemplateFinding]) -> impl Iterator<Item = &TemplateFinding> {
    findings.iter().filter(|f| f.severity == Severity::Error)
}

/// A template refused: every finding that refused it (what a run's preparation fails with).
#[derive(Debug, thiserror::Error)]
#[error(
    "template: {}",
    .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
)]
pub struct TemplateRefused(pub Vec<TemplateFinding>);
