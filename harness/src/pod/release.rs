//! What release gating asks of a template, before anything runs: the capabilities it declares
//! it serves (the gate's default requirements), and image references that cannot move (a
//! digest, never a bare or `latest` tag; no `*_REQUIRED` placeholder left to render).

use super::identity::ANNOTATION_SERVES;
use super::template::{
    DAEMON_IMAGE_PLACEHOLDER, PATH_PREFIX, Severity, TemplateFinding, WORKER_IMAGE_PLACEHOLDER,
};
use k8s_openapi::api::core::v1::PodTemplate;
use kandev_report::Capability;

/// The capabilities the template declares it serves (`acceptance.kandev.ai/serves` on the
/// PodTemplate, comma-separated); an unknown name is an error naming the field.
pub fn declared_serves(template: &PodTemplate) -> Result<Vec<Capability>, TemplateFinding> {
    let Some(value) = template
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_SERVES))
    else {
        return Ok(Vec::new());
    };
    value
        .split(',')
        .filter(|name| !name.trim().is_empty())
        .map(|name| {
            Capability::parse(name).ok_or_else(|| TemplateFinding {
                severity: Severity::Error,
                path: format!("{PATH_PREFIX}.metadata.annotations[{ANNOTATION_SERVES}]"),
                message: format!(
                    "unknown capability {:?}; known: {}",
                    name.trim(),
                    Capability::ALL.map(Capability::name).join(", ")
                ),
            })
        })
        .collect()
}

/// Whether `reference` names exactly one image: `name@sha256:<64 hex>`.
pub fn is_immutable(reference: &str) -> bool {
    reference
        .split_once("@sha256:")
        .is_some_and(|(name, digest)| {
            !name.is_empty() && digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit())
        })
}

/// The template's image references a release cannot accept, each at its field path. With
/// `placeholders_rendered`, the `*_REQUIRED` placeholders are left to the run (which renders
/// them with images it checks itself); without (`validate --for-release`), they are refused.
pub fn mutable_references(
    template: &PodTemplate,
    placeholders_rendered: bool,
) -> Vec<TemplateFinding> {
    let Some(spec) = template.template.as_ref().and_then(|t| t.spec.as_ref()) else {
        return Vec::new();
    };
    let lists = [
        ("containers", Some(&spec.containers)),
        ("initContainers", spec.init_containers.as_ref()),
    ];
    let mut findings = Vec::new();
    for (list, containers) in lists {
        for (i, container) in containers.into_iter().flatten().enumerate() {
            let image = container.image.clone().unwrap_or_default();
            let path = format!("{PATH_PREFIX}.template.spec.{list}[{i}].image");
            let placeholder =
                image == WORKER_IMAGE_PLACEHOLDER || image == DAEMON_IMAGE_PLACEHOLDER;
            let message = if placeholder && placeholders_rendered {
                continue;
            } else if placeholder {
                format!(
                    "{image} is a placeholder: a release renders the image it gates, as name@sha256:<digest>"
                )
            } else if is_immutable(&image) {
                continue;
            } else {
                format!(
                    "{image:?} can move (a tag, not a digest): a release gates exactly one image; use name@sha256:<digest>"
                )
            };
            findings.push(TemplateFinding {
                severity: Severity::Error,
                path,
                message,
            });
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template(annotation: Option<&str>, images: [&str; 2]) -> PodTemplate {
        let annotations = annotation
            .map(|a| format!("metadata:\n  annotations:\n    {ANNOTATION_SERVES}: {a}\n"))
            .unwrap_or_default();
        serde_yaml::from_str(&format!(
            "apiVersion: v1\nkind: PodTemplate\n{annotations}template:\n  spec:\n    containers:\n      - {{name: kandev-agent, image: \"{}\"}}\n      - {{name: docker-engine, image: \"{}\"}}\n",
            images[0], images[1]
        ))
        .unwrap_or_else(|e| unreachable!("{e}"))
    }

    const DIGEST: &str =
        "r.example/w@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn the_template_declares_what_it_serves() {
        let t = template(Some("docker, compose,browser"), [DIGEST, DIGEST]);
        assert_eq!(
            declared_serves(&t).ok(),
            Some(vec![
                Capability::Docker,
                Capability::Compose,
                Capability::Browser
            ])
        );
        assert_eq!(
            declared_serves(&template(None, [DIGEST, DIGEST])).ok(),
            Some(vec![])
        );
        let bad = declared_serves(&template(Some("docker,gpu"), [DIGEST, DIGEST]))
            .err()
            .map(|f| f.to_string())
            .unwrap_or_default();
        assert!(
            bad.contains("\"gpu\"") && bad.contains("acceptance.kandev.ai/serves"),
            "{bad}"
        );
    }

    #[test]
    fn a_release_takes_digests_only() {
        assert!(is_immutable(DIGEST));
        for moving in ["r.example/w:1.2", "r.example/w", "w:latest", "w@sha256:abc"] {
            assert!(!is_immutable(moving), "{moving}");
        }
        let t = template(None, ["r.example/w:latest", DIGEST]);
        let found = mutable_references(&t, true);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0].path,
            "config.pod_template_yaml.template.spec.containers[0].image"
        );
        let placeholders = template(None, [WORKER_IMAGE_PLACEHOLDER, DAEMON_IMAGE_PLACEHOLDER]);
        assert!(mutable_references(&placeholders, true).is_empty());
        let refused = mutable_references(&placeholders, false);
        assert_eq!(refused.len(), 2);
        assert!(
            refused[0].message.contains("placeholder"),
            "{:?}",
            refused[0]
        );
    }
}
