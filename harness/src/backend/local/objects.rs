//! The objects the local backend leaves in the engine and the host's cgroup tree, found and
//! removed by label or Pod UID: what teardown, the label sweep and `gc` share. `gc` needs
//! only this, not a backend able to run Pods.

use super::engine::{label_filter, other};
use super::plan::{self, LABEL_POD_UID, LABEL_ROLE};
use crate::backend::{BackendError, Result};
use crate::host::is_not_found;
use crate::node::CgroupFs;
use crate::pod::identity::LABEL_MANAGED;
use bollard::Docker;
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListVolumesOptionsBuilder, RemoveContainerOptionsBuilder,
    RemoveVolumeOptionsBuilder,
};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// This host's engine and cgroup tree, as the local backend labels them.
pub struct LocalObjects {
    pub(super) docker: Docker,
    pub(super) cgroups: Option<CgroupFs>,
}

impl LocalObjects {
    pub fn new(docker: Docker) -> Self {
        Self {
            docker,
            cgroups: CgroupFs::host().ok(),
        }
    }

    /// Relative path of a Pod's cgroup in every hierarchy.
    pub fn pod_cgroup(uid: &str) -> String {
        format!("{}/pod{uid}", plan::CGROUP_ROOT)
    }

    pub(super) async fn containers_with(
        &self,
        pairs: &[(&str, &str)],
    ) -> Result<Vec<bollard::models::ContainerSummary>> {
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&label_filter(pairs))
            .build();
        self.docker
            .list_containers(Some(options))
            .await
            .map_err(|e| other("list containers", e))
    }

    pub(super) async fn volumes_with(
        &self,
        pairs: &[(&str, &str)],
    ) -> Result<Vec<bollard::models::Volume>> {
        let options = ListVolumesOptionsBuilder::default()
            .filters(&label_filter(pairs))
            .build();
        let list = self
            .docker
            .list_volumes(Some(options))
            .await
            .map_err(|e| other("list volumes", e))?;
        Ok(list.volumes.unwrap_or_default())
    }

    pub(super) async fn remove_container(&self, name: &str) -> Result<()> {
        let options = RemoveContainerOptionsBuilder::default()
            .force(true)
            .v(false)
            .build();
        match self.docker.remove_container(name, Some(options)).await {
            Ok(()) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            // Another remover got there first (the engine's AutoRemove, a second gc, a dying
            // double's own cleanup): removed is what was asked, so wait for it to finish.
            Err(e) if e.to_string().contains("is already in progress") => {
                self.await_container_gone(name, e).await
            }
            Err(e) => Err(BackendError::Delete {
                what: "container",
                name: name.into(),
                source: e.into(),
            }),
        }
    }

    async fn await_container_gone(&self, name: &str, first: bollard::errors::Error) -> Result<()> {
        let what = format!("the removal of container {name} already in progress to end");
        crate::wait::until(
            &what,
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async {
                let gone = matches!(
                    self.docker.inspect_container(name, None).await,
                    Err(e) if is_not_found(&e)
                );
                Ok::<_, anyhow::Error>(gone.then_some(()))
            },
        )
        .await
        .map_err(|timed_out| BackendError::Delete {
            what: "container",
            name: name.into(),
            source: timed_out.context(first),
        })
    }

    pub(super) async fn remove_volume(&self, name: &str) -> Result<()> {
        let options = RemoveVolumeOptionsBuilder::default().force(false).build();
        // A volume is briefly busy while the engine finishes removing its last container.
        let started = Instant::now();
        loop {
            match self.docker.remove_volume(name, Some(options.clone())).await {
                Ok(()) => return Ok(()),
                Err(e) if is_not_found(&e) => return Ok(()),
                Err(e) if started.elapsed() < Duration::from_secs(10) => {
                    tracing::debug!(volume = name, error = %e, "volume busy; retrying");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => {
                    let source = if e.to_string().contains("volume has active mounts") {
                        // The engine keeps a mount count it never drops for a container that
                        // its own restart policy started after an engine restart
                        // (docker/for-linux#404); only a new engine process forgets it.
                        anyhow::anyhow!(
                            "{e}\n  cause: the engine still counts a mount of a container already removed (a container restarted by the engine after an engine restart keeps its volumes counted: docker/for-linux#404)\n  fix: restart the engine (stop dockerd, then harness/scripts/ensure-engine.sh) and run `{} gc` again",
                            crate::paths::command()
                        )
                    } else {
                        e.into()
                    };
                    return Err(BackendError::Delete {
                        what: "volume",
                        name: name.into(),
                        source,
                    });
                }
            }
        }
    }

    /// Removes every container and emptyDir of the Pod with this UID, then its cgroup.
    pub(super) async fn remove_pod_objects(&self, uid: &str) -> Result<Vec<String>> {
        let mut removed = Vec::new();
        let containers = self.containers_with(&[(LABEL_POD_UID, uid)]).await?;
        // Workloads first, the infra container (which holds the volumes) last.
        let (infra, workloads): (Vec<_>, Vec<_>) = containers.into_iter().partition(|c| {
            c.labels
                .as_ref()
                .and_then(|l| l.get(LABEL_ROLE))
                .map(String::as_str)
                == Some("infra")
        });
        let remove_all = |list: Vec<bollard::models::ContainerSummary>| async move {
            let names: Vec<String> = list
                .iter()
                .filter_map(|c| {
                    c.names
                        .as_ref()?
                        .first()
                        .map(|n| n.trim_start_matches('/').to_owned())
                })
                .collect();
            let results =
                futures_util::future::join_all(names.iter().map(|n| self.remove_container(n)))
                    .await;
            results.into_iter().collect::<Result<Vec<()>>>()?;
            Ok::<_, BackendError>(names)
        };
        removed.extend(
            remove_all(workloads)
                .await?
                .into_iter()
                .map(|n| format!("container/{n}")),
        );
        removed.extend(
            remove_all(infra)
                .await?
                .into_iter()
                .map(|n| format!("container/{n}")),
        );
        for volume in self.volumes_with(&[(LABEL_POD_UID, uid)]).await? {
            self.remove_volume(&volume.name).await?;
            removed.push(format!("volume/{}", volume.name));
        }
        if let Some(cgroups) = &self.cgroups {
            let relative = Self::pod_cgroup(uid);
            if cgroups.exists(&relative) {
                // Processes of a killed container leave their cgroup a moment after removal.
                let started = Instant::now();
                loop {
                    match cgroups.remove(&relative) {
                        Ok(()) => break,
                        Err(_) if started.elapsed() < Duration::from_secs(10) => {
                            tokio::time::sleep(Duration::from_millis(50)).await
                        }
                        Err(e) => {
                            return Err(BackendError::Delete {
                                what: "pod cgroup",
                                name: relative,
                                source: e.into(),
                            });
                        }
                    }
                }
                removed.push(format!("cgroup/{relative}"));
            }
        }
        Ok(removed)
    }
    /// Whether anything of the Pod with this UID is in the engine or the cgroup tree.
    pub(super) async fn pod_objects_left(&self, uid: &str) -> Result<bool> {
        Ok(!self
            .containers_with(&[(LABEL_POD_UID, uid)])
            .await?
            .is_empty()
            || !self.volumes_with(&[(LABEL_POD_UID, uid)]).await?.is_empty()
            || self
                .cgroups
                .as_ref()
                .is_some_and(|c| c.exists(&Self::pod_cgroup(uid))))
    }

    /// Pod cgroups whose Pod has no container left in the engine, no process left in the tree
    /// and that are older than `older_than` (what a killed run leaves; a Pod being created has its
    /// cgroup a moment before its first container): a Pod cgroup carries no labels, so this is
    /// how `gc` finds them. A cgroup with processes is never touched. Returns what it removed
    /// and the orphans it left for being younger than `older_than`, with their age.
    pub async fn sweep_orphan_cgroups(
        &self,
        older_than: Duration,
        dry_run: bool,
    ) -> Result<(Vec<String>, Vec<(String, Duration)>)> {
        let Some(cgroups) = &self.cgroups else {
            return Ok((Vec::new(), Vec::new()));
        };
        let mut removed = Vec::new();
        let mut too_young = Vec::new();
        for name in cgroups.children(plan::CGROUP_ROOT) {
            let Some(uid) = name.strip_prefix("pod") else {
                continue;
            };
            if !self
                .containers_with(&[(LABEL_POD_UID, uid)])
                .await?
                .is_empty()
            {
                continue;
            }
            let relative = Self::pod_cgroup(uid);
            match cgroups.age(&relative) {
                Some(age) if age >= older_than => {}
                Some(age) => {
                    too_young.push((format!("cgroup/{relative}"), age));
                    continue;
                }
                None => continue,
            }
            if !cgroups.read_pod(&relative).pids.is_empty() {
                tracing::warn!(
                    cgroup = relative,
                    "orphaned Pod cgroup still has processes; left alone"
                );
                continue;
            }
            if !dry_run {
                cgroups
                    .remove(&relative)
                    .map_err(|e| BackendError::Delete {
                        what: "pod cgroup",
                        name: relative.clone(),
                        source: e.into(),
                    })?;
            }
            removed.push(format!("cgroup/{relative}"));
        }
        Ok((removed, too_young))
    }

    pub async fn list_labelled(&self, selector: &[(&str, &str)]) -> Result<Vec<String>> {
        let mut objects = Vec::new();
        for c in self.containers_with(selector).await? {
            let name = c.names.and_then(|n| n.first().cloned()).unwrap_or_default();
            objects.push(format!("container/{}", name.trim_start_matches('/')));
            if let Some(uid) = c.labels.and_then(|l| l.get(LABEL_POD_UID).cloned())
                && let Some(cg) = &self.cgroups
                && cg.exists(&Self::pod_cgroup(&uid))
            {
                objects.push(format!("cgroup/{}", Self::pod_cgroup(&uid)));
            }
        }
        for v in self.volumes_with(selector).await? {
            objects.push(format!("volume/{}", v.name));
        }
        objects.sort();
        objects.dedup();
        Ok(objects)
    }

    pub async fn remove_labelled(
        &self,
        selector: &[(&str, &str)],
        dry_run: bool,
    ) -> Result<Vec<String>> {
        self.remove_labelled_but(selector, dry_run, &|_| false)
            .await
    }

    /// [`LocalObjects::remove_labelled`], sparing the Pods and volumes whose labels `spare`
    /// holds to (`gc`: those of runs that are alive).
    pub async fn remove_labelled_but(
        &self,
        selector: &[(&str, &str)],
        dry_run: bool,
        spare: &(dyn Fn(&HashMap<String, String>) -> bool + Sync),
    ) -> Result<Vec<String>> {
        let mut filter: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        filter.push(format!("{LABEL_MANAGED}=true"));
        let filters = HashMap::from([("label".to_owned(), filter)]);
        let containers = self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
            .map_err(|e| other("list containers", e))?;
        let mut uids: Vec<String> = containers
            .iter()
            .filter(|c| !c.labels.as_ref().is_some_and(spare))
            .filter_map(|c| c.labels.as_ref()?.get(LABEL_POD_UID).cloned())
            .collect();
        uids.sort();
        uids.dedup();
        let mut removed = Vec::new();
        for uid in &uids {
            if dry_run {
                removed.push(format!("pod-uid/{uid}"));
            } else {
                removed.extend(self.remove_pod_objects(uid).await?);
            }
        }
        let volumes = self
            .docker
            .list_volumes(Some(
                ListVolumesOptionsBuilder::default()
                    .filters(&filters)
                    .build(),
            ))
            .await
            .map_err(|e| other("list volumes", e))?;
        for v in volumes.volumes.unwrap_or_default() {
            if spare(&v.labels) {
                continue;
            }
            if !dry_run {
                self.remove_volume(&v.name).await?;
            }
            removed.push(format!("volume/{}", v.name));
        }
        Ok(removed)
    }

    /// Volumes no container uses, without labels, named as a task Pod's emptyDir
    /// (`kandev-<16 hex>-<volume>`). The engine makes such a volume when a container that its
    /// restart policy starts (after an engine restart) mounts an emptyDir the killed run had
    /// already removed: the engine recreates it by name, without the Pod's labels. A dry run
    /// lists only those no container uses yet.
    pub async fn remove_unlabelled_pod_volumes(&self, dry_run: bool) -> Result<Vec<String>> {
        let options = ListVolumesOptionsBuilder::default()
            .filters(&HashMap::from([("dangling", vec!["true"])]))
            .build();
        let list = self
            .docker
            .list_volumes(Some(options))
            .await
            .map_err(|e| other("list unused volumes", e))?;
        let mut removed = Vec::new();
        for v in list.volumes.unwrap_or_default() {
            if !v.labels.is_empty() || !is_task_pod_volume_name(&v.name) {
                continue;
            }
            if !dry_run {
                self.remove_volume(&v.name).await?;
            }
            removed.push(format!("volume/{}", v.name));
        }
        Ok(removed)
    }
}

/// `kandev-<16 lowercase hex>-<volume name>`: a task Pod's name (Kandev's `kandev-` and 16 hex
/// digits) and one of its volumes.
fn is_task_pod_volume_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("kandev-") else {
        return false;
    };
    let (hex, volume) = rest.split_at_checked(16).unwrap_or(("", ""));
    hex.len() == 16
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && volume.len() > 1
        && volume.starts_with('-')
}

#[cfg(test)]
mod tests {
    use super::is_task_pod_volume_name;

    #[test]
    fn task_pod_volume_names_are_told_from_others() {
        assert!(is_task_pod_volume_name(
            "kandev-e71cd370b2d324fe-docker-socket"
        ));
        assert!(!is_task_pod_volume_name(
            "kandev-e71cd370b2d324f-docker-socket"
        ));
        assert!(!is_task_pod_volume_name(
            "kandev-E71CD370B2D324FE-workspace"
        ));
        assert!(!is_task_pod_volume_name("kandev-e71cd370b2d324fe-"));
        assert!(!is_task_pod_volume_name("kandev-acceptance-shared"));
        assert!(!is_task_pod_volume_name("postgres-data"));
    }
}
