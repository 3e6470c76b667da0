//! The template file, read once and parsed once; a run's images are put into its parsed form,
//! and its text is kept for the two digests the report records.

use super::finding::{TemplateFinding, TemplateRefused};
use super::images::{fill_placeholders, render, sha256_hex};
use super::parse::{parse, within_size_limit};
use k8s_openapi::api::core::v1::PodTemplate;

/// A template file as read (its text) and as parsed (placeholders as written).
#[derive(Debug, Clone)]
pub struct TemplateFile {
    text: String,
    parsed: PodTemplate,
}

/// The template with a run's images in its placeholders, and the digest the report records.
#[derive(Debug, Clone)]
pub struct TemplateWithImages {
    pub template: PodTemplate,
    /// `sha256:<hex>` of the file's text with the same images rendered in: the text an
    /// operator stores in a profile's `pod_template_yaml`.
    pub sha256: String,
}

impl TemplateFile {
    /// Parses `text` strictly ([`parse`]), once.
    pub fn parse(text: String) -> Result<Self, Vec<TemplateFinding>> {
        let parsed = parse(&text)?;
        Ok(Self { text, parsed })
    }

    /// The parsed template, its image placeholders as written.
    pub fn parsed(&self) -> &PodTemplate {
        &self.parsed
    }

    /// The file's text, as read.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// `sha256:<hex>` of the file as read (what `gate --template` compares).
    pub fn source_sha256(&self) -> String {
        sha256_hex(&self.text)
    }

    /// The template with `worker_image` and `daemon_image` in its image placeholders (each
    /// container's `image`; templates naming real images are unchanged), and its digest.
    /// Refused when the rendered text is over Kandev's size limit, which applies to the text
    /// a profile stores.
    pub fn with_images(
        &self,
        worker_image: &str,
        daemon_image: &str,
    ) -> Result<TemplateWithImages, TemplateRefused> {
        let rendered = render(&self.text, worker_image, daemon_image);
        within_size_limit(&rendered.text).map_err(|finding| TemplateRefused(vec![finding]))?;
        let mut template = self.parsed.clone();
        if let Some(spec) = template.template.as_mut().and_then(|t| t.spec.as_mut()) {
            let images = spec
                .containers
                .iter_mut()
                .map(|c| &mut c.image)
                .chain(
                    spec.init_containers
                        .iter_mut()
                        .flatten()
                        .map(|c| &mut c.image),
                )
                .chain(
                    spec.ephemeral_containers
                        .iter_mut()
                        .flatten()
                        .map(|c| &mut c.image),
                );
            for image in images.flatten() {
                *image = fill_placeholders(image, worker_image, daemon_image);
            }
        }
        Ok(TemplateWithImages {
            template,
            sha256: rendered.sha256,
        })
    }
}
