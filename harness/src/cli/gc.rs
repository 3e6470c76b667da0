//! `gc`: removes what killed runs left, by label, through the backend's provider.

use super::args::GcArgs;
use super::run::cluster_settings;
use crate::backend::GcRequest;
use kandev_report::exit;
use std::time::Duration;

pub(crate) async fn gc(args: &GcArgs) -> u8 {
    let request = GcRequest {
        run: args.run.clone(),
        dry_run: args.dry_run,
        older_than: Duration::from_secs(args.older_than),
        cluster: cluster_settings(args.backend, &args.cluster, None),
    };
    match crate::backend::provider(args.backend).gc(&request).await {
        Ok(removed) => {
            let verb = if args.dry_run {
                "would remove"
            } else {
                "removed"
            };
            for object in &removed {
                println!("{verb} {object}");
            }
            println!("{verb} {} objects", removed.len());
            exit::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", crate::error_chain(e.as_ref()));
            exit::ENVIRONMENT
        }
    }
}
