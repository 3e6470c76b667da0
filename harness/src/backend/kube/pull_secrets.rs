//! Private registries: the image pull secrets a run's Pods carry.
//!
//! The Secrets named by `--image-pull-secret [NS/]NAME` and by the template's own
//! `imagePullSecrets` are read with the operator's identity, NAME from the kubeconfig context's
//! namespace (`default` when the context names none: kube-rs `Config::default_namespace`),
//! NS/NAME from NS, and copied, run-labelled, into the run's namespace before any Pod is
//! created. A Secret of that name already in the run's namespace (`--namespace`) is used as it
//! is, neither copied nor removed. A missing Secret, or one of another type than
//! `kubernetes.io/dockerconfigjson`, is refused before anything is copied. The copies are
//! removed at teardown (with the run's namespace when the run created it; else one by one) and
//! by `gc` (they carry the run's labels). Every Pod the run creates carries the names
//! ([`carry`]): the task Pod, the warm-up, the inspector and the MTU peer.
//!
//! Only `kubernetes.io/dockerconfigjson` is accepted: the kubelet reads `.dockerconfigjson`
//! of that type and `.dockercfg` of `kubernetes.io/dockercfg` and ignores every other Secret
//! (kubernetes v1.37.2 pkg/credentialprovider/secrets/secrets.go,
//! `secretsToTrackedDockerConfigs`); the second is the legacy format `kubectl create secret
//! docker-registry` no longer writes.

use k8s_openapi::api::core::v1::{LocalObjectReference, Pod, PodSpec, Secret};
use kandev_report::{CleanupOutcome, CleanupRecord};
use kube::Client;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams, Preconditions};
use serde_json::{Value, json};
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

/// The Secrets the flags and the template's Pod spec name, each once (the flag's first).
/// Refused: one name read from two namespaces (the copy keeps the name).
pub fn wanted(flags: &[String], template: &PodSpec) -> Result<Vec<Wanted>, Refused> {
    let mut all: Vec<Wanted> = Vec::new();
    let from_template = template
        .image_pull_secrets
        .iter()
        .flatten()
        .map(|r| (None, r.name.as_str(), "the template's imagePullSecrets"));
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

/// The names a Pod carries for `wanted`.
pub fn names(wanted: &[Wanted]) -> Vec<String> {
    wanted.iter().map(|w| w.name.clone()).collect()
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

/// What the run holds in its namespace: every name its Pods carry, and the copies it made
/// (removed at teardown).
#[derive(Debug, Clone, Default)]
pub struct PullSecrets {
    pub names: Vec<String>,
    pub copied: Vec<String>,
    /// Per Secret: where it was read, its type, and whether it was copied or found there.
    pub evidence: Vec<Value>,
}

/// Reads every wanted Secret (all before any copy: a missing one is refused with nothing
/// made), then copies those the run's namespace lacks, labelled `labels`. `context_namespace`
/// is where a bare NAME is read. A copy made before a later one failed is in the error's
/// `copied`, so the caller's teardown removes it.
pub async fn copy(
    admin: &Client,
    context_namespace: &str,
    run_namespace: &str,
    labels: &std::collections::BTreeMap<String, String>,
    wanted: &[Wanted],
) -> Result<PullSecrets, (Refused, Vec<String>)> {
    let in_run: Api<Secret> = Api::namespaced(admin.clone(), run_namespace);
    let mut found = Vec::new();
    for w in wanted {
        let source = w.source.as_deref().unwrap_or(context_namespace);
        // One already where the Pods run (the operator's `--namespace`) is used as it is.
        let here = in_run
            .get_opt(&w.name)
            .await
            .map_err(|e| (read_refused(w, run_namespace, &e), Vec::new()))?;
        let (secret, copy_it) = match here {
            Some(secret) => (secret, false),
            None => {
                let read = Api::<Secret>::namespaced(admin.clone(), source)
                    .get_opt(&w.name)
                    .await
                    .map_err(|e| (read_refused(w, source, &e), Vec::new()))?;
                let Some(secret) = read else {
                    return Err((
                        Refused {
                            problem: format!(
                                "image pull secret {} ({}) does not exist in namespace {source}",
                                w.name, w.named_by
                            ),
                            fix: format!(
                                "create it there (kubectl -n {source} create secret docker-registry {} --docker-server=R --docker-username=U --docker-password=P), or name its namespace: --image-pull-secret NS/{}",
                                w.name, w.name
                            ),
                        },
                        Vec::new(),
                    ));
                };
                (secret, true)
            }
        };
        let kind = secret.type_.clone().unwrap_or_else(|| "Opaque".into());
        let at = if copy_it { source } else { run_namespace };
        if kind != DOCKER_CONFIG_JSON {
            return Err((
                Refused {
                    problem: format!(
                        "image pull secret {at}/{} ({}) is of type {kind}, not {DOCKER_CONFIG_JSON}",
                        w.name, w.named_by
                    ),
                    fix: format!(
                        "name a Secret made by `kubectl create secret docker-registry` (type {DOCKER_CONFIG_JSON}, key .dockerconfigjson)"
                    ),
                },
                Vec::new(),
            ));
        }
        found.push((w, secret, copy_it, at.to_owned()));
    }
    let mut made = PullSecrets::default();
    for (w, secret, copy_it, at) in found {
        made.names.push(w.name.clone());
        if !copy_it {
            made.evidence.push(json!({"name": w.name, "named_by": w.named_by, "type": DOCKER_CONFIG_JSON,
                "found_in": at, "copied": false, "why": "the run's namespace holds it already: used as it is, not removed"}));
            continue;
        }
        let copy = Secret {
            metadata: ObjectMeta {
                name: Some(w.name.clone()),
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
        if let Err(e) = in_run.create(&params, &copy).await {
            return Err((
                Refused {
                    problem: format!(
                        "copy image pull secret {at}/{} into the run's namespace {run_namespace}: {}",
                        w.name,
                        crate::error_chain(&e)
                    ),
                    fix: "your identity needs create on secrets in the run's namespace (docs/operators.md lists every grant)".into(),
                },
                made.copied,
            ));
        }
        made.copied.push(w.name.clone());
        made.evidence.push(
            json!({"name": w.name, "named_by": w.named_by, "type": DOCKER_CONFIG_JSON,
            "read_from": at, "copied": true, "copied_to": run_namespace}),
        );
    }
    Ok(made)
}

fn read_refused(w: &Wanted, namespace: &str, e: &kube::Error) -> Refused {
    let forbidden = matches!(e, kube::Error::Api(s) if s.code == 403);
    Refused {
        problem: format!(
            "read image pull secret {namespace}/{} ({}): {}",
            w.name,
            w.named_by,
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

/// Removes the copies the run made in `namespace` (each by its UID; absent is fine).
pub async fn remove(admin: &Client, namespace: &str, copied: &[String]) -> Vec<CleanupRecord> {
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), namespace);
    let mut records = Vec::new();
    for name in copied {
        let started = Instant::now();
        let result = async {
            let Some(found) = secrets.get_opt(name).await? else {
                return Ok(());
            };
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: found.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match secrets.delete(name, &params).await {
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
                other => other.map(|_| ()),
            }
        }
        .await
        .map_err(|e: kube::Error| crate::error_chain(&e));
        records.push(CleanupRecord {
            object: format!("secret/{name}"),
            outcome: if result.is_ok() {
                CleanupOutcome::Removed
            } else {
                CleanupOutcome::Failed
            },
            duration_ms: started.elapsed().as_millis() as u64,
            error: result.err(),
        });
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
        let all = wanted(&["ops/both".into(), "flag".into()], &template).unwrap_or_default();
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
        let twice = wanted(&["a/x".into(), "b/x".into()], &PodSpec::default());
        assert!(
            twice.is_err_and(|e| e.to_string().contains("named twice")
                && e.to_string().contains("fix: name x once"))
        );
    }

    #[test]
    fn a_pod_carries_each_name_once_after_its_own() {
        let mut pod: Pod = serde_json::from_value(json!({"spec": {"containers": [],
            "imagePullSecrets": [{"name": "tmpl"}]}}))
        .unwrap_or_default();
        carry(&mut pod, &["tmpl".into(), "flag".into()]);
        let carried: Vec<String> = pod
            .spec
            .and_then(|s| s.image_pull_secrets)
            .unwrap_or_default()
            .into_iter()
            .map(|r| r.name)
            .collect();
        assert_eq!(carried, ["tmpl", "flag"]);
        let mut bare = Pod::default();
        carry(&mut bare, &[]);
        assert!(
            bare.spec.is_none(),
            "nothing to carry: the Pod is unchanged"
        );
    }
}
