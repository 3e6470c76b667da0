//! What `launch` creates in the cluster, as plain objects (built here, created in `mod.rs`):
//! the namespace (unless named), the executor's and the bookkeeper's service accounts, Roles
//! and bindings, the Secret with the run's inputs, and the Job running the harness image.

use crate::backend::kube::cluster::{EXECUTOR, bookkeeper_rules, run_namespace};
use crate::backend::kube::pull_secrets::{self, Planned};
use crate::pod::identity::{LABEL_LAUNCH, LABEL_MANAGED, LABEL_RUN};
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, EnvVar, Namespace, PodSecurityContext, PodSpec,
    PodTemplateSpec, SeccompProfile, SecretVolumeSource, SecurityContext, ServiceAccount, Volume,
    VolumeMount,
};
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::ObjectMeta;
use std::collections::BTreeMap;
use std::time::Duration;

/// The service account, Role and binding the harness keeps its books with inside the Pod.
pub const BOOKKEEPER: &str = "kandev-acceptance-bookkeeper";

/// The Job's one container.
pub const CONTAINER: &str = "harness";

/// Where the Pod's run writes its reports (an emptyDir, copied out by `launch`).
pub const REPORTS: &str = "/reports";

/// Where the Secret with the run's inputs is mounted (read-only).
pub const INPUTS: &str = "/etc/kandev-acceptance";

/// The inputs Secret's key holding the bookkeeper's token.
pub const TOKEN_KEY: &str = "bookkeeper-token";

/// What the run in the Pod keeps of `--job-timeout` for its teardown and report: its own
/// `--deadline` is that much shorter (when the timeout is long enough to spare it).
pub const TEARDOWN_MARGIN: Duration = Duration::from_secs(180);

/// The run's own budget for a Job timeout: the timeout less [`TEARDOWN_MARGIN`], or none when
/// the timeout is too short to spare it (the Job's deadline then ends the run).
pub fn run_deadline(job_timeout: Duration) -> Option<Duration> {
    (job_timeout > 2 * TEARDOWN_MARGIN).then(|| job_timeout - TEARDOWN_MARGIN)
}

/// The UID the harness runs as in its Pod (the image's `USER`; no capabilities, no root).
pub const HARNESS_UID: i64 = 65532;

/// What one launch creates, from the command line.
#[derive(Debug, Clone)]
pub struct LaunchPlan {
    pub run_id: String,
    /// An existing namespace to run in; None: `kandev-acceptance-<run id>`, created here.
    pub namespace: Option<String>,
    pub harness_image: String,
    /// The harness image's architecture, read from this machine's engine
    /// ([`harness_image_arch`]); None: not read there, and the Job is pinned to none.
    pub harness_arch: Option<crate::pod::compose::Arch>,
    /// The executor's Role (Kandev's, or the operator's `--executor-role`).
    pub executor_role: Role,
    /// `--node-inspector`: the bookkeeper also creates the inspector Pods and execs in them.
    pub node_inspector: bool,
    /// How long the run inside may take (the Job's deadline adds the hold).
    pub job_timeout: Duration,
    /// How long the Pod may take to start (an image pull included).
    pub start_timeout: Duration,
    /// How long the finished run waits to be retrieved.
    pub hold: Duration,
    /// Files the run reads, put in the inputs Secret: (key, contents); the arguments name
    /// them under [`INPUTS`].
    pub inputs: Vec<(String, Vec<u8>)>,
    /// The `run` arguments the Pod's harness gets after `--in-cluster` and launch's own.
    pub run_args: Vec<String>,
    /// `kandev-acceptance gc` with the backend, kubeconfig, context and namespace this
    /// launch used ([`crate::config::gc_where`]): its hints append `--run ID` or `--all`.
    pub gc_where: String,
    /// The image pull secrets (`--image-pull-secret`, the template's `imagePullSecrets`):
    /// copied into the namespace before the Job, carried by the Job's Pod (the harness image
    /// may be in the same private registry) and, in the run, by every Pod it creates.
    pub pull_secrets: Vec<pull_secrets::Wanted>,
}

/// The annotation on `launch --node-inspector`'s ClusterRole naming the run's namespace.
pub const GRANT_NAMESPACE: &str = "acceptance.kandev.ai/namespace";

/// The architecture of `image` as this machine's engine holds it (`docker image inspect`'s
/// `Architecture`); None, with why, when it cannot be read there (no engine, an image only in
/// a registry, or an architecture Kandev's profiles do not name).
pub async fn harness_image_arch(image: &str) -> Result<crate::pod::compose::Arch, String> {
    let docker = crate::host::connect_engine()
        .await
        .map_err(|e| format!("this machine's engine is not reachable ({e})"))?;
    let found = docker
        .inspect_image(image)
        .await
        .map_err(|e| format!("this machine's engine does not hold it ({e})"))?;
    let arch = found.architecture.unwrap_or_default();
    crate::pod::compose::Arch::from_label(&arch)
        .ok_or_else(|| format!("its architecture {arch:?} is neither amd64 nor arm64"))
}

impl LaunchPlan {
    /// The namespace the run uses.
    pub fn namespace(&self) -> String {
        self.namespace
            .clone()
            .unwrap_or_else(|| run_namespace(&self.run_id))
    }

    /// The Job's (and the inputs Secret's) name.
    pub fn job_name(&self) -> String {
        job_name(&self.run_id)
    }

    /// Every object's labels: managed, the run's, the launch's.
    pub fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (LABEL_MANAGED.to_owned(), "true".to_owned()),
            (LABEL_RUN.to_owned(), self.run_id.clone()),
            (LABEL_LAUNCH.to_owned(), self.run_id.clone()),
        ])
    }

    /// The token's lifetime: the whole Job and ten minutes more (600 s is the API's minimum).
    pub fn token_seconds(&self) -> i64 {
        (self.job_timeout + self.hold + Duration::from_secs(600)).as_secs() as i64
    }

    fn meta(&self, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(self.namespace()),
            labels: Some(self.labels()),
            ..Default::default()
        }
    }

    /// The namespace a launch creates (privileged: the docker-engine companion runs there).
    pub fn namespace_object(&self) -> Namespace {
        let mut labels = self.labels();
        labels.insert(
            "pod-security.kubernetes.io/enforce".into(),
            "privileged".into(),
        );
        Namespace {
            metadata: ObjectMeta {
                name: Some(self.namespace()),
                labels: Some(labels),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// A service account whose token is mounted only where a Pod asks for it.
    pub fn service_account(&self, name: &str) -> ServiceAccount {
        ServiceAccount {
            metadata: self.meta(name),
            automount_service_account_token: Some(false),
            ..Default::default()
        }
    }

    /// The executor's Role, named and labelled for this launch.
    pub fn executor_role(&self) -> Role {
        let mut role = self.executor_role.clone();
        role.metadata = self.meta(EXECUTOR);
        role
    }

    /// The bookkeeper's Role: what the run's own bookkeeping does that Kandev's executor may
    /// not (`docs/operators.md`, "The bookkeeper's Role", justifies each line).
    pub fn bookkeeper_role(&self) -> Role {
        Role {
            metadata: self.meta(BOOKKEEPER),
            rules: Some(bookkeeper_rules(self.node_inspector)),
        }
    }

    /// `name`'s Role bound to `name`'s service account.
    pub fn binding(&self, name: &str) -> RoleBinding {
        RoleBinding {
            metadata: self.meta(name),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "Role".into(),
                name: name.into(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: name.into(),
                namespace: Some(self.namespace()),
                ..Default::default()
            }]),
        }
    }

    /// The name of the bookkeeper's grant to read nodes (`--node-inspector`): cluster-scoped,
    /// so the run's own, whatever the namespace.
    pub fn nodes_grant_name(&self) -> String {
        format!("kandev-acceptance-{}-nodes", self.run_id)
    }

    /// With `--node-inspector`, the bookkeeper's grant to read nodes: the run inside finds the
    /// nodes to inspect (and to warm up) by listing them, and nodes are cluster-scoped, so no
    /// Role grants it (RBAC: a Role's rules apply in its namespace only).
    pub fn nodes_cluster_role(&self) -> ClusterRole {
        let mut meta = self.meta(&self.nodes_grant_name());
        meta.namespace = None;
        // A role left without its binding (a launch killed between the two creates) still
        // names the namespace whose Lease tells `gc` whether its run is alive.
        meta.annotations = Some(BTreeMap::from([(
            GRANT_NAMESPACE.to_owned(),
            self.namespace(),
        )]));
        ClusterRole {
            metadata: meta,
            rules: Some(vec![PolicyRule {
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["nodes".into()]),
                verbs: vec!["get".into(), "list".into()],
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    /// [`Self::nodes_cluster_role`] bound to the bookkeeper's account in the run's namespace
    /// (`gc` reads the run's Lease there).
    pub fn nodes_cluster_binding(&self) -> ClusterRoleBinding {
        let name = self.nodes_grant_name();
        let mut meta = self.meta(&name);
        meta.namespace = None;
        ClusterRoleBinding {
            metadata: meta,
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".into()),
                kind: "ClusterRole".into(),
                name,
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: BOOKKEEPER.into(),
                namespace: Some(self.namespace()),
                ..Default::default()
            }]),
        }
    }

    /// The inputs Secret with the run's input files (`launch` adds the bookkeeper's token,
    /// which is bound to this Secret, once it exists).
    pub fn inputs_secret(&self) -> k8s_openapi::api::core::v1::Secret {
        let data = self
            .inputs
            .iter()
            .map(|(key, bytes)| (key.clone(), ByteString(bytes.clone())))
            .collect();
        k8s_openapi::api::core::v1::Secret {
            metadata: self.meta(&self.job_name()),
            data: Some(data),
            type_: Some("Opaque".into()),
            ..Default::default()
        }
    }

    /// The harness's arguments inside the Pod.
    pub fn pod_args(&self) -> Vec<String> {
        let mut args: Vec<String> = [
            "run",
            "--backend",
            "kube",
            "--in-cluster",
            "--bookkeeper-token",
            &format!("{INPUTS}/{TOKEN_KEY}"),
            "--namespace",
            &self.namespace(),
            "--run-id",
            &self.run_id,
            "--report-dir",
            REPORTS,
            "--hold-report",
            &self.hold.as_secs().to_string(),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        args.extend(self.run_args.iter().cloned());
        args
    }

    /// The image pull secrets as `launch` copies them, a bare NAME read from
    /// `context_namespace` (its kubeconfig context's).
    pub fn planned_pull_secrets(&self, context_namespace: &str) -> Vec<Planned> {
        pull_secrets::plan(
            &self.pull_secrets,
            context_namespace,
            &self.namespace(),
            self.namespace.is_some(),
            &self.run_id,
        )
    }

    /// The Job: one Pod, never retried (a failed run is the answer), as the executor's
    /// service account, its deadline the run's plus the hold; removed an hour after it
    /// ends should `launch` itself be killed. Its Pod carries the image pull secrets as
    /// launch copies them from `context_namespace`, and tells the run inside where a bare
    /// NAME was read, so that it carries the same copies.
    pub fn job(&self, context_namespace: &str) -> Job {
        let mut pod_labels = BTreeMap::from([
            (LABEL_MANAGED.to_owned(), "true".to_owned()),
            (LABEL_LAUNCH.to_owned(), self.run_id.clone()),
        ]);
        pod_labels.insert("app.kubernetes.io/name".into(), "kandev-acceptance".into());
        let container = Container {
            name: CONTAINER.into(),
            image: Some(self.harness_image.clone()),
            image_pull_policy: Some("IfNotPresent".into()),
            args: Some(self.pod_args()),
            env: Some(vec![
                EnvVar {
                    name: crate::backend::kube::setup::HARNESS_IMAGE_ENV.into(),
                    value: Some(self.harness_image.clone()),
                    ..Default::default()
                },
                EnvVar {
                    name: pull_secrets::LAUNCH_CONTEXT_NAMESPACE_ENV.into(),
                    value: Some(context_namespace.to_owned()),
                    ..Default::default()
                },
            ]),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            volume_mounts: Some(vec![
                VolumeMount {
                    name: "reports".into(),
                    mount_path: REPORTS.into(),
                    ..Default::default()
                },
                VolumeMount {
                    name: "inputs".into(),
                    mount_path: INPUTS.into(),
                    read_only: Some(true),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        };
        let mut spec =
            PodSpec {
                // Pinned to the harness image's architecture: on a cluster of mixed nodes the Job
                // lands on one that runs it, not on one where it dies with "exec format error"; a
                // cluster with no such node leaves it Unschedulable, which the start bound names.
                node_selector: Some(
                    [("kubernetes.io/os".to_owned(), "linux".to_owned())]
                        .into_iter()
                        .chain(self.harness_arch.map(|arch| {
                            ("kubernetes.io/arch".to_owned(), arch.as_str().to_owned())
                        }))
                        .collect(),
                ),
                service_account_name: Some(EXECUTOR.into()),
                // The account says no; this Pod is the one that needs its token.
                automount_service_account_token: Some(true),
                restart_policy: Some("Never".into()),
                security_context: Some(PodSecurityContext {
                    run_as_non_root: Some(true),
                    run_as_user: Some(HARNESS_UID),
                    run_as_group: Some(HARNESS_UID),
                    // The reports emptyDir becomes writable by the harness's group, and the
                    // inputs readable by it.
                    fs_group: Some(HARNESS_UID),
                    seccomp_profile: Some(SeccompProfile {
                        type_: "RuntimeDefault".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                containers: vec![container],
                volumes: Some(vec![
                    Volume {
                        name: "reports".into(),
                        empty_dir: Some(EmptyDirVolumeSource::default()),
                        ..Default::default()
                    },
                    Volume {
                        name: "inputs".into(),
                        secret: Some(SecretVolumeSource {
                            secret_name: Some(self.job_name()),
                            // Readable by the harness's group (fsGroup) only.
                            default_mode: Some(0o440),
                            ..Default::default()
                        }),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            };
        pull_secrets::carry_in_spec(
            &mut spec,
            &pull_secrets::names(&self.planned_pull_secrets(context_namespace)),
        );
        Job {
            metadata: self.meta(&self.job_name()),
            spec: Some(JobSpec {
                backoff_limit: Some(0),
                active_deadline_seconds: Some((self.job_timeout + self.hold).as_secs() as i64),
                ttl_seconds_after_finished: Some(3600),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(pod_labels),
                        ..Default::default()
                    }),
                    spec: Some(spec),
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }
}

/// The Job's name for a run id (a DNS label).
pub fn job_name(run_id: &str) -> String {
    run_namespace(run_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::kube::cluster::executor_role;
    use crate::pod::template::WorkspaceMode;

    fn plan() -> LaunchPlan {
        LaunchPlan {
            run_id: "20261202t000000-abc123".into(),
            namespace: None,
            harness_image: "h:1".into(),
            harness_arch: Some(crate::pod::compose::Arch::Arm64),
            executor_role: executor_role("", WorkspaceMode::ManagedPvc, &BTreeMap::new()),
            node_inspector: false,
            job_timeout: Duration::from_secs(3600),
            start_timeout: Duration::from_secs(300),
            hold: Duration::from_secs(600),
            inputs: Vec::new(),
            gc_where: "kandev-acceptance gc --backend kube --context c".into(),
            run_args: vec!["--exact".into(), "daemon::socket_only".into()],
            pull_secrets: Vec::new(),
        }
    }

    /// Issue 40, item 7: the Job's Pod runs the harness image, which may live in the same
    /// private registry as the fixtures: it carries the run's pull secrets (none: none).
    #[test]
    fn the_jobs_pod_carries_the_pull_secrets() {
        let secrets = |plan: &LaunchPlan| -> Vec<String> {
            plan.job("default")
                .spec
                .and_then(|s| s.template.spec)
                .and_then(|s| s.image_pull_secrets)
                .unwrap_or_default()
                .into_iter()
                .map(|r| r.name)
                .collect()
        };
        assert!(secrets(&plan()).is_empty());
        let mut with = plan();
        with.pull_secrets = pull_secrets::wanted(
            &["ops/regcred".into(), "own".into()],
            &Default::default(),
            true,
        )
        .unwrap_or_default();
        // Read from ops: the run's copy; `own` from the launch's namespace itself: as it is.
        with.namespace = Some("default".into());
        assert_eq!(
            secrets(&with),
            [
                pull_secrets::copy_name("regcred", &with.run_id),
                "own".to_owned()
            ]
        );
    }

    /// The Job runs once, as the executor with its token mounted, as a non-root user, within
    /// the run's time and the hold; its Pod carries no run label (the run would count it).
    #[test]
    fn the_job_runs_once_as_the_executor_without_the_run_label() {
        let job = plan().job("default");
        let spec = job.spec.unwrap();
        assert_eq!(spec.backoff_limit, Some(0));
        assert_eq!(spec.active_deadline_seconds, Some(4200));
        let template = spec.template;
        let labels = template.metadata.unwrap().labels.unwrap();
        assert!(!labels.contains_key(LABEL_RUN));
        assert_eq!(labels[LABEL_LAUNCH], "20261202t000000-abc123");
        let pod = template.spec.unwrap();
        assert_eq!(pod.service_account_name.as_deref(), Some(EXECUTOR));
        assert_eq!(pod.automount_service_account_token, Some(true));
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        // Pinned to the harness image's architecture, not this machine's.
        let selector = pod.node_selector.clone().unwrap();
        assert_eq!(selector["kubernetes.io/arch"], "arm64");
        assert_eq!(selector["kubernetes.io/os"], "linux");
        let unknown = LaunchPlan {
            harness_arch: None,
            ..plan()
        };
        let spec = unknown.job("default").spec.unwrap().template.spec.unwrap();
        let selector = spec.node_selector.unwrap_or_default();
        assert!(!selector.contains_key("kubernetes.io/arch"), "{selector:?}");
        let security = pod.security_context.unwrap();
        assert_eq!(security.run_as_user, Some(HARNESS_UID));
        assert_eq!(security.run_as_non_root, Some(true));
        let args = pod.containers[0].args.clone().unwrap();
        for expected in [
            "--in-cluster",
            "--run-id",
            "--hold-report",
            "daemon::socket_only",
        ] {
            assert!(args.iter().any(|a| a == expected), "{args:?}");
        }
        assert_eq!(
            run_deadline(Duration::from_secs(3600)),
            Some(Duration::from_secs(3420))
        );
        assert_eq!(run_deadline(Duration::from_secs(60)), None);
    }

    /// The operators' document's table of the bookkeeper's Role names every resource its
    /// rules grant.
    #[test]
    fn the_operators_doc_justifies_every_bookkeeper_rule() {
        let doc = std::fs::read_to_string(crate::paths::workspace_root().join("docs/operators.md"))
            .unwrap();
        let table = doc
            .split_once("#### The bookkeeper's Role")
            .and_then(|(_, rest)| rest.split_once("\n## "))
            .map(|(table, _)| table)
            .unwrap();
        for rule in bookkeeper_rules(true) {
            for resource in rule.resources.unwrap() {
                assert!(
                    table.contains(&format!("| {resource}"))
                        || table.contains(&format!("{resource} ")),
                    "docs/operators.md's bookkeeper table lacks {resource}"
                );
            }
            for verb in rule.verbs {
                assert!(
                    table.contains(&verb),
                    "docs/operators.md's bookkeeper table lacks {verb}"
                );
            }
        }
    }
}
