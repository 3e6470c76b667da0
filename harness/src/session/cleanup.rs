//! The cleanup stack: every object goes on it the moment it is created, and the runner always
//! tears it down (LIFO) after the scenario body, whatever happened, recording each result.

use crate::backend::{Backend, PodRef, WorkspaceRef};
use kandev_report::{CleanupOutcome, CleanupRecord};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CleanupTarget {
    Pod(PodRef),
    Workspace(WorkspaceRef),
}

impl CleanupTarget {
    pub fn describe(&self) -> String {
        match self {
            CleanupTarget::Pod(p) => format!("pod/{} (uid {})", p.name, p.uid),
            CleanupTarget::Workspace(w) => format!("workspace/{}", w.name),
        }
    }
}

#[derive(Debug, Default)]
pub struct CleanupStack {
    items: Mutex<Vec<CleanupTarget>>,
}

impl CleanupStack {
    pub fn push(&self, target: CleanupTarget) {
        if let Ok(mut items) = self.items.lock() {
            items.push(target);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.items.lock().map(|i| i.is_empty()).unwrap_or(true)
    }

    pub fn pods(&self) -> Vec<PodRef> {
        let items = self.items.lock().map(|i| i.clone()).unwrap_or_default();
        items
            .into_iter()
            .filter_map(|t| match t {
                CleanupTarget::Pod(p) => Some(p),
                CleanupTarget::Workspace(_) => None,
            })
            .collect()
    }

    /// Removes everything, newest first, each under `budget`; keeps going past failures.
    pub async fn teardown(
        &self,
        backend: &dyn Backend,
        budget: Duration,
        keep: bool,
    ) -> Vec<CleanupRecord> {
        let items: Vec<CleanupTarget> = self
            .items
            .lock()
            .map(|mut i| std::mem::take(&mut *i))
            .unwrap_or_default();
        let mut records = Vec::new();
        for target in items.into_iter().rev() {
            let started = Instant::now();
            if keep {
                records.push(CleanupRecord {
                    object: target.describe(),
                    outcome: CleanupOutcome::Kept,
                    duration_ms: 0,
                    error: None,
                });
                continue;
            }
            let work = async {
                match &target {
                    CleanupTarget::Pod(pod) => {
                        let existed = backend
                            .pod_uid(&pod.namespace, &pod.name)
                            .await
                            .ok()
                            .flatten()
                            == Some(pod.uid.clone());
                        backend.delete_pod(pod).await.map(|()| existed)
                    }
                    CleanupTarget::Workspace(ws) => {
                        backend.delete_workspace(ws).await.map(|()| true)
                    }
                }
            };
            let (outcome, error) = match tokio::time::timeout(budget, work).await {
                Ok(Ok(true)) => (CleanupOutcome::Removed, None),
                Ok(Ok(false)) => (CleanupOutcome::AlreadyGone, None),
                Ok(Err(e)) => (CleanupOutcome::Failed, Some(crate::error_chain(&e))),
                Err(_) => (
                    CleanupOutcome::Failed,
                    Some(format!("not removed within {budget:?}")),
                ),
            };
            records.push(CleanupRecord {
                object: target.describe(),
                outcome,
                duration_ms: started.elapsed().as_millis() as u64,
                error,
            });
        }
        records
    }
}
