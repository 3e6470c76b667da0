//! Tests of the admission comparison: each upstream mutation caught at its path, neutral
//! changes passing.

use super::*;
use crate::pod::compose::{Arch, ComposeInput, WorkspaceSource, compose_pod};
use crate::pod::identity::SessionIdentity;
use crate::pod::template;
use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, EphemeralContainer, NodeAffinity, NodeSelector,
    NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeClaimVolumeSource,
    PreferredSchedulingTerm, Volume, VolumeDevice, VolumeMount,
};

fn desired() -> Pod {
    let text = std::fs::read_to_string(crate::paths::default_template()).unwrap();
    let t = template::parse(&template::render(&text, "w", "d").text).unwrap();
    let identity = SessionIdentity::new("run", "x::y", 0);
    compose_pod(&ComposeInput {
        template: &t,
        identity: &identity,
        namespace: "ns",
        main_container: "kandev-agent",
        arch: Arch::Amd64,
        workspace: WorkspaceSource::Claim("kandev-x-workspace".into()),
        create_nonce: "nonce",
    })
    .unwrap()
}

fn containers(p: &mut Pod) -> &mut Vec<Container> {
    &mut p.spec.as_mut().unwrap().containers
}

fn engine(p: &mut Pod) -> &mut Container {
    containers(p)
        .iter_mut()
        .find(|c| c.name == "docker-engine")
        .unwrap()
}

fn grant_of(p: &mut Pod) -> &mut VolumeMount {
    engine(p)
        .volume_mounts
        .as_mut()
        .unwrap()
        .iter_mut()
        .find(|m| m.name == "kandev-workspace")
        .unwrap()
}

fn push_mount(c: &mut Container, m: VolumeMount) {
    c.volume_mounts.get_or_insert_default().push(m);
}

/// Removes the companion's grant and returns it.
fn take_grant(p: &mut Pod) -> VolumeMount {
    let grant = grant_of(p).clone();
    engine(p)
        .volume_mounts
        .as_mut()
        .unwrap()
        .retain(|m| m.name != "kandev-workspace");
    grant
}

fn agent(p: &mut Pod) -> &mut Container {
    containers(p)
        .iter_mut()
        .find(|c| c.name == "kandev-agent")
        .unwrap()
}

/// The paths of what `compare` found, in order.
fn paths_after(mutate: impl FnOnce(&mut Pod)) -> Vec<String> {
    let want = desired();
    let mut got = want.clone();
    mutate(&mut got);
    compare(&want, &got, "kandev-agent")
        .into_iter()
        .map(|m| m.path)
        .collect()
}

/// Upstream `validateRequiredMainContainerFields` counts each reserved mount with
/// `reflect.DeepEqual`: readOnly, subPath and mountPropagation are part of the mount.
#[test]
fn main_reserved_mounts_are_compared_exactly() {
    type Change = fn(&mut VolumeMount);
    let changes: [(&str, Change); 4] = [
        ("readOnly", |m| m.read_only = Some(true)),
        ("subPath", |m| m.sub_path = Some("sub".into())),
        ("mountPropagation", |m| {
            m.mount_propagation = Some("HostToContainer".into())
        }),
        ("mountPath", |m| m.mount_path = "/opt/kandev/x".into()),
    ];
    for (field, change) in changes {
        let found = paths_after(|p| {
            let mount = agent(p)
                .volume_mounts
                .as_mut()
                .unwrap()
                .iter_mut()
                .find(|m| m.name == "kandev-runtime")
                .unwrap();
            change(mount);
        });
        assert_eq!(
            found,
            vec!["spec.containers[kandev-agent].volumeMounts[kandev-runtime]"],
            "{field}"
        );
    }
    // An extra mount under a reserved root on the main container is a change too.
    let found = paths_after(|p| {
        agent(p).volume_mounts.as_mut().unwrap().push(VolumeMount {
            name: "cache".into(),
            mount_path: "/run/kandev/cache".into(),
            ..Default::default()
        })
    });
    assert_eq!(
        found,
        vec!["spec.containers[kandev-agent].volumeMounts[cache]"]
    );
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        ..Default::default()
    }
}

fn port(name: Option<&str>, number: i32) -> ContainerPort {
    ContainerPort {
        name: name.map(Into::into),
        container_port: number,
        ..Default::default()
    }
}

fn init_with(p: &mut Pod, c: Container) {
    p.spec.as_mut().unwrap().init_containers = Some(vec![c]);
}

fn ephemeral_with(p: &mut Pod, c: Container) {
    p.spec.as_mut().unwrap().ephemeral_containers = Some(vec![EphemeralContainer {
        name: c.name,
        image: c.image,
        ports: c.ports,
        volume_mounts: c.volume_mounts,
        volume_devices: c.volume_devices,
        ..Default::default()
    }]);
}

fn named(name: &str, mounts: Vec<VolumeMount>, ports: Vec<ContainerPort>) -> Container {
    Container {
        name: name.into(),
        image: Some("busybox".into()),
        volume_mounts: Some(mounts),
        ports: Some(ports),
        ..Default::default()
    }
}

/// Upstream `validateAdmittedContainers`: no container but the main one may hold a
/// reserved volume, a mount under a reserved root (the exact grant aside) or the
/// agentctl port, whatever the template asked for.
#[test]
fn companions_init_and_ephemeral_containers_gain_no_reserved_access() {
    type Mutation = fn(&mut Pod);
    let cases: Vec<(&str, Mutation, &str)> = vec![
        (
            "companion gains kandev-runtime",
            |p| push_mount(engine(p), mount("kandev-runtime", "/rt")),
            "spec.containers[docker-engine].volumeMounts[kandev-runtime]",
        ),
        (
            "companion gains kandev-auth",
            |p| push_mount(engine(p), mount("kandev-auth", "/run/kandev")),
            "spec.containers[docker-engine].volumeMounts[kandev-auth]",
        ),
        (
            "companion mounts under /opt/kandev",
            |p| push_mount(engine(p), mount("docker-data", "/opt/kandev/bin")),
            "spec.containers[docker-engine].volumeMounts[docker-data]",
        ),
        (
            "companion mounts /run/kandev (uncleaned)",
            |p| push_mount(engine(p), mount("docker-socket", "/run//kandev/")),
            "spec.containers[docker-engine].volumeMounts[docker-socket]",
        ),
        (
            "companion gains port 8765",
            |p| {
                engine(p)
                    .ports
                    .get_or_insert_default()
                    .push(port(None, 8765))
            },
            "spec.containers[docker-engine].ports[8765]",
        ),
        (
            "companion gains a port named kandev-agentctl",
            |p| {
                engine(p)
                    .ports
                    .get_or_insert_default()
                    .push(port(Some("kandev-agentctl"), 9000))
            },
            "spec.containers[docker-engine].ports[9000]",
        ),
        (
            "init gains kandev-auth",
            |p| init_with(p, named("setup", vec![mount("kandev-auth", "/a")], vec![])),
            "spec.initContainers[setup].volumeMounts[kandev-auth]",
        ),
        (
            "init mounts under /run/kandev",
            |p| init_with(p, named("setup", vec![mount("d", "/run/kandev/x")], vec![])),
            "spec.initContainers[setup].volumeMounts[d]",
        ),
        (
            "init gains port 8765",
            |p| init_with(p, named("setup", vec![], vec![port(None, 8765)])),
            "spec.initContainers[setup].ports[8765]",
        ),
        (
            "ephemeral gains kandev-runtime",
            |p| {
                ephemeral_with(
                    p,
                    named("debug", vec![mount("kandev-runtime", "/r")], vec![]),
                )
            },
            "spec.ephemeralContainers[debug].volumeMounts[kandev-runtime]",
        ),
        (
            "ephemeral mounts /opt/kandev",
            |p| ephemeral_with(p, named("debug", vec![mount("d", "/opt/kandev")], vec![])),
            "spec.ephemeralContainers[debug].volumeMounts[d]",
        ),
        (
            "ephemeral gains port 8765",
            |p| ephemeral_with(p, named("debug", vec![], vec![port(None, 8765)])),
            "spec.ephemeralContainers[debug].ports[8765]",
        ),
    ];
    for (name, mutate, path) in cases {
        assert_eq!(paths_after(mutate), vec![path], "{name}");
    }
}

/// Upstream `companionWithoutWorkspaceGrant` on every admitted companion: one exact
/// grant at most, and on its recipient no other mount at `/`, at `/workspace` or below it.
#[test]
fn a_grant_recipient_gains_no_other_workspace_mount_and_no_overlapping_mount() {
    type Mutation = fn(&mut Pod);
    const SHAPE: &str = "workspace grant must be one direct RO/RW mount at /workspace";
    const OVERLAP: &str = "workspace grant overlaps another mount";
    let cases: Vec<(&str, Mutation, &str, &str)> = vec![
        (
            "extra kandev-workspace mount elsewhere",
            |p| push_mount(engine(p), mount("kandev-workspace", "/data")),
            "spec.containers[docker-engine].volumeMounts[kandev-workspace]",
            SHAPE,
        ),
        (
            "extra kandev-workspace mount with a subPath",
            |p| {
                let mut m = mount("kandev-workspace", "/workspace");
                m.sub_path = Some("repo".into());
                push_mount(engine(p), m)
            },
            "spec.containers[docker-engine].volumeMounts[kandev-workspace]",
            SHAPE,
        ),
        (
            "another volume at /",
            |p| push_mount(engine(p), mount("docker-data", "/")),
            "spec.containers[docker-engine].volumeMounts[docker-data]",
            OVERLAP,
        ),
        (
            "another volume at /workspace",
            |p| push_mount(engine(p), mount("docker-data", "/workspace/")),
            "spec.containers[docker-engine].volumeMounts[docker-data]",
            OVERLAP,
        ),
        (
            "another volume below /workspace",
            |p| push_mount(engine(p), mount("docker-data", "/workspace/cache")),
            "spec.containers[docker-engine].volumeMounts[docker-data]",
            OVERLAP,
        ),
    ];
    for (name, mutate, path, message) in cases {
        let want = desired();
        let mut got = want.clone();
        mutate(&mut got);
        let found: Vec<(String, String)> = compare(&want, &got, "kandev-agent")
            .into_iter()
            .map(|m| (m.path, m.message))
            .collect();
        assert!(
            found.len() == 1 && found[0].0 == path && found[0].1.starts_with(message),
            "{name}: want [{path}: {message}...], got {found:?}"
        );
    }
}

/// Upstream `validateAdmittedPodSpec` compares `nodeName` as it is, also when none was
/// requested: admission may not pin the Pod to a node.
#[test]
fn a_node_name_set_by_admission_is_a_change() {
    let found = paths_after(|p| p.spec.as_mut().unwrap().node_name = Some("node-7".into()));
    assert_eq!(found, vec!["spec.nodeName"]);
}

/// A Pod read back after a lost create may already be bound: the binding writes `nodeName`
/// with `PodScheduled=True`, which a create's answer never has. Another node than the one
/// asked for stays a change.
#[test]
fn a_node_name_the_scheduler_bound_is_no_change_but_another_node_is() {
    let bind = |p: &mut Pod, node: &str| {
        p.spec.as_mut().unwrap().node_name = Some(node.into());
        p.status = Some(k8s_openapi::api::core::v1::PodStatus {
            conditions: Some(vec![k8s_openapi::api::core::v1::PodCondition {
                type_: "PodScheduled".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
    };
    assert!(paths_after(|p| bind(p, "node-7")).is_empty());
    let want = {
        let mut p = desired();
        p.spec.as_mut().unwrap().node_name = Some("node-1".into());
        p
    };
    let mut got = want.clone();
    bind(&mut got, "node-7");
    let found: Vec<String> = compare(&want, &got, "kandev-agent")
        .into_iter()
        .map(|m| m.path)
        .collect();
    assert_eq!(found, vec!["spec.nodeName"]);
}

fn requirement(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: operator.into(),
        values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
    }
}

fn required(p: &mut Pod, terms: Vec<NodeSelectorTerm>) {
    p.spec.as_mut().unwrap().affinity = Some(Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: terms,
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
}

fn expressions(requirements: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: Some(requirements),
        match_fields: None,
    }
}

/// Upstream `validateAdmittedNodeAffinity`: a platform (`kubernetes.io/os`,
/// `kubernetes.io/arch`) requirement admission adds must be a match expression the
/// requested node selector satisfies; a requested one must stay as it is.
#[test]
fn platform_node_affinity_is_compared() {
    const REQUIRED: &str =
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
    let found = paths_after(|p| {
        required(
            p,
            vec![expressions(vec![requirement(
                "kubernetes.io/arch",
                "In",
                &["arm64"],
            )])],
        )
    });
    assert_eq!(
        found,
        vec![format!(
            "{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0]"
        )]
    );
    let found = paths_after(|p| {
        required(
            p,
            vec![
                expressions(vec![requirement(
                    "topology.kubernetes.io/zone",
                    "In",
                    &["a"],
                )]),
                expressions(vec![
                    requirement("kubernetes.io/arch", "In", &["amd64"]),
                    requirement("kubernetes.io/os", "NotIn", &["linux"]),
                ]),
            ],
        )
    });
    assert_eq!(
        found,
        vec![format!(
            "{REQUIRED}.nodeSelectorTerms[1].matchExpressions[1]"
        )]
    );
    let found = paths_after(|p| {
        required(
            p,
            vec![NodeSelectorTerm {
                match_expressions: None,
                match_fields: Some(vec![requirement("kubernetes.io/arch", "In", &["amd64"])]),
            }],
        )
    });
    assert_eq!(
        found,
        vec![format!("{REQUIRED}.nodeSelectorTerms[0].matchFields[0]")]
    );
    let found = paths_after(|p| {
        p.spec.as_mut().unwrap().affinity = Some(Affinity {
            node_affinity: Some(NodeAffinity {
                preferred_during_scheduling_ignored_during_execution: Some(vec![
                    PreferredSchedulingTerm {
                        weight: 1,
                        preference: expressions(vec![requirement(
                            "kubernetes.io/os",
                            "In",
                            &["windows"],
                        )]),
                    },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        })
    });
    assert_eq!(
        found,
        vec![
            "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0]"
        ]
    );
    // Compatible with the requested selector (linux/amd64), or not about the platform:
    // neutral.
    let found = paths_after(|p| {
        required(
            p,
            vec![expressions(vec![
                requirement("kubernetes.io/arch", "In", &["amd64", "arm64"]),
                requirement("kubernetes.io/os", "Exists", &[]),
                requirement("kubernetes.io/arch", "NotIn", &["s390x"]),
                requirement("topology.kubernetes.io/zone", "In", &["a"]),
            ])],
        )
    });
    assert_eq!(found, Vec::<String>::new());
    // A requested platform requirement that admission dropped.
    let mut want = desired();
    required(
        &mut want,
        vec![expressions(vec![requirement(
            "kubernetes.io/arch",
            "In",
            &["amd64"],
        )])],
    );
    let mut got = want.clone();
    got.spec.as_mut().unwrap().affinity = None;
    let found: Vec<String> = compare(&want, &got, "kandev-agent")
        .into_iter()
        .map(|m| m.path)
        .collect();
    assert_eq!(
        found,
        vec![format!(
            "{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0]"
        )]
    );
}

/// Upstream `validateAdmittedContainerDevices`: on every container, the main one too.
#[test]
fn no_container_gains_a_reserved_volume_device() {
    let device = |name: &str, path: &str| VolumeDevice {
        name: name.into(),
        device_path: path.into(),
    };
    let found = paths_after(|p| {
        agent(p).volume_devices = Some(vec![device("kandev-runtime", "/dev/rt")]);
        engine(p).volume_devices = Some(vec![device("blk", "/workspace/dev")]);
    });
    assert_eq!(
        found,
        vec![
            "spec.containers[kandev-agent].volumeDevices[kandev-runtime]",
            "spec.containers[docker-engine].volumeDevices[blk]",
        ]
    );
}

/// Upstream counts the agentctl port with `reflect.DeepEqual` on the main container
/// too: a changed field, or a second port on 8765, is a change.
#[test]
fn the_main_agentctl_port_is_compared_exactly() {
    let found = paths_after(|p| {
        let ports = agent(p).ports.as_mut().unwrap();
        let agentctl = ports.iter_mut().find(|p| p.container_port == 8765).unwrap();
        agentctl.host_port = Some(8765);
    });
    assert_eq!(found, vec!["spec.containers[kandev-agent].ports[8765]"]);
    let found = paths_after(|p| {
        agent(p)
            .ports
            .as_mut()
            .unwrap()
            .push(port(Some("metrics"), 8765))
    });
    assert_eq!(found, vec!["spec.containers[kandev-agent].ports[8765]"]);
}

/// The upstream AC-001.3 mutations: each must be caught.
#[test]
fn every_upstream_mutation_is_caught() {
    type Mutation = fn(&mut Pod);
    let cases: Vec<(&str, Mutation)> = vec![
        ("removed mount", |p| {
            take_grant(p);
        }),
        ("removed recipient", |p| {
            containers(p).retain(|c| c.name != "docker-engine")
        }),
        ("renamed recipient", |p| engine(p).name = "dockerd".into()),
        ("flipped readOnly", |p| grant_of(p).read_only = Some(true)),
        ("duplicated mount", |p| {
            let g = grant_of(p).clone();
            engine(p).volume_mounts.as_mut().unwrap().push(g);
        }),
        ("duplicated recipient", |p| {
            let c = engine(p).clone();
            containers(p).push(c);
        }),
        ("grant added to a new container", |p| {
            let g = grant_of(p).clone();
            containers(p).push(Container {
                name: "intruder".into(),
                volume_mounts: Some(vec![g]),
                ..Default::default()
            });
        }),
        ("grant moved to init", |p| {
            let g = take_grant(p);
            p.spec.as_mut().unwrap().init_containers = Some(vec![Container {
                name: "init".into(),
                volume_mounts: Some(vec![g]),
                ..Default::default()
            }]);
        }),
        ("grant moved to ephemeral", |p| {
            let g = take_grant(p);
            p.spec.as_mut().unwrap().ephemeral_containers = Some(vec![EphemeralContainer {
                name: "debug".into(),
                volume_mounts: Some(vec![g]),
                ..Default::default()
            }]);
        }),
        ("writable alias of the workspace claim", |p| {
            p.spec
                .as_mut()
                .unwrap()
                .volumes
                .as_mut()
                .unwrap()
                .push(Volume {
                    name: "alias".into(),
                    persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                        claim_name: "kandev-x-workspace".into(),
                        read_only: None,
                    }),
                    ..Default::default()
                });
        }),
        ("create nonce changed", |p| {
            p.metadata
                .annotations
                .as_mut()
                .unwrap()
                .insert("kandev.ai/create-nonce".into(), "other".into());
        }),
        ("foreign kandev.ai label", |p| {
            p.metadata
                .labels
                .as_mut()
                .unwrap()
                .insert("kandev.ai/foreign-owner".into(), "x".into());
        }),
        ("main command changed", |p| {
            containers(p)[0].command = Some(vec!["bash".into()])
        }),
        ("token automount turned on", |p| {
            p.spec.as_mut().unwrap().automount_service_account_token = Some(true)
        }),
    ];
    for (name, mutate) in cases {
        let want = desired();
        let mut got = want.clone();
        mutate(&mut got);
        assert!(
            !compare(&want, &got, "kandev-agent").is_empty(),
            "{name} was not caught"
        );
    }
}

#[test]
fn neutral_changes_pass() {
    let want = desired();
    let mut reordered = want.clone();
    containers(&mut reordered).reverse();
    assert_eq!(compare(&want, &reordered, "kandev-agent"), vec![]);
    let mut sidecar = want.clone();
    containers(&mut sidecar).push(Container {
        name: "metrics".into(),
        image: Some("m".into()),
        ..Default::default()
    });
    sidecar
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("policy.example/checked".into(), "yes".into());
    sidecar
        .metadata
        .annotations
        .as_mut()
        .unwrap()
        .insert("policy.example/note".into(), "x".into());
    assert_eq!(compare(&want, &sidecar, "kandev-agent"), vec![]);
    let mut defaulted = want.clone();
    grant_of(&mut defaulted).read_only = None; // readOnly: false written as absent
    engine(&mut defaulted).termination_message_path = Some("/dev/termination-log".into());
    assert_eq!(compare(&want, &defaulted, "kandev-agent"), vec![]);
}
