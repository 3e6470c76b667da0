//! Tests of the template rules and the strict parse.

use super::*;

fn options() -> RuleOptions {
    RuleOptions {
        main_container: "kandev-agent".into(),
        workspace_mode: WorkspaceMode::ManagedPvc,
        workspace_claim: Some("kandev-0011223344556677-workspace".into()),
    }
}

fn check(text: &str) -> Vec<TemplateFinding> {
    match parse(text) {
        Ok(t) => validate(&t, &options()),
        Err(f) => f,
    }
}

const GOOD: &str = r#"
apiVersion: v1
kind: PodTemplate
template:
  spec:
    containers:
      - name: kandev-agent
        image: worker
      - name: docker-engine
        image: daemon
        volumeMounts:
          - {name: kandev-workspace, mountPath: /workspace, readOnly: false}
"#;

#[test]
fn the_grant_shape_passes() {
    assert_eq!(errors(&check(GOOD)).count(), 0, "{:?}", check(GOOD));
}

#[test]
fn every_fixture_template_parses() {
    let root = crate::paths::workspace_root();
    for entry in std::fs::read_dir(root.join("fixtures/templates"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        if entry.path().extension().is_some_and(|e| e == "yaml") {
            let findings = check(&render(&text, "w", "d").text);
            assert_eq!(
                errors(&findings).count(),
                0,
                "{}: {findings:?}",
                entry.path().display()
            );
        }
    }
}

#[test]
fn grant_variants_are_rejected_with_paths() {
    for (mount, expected) in [
        (
            "{name: kandev-workspace, mountPath: /workspace/}",
            "one direct RO/RW mount",
        ),
        (
            "{name: kandev-workspace, mountPath: /other}",
            "one direct RO/RW mount",
        ),
        (
            "{name: kandev-workspace, mountPath: /workspace, subPath: x}",
            "one direct RO/RW mount",
        ),
        (
            "{name: kandev-auth, mountPath: /workspace}",
            "one direct RO/RW mount",
        ),
        (
            "{name: data, mountPath: /workspace/cache}",
            "one direct RO/RW mount",
        ),
    ] {
        let text = GOOD.replace(
            "{name: kandev-workspace, mountPath: /workspace, readOnly: false}",
            mount,
        );
        let findings = check(&text);
        let hit = errors(&findings).find(|f| f.message.contains(expected));
        let hit = hit.map(|f| f.path.as_str()).unwrap_or("none");
        assert_eq!(
            hit, "config.pod_template_yaml.template.spec.containers[1].volumeMounts[0]",
            "{mount}"
        );
    }
}

#[test]
fn unknown_fields_and_multiple_documents_are_errors() {
    let findings = check(&GOOD.replace(
        "image: worker",
        "image: worker\n        imagePullPolcy: Never",
    ));
    assert!(
        findings
            .iter()
            .any(|f| f.path.ends_with("containers[0].imagePullPolcy")),
        "{findings:?}"
    );
    let findings = check(&format!("{GOOD}\n---\n{GOOD}"));
    assert!(
        findings
            .iter()
            .any(|f| f.message.contains("2 YAML documents")),
        "{findings:?}"
    );
}

#[test]
fn all_problems_are_reported_at_once() {
    let text = GOOD
        .replace(
            "    containers:",
            "    restartPolicy: Never\n    containers:",
        )
        .replace("image: worker", "image: worker\n        command: [x]");
    let findings = check(&text);
    assert!(errors(&findings).count() >= 2, "{findings:?}");
}

/// Upstream `validateNodeAffinity` / `reservedSelectorPath`: the platform keys are the
/// profile's, in required and preferred terms, match expressions and match fields.
#[test]
fn platform_node_affinity_is_reserved() {
    let text = GOOD.replace(
        "    containers:",
        r#"    affinity:
      nodeAffinity:
        requiredDuringSchedulingIgnoredDuringExecution:
          nodeSelectorTerms:
            - matchExpressions:
                - {key: topology.kubernetes.io/zone, operator: In, values: [a]}
            - matchFields:
                - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 1
            preference:
              matchExpressions:
                - {key: kubernetes.io/os, operator: In, values: [linux]}
    containers:"#,
    );
    let findings = check(&text);
    let found: Vec<(&str, &str)> = errors(&findings)
        .map(|f| (f.path.as_str(), f.message.as_str()))
        .collect();
    let base = "config.pod_template_yaml.template.spec.affinity.nodeAffinity";
    assert_eq!(
        found,
        vec![
            (
                format!("{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[1].matchFields[0].key").as_str(),
                "is reserved for Kandev (set by the profile platform)"
            ),
            (
                format!("{base}.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].key").as_str(),
                "is reserved for Kandev (set by the profile platform)"
            ),
        ]
    );
}

#[test]
fn clean_path_matches_go() {
    assert_eq!(clean_path("/workspace/"), "/workspace");
    assert_eq!(clean_path("//a/./b/../c"), "/a/c");
    assert_eq!(clean_path("/"), "/");
}

/// A template file parsed once and given images on its parsed form is what rendering the text
/// and parsing it again gave (the run's earlier way): the same Pod template, the same digests.
#[test]
fn images_on_the_parsed_template_match_the_rendered_text() {
    let root = crate::paths::workspace_root().join("fixtures/templates");
    let mut compared = 0;
    for folder in [root.clone(), root.join("broken"), root.join("cases")] {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            if entry.path().extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let Ok(file) = TemplateFile::parse(text.clone()) else {
                continue;
            };
            let rendered = render(&text, "w@sha256:1", "d@sha256:2");
            let with_images = file.with_images("w@sha256:1", "d@sha256:2").unwrap();
            let name = entry.path().display().to_string();
            assert_eq!(
                with_images.template,
                parse(&rendered.text).unwrap(),
                "{name}"
            );
            assert_eq!(with_images.sha256, rendered.sha256, "{name}");
            assert_eq!(file.source_sha256(), sha256_hex(&text), "{name}");
            compared += 1;
        }
    }
    assert!(compared > 20, "only {compared} fixture templates compared");
}

/// Kandev's size limit applies to the text a profile stores: the rendered one.
#[test]
fn images_that_push_the_text_over_the_limit_are_refused() {
    let base = GOOD.replace(
        "image: worker",
        &format!("image: {WORKER_IMAGE_PLACEHOLDER}"),
    );
    let padding = "x".repeat(MAX_TEMPLATE_BYTES - base.len() - 2);
    let file = TemplateFile::parse(format!("{base}#{padding}\n")).unwrap();
    assert!(file.with_images("w", "d").is_ok());
    let refused = file.with_images(&"w".repeat(64), "d").unwrap_err();
    let message = refused.to_string();
    assert!(
        message.starts_with("template: error: config.pod_template_yaml: is 262182 bytes"),
        "{message}"
    );
}

/// An image flag the template would ignore (it names its own image there, or has no such
/// container) is named with the field and the fix; a placeholder or the same image is not.
#[test]
fn an_image_flag_the_template_would_ignore_is_named() {
    use k8s_openapi::api::core::v1::PodTemplate;
    let with = |image: &str| {
        TemplateFile::parse(GOOD.replace("image: worker", &format!("image: {image}")))
            .unwrap()
            .parsed()
            .clone()
    };
    let main = "kandev-agent";
    let flag = |t: &PodTemplate, image: &str, container: &str| {
        ignored_image_flag(
            t,
            "--worker-image",
            image,
            container,
            WORKER_IMAGE_PLACEHOLDER,
        )
    };
    assert_eq!(flag(&with(WORKER_IMAGE_PLACEHOLDER), "r/w:1", main), None);
    // The other role's placeholder is an image of the run's too (what ran is compared later).
    assert_eq!(flag(&with(DAEMON_IMAGE_PLACEHOLDER), "r/w:1", main), None);
    assert_eq!(flag(&with("r/w:1"), "r/w:1", main), None);
    let ignored = flag(&with("r/own:2"), "r/w:1", main).unwrap();
    assert!(
        ignored.contains("--worker-image \"r/w:1\"")
            && ignored.contains("its own image \"r/own:2\" for container kandev-agent")
            && ignored.contains("config.pod_template_yaml.template.spec.containers[0].image")
            && ignored.contains("fix: drop --worker-image"),
        "{ignored}"
    );
    let absent = flag(&with("r/w:1"), "r/w:1", "no-such").unwrap();
    assert!(absent.contains("no container no-such"), "{absent}");
}

/// Every fixture template takes both image flags (a cluster run passes them always): none
/// names an image of its own for the main container or the companion.
#[test]
fn every_fixture_template_takes_both_image_flags() {
    let root = crate::paths::workspace_root().join("fixtures/templates");
    let mut checked = 0;
    for dir in [root.clone(), root.join("broken")] {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let Ok(file) = TemplateFile::parse(text) else {
                continue;
            };
            for (flag, container, placeholder) in [
                ("--worker-image", "kandev-agent", WORKER_IMAGE_PLACEHOLDER),
                ("--daemon-image", "docker-engine", DAEMON_IMAGE_PLACEHOLDER),
            ] {
                let ignored =
                    ignored_image_flag(file.parsed(), flag, "r/x:1", container, placeholder);
                assert_eq!(ignored, None, "{}", path.display());
            }
            checked += 1;
        }
    }
    assert!(checked > 20, "only {checked} templates checked");
}

/// A template that is YAML but not a PodTemplate names where: its line and column, as a YAML
/// syntax error does.
#[test]
fn a_decode_error_carries_line_and_column() {
    let text = "apiVersion: v1\nkind: PodTemplate\nmetadata:\n  name: x\ntemplate:\n  spec:\n    containers:\n    - name: a\n      image: [1]\n";
    let Err(findings) = parse(text) else {
        panic!("an image that is a list decoded")
    };
    let message = &findings[0].message;
    assert!(
        message.contains("does not decode as a v1/PodTemplate"),
        "{message}"
    );
    assert!(message.contains("line 9 column"), "{message}");
    let Err(findings) = parse("apiVersion: v1\nkind: PodTemplate\ntemplate: [\n") else {
        panic!("broken YAML parsed")
    };
    assert!(findings[0].message.contains("line"), "{:?}", findings[0]);
}
