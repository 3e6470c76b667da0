//! A control plane that cannot start says why, and what to do.

use kandev_test_support::real_api_server::{Options, start};

#[test]
fn a_real_api_server_without_its_programs_names_the_build_that_makes_them() {
    let empty = tempfile::tempdir().unwrap();
    let error = match start(Options {
        bin_dir: Some(empty.path().to_owned()),
        port: None,
    }) {
        Ok(_) => panic!("a control plane started from an empty folder"),
        Err(e) => format!("{e:#}"),
    };
    assert!(error.contains("etcd is missing"), "{error}");
    assert!(
        error.contains("fix: bash harness/scripts/ensure-kind.sh --programs-only"),
        "{error}"
    );
}

#[test]
fn a_real_api_server_on_a_taken_port_names_the_port() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let error = match start(Options {
        bin_dir: None,
        port: Some(port),
    }) {
        Ok(_) => panic!("a control plane started on a taken port"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        error.contains(&format!("port {port} on 127.0.0.1 is taken")),
        "{error}"
    );
    assert!(error.contains("fix: stop what holds it"), "{error}");
}
