#!/usr/bin/env bash
# Everything the harness's own tests need on a fresh Debian machine, so that the README's test
# command is the one command a newcomer runs: a Docker engine (ensure-engine.sh), and the tools
# the tests call besides the engine, and the fixture images started building in the background
# (below). Idempotent: installs only what is missing.
#   xmllint (libxml2-utils)  junit.xml against the JUnit XSD (harness/tests/output_schemas.rs)
#   chromium                 report.html rendered headless (scenarios/tests/report_html.rs)
#   Kubernetes (ensure-kind.sh)  etcd, kube-apiserver, its controller manager and scheduler,
#                            built from pinned Go modules (kind/pins.env): the real_api_server
#                            tests start them; kind and a Kind node image: the on_real_kind
#                            tests' cluster. Cached, so only the first call builds
set -euo pipefail
cd "$(dirname "$0")/../.."

log() { printf 'ensure-test-deps: %s\n' "$*" >&2; }

# The fixture images (below) need the harness binary, and take minutes on a fresh engine,
# mostly apt downloading and unpacking: the binary is compiled first, beside the installs
# here (network and disk, not CPU), so that the images start as early as they can. It comes
# from a test build of one integration test that needs it (CARGO_BIN_EXE_kandev-acceptance):
# a test build resolves the dependencies' features as the test command does (a plain `cargo
# build` would not: the tests' dev-dependencies add features, and every crate would be
# compiled twice). KANDEV_PREBUILD_IMAGES=0 leaves the images to the tests.
prebuild=0
if [ "${KANDEV_PREBUILD_IMAGES:-1}" != 0 ]; then
  prebuild=1
  cargo test -q --workspace --no-run --test installed_binary &
  build=$!
  # Stopped early (a missing tool, an engine that will not start): the build goes too.
  trap 'for job in ${build:-} ${kube:-}; do kill "$job" 2>/dev/null || true; done' EXIT
fi

# Kubernetes from its Go modules: minutes of CPU the first time on a machine (beside the Rust
# build, both compile), nothing once built. Its log goes to a file, its errors to stderr.
kube_log=$(mktemp)
bash harness/scripts/ensure-kind.sh --programs-only >"$kube_log" 2>&1 &
kube=$!

need=()
command -v xmllint >/dev/null || need+=(libxml2-utils)
command -v chromium >/dev/null || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    log "missing ${need[*]}: install them (Debian: apt-get install ${need[*]}), then retry"
    exit 3
  fi
  log "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# The tests' build (target/, ~3 GB) and the engine's images and Pods (/var/lib/docker, ~8 GB)
# need room; a full disk shows up much later as a linker's bus error. Say so first.
free_gb=$(df -P -BG . | awk 'NR == 2 { sub("G", "", $4); print $4 }')
if [ "${free_gb:-0}" -lt 12 ]; then
  log "warning: ${free_gb} GB free on $(df -P . | awk 'NR == 2 { print $6 }'); the tests need about 12 GB (target/ and /var/lib/docker): free some space, or expect 'No space left on device'"
fi

bash harness/scripts/ensure-engine.sh

if ! wait "$kube"; then
  kube=
  cat "$kube_log" >&2
  log "Kubernetes could not be built from its Go modules (above): fix it, then retry"
  exit 3
fi
kube=
grep -E '^ensure-kind: (built|programs|linked)' "$kube_log" >&2 || true
# Then the Kind node image from those programs (the on_real_kind tests' cluster): minutes the
# first time (debootstrap, the control-plane images), seconds once it is in the engine.
bash harness/scripts/ensure-kind.sh

# The first engine test waits on `image fixtures`' image lock, then reuses what it built.
if [ "$prebuild" = 1 ]; then
  if ! wait "$build"; then
    build=
    log "the test build of the harness binary failed (above): fix it, then retry"
    exit 1
  fi
  build=
  target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
  nohup "$target/debug/kandev-acceptance" image fixtures >"$target/image-fixtures.log" 2>&1 </dev/null &
  log "building the fixture images in the background (log: $target/image-fixtures.log)"
fi
