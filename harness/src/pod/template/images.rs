//! The image placeholders of fixture templates, rendered with a run's images, and the digest
//! the report records.

use super::finding::PATH_PREFIX;
use k8s_openapi::api::core::v1::PodTemplate;
use sha2::{Digest, Sha256};

/// Placeholder for the worker image in fixture templates (Kandev's recipe uses the same).
pub const WORKER_IMAGE_PLACEHOLDER: &str = "FULL_WORKER_IMAGE_REQUIRED";
/// Placeholder for the docker-engine companion image in fixture templates.
pub const DAEMON_IMAGE_PLACEHOLDER: &str = "DOCKER_ENGINE_IMAGE_REQUIRED";

/// A template's text after rendering, with the digest the report records.
#[derive(Debug, Clone)]
pub struct RenderedTemplate {
    pub text: String,
    pub sha256: String,
}

/// `sha256:<hex>` of a template's text, as reports record it.
pub fn sha256_hex(text: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

/// Substitutes the fixture placeholders with the images of this run. Templates that name
/// real images (operators' own) pass through unchanged.
pub fn render(text: &str, worker_image: &str, daemon_image: &str) -> RenderedTemplate {
    let text = fill_placeholders(text, worker_image, daemon_image);
    let sha256 = sha256_hex(&text);
    RenderedTemplate { text, sha256 }
}

/// `text` with the worker and daemon placeholders replaced: the one substitution, for a
/// template's text and for each image field of a parsed template alike.
pub(super) fn fill_placeholders(text: &str, worker_image: &str, daemon_image: &str) -> String {
    text.replace(WORKER_IMAGE_PLACEHOLDER, worker_image)
        .replace(DAEMON_IMAGE_PLACEHOLDER, daemon_image)
}

/// Why an image flag (`--worker-image`, `--daemon-image`) would be ignored by this template:
/// the container it is for (`container`, with its `placeholder`) names a real image other
/// than `image`, or the template has no such container. The run would use the template's
/// image while the report recorded the flag's, so a run on image A could pass a gate for B:
/// refused before anything is created. None: the container's image is a placeholder the run
/// fills (its own, or the other role's: a companion that runs the worker image, as the
/// Docker-outside-of-Docker twin's, still runs an image of the run's; what it ran is recorded
/// and compared per role), or that very image.
pub fn ignored_image_flag(
    template: &PodTemplate,
    flag: &str,
    image: &str,
    container: &str,
    placeholder: &str,
) -> Option<String> {
    let containers = template
        .template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .map(|spec| spec.containers.as_slice())
        .unwrap_or_default();
    let Some((i, named)) = containers
        .iter()
        .enumerate()
        .find(|(_, c)| c.name == container)
    else {
        return Some(format!(
            "{flag} {image:?}: the template has no container {container}, so no container would run it\n    fix: drop {flag}, or name the container it is for (--main-container / --daemon-container)"
        ));
    };
    let named = named.image.as_deref().unwrap_or_default();
    let rendered = [
        placeholder,
        WORKER_IMAGE_PLACEHOLDER,
        DAEMON_IMAGE_PLACEHOLDER,
    ]
    .iter()
    .any(|p| named.contains(p));
    if rendered || named == image {
        return None;
    }
    Some(format!(
        "{flag} {image:?}: the template names its own image {named:?} for container {container} ({PATH_PREFIX}.template.spec.containers[{i}].image), which the Pods would run instead, while the report recorded {image:?}\n    fix: drop {flag} (the template's image runs and is recorded), or write {placeholder} in that field so that {flag} fills it"
    ))
}
