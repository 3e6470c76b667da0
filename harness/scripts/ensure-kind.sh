#!/usr/bin/env bash
# Builds a real Kubernetes on this machine from pinned Go modules (kind/pins.env), with no
# container registry: the kind command, Kubernetes' programs (kube-apiserver, kubectl, kubelet,
# kubeadm, kube-controller-manager, kube-scheduler, kube-proxy), etcd, CoreDNS and the
# local-path provisioner (Kind's default StorageClass), crictl (kind export logs runs it), containerd
# (its daemon, runc shim and ctr: the node's container runtime), and then a
# Kind node image assembled from them (harness/scripts/kind-node-image.sh).
#
#   harness/scripts/ensure-kind.sh [--programs-only]
#
# Everything goes to one folder per set of pins, kept across runs:
#   ${KANDEV_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kandev-acceptance/kube}/<pins hash>/
#     bin/          the programs, and .complete once all of them are built
#     modules/      our go.mod wrappers (k8s.io/kubernetes with its staging modules pinned to
#                   one release: `go install k8s.io/kubernetes/cmd/...@v` is refused because of
#                   the replace lines in its go.mod)
#     build.log     the Go build's output; build-times.tsv its cost per step
# and the node image is `kandev-acceptance/kind-node:<kubernetes version>-<pins hash>` in the
# engine. The pins hash is the sha256 of pins.env's lines other than comments and blank ones
# (the harness computes the same: harness/src/host/kube_build.rs). A second call with
# the same pins builds nothing. Go's own module and build caches ($GOMODCACHE, $GOCACHE) make
# a rebuild after a pin change cheaper.
#
# --programs-only stops after the programs (the real_api_server tests need only those).
# Needs Go 1.26 or later, the Go module proxy, gcc with the static C library (the pause
# program) and, for the node image, a Docker engine (harness/scripts/ensure-engine.sh) and
# debootstrap with Debian's mirror.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)

log() { printf 'ensure-kind: %s\n' "$*" >&2; }
fail() {
  log "$1"
  log "fix: $2"
  exit 3
}

programs_only=0
for arg in "$@"; do
  case "$arg" in
    --programs-only) programs_only=1 ;;
    -h | --help)
      sed -n '7p' "$0" | sed 's/^# *//' >&2
      exit 0
      ;;
    *)
      log "unknown argument $arg"
      sed -n '7p' "$0" | sed 's/^# *//' >&2
      exit 2
      ;;
  esac
done

pins_file=kind/pins.env
[ -f "$pins_file" ] || fail "$pins_file is missing" "run this script from a checkout of kandev-acceptance"
# Only the known names are read, never executed as a script.
pin() {
  local value
  value=$(sed -n "s/^$1=//p" "$pins_file" | tail -1)
  [ -n "$value" ] || fail "$pins_file pins no $1" "add a line $1=<version> (see the file's comments)"
  printf '%s' "$value"
}
kubernetes=$(pin KUBERNETES_VERSION)
kind_version=$(pin KIND_VERSION)
etcd=$(pin ETCD_VERSION)
coredns=$(pin COREDNS_VERSION)
pause=$(pin PAUSE_VERSION)
local_path=$(pin LOCAL_PATH_PROVISIONER_VERSION)
cri_tools=$(pin CRI_TOOLS_VERSION)
containerd=$(pin CONTAINERD_VERSION)
key=$(grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$pins_file" | sha256sum | cut -c1-16)
cache=${KANDEV_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kandev-acceptance/kube}/$key
bin=$cache/bin
node_image=kandev-acceptance/kind-node:$kubernetes-$key
mkdir -p "$bin" "$cache/modules"

# Two calls at once (CI's ensure-test-deps beside a developer's) would build into one folder.
exec 9>"$cache/.lock"
flock 9

# --- the programs ----------------------------------------------------------------------------
programs=(kube-apiserver kubectl kubelet kubeadm kube-controller-manager kube-scheduler kube-proxy etcd kind coredns local-path-provisioner crictl containerd containerd-shim-runc-v2 ctr pause)
if [ -f "$bin/.complete" ]; then
  log "programs of $pins_file ($key) already built: $bin"
else
  command -v go >/dev/null ||
    fail "Go is not installed: Kubernetes is built here from its Go modules" \
      "install Go 1.26 or later and put it on PATH (these machines come with it), then retry"
  go_version=$(go env GOVERSION)
  case "$go_version" in
    go1.2[6-9]* | go1.[3-9][0-9]* | go[2-9]*) ;;
    *) fail "$go_version is too old: k8s.io/kubernetes $kubernetes needs Go 1.26 (its go.mod)" \
      "install Go 1.26 or later, or set GOTOOLCHAIN=go1.26.8 to let the go command fetch it" ;;
  esac
  command -v gcc >/dev/null ||
    fail "gcc is missing: the pause program is C (k8s.io/kubernetes build/pause/linux/pause.c)" \
      "apt-get install gcc libc6-dev, then retry"

  build_log=$cache/build.log
  : >"$build_log"
  times=$cache/build-times.tsv
  printf 'step\twall_s\tuser_s\tsys_s\n' >"$times"
  # Runs "$@" in a module folder, its output to the build log, its cost to build-times.tsv.
  step() {
    local name=$1 dir=$2 status=0
    shift 2
    log "$name"
    local TIMEFORMAT='%R %U %S'
    # The braces keep time's own report out of the build log, in .time.
    { time { (cd "$dir" && "$@") >>"$build_log" 2>&1; }; } 2>"$cache/.time" || status=$?
    if [ "$status" != 0 ]; then
      local tail_lines
      tail_lines=$(tail -n 15 "$build_log")
      if grep -qE 'unknown revision|invalid version|not found: |no matching versions|410 Gone|404 Not Found' <<<"$tail_lines"; then
        fail "a module $pins_file pins is not served by the Go module proxy ($(go env GOPROXY)):
$tail_lines" "pin a version the proxy lists (go list -m -versions <module>) in $pins_file, then retry"
      fi
      fail "$name failed (the whole log: $build_log):
$tail_lines" "read the log above; a full disk (df -h ~/.cache) or an old Go are the usual causes"
    fi
    printf '%s\t%s\n' "$name" "$(tr ' ' '\t' <"$cache/.time")" >>"$times"
  }
  # A go.mod of ours: one module per program family, the tools it builds named by `tool`.
  wrapper() {
    local dir=$cache/modules/$1
    mkdir -p "$dir"
    printf 'module kandev-acceptance/kube-build/%s\n\ngo 1.26.0\n' "$1" >"$dir/go.mod"
    printf '%s' "$dir"
  }

  # Kubernetes: its staging modules are replaced by the same release's published ones.
  k8s_dir=$(wrapper kubernetes)
  staging=v0.${kubernetes#v1.}
  step "fetching k8s.io/kubernetes $kubernetes" "$k8s_dir" go mod download -json "k8s.io/kubernetes@$kubernetes"
  k8s_src=$(go env GOMODCACHE)/k8s.io/kubernetes@$kubernetes
  {
    printf 'require k8s.io/kubernetes %s\n\nreplace (\n' "$kubernetes"
    sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#\t\1 => \1 '"$staging"'#p' "$k8s_src/go.mod"
    printf ')\n'
  } >>"$k8s_dir/go.mod"
  k8s_programs=(kube-apiserver kubectl kubelet kubeadm kube-controller-manager kube-scheduler kube-proxy)
  step "resolving Kubernetes' modules at $staging" "$k8s_dir" \
    go get -tool "${k8s_programs[@]/#/k8s.io/kubernetes/cmd/}"
  # The version kubeadm reads of itself and of the control plane: without it every program
  # says v0.0.0-master and kubeadm refuses to deploy that.
  minor=${kubernetes#v1.}
  minor=${minor%%.*}
  ldflags="-s -w"
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $p.gitVersion=$kubernetes -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  step "building ${k8s_programs[*]} $kubernetes" "$k8s_dir" \
    env CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin/" "${k8s_programs[@]/#/k8s.io/kubernetes/cmd/}"

  etcd_dir=$(wrapper etcd)
  step "resolving etcd $etcd" "$etcd_dir" go get -tool "go.etcd.io/etcd/server/v3@$etcd"
  step "building etcd $etcd" "$etcd_dir" \
    env CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd" \
    -o "$bin/etcd" go.etcd.io/etcd/server/v3

  kind_dir=$(wrapper kind)
  step "resolving kind $kind_version" "$kind_dir" go get -tool "sigs.k8s.io/kind@$kind_version"
  step "building kind $kind_version" "$kind_dir" \
    env CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/kind" sigs.k8s.io/kind

  coredns_dir=$(wrapper coredns)
  step "resolving CoreDNS $coredns" "$coredns_dir" go get -tool "github.com/coredns/coredns@$coredns"
  step "building CoreDNS $coredns" "$coredns_dir" \
    env CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/coredns" github.com/coredns/coredns

  local_path_dir=$(wrapper local-path-provisioner)
  step "resolving local-path-provisioner $local_path" "$local_path_dir" \
    go get -tool "github.com/rancher/local-path-provisioner@$local_path"
  step "building local-path-provisioner $local_path" "$local_path_dir" \
    env CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/local-path-provisioner" \
    github.com/rancher/local-path-provisioner

  cri_tools_dir=$(wrapper cri-tools)
  step "resolving cri-tools $cri_tools" "$cri_tools_dir" go get -tool "sigs.k8s.io/cri-tools/cmd/crictl@$cri_tools"
  step "building crictl $cri_tools" "$cri_tools_dir" \
    env CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$cri_tools" \
    -o "$bin/crictl" sigs.k8s.io/cri-tools/cmd/crictl

  # containerd as Kind's base image builds it (its Makefile's tags: no btrfs, zfs or
  # devmapper snapshotter), but static (CGO_ENABLED=0: nothing else needs cgo); the shim also
  # without gRPC, as containerd's Makefile builds it.
  containerd_dir=$(wrapper containerd)
  containerd_cmds=(containerd containerd-shim-runc-v2 ctr)
  containerd_tools=("${containerd_cmds[@]/#/github.com/containerd/containerd/v2/cmd/}")
  step "resolving containerd $containerd" "$containerd_dir" \
    go get -tool "${containerd_tools[@]/%/@$containerd}"
  containerd_ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd"
  containerd_tags="no_btrfs no_zfs no_devmapper urfave_cli_no_docs"
  step "building containerd and ctr $containerd" "$containerd_dir" \
    env CGO_ENABLED=0 go build -trimpath -tags "$containerd_tags" -ldflags "$containerd_ldflags" \
    -o "$bin/" github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/ctr
  step "building containerd-shim-runc-v2 $containerd" "$containerd_dir" \
    env CGO_ENABLED=0 go build -trimpath -tags "$containerd_tags no_grpc" -ldflags "$containerd_ldflags" \
    -o "$bin/containerd-shim-runc-v2" github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2

  step "building pause $pause" "$cache" \
    gcc -Os -static -DVERSION="\"$pause\"" -o "$bin/pause" "$k8s_src/build/pause/linux/pause.c"

  for p in "${programs[@]}"; do
    [ -x "$bin/$p" ] || fail "$bin/$p was not built (log: $build_log)" "remove $cache and retry"
  done
  # The module each pinned program was built from is the pinned one (a `go get` without the
  # version once took the newest containerd and stamped it with the pin).
  built_containerd=$(go version -m "$bin/containerd" | awk '$1 == "mod" { print $3 }')
  [ "$built_containerd" = "$containerd" ] ||
    fail "containerd was built from $built_containerd, not the pinned $containerd" "remove $cache and retry"
  grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' "$pins_file" >"$bin/.complete"
  log "built ${programs[*]} into $bin ($(awk -F'\t' 'NR > 1 { s += $2 } END { print s }' "$times") s; costs: $times)"
fi
"$bin/kube-apiserver" --version >&2
# A kubectl for the cluster, where the machine has none (Debian does not package it).
if ! command -v kubectl >/dev/null && [ "$(id -u)" = 0 ]; then
  ln -sf "$bin/kubectl" /usr/local/bin/kubectl
  log "linked $bin/kubectl into /usr/local/bin (no kubectl was on PATH)"
fi

[ "$programs_only" = 1 ] && exit 0

# --- the node image --------------------------------------------------------------------------
if docker image inspect "$node_image" >/dev/null 2>&1; then
  log "node image $node_image already built"
else
  docker version --format '{{.Server.Version}}' >/dev/null 2>&1 ||
    fail "no Docker engine answers: the node image is built in one" \
      "bash harness/scripts/ensure-engine.sh, then retry"
  bash "$root/harness/scripts/kind-node-image.sh" "$bin" \
    "$(go env GOMODCACHE)/sigs.k8s.io/kind@$kind_version" "$node_image"
fi
log "Kind ready: $bin/kind, node image $node_image"
