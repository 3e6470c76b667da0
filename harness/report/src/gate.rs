//! The gate vocabulary, one for the command line (`run --gate`, `--require`, `validate
//! --for-release`, `gate`), the report and `docs/release-gating.md`: the capabilities a run
//! needs to judge every scenario, the gate profiles, and the gate a run was judged by. (What
//! `gate` holds a report to is the harness's analysis, kandev-harness's `outputs::gate`, not
//! these words.)

/// What a run needs to judge every scenario. Lacking one ends the scenarios that need it
/// `skipped` (node view, cluster) or `incompatible` (worker tools) — unless the gate requires
/// it: then they fail, naming what was missing.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Capability {
    /// The Docker CLI in the worker image (and a daemon it reaches).
    Docker,
    /// Docker Compose (v2 plugin or v1) in the worker image.
    Compose,
    /// A headless browser in the worker image.
    Browser,
    /// The node's processes and cgroups readable by the run (`cgroup::accounting`,
    /// `lifecycle::teardown_exact`).
    NodeView,
    /// An API server with RBAC whose executor identity the run can examine (Kandev's
    /// connection test, `launch::connection`): the `kind` and `kube` backends only.
    Cluster,
}

impl Capability {
    pub const ALL: [Capability; 5] = [
        Capability::Docker,
        Capability::Compose,
        Capability::Browser,
        Capability::NodeView,
        Capability::Cluster,
    ];

    /// Every capability a run on `backend` (a report's `backend`) can have at all: all of
    /// them on a cluster (`kind`, `kube`); on the local engine, which has no API server, all
    /// but `cluster`. The release profile requires exactly these, so that a local release run
    /// is not refused for what no local run can show (`--require cluster` still asks for it).
    pub fn offered_by(backend: &str) -> Vec<Capability> {
        Capability::ALL
            .into_iter()
            .filter(|c| *c != Capability::Cluster || backend != "local")
            .collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            Capability::Docker => "docker",
            Capability::Compose => "compose",
            Capability::Browser => "browser",
            Capability::NodeView => "node-view",
            Capability::Cluster => "cluster",
        }
    }

    pub fn parse(name: &str) -> Option<Capability> {
        Capability::ALL
            .into_iter()
            .find(|c| c.name() == name.trim())
    }
}

/// A gate profile: how strictly a run (or a report, `kandev-acceptance gate`) is judged.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum GateProfile {
    /// Require what the template declares it serves, or `--require`.
    #[default]
    Default,
    /// Release gating: every capability the backend offers required, and every image
    /// reference immutable.
    // (Which capabilities a backend offers: `Capability::offered_by`; this doc is also
    // `--profile`'s help, where a rustdoc link would print as is.)
    Release,
}

impl GateProfile {
    pub fn name(self) -> &'static str {
        match self {
            GateProfile::Default => "default",
            GateProfile::Release => "release",
        }
    }
}

/// The gate a run is judged by: its profile and the capabilities it requires (resolved from
/// `--gate`, `--require` and the template's declaration).
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct Gate {
    pub profile: GateProfile,
    /// Sorted, unique.
    pub requires: Vec<Capability>,
    /// Where `requires` came from: `release profile`, `--require`, `template annotation
    /// acceptance.kandev.ai/serves`, or `nothing declared`.
    pub source: String,
}

impl Gate {
    pub fn requires(&self, capability: Capability) -> bool {
        self.requires.contains(&capability)
    }

    /// Resolves the gate of a run on `backend`: the release profile requires everything the
    /// backend offers ([`Capability::offered_by`]); else `--require` (when given) replaces
    /// what the template declares it serves.
    pub fn resolve(
        profile: GateProfile,
        required: Option<&[Capability]>,
        template_serves: &[Capability],
        backend: &str,
    ) -> Gate {
        let (mut requires, source) = match (profile, required) {
            (GateProfile::Release, _) => (Capability::offered_by(backend), "release profile"),
            (GateProfile::Default, Some(list)) => (list.to_vec(), "--require"),
            (GateProfile::Default, None) if !template_serves.is_empty() => (
                template_serves.to_vec(),
                "template annotation acceptance.kandev.ai/serves",
            ),
            (GateProfile::Default, None) => (Vec::new(), "nothing declared"),
        };
        requires.sort();
        requires.dedup();
        Gate {
            profile,
            requires,
            source: source.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_profile_requires_everything_and_require_replaces_the_template() {
        let serves = [Capability::Browser, Capability::Docker, Capability::Docker];
        let by_template = Gate::resolve(GateProfile::Default, None, &serves, "kind");
        assert_eq!(
            by_template.requires,
            vec![Capability::Docker, Capability::Browser]
        );
        assert!(by_template.source.contains("acceptance.kandev.ai/serves"));
        let by_flag = Gate::resolve(
            GateProfile::Default,
            Some(&[Capability::NodeView]),
            &serves,
            "kind",
        );
        assert_eq!(by_flag.requires, vec![Capability::NodeView]);
        assert_eq!(by_flag.source, "--require");
        let none = Gate::resolve(GateProfile::Default, Some(&[]), &serves, "kind");
        assert!(none.requires.is_empty());
        let release = Gate::resolve(GateProfile::Release, Some(&[]), &[], "kube");
        assert_eq!(release.requires, Capability::ALL.to_vec());
        assert!(release.requires(Capability::NodeView));
        assert_eq!(
            Gate::resolve(GateProfile::Default, None, &[], "kube").requires,
            vec![]
        );
    }

    #[test]
    fn a_release_requires_cluster_only_where_the_backend_has_an_api_server() {
        for backend in ["kind", "kube"] {
            let release = Gate::resolve(GateProfile::Release, None, &[], backend);
            assert!(release.requires(Capability::Cluster), "{backend}");
        }
        let local = Gate::resolve(GateProfile::Release, None, &[], "local");
        assert!(!local.requires(Capability::Cluster));
        assert_eq!(local.requires.len(), Capability::ALL.len() - 1);
        // Asked for by name, it is required even there (and so fails a local run).
        let asked = Gate::resolve(
            GateProfile::Default,
            Some(&[Capability::Cluster]),
            &[],
            "local",
        );
        assert!(asked.requires(Capability::Cluster));
    }

    #[test]
    fn capability_names_round_trip() {
        for capability in Capability::ALL {
            assert_eq!(Capability::parse(capability.name()), Some(capability));
        }
        assert_eq!(Capability::parse(" node-view "), Some(Capability::NodeView));
        assert_eq!(Capability::parse("gpu"), None);
    }
}
