#!/usr/bin/env bash
# The nested work of one catalogue run (`kandev-acceptance run`, local backend, default
# settings, all 21 scenarios), done by hand: serially, in one shell, with the plain docker CLI,
# no harness and no checks. It is the yardstick of the harness's own overhead
# (harness/scripts/bench-catalogue.sh runs both alternately), so it does what runs inside the
# catalogue's Pods, and only that.
#
# Usage: hand-run-baseline.sh WORKER_IMAGE DAEMON_IMAGE MOCK_AGENT_BINARY
#        hand-run-baseline.sh --scenarios   (the catalogue's scenarios it does, one a line)
#   Environment (defaults = the catalogue's defaults; bench-catalogue.sh passes the run's):
#   POD_MTU (1450), DOCKER_READY_TIMEOUT_SECONDS (60), REQUIRED_TOOLS ("git python-venv c node
#   pnpm go rust docker buildx compose playwright"), OPTIONAL_TOOLS ("golangci-lint"),
#   PREPARE_SCRIPT (the fixture's), BASELINE_CGROUP (/kandev-baseline: the Pod containers'
#   cgroup parent).
#
# THE SAME AS THE CATALOGUE
# - 27 Pods of sessions, as the 19 Pod scenarios make them (template::grant_rules and
#   launch::causal_failures make none), plus network::mtu's HTTPS peer: 28 Pods; 29 sessions
#   (lifecycle::task_sessions' two further sessions join its Pod). The report's
#   summary.resources.pods, 24, counts only the Pods still there at each scenario's teardown:
#   not the replaced Pods of stop_retains and replacement_snapshot, teardown_exact's owned
#   one, nor task_sessions' Pod, which its terminal cleanup deletes. 24 are launched (bootstrap
#   + prepare), 1 is prepared without a daemon (docker_gate), 2 are only created
#   (teardown_exact's look-alikes, emptyDir workspace). replacement_snapshot's Pods carry its
#   third container (the observer companion).
# - launch::causal_failures' three impossible launches create nothing on the local engine, here
#   as there: the absent image (`registry.invalid/...`) and the missing claim are looked up
#   (`docker image inspect`, `docker volume inspect`; both fail, nothing is pulled) and the
#   unsatisfiable nodeSelector is refused before any engine call; the restricted identity does
#   not apply locally (no RBAC).
# - Each Pod as the rendered fixtures/templates/full-worker.yaml composes it: kandev-agent
#   (worker image, UID/GID 1000, fsGroup 1000, cap-drop ALL, no-new-privileges, default
#   seccomp, memory 4Gi = swap, 2 CPUs, cpu-shares 256, restart always, workdir /workspace,
#   DOCKER_HOST, the bootstrap command that waits for the start marker and execs agentctl) and
#   docker-engine (daemon image, root, privileged, memory 3Gi = swap, 2 CPUs, cpu-shares 256,
#   restart always, the template's `/bin/sh -ceu` script verbatim: MTU from the default route,
#   dockerd on the socket with --group=1000, --mtu and
#   --default-network-opt=bridge=com.docker.network.driver.mtu, overlay2, cgroupfs,
#   --cgroup-parent=docker); volumes docker-socket (tmpfs 16 MiB), docker-data,
#   kandev-runtime, kandev-auth (tmpfs), the workspace (a named volume; emptyDir for the
#   look-alikes), all mounted nocopy; the Pods on a bridge network with the Pod MTU (1450).
# - Bootstrap as the harness runs it: one exec writes agentctl (from stdin), runtime.env,
#   prepare.sh, the session's and the shared auth.env (Kandev's `put`: umask 077, temp file,
#   rename); the prepare script runs through the runtime environment (its Docker gate: `timeout
#   3 docker info` once a second; git config; the caches); then auth.env is reduced and the
#   prepared/start markers written, so agentctl starts. The absent-daemon Pod (daemon command
#   `exec sleep 3600`, DOCKER_READY_TIMEOUT_SECONDS=2) runs the gate until it gives up.
#   image::recipe's Pod is created first, its repository bundle made in kandev-agent, then
#   bootstrapped with KANDEV_REPOSITORY_BUNDLE in the profile environment (both auth.env
#   files), so its prepare clones the bundle into /workspace before the caches.
#   task_sessions' two joining sessions: one exec each writes the session's auth.env into its
#   own home (`put`), no new Pod, claim or preparation.
# - The nested work of every scenario, its scripts copied from scenarios/src: workload builds,
#   nested runs, binds (the HOME probe's physical path), writes and the digests at a
#   transfer's other end, Compose detection, up, service states, logs, down -v and the
#   leftover listing, Chromium (version, the sandboxed attempt, the --no-sandbox retry when it
#   fails, the screenshot), the TLS client image, MTU probes, the 64 MiB HTTPS transfer from
#   the peer, the 32 MiB holder and the hog beyond the Pod's 7 GiB (7424 MiB, killed at the
#   companion's 3 GiB), each required and optional tool's version and job (playwright's
#   Chromium page included), image::recipe's reads of the worker and daemon images (config,
#   history, and every overlay2 layer file the scan reads, ~42k, searched for the same kinds
#   of credentials) and the recipe tools' versions, the recipe's own smoke (`bash
#   /opt/full-worker/smoke.sh --all` as the agent: Go vet/test/build, pnpm, the browser, a
#   scratch build, the nested HTTPS fetch, Compose), cross-session objects, visibility and
#   tcp:// probes, session processes started, stopped (waiting for their exit) and started
#   again, the replacement Pods on the kept workspace, agent_restart's nested keeper, its
#   `kill 1` in kandev-agent as the agent user and the wait for the engine to restart the
#   container (same Pod, restart count up), task_sessions' three session processes in one
#   Pod, each stopped in turn, teardown_exact's nested sleeper, `docker info` wherever a
#   scenario asks it, then the Pods' and workspaces' deletion.
#
# DIFFERENCES (harness plumbing, evidence-only reads, or how a hand run does it)
# - Serial: one scenario, one session at a time (the catalogue runs scenarios on 4 threads,
#   launches launch_many sessions together and joins task_sessions' two sessions together).
# - No infra container per Pod: kandev-agent owns the Pod's network and IPC namespaces and
#   docker-engine joins them. fsGroup is in place before the containers start, without an
#   exec, as the catalogue's infra container applies it in its own process: the disk volumes
#   (workspace, kandev-runtime) are host folders made group 1000 and setgid first, the memory
#   ones tmpfs mounted with gid=1000; not on docker-data (only dockerd, as root, uses it).
#   So agent_restart's restarted kandev-agent gets new namespaces and docker-engine keeps the
#   old ones (nothing here needs them shared: the daemon is reached over the socket volume);
#   in the catalogue the infra container keeps the Pod's namespaces across the restart.
# - No Pod-level cgroup (the harness's /kandev-acceptance/pod<uid>, 7 GiB, 4 CPUs, 4096 pids,
#   as the containers' parent): each container has the template's own limits, which decide
#   everything here (the hog dies at docker-engine's 3 GiB in both). Every container's parent
#   is one cgroup without limits, BASELINE_CGROUP, which only counts their CPU.
# - Commands run with `docker exec` (the agent's ones as UID 1000 in /workspace with the
#   session's HOME, not the rest of its auth.env), one exec per run of consecutive commands
#   in one container (the tool jobs and the recipe tools' versions one exec each, not one
#   request per tool), instead of an HTTP request to agentctl (which spawns `sh -c`) through
#   the Pod's port-forward tunnel once per step; agent-side digests the catalogue asks
#   agentctl for are `sha256sum`/`stat`.
# - Not done: the control-API traffic (/health polling, the nonce handshake, identity,
#   instances, health, the Resume token reattach, the joins' handshakes, the backend restarts'
#   reattach in agent_restart and task_sessions, agent_restart's reconnect after the restart),
#   so the hand run never waits for agentctl to listen; a session process is `docker exec -d
#   sh -lc 'agentctl session'` with the session's HOME and KANDEV_SESSION_ID, its Stop `kill
#   -TERM` to it (found by that variable in its environment) + wait for its exit, not
#   agentctl's instances API.
# - image::recipe's credentials scan reads the layer files with find and grep (the harness's
#   rules: files of at most 256 KiB, outside the documentation, Go sources and test data, no
#   compiled code, archives or media; the file names; the same kinds: private keys, access key
#   ids, bearer tokens, Docker auths, kubeconfig keys; without the harness's finer rules: a
#   kubeconfig's `kind: Config` with users and a token, Docker auths only with "auth" or
#   "identitytoken" or in .docker/config.json, secret-named Env variables), where the harness
#   reads them in its own process; its config and history through `docker image inspect`/`history`, one inspect
#   per image (the harness inspects the worker twice).
# - Not done, evidence-only reads: docker_gate's never-started probe (`sleep 1`, markers,
#   /proc scan, /proc/net/tcp); socket_only's socket stat, /proc/net/tcp{,6}, the companion's
#   /proc cmdline scan, the service-account listing; launch::contract's token probe in each
#   container and its /proc/net/tcp{,6} read; shared's `test ! -e` after the EROFS write;
#   compose's `test -e`/`test -s` of its files; network::mtu's Pod-MTU read and docker0's MTU
#   in the companion; cgroup::accounting's /proc/1/stat of both containers (twice);
#   toolchain's cache-folder check; image::recipe's pins `cat`, the clone's HEAD and origin
#   and the clone's and caches' `stat`; recipe_smoke's `test -f` of smoke.sh and its socket
#   and result-file read afterwards (the hand run reads the smoke's exit status instead);
#   cross_session's `ls -A /run/docker` (twice) and the marker look in B (a 2 s poll);
#   stop_retains's `cat` of the kept file in the replacement; agent_restart's `id -u` probes
#   and dockerd /proc scans (before and after); task_sessions' home and auth.env stats (twice),
#   `ls` of the homes and /proc scans of the agent processes (three times); the screenshot
#   copied into the report.
# - Not done, the checks' own waits: agent_restart's 5 s settle before judging the daemon,
#   task_sessions' 1 s after the Stop.
# - Not done, harness-side reads of the host: the engine's inspections (Pod UIDs, labels,
#   container states but agent_restart's wait for the restart, which polls the restart count,
#   host_sharing, published ports, image lookups by tag/id, the engine's daemon ID), the node
#   view (cgroup files, /proc scans for nested processes, the kernel log, the settle waits
#   after deletions), causal_failures' Pod-name lookups and its leak checks after each failed
#   launch, terminal_cleanup's identity checks and its two refused cleanups, the label sweeps
#   and leak ledger after each scenario, and the nested inventory (four listings in each Pod's
#   companion before its teardown) the ledger compares against.
# - Not done, run plumbing: setup (engine, mock-agent binary and image checks), the template
#   rendering and rule checks (template::grant_rules), the launch timing records, the report
#   (JSON, HTML, JUnit, CTRF).
# - The peer is one container on the Pod network (no infra container); the waits are the
#   work's own (the prepare gate, the peer's readiness, the session processes' exits, the
#   main container's restart).
# shellcheck disable=SC2016,SC2129 # nested scripts single-quoted on purpose; one redirect per step
set -Eeuo pipefail

# The catalogue's scenarios whose nested work this script does, in the catalogue's order
# (bench-catalogue.sh refuses to compare a run of other scenarios).
SCENARIOS=(template::grant_rules launch::contract launch::causal_failures prepare::docker_gate
  daemon::socket_only workspace::shared image::build_run bind::workspace compose::cleanup
  browser::launch network::mtu cgroup::accounting worker::toolchain image::recipe
  worker::recipe_smoke isolation::cross_session lifecycle::stop_retains
  lifecycle::replacement_snapshot lifecycle::agent_restart lifecycle::task_sessions
  lifecycle::teardown_exact)
if [ "$*" = --scenarios ]; then
  printf '%s\n' "${SCENARIOS[@]}"
  exit 0
fi
if [ $# -ne 3 ]; then
  echo "usage: $0 WORKER_IMAGE DAEMON_IMAGE MOCK_AGENT_BINARY | --scenarios" >&2
  exit 2
fi
W=$1 D=$2 A=$3
here=$(cd "$(dirname "$0")" && pwd)
PREPARE_SCRIPT=${PREPARE_SCRIPT:-$here/../../fixtures/prepare/full-worker-prepare.sh}
POD_MTU=${POD_MTU:-1450}
READY_TIMEOUT=${DOCKER_READY_TIMEOUT_SECONDS:-60}
REQUIRED_TOOLS=${REQUIRED_TOOLS:-git python-venv c node pnpm go rust docker buildx compose playwright}
OPTIONAL_TOOLS=${OPTIONAL_TOOLS:-golangci-lint}
# Every Pod container's cgroup parent (no limits of its own: the containers' limits decide, as
# before), so that bench-catalogue.sh can read what the Pods used, nested work included, as it
# reads the catalogue's Pod cgroups under kandev-acceptance/.
# Absolute: a relative parent is taken below dockerd's own cgroup (the engine's, where its CPU
# would count as the engine's).
BASELINE_CGROUP=${BASELINE_CGROUP:-/kandev-baseline}
[ -f "$A" ] || { echo "hand-run-baseline: no mock agent binary at $A" >&2; exit 2; }
[ -f "$PREPARE_SCRIPT" ] || { echo "hand-run-baseline: no prepare script at $PREPARE_SCRIPT" >&2; exit 2; }
docker image inspect "$W" "$D" >/dev/null || { echo "hand-run-baseline: build the images first (a catalogue run does)" >&2; exit 2; }
PREPARE=$(cat "$PREPARE_SCRIPT")
SIZE=$(stat -c %s "$A")

P=kandev-baseline-$$
NET=$P
# BASELINE_OUTPUT=FILE keeps what the nested commands print (default: discarded).
OUT=${BASELINE_OUTPUT:-/dev/null}
LOG=$(mktemp "${TMPDIR:-/tmp}/$P.XXXXXX.log")
# Host folders behind the Pods' disk volumes (see dvol).
VOLROOT=$(mktemp -d /var/tmp/"$P".XXXXXX)
n=0 joined=0 # Pods of sessions; sessions that joined a task's Pod
g='' s='' rw='' ro='' a='' b='' o='' nb='' # session names, set by session()

cleanup() {
  trap - EXIT INT TERM
  docker ps -aq --filter "label=$P" | xargs -r docker rm -f >/dev/null 2>&1 || true
  docker volume ls -q --filter "label=$P" | xargs -r docker volume rm -f >/dev/null 2>&1 || true
  docker network ls -q --filter "label=$P" | xargs -r docker network rm >/dev/null 2>&1 || true
  rm -f "$LOG"
  rm -rf "$VOLROOT"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
on_error() { echo "hand-run-baseline: line $2 failed (exit $1); last stderr:" >&2; tail -n 15 "$LOG" >&2; }
trap 'on_error $? $LINENO' ERR

# --- The Pod, as the rendered template composes it ----------------------------------------

# docker-engine's args, verbatim from fixtures/templates/full-worker.yaml.
DAEMON_SCRIPT='route_dev() { awk '\''{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}'\''; }
iface=$(ip -o -4 route show default | route_dev)
[ -n "$iface" ] || iface=$(ip -o -6 route show default | route_dev)
[ -n "$iface" ] || { echo "docker-engine: no default route to derive the MTU from" >&2; exit 1; }
mtu=$(cat "/sys/class/net/$iface/mtu")
[ "$mtu" -ge 576 ] || { echo "docker-engine: MTU $mtu of $iface is below 576" >&2; exit 1; }
exec dockerd --host=unix:///run/docker/docker.sock --group=1000 \
  --exec-root=/run/dockerd --mtu="$mtu" --default-network-opt=bridge=com.docker.network.driver.mtu="$mtu" \
  --storage-driver=overlay2 \
  --exec-opt native.cgroupdriver=cgroupfs --cgroup-parent=docker
'
# The main container's bootstrap command (harness/src/pod/compose.rs, Kandev's K-1ee3 shape).
BOOTSTRAP='while [ ! -f /opt/kandev/start ]; do sleep 0.2; done
set -a
. /opt/kandev/runtime.env
if [ -f /run/kandev/auth.env ]; then . /run/kandev/auth.env; fi
set +a
if [ ! -f /opt/kandev/prepared ]; then echo "kubernetes preparation marker is missing" >&2; exit 70; fi
exec /opt/kandev/agentctl'
# Kandev's way of writing a file into a Pod (harness/src/session/bootstrap.rs).
PUT='put() {
  dest=$1; mode=$2; dir=${1%/*}; cur=
  old_ifs=$IFS; IFS=/; set -- $dir; IFS=$old_ifs
  for part in "$@"; do
    [ -n "$part" ] || continue
    cur="$cur/$part"
    [ ! -L "$cur" ] || exit 73
    if [ -e "$cur" ]; then [ -d "$cur" ] || exit 73; else mkdir "$cur"; fi
  done
  [ ! -L "$dest" ] || exit 73
  [ ! -d "$dest" ] || exit 73
  tmp=$(mktemp "$dir/.kandev-upload.XXXXXX")
  cat > "$tmp"
  chmod "$mode" "$tmp"
  mv -f "$tmp" "$dest"
}'
WRITE_FILES="set -e
umask 077
$PUT"'
head -c "$1" | put /opt/kandev/agentctl 0755
printf "%s" "$2" | put /opt/kandev/runtime.env 0600
printf "%s" "$3" | put /opt/kandev/prepare.sh 0600
mkdir -p /run/kandev/home
chmod 0700 /run/kandev/home
printf "%s" "$4" | put "$6/auth.env" 0600
printf "%s" "$5" | put /run/kandev/auth.env 0600
command -v docker >/dev/null 2>&1 || exit 69'
RUN_PREPARE='set -a; . /opt/kandev/runtime.env; . /run/kandev/auth.env; set +a; exec sh /opt/kandev/prepare.sh'
MARKERS="set -e
umask 077
$PUT"'
printf "%s" "$1" | put /run/kandev/auth.env 0600
: > /opt/kandev/prepared
: > /opt/kandev/start'
declare -A HOME_OF
vol() { docker volume create --label "$P" "$@" >/dev/null; }
# fsGroup as the kubelet applies it before any container starts, without an exec (the
# catalogue's infra container applies it in its own process): a disk volume is a host folder
# made group 1000, setgid and group-writable before it is mounted; a memory volume is a tmpfs
# mounted with gid=1000 and that mode.
dvol() {
  mkdir "$VOLROOT/$1" && chgrp 1000 "$VOLROOT/$1" && chmod 2775 "$VOLROOT/$1"
  vol --opt type=none --opt o=bind --opt device="$VOLROOT/$1" "$1"
}
FSGROUP_TMPFS=gid=1000,mode=2775
mnt() { echo "type=volume,src=$1,dst=$2,volume-nocopy${3:+,readonly}"; }

# pod NAME WORKSPACE_VOLUME [ro] [absent]: the Pod's volumes and containers (the workspace
# volume exists already: a claim, or the emptyDir of a look-alike).
pod() {
  local s=$1 ws=$2 grant=${3:-} daemon=${4:-}
  vol --opt type=tmpfs --opt device=tmpfs --opt o=size=16777216,$FSGROUP_TMPFS "$s-docker-socket"
  vol "$s-docker-data"
  dvol "$s-kandev-runtime"
  vol --opt type=tmpfs --opt device=tmpfs --opt o=$FSGROUP_TMPFS "$s-kandev-auth"
  docker run -d --label "$P" --cgroup-parent "$BASELINE_CGROUP" --name "$s-kandev-agent" --hostname "$s" --network "$NET" \
    --ipc shareable --restart always -u 1000:1000 --group-add 1000 --cap-drop ALL \
    --security-opt no-new-privileges:true --memory 4294967296 --memory-swap 4294967296 \
    --cpus 2 --cpu-shares 256 -e HOSTNAME="$s" -e DOCKER_HOST=unix:///run/docker/docker.sock \
    -w /workspace --mount "$(mnt "$s-docker-socket" /run/docker)" \
    --mount "$(mnt "$s-kandev-runtime" /opt/kandev)" --mount "$(mnt "$s-kandev-auth" /run/kandev)" \
    --mount "$(mnt "$ws" /workspace)" --entrypoint sh "$W" -c "$BOOTSTRAP" >/dev/null
  local cmd=(-ceu "$DAEMON_SCRIPT")
  [ "$daemon" != absent ] || cmd=(-c 'exec sleep 3600')
  docker run -d --label "$P" --cgroup-parent "$BASELINE_CGROUP" --name "$s-docker-engine" --network "container:$s-kandev-agent" \
    --ipc "container:$s-kandev-agent" --restart always -u 0:0 --privileged --group-add 1000 \
    --memory 3221225472 --memory-swap 3221225472 --cpus 2 --cpu-shares 256 -e HOSTNAME="$s" \
    --mount "$(mnt "$ws" /workspace "$grant")" --mount "$(mnt "$s-docker-socket" /run/docker)" \
    --mount "$(mnt "$s-docker-data" /var/lib/docker)" --entrypoint /bin/sh "$D" "${cmd[@]}" >/dev/null
}

# home_of SESSION: the session's home, /run/kandev/sessions/<hash>/home (harness/src/session).
home_of() { printf '/run/kandev/sessions/%s/home' "$(printf %s "$1" | sha256sum | cut -c1-32)"; }
# write_files POD [READY_TIMEOUT] [IDENTITY] [PROFILE_ENV]: the bootstrap's first exec (a
# replacement Pod keeps its task's identity, so the session's home); PROFILE_ENV, env-file
# lines, is the session's profile environment besides DOCKER_READY_TIMEOUT_SECONDS.
write_files() {
  local p=$1 t=${2:-$READY_TIMEOUT} s=${3:-$1} profile=${4:-} home
  home=$(home_of "$s")
  HOME_OF[$p]=$home
  local runtime="AGENTCTL_LISTEN_HOST='127.0.0.1'
AGENTCTL_PORT='8765'
AGENTCTL_INSTANCE_PORT_BASE='41001'
AGENTCTL_INSTANCE_PORT_MAX='41100'
KANDEV_INSTANCE_ID='env-$s'
KANDEV_TASK_ID='task-$s'
KANDEV_TASK_ENVIRONMENT_ID='env-$s'
"
  local session="DOCKER_READY_TIMEOUT_SECONDS='$t'
${profile}HOME='$home'
KANDEV_SESSION_ID='$s'
KANDEV_TASK_ID='task-$s'
KANDEV_INSTANCE_ID='env-$s'
KANDEV_TASK_ENVIRONMENT_ID='env-$s'
"
  local shared="DOCKER_READY_TIMEOUT_SECONDS='$t'
${profile}AGENTCTL_BOOTSTRAP_NONCE='nonce-$s'
HOME='$home'
"
  docker exec -i "$p-kandev-agent" sh -c "$WRITE_FILES" sh "$SIZE" "$runtime" "$PREPARE" \
    "$session" "$shared" "$home" <"$A" 2>>"$LOG"
}
prepare() { docker exec "$1-kandev-agent" sh -c "$RUN_PREPARE" >/dev/null 2>>"$LOG"; }
markers() {
  docker exec "$1-kandev-agent" sh -c "$MARKERS" sh "AGENTCTL_BOOTSTRAP_NONCE='nonce-$1'
HOME='/run/kandev/home'
" 2>>"$LOG"
}
# session VAR [WORKSPACE] [ro]: a launched session (workspace claim, Pod, bootstrap); its name in VAR.
session() {
  n=$((n + 1))
  local name=$P-$n workspace=${2:-}
  [ -n "$workspace" ] || { workspace=$name-ws; dvol "$workspace"; }
  pod "$name" "$workspace" "${3:-}"
  write_files "$name"; prepare "$name"; markers "$name"
  printf -v "$1" %s "$name"
}
# join POD SESSION: a further session of the Pod's task joins it (harness/src/session/
# agent_process.rs Session::join): its auth.env written into its own home, nothing else.
JOIN="set -e
umask 077
$PUT"'
printf "%s" "$1" | put "$2/auth.env" 0600'
join() {
  local p=$1 s=$2 home
  home=$(home_of "$s")
  docker exec "$p-kandev-agent" sh -c "$JOIN" sh "DOCKER_READY_TIMEOUT_SECONDS='$READY_TIMEOUT'
HOME='$home'
KANDEV_SESSION_ID='$s'
KANDEV_TASK_ID='task-$p'
KANDEV_INSTANCE_ID='env-$p'
KANDEV_TASK_ENVIRONMENT_ID='env-$p'
" "$home" 2>>"$LOG"
}
# start_process POD [SESSION]: the session's agent process as agentctl starts it (argv `sh -lc
# '/opt/kandev/agentctl session'`, in /workspace, the session's HOME and id); SESSION defaults
# to the Pod's own.
start_process() {
  local s=${2:-$1} home
  if [ -n "${2:-}" ]; then home=$(home_of "$2"); else home=${HOME_OF[$1]}; fi
  docker exec -d -w /workspace -e HOME="$home" -e KANDEV_SESSION_ID="$s" "$1-kandev-agent" \
    sh -lc '/opt/kandev/agentctl session'
}
# stop_process POD [SESSION]: Stop: TERM to the session's agent process (its KANDEV_SESSION_ID),
# then wait for its exit.
STOP_PROCESS='pids=
for p in $(pgrep -f "^/opt/kandev/agentctl session"); do
  if tr "\0" "\n" <"/proc/$p/environ" 2>/dev/null | grep -qx "KANDEV_SESSION_ID=$1"; then kill -TERM "$p" && pids="$pids $p"; fi
done
[ -n "$pids" ] || { echo "no agent process of session $1" >&2; exit 1; }
for p in $pids; do while kill -0 "$p" 2>/dev/null; do sleep 0.05; done; done'
stop_process() { docker exec "$1-kandev-agent" sh -c "$STOP_PROCESS" sh "${2:-$1}" 2>>"$LOG"; }
# ag NAME SCRIPT [ARGS]: `sh -c` as the agent user in /workspace with the session's HOME.
ag() {
  local s=$1; shift
  docker exec -w /workspace -e HOME="${HOME_OF[$s]:-/run/kandev/home}" "$s-kandev-agent" sh -c "$@" 2>>"$LOG"
}
# dm NAME ARGV...: a command in the companion.
dm() { local s=$1; shift; docker exec "$s-docker-engine" "$@" 2>>"$LOG"; }
delete_pod() {
  docker rm -f "$1-kandev-agent" "$1-docker-engine" >/dev/null
  docker volume rm "$1-docker-socket" "$1-docker-data" "$1-kandev-runtime" "$1-kandev-auth" >/dev/null
}
# teardown NAME...: each Pod and its workspace.
teardown() { local s; for s in "$@"; do delete_pod "$s"; docker volume rm "$s-ws" >/dev/null; done; }
build() { # build NAME TAG: scenarios/src/support.rs build_workload
  ag "$1" 'set -eu
d=/workspace/.kandev-acceptance/workload
mkdir -p "$d"
cp /opt/kandev/agentctl "$d/workload"
printf '\''FROM scratch\nCOPY workload /workload\nENTRYPOINT ["/workload"]\n'\'' > "$d/Dockerfile"
docker build -q --network none -t '"$2"' "$d"' >>"$OUT"
}
daemon_id() { ag "$1" "docker info --format '{{.ID}}'" >>"$OUT"; }

start=$(date +%s.%N)
docker network create --label "$P" -d bridge -o com.docker.network.driver.mtu="$POD_MTU" "$NET" >/dev/null

# --- launch::contract: a launched session (everything else it does is a read) ---------------
session s
teardown "$s"

# --- launch::causal_failures: three impossible launches, as far as they get locally ----------
# The absent image and the missing claim are looked up and not found (nothing is pulled or
# created); the unsatisfiable nodeSelector is refused before any engine call.
docker image inspect registry.invalid/kandev-acceptance/absent:never >/dev/null 2>&1 || true
docker volume inspect "kandev-acceptance-missing-claim-$P" >/dev/null 2>&1 || true

# --- prepare::docker_gate -------------------------------------------------------------------
session g
ag "$g" "docker info --format '{{.ID}} {{.ServerVersion}}'" >>"$OUT"
n=$((n + 1)); absent=$P-$n; dvol "$absent-ws"; pod "$absent" "$absent-ws" "" absent
write_files "$absent" 2
prepare "$absent" || true # fails after the 2 s bound: "Docker daemon did not become ready"
teardown "$g" "$absent"

# --- daemon::socket_only --------------------------------------------------------------------
session s
daemon_id "$s"
teardown "$s"

# --- workspace::shared: a read-write and a read-only grant ----------------------------------
session rw; session ro "" ro
ag "$rw" 'mkdir -p /workspace/shared-probe && /opt/kandev/agentctl write /workspace/shared-probe/from-agent.bin 1048576 4242' >>"$OUT"
dm "$rw" sha256sum /workspace/shared-probe/from-agent.bin >>"$OUT"
dm "$rw" sh -c 'head -c 262144 /dev/urandom > /workspace/shared-probe/from-engine.bin && sha256sum /workspace/shared-probe/from-engine.bin' >>"$OUT"
ag "$rw" 'sha256sum /workspace/shared-probe/from-engine.bin' >>"$OUT"
ag "$ro" 'mkdir -p /workspace/shared-probe && echo from-agent > /workspace/shared-probe/for-read-only.txt'
dm "$ro" sha256sum /workspace/shared-probe/for-read-only.txt >>"$OUT"
dm "$ro" sh -c 'echo from-engine > /workspace/shared-probe/engine-write.txt' 2>/dev/null || true # EROFS
teardown "$rw" "$ro"

# --- image::build_run -----------------------------------------------------------------------
session s
build "$s" baseline-build-run:1
ag "$s" 'docker run --rm --network none baseline-build-run:1 echo 5eed5eed; docker image inspect --format "{{.Id}}" baseline-build-run:1' >>"$OUT"
teardown "$s"

# --- bind::workspace ------------------------------------------------------------------------
session s
build "$s" baseline-bind:1
ag "$s" 'set -e; dir=/workspace/bind-probe; t=baseline-bind:1
mkdir -p $dir && /opt/kandev/agentctl write $dir/in.bin 2097152 7
docker run --rm --network none -v $dir:/data $t digest /data/in.bin
docker run --rm --network none -v $dir:/data $t write /data/out.bin 1048576 99
sha256sum $dir/out.bin; [ "$(stat -c %u $dir/out.bin)" = 1000 ] || rm $dir/out.bin
mkdir -p "$HOME/bind-probe" && /opt/kandev/agentctl write "$HOME/bind-probe/private.bin" 4096 3 && physical=$(cd "$HOME" && pwd -P)
docker run --rm --network none -v "$physical/bind-probe:/data" $t digest /data/private.bin || true' >>"$OUT" 2>&1

teardown "$s"

# --- compose::cleanup -----------------------------------------------------------------------
session s
compose=$(ag "$s" "if docker compose version >/dev/null 2>&1; then echo 'docker compose'; docker compose version; elif command -v docker-compose >/dev/null; then echo docker-compose; docker-compose version --short; fi" | sed -n 1p)
build "$s" baseline-compose:1
ag "$s" "set -e; dir=/workspace/compose-probe; mkdir -p \$dir/input \$dir/out; echo input-5eed > \$dir/input/input.txt; cat > \$dir/docker-compose.yml <<'EOF'
version: \"2.4\"
services:
  writer:
    image: baseline-compose:1
    command: [\"write\", \"/out/result.bin\", \"524288\", \"11\"]
    volumes: [\"./out:/out\", \"./input:/input:ro\", \"cache:/cache\"]
    networks: [probe]
  reader:
    image: baseline-compose:1
    command: [\"digest\", \"/input/input.txt\"]
    volumes: [\"./input:/input:ro\"]
    networks: [probe]
  readonly-check:
    image: baseline-compose:1
    command: [\"write\", \"/input/must-not-exist.bin\", \"16\", \"1\"]
    volumes: [\"./input:/input:ro\"]
networks:
  probe: {}
volumes:
  cache: {}
EOF
/opt/kandev/agentctl write /tmp/expected-result.bin 524288 11" >>"$OUT"
ag "$s" "cd /workspace/compose-probe && $compose -p kacceptbase up --no-color --no-build" >>"$OUT" 2>&1
label=label=com.docker.compose.project=kacceptbase
ag "$s" "for s in writer reader readonly-check; do id=\$(docker ps -aq --filter $label --filter label=com.docker.compose.service=\$s | head -n1); echo \"\$s \${id:-none} \$(docker inspect -f '{{.State.ExitCode}}' \$id 2>/dev/null)\"; done
sha256sum /workspace/compose-probe/out/result.bin
docker logs \$(docker ps -aq --filter $label --filter label=com.docker.compose.service=reader | head -n1)
/opt/kandev/agentctl digest /workspace/compose-probe/input/input.txt" >>"$OUT"
ag "$s" "cd /workspace/compose-probe && $compose -p kacceptbase down -v" >>"$OUT" 2>&1
ag "$s" "echo containers \$(docker ps -aq --filter $label); echo networks \$(docker network ls -q --filter $label); echo volumes \$(docker volume ls -q --filter $label)" >>"$OUT"
teardown "$s"

# --- browser::launch ------------------------------------------------------------------------
session s
browser=$(ag "$s" 'for b in chromium chromium-browser google-chrome chrome headless_shell; do p=$(command -v $b) && { echo $p; $p --version 2>/dev/null | head -n1; exit 0; }; done; ls /opt/full-worker/browsers/*/chrome-linux/headless_shell 2>/dev/null | head -n1' | sed -n 1p)
ag "$s" "mkdir -p /workspace/browser-probe && cat > /workspace/browser-probe/index.html <<'EOF'
<!doctype html><html><head><title>pending</title><style>body{background:#2b6cb0;color:#fff;font:32px sans-serif}</style></head><body><h1 id=status>script did not run</h1><script>document.getElementById('status').textContent='script-ran-5eed-'+(6*7);document.title='done';</script></body></html>
EOF"
quiet="--headless --disable-gpu --no-first-run --disable-background-networking --disable-component-update --disable-sync --disable-dev-shm-usage"
url=file:///workspace/browser-probe/index.html
render() { echo "profile=\$(mktemp -d) && timeout 90 $browser $1 --user-data-dir=\"\$profile\" --dump-dom $url; rc=\$?; rm -rf \"\$profile\"; exit \$rc"; }
flags=$quiet
if ! ag "$s" "$(render "$flags")" 2>/dev/null | grep -q script-ran-5eed-42; then
  flags="$quiet --no-sandbox"
  ag "$s" "$(render "$flags")" >>"$OUT" 2>&1
fi
shot=/workspace/browser-probe/screenshot.png
ag "$s" "profile=\$(mktemp -d) && timeout 90 $browser $flags --user-data-dir=\"\$profile\" --window-size=800,600 --screenshot=$shot $url; rc=\$?; rm -rf \"\$profile\"; od -An -tx1 -N24 $shot; sha256sum $shot; exit \$rc" >>"$OUT" 2>&1
teardown "$s"

# --- network::mtu: the HTTPS peer (a Pod outside the session), then the session --------------
peer=$P-peer
docker run -d --label "$P" --cgroup-parent "$BASELINE_CGROUP" --name "$peer" --network "$NET" --restart no -e HOSTNAME="$peer" "$D" /bin/sh -c \
  'set -e; mkdir -p /srv && cd /srv && openssl req -x509 -newkey rsa:2048 -nodes -keyout k.pem -out c.pem -subj /CN=peer -days 1 2>/dev/null && head -c 67108864 /dev/urandom > big.bin && sha256sum big.bin > big.sha.part && mv big.sha.part big.sha && exec openssl s_server -quiet -WWW -accept 8443 -cert c.pem -key k.pem' >>"$OUT"
session s
ag "$s" 'set -eu
d=/workspace/.kandev-acceptance/tls-client; rm -rf "$d"; mkdir -p "$d/root"
for f in /bin/sh "$(command -v openssl)"; do
  cp --parents -L "$f" "$d/root/"
  for lib in $(ldd "$f" | awk '\''/=>/ {print $3} /ld-linux/ {print $1}'\''); do cp --parents -L "$lib" "$d/root/"; done
done
cp /opt/kandev/agentctl "$d/root/workload"
printf '\''FROM scratch\nCOPY root/ /\n'\'' > "$d/Dockerfile"
docker build -q --network none -t baseline-tls-client:1 "$d" >/dev/null
docker network create mtu-probe >/dev/null
docker run --rm baseline-tls-client:1 /workload netinfo
docker run --rm --network mtu-probe baseline-tls-client:1 /workload netinfo
docker run -d --rm --name mtu-probe-docker0 --network bridge baseline-tls-client:1 /workload sleep 120 >/dev/null' >>"$OUT"
ag "$s" 'docker rm -f mtu-probe-docker0 >/dev/null'
for i in $(seq 600); do # the peer makes its 64 MiB and certificate, then listens; 120 s at most
  docker exec "$peer" sh -c 'cat /srv/big.sha && cat /proc/net/tcp /proc/net/tcp6 2>/dev/null' 2>/dev/null |
    grep -q ' [0-9A-F]*:20FB [0-9A-F]*:0000 0A ' && break
  [ "$i" -lt 600 ] || { echo "hand-run-baseline: the HTTPS peer was not ready within 120 s" >&2; exit 1; }
  sleep 0.2
done
peer_ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$peer")
ag "$s" "docker run --rm --network mtu-probe baseline-tls-client:1 /bin/sh -c 'printf \"GET /big.bin HTTP/1.0\\r\\n\\r\\n\" | openssl s_client -quiet -connect $peer_ip:8443 2>/dev/null | /workload http-body-digest'" >>"$OUT"
teardown "$s"
docker rm -f "$peer" >/dev/null

# --- cgroup::accounting: a held allocation, then a hog beyond the Pod's budget ---------------
# The Pod's memory limit is the sum of its containers' (4 GiB + 3 GiB); the hog asks 256 MiB
# more, and is killed at docker-engine's own 3 GiB.
session s
build "$s" baseline-accounting:1
ag "$s" 'docker run -d --network none baseline-accounting:1 alloc 32 300 kandev-accounting-base' >>"$OUT"
ag "$s" 'docker run --name hog-base --network none baseline-accounting:1 alloc 7424 0 kandev-accounting-base-hog' >>"$OUT" 2>&1 || true
ag "$s" 'docker rm -f hog-base' >>"$OUT"
daemon_id "$s"
teardown "$s"

# --- worker::toolchain: each required and optional tool's version and job -------------------
# tool NAME: the tool's binary, version command and job in tool_bin, tool_version, tool_job,
# verbatim from scenarios/src/worker/toolchain.rs.
tool_bin='' tool_version='' tool_job=''
tool() {
  local bin version job
  case $1 in
    git) bin=git version='git --version'
      job='cd $W && git init -q r && cd r && git -c user.email=a@b.c -c user.name=agent commit -q --allow-empty -m first && test "$(git rev-list --count HEAD)" = 1 && echo ok' ;;
    python-venv) bin=python3 version='python3 --version'
      job='cd $W && python3 -m venv venv && printf '\''import unittest\nclass T(unittest.TestCase):\n    def test_sum(self):\n        self.assertEqual(sum([1, 2]), 3)\n'\'' > test_t.py && venv/bin/python -m unittest -q test_t 2>&1 && echo ok' ;;
    c) bin=cc version='cc --version | head -n1'
      job='cd $W && printf '\''#include <stdio.h>\nint main(void){printf("hello-c\\n");return 0;}\n'\'' > h.c && cc -o h h.c && ./h | grep -qx hello-c && echo ok' ;;
    node) bin=node version='node --version'
      job='cd $W && echo '\''console.log(6 * 7)'\'' > t.js && test "$(node t.js)" = 42 && echo ok' ;;
    docker) bin=docker version='docker --version'
      job='docker version --format '\''{{.Server.Version}}'\'' >/dev/null && echo ok' ;;
    compose) bin=docker version='docker compose version 2>/dev/null || docker-compose version --short'
      job='cd $W && printf '\''services:\n  a:\n    image: scratch\n'\'' > compose.yml && { docker compose -f compose.yml config -q 2>/dev/null || docker-compose -f compose.yml config -q; } && echo ok' ;;
    buildx) bin=docker version='docker buildx version' job='docker buildx ls >/dev/null && echo ok' ;;
    go) bin=go version='go version'
      job='cd $W && printf '\''package main\nimport "fmt"\nfunc main(){fmt.Println("hello-go")}\n'\'' > m.go && go run m.go | grep -qx hello-go && echo ok' ;;
    rust) bin=cargo version='cargo --version'
      job='cd $W && cargo new -q --offline t && cd t && cargo run -q --offline | grep -qx '\''Hello, world!'\'' && echo ok' ;;
    pnpm) bin=pnpm version='pnpm --version'
      job='cd $W && printf '\''{"name":"t","version":"1.0.0","private":true,"scripts":{"test":"node t.js"}}\n'\'' > package.json && echo '\''console.log(6 * 7)'\'' > t.js && npm_config_update_notifier=false pnpm test | grep -qx 42 && echo ok' ;;
    playwright) bin=node version='node -p '\''require("playwright-core/package.json").version'\'
      job='cd $W && printf '\''<p id=p>a</p><script>document.getElementById("p").textContent="b"</script>'\'' > p.html && printf '\''const {chromium}=require("playwright-core");(async()=>{const b=await chromium.launch({executablePath:process.env.FULL_WORKER_BROWSER||"/usr/bin/chromium",args:["--no-sandbox"]});const p=await b.newPage();await p.goto("file://"+process.argv[2]);console.log(await p.textContent("#p"));await b.close()})().catch(e=>{console.error(e);process.exit(1)})'\'' > b.js && test "$(timeout 90 node b.js $W/p.html)" = b && echo ok' ;;
    golangci-lint) bin=golangci-lint version='golangci-lint version'
      job='golangci-lint version | grep -q '\''version 2\.'\'' && cd $W && printf '\''module t\n\ngo 1.24\n'\'' > go.mod && printf '\''package t\n\n// Add adds.\nfunc Add(a, b int) int { return a + b }\n'\'' > t.go && golangci-lint run ./... && echo ok' ;;
    *) echo "hand-run-baseline: unknown tool $1" >&2; return 1 ;;
  esac
  tool_bin=$bin tool_version=$version tool_job=$job
}
# tool_script NAME: the scenario's script for one tool (run in a subshell of the one exec).
tool_script() {
  tool "$1" || return 1
  echo "( export npm_config_cache=/workspace/.cache/npm PIP_CACHE_DIR=/workspace/.cache/pip GOCACHE=/workspace/.cache/go-build GOMODCACHE=/workspace/.cache/go-mod CARGO_HOME=/workspace/.cache/cargo PNPM_HOME=/workspace/.pnpm npm_config_store_dir=/workspace/.pnpm-store; p=\$(command -v $tool_bin) || { echo missing; exit 0; }; v=\$($tool_version 2>&1) || { echo missing; exit 0; }; echo \"path \$p\"; echo \"version \$(echo \"\$v\" | head -n1)\"; W=\$(mktemp -d /workspace/.kandev-acceptance-tool-XXXXXX); export W; ( $tool_job ) 2>&1 | tail -n 5; rm -rf \"\$W\" )"
}
session s
tool_jobs=""
for t in ${REQUIRED_TOOLS//,/ } ${OPTIONAL_TOOLS//,/ }; do tool_jobs="$tool_jobs$(tool_script "$t")
"; done
ag "$s" "$tool_jobs" >>"$OUT"
teardown "$s"

# --- image::recipe: a repository bundle, the images' config, history and layer files, tools ---
# The session's Pod first; the bundle is made in kandev-agent (HOME=/tmp) before the bootstrap,
# whose prepare clones it into /workspace.
BUNDLE=/tmp/kandev-acceptance-recipe.bundle
n=$((n + 1)); s=$P-$n; dvol "$s-ws"; pod "$s" "$s-ws"
docker exec "$s-kandev-agent" sh -c "set -e; export HOME=/tmp; r=\$(mktemp -d /tmp/kandev-acceptance-repo.XXXXXX); cd \$r; git init -q; echo recipe > README.md; git add README.md; git -c user.email=acceptance@kandev.invalid -c user.name=acceptance commit -q -m recipe; git bundle create $BUNDLE --all 2>/dev/null; git rev-parse HEAD; cd /; rm -rf \$r" >>"$OUT" 2>>"$LOG"
write_files "$s" "" "" "KANDEV_REPOSITORY_BUNDLE='$BUNDLE'
"
prepare "$s"; markers "$s"
# What the credentials scan looks for (scenarios/src/image/recipe.rs: private keys, access key
# ids, bearer tokens, Docker auths, kubeconfig keys); a file's name alone for .netrc, SSH keys
# and AWS credentials.
SECRETS=(-e '^[[:space:]]*-----BEGIN .*PRIVATE KEY-----[[:space:]]*$' -e '(^|[^A-Za-z0-9])A[KS]IA[A-Z0-9]{16}([^A-Za-z0-9]|$)'
  -e '[Bb][Ee][Aa][Rr][Ee][Rr] [A-Za-z0-9._~+/=-]{20,}' -e '"auths"' -e 'client-key-data:')
secrets() { grep -E "${SECRETS[@]}" || [ $? -eq 1 ]; } # no match is the expected answer
for img in "$W" "$D"; do
  # Platform, user, working folder; Env and labels; the overlay2 layer folders (lower, upper).
  config=$(docker image inspect -f '{{.Os}}/{{.Architecture}} {{.Config.User}} {{.Config.WorkingDir}}{{"\n"}}{{json .Config.Env}} {{json .Config.Labels}}{{"\n"}}{{with .GraphDriver.Data.LowerDir}}{{.}}:{{end}}{{.GraphDriver.Data.UpperDir}}' "$img")
  sed -n 1p <<<"$config" >>"$OUT"
  sed -n 2p <<<"$config" | secrets >>"$OUT"
  docker image history --no-trunc --format '{{.CreatedBy}}' "$img" | secrets >>"$OUT"
  IFS=: read -ra layers <<<"$(sed -n 3p <<<"$config")"
  find "${layers[@]}" -type f \( -name .netrc -o -name _netrc -o -name id_rsa -o -name id_ecdsa \
    -o -name id_ed25519 -o -name id_dsa -o -path '*/.aws/credentials' \) >>"$OUT"
  rc=0
  find "${layers[@]}" -type f -size -262145c ! -path '*usr/share/go-*' ! -path '*usr/lib/go-*' \
    ! -path '*usr/share/doc/*' ! -path '*usr/share/man/*' ! -path '*usr/share/locale/*' \
    ! -path '*usr/share/zoneinfo/*' ! -path '*usr/share/i18n/*' ! -path '*/testdata/*' \
    ! -name '*.so' ! -name '*.a' ! -name '*.o' ! -name '*.rlib' ! -name '*.rmeta' ! -name '*.png' \
    ! -name '*.gz' ! -name '*.xz' ! -name '*.pak' ! -name '*.mo' ! -name '*.pyc' ! -name '*.bin' \
    ! -path '*.so.*' -print0 | xargs -0 -r grep -l -E "${SECRETS[@]}" -- >>"$OUT" 2>>"$LOG" || rc=$?
  [ "$rc" -eq 0 ] || [ "$rc" -eq 123 ] # 123: some grep found nothing
done
# The recipe's tools and their versions (config::RECIPE_TOOLS and RECIPE_OPTIONAL_TOOLS).
versions=""
for t in git python-venv c node pnpm go rust docker buildx compose playwright golangci-lint; do
  tool "$t"
  versions="${versions}p=\$(command -v $tool_bin) && v=\$($tool_version 2>&1) && echo \"$t \$p \$(echo \"\$v\" | head -n1)\" || echo \"$t missing\"
"
done
ag "$s" "$versions" >>"$OUT"
teardown "$s"

# --- worker::recipe_smoke: the recipe's own smoke as the agent --------------------------------
session s
smoke=$(ag "$s" 'id -u; { bash /opt/full-worker/smoke.sh --all 2>&1; echo "smoke-exit $?"; } | tail -n 40')
printf '%s\n' "$smoke" >>"$OUT"
[ "${smoke##*smoke-exit }" = 0 ] || { echo "hand-run-baseline: smoke.sh --all failed:" >&2; tail -n 15 <<<"$smoke" >&2; exit 1; }
teardown "$s"

# --- isolation::cross_session ---------------------------------------------------------------
session a; session b
daemon_id "$a"; daemon_id "$b"
build "$a" baseline-isolation:1
ag "$a" 'set -e; docker volume create iso-vol-base >/dev/null; docker network create iso-net-base >/dev/null; docker create --name iso-ctr-base --network none baseline-isolation:1 sleep 60 >/dev/null; echo created' >>"$OUT"
probe='for o in "container inspect iso-ctr-base" "image inspect baseline-isolation:1" "volume inspect iso-vol-base" "network inspect iso-net-base"; do if docker $o >/dev/null 2>&1; then echo "visible: $o"; else echo "absent: $o"; fi; done'
ag "$a" "$probe" >>"$OUT"; ag "$b" "$probe" >>"$OUT"
ip_a=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$a-kandev-agent")
ip_b=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$b-kandev-agent")
for port in 2375 2376; do ag "$b" "DOCKER_HOST=tcp://$ip_a:$port timeout 5 docker ps -aq" >>"$OUT" 2>&1 || true; done
for port in 2375 2376; do ag "$a" "DOCKER_HOST=tcp://$ip_b:$port timeout 5 docker ps -aq" >>"$OUT" 2>&1 || true; done
ag "$a" 'echo a > /workspace/isolation-marker-base && test -s /workspace/isolation-marker-base && echo written' >>"$OUT"
teardown "$a" "$b"

# --- lifecycle::stop_retains: Stop, Resume, then a replacement Pod on the kept workspace -----
session s
start_process "$s"
build "$s" baseline-stop:1
ag "$s" 'set -e; docker run -d --name keeper-base --network none baseline-stop:1 sleep 600 >/dev/null; docker volume create keep-base >/dev/null; echo uncommitted > /workspace/retained-base.txt; echo ok' >>"$OUT"
daemon_id "$s"
stop_process "$s"
start_process "$s"
daemon_id "$s"
ag "$s" "docker inspect -f '{{.State.Running}}' keeper-base; docker volume inspect -f '{{.Name}}' keep-base; cat /workspace/retained-base.txt" >>"$OUT"
delete_pod "$s" # the replacement keeps the session's identity and its workspace claim
n=$((n + 1)); r=$P-$n
pod "$r" "$s-ws"; write_files "$r" "" "$s"; prepare "$r"; markers "$r"
daemon_id "$r"
ag "$r" 'docker container inspect keeper-base >/dev/null 2>&1 && echo container; docker volume inspect keep-base >/dev/null 2>&1 && echo volume; true' >>"$OUT"
delete_pod "$r"; docker volume rm "$s-ws" >/dev/null

# --- lifecycle::replacement_snapshot: a second companion, the Pod lost and replaced ---------
# observer NAME: the template's extra companion (the daemon image running sleep, unprivileged).
observer() {
  docker run -d --label "$P" --cgroup-parent "$BASELINE_CGROUP" --name "$1-observer" --network "container:$1-kandev-agent" \
    --ipc "container:$1-kandev-agent" --restart always -u 1000:1000 --cap-drop ALL \
    --security-opt no-new-privileges:true --memory 67108864 --memory-swap 67108864 --cpus 0.1 \
    --entrypoint sleep "$D" infinity >/dev/null
}
OBSERVER_PROBE='if command -v dockerd >/dev/null; then echo image=daemon; else echo image=other; fi; if [ -e /workspace ]; then echo workspace=present; else echo workspace=absent; fi'
session s
observer "$s"
ag "$s" 'echo snap > /workspace/snapshot-base.txt && echo ok' >>"$OUT"
docker exec "$s-observer" sh -c "$OBSERVER_PROBE" >>"$OUT"
docker rm -f "$s-observer" >/dev/null; delete_pod "$s"
n=$((n + 1)); r=$P-$n
pod "$r" "$s-ws"; observer "$r"; write_files "$r" "" "$s"; prepare "$r"; markers "$r"
docker exec "$r-observer" sh -c "$OBSERVER_PROBE" >>"$OUT"
dm "$r" cat /workspace/snapshot-base.txt >>"$OUT"
ag "$r" 'cat /workspace/snapshot-base.txt' >>"$OUT"
docker rm -f "$r-observer" >/dev/null; delete_pod "$r"; docker volume rm "$s-ws" >/dev/null

# --- lifecycle::agent_restart: a nested keeper, then `kill 1` in kandev-agent and its restart --
session s
start_process "$s"
build "$s" baseline-restart:1
keeper="docker inspect -f '{{.State.Running}} {{.State.StartedAt}}' restart-keeper-base"
ag "$s" "set -e; docker run -d --name restart-keeper-base --network none baseline-restart:1 sleep 600 >/dev/null; $keeper" >>"$OUT"
daemon_id "$s"
restarts=$(docker inspect -f '{{.RestartCount}}' "$s-kandev-agent")
ag "$s" 'id -u; kill 1' >>"$OUT" 2>&1 || true # the exec ends with the container it runs in
# Restarted and up, seen twice 0.5 s apart: a container the engine is restarting again (its
# agentctl exiting at once) refuses the next exec with "is restarting".
up=0
for i in $(seq 450); do # the engine restarts it (restart always); 45 s at most, as the scenario
  if docker inspect -f '{{.RestartCount}} {{.State.Running}} {{.State.Restarting}}' "$s-kandev-agent" |
    awk -v r="$restarts" '$1 > r && $2 == "true" && $3 == "false" { ok = 1 } END { exit !ok }'; then
    up=$((up + 1))
    [ "$up" -lt 2 ] || break
    sleep 0.5
    continue
  fi
  up=0
  [ "$i" -lt 450 ] || { echo "hand-run-baseline: kandev-agent of $s did not restart within 45 s" >&2; exit 1; }
  sleep 0.1
done
start_process "$s"
ag "$s" "docker info --format '{{.ID}}'; $keeper" >>"$OUT"
teardown "$s"

# --- lifecycle::task_sessions: three sessions in one task Pod, each stopped in turn ---------
session s
start_process "$s"
join "$s" "$s-b"; join "$s" "$s-c"
start_process "$s" "$s-b"; start_process "$s" "$s-c"
stop_process "$s"
stop_process "$s" "$s-b"; stop_process "$s" "$s-c"
teardown "$s" # the task's terminal cleanup: its Pod and claim
joined=$((joined + 2))

# --- lifecycle::teardown_exact: the owned session and a neighbour, then two look-alikes ------
session o; session nb
build "$o" baseline-teardown:1
ag "$o" 'docker run -d --network none baseline-teardown:1 sleep 600 kandev-teardown-base' >>"$OUT"
delete_pod "$o"; docker volume rm "$o-ws" >/dev/null # the terminal cleanup of the owned session
daemon_id "$nb"
lookalikes=()
for _ in same-name foreign-label; do # created, never bootstrapped, emptyDir workspace
  n=$((n + 1)); l=$P-$n; dvol "$l-ws"; pod "$l" "$l-ws"; lookalikes+=("$l")
done
teardown "$nb" "${lookalikes[@]}"

docker network rm "$NET" >/dev/null
end=$(date +%s.%N)
awk -v n="$n" -v j="$joined" -v a="$start" -v b="$end" 'BEGIN { printf "hand-run baseline: %d Pods (the HTTPS peer included), %d sessions, %.1f s\n", n + 1, n + j, b - a }'
