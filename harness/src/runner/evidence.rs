//! Evidence of a scenario that did not pass, collected before its teardown: every
//! container's logs, the backend's own diagnostics, the nested daemon's state and the Pod
//! cgroup's reading, under `reports/<run>/<scenario>/`, each capped at 1 MiB; and for every
//! scenario, what its Pods consumed (CPU time, peak memory).

use super::context::Ctx;
use kandev_report::ResourceUsage;
use serde_json::json;
use std::time::Duration;

/// The nested daemon's state: `info`, every container (running or not) with the tail of its
/// logs, volumes and networks.
const NESTED_DAEMON_STATE: &str = r#"export DOCKER_HOST="${DOCKER_HOST:-unix:///run/docker/docker.sock}"
docker info 2>&1; echo; docker ps -a --no-trunc 2>&1; echo
for c in $(docker ps -aq 2>/dev/null); do
  echo "== logs of nested container $c (last 200 lines)"; docker logs --tail 200 "$c" 2>&1; echo
done
docker volume ls 2>&1; docker network ls 2>&1
"#;

/// Before teardown of a scenario that did not pass: container logs and the nested
/// daemon's state, under `reports/<run>/<scenario>/`, size-capped.
pub(super) async fn collect(ctx: &Ctx) -> Vec<String> {
    let (run, env) = (ctx.run.as_ref(), ctx.env.as_ref());
    let folder = run.report_folder();
    let scenario_dir = ctx.scenario().replace("::", "-");
    let dir = folder.join(&scenario_dir);
    if std::fs::create_dir_all(&dir).is_err() {
        return Vec::new();
    }
    let mut written = Vec::new();
    let backend = &env.backend;
    let mut save = |name: String, text: String| {
        let text: String = text.chars().take(1 << 20).collect();
        if std::fs::write(dir.join(&name), text).is_ok() {
            written.push(format!("{scenario_dir}/{name}"));
        }
    };
    for pod in ctx.cleanup.pods() {
        let states = backend.container_states(&pod).await.unwrap_or_default();
        save(format!("{}.containers.json", pod.name), serde_json::to_string_pretty(&states.iter().map(|s| json!({"name": s.name, "running": s.running, "restarts": s.restarts, "exit_code": s.exit_code})).collect::<Vec<_>>()).unwrap_or_default());
        for state in &states {
            if let Ok(logs) = backend.logs(&pod, &state.name).await {
                save(format!("{}.{}.log", pod.name, state.name), logs);
            }
        }
        // Kubernetes: the Pod object, its events, previous container logs.
        for (suffix, text) in backend.diagnostics(&pod).await {
            save(format!("{}.{suffix}", pod.name), text);
        }
        let daemon = crate::backend::ExecRequest::new(
            &run.config.daemon_container,
            &["sh", "-c", NESTED_DAEMON_STATE],
        )
        .timeout(Duration::from_secs(30));
        if let Ok(out) = backend.exec(&pod, daemon).await {
            save(
                format!("{}.daemon-state.txt", pod.name),
                format!("{}{}", out.stdout_text(), out.stderr_text()),
            );
        }
        if let Some(node) = &env.node
            && let Ok(Some(path)) = node.pod_cgroup(&pod.uid).await
            && let Ok(reading) = node.read_cgroup(&path).await
        {
            save(
                format!("{}.cgroup.json", pod.name),
                serde_json::to_string_pretty(
                    &json!({"node": node.describe(), "cgroup": path, "reading": reading}),
                )
                .unwrap_or_default(),
            );
        }
    }
    written
}

/// Before teardown: the CPU time and memory peak of the scenario's Pods still there, from their
/// Pod cgroups through the node view; None without a node view or when no cgroup was read.
pub(super) async fn resources(ctx: &Ctx) -> Option<ResourceUsage> {
    let node = ctx.env.node.as_ref()?;
    let mut used = ResourceUsage::default();
    for pod in ctx.cleanup.pods() {
        let Ok(Some(path)) = node.pod_cgroup(&pod.uid).await else {
            continue;
        };
        let Ok(reading) = node.read_cgroup(&path).await else {
            continue;
        };
        let Some(cpu) = reading.cpu_usage_nanos else {
            continue;
        };
        used.pods += 1;
        used.cpu_ms += cpu / 1_000_000;
        used.memory_peak_bytes =
            match (used.pods, used.memory_peak_bytes, reading.memory_peak_bytes) {
                (1, _, peak) => peak,
                (_, Some(sum), Some(peak)) => Some(sum + peak),
                _ => None,
            };
    }
    (used.pods > 0).then_some(used)
}
