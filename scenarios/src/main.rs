//! `kandev-acceptance`: the harness's command line with the full scenario registry.

fn main() -> std::process::ExitCode {
    kandev_harness::cli::main(kandev_scenarios::registry())
}
