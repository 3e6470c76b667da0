//! Kandev-shaped identity of a run and of its sessions: names, ownership labels and nonces.
//!
//! Names and labels follow Kandev's `OwnershipLabels` and resource naming (kandev-contract.md
//! §4): Pod `kandev-<16 hex>` from the first 8 bytes of SHA-256 of the instance (task
//! environment) ID, managed PVC `<pod>-workspace`, a 64-hex `kandev.ai/create-nonce`. Every
//! object also carries the harness's own labels so that teardown and `gc` are exact.

use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

/// Label on every object a run creates: the run id.
pub const LABEL_RUN: &str = "acceptance.kandev.ai/run";
/// Label naming the scenario that created an object.
pub const LABEL_SCENARIO: &str = "acceptance.kandev.ai/scenario";
/// Label present on everything the harness manages; `gc` never touches objects without it.
pub const LABEL_MANAGED: &str = "acceptance.kandev.ai/managed";
/// Label on what `launch` creates (the launch's run id): `gc --run ID` finds its Job's Pod by
/// it, which carries no run label so that the run inside never counts its own Pod.
pub const LABEL_LAUNCH: &str = "acceptance.kandev.ai/launch";

/// Labels the local backend puts on the engine objects of a Pod (an engine has no Pods).
pub const LABEL_POD: &str = "acceptance.kandev.ai/pod";
pub const LABEL_POD_UID: &str = "acceptance.kandev.ai/pod-uid";
pub const LABEL_CONTAINER: &str = "acceptance.kandev.ai/container";
pub const LABEL_ROLE: &str = "acceptance.kandev.ai/role";
/// The UID the local backend gives a workspace volume (engines give volumes none).
pub const LABEL_WORKSPACE_UID: &str = "acceptance.kandev.ai/workspace-uid";
/// Annotation Kandev stamps immediately before create.
pub const ANNOTATION_CREATE_NONCE: &str = "kandev.ai/create-nonce";
/// On a PodTemplate: the capabilities the recipe promises (`docker,compose,browser`), which
/// the run's gate then requires.
pub const ANNOTATION_SERVES: &str = "acceptance.kandev.ai/serves";

/// A sortable, unique run id: UTC timestamp plus random suffix (`20261129t211500-3fa9c1`).
pub fn new_run_id() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (date, time) = civil_from_unix(secs);
    format!("{date}t{time}-{}", &random_hex(3))
}

/// Formats seconds since the epoch as `YYYYMMDD` and `HHMMSS` (UTC).
fn civil_from_unix(secs: u64) -> (String, String) {
    let c = kandev_report::Civil::from_unix(secs);
    (
        format!("{:04}{:02}{:02}", c.year, c.month, c.day),
        format!("{:02}{:02}{:02}", c.hour, c.minute, c.second),
    )
}

/// Random lowercase hex from the OS generator (uuid v4 draws from getrandom).
pub fn random_hex(bytes: usize) -> String {
    let mut out = String::with_capacity(bytes * 2);
    while out.len() < bytes * 2 {
        out.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    out.truncate(bytes * 2);
    out
}

/// The Kandev identity of one task session, plus the harness's run and scenario.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct SessionIdentity {
    pub run_id: String,
    pub scenario: String,
    pub executor_id: String,
    pub profile_id: String,
    pub task_id: String,
    pub session_id: String,
    /// The task environment: in the task-owned model also the instance id.
    pub environment_id: String,
}

impl SessionIdentity {
    /// A fresh identity for a session of `scenario` in `run_id`; `ordinal` tells sessions of
    /// one scenario apart.
    ///
    /// Each id is a label value (Kandev stamps them as `kandev.ai/*` and
    /// `app.kubernetes.io/instance` labels), so at most [`LABEL_VALUE_MAX`] bytes: what makes
    /// it unique (the run id, the ordinal, a random suffix) is kept whole and the scenario's
    /// slug, there for a reader, is shortened to fit (`env-<run id>-<slug>-<ordinal>-<suffix>`;
    /// the run id's digest in its place should even that not fit).
    pub fn new(run_id: &str, scenario: &str, ordinal: usize) -> Self {
        let suffix = random_hex(4);
        let slug = scenario_slug(scenario);
        let tail = format!("-{ordinal}-{suffix}");
        let mut env_head = format!("env-{run_id}");
        if env_head.len() + tail.len() > LABEL_VALUE_MAX {
            env_head = format!("env-{}", short_digest(run_id));
        }
        Self {
            run_id: run_id.to_owned(),
            scenario: scenario.to_owned(),
            executor_id: "kandev-acceptance".into(),
            profile_id: "full-worker".into(),
            task_id: fitted_id("task", &slug, &tail),
            session_id: fitted_id("session", &slug, &tail),
            environment_id: fitted_id(&env_head, &slug, &tail),
        }
    }

    /// `kandev-<16 hex>`: the first 8 bytes of SHA-256 of the instance id.
    pub fn pod_name(&self) -> String {
        format!("kandev-{}", short_digest(&self.environment_id))
    }

    /// Name of a managed workspace claim (and of the local backend's workspace volume).
    pub fn workspace_claim_name(&self) -> String {
        format!("{}-workspace", self.pod_name())
    }

    /// Kandev's task-owned ownership labels (`OwnershipLabels`).
    pub fn kandev_labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("app.kubernetes.io/name".into(), "kandev-agent".into()),
            ("app.kubernetes.io/managed-by".into(), "kandev".into()),
            (
                "app.kubernetes.io/instance".into(),
                self.environment_id.clone(),
            ),
            (
                "app.kubernetes.io/component".into(),
                "task-environment".into(),
            ),
            ("kandev.ai/ownership-version".into(), "task-v1".into()),
            ("kandev.ai/executor-id".into(), self.executor_id.clone()),
            ("kandev.ai/profile-id".into(), self.profile_id.clone()),
            ("kandev.ai/instance-id".into(), self.environment_id.clone()),
            ("kandev.ai/task-id".into(), self.task_id.clone()),
            ("kandev.ai/session-id".into(), self.session_id.clone()),
            (
                "kandev.ai/environment-id".into(),
                self.environment_id.clone(),
            ),
        ])
    }

    /// The harness's own labels: run, scenario, managed marker.
    pub fn harness_labels(&self) -> BTreeMap<String, String> {
        harness_labels(&self.run_id, &self.scenario)
    }

    /// Kandev's labels and the harness's, as stamped on every session object.
    pub fn all_labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.kandev_labels();
        labels.extend(self.harness_labels());
        labels
    }
}

/// The longest label value an API server accepts (apimachinery's `IsLabelValue`).
pub const LABEL_VALUE_MAX: usize = 63;

/// A scenario's name as label-value characters: `lifecycle::teardown_exact` is
/// `lifecycle-teardown-exact`.
fn scenario_slug(scenario: &str) -> String {
    scenario
        .replace("::", "-")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

/// `<head>-<slug><tail>` in at most [`LABEL_VALUE_MAX`] bytes: the slug shortened (to
/// nothing, with its dash, if need be); `head` and `tail` start and end alphanumeric.
fn fitted_id(head: &str, slug: &str, tail: &str) -> String {
    let room = LABEL_VALUE_MAX.saturating_sub(head.len() + tail.len() + 1);
    let slug = slug
        .get(..room.min(slug.len()))
        .unwrap_or_default()
        .trim_matches('-');
    if slug.is_empty() {
        format!("{head}{tail}")
    } else {
        format!("{head}-{slug}{tail}")
    }
}

/// The harness labels for an object of `scenario` in `run_id`.
pub fn harness_labels(run_id: &str, scenario: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED.into(), "true".into()),
        (LABEL_RUN.into(), run_id.to_owned()),
        (LABEL_SCENARIO.into(), scenario_label(scenario)),
    ])
}

/// The value of [`LABEL_SCENARIO`] for `scenario` (`area::name` is not a valid label value).
pub fn scenario_label(scenario: &str) -> String {
    scenario.replace("::", ".")
}

/// The first 8 bytes of SHA-256 of `text`, hex (16 characters): a stable, name-safe digest.
pub fn short_digest(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()).get(..8).unwrap_or_default())
}

/// A fresh `kandev.ai/create-nonce` value: 32 random bytes, lowercase hex.
pub fn create_nonce() -> String {
    random_hex(32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_name_is_kandev_shaped_and_stable() {
        let id = SessionIdentity::new("run", "image::build_run", 0);
        let name = id.pod_name();
        assert_eq!(name.len(), "kandev-".len() + 16);
        assert!(name.starts_with("kandev-"));
        assert!(
            name["kandev-".len()..]
                .chars()
                .all(|c| c.is_ascii_hexdigit())
        );
        assert_eq!(name, id.pod_name());
        assert_ne!(
            name,
            SessionIdentity::new("run", "image::build_run", 0).pod_name()
        );
    }

    #[test]
    fn nonce_is_64_lowercase_hex() {
        let nonce = create_nonce();
        assert_eq!(nonce.len(), 64);
        assert!(
            nonce
                .chars()
                .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        );
    }

    #[test]
    fn run_ids_sort_by_time() {
        assert_eq!(civil_from_unix(0), ("19700101".into(), "000000".into()));
        assert_eq!(civil_from_unix(1_796_000_000).0, "20261130");
        let id = new_run_id();
        assert_eq!(id.len(), "20261129t211500-3fa9c1".len());
    }

    #[test]
    fn labels_are_valid_label_values() {
        let id = SessionIdentity::new("20261129t211500-3fa9c1", "lifecycle::teardown_exact", 3);
        for (key, value) in id.all_labels() {
            assert!(
                value.len() <= 63,
                "{key}={value} is too long for a label value"
            );
            assert!(
                value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
                "{key}={value}"
            );
        }
    }
}
