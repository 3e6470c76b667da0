//! `launch::connection` — Kandev's connection test (foundation 14: the in-cluster launch works
//! and the connection test says `success: true`) of the identity the sessions run as: out of
//! the cluster the service account the run binds to the executor Role (Kandev's, or the
//! operator's `--executor-role`), in the cluster (`--in-cluster`) the Pod's own account,
//! bound by whoever launched it. The API server must answer it, name it and allow every
//! permission Kandev needs (`granted`), and it may hold nothing beyond them (`nothing_broader`):
//! Kandev's e2e asserts those negatives with `kubectl auth can-i`; here the identity's rules
//! review lists all it may do.
//!
//! Both are system checks: the operator's Role and the cluster's authorizer decide them, not
//! the harness's mirror. A Role granting `list pods` breaks `nothing_broader`; one without
//! `pods/portforward` breaks `granted`, and the run's preflight already refuses it, naming
//! this check, before any scenario. The local engine has no API server: the scenario lacks
//! the `cluster` capability there.

use kandev_harness::backend::ConnectionTest;
use kandev_harness::backend::connection::{Grants, classify};
use kandev_harness::backend::kube::cluster::required_access;
use kandev_harness::runner::{
    Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, not_judged, promise,
};
use kandev_report::Capability;
use serde_json::json;
use std::time::Duration;

const GRANTED: Check = Check {
    id: "granted",
    promise: "the executor identity reaches the API server (/version), a SelfSubjectReview names it (where served) as the executor the run set up, and SelfSubjectAccessReviews allow every permission Kandev needs: Kandev's connection test succeeds",
    twin: Twin::Role("executor-role-without-portforward"),
};
const NOTHING_BROADER: Check = Check {
    id: "nothing_broader",
    promise: "the executor identity may do nothing beyond what Kandev needs: its SelfSubjectRulesReview in the namespace, less what every authenticated user holds, grants nothing more (a wildcard is more), and SelfSubjectAccessReviews deny what Kandev must not need",
    twin: Twin::Role("executor-role-lists-pods"),
};

pub fn scenario() -> Scenario {
    Scenario {
        name: "launch::connection",
        promise: "Kandev's connection test of the executor identity succeeds, and the identity holds nothing beyond Kandev's executor Role",
        checks: &[GRANTED, NOTHING_BROADER],
        timeout: Duration::from_secs(60),
        starts_first: false,
        run,
    }
}

/// Why `nothing_broader` cannot be judged whole, when it cannot: a rules review lists only
/// what authorizers can enumerate (RBAC), so without a complete one (a webhook authorizer
/// answers it `incomplete`; an API server may not serve it) only the access reviews of what
/// Kandev must not need were asked, and grants beyond those stay unseen. A breach those
/// reviews or the partial rules do show still fails the check.
fn rules_unjudged(test: &ConnectionTest) -> Option<String> {
    match &test.rules {
        Some(rules) if rules.incomplete => Some(format!(
            "the SelfSubjectRulesReview is incomplete (an authorizer, such as a webhook, cannot list its rules{}): only the access reviews of what Kandev must not need were asked",
            rules
                .evaluation_error
                .as_deref()
                .map(|e| format!(": {e}"))
                .unwrap_or_default()
        )),
        Some(_) => None,
        None => Some(format!(
            "no SelfSubjectRulesReview ({}): only the access reviews of what Kandev must not need were asked",
            test.rules_unavailable.as_deref().unwrap_or("not answered")
        )),
    }
}

/// Why the steps of the test that failed did: `key: error` each.
fn failed_steps(test: &ConnectionTest) -> String {
    let failed: Vec<String> = test
        .steps
        .iter()
        .filter(|s| !s.success)
        .map(|s| format!("{}: {}", s.key, s.error.as_deref().unwrap_or(&s.detail)))
        .collect();
    format!(
        "the connection test of {} failed: {}",
        test.identity
            .as_deref()
            .or(test.executor.as_deref())
            .unwrap_or("the executor identity"),
        failed.join("; ")
    )
}

/// What the identity may do beyond Kandev's needs: the rules review's grants beyond them
/// and every permission Kandev must not need that an access review allows.
fn broader(grants: Option<&Grants>, test: &ConnectionTest) -> Vec<String> {
    let mut broader: Vec<String> = grants.map(|g| g.beyond.clone()).unwrap_or_default();
    for answer in test.not_needed.iter().filter(|a| a.allowed) {
        let permission = answer.permission();
        if !broader.contains(&permission) {
            broader.push(permission);
        }
    }
    broader
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        let backend = ctx.backend();
        let mode = ctx.config().workspace_mode;

        ctx.step("Kandev's connection test, as the executor");
        let Some(test) = backend.connection_test(mode).await? else {
            return Ok(Verdict::Lacks(
                Capability::Cluster,
                format!(
                    "the {} backend has no API server or RBAC: Kandev's connection test examines a cluster's executor identity (--backend kind or kube)",
                    backend.name()
                ),
            ));
        };
        ctx.evidence("success", test.success);
        ctx.evidence("auth_mode", test.auth_mode);
        ctx.evidence("server_version", &test.server_version);
        ctx.evidence("namespace", &test.namespace);
        ctx.evidence("executor", &test.executor);
        ctx.evidence("identity", &test.identity);
        ctx.evidence("steps", &test.steps);
        ctx.evidence("access_reviews", &test.required);
        promise(test.success, &GRANTED, || failed_steps(&test))?;

        ctx.step("nothing broader than Kandev's executor Role");
        let required = required_access(mode);
        let grants = test
            .rules
            .as_ref()
            .map(|rules| classify(&rules.resource_rules, &required));
        let broader = broader(grants.as_ref(), &test);
        ctx.evidence(
            "rules_review",
            json!({
                "namespace": test.namespace,
                "resource_rules": test.rules.as_ref().map(|r| &r.resource_rules),
                "non_resource_rules": test.rules.as_ref().map(|r| &r.non_resource_rules),
                "incomplete": test.rules.as_ref().map(|r| r.incomplete),
                "evaluation_error": test.rules.as_ref().and_then(|r| r.evaluation_error.clone()),
                "unavailable": test.rules_unavailable,
            }),
        );
        ctx.evidence("grants", &grants);
        ctx.evidence("not_needed_access_reviews", &test.not_needed);
        ctx.evidence("broader", &broader);
        promise(broader.is_empty(), &NOTHING_BROADER, || {
            format!(
                "{} may also: {}",
                test.identity
                    .as_deref()
                    .or(test.executor.as_deref())
                    .unwrap_or("the executor identity"),
                broader.join(", ")
            )
        })?;
        if let Some(why) = rules_unjudged(&test) {
            not_judged(&NOTHING_BROADER, why);
        }
        Ok(Verdict::Passed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kandev_harness::backend::connection::{AccessAnswer, AuthMode};
    use kandev_harness::backend::kube::cluster::GRANTED_CHECK;

    #[test]
    fn the_preflight_refusal_names_the_granted_check() {
        let scenario = scenario();
        assert_eq!(scenario.check_id(&GRANTED), GRANTED_CHECK);
    }

    #[test]
    fn broader_joins_the_rules_beyond_and_the_allowed_negatives_once() {
        let answer = |verb: &str, resource: &str, allowed| AccessAnswer {
            verb: verb.into(),
            resource: resource.into(),
            allowed,
        };
        let test = ConnectionTest {
            not_needed: vec![
                answer("list", "pods", true),
                answer("get", "secrets", false),
                answer("list", "events", true),
            ],
            ..passed_test()
        };
        let grants = Grants {
            beyond: vec!["list pods".into()],
            ..Default::default()
        };
        assert_eq!(broader(Some(&grants), &test), ["list pods", "list events"]);
        assert_eq!(broader(None, &test), ["list pods", "list events"]);
    }

    /// A connection test that passed in namespace `ns`, with no answers and no rules review.
    fn passed_test() -> ConnectionTest {
        ConnectionTest {
            success: true,
            auth_mode: AuthMode::Kubeconfig,
            server_version: None,
            namespace: "ns".into(),
            executor: None,
            identity: None,
            steps: Vec::new(),
            required: Vec::new(),
            not_needed: Vec::new(),
            rules: None,
            rules_unavailable: None,
        }
    }

    #[test]
    fn only_a_complete_rules_review_judges_nothing_broader() {
        use k8s_openapi::api::authorization::v1::SubjectRulesReviewStatus;
        let with_rules = |rules: Option<SubjectRulesReviewStatus>| ConnectionTest {
            rules,
            ..passed_test()
        };
        let complete = SubjectRulesReviewStatus::default();
        assert_eq!(rules_unjudged(&with_rules(Some(complete))), None);
        let webhook = SubjectRulesReviewStatus {
            incomplete: true,
            evaluation_error: Some("webhook authorizer: no rules".into()),
            ..Default::default()
        };
        let why = rules_unjudged(&with_rules(Some(webhook))).unwrap();
        assert!(
            why.contains("incomplete") && why.contains("webhook authorizer: no rules"),
            "{why}"
        );
        let mut refused = with_rules(None);
        refused.rules_unavailable = Some("403 Forbidden".into());
        let why = rules_unjudged(&refused).unwrap();
        assert!(
            why.contains("no SelfSubjectRulesReview (403 Forbidden)"),
            "{why}"
        );
    }
}
