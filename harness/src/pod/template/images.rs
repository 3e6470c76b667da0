//! The image placeholders of fixture templates, rendered with a run's images, and the digest
//! the report records.

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
