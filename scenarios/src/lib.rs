//! The scenario catalogue: one file per scenario, `src/<area>/<name>.rs` is `<area>::<name>`.
//! Each checks one promise of Kandev's Docker-workloads design and can fail: every scenario
//! has a broken fixture under `fixtures/` that the harness's own tests run against it.

pub mod support;

pub mod bind {
    pub mod workspace;
}
pub mod browser {
    pub mod launch;
}
pub mod cgroup {
    pub mod accounting;
}
pub mod compose {
    pub mod cleanup;
}
pub mod daemon {
    pub mod socket_only;
}
pub mod image {
    pub mod build_run;
    pub mod recipe;
}
pub mod launch {
    pub mod causal_failures;
    pub mod connection;
    pub mod contract;
}
pub mod isolation {
    pub mod cross_session;
}
pub mod lifecycle {
    pub mod agent_restart;
    pub mod replacement_snapshot;
    pub mod stop_retains;
    pub mod task_sessions;
    pub mod teardown_exact;
}
pub mod network {
    pub mod mtu;
}
pub mod prepare {
    pub mod docker_gate;
}
pub mod template {
    pub mod grant_rules;
}
pub mod worker {
    pub mod recipe_smoke;
    pub mod toolchain;
}
pub mod workspace {
    pub mod shared;
}

use kandev_harness::runner::Scenario;

/// Every scenario, in the order the report lists them.
pub fn registry() -> Vec<Scenario> {
    vec![
        template::grant_rules::scenario(),
        launch::connection::scenario(),
        launch::contract::scenario(),
        launch::causal_failures::scenario(),
        prepare::docker_gate::scenario(),
        daemon::socket_only::scenario(),
        workspace::shared::scenario(),
        image::build_run::scenario(),
        bind::workspace::scenario(),
        compose::cleanup::scenario(),
        browser::launch::scenario(),
        network::mtu::scenario(),
        cgroup::accounting::scenario(),
        worker::toolchain::scenario(),
        image::recipe::scenario(),
        worker::recipe_smoke::scenario(),
        isolation::cross_session::scenario(),
        lifecycle::stop_retains::scenario(),
        lifecycle::replacement_snapshot::scenario(),
        lifecycle::agent_restart::scenario(),
        lifecycle::task_sessions::scenario(),
        lifecycle::teardown_exact::scenario(),
    ]
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_mirror_paths_and_are_unique() {
        let registry = super::registry();
        let mut names: Vec<&str> = registry.iter().map(|s| s.name).collect();
        for name in &names {
            let (area, file) = name.split_once("::").unwrap_or_default();
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join(format!("src/{area}/{file}.rs"));
            assert!(path.is_file(), "{name} has no file {}", path.display());
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), registry.len());
    }

    /// Issue 32, defect 1: every session identity the catalogue makes names its run and
    /// ordinal and is unique. Each registered scenario (and the preflight's probe) at ordinals
    /// 0, 1 and 99, with a run id as long as `--run-id` allows (40). Whether an API server
    /// admits its names and labels is the real API server's judgement
    /// (`harness/test-support/tests/real_api_server/names.rs`: every scenario's Pod and claim
    /// at ordinal 99 with a 40-byte run id, dry-run created).
    #[test]
    fn every_scenarios_identity_names_its_run_and_ordinal_and_is_unique() {
        use kandev_harness::pod::identity::{SessionIdentity, new_run_id};
        let run_ids = [new_run_id(), format!("{}-{}", new_run_id(), "x".repeat(17))];
        let mut names: Vec<&str> = super::registry().iter().map(|s| s.name).collect();
        names.push("preflight");
        for run_id in &run_ids {
            assert!(run_id.len() <= 40, "{run_id}");
            let mut environments = std::collections::BTreeSet::new();
            for name in &names {
                for ordinal in [0, 1, 99] {
                    let id = SessionIdentity::new(run_id, name, ordinal);
                    assert!(
                        id.environment_id.contains(run_id.as_str())
                            && id.environment_id.contains(&format!("-{ordinal}-")),
                        "{} names neither its run nor its ordinal",
                        id.environment_id
                    );
                    assert!(environments.insert(id.environment_id.clone()));
                    let again = SessionIdentity::new(run_id, name, ordinal);
                    assert_ne!(again.environment_id, id.environment_id);
                }
            }
        }
    }
}
