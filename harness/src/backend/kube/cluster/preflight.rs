//! The preflight, before any session: the executor may do what Kandev needs (asked again
//! while a fresh RoleBinding reaches the authorizer), the Pods' service account exists, and
//! the API server admits the privileged companion (a server-side dry run).

use super::executor::{NOT_NEEDED, can_i, required_access};
use super::run::Cluster;
use crate::backend::kube::backend::FIELD_MANAGER;
use crate::backend::kube::errors::{ClusterError, setup};
use crate::pod::template::WorkspaceMode;
use crate::wait;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// How often the preflight asks again while a fresh namespace settles.
const SETTLE_POLL: Duration = Duration::from_millis(250);

impl Cluster {
    /// Polls SelfSubjectAccessReviews (as the executor) until every permission Kandev needs
    /// is allowed: a RoleBinding just created takes a moment to reach the authorizer. A
    /// permission still refused after [`Cluster::settle`] is a genuine refusal.
    async fn await_executor_access(&mut self, mode: WorkspaceMode) -> Result<(), ClusterError> {
        let needed = required_access(mode);
        let access = std::sync::Mutex::new(std::mem::take(&mut self.access));
        let (session, namespace) = (&self.session, self.namespace.as_str());
        let settled = wait::until(
            "the executor's permissions to take effect",
            self.settle,
            SETTLE_POLL,
            || async {
                let mut all = true;
                for (verb, resource) in &needed {
                    let key = format!("{verb} {resource}");
                    let known = access
                        .lock()
                        .map(|a| a.get(&key) == Some(&true))
                        .unwrap_or(false);
                    if known {
                        continue;
                    }
                    let allowed = can_i(session, namespace, verb, resource).await?;
                    if let Ok(mut a) = access.lock() {
                        a.insert(key, allowed);
                    }
                    all &= allowed;
                }
                Ok::<_, ClusterError>(all.then_some(()))
            },
        )
        .await;
        self.access = access.into_inner().unwrap_or_default();
        match settled {
            Ok(()) => Ok(()),
            Err(ClusterError::TimedOut(_)) => Err(ClusterError::Forbidden {
                executor: self.executor.clone(),
                namespace: self.namespace.clone(),
                missing: needed
                    .iter()
                    .map(|(verb, resource)| format!("{verb} {resource}"))
                    .filter(|key| self.access.get(key) != Some(&true))
                    .collect(),
            }),
            Err(e) => Err(e),
        }
    }

    /// Waits (with the operator's identity: Kandev's Role reads no service accounts) until the
    /// service account `pod` runs as exists: the controller creates a namespace's `default`
    /// a moment after the namespace, and until then the ServiceAccount admission refuses
    /// every Pod, dry runs included. Returns its name.
    async fn await_service_account(&self, pod: &Pod) -> Result<String, ClusterError> {
        let account = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into());
        let accounts: Api<ServiceAccount> = Api::namespaced(self.admin.clone(), &self.namespace);
        let found = wait::until(
            &format!("service account {account} in {}", self.namespace),
            self.settle,
            SETTLE_POLL,
            || async {
                match accounts.get_opt(&account).await {
                    Ok(found) => Ok(found.map(|_| ())),
                    // Not readable with this identity: the dry run will say what it lacks.
                    Err(kube::Error::Api(status)) if status.code == 403 => Ok(Some(())),
                    Err(e) => Err(setup(format!("get service account {account}"))(e)),
                }
            },
        )
        .await;
        match found {
            Ok(()) => Ok(account),
            Err(ClusterError::TimedOut(_)) => Err(ClusterError::ServiceAccountMissing {
                namespace: self.namespace.clone(),
                account,
                waited: self.settle,
            }),
            Err(e) => Err(e),
        }
    }

    /// Before any session: the executor may do what Kandev needs (SelfSubjectAccessReview as
    /// the executor), and the API server admits the privileged companion (server-side dry run
    /// of a composed Pod, as the executor). Returns the evidence.
    pub async fn preflight(
        &mut self,
        pod: &Pod,
        mode: WorkspaceMode,
    ) -> Result<Value, ClusterError> {
        let started = Instant::now();
        self.await_executor_access(mode).await?;
        let access_effective_ms = started.elapsed().as_millis() as u64;
        let mut broader = Vec::new();
        for (verb, resource) in NOT_NEEDED {
            if can_i(&self.session, &self.namespace, verb, resource).await? {
                broader.push(format!("{verb} {resource}"));
            }
        }
        let account = self.await_service_account(pod).await?;
        let dry_run = PostParams {
            dry_run: true,
            field_manager: Some(FIELD_MANAGER.into()),
        };
        Api::<Pod>::namespaced(self.session.clone(), &self.namespace)
            .create(&dry_run, pod)
            .await
            .map_err(|e| {
                let code = match &e {
                    kube::Error::Api(status) => status.code,
                    _ => 0,
                };
                let message = crate::error_chain(&e);
                ClusterError::PrivilegedRejected {
                    fix: crate::backend::kube::errors::admission_fix(
                        code,
                        &message,
                        &self.namespace,
                        &self.executor,
                    ),
                    namespace: self.namespace.clone(),
                    message,
                }
            })?;
        Ok(json!({
            "context": self.context,
            "server": self.server,
            "server_version": self.server_version,
            "namespace": self.namespace,
            "namespace_created_by_run": self.created_namespace,
            "executor": self.executor,
            "executor_created_by_run": self.created_executor,
            "executor_access": self.access,
            "executor_access_effective_after_ms": access_effective_ms,
            "pod_service_account": account,
            "executor_granted_more_than_kandev_needs": broader,
            "privileged_companion_admitted": "server-side dry run passed",
        }))
    }

    /// managed-pvc only: the class the run's claims will get exists: `--storage-class NAME`,
    /// or the cluster's default (the `DefaultStorageClass` admission plugin gives a claim
    /// without a class the one annotated `storageclass.kubernetes.io/is-default-class`, or the
    /// beta annotation; kubernetes v1.37.2 `pkg/volume/util/storageclass/helpers.go`,
    /// `GetDefaultClass`). Without one a claim stays Pending forever (EKS 1.30+ and kubeadm
    /// clusters ship none), and every session would wait out its bound. Read as the operator;
    /// an identity that may not read StorageClasses leaves it unchecked, said so in the evidence.
    pub async fn storage_class_preflight(
        &self,
        named: Option<&str>,
    ) -> Result<Value, ClusterError> {
        use k8s_openapi::api::storage::v1::StorageClass;
        const DEFAULT: [&str; 2] = [
            "storageclass.kubernetes.io/is-default-class",
            "storageclass.beta.kubernetes.io/is-default-class",
        ];
        let listed = match Api::<StorageClass>::all(self.admin.clone())
            .list(&kube::api::ListParams::default())
            .await
        {
            Ok(list) => list.items,
            Err(e) if crate::backend::kube::errors::is_status(&e, 403) => {
                return Ok(json!({"storage_class": named, "checked": false,
                    "why": format!("your identity may not list StorageClasses: {}", crate::error_chain(&e))}));
            }
            Err(e) => return Err(setup("list StorageClasses")(e)),
        };
        let names: Vec<String> = listed
            .iter()
            .map(|c| c.metadata.name.clone().unwrap_or_default())
            .collect();
        let defaults: Vec<String> = listed
            .iter()
            .filter(|c| {
                let annotations = c.metadata.annotations.clone().unwrap_or_default();
                DEFAULT
                    .iter()
                    .any(|a| annotations.get(*a).is_some_and(|v| v == "true"))
            })
            .map(|c| c.metadata.name.clone().unwrap_or_default())
            .collect();
        match named {
            Some(name) if names.iter().any(|n| n == name) => {}
            Some(name) => {
                return Err(ClusterError::StorageClass {
                    problem: format!("StorageClass {name} (--storage-class) does not exist"),
                    classes: names,
                });
            }
            None if defaults.is_empty() => {
                // A claim that names no class also binds a volume made without one (static
                // provisioning): such a cluster works without a default class.
                let classless =
                    Api::<k8s_openapi::api::core::v1::PersistentVolume>::all(self.admin.clone())
                        .list(&kube::api::ListParams::default())
                        .await
                        .map(|list| {
                            list.items
                                .iter()
                                .filter(|pv| {
                                    pv.spec.as_ref().is_none_or(|s| {
                                        s.storage_class_name
                                            .as_deref()
                                            .unwrap_or_default()
                                            .is_empty()
                                    }) && pv.status.as_ref().and_then(|s| s.phase.as_deref())
                                        == Some("Available")
                                })
                                .count()
                        })
                        .unwrap_or(0);
                if classless > 0 {
                    return Ok(
                        json!({"storage_class": null, "checked": true, "default": [],
                        "classes": names, "available_volumes_without_a_class": classless}),
                    );
                }
                return Err(ClusterError::StorageClass {
                    problem: "the cluster has no default StorageClass and no available PersistentVolume without a class, so the run's workspace claims (managed-pvc) would stay Pending".into(),
                    classes: names,
                });
            }
            None => {}
        }
        Ok(json!({"storage_class": named, "checked": true, "default": defaults, "classes": names}))
    }
}
