//! The command line's cluster settings as the `kind` and `kube` backends read them.

use crate::backend::kube::backend::ManagedPvc;
use crate::backend::kube::kind::{KindOptions, run_kind_cluster};
use crate::config::ClusterSettings;
use std::path::{Path, PathBuf};

impl ClusterSettings {
    /// The Kind cluster of `--backend kind` (None for other backends).
    pub fn kind_options(&self, run_id: &str, report_folder: &Path) -> Option<KindOptions> {
        let kind = self.kind.as_ref()?;
        Some(KindOptions {
            kind_bin: kind.kind_bin.clone(),
            name: kind
                .cluster
                .clone()
                .unwrap_or_else(|| run_kind_cluster(run_id)),
            config: kind.config.clone(),
            node_image: kind.node_image.clone(),
            keep: kind.keep_cluster,
            kubeconfig: report_folder.join("kind.kubeconfig"),
            docker_bin: PathBuf::from("docker"),
        })
    }

    pub fn managed_pvc(&self) -> ManagedPvc {
        ManagedPvc {
            size: self.workspace_size.clone(),
            access_modes: self.workspace_access_modes.clone(),
            storage_class: self.storage_class.clone(),
        }
    }
}
