//! A run's report from its parts: the one place that fills in [`Report`], its own verdict
//! included (kandev-report's one rule, under the run's gate).

use kandev_report::{
    CleanupRecord, Configuration, Environment, Gate, Report, Rules, RunCost, SCHEMA_VERSION,
    ScenarioReport, Selection, StepReport, Summary, judge, rfc3339,
};
use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime};

/// Everything a run knows at its end.
pub struct RunParts {
    pub run_id: String,
    pub backend: String,
    pub gate: Gate,
    pub started_at: SystemTime,
    pub duration: Duration,
    pub interrupted: bool,
    pub deadline_exceeded: bool,
    pub environment: Environment,
    /// The run's settings as recorded (their digest, less where files lie, identifies the
    /// configuration: [`behaviour_settings`]).
    pub settings: serde_json::Value,
    /// What the configuration digest covers ([`behaviour_settings`]), taken at the run's start.
    pub behaviour: serde_json::Value,
    pub setup: Vec<StepReport>,
    /// In the order the report lists them.
    pub scenarios: Vec<ScenarioReport>,
    pub leftovers: Vec<String>,
    pub teardown: Vec<CleanupRecord>,
    pub cost: Option<RunCost>,
    /// What the filter selected from the catalogue.
    pub selection: Option<Selection>,
    /// Pods kept on purpose (`--keep`): the run's leftovers are not leaks.
    pub kept: bool,
}

/// The settings whose values are where files lie, not what the run does: the report folder
/// and the operator's credentials leave the digest; a file the run reads counts by its
/// content (`sha256:<hex>`; the template and the prepare script are digested in the
/// environment as well), so the same configuration from another folder or machine has the
/// same digest.
const PATH_SETTINGS: [(&str, PathSetting); 8] = [
    ("/report_dir", PathSetting::Left),
    ("/cluster/kubeconfig", PathSetting::Left),
    ("/cluster/bookkeeper_token", PathSetting::Left),
    ("/cluster/kind/kind_bin", PathSetting::Left),
    ("/template", PathSetting::Content),
    ("/prepare_script", PathSetting::Content),
    ("/cluster/executor_role", PathSetting::Content),
    ("/cluster/kind/config", PathSetting::Content),
];

/// The settings (as `cluster.kubeconfig`) that name where files lie: `report diff` does not
/// list a change of them as a changed setting (the files' contents are compared apart).
pub fn path_setting_names() -> impl Iterator<Item = String> {
    PATH_SETTINGS
        .iter()
        .map(|(pointer, _)| pointer.trim_start_matches('/').replace('/', "."))
}

#[derive(Clone, Copy)]
enum PathSetting {
    /// Not part of the digest.
    Left,
    /// Digested by the file's content.
    Content,
}

/// The settings the configuration digest covers ([`PATH_SETTINGS`]), a file the run reads by
/// its content: the text in `read` where the run already read it (the template and the
/// prepare script, read once at its start: a file changed later does not change what the run
/// ran with), else the file as it is now.
pub fn behaviour_settings(
    settings: &serde_json::Value,
    read: &[(&str, &[u8])],
) -> serde_json::Value {
    let mut settings = settings.clone();
    for (pointer, how) in PATH_SETTINGS {
        let Some((parent, key)) = pointer.rsplit_once('/') else {
            continue;
        };
        let Some(object) = settings
            .pointer_mut(if parent.is_empty() { "" } else { parent })
            .and_then(serde_json::Value::as_object_mut)
        else {
            continue;
        };
        match (how, object.get(key).and_then(serde_json::Value::as_str)) {
            (PathSetting::Left, _) => {
                object.remove(key);
            }
            (PathSetting::Content, Some(path)) => {
                let digest = match read.iter().find(|(at, _)| *at == pointer) {
                    Some((_, bytes)) => format!("sha256:{}", hex::encode(Sha256::digest(bytes))),
                    None => std::fs::read(path).map_or_else(
                        |e| format!("unreadable: {}", e.kind()),
                        |bytes| format!("sha256:{}", hex::encode(Sha256::digest(&bytes))),
                    ),
                };
                object.insert(key.to_owned(), serde_json::Value::String(digest));
            }
            (PathSetting::Content, None) => {}
        }
    }
    settings
}

pub fn assemble(parts: RunParts) -> Report {
    let sha = hex::encode(Sha256::digest(parts.behaviour.to_string().as_bytes()));
    let rules = Rules {
        profile: parts.gate.profile,
        requires: parts.gate.requires.clone(),
        kept: parts.kept,
    };
    let mut report = Report {
        schema_version: SCHEMA_VERSION,
        run_id: parts.run_id,
        harness_version: crate::BUILD.into(),
        started_at: rfc3339(parts.started_at),
        finished_at: rfc3339(SystemTime::now()),
        duration_ms: parts.duration.as_millis() as u64,
        interrupted: parts.interrupted,
        deadline_exceeded: parts.deadline_exceeded,
        backend: parts.backend,
        gate: parts.gate,
        environment: parts.environment,
        configuration: Configuration {
            sha256: format!("sha256:{sha}"),
            settings: parts.settings,
        },
        summary: Summary::of(&parts.scenarios),
        setup: parts.setup,
        scenarios: parts.scenarios,
        leftovers: parts.leftovers,
        teardown: parts.teardown,
        cost: parts.cost,
        selection: parts.selection,
        verdict: None,
    };
    report.verdict = Some(judge(&report, &rules));
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_covers_what_the_run_does_not_where_its_files_lie() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| unreachable!("{e}"));
        let (a, b) = (dir.path().join("a.yaml"), dir.path().join("b.yaml"));
        for path in [&a, &b] {
            std::fs::write(path, "kind: PodTemplate\n").unwrap_or_else(|e| unreachable!("{e}"));
        }
        let settings = |template: &std::path::Path, reports: &str, namespace: &str| {
            behaviour_settings(
                &serde_json::json!({
                    "template": template, "report_dir": reports,
                    "cluster": {"kubeconfig": "/home/me/.kube/config", "namespace": namespace},
                }),
                &[],
            )
        };
        // The same template's bytes in another folder, another report folder and kubeconfig:
        // the same configuration.
        assert_eq!(settings(&a, "/x", "n"), settings(&b, "/y", "n"));
        assert!(
            settings(&a, "/x", "n")["template"]
                .as_str()
                .is_some_and(|d| d.starts_with("sha256:"))
        );
        // What the run does differs: another digest.
        assert_ne!(settings(&a, "/x", "n"), settings(&a, "/x", "m"));
        std::fs::write(&b, "kind: PodTemplate\nmetadata: {}\n")
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert_ne!(settings(&a, "/x", "n"), settings(&b, "/x", "n"));
        // The text the run read at its start counts, not the file as it is at the end.
        let as_read = |template: &std::path::Path| {
            behaviour_settings(
                &serde_json::json!({"template": template}),
                &[("/template", b"kind: PodTemplate\n".as_slice())],
            )
        };
        assert_eq!(
            as_read(&b),
            settings(&a, "/x", "n")
                .as_object()
                .map(|o| { serde_json::json!({"template": o["template"]}) })
                .unwrap_or_default()
        );
    }
}
