//! Private registries: the image pull secrets a run's Pods carry.
//!
//! The Secrets named by `--image-pull-secret [NS/]NAME` and by the template's own
//! `imagePullSecrets` are read with the operator's identity, NAME from the kubeconfig context's
//! namespace (`default` when the context names none: kube-rs `Config::default_namespace`),
//! NS/NAME from NS, and the template's own from `--namespace` when given, as a kubelet reads a
//! Pod's from the Pod's namespace ([`plan`]). One read from the run's own namespace is the operator's own
//! there: used as it is, neither copied nor removed. Every other is copied, run-labelled, into
//! the run's namespace before any Pod is created, under a name of the run's own
//! ([`copy_name`]): runs sharing a namespace (`--namespace`) never share a copy nor race for
//! one. A missing Secret, or one of another type than `kubernetes.io/dockerconfigjson`, is
//! refused before anything is copied; the operator preflight asks beforehand for every grant
//! this takes ([`needs`]). A copy is removed at teardown (with the run's namespace when the run
//! created it; else by the UID its create returned) and by `gc` (it carries the run's labels).
//! Every Pod the run creates carries the names, a copy's in place of the name it copies
//! ([`carry_planned`]): the task Pod, the warm-up, the inspector and the MTU peer; `launch`'s
//! Job's Pod too, and the run inside it carries the copies `launch` made
//! ([`LAUNCH_CONTEXT_NAMESPACE_ENV`]).
//!
//! Only `kubernetes.io/dockerconfigjson` is accepted: the kubelet reads `.dockerconfigjson`
//! of that type and `.dockercfg` of `kubernetes.io/dockercfg` and ignores every other Secret
//! (kubernetes v1.37.2 pkg/credentialprovider/secrets/secrets.go,
//! `secretsToTrackedDockerConfigs`); the second is the legacy format `kubectl create secret
//! docker-registry` no longer writes.

use super::cluster::Need;
use crate::pod::identity::{LABEL_RUN, short_digest};
use k8s_openapi::api::core::v1::{LocalObjectReference, Pod, PodSpec, Secret};
use kandev_report::{CleanupOutcome, CleanupRecord};
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Instant;

/// The one Secret type the harness copies (see the module docs).
pub const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";

/// The fix a pull the registry refused for want of credentials names.
pub const AUTH_FIX: &str = "check the image's name, then pass --image-pull-secret NAME (a kubernetes.io/dockerconfigjson Secret) or add imagePullSecrets to the template (if it carries one, its credentials were refused: renew them)";

/// `--image-pull-secret`'s value: `NAME` or `NS/NAME`, each a DNS subdomain (a Secret's name)
/// or label (a namespace's).
pub fn parse_flag(value: &str) -> Result<String, String> {
    let (namespace, name) = split(value);
    let dns = |s: &str, max: usize, dots: bool| {
        !s.is_empty()
            && s.len() <= max
            && s.chars().all(|c| {
                c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || (dots && c == '.')
            })
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    if namespace.is_some_and(|ns| !dns(ns, 63, false)) || !dns(name, 253, true) {
        return Err(format!(
            "{value:?} is not [NS/]NAME: a Secret's name (lowercase letters, digits, '-', '.'), optionally after its namespace and '/'"
        ));
    }
    Ok(value.to_owned())
}

fn split(value: &str) -> (Option<&str>, &str) {
    match value.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, value),
    }
}

/// What names a Secret the template's Pod spec carries ([`Wanted::named_by`]).
const TEMPLATE: &str = "the template's imagePullSecrets";

/// One Secret the run's Pods need: where it is read from and who asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// The namespace it is read from; None: the kubeconfig context's.
    pub source: Option<String>,
    pub name: String,
    /// `--image-pull-secret` or `the template's imagePullSecrets`.
    pub named_by: &'static str,
}

/// Why the run's pull secrets cannot be had: the cause and its fix, on one line each.
#[derive(Debug, thiserror::Error)]
#[error("{problem}; nothing was copied\n  fix: {fix}")]
pub struct Refused {
    pub problem: String,
    pub fix: String,
}

/// The Secrets the flags and the template's Pod spec name, each once (the flag's first: an
/// explicit `NS/NAME` is carried in place of the template's `NAME`). Refused: one name read
/// from two namespaces; and, under `--namespace` (`namespace_given`), a bare flag `NAME` that
/// the template names too, since the flag's is read from the context's namespace and the
/// template's from `--namespace` ([`plan`]): which one the Pods carry is the operator's to
/// say (also when the two namespaces are one: the flag is then not needed).
pub fn wanted(
    flags: &[String],
    template: &PodSpec,
    namespace_given: bool,
) -> Result<Vec<Wanted>, Refused> {
    let mut all: Vec<Wanted> = Vec::new();
    let from_template = template
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|r| (None, r.name.as_str(), TEMPLATE));
    let from_flags = flags.iter().map(|f| {
        let (ns, name) = split(f);
        (ns, name, "--image-pull-secret")
    });
    for (source, name, named_by) in from_flags.chain(from_template) {
        if name.is_empty() {
            continue;
        }
        match all.iter().find(|w| w.name == name) {
            Some(seen) if source.is_some() && seen.source.as_deref() != source => {
                return Err(Refused {
                    problem: format!(
                        "image pull secret {name} is named twice, from {} and from {}",
                        seen.source.as_deref().unwrap_or("the context's namespace"),
                        source.unwrap_or_default()
                    ),
                    fix: format!(
                        "name {name} once (--image-pull-secret NS/{name}): its copy in the run's namespace keeps the name"
                    ),
                });
            }
            Some(seen) if namespace_given && seen.source.is_none() && named_by == TEMPLATE => {
                return Err(Refused {
                    problem: format!(
                        "image pull secret {name} is named by --image-pull-secret, read from the context's namespace, and by the template's imagePullSecrets, read from --namespace where its Pods run"
                    ),
                    fix: format!(
                        "leave out --image-pull-secret {name} to carry --namespace's own, or name the one to carry in its place: --image-pull-secret NS/{name}"
                    ),
                });
            }
            Some(_) => {}
            None => all.push(Wanted {
                source: source.map(str::to_owned),
                name: name.to_owned(),
                named_by,
            }),
        }
    }
    Ok(all)
}

/// Whether the run's namespace is the operator's `--namespace`, where the template's own
/// references are read ([`plan`]): given, out of the cluster; in the cluster (`--in-cluster`),
/// given unless it is the one `launch` created for the run.
pub fn namespace_given(namespace: Option<&str>, in_cluster: bool, run_id: Option<&str>) -> bool {
    namespace.is_some_and(|ns| {
        !in_cluster || run_id.is_none_or(|id| ns != super::cluster::run_namespace(id))
    })
}

/// The longest name a Secret may have (a DNS subdomain: apimachinery's `IsDNS1123Subdomain`).
const NAME_MAX: usize = 253;

/// The name of the run's copy of Secret `name`: `<name>-<digest>`, the digest of the run id
/// and the name (so that two long names cut to the same head still differ), within
/// 253 bytes (a Secret name's limit). Another run's copy in a shared namespace never has it.
pub fn copy_name(name: &str, run_id: &str) -> String {
    let digest = short_digest(&format!("{run_id}/{name}"));
    let room = NAME_MAX - digest.len() - 1;
    // A cut may end on '.' or '-', which may not precede the '-'.
    let head = name
        .get(..room.min(name.len()))
        .unwrap_or(name)
        .trim_end_matches(['.', '-']);
    format!("{head}-{digest}")
}

/// The environment variable `launch` gives the run inside its Job: the namespace a bare NAME
/// was read from (launch's kubeconfig context's), so that the run inside names the copies
/// `launch` made as it made them ([`plan`]).
pub const LAUNCH_CONTEXT_NAMESPACE_ENV: &str = "KANDEV_ACCEPTANCE_PULL_SECRET_NAMESPACE";

/// One wanted Secret as the run holds it: read from `source`, carried by the Pods as
/// `carried` in the run's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned {
    /// The name it was named by.
    pub name: String,
    pub named_by: &'static str,
    /// The namespace it is read from.
    pub source: String,
    /// True: copied into the run's namespace as `carried`; false: the run's namespace's own,
    /// used as it is (`carried` is `name`).
    pub copied: bool,
    pub carried: String,
}

/// Where each wanted Secret is read and the name its Pods carry in `run_namespace`: its own
/// when read from there, else the run's copy's. A bare `--image-pull-secret NAME` is read from
/// `context_namespace`. A template's own reference is read where the template's Pods run, as
/// the kubelet resolves it from the Pod's namespace (Kandev creates them in its namespace):
/// the operator's `--namespace` (`namespace_given`), else the context's, standing in for
/// Kandev's beside the run's fresh namespace.
pub fn plan(
    wanted: &[Wanted],
    context_namespace: &str,
    run_namespace: &str,
    namespace_given: bool,
    run_id: &str,
) -> Vec<Planned> {
    wanted
        .iter()
        .map(|w| {
            let bare = match w.named_by {
                TEMPLATE if namespace_given => run_namespace,
                _ => context_namespace,
            };
            let source = w.source.as_deref().unwrap_or(bare).to_owned();
            let copied = source != run_namespace;
            Planned {
                carried: if copied {
                    copy_name(&w.name, run_id)
                } else {
                    w.name.clone()
                },
                name: w.name.clone(),
                named_by: w.named_by,
                source,
                copied,
            }
        })
        .collect()
}

/// What the operator's identity must be allowed for `planned` in `run_namespace` (asked by
/// the operator preflight): each Secret read where it is; a copy created, read back when its
/// create was answered 409 after a lost connection (`cluster::resilience` takes the object
/// as the create's when it carries the run's labels), and, in a namespace the run did not
/// create (`namespace_given`), deleted at teardown (a namespace the run created takes it).
pub fn needs(planned: &[Planned], run_namespace: &str, namespace_given: bool) -> Vec<Need> {
    let mut needs = Vec::new();
    for p in planned {
        let why = if p.copied {
            "image pull secret: read to be copied"
        } else {
            "image pull secret: the run's namespace's own, its type checked"
        };
        needs.push(
            Need::new("get", "", "secrets", why)
                .named(&p.name)
                .in_namespace(&p.source, run_namespace),
        );
        if !p.copied {
            continue;
        }
        // A create is authorized without its object's name (a POST to the collection: k8s.io/
        // apiserver v0.37.2 pkg/endpoints/request/requestinfo.go), which no resourceNames
        // rule matches (kubernetes v1.37.2 plugin/pkg/auth/authorizer/rbac/rbac.go).
        needs.push(Need::new(
            "create",
            "",
            "secrets",
            "image pull secret: the run's copy",
        ));
        needs.push(
            Need::new(
                "get",
                "",
                "secrets",
                "image pull secret: the run's copy, read back after a lost connection",
            )
            .named(&p.carried),
        );
        if namespace_given {
            needs.push(
                Need::new(
                    "delete",
                    "",
                    "secrets",
                    "image pull secret: teardown removes the run's copy",
                )
                .named(&p.carried),
            );
        }
    }
    needs
}

/// The names a Pod carries for `planned`.
pub fn names(planned: &[Planned]) -> Vec<String> {
    planned.iter().map(|p| p.carried.clone()).collect()
}

/// Adds to `spec`'s `imagePullSecrets` each of `names` it does not carry yet (the template's
/// own stay first, in their order).
pub fn carry_in_spec(spec: &mut PodSpec, names: &[String]) {
    if names.is_empty() {
        return;
    }
    let carried = spec.image_pull_secrets.get_or_insert_default();
    for name in names {
        if !carried.iter().any(|r| &r.name == name) {
            carried.push(LocalObjectReference { name: name.clone() });
        }
    }
}

/// [`carry_in_spec`] on a Pod.
pub fn carry(pod: &mut Pod, names: &[String]) {
    if names.is_empty() {
        return;
    }
    carry_in_spec(pod.spec.get_or_insert_default(), names);
}

/// [`carry`] of `planned`, after the Pod's own reference to a Secret the run copied is
/// turned into the copy's name: in the run's namespace only the copy is there to read.
pub fn carry_planned(pod: &mut Pod, planned: &[Planned]) {
    if let Some(own) = pod
        .spec
        .as_mut()
        .and_then(|s| s.image_pull_secrets.as_mut())
    {
        for reference in own.iter_mut() {
            if let Some(p) = planned
                .iter()
                .find(|p| p.copied && p.name == reference.name)
            {
                reference.name = p.carried.clone();
            }
        }
    }
    carry(pod, &names(planned));
}

/// One copy the run made: removed by the UID its create returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copy {
    pub name: String,
    pub uid: Option<String>,
}

/// What the run holds in its namespace: every Secret its Pods carry, and the copies it made
/// (removed at teardown).
#[derive(Debug, Clone, Default)]
pub struct PullSecrets {
    pub carried: Vec<Planned>,
    pub copies: Vec<Copy>,
    /// Per Secret: where it was read, its type, and whether it was copied or used as it is.
    pub evidence: Vec<Value>,
}

/// Reads every planned Secret (all before any copy: a missing one is refused with nothing
/// made), then makes the copies in `run_namespace`, labelled `labels` (the run's). A copy
/// made before a later one failed is in the error's list, so the caller's teardown removes it.
pub async fn copy(
    admin: &Client,
    run_namespace: &str,
    labels: &BTreeMap<String, String>,
    planned: &[Planned],
) -> Result<PullSecrets, (Refused, Vec<Copy>)> {
    let mut found = Vec::new();
    for p in planned {
        let source = p.source.as_str();
        let read = Api::<Secret>::namespaced(admin.clone(), source)
            .get_opt(&p.name)
            .await
            .map_err(|e| (read_refused(p, &e), Vec::new()))?;
        let Some(secret) = read else {
            return Err((
                Refused {
                    problem: format!(
                        "image pull secret {} ({}) does not exist in namespace {source}",
                        p.name, p.named_by
                    ),
                    fix: format!(
                        "create it there (kubectl -n {source} create secret docker-registry {} --docker-server=R --docker-username=U --docker-password=P), or name its namespace: --image-pull-secret NS/{}",
                        p.name, p.name
                    ),
                },
                Vec::new(),
            ));
        };
        let kind = secret.type_.clone().unwrap_or_else(|| "Opaque".into());
        if kind != DOCKER_CONFIG_JSON {
            return Err((
                Refused {
                    problem: format!(
                        "image pull secret {source}/{} ({}) is of type {kind}, not {DOCKER_CONFIG_JSON}",
                        p.name, p.named_by
                    ),
                    fix: format!(
                        "name a Secret made by `kubectl create secret docker-registry` (type {DOCKER_CONFIG_JSON}, key .dockerconfigjson)"
                    ),
                },
                Vec::new(),
            ));
        }
        found.push((p, secret));
    }
    let in_run: Api<Secret> = Api::namespaced(admin.clone(), run_namespace);
    let mut made = PullSecrets {
        carried: planned.to_vec(),
        ..Default::default()
    };
    for (p, secret) in found {
        if !p.copied {
            made.evidence.push(json!({"name": p.name, "named_by": p.named_by, "type": DOCKER_CONFIG_JSON,
                "found_in": p.source, "copied": false, "why": "the run's namespace's own: used as it is, not removed"}));
            continue;
        }
        let copy = Secret {
            metadata: ObjectMeta {
                name: Some(p.carried.clone()),
                namespace: Some(run_namespace.to_owned()),
                labels: Some(labels.clone()),
                ..Default::default()
            },
            type_: secret.type_.clone(),
            data: secret.data.clone(),
            immutable: Some(true),
            ..Default::default()
        };
        let params = PostParams {
            dry_run: false,
            field_manager: Some(super::FIELD_MANAGER.into()),
        };
        // A 409 after a lost connection is answered as the create's by `cluster::resilience`
        // when the object carries the run's labels; one that stands is another object's.
        let created = match in_run.create(&params, &copy).await {
            Ok(created) => created,
            Err(e) => {
                return Err((copy_refused(p, run_namespace, labels, &e), made.copies));
            }
        };
        made.copies.push(Copy {
            name: p.carried.clone(),
            uid: created.metadata.uid,
        });
        made.evidence.push(
            json!({"name": p.name, "named_by": p.named_by, "type": DOCKER_CONFIG_JSON,
            "read_from": p.source, "copied": true, "copied_to": run_namespace, "copy": p.carried}),
        );
    }
    Ok(made)
}

fn read_refused(p: &Planned, e: &kube::Error) -> Refused {
    let forbidden = matches!(e, kube::Error::Api(s) if s.code == 403);
    let namespace = &p.source;
    Refused {
        problem: format!(
            "read image pull secret {namespace}/{} ({}): {}",
            p.name,
            p.named_by,
            crate::error_chain(e)
        ),
        fix: if forbidden {
            format!(
                "your identity needs get on secrets in namespace {namespace} (docs/operators.md lists every grant)"
            )
        } else {
            "check that the cluster answers (`kubectl --context C get ns`)".into()
        },
    }
}

fn copy_refused(
    p: &Planned,
    run_namespace: &str,
    labels: &BTreeMap<String, String>,
    e: &kube::Error,
) -> Refused {
    let run_id = labels.get(LABEL_RUN).map_or("ID", String::as_str);
    let fix = match e {
        kube::Error::Api(s) if s.code == 403 => format!(
            "your identity needs create on secrets in namespace {run_namespace} (docs/operators.md lists every grant)"
        ),
        // The name is this run's own: an earlier run of the same id (a killed one) left it.
        kube::Error::Api(s) if s.code == 409 => format!(
            "remove what an earlier run of id {run_id} left (`kandev-acceptance gc --run {run_id}` with this run's --context and --namespace), or give this run another --run-id"
        ),
        _ => "check that the cluster answers (`kubectl --context C get ns`)".into(),
    };
    Refused {
        problem: format!(
            "copy image pull secret {}/{} into the run's namespace {run_namespace} as {}: {}",
            p.source,
            p.name,
            p.carried,
            crate::error_chain(e)
        ),
        fix,
    }
}

/// Removes the run's copies from `namespace`, each by the UID its create returned: absent is
/// fine, and so is an object of that name with another UID (not the run's: left as it is).
pub async fn remove(admin: &Client, namespace: &str, copies: &[Copy]) -> Vec<CleanupRecord> {
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), namespace);
    let mut records = Vec::new();
    for copy in copies {
        let started = Instant::now();
        // 404: the copy is gone; 409: so is the copy, and the Secret of its name now is
        // someone else's (another UID), kept. Either way the run removed nothing.
        let (result, gone) =
            match super::deletes::delete_recorded(&secrets, &copy.name, copy.uid.clone()).await {
                Ok(gone) => (Ok(()), gone),
                Err(e) => (Err(e), false),
            };
        let mut record = CleanupRecord::timed(format!("secret/{}", copy.name), started, result);
        if gone {
            record.outcome = CleanupOutcome::AlreadyGone;
        }
        records.push(record);
    }
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_takes_a_name_or_a_namespace_and_a_name() {
        assert_eq!(parse_flag("regcred"), Ok("regcred".into()));
        assert_eq!(parse_flag("ops/reg.cred-1"), Ok("ops/reg.cred-1".into()));
        for bad in [
            "",
            "Regcred",
            "ops/",
            "/regcred",
            "a/b/c",
            "ops.x/regcred",
            "-r",
        ] {
            assert!(parse_flag(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_flags_and_the_templates_secrets_are_wanted_once_each() {
        let template: PodSpec = serde_json::from_value(json!({"containers": [],
            "imagePullSecrets": [{"name": "tmpl"}, {"name": "both"}]}))
        .unwrap_or_default();
        let all = wanted(&["ops/both".into(), "flag".into()], &template, true).unwrap_or_default();
        let seen: Vec<(Option<&str>, &str, &str)> = all
            .iter()
            .map(|w| (w.source.as_deref(), w.name.as_str(), w.named_by))
            .collect();
        assert_eq!(
            seen,
            [
                (Some("ops"), "both", "--image-pull-secret"),
                (None, "flag", "--image-pull-secret"),
                (None, "tmpl", "the template's imagePullSecrets"),
            ]
        );
        let twice = wanted(&["a/x".into(), "b/x".into()], &PodSpec::default(), false);
        assert!(
            twice.is_err_and(|e| e.to_string().contains("named twice")
                && e.to_string().contains("fix: name x once"))
        );
    }

    #[test]
    fn a_bare_flag_the_template_names_too_is_refused_under_namespace() {
        let template: PodSpec = serde_json::from_value(json!({"containers": [],
            "imagePullSecrets": [{"name": "regcred"}]}))
        .unwrap_or_default();
        let clash = wanted(&["regcred".into()], &template, true);
        assert!(clash.is_err_and(|e| {
            e.to_string().contains("read from --namespace")
                && e.to_string()
                    .contains("leave out --image-pull-secret regcred")
        }),);
        // Without --namespace both are read from the context's namespace: one Secret.
        let one = wanted(&["regcred".into()], &template, false).unwrap_or_default();
        assert_eq!(one.len(), 1);
        // An explicit NS/NAME is carried in place of the template's NAME.
        let explicit = wanted(&["ops/regcred".into()], &template, true).unwrap_or_default();
        assert_eq!(explicit.len(), 1);
        assert_eq!(explicit[0].source.as_deref(), Some("ops"));
    }

    #[test]
    fn the_namespace_is_the_operators_unless_launch_made_it() {
        assert!(!namespace_given(None, false, None));
        assert!(namespace_given(Some("team"), false, Some("r")));
        // In the cluster: launch's own namespace for the run is not the operator's.
        let launchs = crate::backend::kube::cluster::run_namespace("r");
        assert!(!namespace_given(Some(&launchs), true, Some("r")));
        assert!(namespace_given(Some("team"), true, Some("r")));
    }

    #[test]
    fn a_copy_has_a_name_of_the_runs_own_within_the_limit() {
        let copy = copy_name("regcred", "run-a");
        assert!(copy.starts_with("regcred-") && copy.len() == "regcred-".len() + 16);
        assert_ne!(copy, copy_name("regcred", "run-b"), "another run's");
        let long = format!("{}.x", "a".repeat(250));
        let cut = copy_name(&long, "run-a");
        assert_eq!(cut.len(), NAME_MAX);
        assert!(parse_flag(&cut).is_ok(), "{cut}");
        assert_ne!(cut, copy_name(&format!("{}.y", "a".repeat(250)), "run-a"));
        let dotted = copy_name(&format!("{}.bb", "a".repeat(235)), "r");
        assert!(!dotted.contains(".-"), "{dotted}");
    }

    #[test]
    fn only_a_secret_of_the_runs_own_namespace_is_used_as_it_is() {
        let wanted = wanted(
            &["ops/a".into(), "team/b".into(), "c".into()],
            &PodSpec::default(),
            true,
        )
        .unwrap_or_default();
        let planned = plan(&wanted, "ctx", "team", true, "r");
        let seen: Vec<(&str, &str, bool, String)> = planned
            .iter()
            .map(|p| {
                (
                    p.name.as_str(),
                    p.source.as_str(),
                    p.copied,
                    p.carried.clone(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("a", "ops", true, copy_name("a", "r")),
                ("b", "team", false, "b".to_owned()),
                ("c", "ctx", true, copy_name("c", "r")),
            ]
        );
    }

    #[test]
    fn a_templates_own_reference_is_read_where_its_pods_run() {
        let template: PodSpec =
            serde_json::from_value(json!({"containers": [], "imagePullSecrets": [{"name": "t"}]}))
                .unwrap_or_default();
        let wanted = wanted(&["f".into()], &template, true).unwrap_or_default();
        let read = |given: bool| -> Vec<(String, bool)> {
            plan(&wanted, "ctx", "team", given, "r")
                .into_iter()
                .map(|p| (p.source, p.copied))
                .collect()
        };
        // Under --namespace the template's Secret is the namespace's own; a bare flag's is
        // still the context's.
        assert_eq!(read(true), [("ctx".into(), true), ("team".into(), false)]);
        // In the run's own namespace, the context's stands in for Kandev's.
        assert_eq!(read(false), [("ctx".into(), true), ("ctx".into(), true)]);
    }

    /// The names a Pod carries in its `imagePullSecrets`, in order.
    fn carried_names(pod: Pod) -> Vec<String> {
        pod.spec
            .and_then(|s| s.image_pull_secrets)
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.name)
            .collect()
    }

    #[test]
    fn a_pods_own_reference_to_a_copied_secret_names_the_copy() {
        let wanted = wanted(&["ops/tmpl".into()], &PodSpec::default(), false).unwrap_or_default();
        let planned = plan(&wanted, "default", "run-ns", false, "r");
        let mut pod: Pod = serde_json::from_value(json!({"spec": {"containers": [],
            "imagePullSecrets": [{"name": "other"}, {"name": "tmpl"}]}}))
        .unwrap_or_default();
        carry_planned(&mut pod, &planned);
        let carried = carried_names(pod);
        assert_eq!(carried, ["other".to_owned(), copy_name("tmpl", "r")]);
    }

    #[test]
    fn a_pod_carries_each_name_once_after_its_own() {
        let mut pod: Pod = serde_json::from_value(json!({"spec": {"containers": [],
            "imagePullSecrets": [{"name": "tmpl"}]}}))
        .unwrap_or_default();
        carry(&mut pod, &["tmpl".into(), "flag".into()]);
        let carried = carried_names(pod);
        assert_eq!(carried, ["tmpl", "flag"]);
        let mut bare = Pod::default();
        carry(&mut bare, &[]);
        assert!(
            bare.spec.is_none(),
            "nothing to carry: the Pod is unchanged"
        );
    }
}
