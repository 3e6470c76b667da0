//! The report of a kandev-acceptance run, as a model and nothing else: typed, versioned JSON
//! (`report.json`) whose JSON Schema is checked in under `reports/`, how it is read and
//! written, the exit codes a report maps to, and the gate vocabulary.
//!
//! CI, operators and release gating read this file; `schema_version` changes whenever its
//! shape does, and [`read`] names a report newer than this crate reads as such. The one
//! pass/fail rule is [`judge`]: the run's exit code and the report's own `verdict` come from
//! it, and `gate` applies it before comparing the artefacts a release ships. Readers in this
//! repository deserialize with `deny_unknown_fields`. The harness writes reports and renders
//! them (`harness/src/outputs/`, where `gate`, `report diff` and `--repeat` read them too); a
//! CI script or release tool that only reads a report needs this crate alone.

mod cost;
pub mod exit;
mod file;
mod gate;
mod run;
mod scenario;
mod summary;
mod time;
mod verdict;

pub use cost::{CallCost, Calls, EngineCpu, ResourceUsage, RunCost};
pub use file::{ReportTooNew, json_schema, read, write};
pub use gate::{Capability, Gate, GateProfile};
pub use run::{
    Configuration, Environment, FixturesRecord, ImageRecord, PrepareScriptRecord, RanImage, Report,
    SCHEMA_VERSION, Selection, TemplateRecord, Verdict,
};
pub use scenario::{
    CLUSTER_TWIN, CheckKind, CheckOutcome, CheckReport, CleanupOutcome, CleanupRecord, Finding,
    FindingLevel, NestedInventory, Outcome, ScenarioReport, SessionRecord, StepOutcome, StepReport,
    has_twin,
};
pub use summary::{CheckSummary, KindCount, Summary};
pub use time::{Civil, rfc3339, unix_ms};
pub use verdict::{Rules, judge, verdict_of};
