#!/usr/bin/env bash
# Records how a real API server admits and defaults the task Pod kandev-acceptance composes,
# for the cluster double's comparison (harness/test-support/tests/recorded_pod_defaults.rs,
# which replays every recording against the double and fails on any difference).
#
#   harness/scripts/record-kube-fixtures.sh --context NAME [--kubeconfig FILE] [--out DIR]
#       [--worker-image REF] [--daemon-image REF]
#
# In a fresh namespace (kandev-record-<random>, labelled privileged for Pod Security, as the
# harness's own run namespace is) it composes task Pods from the default full-worker template
# (cargo run --example compose-task-pod), POSTs each as it is (kubectl create --raw) and
# records the request and the API server's answer into DIR (default fixtures/kube/recorded/),
# one file per case:
#   task-pod-emptydir-dry-run.json  a server-side dry run (dryRun=All), as the preflight makes
#   task-pod-emptydir.json          a create, the workspace an emptyDir
#   task-pod-claim.json             a create, the workspace a claim
# each {"server_version", "dry_run", "request", "response"}, the answer without what differs
# on every create (uid, resourceVersion, creationTimestamp, managedFields, selfLink, condition
# times, the ServiceAccount token volume's random name). Then it deletes the namespace (and so
# the Pods) it made, also when it fails. The images need not exist: nothing waits for the Pods
# to run. Needs kubectl, jq and cargo; creates only in its own namespace.
set -euo pipefail

log() { printf 'record-kube-fixtures: %s\n' "$*" >&2; }
usage() {
  sed -n '6,7p' "$0" | sed 's/^# *//' >&2
  exit 2
}

context=
kubeconfig=
out=
worker=kandev-acceptance/worker:recorded
daemon=kandev-acceptance/daemon:recorded
while [ $# -gt 0 ]; do
  case "$1" in
    --context) context=${2:?--context needs a value}; shift 2 ;;
    --kubeconfig) kubeconfig=${2:?--kubeconfig needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a value}; shift 2 ;;
    --worker-image) worker=${2:?--worker-image needs a value}; shift 2 ;;
    --daemon-image) daemon=${2:?--daemon-image needs a value}; shift 2 ;;
    -h|--help) usage ;;
    *) log "unknown argument $1"; usage ;;
  esac
done
# The current context is never used implicitly (as with kandev-acceptance --backend kube).
[ -n "$context" ] || { log "--context NAME is required"; usage; }
for tool in kubectl jq cargo; do
  command -v "$tool" >/dev/null || { log "$tool is needed"; exit 3; }
done

root=$(cd "$(dirname "$0")/../.." && pwd)
out=${out:-$root/fixtures/kube/recorded}
mkdir -p "$out"

k() {
  kubectl --context "$context" ${kubeconfig:+--kubeconfig "$kubeconfig"} --request-timeout=60s "$@"
}

server=$(k get --raw /version | jq -r .gitVersion)
ns=kandev-record-$(od -An -N4 -tx1 /dev/urandom | tr -d ' \n')
work=$(mktemp -d)
created=
cleanup() {
  if [ -n "$created" ]; then
    if k delete --raw "/api/v1/namespaces/$ns" >/dev/null; then
      log "deleted namespace $ns (and the Pods in it)"
    else
      log "could not delete namespace $ns: remove it by hand (kubectl delete namespace $ns)"
    fi
  fi
  rm -rf "$work"
}
trap cleanup EXIT

log "API server $server (context $context); namespace $ns"
jq -n --arg ns "$ns" '{apiVersion: "v1", kind: "Namespace", metadata: {name: $ns, labels: {
  "app.kubernetes.io/managed-by": "kandev-acceptance-recorder",
  "pod-security.kubernetes.io/enforce": "privileged"}}}' >"$work/namespace.json"
k create --raw /api/v1/namespaces -f "$work/namespace.json" >/dev/null
created=yes

# A Pod is refused until the controller has made the namespace's default ServiceAccount.
for attempt in $(seq 1 60); do
  if k get --raw "/api/v1/namespaces/$ns/serviceaccounts/default" >/dev/null 2>&1; then
    break
  fi
  if [ "$attempt" = 60 ]; then
    log "namespace $ns has no default ServiceAccount after 60 s"
    exit 1
  fi
  sleep 1
done

compose() {
  (cd "$root" && cargo run -q --locked -p kandev-test-support --example compose-task-pod -- \
    --namespace "$ns" --worker-image "$worker" --daemon-image "$daemon" "$@")
}
compose >"$work/emptydir.json"
compose --claim kandev-record-workspace >"$work/claim.json"

# What differs on every create; the comparison removes the same from both sides.
strip='def strip:
  del(.metadata.uid, .metadata.resourceVersion, .metadata.creationTimestamp,
      .metadata.managedFields, .metadata.selfLink, .status.startTime)
  | if (.status.conditions | type) == "array"
    then .status.conditions |= map(del(.lastTransitionTime, .lastProbeTime)) else . end
  | walk(if type == "string" and test("^kube-api-access-[a-z0-9]{5}$")
         then "kube-api-access-RANDOM" else . end);
{server_version: $server, dry_run: $dry, request: $request[0], response: ($response[0] | strip)}'

record() {
  local case=$1 request=$2 dry=$3 uri=/api/v1/namespaces/$ns/pods
  if [ "$dry" = true ]; then uri="$uri?dryRun=All"; fi
  k create --raw "$uri" -f "$request" >"$work/$case.response.json"
  jq -n --arg server "$server" --argjson dry "$dry" --slurpfile request "$request" \
    --slurpfile response "$work/$case.response.json" "$strip" >"$out/$case.json"
  log "recorded $out/$case.json"
}
record task-pod-emptydir-dry-run "$work/emptydir.json" true
record task-pod-emptydir "$work/emptydir.json" false
record task-pod-claim "$work/claim.json" false
