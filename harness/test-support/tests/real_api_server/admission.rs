//! AC-001.3 on a real API server: every fixture template (the default full-worker, the
//! upstream rule cases, the broken twins) composed as a launch composes it, then created with
//! `dryRun=All` in a namespace under each Pod Security level. What the real API server
//! answered, and why, is written to `fixtures/kube/recorded/admission.md` (checked in: a
//! change of answer, from a template or from Kubernetes, shows in review; rewrite it with
//! `KANDEV_RECORD=1`). On every admitted Pod the harness's admission comparison (Kandev's
//! `ValidateAdmittedPod`) runs against the real defaulting: the grant must survive it.
//! The cluster double gets the same requests, and must give the same status and reason.

use crate::namespace;
use k8s_openapi::api::core::v1::Pod;
use kandev_harness::pod::admission;
use kandev_harness::pod::compose::{Arch, ComposeInput, WorkspaceSource, compose_pod};
use kandev_harness::pod::identity::{SessionIdentity, random_hex};
use kandev_harness::pod::template::{self, RuleOptions, TemplateFile, WorkspaceMode};
use kandev_test_support::real_api_server;
use kube::api::{Api, PostParams};
use serde_json::json;
use std::fmt::Write;
use std::path::PathBuf;

const LEVELS: [&str; 3] = ["privileged", "baseline", "restricted"];
const MAIN: &str = "kandev-agent";

/// Every fixture template: (shown name, text).
fn templates() -> Vec<(String, String)> {
    let fixtures = kandev_harness::paths::fixtures().join("templates");
    let mut found = vec![(
        "full-worker.yaml".to_owned(),
        std::fs::read_to_string(fixtures.join("full-worker.yaml")).unwrap(),
    )];
    for folder in ["cases", "broken"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures.join(folder))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        for file in files {
            let name = format!("{folder}/{}", file.file_name().unwrap().to_string_lossy());
            found.push((name, std::fs::read_to_string(&file).unwrap()));
        }
    }
    assert!(found.len() > 50, "{} templates", found.len());
    found
}

/// The Pod a launch composes from `text` in `namespace`, or why Kandev's rules refuse the
/// template before any API write (a mirror of Kandev: no API server is asked).
fn composed(text: &str, namespace: &str) -> Result<Pod, String> {
    let options = RuleOptions {
        main_container: MAIN.into(),
        workspace_mode: WorkspaceMode::EmptyDir,
        workspace_claim: None,
    };
    let file = TemplateFile::parse(text.to_owned()).map_err(|f| first_error(&f))?;
    let findings = template::validate(file.parsed(), &options);
    if template::errors(&findings).next().is_some() {
        return Err(first_error(&findings));
    }
    let template = file
        .with_images(
            "kandev-acceptance/worker:admission",
            "kandev-acceptance/daemon:admission",
        )
        .map_err(|r| format!("{r:?}"))?
        .template;
    let identity = SessionIdentity::new("20260101t000000-admission", "admission::real", 1);
    compose_pod(&ComposeInput {
        template: &template,
        identity: &identity,
        namespace,
        main_container: MAIN,
        arch: Arch::of_this_machine(),
        workspace: WorkspaceSource::EmptyDir,
        create_nonce: "0123456789abcdef",
    })
    .map_err(|e| e.to_string())
}

fn first_error(findings: &[template::TemplateFinding]) -> String {
    template::errors(findings)
        .next()
        .map_or_else(|| "refused".to_owned(), ToString::to_string)
}

/// What one server answered to one dry-run create: `admitted` (with the admission
/// comparison's verdict on the defaulted Pod) or the refusal's code, reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Admitted {
        mismatches: Vec<String>,
    },
    Refused {
        code: u16,
        reason: String,
        message: String,
    },
}

impl Answer {
    fn shown(&self) -> String {
        match self {
            Answer::Admitted { mismatches } if mismatches.is_empty() => {
                "admitted; the admission comparison passes".to_owned()
            }
            Answer::Admitted { mismatches } => {
                format!(
                    "admitted; admission comparison fails: {}",
                    mismatches.join("; ")
                )
            }
            Answer::Refused {
                code,
                reason,
                message,
            } => format!(
                "{code} {reason}: {}",
                task_pod_named(message).replace('|', "\\|")
            ),
        }
    }

    /// What the double must match: the status code and reason (its messages are its own).
    fn class(&self) -> String {
        match self {
            Answer::Admitted { mismatches } => {
                format!("admitted ({} mismatches)", mismatches.len())
            }
            Answer::Refused { code, reason, .. } => format!("{code} {reason}"),
        }
    }
}

async fn dry_run(client: &kube::Client, pod: &Pod) -> Answer {
    let namespace = pod.metadata.namespace.clone().unwrap();
    let params = PostParams {
        dry_run: true,
        ..Default::default()
    };
    match Api::<Pod>::namespaced(client.clone(), &namespace)
        .create(&params, pod)
        .await
    {
        Ok(admitted) => Answer::Admitted {
            mismatches: admission::compare(pod, &admitted, MAIN)
                .iter()
                .map(ToString::to_string)
                .collect(),
        },
        Err(kube::Error::Api(status)) => Answer::Refused {
            code: status.code,
            reason: status.reason,
            message: status.message,
        },
        Err(e) => panic!("dry run of {namespace}: {e}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_templates_pod_under_each_pod_security_level_on_a_real_api_server() {
    let real = real_api_server::shared();
    let client = real.admin_client().await;
    let double = kandev_test_support::cluster_double::start(None)
        .await
        .unwrap();
    let double_client = kandev_test_support::on_double::admin_client(&double).await;
    let suffix = random_hex(4);
    for level in LEVELS {
        let labels = json!({"pod-security.kubernetes.io/enforce": level});
        namespace(
            &client,
            &format!("admission-{level}-{suffix}"),
            labels.clone(),
        )
        .await;
        namespace(
            &double_client,
            &format!("admission-{level}-{suffix}"),
            labels,
        )
        .await;
    }

    let mut table = format!(
        "# Admission of every fixture template on a real API server\n\n\
         Written by `harness/test-support/tests/real_api_server/admission.rs` (rewrite with\n\
         `KANDEV_RECORD=1`): each template composed as a launch composes it (workspace an\n\
         emptyDir), then created with `dryRun=All` in a namespace enforcing each Pod Security\n\
         level on kube-apiserver {version} (built here: `harness/scripts/ensure-kind.sh`).\n\
         \"refused before any API write\" is Kandev's own template rules (the harness's mirror);\n\
         \"admitted\" is followed by the admission comparison's verdict on the real defaulting.\n\n\
         | template | {} |\n| --- | --- | --- | --- |\n",
        LEVELS.join(" | "),
        version = real.version,
    );
    let mut failures = Vec::new();
    let mut differences = Vec::new();
    for (name, text) in templates() {
        let mut row = format!("| `{name}` |");
        for level in LEVELS {
            let ns = format!("admission-{level}-{suffix}");
            let cell = match composed(&text, &ns) {
                Err(refusal) => {
                    if name == "full-worker.yaml" || name.starts_with("cases/accepted-") {
                        failures.push(format!("{name}: refused by the rules: {refusal}"));
                    }
                    format!(
                        "refused before any API write: {}",
                        refusal.replace('|', "\\|")
                    )
                }
                Ok(pod) => {
                    let answer = dry_run(&client, &pod).await;
                    let on_double = dry_run(&double_client, &pod).await;
                    if answer.class() != on_double.class()
                        && !pod_security_only(&answer, &on_double)
                    {
                        differences.push(format!(
                            "{name} under {level}: the real API server {}, the double {}",
                            answer.shown(),
                            on_double.shown()
                        ));
                    }
                    check(&name, level, privileged(&pod), &answer, &mut failures);
                    answer.shown()
                }
            };
            let _ = write!(row, " {cell} |");
        }
        table.push_str(&row);
        table.push('\n');
    }

    let recorded = kandev_harness::paths::fixtures().join("kube/recorded/admission.md");
    if std::env::var("KANDEV_RECORD").is_ok_and(|v| v == "1") {
        std::fs::write(&recorded, &table).unwrap();
    }
    let checked_in = std::fs::read_to_string(&recorded).unwrap_or_default();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        differences.is_empty(),
        "the double answers otherwise than the real API server:\n{}",
        differences.join("\n")
    );
    assert!(
        checked_in == table,
        "the real API server answers otherwise than {} records (rewrite it with KANDEV_RECORD=1 and review the change):\n{table}",
        recorded.display()
    );
}

/// The one difference the double keeps on purpose (docs/development.md, "The cluster double
/// against the real API server"): it has no Pod Security admission, which the real API
/// server here judges (this file); its namespaces admit every Pod.
fn pod_security_only(real: &Answer, double: &Answer) -> bool {
    matches!(real, Answer::Refused { code: 403, message, .. } if message.contains("violates PodSecurity"))
        && matches!(double, Answer::Admitted { .. })
}

/// A refusal's message with the task Pod's name (a hash of the session and its nonce) as
/// `<task pod>`, so the record changes only when an answer does.
fn task_pod_named(message: &str) -> String {
    match message.split_once("pods \"kandev-") {
        Some((before, rest)) => match rest.split_once('"') {
            Some((_, after)) => format!("{before}pods \"<task pod>\"{after}"),
            None => message.to_owned(),
        },
        None => message.to_owned(),
    }
}

/// Whether a container of `pod` is privileged (only a privileged namespace admits it).
fn privileged(pod: &Pod) -> bool {
    pod.spec.iter().flat_map(|s| &s.containers).any(|c| {
        c.security_context
            .as_ref()
            .and_then(|s| s.privileged)
            .unwrap_or(false)
    })
}

/// What AC-001.3 and the recipe require of each answer.
fn check(
    name: &str,
    level: &str,
    privileged_companion: bool,
    answer: &Answer,
    failures: &mut Vec<String>,
) {
    let by_pod_security = matches!(answer, Answer::Refused { code: 403, message, .. } if message.contains("violates PodSecurity"));
    let failure = match (level, answer) {
        ("privileged", Answer::Admitted { mismatches }) => (!mismatches.is_empty()).then(|| {
            format!("{name}: the grant does not survive the real defaulting: {mismatches:?}")
        }),
        ("privileged", Answer::Refused { .. }) => Some(format!(
            "{name}: refused in a privileged namespace: {}",
            answer.shown()
        )),
        (_, Answer::Refused { .. }) => (privileged_companion && !by_pod_security).then(|| {
            format!(
                "{name} under {level}: refused, but not by Pod Security: {}",
                answer.shown()
            )
        }),
        (_, Answer::Admitted { .. }) => privileged_companion
            .then(|| format!("{name}: its privileged companion admitted under {level}")),
    };
    failures.extend(failure);
}
