//! Kandev's bootstrap file layout for task-owned Pods (executor_kubernetes_bootstrap.go), on
//! the local engine: the session's own environment in its home under
//! `/run/kandev/sessions/<hash>/home/auth.env`; the shared `/run/kandev/auth.env` reduced to
//! the control environment (nonce and the agent's HOME) once preparation is done; the agent
//! runs a session's commands with that session's HOME; and a symlink anywhere on a written
//! path is refused before anything is written through it. Needs a reachable engine, so it is
//! `#[ignore]`d: run it with `bash harness/scripts/ensure-engine.sh`, then
//! `cargo test --workspace -- --include-ignored`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use kandev_harness::backend::local::LOCAL_NAMESPACE;
use kandev_harness::pod::identity::SessionIdentity;
use kandev_harness::pod::template::{self, WorkspaceMode};
use kandev_harness::session::cleanup::CleanupStack;
use kandev_harness::session::{AGENT_HOME, LaunchSettings, Session, SessionOptions};
use kandev_test_support::engine::FixtureEngine;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

async fn settings() -> LaunchSettings {
    let engine = FixtureEngine::start().await;
    let images = &engine.images;
    let text = std::fs::read_to_string(kandev_harness::paths::default_template()).unwrap();
    let rendered = template::render(&text, &images.worker, &images.daemon);
    let backend = engine.local_backend();
    LaunchSettings {
        backend,
        namespace: LOCAL_NAMESPACE.into(),
        template: template::parse(&rendered.text).unwrap(),
        main_container: "kandev-agent".into(),
        daemon_container: "docker-engine".into(),
        prepare_script: std::fs::read_to_string(kandev_harness::paths::default_prepare_script())
            .unwrap(),
        agent_binary: Arc::new(std::fs::read(&engine.mock_agent_binary).unwrap()),
        pod_ready_timeout: Duration::from_secs(60),
        prepare_timeout: Duration::from_secs(180),
        connect_timeout: Duration::from_secs(30),
        profile_env: BTreeMap::from([("DOCKER_READY_TIMEOUT_SECONDS".into(), "60".into())]),
        existing_claim: None,
        launch_log: Default::default(),
    }
}

fn options() -> SessionOptions {
    SessionOptions {
        workspace_mode: Some(WorkspaceMode::EmptyDir),
        ..Default::default()
    }
}

async fn main_sh(session: &Session, script: &str) -> String {
    let out = session
        .in_main(&["sh", "-c", script], Duration::from_secs(30))
        .await
        .unwrap();
    assert!(out.success(), "{script}: {}", out.stderr_text());
    out.stdout_text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn bootstrap_lays_out_files_as_kandev_does_and_refuses_symlinks() {
    let settings = settings().await;
    let run = format!("bootstrap-{}", kandev_harness::pod::identity::random_hex(4));
    let cleanup = CleanupStack::default();
    let result = std::panic::AssertUnwindSafe(async {
        let identity = SessionIdentity::new(&run, "bootstrap::layout", 1);
        let session = Session::launch(&settings, &cleanup, identity, &options())
            .await
            .unwrap();
        // Kandev's timing records of a real launch: one per stage in order, one completed.
        let records = settings
            .launch_log
            .for_session(&session.identity.task_id, &session.identity.session_id);
        let problems = kandev_harness::session::timing::record_problems(&records);
        assert!(problems.is_empty(), "{problems:?}: {records:?}");
        let home = session.home();
        assert!(home.starts_with("/run/kandev/sessions/") && home.ends_with("/home"));

        // The shared file keeps only the control environment after preparation.
        let shared = main_sh(&session, "cat /run/kandev/auth.env").await;
        let mut keys: Vec<&str> = shared.lines().filter_map(|l| l.split('=').next()).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["AGENTCTL_BOOTSTRAP_NONCE", "HOME"], "{shared}");
        assert!(shared.contains(&format!("HOME='{AGENT_HOME}'")), "{shared}");

        // The session's own environment, 0600, in its home.
        let own = main_sh(
            &session,
            &format!("stat -c %a {home}/auth.env; cat {home}/auth.env"),
        )
        .await;
        assert!(own.starts_with("600\n"), "{own}");
        assert!(own.contains(&format!("HOME='{home}'")), "{own}");
        assert!(own.contains("KANDEV_SESSION_ID='"), "{own}");
        assert!(own.contains("DOCKER_READY_TIMEOUT_SECONDS='60'"), "{own}");
        assert!(!own.contains("AGENTCTL_BOOTSTRAP_NONCE"), "{own}");

        // The agent runs the session's commands with the session's HOME.
        let seen = session
            .agent_sh("echo \"$HOME\"", Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(seen.stdout.trim(), home);

        // A symlink on the path of a file about to be written: refused, nothing written
        // through it.
        let identity = SessionIdentity::new(&run, "bootstrap::layout", 2);
        let planted = Session::create(&settings, &cleanup, identity, &options())
            .await
            .unwrap();
        main_sh(
            &planted,
            "mkdir -p /tmp/elsewhere && ln -s /tmp/elsewhere /run/kandev/sessions",
        )
        .await;
        let refused = planted.write_bootstrap_files().await.unwrap_err();
        assert!(format!("{refused:#}").contains("symlink"), "{refused:#}");
        assert_eq!(main_sh(&planted, "ls -A /tmp/elsewhere").await, "");
    });
    let outcome = futures_util::FutureExt::catch_unwind(result).await;
    cleanup
        .teardown(settings.backend.as_ref(), Duration::from_secs(120), false)
        .await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The port-forward into a local Pod is one tunnel exec per Pod carrying every exchange: 12
/// concurrent agent commands, each answering 48 KiB (several frames), come back whole and
/// each to its own caller; the engine shows one exec running in the infra container however
/// many exchanges ran; a refused port fails that exchange with its cause and the tunnel keeps
/// carrying the next ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a Docker engine: bash harness/scripts/ensure-engine.sh, then cargo test --workspace -- --include-ignored"]
async fn one_tunnel_per_pod_carries_concurrent_exchanges() {
    let settings = settings().await;
    let run = format!("tunnel-{}", kandev_harness::pod::identity::random_hex(4));
    let cleanup = CleanupStack::default();
    let result = std::panic::AssertUnwindSafe(async {
        let identity = SessionIdentity::new(&run, "bootstrap::tunnel", 1);
        let session = Session::launch(&settings, &cleanup, identity, &options())
            .await
            .unwrap();
        let answers = futures_util::future::join_all((0..12).map(|i| {
            let session = &session;
            async move {
                let script = format!(
                    "head -c 49152 /dev/zero | tr '\\0' '{}'",
                    (b'a' + i) as char
                );
                session.agent_sh(&script, Duration::from_secs(30)).await
            }
        }))
        .await;
        for (i, answer) in answers.into_iter().enumerate() {
            let answer = answer.unwrap();
            assert!(answer.success(), "{}", answer.summary());
            let expected = ((b'a' + i as u8) as char).to_string().repeat(49152);
            assert!(
                answer.stdout == expected,
                "exchange {i}: {} bytes, not its own 48 KiB",
                answer.stdout.len()
            );
        }

        let docker = kandev_harness::host::connect_engine().await.unwrap();
        let infra = docker
            .inspect_container(&format!("{}-infra", session.pod.name), None)
            .await
            .unwrap();
        let running = infra.exec_ids.unwrap_or_default();
        assert_eq!(
            running.len(),
            1,
            "execs running in the infra container: {running:?}"
        );

        let refused: anyhow::Error = settings
            .backend
            .port_exchange(
                &session.pod,
                "kandev-agent",
                1,
                b"x",
                Duration::from_secs(10),
            )
            .await
            .unwrap_err()
            .into();
        assert!(
            format!("{refused:#}").contains("connect 127.0.0.1:1"),
            "{refused:#}"
        );
        let after = session
            .agent_sh("echo still", Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(after.stdout.trim(), "still");
    });
    let outcome = futures_util::FutureExt::catch_unwind(result).await;
    cleanup
        .teardown(settings.backend.as_ref(), Duration::from_secs(120), false)
        .await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
