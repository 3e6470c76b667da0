#!/usr/bin/env bash
# Makes a Docker engine reachable for kandev-acceptance. Idempotent: when an engine already
# answers (DOCKER_HOST or the default socket) it does nothing. Otherwise (root, Debian) it
# installs Debian's docker.io, docker-compose, debootstrap and iptables, registers a runtime that
# works around a missing CAP_SYS_RESOURCE in the capability bounding set (sandboxed hosts,
# where `--privileged` otherwise fails with "unable to apply caps"), and starts dockerd.
set -euo pipefail

log() { printf 'ensure-engine: %s\n' "$*" >&2; }

if docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
  log "engine reachable ($(docker version --format '{{.Server.Version}}')); nothing to do"
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  log "no Docker engine answers and this is not root: start an engine or set DOCKER_HOST, then retry"
  exit 3
fi

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v iptables >/dev/null || need+=(iptables)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Bit 24 of CapBnd is CAP_SYS_RESOURCE. Without it runc cannot grant a privileged container
# the full set, so a wrapper drops that one capability from the OCI spec before calling runc.
capbnd=$(awk '/^CapBnd/ {print $2}' /proc/self/status)
runtime_args=()
if (( (16#$capbnd >> 24 & 1) == 0 )); then
  wrapper=/usr/local/libexec/kandev-acceptance/runc-without-sys-resource
  mkdir -p "$(dirname "$wrapper")"
  cat >"$wrapper" <<'WRAP'
#!/bin/sh
# OCI runtime wrapper: removes CAP_SYS_RESOURCE (absent from this host's bounding set) from
# the container or exec process spec, then hands over to runc unchanged.
# The spec is JSON (compact from containerd, indented once rewritten). sed removes every
# string element "CAP_SYS_RESOURCE" with its separating comma in ~2 ms, where jq took ~27 ms on
# every container start and exec. Unlike jq it does not look at where the string is: an argv
# element or a value exactly "CAP_SYS_RESOURCE" would go too (no spec the harness makes has one).
strip() {
  [ -f "$1" ] || return 0
  tmp="$1.kandev-tmp"
  sed -z -E -e 's/"CAP_SYS_RESOURCE"[[:space:]]*,[[:space:]]*//g' \
    -e 's/,[[:space:]]*"CAP_SYS_RESOURCE"//g' -e 's/"CAP_SYS_RESOURCE"//g' "$1" >"$tmp" && mv "$tmp" "$1"
}
prev=""
for arg in "$@"; do
  case "$prev" in
    --bundle|-b) strip "$arg/config.json" ;;
    --process|-p) strip "$arg" ;;
  esac
  case "$arg" in
    --bundle=*) strip "${arg#--bundle=}/config.json" ;;
    --process=*) strip "${arg#--process=}" ;;
  esac
  prev="$arg"
done
exec runc "$@"
WRAP
  chmod 0755 "$wrapper"
  runtime_args=(--add-runtime "kandev-capfix=$wrapper" --default-runtime kandev-capfix)
  log "CAP_SYS_RESOURCE missing from the bounding set: using $wrapper as the default runtime"
fi

# The engine runs in a CPU-accounting cgroup of its own, as a systemd unit would: the report's
# cost section reads dockerd's, containerd's and the shims' CPU from it (exact, exited shims
# included). Best effort: without it the harness counts the live processes instead.
cg=
if [ -d /sys/fs/cgroup/cpuacct ]; then cg=/sys/fs/cgroup/cpuacct/kandev-engine
elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then cg=/sys/fs/cgroup/kandev-engine; fi
if [ -n "$cg" ] && mkdir -p "$cg" 2>/dev/null && [ -w "$cg/cgroup.procs" ]; then
  log "dockerd runs in cgroup ${cg#/sys/fs/cgroup/}"
else
  cg=
fi
log "starting dockerd (log: /var/log/kandev-acceptance-dockerd.log)"
# shellcheck disable=SC2016 # $$ is the inner shell's PID, which exec hands to dockerd
nohup sh -c '[ -z "$1" ] || echo $$ > "$1/cgroup.procs" || true; shift; exec dockerd "$@"' \
  sh "$cg" "${runtime_args[@]}" >/var/log/kandev-acceptance-dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  if docker version --format '{{.Server.Version}}' >/dev/null 2>&1; then
    log "engine ready ($(docker version --format '{{.Server.Version}}'))"
    exit 0
  fi
  sleep 1
done
log "dockerd did not answer within 60 s; last lines of its log:"
tail -n 20 /var/log/kandev-acceptance-dockerd.log >&2 || true
exit 3
