//! What the run's task Pods really ran: each container's image as the backend reads it once
//! the Pod started (the engine's container `Image` locally, the kubelet's `imageID` on a
//! cluster), for the report's `environment.images[].ran`. The run records it through its
//! backend wrapper (`cost::metered_backend`), which sees every task Pod created and started.

use crate::backend::{ContainerState, PodRef};
use kandev_report::RanImage;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
struct Seen {
    /// UIDs of the task Pods the run created (helper Pods are not the system under test).
    task_pods: BTreeSet<String>,
    /// (Pod UID, container) -> (image, image id), the last read of each.
    images: BTreeMap<(String, String), (String, String)>,
    /// Task Pods with a container the runtime had not named an image id for yet.
    incomplete: BTreeSet<String>,
}

/// Shared by the run and its backend wrapper.
#[derive(Debug, Clone, Default)]
pub struct RanImages(Arc<Mutex<Seen>>);

impl RanImages {
    fn with<T>(&self, f: impl FnOnce(&mut Seen) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// `pod` is a task Pod of the run (created by `create_pod`).
    pub fn task_pod(&self, pod: &PodRef) {
        self.with(|s| s.task_pods.insert(pod.uid.clone()));
    }

    pub fn is_task_pod(&self, pod: &PodRef) -> bool {
        self.with(|s| s.task_pods.contains(&pod.uid))
    }

    /// Whether a read of `pod` left a container without an image id (read it again before
    /// the Pod goes).
    pub fn incomplete(&self, pod: &PodRef) -> bool {
        self.with(|s| s.incomplete.contains(&pod.uid))
    }

    /// Records what the containers of task Pod `pod` run, as `states` (one read) says.
    pub fn saw(&self, pod: &PodRef, states: &[ContainerState]) {
        self.with(|s| {
            if !s.task_pods.contains(&pod.uid) {
                return;
            }
            let mut complete = !states.is_empty();
            for state in states {
                match &state.image_id {
                    Some(id) => {
                        s.images.insert(
                            (pod.uid.clone(), state.name.clone()),
                            (state.image.clone(), id.clone()),
                        );
                    }
                    None => complete = false,
                }
            }
            if complete {
                s.incomplete.remove(&pod.uid);
            } else {
                s.incomplete.insert(pod.uid.clone());
            }
        });
    }

    /// What the containers named `container` ran, over every task Pod: each image once, with
    /// how many containers ran it.
    pub fn of_container(&self, container: &str) -> Vec<RanImage> {
        self.with(|s| {
            let mut counted: BTreeMap<(String, String), usize> = BTreeMap::new();
            for ((_, name), ran) in &s.images {
                if name == container {
                    *counted.entry(ran.clone()).or_default() += 1;
                }
            }
            counted
                .into_iter()
                .map(|((image, image_id), containers)| RanImage {
                    image,
                    image_id,
                    containers,
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(name: &str, image: &str, id: Option<&str>) -> ContainerState {
        ContainerState {
            name: name.into(),
            running: true,
            restarts: 0,
            exit_code: None,
            image: image.into(),
            image_id: id.map(str::to_owned),
        }
    }

    fn pod(uid: &str) -> PodRef {
        PodRef {
            namespace: "ns".into(),
            name: format!("kandev-{uid}"),
            uid: uid.into(),
        }
    }

    #[test]
    fn task_pods_are_counted_per_container_and_image_and_helpers_are_not() {
        let ran = RanImages::default();
        let (a, b, helper) = (pod("a"), pod("b"), pod("h"));
        ran.task_pod(&a);
        ran.task_pod(&b);
        ran.saw(
            &a,
            &[
                state("agent", "w:1", Some("sha256:w")),
                state("engine", "d:1", None),
            ],
        );
        assert!(ran.incomplete(&a), "the companion had no image id yet");
        // Read again: the same containers are not counted twice.
        ran.saw(
            &a,
            &[
                state("agent", "w:1", Some("sha256:w")),
                state("engine", "d:1", Some("sha256:d")),
            ],
        );
        assert!(!ran.incomplete(&a));
        ran.saw(&b, &[state("agent", "w:2", Some("sha256:x"))]);
        ran.saw(&helper, &[state("agent", "peer", Some("sha256:p"))]);
        assert!(!ran.is_task_pod(&helper));
        let agent = ran.of_container("agent");
        assert_eq!(
            agent,
            vec![
                RanImage {
                    image: "w:1".into(),
                    image_id: "sha256:w".into(),
                    containers: 1
                },
                RanImage {
                    image: "w:2".into(),
                    image_id: "sha256:x".into(),
                    containers: 1
                },
            ]
        );
        assert_eq!(ran.of_container("engine").len(), 1);
        assert!(ran.of_container("nothing").is_empty());
    }
}
