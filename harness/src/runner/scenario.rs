//! What a scenario is, and how its body says that a promise broke.

use crate::runner::context::Ctx;
use kandev_report::Capability;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

pub type ScenarioFuture<'a> = Pin<Box<dyn Future<Output = anyhow::Result<Verdict>> + Send + 'a>>;

/// A named check of one promise. The registry in `scenarios/` lists them all.
pub struct Scenario {
    /// `area::name`, mirroring `scenarios/src/<area>/<name>.rs`.
    pub name: &'static str,
    /// The promise of the design it checks, as the report states it.
    pub promise: &'static str,
    pub timeout: Duration,
    /// Started before the others (in catalogue order among themselves): one of the
    /// catalogue's longest scenarios, a minute or more on 2 cores, which would otherwise start
    /// late and finish last while the other jobs stand idle. Only the start order changes;
    /// reports list scenarios in catalogue order.
    pub starts_first: bool,
    /// Its promise checks, in the order the body reaches them.
    pub checks: &'static [Check],
    pub run: for<'a> fn(&'a mut Ctx) -> ScenarioFuture<'a>,
}

impl Scenario {
    /// The report's id of one of its checks: `<scenario>/<check>`.
    pub fn check_id(&self, check: &Check) -> String {
        format!("{}/{}", self.name, check.id)
    }
}

/// One promise check of a scenario: what must hold, and the broken twin that shows the check
/// can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Check {
    /// Stable, unique within its scenario (`snake_case`); reports name `<scenario>/<id>`.
    pub id: &'static str,
    /// What must hold, as the diagnosis states it when it does not.
    pub promise: &'static str,
    pub twin: Twin,
}

/// The broken fixture that breaks exactly one check's promise in the system under test (never
/// the harness or the mock agent); `scenarios/tests/twins.rs` runs each and asserts that
/// exactly that check fails. The variant also declares the check's [`CheckKind`]: a
/// [`Twin::Mirror`] check is one only the harness's mirror of Kandev decides; every other is a
/// system check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Twin {
    /// `fixtures/templates/broken/<name>.yaml`, run as `--template`.
    Template(&'static str),
    /// `fixtures/images/broken/<name>/`, built `FROM` the fixture worker, run as
    /// `--worker-image`.
    Worker(&'static str),
    /// `fixtures/prepare/broken/<name>.sh`, run as `--prepare-script`.
    Prepare(&'static str),
    /// `fixtures/rbac/broken/<name>.yaml`, a Role the operator could bind the executor to,
    /// run as `--executor-role` (its rules replace the executor's). Only a cluster has RBAC:
    /// `scenarios/tests/kube_double/main.rs` runs it on the cluster double.
    Role(&'static str),
    /// A cluster twin: a behaviour of the cluster double (a cluster's own object or
    /// controller, not the harness's) that breaks exactly this check; the name of the test in
    /// `scenarios/tests/kube_double/main.rs` that switches it on and asserts exactly this check
    /// fails.
    Cluster(&'static str),
    /// A system check with no twin yet (it can break only on a cluster): the reason, which
    /// `docs/catalogue.md`'s exemptions list.
    Exempt(&'static str),
    /// A mirror check: only the harness's mirror of Kandev's executor decides it, so a green
    /// says nothing about the cluster, template or images. The reason names the mirror, its
    /// unit tests, and why the check needs the running Pod at all; `docs/catalogue.md` lists it.
    Mirror(&'static str),
}

pub use kandev_report::{CLUSTER_TWIN, CheckKind};

impl Twin {
    /// The fixture's path under `fixtures/`, or `None` for an exemption or a mirror check.
    pub fn fixture(&self) -> Option<String> {
        match self {
            Twin::Template(name) => Some(format!("templates/broken/{name}.yaml")),
            Twin::Worker(name) => Some(format!("images/broken/{name}")),
            Twin::Prepare(name) => Some(format!("prepare/broken/{name}.sh")),
            Twin::Role(name) => Some(format!("rbac/broken/{name}.yaml")),
            Twin::Cluster(_) | Twin::Exempt(_) | Twin::Mirror(_) => None,
        }
    }

    /// Who can break the check: the system under test, or only the harness's mirror.
    pub fn kind(&self) -> CheckKind {
        match self {
            Twin::Mirror(_) => CheckKind::Mirror,
            _ => CheckKind::System,
        }
    }

    /// As the report and `docs/catalogue.md` state it.
    pub fn describe(&self) -> String {
        match (self, self.fixture()) {
            (_, Some(path)) => format!("fixtures/{path}"),
            (Twin::Cluster(test), None) => format!("{CLUSTER_TWIN}{test}"),
            (Twin::Exempt(reason), None) => format!("exempt: {reason}"),
            (Twin::Mirror(reason), None) => format!("mirror: {reason}"),
            _ => String::new(),
        }
    }
}

/// The catalogue's checks, their kind and their twins as a Markdown table (`kandev-acceptance
/// checks`; `docs/catalogue.md` carries the same table, and a test keeps the two equal).
pub fn checks_table(registry: &[Scenario]) -> String {
    let mut out =
        String::from("| check | kind | promise | broken twin |\n| --- | --- | --- | --- |\n");
    for scenario in registry {
        for check in scenario.checks {
            let twin = match (check.twin, check.twin.fixture()) {
                (_, Some(path)) => format!("`fixtures/{path}`"),
                (Twin::Cluster(test), None) => format!("cluster double: `{test}`"),
                (Twin::Exempt(_), None) => "exempt (see below)".to_owned(),
                (Twin::Mirror(_), None) => "none: mirror check (see below)".to_owned(),
                _ => String::new(),
            };
            out.push_str(&format!(
                "| `{}` | {} | {} | {twin} |\n",
                scenario.check_id(check),
                check.twin.kind().as_str(),
                check.promise.replace('|', "\\|")
            ));
        }
    }
    out
}

/// The same checks as [`checks_table`], for tools (`checks --format json`): each check's id,
/// scenario, kind, promise and broken twin (its fixture, cluster-double test, or the reason it
/// has none).
pub fn checks_json(registry: &[Scenario]) -> serde_json::Value {
    let checks: Vec<serde_json::Value> = registry
        .iter()
        .flat_map(|scenario| scenario.checks.iter().map(move |check| (scenario, check)))
        .map(|(scenario, check)| {
            let twin = match check.twin {
                Twin::Cluster(test) => serde_json::json!({"cluster_double_test": test}),
                Twin::Exempt(reason) => serde_json::json!({"exempt": reason}),
                Twin::Mirror(reason) => serde_json::json!({"mirror": reason}),
                _ => serde_json::json!({"fixture": check.twin.fixture().map(|p| format!("fixtures/{p}"))}),
            };
            serde_json::json!({
                "id": scenario.check_id(check),
                "scenario": scenario.name,
                "kind": check.twin.kind().as_str(),
                "promise": check.promise,
                "twin": twin,
            })
        })
        .collect();
    serde_json::Value::Array(checks)
}

/// How a scenario body ends when it does not fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    Skipped(String),
    Incompatible(String),
    /// The run lacks what the scenario needs, and why: `skipped` (node view) or `incompatible`
    /// (worker tools), or `failed` when the run's gate requires that capability.
    Lacks(Capability, String),
}

/// A broken promise: the scenario ran and the design's promise did not hold.
#[derive(Debug)]
pub struct Broken {
    /// The check's id within its scenario.
    pub check: &'static str,
    pub promise: &'static str,
    /// What shows it, beside `cause`.
    pub evidence: String,
    /// The error that shows it ([`broken_by`]), kept whole as this one's source, so the
    /// judge still sees its causes.
    pub cause: Option<anyhow::Error>,
}

impl std::fmt::Display for Broken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.evidence.is_empty() {
            f.write_str(self.promise)
        } else {
            write!(f, "{}: {}", self.promise, self.evidence)
        }
    }
}

impl std::error::Error for Broken {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_ref()
            .map(|e| &**e as &(dyn std::error::Error + 'static))
    }
}

/// Fails the scenario: `check` broke, `evidence` shows how.
pub fn broken(check: &Check, evidence: impl Into<String>) -> anyhow::Error {
    Broken {
        check: check.id,
        promise: check.promise,
        evidence: evidence.into(),
        cause: None,
    }
    .into()
}

/// Fails the scenario with what `error` says: `check` broke, `error` (kept whole, so the
/// judge still sees its causes) shows how. An error of the platform's in its chain
/// ([`crate::backend::is_platform_fault`]: a lost API server, a kubelet that lost the Pod)
/// breaks no promise of the Pod: the judge ends the scenario errored naming it
/// (`runner::judge::BodyEnd::of`), whatever check it was met in.
pub fn broken_by(check: &Check, error: anyhow::Error) -> anyhow::Error {
    Broken {
        check: check.id,
        promise: check.promise,
        evidence: String::new(),
        cause: Some(error),
    }
    .into()
}

/// `result` for the check to judge, unless its error is the platform's
/// ([`crate::backend::is_platform_fault`]): then that error ends the scenario errored, rather
/// than being judged as an answer about the Pod. For checks that judge an error themselves
/// (a refusal expected, a failure read as evidence): one that propagates the error needs
/// nothing, the judge sees the platform's fault in its chain.
pub fn raise_platform_fault<T>(result: anyhow::Result<T>) -> anyhow::Result<anyhow::Result<T>> {
    match result {
        Err(e) if crate::backend::is_platform_fault(&e) => Err(e),
        other => Ok(other),
    }
}

/// `Ok(())` when `holds` (recorded as a pass of `check`), else a [`Broken`] with the evidence.
pub fn promise(
    holds: bool,
    check: &Check,
    evidence: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    if holds {
        // Outside a scenario body (unit tests) there is no log: nothing to record.
        let _ = HELD.try_with(|judged| {
            if let Ok(mut judged) = judged.lock() {
                judged.held.push(check.id);
            }
        });
        Ok(())
    } else {
        Err(broken(check, evidence()))
    }
}

/// Records that `check` could not be judged here, and why (the backend has no evidence for
/// it: no host engine beside a cluster, no node view of the node's runtime): the report lists
/// it `not judged` with the reason, counted apart from passed checks, and a release gate
/// fails it. The body goes on with its other checks. A check recorded here stays not judged
/// even when a later [`promise`] of the same check holds: a check half seen was not seen.
pub fn not_judged(check: &Check, reason: impl Into<String>) {
    let reason = reason.into();
    let _ = HELD.try_with(|judged| {
        if let Ok(mut judged) = judged.lock() {
            judged.not_judged.push((check.id, reason));
        }
    });
}

/// Records that `check` could not be judged because the run's backend lacks `capability` (the
/// local backend has no API server: what a cluster stands between, only the harness writes
/// there). As [`not_judged`], and the report names the lack: the release gate excuses it as it
/// does a skipped scenario's, unless the gate requires the capability, and says in one line
/// what the verdict does not cover.
pub fn not_judged_lacking(check: &Check, capability: Capability, reason: impl Into<String>) {
    not_judged(check, reason);
    let _ = HELD.try_with(|judged| {
        if let Ok(mut judged) = judged.lock() {
            judged.lacking.push((check.id, capability));
        }
    });
}

/// What a scenario body judged of its checks, as [`promise`] and [`not_judged`] record it.
#[derive(Debug, Default)]
pub struct Judged {
    /// The checks that held, as the body reached them.
    pub held: Vec<&'static str>,
    /// The checks the body could not judge, and why.
    pub not_judged: Vec<(&'static str, String)>,
    /// Of those, the ones the backend's lack of a capability left unjudged.
    pub lacking: Vec<(&'static str, Capability)>,
}

tokio::task_local! {
    /// Set by the runner around a scenario body: [`promise`] records here each check that
    /// held, as the body reaches it, so a scenario's report lists a check as passed only when
    /// its body really judged it ([`not_judged`]: one it could not judge). (A broken check
    /// ends the body: the runner's `BodyEnd` says which.)
    pub(super) static HELD: std::sync::Arc<std::sync::Mutex<Judged>>;
}
