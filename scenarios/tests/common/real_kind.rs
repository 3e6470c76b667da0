//! What the real-Kind test files share: the Kind build ensure-kind.sh made, and the clusters
//! on this host.

use super::root;
use kandev_harness::host::kube_build::Pins;
use std::process::Command;

/// The pins, and the node image ensure-kind.sh assembled (a test without it fails naming
/// the command that makes it, never skips).
pub fn built() -> Pins {
    let pins = Pins::read_from(&root().join("kind/pins.env")).unwrap();
    let image = pins.node_image();
    let present = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", &image])
        .output()
        .is_ok_and(|out| out.status.success());
    assert!(
        present,
        "the Kind node image {image} is not in this host's engine: bash harness/scripts/ensure-kind.sh builds it"
    );
    pins
}

/// Kind clusters on this host named for `run_id`.
pub fn clusters_of(pins: &Pins, run_id: &str) -> Vec<String> {
    let kind = pins.bin_dir().unwrap().join("kind");
    let out = Command::new(kind)
        .args(["get", "clusters"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(run_id))
        .map(str::to_owned)
        .collect()
}

/// Held by every test that makes a Kind cluster: one at a time on this host's two cores (two
/// clusters' control planes at once slow each other's scenarios past their bounds).
pub fn one_cluster_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static CLUSTERS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    CLUSTERS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
