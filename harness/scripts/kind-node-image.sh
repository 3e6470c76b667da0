#!/usr/bin/env bash
# Assembles a Kind node image by hand, with no container registry: a Debian base made with
# debootstrap (systemd, runc and the CNI plugins from Debian), Kind's own node files
# (entrypoint, units, kubelet drop-ins) from the kind module, our Kubernetes programs and
# containerd, and the
# control-plane images (built here, each a binary on an empty base) preloaded into the node's
# containerd, as `kind build node-image` would (sigs.k8s.io/kind pkg/build/nodeimage).
#
#   harness/scripts/kind-node-image.sh BIN_DIR KIND_MODULE_DIR IMAGE_TAG
#
# BIN_DIR          kubelet kubeadm kubectl kube-apiserver kube-controller-manager kube-scheduler
#                  kube-proxy etcd containerd containerd-shim-runc-v2 ctr; optional: pause
#                  (else built with gcc -static), coredns
#                  (else the cluster has no DNS), local-path-provisioner (else the default
#                  StorageClass is Kind's legacy host-path one), crictl.
# KIND_MODULE_DIR  the kind module of the Kind release that will run the image
#                  ($(go env GOMODCACHE)/sigs.k8s.io/kind@vX.Y.Z): its images/base/files and
#                  the storage manifest of pkg/build/nodeimage are used as they are.
# IMAGE_TAG        the node image's name in the Docker engine.
#
# Idempotent: the image carries a label with the hash of its inputs (this script, the programs,
# Kind's files, the Debian suite); a second call with the same inputs builds nothing. The Debian
# base (debootstrap, the slow step) is kept as kind-node-image/base:<suite>-<hash> for reuse.
# Environment: DEBIAN_SUITE (trixie), DEBIAN_MIRROR (http://deb.debian.org/debian),
# KIND_NODE_IMAGE_WORK (scratch folder; a fresh one under $TMPDIR, removed afterwards).
#
# What differs from Kind's own node image, and why:
# - containerd built from its module without the btrfs, zfs and devmapper snapshotters (as
#   Kind's) and static; runc is Debian's.
# - Sandboxed hosts lack CAP_SYS_RESOURCE in the bounding set, so the node lacks it too.
#   containerd gives privileged Pods (and `capabilities: add: [ALL]`) only the capabilities
#   it holds, but a Pod that names SYS_RESOURCE fails with "unable to apply caps": containerd
#   runs runc through a wrapper that then drops it from the spec (as ensure-engine.sh does for
#   dockerd). restrict_oom_score_adj = true for the same reason: without the capability no
#   container may get an oom_score_adj below containerd's own (the pause sandbox asks -998).
# - CNI: no kindnetd image can be built here; /kind/manifests/default-cni.yaml is a DaemonSet
#   whose init container writes a bridge + host-local + portmap config for Debian's plugins
#   (single node: every node would get the first /24 of the pod subnet).
# - The kubelet's global kernel tunables (vm.overcommit_memory=1, vm.panic_on_oom=0,
#   kernel.panic=10, kernel.panic_on_oops=1, kernel.keys.root_maxkeys=1000000,
#   kernel.keys.root_maxbytes=25000000) would be written to the HOST kernel from the
#   privileged node. A unit shadows the differing ones inside the node (bind-mounted files
#   holding the values the kubelet wants), so the host keeps its own. Debian's
#   /usr/lib/sysctl.d files (kernel.core_pattern, global) are removed for the same reason.
set -euo pipefail

log() { printf 'kind-node-image: %s\n' "$*" >&2; }
fail() {
  log "ERROR: $1"
  log "fix: $2"
  exit 3
}
usage() { sed -n '8p' "$0" | sed 's/^# *//' >&2; }

[ $# = 3 ] || { usage; exit 2; }
bin_dir=$(cd "$1" 2>/dev/null && pwd) || fail "BIN_DIR $1 is not a folder" "pass the folder holding the Kubernetes programs (harness/scripts/ensure-kind.sh builds them)"
kind_dir=$(cd "$2" 2>/dev/null && pwd) || fail "KIND_MODULE_DIR $2 is not a folder" "go mod download sigs.k8s.io/kind@<version>, then pass \$(go env GOMODCACHE)/sigs.k8s.io/kind@<version>"
image_tag=$3
suite=${DEBIAN_SUITE:-trixie}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
started=$SECONDS
step() { log "[$((SECONDS - started))s] $*"; }

# --- inputs ------------------------------------------------------------------------------------
kind_files=$kind_dir/images/base/files
[ -f "$kind_files/usr/local/bin/entrypoint" ] && [ -f "$kind_files/etc/systemd/system/kubelet.service" ] ||
  fail "$kind_files lacks Kind's node files (usr/local/bin/entrypoint, etc/systemd/system/kubelet.service)" \
    "pass the kind module folder itself (it has images/base/files), e.g. \$(go env GOMODCACHE)/sigs.k8s.io/kind@v0.33.0"
required=(kubelet kubeadm kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd
  containerd containerd-shim-runc-v2 ctr)
for p in "${required[@]}"; do
  [ -x "$bin_dir/$p" ] || fail "$bin_dir/$p is missing or not executable" \
    "build the Kubernetes programs first (harness/scripts/ensure-kind.sh --programs-only) and pass their folder"
done
# The programs that run in the images below sit on an empty base: they must be static.
if command -v file >/dev/null; then
  for p in kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd pause coredns local-path-provisioner; do
    [ -x "$bin_dir/$p" ] || continue
    file -L "$bin_dir/$p" | grep -q -e 'statically linked' -e 'static-pie' ||
      fail "$bin_dir/$p is not statically linked: it runs on an empty image base" \
        "rebuild it with CGO_ENABLED=0 (Go programs) or gcc -static (pause)"
  done
fi
docker version --format '{{.Server.Version}}' >/dev/null 2>&1 ||
  fail "no Docker engine answers" "bash harness/scripts/ensure-engine.sh (or set DOCKER_HOST), then retry"
kube_version=$("$bin_dir/kubeadm" version -o short 2>/dev/null) ||
  fail "$bin_dir/kubeadm does not run" "rebuild the Kubernetes programs for this machine's architecture"
case $kube_version in
  v0.0.0* | "") fail "kubeadm reports version '$kube_version': kubeadm refuses to deploy that" \
    "build with -ldflags '-X k8s.io/component-base/version.gitVersion=vX.Y.Z ...' (ensure-kind.sh does)" ;;
esac
# The image names and tags kubeadm will ask the node's containerd for (its constants).
mapfile -t kubeadm_images < <("$bin_dir/kubeadm" config images list --kubernetes-version "$kube_version" 2>/dev/null)
image_for() { # name -> the kubeadm image ending in /name:tag
  local i
  for i in "${kubeadm_images[@]}"; do
    case ${i%:*} in */"$1") printf '%s' "$i"; return 0 ;; esac
  done
  fail "kubeadm $kube_version lists no $1 image (kubeadm config images list)" "check $bin_dir/kubeadm"
}
# Kind's storage images and manifest, read from the same kind release's source.
storage_go=$kind_dir/pkg/build/nodeimage/const_storage.go
go_const() { sed -n "s/^const $1 = \"\(.*\)\"$/\1/p" "$storage_go" 2>/dev/null; }
provisioner_image=$(go_const storageProvisionerImage)
helper_image=$(go_const storageHelperImage)

if docker buildx version >/dev/null 2>&1; then build=(docker build); else
  # No buildx plugin: the classic builder (the Dockerfiles below need nothing more).
  build=(env DOCKER_BUILDKIT=0 docker build)
fi

self_hash=$(sha256sum "$0" | cut -c1-64)
inputs=$(
  {
    echo "$self_hash $suite $mirror"
    for p in "${required[@]}" pause coredns local-path-provisioner crictl; do
      [ ! -e "$bin_dir/$p" ] || echo "$p $(sha256sum <"$bin_dir/$p" | cut -c1-64)"
    done
    (cd "$kind_files" && find . -type f | LC_ALL=C sort | xargs sha256sum)
    sha256sum <"$storage_go" 2>/dev/null || true
  } | sha256sum | cut -c1-64
)
label=io.kandev-acceptance.kind-node.inputs
if [ "$(docker image inspect --format "{{index .Config.Labels \"$label\"}}" "$image_tag" 2>/dev/null)" = "$inputs" ]; then
  log "$image_tag is up to date (inputs ${inputs:0:12}); nothing to do"
  exit 0
fi
step "building $image_tag: Kubernetes $kube_version, Debian $suite, Kind files from $kind_dir"

work=${KIND_NODE_IMAGE_WORK:-}
if [ -z "$work" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/kind-node-image.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work"
run() { # description fix command...: runs the command, its output to a log; on failure shows it
  local what=$1 fix=$2 out
  shift 2
  out=$work/step.log
  if ! "$@" >"$out" 2>&1; then
    log "ERROR: $what failed; last lines of its output:"
    tail -n 25 "$out" >&2
    log "fix: $fix"
    exit 3
  fi
}

# --- 1. the Debian base (debootstrap) ---------------------------------------------------------
# Kind's base packages (images/base/Dockerfile) minus those for network storage and rootless
# (nfs-common, open-iscsi, fuse-overlayfs), plus Debian's runc and CNI plugins (Kind builds
# those from source) and busybox-static (the small images below use it as their shell).
packages=systemd,systemd-sysv,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod
packages+=,libseccomp2,pigz,e2fsprogs,bash,ca-certificates,curl,jq,procps
packages+=,runc,containernetworking-plugins,busybox-static
base_image=kind-node-image/base:$suite-$(echo "$suite $mirror $packages" | sha256sum | cut -c1-12)
if docker image inspect "$base_image" >/dev/null 2>&1; then
  step "Debian base $base_image already built"
else
  [ "$(id -u)" = 0 ] || fail "debootstrap needs root" "run this script as root (or build $base_image once as root)"
  command -v debootstrap >/dev/null || fail "debootstrap is missing" "apt-get install debootstrap"
  [ -f "/usr/share/debootstrap/scripts/$suite" ] ||
    fail "this debootstrap does not know Debian $suite" "install a newer debootstrap (bookworm's knows trixie)"
  step "debootstrap --variant=minbase $suite ($mirror), about 2 minutes"
  rm -rf "$work/rootfs"
  run "debootstrap of Debian $suite" \
    "check that $mirror answers (apt-get update) and has $suite; set DEBIAN_MIRROR to a reachable mirror" \
    debootstrap --variant=minbase --include="$packages" "$suite" "$work/rootfs" "$mirror"
  # Kind's clean-install: no package lists, caches, docs or logs in the image.
  rm -rf "$work/rootfs"/var/lib/apt/lists/* "$work/rootfs"/var/cache/apt/* "$work/rootfs"/var/log/* \
    "$work/rootfs"/usr/share/doc/* "$work/rootfs"/usr/share/man/* "$work/rootfs"/usr/share/locale/* \
    "$work/rootfs"/tmp/* "$work/rootfs"/var/tmp/*
  : >"$work/rootfs/etc/resolv.conf"
  step "importing the base into the engine as $base_image"
  run "docker import of the Debian base" "check the engine's free disk space (docker system df)" \
    sh -c "tar --numeric-owner -C '$work/rootfs' -c . | docker import - '$base_image'"
  rm -rf "$work/rootfs"
fi

# --- 2. the control-plane images --------------------------------------------------------------
# Each is the program on an empty base (the Kubernetes programs, etcd and CoreDNS are static),
# with /tmp, /etc/passwd and a PATH, tagged as kubeadm names it. They are saved to one archive
# and imported into the node's containerd below; the engine's tags are removed afterwards.
step "building the control-plane images"
skel=$work/skel
rm -rf "$skel" && mkdir -p "$skel/etc" "$skel/tmp" "$skel/usr/local/bin"
chmod 1777 "$skel/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' >"$skel/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$skel/etc/group"
printf 'hosts: files dns\n' >"$skel/etc/nsswitch.conf"
path_env='ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
built_images=()
import_dir() { # dir image [docker import --change ...]: an image from a folder
  local dir=$1 image=$2
  shift 2
  if ! tar --numeric-owner --owner=0 --group=0 -C "$dir" -c . | docker import "$@" - "$image" >"$work/step.log" 2>&1; then
    tail -n 20 "$work/step.log" >&2
    fail "docker import of $image failed" "check the engine's free disk space (docker system df)"
  fi
  built_images+=("$image")
}
program_image() { # program image [entrypoint]: the program in /usr/local/bin on the skeleton
  local dir=$work/img-$1
  rm -rf "$dir" && cp -a "$skel" "$dir"
  cp "$bin_dir/$1" "$dir/usr/local/bin/$1"
  local changes=(--change "$path_env")
  [ -z "${3:-}" ] || changes+=(--change "ENTRYPOINT [\"$3\"]")
  import_dir "$dir" "$2" "${changes[@]}"
}
program_image kube-apiserver "$(image_for kube-apiserver)"
program_image kube-controller-manager "$(image_for kube-controller-manager)"
program_image kube-scheduler "$(image_for kube-scheduler)"
program_image etcd "$(image_for etcd)"

# pause: the sandbox's init, which only sleeps and reaps. Ours if BIN_DIR has one (ensure-kind
# builds Kubernetes' build/pause/linux/pause.c), else a minimal equivalent built here.
pause_image=$(image_for pause)
dir=$work/img-pause && rm -rf "$dir" && mkdir -p "$dir"
if [ -x "$bin_dir/pause" ]; then
  cp "$bin_dir/pause" "$dir/pause"
else
  command -v gcc >/dev/null || fail "BIN_DIR has no pause program and gcc is missing to build one" \
    "apt-get install gcc libc6-dev (the static C library), or put a static pause program in $bin_dir"
  cat >"$work/pause.c" <<'C'
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void quit(int s) { (void)s; exit(0); }
static void reap(int s) { (void)s; while (waitpid(-1, 0, WNOHANG) > 0) {} }
int main(void) {
  struct sigaction q = {.sa_handler = quit}, r = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGINT, &q, 0); sigaction(SIGTERM, &q, 0); sigaction(SIGCHLD, &r, 0);
  for (;;) pause();
}
C
  run "gcc -static of the pause program" "apt-get install gcc libc6-dev (the static C library is in libc6-dev)" \
    gcc -Os -static -o "$dir/pause" "$work/pause.c"
fi
import_dir "$dir" "$pause_image" --change 'ENTRYPOINT ["/pause"]' --change 'USER 65535:65535'

coredns_image=$(image_for coredns)
if [ -x "$bin_dir/coredns" ]; then
  dir=$work/img-coredns && rm -rf "$dir" && cp -a "$skel" "$dir"
  cp "$bin_dir/coredns" "$dir/coredns"
  import_dir "$dir" "$coredns_image" --change 'ENTRYPOINT ["/coredns"]' --change 'EXPOSE 53 53/udp'
else
  log "WARNING: $bin_dir has no coredns: the coredns Pods will stay in ErrImagePull and Service names will not resolve"
fi

# The tools image: busybox, plus the script the default CNI DaemonSet runs. It doubles as Kind's
# local-path helper image (the provisioner runs its setup/teardown shell scripts in it).
tools_image=localhost/kind-node/tools:$kube_version
dir=$work/img-tools && rm -rf "$dir" && cp -a "$skel" "$dir" && mkdir -p "$dir/bin"
docker run --rm --entrypoint cat "$base_image" /usr/bin/busybox >"$dir/bin/busybox" 2>"$work/step.log" ||
  fail "no busybox in $base_image" "remove the base image (docker rmi $base_image) and retry"
chmod 0755 "$dir/bin/busybox"
for applet in $("$dir/bin/busybox" --list); do
  [ "$applet" = busybox ] || ln -sf busybox "$dir/bin/$applet"
done
cat >"$dir/usr/local/bin/write-bridge-conflist" <<'SH'
#!/bin/sh
# Writes the node's CNI configuration: a bridge (cni0) over Debian's plugins, addresses from the
# first /24 (or the subnet itself when smaller) of POD_SUBNET, the range kube-controller-manager
# gives the first node. Single node only: every node would get the same range.
set -eu
subnet=${POD_SUBNET%%,*}
case $subnet in *:*) echo "write-bridge-conflist: IPv6 pod subnets are not supported ($POD_SUBNET)" >&2; exit 1 ;; esac
address=${subnet%/*}
bits=${subnet#*/}
[ "$bits" -ge 24 ] || bits=24
dir=/etc/cni/net.d
cat >"$dir/.kind-node-bridge.tmp" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "kind-node-bridge",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$address/$bits" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF
mv "$dir/.kind-node-bridge.tmp" "$dir/10-kind-node-bridge.conflist"
echo "write-bridge-conflist: pods get addresses from $address/$bits"
SH
chmod 0755 "$dir/usr/local/bin/write-bridge-conflist"
import_dir "$dir" "$tools_image" --change 'ENV PATH=/usr/local/bin:/bin' --change 'CMD ["sh"]'

# kube-proxy runs iptables (or nft): its image carries Debian's xtables, nft and conntrack with
# their libraries, copied out of the base, and an iptables-wrapper that picks legacy or nft the
# way the node did (kubernetes-sigs/iptables-wrappers' logic, which the upstream image uses).
proxy_ctx=$work/ctx-kube-proxy
rm -rf "$proxy_ctx" && mkdir -p "$proxy_ctx"
cp "$bin_dir/kube-proxy" "$proxy_ctx/kube-proxy"
cat >"$proxy_ctx/collect.sh" <<'SH'
#!/bin/bash
# Copies programs and every library they load into /out, keeping Debian's merged-/usr layout.
set -euo pipefail
out=/out
mkdir -p $out/usr/bin $out/usr/sbin $out/usr/lib $out/usr/lib64 $out/etc $out/tmp $out/run
chmod 1777 $out/tmp
for d in bin sbin lib lib64; do ln -s usr/$d $out/$d; done
# A file lands at its own name in its real folder (/lib64/ld-linux-x86-64.so.2, the loader
# programs name, is a link in Debian: the copy must exist at that name, not only at its target).
copy() {
  local dir; dir=$(realpath "$(dirname "$1")")
  mkdir -p "$out$dir"
  [ -e "$out$dir/${1##*/}" ] || cp -L "$1" "$out$dir/${1##*/}"
}
files=(/usr/sbin/xtables-nft-multi /usr/sbin/xtables-legacy-multi /usr/sbin/nft /usr/sbin/conntrack /usr/bin/busybox)
files+=(/usr/lib/x86_64-linux-gnu/xtables/*.so /usr/lib/*-linux-gnu/xtables/*.so)
for f in "${files[@]}"; do
  [ -e "$f" ] || continue
  copy "$f"
  ldd "$f" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do [ -e "$lib" ] && copy "$lib"; done || true
done
for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
  ln -s xtables-legacy-multi $out/usr/sbin/$t-legacy
  ln -s xtables-nft-multi $out/usr/sbin/$t-nft
  ln -s iptables-wrapper $out/usr/sbin/$t
done
for a in sh grep wc; do ln -s busybox $out/usr/bin/$a; done
cp -a /etc/protocols /etc/services /etc/ethertypes $out/etc/ 2>/dev/null || true
printf 'root:x:0:0:root:/root:/sbin/nologin\n' >$out/etc/passwd
SH
cat >"$proxy_ctx/iptables-wrapper" <<'SH'
#!/bin/sh
# First call: points the iptables links at the backend the node uses (the one holding the
# kubelet's KUBE-IPTABLES-HINT chain, else the one with more rules), then runs the command.
set -e
mode=
for m in nft legacy; do
  if xtables-$m-multi iptables-save -t mangle 2>/dev/null | grep -q 'KUBE-IPTABLES-HINT' ||
     xtables-$m-multi ip6tables-save -t mangle 2>/dev/null | grep -q 'KUBE-IPTABLES-HINT'; then
    mode=$m; break
  fi
done
if [ -z "$mode" ]; then
  legacy=$( (xtables-legacy-multi iptables-save; xtables-legacy-multi ip6tables-save) 2>/dev/null | grep -c '^-' || true)
  nft=$( (xtables-nft-multi iptables-save; xtables-nft-multi ip6tables-save) 2>/dev/null | grep -c '^-' || true)
  if [ "${legacy:-0}" -gt "${nft:-0}" ]; then mode=legacy; else mode=nft; fi
fi
for t in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
  ln -sf "xtables-$mode-multi" "/usr/sbin/$t"
done
exec "$0" "$@"
SH
cat >"$proxy_ctx/Dockerfile" <<EOF
FROM $base_image AS collect
LABEL $label.scratch=1
COPY collect.sh /collect.sh
RUN bash /collect.sh
FROM scratch
COPY --from=collect /out/ /
COPY iptables-wrapper /usr/sbin/iptables-wrapper
COPY kube-proxy /usr/local/bin/kube-proxy
$path_env
EOF
chmod 0755 "$proxy_ctx/iptables-wrapper" "$proxy_ctx/kube-proxy"
proxy_image=$(image_for kube-proxy)
run "docker build of $proxy_image" "read the output above; the base image may be damaged: docker rmi $base_image" \
  "${build[@]}" -t "$proxy_image" "$proxy_ctx"
built_images+=("$proxy_image")

storage_manifest=legacy
if [ -x "$bin_dir/local-path-provisioner" ] && [ -n "$provisioner_image" ] && [ -n "$helper_image" ]; then
  program_image local-path-provisioner "$provisioner_image"
  docker tag "$tools_image" "$helper_image"
  built_images+=("$helper_image")
  storage_manifest=local-path
fi

step "saving ${#built_images[@]} images for the node's containerd"
node_ctx=$work/ctx-node
rm -rf "$node_ctx" && mkdir -p "$node_ctx/overlay" "$node_ctx/bin"
run "docker save of the control-plane images" "check the free disk space of $work" \
  docker save -o "$node_ctx/images.tar" "${built_images[@]}"

# --- 3. the node's files ----------------------------------------------------------------------
cp -a "$kind_files" "$node_ctx/kind-files"
chmod -R u+w "$node_ctx/kind-files" # the module cache is read-only
for p in kubelet kubeadm kubectl; do cp "$bin_dir/$p" "$node_ctx/bin/$p"; done
ov=$node_ctx/overlay
mkdir -p "$ov/etc/containerd" "$ov/usr/local/sbin" "$ov/kind/manifests" "$ov/kind/bin" \
  "$ov/etc/systemd/system/kubelet.service.d" "$ov/etc/cni/net.d" "$ov/usr/local/bin"
[ ! -x "$bin_dir/crictl" ] || cp "$bin_dir/crictl" "$ov/usr/local/bin/crictl"
# Where Kind's containerd.service runs it from.
for p in containerd containerd-shim-runc-v2 ctr; do cp "$bin_dir/$p" "$ov/usr/local/bin/$p"; done
printf '%s' "$kube_version" >"$ov/kind/version"

# Kind's config.toml with: Debian's plugin folder linked into /opt/cni/bin (below), the runc
# wrapper, restrict_oom_score_adj, the sandbox image kubeadm names, no fuse-overlayfs plugin
# (not installed). `snapshotter = "overlayfs"` stays verbatim: the entrypoint seds it.
cat >"$ov/etc/containerd/config.toml" <<EOF
version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  tolerate_missing_hugepages_controller = true
  # No CAP_SYS_RESOURCE on sandboxed hosts: containerd may not lower a container's
  # oom_score_adj below its own (the kubelet asks -997/-998 for some), so it clamps instead.
  restrict_oom_score_adj = true
[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/opt/cni/bin"
  conf_dir = "/etc/cni/net.d"
[plugins."io.containerd.grpc.v1.cri".containerd]
  discard_unpacked_layers = true
  snapshotter = "overlayfs"
  default_runtime_name = "runc"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  base_runtime_spec = "/etc/containerd/cri-base.json"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true
    BinaryName = "/usr/local/sbin/runc-without-sys-resource"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.test-handler]
  runtime_type = "io.containerd.runc.v2"
  base_runtime_spec = "/etc/containerd/cri-base.json"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.test-handler.options]
    SystemdCgroup = true
    BinaryName = "/usr/local/sbin/runc-without-sys-resource"
EOF

# The same wrapper harness/scripts/ensure-engine.sh gives dockerd, for containerd's runc in the
# node: when the node's bounding set lacks CAP_SYS_RESOURCE (bit 24), it is removed from the
# spec of a container or exec (the Pod runs without it instead of failing); else runc unchanged.
cat >"$ov/usr/local/sbin/runc-without-sys-resource" <<'SH'
#!/bin/sh
while read -r key value; do [ "$key" = CapBnd: ] && break; done </proc/self/status
[ $(((0x$value >> 24) & 1)) = 0 ] || exec /usr/sbin/runc "$@"
strip() {
  [ -f "$1" ] || return 0
  sed -z -E -e 's/"CAP_SYS_RESOURCE"[[:space:]]*,[[:space:]]*//g' \
    -e 's/,[[:space:]]*"CAP_SYS_RESOURCE"//g' -e 's/"CAP_SYS_RESOURCE"//g' "$1" >"$1.kind-tmp" && mv "$1.kind-tmp" "$1"
}
prev=
for arg in "$@"; do
  case $prev in
    --bundle | -b) strip "$arg/config.json" ;;
    --process | -p) strip "$arg" ;;
  esac
  case $arg in
    --bundle=*) strip "${arg#--bundle=}/config.json" ;;
    --process=*) strip "${arg#--process=}" ;;
  esac
  prev=$arg
done
exec /usr/sbin/runc "$@"
SH

# Keep the kubelet's global kernel tunables off the host (see the header): each value that
# differs from what the kubelet wants gets a file with that value bind-mounted over it, inside
# the node's mount namespace only. Pods get their own /proc and see the host's values.
cat >"$ov/kind/bin/shadow-host-sysctls.sh" <<'SH'
#!/bin/bash
set -euo pipefail
mkdir -p /run/kind-node/sysctl
for entry in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
  kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
  key=${entry%=*} want=${entry#*=} file=/proc/sys/${entry%=*}
  [ -f "$file" ] || continue
  [ "$(cat "$file")" != "$want" ] || continue
  shadow=/run/kind-node/sysctl/${key//\//.}
  host=$(cat "$file")
  echo "$want" >"$shadow"
  mount --bind "$shadow" "$file"
  echo "kernel tunable ${key//\//.}: the kubelet sees $want, the host keeps $host"
done
SH
cat >"$ov/etc/systemd/system/kind-node-host-sysctls.service" <<'EOF'
[Unit]
Description=Keep the kubelet's global kernel tunables off the host
DefaultDependencies=no
After=systemd-sysctl.service
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/kind/bin/shadow-host-sysctls.sh

[Install]
WantedBy=multi-user.target
EOF
cat >"$ov/etc/systemd/system/kubelet.service.d/20-kind-node.conf" <<'EOF'
[Unit]
Wants=kind-node-host-sysctls.service
After=kind-node-host-sysctls.service
EOF

# default-cni.yaml: Kind applies it with `kubectl create` (installcni), so it must hold at least
# one object; "would you kindly template this file" makes Kind fill in {{ .PodSubnet }}. The
# init container writes the bridge configuration onto the node, pause keeps the Pod alive.
cat >"$ov/kind/manifests/default-cni.yaml" <<EOF
# would you kindly template this file
# Bridge CNI of a node image built by kind-node-image.sh (Debian's plugins, no kindnetd).
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kind-node-bridge
  namespace: kube-system
  labels:
    app: kind-node-bridge
spec:
  selector:
    matchLabels:
      app: kind-node-bridge
  template:
    metadata:
      labels:
        app: kind-node-bridge
    spec:
      hostNetwork: true
      priorityClassName: system-node-critical
      nodeSelector:
        kubernetes.io/os: linux
      tolerations:
      - operator: Exists
      initContainers:
      - name: write-conflist
        image: $tools_image
        imagePullPolicy: IfNotPresent
        command: ["/usr/local/bin/write-bridge-conflist"]
        env:
        - name: POD_SUBNET
          value: "{{ .PodSubnet }}"
        volumeMounts:
        - name: cni-cfg
          mountPath: /etc/cni/net.d
      containers:
      - name: idle
        image: $pause_image
        imagePullPolicy: IfNotPresent
        resources:
          requests:
            cpu: 1m
            memory: 1Mi
      volumes:
      - name: cni-cfg
        hostPath:
          path: /etc/cni/net.d
          type: DirectoryOrCreate
EOF

# default-storage.yaml: Kind applies it with `kubectl apply` (installstorage). With a
# local-path-provisioner program: Kind's own manifest, read from the kind module. Without:
# Kind's legacy fallback, a default StorageClass for kube-controller-manager's host-path
# provisioner (Kind's kubeadm config enables it; volumes under the node's /tmp, single node).
if [ "$storage_manifest" = local-path ]; then
  sed -n '/^const defaultStorageManifest = `/,/^`$/p' "$storage_go" | sed '1d;$d' |
    sed -e "s#\` + storageProvisionerImage + \`#$provisioner_image#g" \
      -e "s#\` + storageHelperImage + \`#$helper_image#g" >"$ov/kind/manifests/default-storage.yaml"
  if grep -q '` +' "$ov/kind/manifests/default-storage.yaml" || ! grep -q 'kind: StorageClass' "$ov/kind/manifests/default-storage.yaml"; then
    fail "could not read Kind's storage manifest from $storage_go" \
      "remove $bin_dir/local-path-provisioner to fall back on the legacy host-path StorageClass"
  fi
else
  cat >"$ov/kind/manifests/default-storage.yaml" <<'EOF'
# host-path based default storage class (Kind's legacy default: no local-path-provisioner here)
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/host-path
EOF
fi

# Imports the saved images into containerd while the image builds, as Kind's node build does
# (ctr images import --no-unpack; the CRI unpacks an image the first time a container uses it).
cat >"$node_ctx/import-images.sh" <<'SH'
#!/bin/bash
set -euo pipefail
printf 'version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n' >/tmp/containerd-import.toml
containerd --config /tmp/containerd-import.toml >/tmp/containerd-import.log 2>&1 &
pid=$!
for _ in $(seq 1 50); do ctr version >/dev/null 2>&1 && break; sleep 0.2; done
ctr version >/dev/null || { cat /tmp/containerd-import.log; exit 1; }
ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned --all-platforms \
  --no-unpack --digests /images.tar
ctr --namespace=k8s.io images list -q | grep -v '@sha256:'
kill "$pid" && wait "$pid" || true
rm -rf /run/containerd /tmp/containerd-import.*
SH

# --- 4. the node image ------------------------------------------------------------------------
cat >"$node_ctx/Dockerfile" <<EOF
FROM $base_image AS node
$path_env
COPY kind-files/usr/local/bin/ /usr/local/bin/
COPY kind-files/kind/ /kind/
COPY kind-files/etc/ /etc/
COPY overlay/ /
COPY bin/ /usr/bin/
# Kind's base Dockerfile steps, then ours: Debian's CNI plugins are in /usr/lib/cni (CNIs installed
# later expect /opt/cni/bin); no Debian sysctl.d files (global tunables, see the header).
RUN set -eux; \\
    chmod 0755 /kind /kind/bin /kind/bin/* /usr/local/bin/* /usr/local/sbin/* /usr/bin/kubelet /usr/bin/kubeadm /usr/bin/kubectl; \\
    find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete; \\
    rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \\
      /lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \\
      /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*; \\
    echo ReadKMsg=no >>/etc/systemd/journald.conf; \\
    ln -sf /usr/lib/systemd/systemd /sbin/init; \\
    mkdir -p /opt/cni/bin /etc/kubernetes/manifests; ln -sf /usr/lib/cni/* /opt/cni/bin/; \\
    rm -f /usr/lib/sysctl.d/*.conf; \\
    systemctl enable kubelet.service containerd.service undo-mount-hacks.service kind-node-host-sysctls.service; \\
    systemctl mask systemd-binfmt.service; \\
    ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer|length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \\
      | jq 'del(.process.rlimits)' >/etc/containerd/cri-base.json; \\
    containerd --version; runc --version; kubelet --version

FROM node AS images
LABEL $label.scratch=1
COPY images.tar /images.tar
COPY import-images.sh /import-images.sh
RUN bash /import-images.sh

FROM node
COPY --from=images /var/lib/containerd/ /var/lib/containerd/
LABEL $label=$inputs
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
EOF

step "docker build of the node image"
run "docker build of the node image" \
  "read the output above; a damaged base image is rebuilt after docker rmi $base_image" \
  "${build[@]}" -t "$image_tag" "$node_ctx"
imported=$(grep -c -e '^registry\.' -e '^localhost/' -e '^docker\.io/' "$work/step.log" || true)
docker rmi "${built_images[@]}" >/dev/null 2>&1 || true
# The classic builder keeps the stages' images (the archive and the imported content, twice the
# images' size); they carry the scratch label, nothing else in the engine does.
docker image prune -f --filter "label=$label.scratch=1" >/dev/null 2>&1 || true
step "built $image_tag ($(docker image inspect --format '{{.Size}}' "$image_tag" | awk '{printf "%.0f MB", $1/1e6}'), $imported image names in its containerd; storage: $storage_manifest)"
