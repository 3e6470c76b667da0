//! The launch snapshot: what Kandev records of the profile a session was launched with, so
//! that a replacement Pod (after the recorded one went missing) is composed from the
//! **recorded** template with the **same** claim, never from the profile as it is now
//! (`kubernetesRuntimeMetadata` and `recreateMissingKubernetesPod` in kdlbs/kandev
//! `apps/backend/internal/agent/runtime/lifecycle/executor_kubernetes*.go`).
//!
//! Recorded: the profile as JSON (platform, main container, the template's YAML, workspace
//! mode) with a hash of that JSON and a hash of the template text. Replacing decodes it,
//! checks both hashes and the template against Kandev's rules, and refuses what cannot be
//! replaced (an emptyDir workspace is gone with its Pod).

use crate::pod::compose::Arch;
use crate::pod::template::{self, RuleOptions, WorkspaceMode};
use k8s_openapi::api::core::v1::PodTemplate;
use serde::{Deserialize, Serialize};

/// The profile as a session was launched with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProfileSnapshot {
    pub platform: String,
    pub main_container: String,
    pub pod_template_yaml: String,
    pub workspace_mode: WorkspaceMode,
}

/// What a session records: the profile's JSON and its two hashes (`sha256:<hex>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSnapshot {
    pub profile_json: String,
    pub profile_hash: String,
    pub template_hash: String,
}

/// Why a recorded snapshot cannot be used to replace a Pod (Kandev's messages).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SnapshotRefused {
    #[error("kubernetes lifecycle: decode workload profile snapshot: {0}")]
    Undecodable(String),
    #[error("kubernetes lifecycle: workload profile snapshot hash does not match")]
    ProfileHash,
    #[error("kubernetes lifecycle: workload template snapshot hash does not match")]
    TemplateHash,
    #[error("kubernetes lifecycle: validate workload profile snapshot: {0}")]
    Invalid(String),
    #[error("kubernetes lifecycle: recorded Pod is missing; emptyDir workspace is unrecoverable")]
    EmptyDir,
}

impl ProfileSnapshot {
    /// The recorded platform's architecture (`linux/<arch>`).
    pub fn arch(&self) -> Result<Arch, SnapshotRefused> {
        match self.platform.as_str() {
            "linux/amd64" => Ok(Arch::Amd64),
            "linux/arm64" => Ok(Arch::Arm64),
            other => Err(SnapshotRefused::Invalid(format!(
                "unknown platform {other:?}"
            ))),
        }
    }
}

impl LaunchSnapshot {
    /// Records `template` as launched.
    pub fn record(
        template: &PodTemplate,
        main_container: &str,
        workspace_mode: WorkspaceMode,
        arch: Arch,
    ) -> anyhow::Result<Self> {
        let pod_template_yaml = serde_yaml::to_string(template)?;
        let profile = ProfileSnapshot {
            platform: format!("linux/{}", arch.as_str()),
            main_container: main_container.to_owned(),
            pod_template_yaml,
            workspace_mode,
        };
        let profile_json = serde_json::to_string(&profile)?;
        Ok(Self {
            profile_hash: template::sha256_hex(&profile_json),
            template_hash: template::sha256_hex(&profile.pod_template_yaml),
            profile_json,
        })
    }

    /// The recorded profile, decoded, its hash checked (what a reconnect reads of it: the
    /// main container).
    pub fn profile(&self) -> Result<ProfileSnapshot, SnapshotRefused> {
        let profile: ProfileSnapshot = serde_json::from_str(&self.profile_json)
            .map_err(|e| SnapshotRefused::Undecodable(e.to_string()))?;
        if template::sha256_hex(&self.profile_json) != self.profile_hash {
            return Err(SnapshotRefused::ProfileHash);
        }
        Ok(profile)
    }

    /// The recorded profile and template, decoded and checked as Kandev checks them before
    /// a replacement: both hashes, the template against the rules, and a workspace that
    /// outlives the Pod.
    pub fn verified(&self) -> Result<(ProfileSnapshot, PodTemplate), SnapshotRefused> {
        let profile = self.profile()?;
        if template::sha256_hex(&profile.pod_template_yaml) != self.template_hash {
            return Err(SnapshotRefused::TemplateHash);
        }
        let parsed = template::parse(&profile.pod_template_yaml).map_err(|findings| {
            SnapshotRefused::Invalid(
                findings
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            )
        })?;
        let findings = template::validate(
            &parsed,
            &RuleOptions {
                main_container: profile.main_container.clone(),
                workspace_mode: profile.workspace_mode,
                workspace_claim: None,
            },
        );
        let errors: Vec<String> = template::errors(&findings)
            .map(ToString::to_string)
            .collect();
        if !errors.is_empty() {
            return Err(SnapshotRefused::Invalid(errors.join("; ")));
        }
        if profile.workspace_mode == WorkspaceMode::EmptyDir {
            return Err(SnapshotRefused::EmptyDir);
        }
        Ok((profile, parsed))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn fixture() -> PodTemplate {
        let text = include_str!("../../../fixtures/templates/full-worker.yaml");
        let rendered = template::render(text, "worker@sha256:1", "daemon@sha256:2");
        template::parse(&rendered.text).unwrap()
    }

    fn recorded(mode: WorkspaceMode) -> LaunchSnapshot {
        LaunchSnapshot::record(&fixture(), "kandev-agent", mode, Arch::Amd64).unwrap()
    }

    #[test]
    fn the_recorded_template_comes_back_verified() {
        let (profile, template) = recorded(WorkspaceMode::ManagedPvc).verified().unwrap();
        assert_eq!(template, fixture());
        assert_eq!(profile.main_container, "kandev-agent");
        assert_eq!(profile.arch().unwrap(), Arch::Amd64);
    }

    /// Kandev's `TestKubernetesWorkspaceGrantUsesLaunchSnapshot` in spirit: what was recorded
    /// is what comes back, and a snapshot edited after the launch is refused, not used.
    #[test]
    fn an_edited_snapshot_is_refused() {
        let snapshot = recorded(WorkspaceMode::ManagedPvc);
        let mut edited = snapshot.clone();
        edited.profile_json = edited.profile_json.replace("kandev-agent", "kandev-agent2");
        assert_eq!(edited.verified().unwrap_err(), SnapshotRefused::ProfileHash);

        // The profile re-hashed, the template inside edited: the template hash refuses it.
        let mut profile: ProfileSnapshot = serde_json::from_str(&snapshot.profile_json).unwrap();
        profile.pod_template_yaml = profile
            .pod_template_yaml
            .replace("daemon@sha256:2", "daemon:latest");
        let mut retemplated = snapshot.clone();
        retemplated.profile_json = serde_json::to_string(&profile).unwrap();
        retemplated.profile_hash = template::sha256_hex(&retemplated.profile_json);
        assert_eq!(
            retemplated.verified().unwrap_err(),
            SnapshotRefused::TemplateHash
        );
    }

    #[test]
    fn an_empty_dir_workspace_cannot_be_replaced() {
        let err = recorded(WorkspaceMode::EmptyDir).verified().unwrap_err();
        assert_eq!(err, SnapshotRefused::EmptyDir);
        assert!(
            err.to_string()
                .contains("emptyDir workspace is unrecoverable")
        );
    }

    #[test]
    fn a_snapshot_breaking_the_rules_is_refused() {
        let mut template = fixture();
        let spec = template
            .template
            .as_mut()
            .and_then(|t| t.spec.as_mut())
            .unwrap();
        // Kandev's rules reserve the workspace volume's name for its own composition.
        spec.volumes
            .get_or_insert_default()
            .push(k8s_openapi::api::core::v1::Volume {
                name: "kandev-workspace".into(),
                ..Default::default()
            });
        let snapshot = LaunchSnapshot::record(
            &template,
            "kandev-agent",
            WorkspaceMode::ManagedPvc,
            Arch::Amd64,
        )
        .unwrap();
        assert!(matches!(
            snapshot.verified(),
            Err(SnapshotRefused::Invalid(_))
        ));
    }
}
