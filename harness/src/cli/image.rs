//! `image harness`: builds (or reuses) the harness image in this host's engine from this very
//! executable and prints its reference on stdout, one line; pushing it is the operator's.
//! `image fixtures`: builds (or reuses) the fixture images a run uses by default, ahead of the
//! run (CI builds them while it compiles; a run then reuses them).

use crate::host::connect_engine;
use crate::host::harness_image::{ensure_harness_image, own_executable};
use crate::host::images::{DEFAULT_BASE_IMAGE, ImageConfig, ensure_images, mock_agent_binary};
use clap::{Args, Subcommand};
use kandev_report::exit;
use std::time::Instant;

#[derive(Subcommand, Debug)]
pub(crate) enum ImageCommand {
    /// Build the harness image (this binary, the static mock agent, the files a run reads; no
    /// toolchain) in this host's engine, for a Job that runs the harness inside the cluster.
    /// Prints its reference on stdout; push it (or `kind load` it) yourself.
    Harness(HarnessImageArgs),
    /// Build (or reuse) the fixture images a run uses when no --worker-image or --daemon-image
    /// is given (the debootstrapped base, the worker, the daemon, the mock agent) in this
    /// host's engine, ahead of the run: a run then reuses them. Prints `ROLE REFERENCE` per
    /// image on stdout.
    Fixtures(FixturesImageArgs),
}

#[derive(Args, Debug)]
pub(crate) struct FixturesImageArgs {
    /// Debian base for the fixture images if present in the engine; otherwise debootstrapped
    /// (as `run --base-image`: the same value gives the images that run uses).
    #[arg(long, value_name = "REF", default_value = DEFAULT_BASE_IMAGE)]
    pub(crate) base_image: String,
}

#[derive(Args, Debug)]
pub(crate) struct HarnessImageArgs {
    /// The image's base, if present in the engine (otherwise a debootstrapped Debian bookworm);
    /// its glibc must be at least as new as the one of the machine that built this binary.
    #[arg(long, value_name = "REF", default_value = DEFAULT_BASE_IMAGE)]
    pub(crate) base_image: String,
}

pub(crate) async fn image(command: ImageCommand) -> u8 {
    match command {
        ImageCommand::Harness(args) => harness(&args).await,
        ImageCommand::Fixtures(args) => fixtures(&args).await,
    }
}

async fn fixtures(args: &FixturesImageArgs) -> u8 {
    if let Err(code) = super::fixtures_ready() {
        return code;
    }
    let started = Instant::now();
    let built = async {
        let docker = connect_engine().await?;
        let config = ImageConfig {
            base_image: args.base_image.clone(),
            worker_image: None,
            daemon_image: None,
            images_dir: crate::paths::fixtures().join("images"),
            mock_agent_binary: mock_agent_binary().await?,
        };
        ensure_images(&docker, &config, &indicatif::MultiProgress::new()).await
    }
    .await;
    let images = match built {
        Ok(images) => images,
        Err(e) => {
            eprintln!("error: {}", crate::error_chain(e.as_ref()));
            return exit::ENVIRONMENT;
        }
    };
    let built = images.records.iter().filter(|r| r.built).count();
    eprintln!(
        "{built} of {} fixture images built, the rest reused ({:.1} s), in this host's engine",
        images.records.len(),
        started.elapsed().as_secs_f64()
    );
    for record in &images.records {
        println!("{} {}", record.role, record.reference);
    }
    exit::SUCCESS
}

async fn harness(args: &HarnessImageArgs) -> u8 {
    if let Err(code) = super::fixtures_ready() {
        return code;
    }
    let started = Instant::now();
    let built = async {
        let docker = connect_engine().await?;
        let mock_agent = mock_agent_binary().await?;
        let progress = indicatif::MultiProgress::new();
        let record = ensure_harness_image(
            &docker,
            &args.base_image,
            &own_executable(),
            &mock_agent,
            &progress,
        )
        .await?;
        let size = docker
            .inspect_image(&record.reference)
            .await
            .ok()
            .and_then(|i| i.size);
        anyhow::Ok((record, size))
    }
    .await;
    let (record, size) = match built {
        Ok(built) => built,
        Err(e) => {
            eprintln!("error: {}", crate::error_chain(e.as_ref()));
            return exit::ENVIRONMENT;
        }
    };
    let reference = &record.reference;
    let verb = if record.built { "built" } else { "reused" };
    let size = size.map_or(String::new(), |bytes| format!(", {} MB", bytes / 1_000_000));
    eprintln!(
        "{verb} {reference} ({:.1} s{size}), in this host's engine only. For the cluster:\n  \
         a registry: docker tag {reference} REGISTRY/kandev-acceptance-harness:TAG && docker push REGISTRY/kandev-acceptance-harness:TAG\n  \
         Kind: kind load docker-image {reference} --name CLUSTER (with Docker's containerd image store: docker save -o harness.tar {reference} && kind load image-archive harness.tar --name CLUSTER)",
        started.elapsed().as_secs_f64()
    );
    println!("{reference}");
    exit::SUCCESS
}
