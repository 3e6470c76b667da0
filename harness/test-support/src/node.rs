//! Fixture Kind nodes for the node view's tests: cgroup trees and recorded
//! `/proc/<pid>/cgroup` texts in the shapes real nodes have, and what a view must find there.

use kandev_harness::node::NodeView;
use std::path::{Path, PathBuf};

fn write(path: &Path, text: &str) {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(path, text).unwrap();
}

/// A Pod's QoS class, which decides its cgroup's parent.
#[derive(Debug, Clone, Copy)]
pub enum Qos {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl Qos {
    fn name(self) -> &'static str {
        match self {
            Self::Guaranteed => "guaranteed",
            Self::Burstable => "burstable",
            Self::BestEffort => "besteffort",
        }
    }
}

/// How the kubelet and the host engine name cgroups.
#[derive(Debug, Clone, Copy)]
pub enum Driver {
    /// `kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-<qos>.slice/
    /// kubelet-kubepods-<qos>-pod<u_i_d>.slice/cri-containerd-<id>.scope`, below the node
    /// container's `system.slice/docker-<id>.scope`.
    Systemd,
    /// `kubelet/kubepods/<qos>/pod<uid>/<id>`, below the node container's `docker/<id>`.
    Cgroupfs,
}

/// A Kind node container as this host sees it in its cgroup tree (`cgroup/`, v1 or v2) and
/// its `/proc` (`proc/`), each Pod with its container and optionally a nested container
/// below it (a DinD companion's `docker/<64 hex>`).
pub struct KindNode {
    pub dir: tempfile::TempDir,
    pub v2: bool,
    pub driver: Driver,
    /// `/system.slice/docker-<id>.scope` or `/docker/<id>`: the node container's cgroup.
    pub node_cgroup: String,
}

pub const NODE_ID: &str = "4d2f8c1b9e7a6d5c4b3a29181716151413121110f0e0d0c0b0a0908070605040";
/// The node container's PID 1 on this host.
pub const NODE_INIT_PID: u32 = 4242;

impl KindNode {
    pub fn new(v2: bool, driver: Driver) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let node_cgroup = match driver {
            Driver::Systemd => format!("/system.slice/docker-{NODE_ID}.scope"),
            Driver::Cgroupfs => format!("/docker/{NODE_ID}"),
        };
        let node = Self {
            dir,
            v2,
            driver,
            node_cgroup,
        };
        if v2 {
            write(
                &node.cgroup_root().join("cgroup.controllers"),
                "cpuset cpu io memory pids",
            );
            // Kind's entrypoint moves the node's processes into `init.scope` (v2 only).
            write(
                &node.folder(&format!("{}/init.scope", node.node_cgroup))[0].join("cgroup.procs"),
                &format!("{NODE_INIT_PID}\n"),
            );
            node.add_process(
                NODE_INIT_PID,
                &format!("{}/init.scope", node.node_cgroup),
                "/sbin/init",
                "container=docker",
            );
        } else {
            for controller in ["cpu,cpuacct", "memory", "pids", "systemd"] {
                std::fs::create_dir_all(node.cgroup_root().join(controller)).unwrap();
            }
            // As on a real v1 host: the co-mounted controllers' names are links.
            for link in ["cpu", "cpuacct"] {
                std::os::unix::fs::symlink("cpu,cpuacct", node.cgroup_root().join(link)).unwrap();
            }
            for dir in node.folder(&node.node_cgroup) {
                write(&dir.join("cgroup.procs"), &format!("{NODE_INIT_PID}\n"));
            }
            node.add_process(NODE_INIT_PID, &node.node_cgroup, "/sbin/init", "");
        }
        node
    }

    pub fn cgroup_root(&self) -> PathBuf {
        self.dir.path().join("cgroup")
    }

    pub fn proc_root(&self) -> PathBuf {
        self.dir.path().join("proc")
    }

    /// The recorded `/proc/<pid>/cgroup` text of the node container's PID 1.
    pub fn init_cgroup(&self) -> String {
        std::fs::read_to_string(self.proc_root().join(format!("{NODE_INIT_PID}/cgroup"))).unwrap()
    }

    /// A folder of the tree (`relative` as processes show it) in every hierarchy.
    pub fn folder(&self, relative: &str) -> Vec<PathBuf> {
        let relative = relative.trim_start_matches('/');
        if self.v2 {
            vec![self.cgroup_root().join(relative)]
        } else {
            ["cpu,cpuacct", "memory", "pids", "systemd"]
                .iter()
                .map(|h| self.cgroup_root().join(h).join(relative))
                .collect()
        }
    }

    /// The Pod's cgroup, as processes show it (absolute, without a v1 hierarchy folder).
    pub fn pod_cgroup(&self, qos: Qos, uid: &str) -> String {
        let q = qos.name();
        let under = match (self.driver, qos) {
            (Driver::Systemd, Qos::Guaranteed) => format!(
                "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod{}.slice",
                uid.replace('-', "_")
            ),
            (Driver::Systemd, _) => format!(
                "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-{q}.slice/kubelet-kubepods-{q}-pod{}.slice",
                uid.replace('-', "_")
            ),
            (Driver::Cgroupfs, Qos::Guaranteed) => format!("kubelet/kubepods/pod{uid}"),
            (Driver::Cgroupfs, _) => format!("kubelet/kubepods/{q}/pod{uid}"),
        };
        format!("{}/{under}", self.node_cgroup)
    }

    /// The cgroup of a container `id` of the Pod.
    pub fn container_cgroup(&self, qos: Qos, uid: &str, id: &str) -> String {
        match self.driver {
            Driver::Systemd => format!("{}/cri-containerd-{id}.scope", self.pod_cgroup(qos, uid)),
            Driver::Cgroupfs => format!("{}/{id}", self.pod_cgroup(qos, uid)),
        }
    }

    /// A Pod with one container (`container_id`) and the Pod's limits, returning its cgroup.
    pub fn add_pod(&self, qos: Qos, uid: &str, container_id: &str) -> String {
        let pod = self.pod_cgroup(qos, uid);
        for dir in self.folder(&pod) {
            std::fs::create_dir_all(&dir).unwrap();
        }
        if self.v2 {
            let dir = &self.folder(&pod)[0];
            write(&dir.join("memory.max"), "2147483648\n");
            write(&dir.join("cpu.max"), "200000 100000\n");
            write(&dir.join("pids.max"), "4096\n");
            write(&dir.join("memory.current"), "52428800\n");
        } else {
            let memory = self.cgroup_root().join("memory").join(&pod[1..]);
            write(&memory.join("memory.limit_in_bytes"), "2147483648\n");
            write(&memory.join("memory.usage_in_bytes"), "52428800\n");
            let cpu = self.cgroup_root().join("cpu,cpuacct").join(&pod[1..]);
            write(&cpu.join("cpu.cfs_quota_us"), "200000\n");
            write(&cpu.join("cpu.cfs_period_us"), "100000\n");
            let pids = self.cgroup_root().join("pids").join(&pod[1..]);
            write(&pids.join("pids.max"), "4096\n");
        }
        let container = self.container_cgroup(qos, uid, container_id);
        for dir in self.folder(&container) {
            std::fs::create_dir_all(&dir).unwrap();
        }
        pod
    }

    /// A nested container `nested_id` (64 hex) below the Pod's container, its process `pid`
    /// running `cmdline` with the Pod's `HOSTNAME`; returns the nested cgroup.
    pub fn add_nested(
        &self,
        qos: Qos,
        uid: &str,
        container_id: &str,
        nested_id: &str,
        pid: u32,
        cmdline: &str,
    ) -> String {
        let nested = format!(
            "{}/docker/{nested_id}",
            self.container_cgroup(qos, uid, container_id)
        );
        for dir in self.folder(&nested) {
            write(&dir.join("cgroup.procs"), &format!("{pid}\n"));
        }
        self.add_process(pid, &nested, cmdline, "HOSTNAME=nested");
        nested
    }

    /// `/proc/<pid>` of a process in `cgroup` (recorded texts as this host shows them).
    pub fn add_process(&self, pid: u32, cgroup: &str, cmdline: &str, environ: &str) {
        let dir = self.proc_root().join(pid.to_string());
        let text = if self.v2 {
            format!("0::{cgroup}\n")
        } else {
            format!(
                "12:pids:{cgroup}\n5:cpu,cpuacct:{cgroup}\n4:memory:{cgroup}\n1:name=systemd:{cgroup}\n0::/\n"
            )
        };
        write(&dir.join("cgroup"), &text);
        write(&dir.join("cmdline"), &cmdline.replace(' ', "\0"));
        write(&dir.join("environ"), &environ.replace(' ', "\0"));
    }
}

pub const GUARANTEED: &str = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
pub const BURSTABLE: &str = "11111111-2222-3333-4444-555555555555";
pub const BESTEFFORT: &str = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
/// The nested container (a DinD companion's) of the burstable Pod.
pub const NESTED: &str = "9c8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b";
pub const NESTED_PID: u32 = 5001;

/// A Kind node with a guaranteed, a burstable and a best-effort Pod, the burstable one with
/// a nested container (and its process) below its DinD companion.
pub fn kind_node_with_pods(v2: bool, driver: Driver) -> KindNode {
    let node = KindNode::new(v2, driver);
    node.add_pod(Qos::Guaranteed, GUARANTEED, "c0ffee01");
    node.add_pod(Qos::Burstable, BURSTABLE, "c0ffee02");
    node.add_pod(Qos::BestEffort, BESTEFFORT, "c0ffee03");
    node.add_nested(
        Qos::Burstable,
        BURSTABLE,
        "c0ffee02",
        NESTED,
        NESTED_PID,
        "sleep 600 kandev-nested",
    );
    node
}

/// What a node view must find on [`kind_node_with_pods`]: each Pod's cgroup folder, the
/// limits and members read there, and what is left of a Pod (cgroups, the nested
/// container's cgroup and process) until it is removed.
pub async fn assert_kind_view(node: &KindNode, view: &dyn NodeView) {
    for (qos, uid) in [
        (Qos::Guaranteed, GUARANTEED),
        (Qos::Burstable, BURSTABLE),
        (Qos::BestEffort, BESTEFFORT),
    ] {
        assert_eq!(
            view.pod_cgroup(uid).await.unwrap(),
            Some(node.pod_cgroup(qos, uid)),
            "the {qos:?} Pod's cgroup, seen through {}",
            view.describe()
        );
    }
    let pod = node.pod_cgroup(Qos::Burstable, BURSTABLE);
    let reading = view.read_cgroup(&pod).await.unwrap();
    assert!(reading.exists, "{pod}");
    assert_eq!(reading.memory_limit_bytes, Some(2 << 30));
    assert_eq!(reading.cpu_quota_micros, Some(200_000));
    assert_eq!(reading.cpu_period_micros, Some(100_000));
    assert_eq!(reading.pids_limit, Some(4096));
    assert_eq!(reading.pids, vec![NESTED_PID]);
    let nested = format!("{pod}/cri-containerd-c0ffee02.scope/docker/{NESTED}");
    let nested = match node.driver {
        Driver::Systemd => nested,
        Driver::Cgroupfs => format!("{pod}/c0ffee02/docker/{NESTED}"),
    };
    assert!(reading.cgroups.contains(&nested), "{:#?}", reading.cgroups);

    let remains = view
        .pod_remains("kandev-pod", BURSTABLE, &[NESTED.to_owned()])
        .await
        .unwrap();
    let pod_folder = pod.rsplit('/').next().unwrap_or_default().to_owned();
    assert!(
        remains
            .iter()
            .any(|l| l.starts_with("cgroup/") && l.ends_with(&pod_folder)),
        "the Pod's cgroup {pod_folder} is left: {remains:#?}"
    );
    assert!(
        remains.iter().any(|l| l.starts_with("cgroup/")
            && l.contains(&format!("docker/{NESTED} (a nested container's)"))),
        "the nested container's cgroup is left: {remains:#?}"
    );
    assert!(
        remains
            .iter()
            .any(|l| l.starts_with(&format!("process/{NESTED_PID} "))),
        "the nested process is left: {remains:#?}"
    );
    let untouched = view
        .pod_remains("kandev-other", GUARANTEED, &[])
        .await
        .unwrap();
    let guaranteed = node.pod_cgroup(Qos::Guaranteed, GUARANTEED);
    let guaranteed_folder = guaranteed.rsplit('/').next().unwrap_or_default();
    assert!(
        !untouched.is_empty()
            && untouched
                .iter()
                .all(|l| l.starts_with("cgroup/") && l.ends_with(guaranteed_folder)),
        "only the guaranteed Pod's own cgroup: {untouched:#?}"
    );

    // The Pod goes: its folders (and the nested process) with it.
    for dir in node.folder(&pod) {
        std::fs::remove_dir_all(dir).unwrap();
    }
    std::fs::remove_dir_all(node.proc_root().join(NESTED_PID.to_string())).unwrap();
    assert_eq!(view.pod_cgroup(BURSTABLE).await.unwrap(), None);
    assert_eq!(
        view.pod_remains("kandev-pod", BURSTABLE, &[NESTED.to_owned()])
            .await
            .unwrap(),
        Vec::<String>::new()
    );
}
