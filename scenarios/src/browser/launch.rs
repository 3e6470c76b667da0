//! `browser::launch` — a headless browser from the worker image, run as the agent, renders a
//! page from `/workspace` whose script changes the DOM, and writes a screenshot whose PNG
//! signature, dimensions and size are checked. If the browser cannot use its sandbox in the
//! hardened container, that is reported as a finding naming the flag that made it work.
//!
//! Can fail when the browser cannot start in the agent container (no writable temporary
//! folder, missing libraries), when the page's script does not run, or when the screenshot is
//! missing, empty or the wrong size. A worker without a browser is `incompatible`.

use kandev_harness::runner::{Check, Ctx, Scenario, ScenarioFuture, Twin, Verdict, promise};
use kandev_harness::session::SessionOptions;
use kandev_report::Capability;
use kandev_report::FindingLevel;
use serde_json::json;
use std::time::Duration;

const RENDERS: Check = Check {
    id: "renders",
    promise: "a headless browser renders a page from /workspace and runs its script",
    twin: Twin::Template("agent-readonly-rootfs"),
};
const SCREENSHOT: Check = Check {
    id: "screenshot",
    promise: "the browser writes a PNG screenshot of the requested size",
    twin: Twin::Worker("worker-browser-hidpi"),
};
const WIDTH: u32 = 800;
const HEIGHT: u32 = 600;
/// Flags every start needs on a machine with no network beyond package registries.
const QUIET: &str = "--headless --disable-gpu --no-first-run --disable-background-networking --disable-component-update --disable-sync --disable-dev-shm-usage";

pub fn scenario() -> Scenario {
    Scenario {
        name: "browser::launch",
        promise: "a headless browser from the worker image renders a page from `/workspace`, runs its script, and writes a screenshot whose PNG header and size are checked",
        checks: &[RENDERS, SCREENSHOT],
        timeout: Duration::from_secs(300),
        starts_first: false,
        run,
    }
}

/// Width and height from a PNG's first 24 bytes (signature + IHDR), given as hex pairs.
pub fn png_dimensions(hex: &str) -> Option<(u32, u32)> {
    let bytes: Vec<u8> = hex
        .split_whitespace()
        .filter_map(|b| u8::from_str_radix(b, 16).ok())
        .collect();
    if bytes.len() < 24
        || bytes.get(..8) != Some(&[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a])
        || bytes.get(12..16) != Some(b"IHDR")
    {
        return None;
    }
    let be = |r: std::ops::Range<usize>| {
        bytes
            .get(r)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(u32::from_be_bytes)
    };
    Some((be(16..20)?, be(20..24)?))
}

fn run(ctx: &mut Ctx) -> ScenarioFuture<'_> {
    Box::pin(async move {
        ctx.step("launch and find the browser");
        let session = ctx.launch(SessionOptions::default()).await?;
        let found = session
            .agent_sh("for b in chromium chromium-browser google-chrome chrome headless_shell; do p=$(command -v $b) && { echo $p; $p --version 2>/dev/null | head -n1; exit 0; }; done; ls /opt/full-worker/browsers/*/chrome-linux/headless_shell 2>/dev/null | head -n1", Duration::from_secs(30))
            .await?;
        let mut lines = found.stdout.lines();
        let browser = lines.next().unwrap_or_default().trim().to_owned();
        ctx.evidence(
            "browser",
            json!({"path": browser, "version": lines.next().unwrap_or_default().trim()}),
        );
        if browser.is_empty() {
            return Ok(Verdict::Lacks(Capability::Browser, "the worker image has no headless browser (looked for chromium, chromium-browser, google-chrome, chrome, headless_shell)".into()));
        }

        ctx.step("render the page and run its script");
        let marker = kandev_harness::pod::identity::random_hex(6);
        let page = format!(
            "<!doctype html><html><head><title>pending</title><style>body{{background:#2b6cb0;color:#fff;font:32px sans-serif}}</style></head><body><h1 id=status>script did not run</h1><script>document.getElementById('status').textContent='script-ran-{marker}-'+(6*7);document.title='done';</script></body></html>"
        );
        let write = session.agent_sh(&format!("mkdir -p /workspace/browser-probe && cat > /workspace/browser-probe/index.html <<'EOF'\n{page}\nEOF"), Duration::from_secs(10)).await?;
        promise(write.success(), &RENDERS, || write.summary())?;
        let url = "file:///workspace/browser-probe/index.html";
        let render = |sandbox: bool| {
            let flags = if sandbox {
                QUIET.to_owned()
            } else {
                format!("{QUIET} --no-sandbox")
            };
            format!(
                "profile=$(mktemp -d) && timeout 90 {browser} {flags} --user-data-dir=\"$profile\" --dump-dom {url}; rc=$?; rm -rf \"$profile\"; exit $rc"
            )
        };
        let mut dom = session
            .agent_sh(&render(true), Duration::from_secs(120))
            .await?;
        let mut sandbox = true;
        if !dom.stdout.contains(&format!("script-ran-{marker}-42")) {
            ctx.evidence("with_sandbox", dom.summary());
            sandbox = false;
            dom = session
                .agent_sh(&render(false), Duration::from_secs(120))
                .await?;
            if dom.stdout.contains(&format!("script-ran-{marker}-42")) {
                ctx.finding(
                    FindingLevel::Warning,
                    "browser.sandbox_unavailable",
                    "the browser cannot use its sandbox in the hardened agent container (no capabilities, no privilege escalation); it worked with --no-sandbox",
                    json!({"flag": "--no-sandbox", "browser": browser}),
                );
            }
        }
        ctx.evidence("sandbox", sandbox);
        ctx.evidence(
            "dom_excerpt",
            dom.stdout
                .lines()
                .find(|l| l.contains("status"))
                .unwrap_or_default(),
        );
        promise(
            dom.stdout.contains(&format!("script-ran-{marker}-42")),
            &RENDERS,
            || {
                format!(
                    "the rendered DOM lacks the script's text: {}",
                    dom.summary()
                )
            },
        )?;

        ctx.step("screenshot");
        let flags = if sandbox {
            QUIET.to_owned()
        } else {
            format!("{QUIET} --no-sandbox")
        };
        let shot = "/workspace/browser-probe/screenshot.png";
        let take = session
            .agent_sh(&format!("profile=$(mktemp -d) && timeout 90 {browser} {flags} --user-data-dir=\"$profile\" --window-size={WIDTH},{HEIGHT} --screenshot={shot} {url}; rc=$?; rm -rf \"$profile\"; od -An -tx1 -N24 {shot}; exit $rc"), Duration::from_secs(120))
            .await?;
        let header: String = take
            .stdout
            .lines()
            .rev()
            .take(2)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join(" ");
        let size = session
            .agent()?
            .exec(
                &kandev_harness::session::agent::AgentExec::sh("true", Duration::from_secs(10))
                    .digests(&[shot]),
            )
            .await?
            .digests
            .first()
            .and_then(|d| d.size);
        let dims = png_dimensions(&header);
        ctx.evidence("png", json!({"dimensions": dims, "bytes": size}));
        // Kept beside the report (report.html embeds it): <scenario>/screenshot.png.
        let png = session
            .in_main(&["cat", shot], Duration::from_secs(30))
            .await;
        let kept = format!("{}/screenshot.png", ctx.scenario().replace("::", "-"));
        let folder = ctx.config().report_dir.join(ctx.run_id());
        if let Ok(png) = png
            && png.stdout.starts_with(b"\x89PNG")
            && std::fs::create_dir_all(folder.join(ctx.scenario().replace("::", "-"))).is_ok()
            && std::fs::write(folder.join(&kept), &png.stdout).is_ok()
        {
            ctx.evidence("screenshot", kept);
        }
        promise(
            dims == Some((WIDTH, HEIGHT)) && size.unwrap_or(0) > 2048,
            &SCREENSHOT,
            || {
                format!(
                    "screenshot {shot}: dimensions {}, {} bytes; {}",
                    dims.map_or_else(|| "unknown".to_owned(), |(w, h)| format!("{w}x{h}")),
                    crate::support::or_unknown(size),
                    take.summary()
                )
            },
        )?;
        Ok(Verdict::Passed)
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_png_dimensions() {
        let hex = "89 50 4e 47 0d 0a 1a 0a 00 00 00 0d 49 48 44 52 00 00 03 20 00 00 02 58";
        assert_eq!(super::png_dimensions(hex), Some((800, 600)));
        assert_eq!(super::png_dimensions("00 11"), None);
    }
}
