/// What a run reads below the fixtures' root, and so what an installed binary carries
/// (`scenarios/build.rs` includes this file) and what a report's fixtures digest covers
/// (`paths::fixtures_record`): folders whole (a fixture image's tag hashes its build context
/// whole), files one by one.
pub const CARRIED: &[&str] = &[
    "fixtures/templates",
    "fixtures/prepare",
    "fixtures/images",
    "fixtures/rbac",
    "kind/cluster.yaml",
    "kind/pins.env",
];
