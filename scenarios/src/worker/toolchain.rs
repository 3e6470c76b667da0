//! `worker::toolchain` — each tool the worker image is expected to carry runs a tiny real job
//! as the agent user, with its caches under `/workspace` (created by preparation, after the
//! clone); tool versions go into the report; baked tools live outside the mounted paths. A
//! required tool that is missing or broken fails the scenario; a missing optional tool is a
//! finding. The lists are `--required-tools` and `--optional-tools`.
//!
//! Can fail when the worker image lacks a tool, when a tool does not work for UID 1000, when
//! the caches are not writable, or when a tool lives on a mounted path.

use kandev_harness::runner::{
    Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, broken, not_judged, promise,
};
use kandev_harness::session::SessionOptions;
use kandev_report::FindingLevel;
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;

const TOOLS: Check = Check {
    id: "tools",
    promise: "each required tool of the worker image runs a real job as the agent user",
    twin: Twin::Worker("worker-without-node"),
};
const CACHES: Check = Check {
    id: "caches",
    promise: "the tool caches under /workspace exist after preparation and are writable by the agent",
    twin: Twin::Prepare("no-tool-caches"),
};
const BAKED: Check = Check {
    id: "baked_outside_mounts",
    promise: "baked tools live outside the mounted paths",
    twin: Twin::Template("worker-tools-on-workspace"),
};

/// Caches the full-worker recipe keeps under the workspace, and the variables that point there.
const CACHE_ENV: &str = "export npm_config_cache=/workspace/.cache/npm PIP_CACHE_DIR=/workspace/.cache/pip GOCACHE=/workspace/.cache/go-build GOMODCACHE=/workspace/.cache/go-mod CARGO_HOME=/workspace/.cache/cargo PNPM_HOME=/workspace/.pnpm npm_config_store_dir=/workspace/.pnpm-store";
const CACHE_DIRS: [&str; 8] = [
    "/workspace/.cache/npm",
    "/workspace/.cache/pip",
    "/workspace/.cache/go-build",
    "/workspace/.cache/go-mod",
    "/workspace/.cache/cargo",
    "/workspace/.npm-global",
    "/workspace/.pnpm",
    "/workspace/.pnpm-store",
];

pub fn scenario() -> Scenario {
    Scenario {
        name: "worker::toolchain",
        promise: "the worker image's toolchain works as the agent user with caches under `/workspace`; tool versions go into the report; baked tools live outside mounted paths",
        checks: &[CACHES, TOOLS, BAKED],
        timeout: Duration::from_secs(300),
        starts_first: true,
        run,
    }
}

/// A tool: the binary to find, how to print its version, and a tiny real job in `$W`
/// (a fresh folder under the workspace) that prints `ok` last.
pub struct Tool {
    pub binary: &'static str,
    pub version: &'static str,
    pub job: &'static str,
}

/// Every tool this scenario knows, by name.
pub const KNOWN_TOOLS: &str =
    "git, python-venv, c, node, pnpm, go, rust, docker, buildx, compose, playwright, golangci-lint";

/// The tool called `name` (a name of `--required-tools`), if known.
pub fn tool(name: &str) -> Option<Tool> {
    Some(match name {
        "git" => Tool {
            binary: "git",
            version: "git --version",
            job: "cd $W && git init -q r && cd r && git -c user.email=a@b.c -c user.name=agent commit -q --allow-empty -m first && test \"$(git rev-list --count HEAD)\" = 1 && echo ok",
        },
        "python-venv" => Tool {
            binary: "python3",
            version: "python3 --version",
            job: "cd $W && python3 -m venv venv && printf 'import unittest\\nclass T(unittest.TestCase):\\n    def test_sum(self):\\n        self.assertEqual(sum([1, 2]), 3)\\n' > test_t.py && venv/bin/python -m unittest -q test_t 2>&1 && echo ok",
        },
        "c" => Tool {
            binary: "cc",
            version: "cc --version | head -n1",
            job: "cd $W && printf '#include <stdio.h>\\nint main(void){printf(\"hello-c\\\\n\");return 0;}\\n' > h.c && cc -o h h.c && ./h | grep -qx hello-c && echo ok",
        },
        "node" => Tool {
            binary: "node",
            version: "node --version",
            job: "cd $W && echo 'console.log(6 * 7)' > t.js && test \"$(node t.js)\" = 42 && echo ok",
        },
        "docker" => Tool {
            binary: "docker",
            version: "docker --version",
            job: "docker version --format '{{.Server.Version}}' >/dev/null && echo ok",
        },
        "compose" => Tool {
            binary: "docker",
            version: "docker compose version 2>/dev/null || docker-compose version --short",
            job: "cd $W && printf 'services:\\n  a:\\n    image: scratch\\n' > compose.yml && { docker compose -f compose.yml config -q 2>/dev/null || docker-compose -f compose.yml config -q; } && echo ok",
        },
        "buildx" => Tool {
            binary: "docker",
            version: "docker buildx version",
            job: "docker buildx ls >/dev/null && echo ok",
        },
        "go" => Tool {
            binary: "go",
            version: "go version",
            job: "cd $W && printf 'package main\\nimport \"fmt\"\\nfunc main(){fmt.Println(\"hello-go\")}\\n' > m.go && go run m.go | grep -qx hello-go && echo ok",
        },
        "rust" => Tool {
            binary: "cargo",
            version: "cargo --version",
            job: "cd $W && cargo new -q --offline t && cd t && cargo run -q --offline | grep -qx 'Hello, world!' && echo ok",
        },
        "pnpm" => Tool {
            binary: "pnpm",
            version: "pnpm --version",
            job: "cd $W && printf '{\"name\":\"t\",\"version\":\"1.0.0\",\"private\":true,\"scripts\":{\"test\":\"node t.js\"}}\\n' > package.json && echo 'console.log(6 * 7)' > t.js && npm_config_update_notifier=false pnpm test | grep -qx 42 && echo ok",
        },
        "playwright" => Tool {
            binary: "node",
            version: "node -p 'require(\"playwright-core/package.json\").version'",
            job: "cd $W && printf '<p id=p>a</p><script>document.getElementById(\"p\").textContent=\"b\"</script>' > p.html && printf 'const {chromium}=require(\"playwright-core\");(async()=>{const b=await chromium.launch({executablePath:process.env.FULL_WORKER_BROWSER||\"/usr/bin/chromium\",args:[\"--no-sandbox\"]});const p=await b.newPage();await p.goto(\"file://\"+process.argv[2]);console.log(await p.textContent(\"#p\"));await b.close()})().catch(e=>{console.error(e);process.exit(1)})' > b.js && test \"$(timeout 90 node b.js $W/p.html)\" = b && echo ok",
        },
        "golangci-lint" => Tool {
            binary: "golangci-lint",
            version: "golangci-lint version",
            job: "golangci-lint version | grep -q 'version 2\\.' && cd $W && printf 'module t\\n\\ngo 1.24\\n' > go.mod && printf 'package t\\n\\n// Add adds.\\nfunc Add(a, b int) int { return a + b }\\n' > t.go && golangci-lint run ./... && echo ok",
        },
        _ => return None,
    })
}

/// The agent's probe of the cache folders: one line per folder, `ok <dir>` when it is a
/// writable folder, `missing <dir>` otherwise.
fn caches_probe() -> String {
    format!(
        "for d in {}; do if [ -d \"$d\" ] && [ -w \"$d\" ]; then echo \"ok $d\"; else echo \"missing $d\"; fi; done",
        CACHE_DIRS.join(" ")
    )
}

/// What is wrong with the caches, judged from the probe's answer: every folder must be
/// answered `ok` by a probe that succeeded (an empty or failed answer shows nothing).
fn missing_caches(success: bool, stdout: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    if !success {
        wrong.push("the probe of the cache folders failed".to_owned());
    }
    for dir in CACHE_DIRS {
        if !stdout.lines().any(|l| l.trim() == format!("ok {dir}")) {
            let seen = stdout
                .lines()
                .find(|l| l.trim().ends_with(&format!(" {dir}")))
                .map_or("no answer", str::trim);
            wrong.push(format!("{dir}: {seen}"));
        }
    }
    wrong
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        ctx.step("launch");
        let session = ctx.launch(SessionOptions::default()).await?;

        ctx.step("caches under /workspace");
        let caches = session
            .agent_sh(&caches_probe(), Duration::from_secs(20))
            .await?;
        ctx.evidence("caches", caches.stdout.lines().collect::<Vec<_>>());
        let wrong = missing_caches(caches.success(), &caches.stdout);
        promise(wrong.is_empty(), &CACHES, || {
            format!("{}; probe: {}", wrong.join("; "), caches.summary())
        })?;

        ctx.step("tool jobs as the agent");
        let required = ctx.config().required_tools.clone();
        let optional = ctx.config().optional_tools.clone();
        let mut versions = BTreeMap::new();
        let mut failures = Vec::new();
        let mut on_mounts = Vec::new();
        for (name, is_required) in required
            .iter()
            .map(|n| (n, true))
            .chain(optional.iter().map(|n| (n, false)))
        {
            let Some(t) = tool(name) else {
                return Err(broken(
                    &TOOLS,
                    format!("unknown tool {name:?}; known: {KNOWN_TOOLS}"),
                ));
            };
            let script = format!(
                "{CACHE_ENV}; p=$(command -v {bin}) || {{ echo missing; exit 0; }}; v=$({version} 2>&1) || {{ echo missing; exit 0; }}; echo \"path $p\"; echo \"version $(echo \"$v\" | head -n1)\"; W=$(mktemp -d /workspace/.kandev-acceptance-tool-XXXXXX); export W; ( {job} ) 2>&1 | tail -n 5; rm -rf \"$W\"",
                bin = t.binary,
                version = t.version,
                job = t.job
            );
            let out = session.agent_sh(&script, Duration::from_secs(120)).await?;
            let text = out.stdout.clone();
            if text.trim() == "missing" {
                if is_required {
                    failures.push(format!("{name}: not in the worker image (`{}` not on the agent's PATH, or `{}` fails)", t.binary, t.version));
                } else {
                    ctx.finding(
                        FindingLevel::Info,
                        "worker.optional_tool_missing",
                        format!("optional tool {name} is not in the worker image"),
                        json!({"tool": name}),
                    );
                }
                continue;
            }
            let path = text
                .lines()
                .find_map(|l| l.strip_prefix("path "))
                .unwrap_or_default()
                .to_owned();
            let version = text
                .lines()
                .find_map(|l| l.strip_prefix("version "))
                .unwrap_or_default()
                .to_owned();
            versions.insert(
                name.clone(),
                json!({"version": version, "path": path, "job_ms": out.duration_ms}),
            );
            if ["/workspace", "/opt/kandev", "/run/kandev"]
                .iter()
                .any(|m| path.starts_with(&format!("{m}/")))
            {
                on_mounts.push(format!("{name} at {path}"));
            }
            if text.lines().last().map(str::trim) != Some("ok") {
                let message = format!("{name}: the job failed: {}", text.trim());
                if is_required {
                    failures.push(message);
                } else {
                    ctx.finding(
                        FindingLevel::Warning,
                        "worker.optional_tool_broken",
                        message,
                        json!({"tool": name}),
                    );
                }
            }
        }
        ctx.evidence("tools", &versions);
        // A check of no tool judged nothing: said so, never passed.
        if required.is_empty() {
            not_judged(
                &TOOLS,
                "no required tool is configured (--required-tools is empty): no tool's job was run",
            );
        }
        promise(failures.is_empty(), &TOOLS, || failures.join("; "))?;
        // Where each tool lives, from its own `command -v` answer: a tool that ran without
        // saying where it is makes the check fail, and none found judges nothing.
        let unplaced: Vec<&String> = versions
            .iter()
            .filter(|(_, v)| !v["path"].as_str().is_some_and(|p| p.starts_with('/')))
            .map(|(name, _)| name)
            .collect();
        if versions.is_empty() {
            not_judged(
                &BAKED,
                "no tool of the worker image was found: there is no tool whose place to judge",
            );
        }
        promise(on_mounts.is_empty() && unplaced.is_empty(), &BAKED, || {
            format!(
                "{}{}",
                on_mounts.join("; "),
                if unplaced.is_empty() {
                    String::new()
                } else {
                    format!("; no absolute path for {unplaced:?}")
                }
            )
        })?;
        Ok(Verdict::Passed)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every cache folder must be answered `ok` by a probe that succeeded: an empty answer
    /// (a probe that never ran) or a failed one fails the check.
    #[test]
    fn caches_hold_only_when_the_probe_answered_ok_for_each() {
        let all_ok: String = CACHE_DIRS.iter().map(|d| format!("ok {d}\n")).collect();
        assert!(missing_caches(true, &all_ok).is_empty());
        assert_eq!(missing_caches(true, "").len(), CACHE_DIRS.len());
        assert_eq!(missing_caches(false, &all_ok).len(), 1);
        let one_missing = all_ok.replace("ok /workspace/.pnpm\n", "missing /workspace/.pnpm\n");
        assert_eq!(
            missing_caches(true, &one_missing),
            vec!["/workspace/.pnpm: missing /workspace/.pnpm".to_owned()]
        );
    }

    /// The probe as the agent runs it (through sh): on this host the folders do not exist,
    /// and every one is missing.
    #[test]
    fn the_caches_probe_reports_each_folder() {
        let out = std::process::Command::new("sh")
            .args(["-c", &caches_probe()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        if !std::path::Path::new("/workspace").exists() {
            assert_eq!(
                missing_caches(out.status.success(), &text).len(),
                CACHE_DIRS.len()
            );
            assert_eq!(
                text.lines().filter(|l| l.starts_with("missing ")).count(),
                CACHE_DIRS.len()
            );
        }
    }
}
