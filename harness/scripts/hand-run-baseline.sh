#!/usr/bin/env bash
# The engine work of one catalogue run, done by hand: serially, in one shell, with the plain
# docker CLI and no harness. It is the yardstick for the harness's own overhead (the README
# reports both times). It launches the same 20 "sessions" (a privileged dockerd companion and
# a UID-1000 agent container sharing a workspace and a socket volume) and runs the same
# nested work: builds, runs, binds, Compose up/down, Chromium, a 64 MiB HTTPS transfer, a
# memory hog, the tool jobs. It checks little: it only measures.
#
# Usage: hand-run-baseline.sh WORKER_IMAGE DAEMON_IMAGE MOCK_AGENT_BINARY
set -euo pipefail
W=$1 D=$2 A=$3
P=kandev-baseline-$$
n=0
trap 'docker ps -aq --filter label=$P | xargs -r docker rm -f >/dev/null; docker volume ls -q --filter label=$P | xargs -r docker volume rm -f >/dev/null' EXIT

dind='exec dockerd --host=unix:///run/docker/docker.sock --group=1000 --exec-root=/run/dockerd --storage-driver=overlay2'
up() { # up NAME [daemon-command]: a session, ready when the agent's `docker info` answers
  local s=$1 cmd=${2:-$dind}
  for v in ws sock data; do docker volume create --label "$P" "$s-$v" >/dev/null; done
  docker run -d --label "$P" --name "$s-d" --privileged -v "$s-ws:/workspace:nocopy" -v "$s-sock:/run/docker:nocopy" \
    -v "$s-data:/var/lib/docker" "$D" sh -c "chgrp 1000 /workspace /run/docker && chmod 2775 /workspace /run/docker && $cmd" >/dev/null
  docker run -d --label "$P" --name "$s-a" --network "container:$s-d" -u 1000:1000 --group-add 1000 \
    --cap-drop ALL --security-opt no-new-privileges -e DOCKER_HOST=unix:///run/docker/docker.sock \
    -e HOME=/tmp -v "$s-ws:/workspace:nocopy" -v "$s-sock:/run/docker:nocopy" "$W" sleep infinity >/dev/null
  docker cp "$A" "$s-a:/tmp/agentctl" >/dev/null
}
ready() { until docker exec "$1-a" docker info >/dev/null 2>&1; do sleep 0.2; done; }
down() { docker rm -f "$1-a" "$1-d" >/dev/null; docker volume rm "$1-ws" "$1-sock" "$1-data" >/dev/null; }
ag() { local s=$1; shift; docker exec -w /workspace "$s-a" sh -c "$*"; }
build() { ag "$1" 'mkdir -p /workspace/w && cp /tmp/agentctl /workspace/w/workload && printf "FROM scratch\nCOPY workload /workload\nENTRYPOINT [\"/workload\"]\n" > /workspace/w/Dockerfile && docker build -q --network none -t probe /workspace/w >/dev/null'; }
session() { n=$((n + 1)); up "$P-$n" "${2:-$dind}"; ready "$P-$n"; eval "$1=$P-$n"; }

start=$(date +%s.%N)
# prepare::docker_gate: a ready daemon, then an absent one that the 2 s gate gives up on
session s; down "$s"
n=$((n + 1)); up "$P-$n" 'exec sleep 3600'; for _ in 1 2; do docker exec "$P-$n-a" timeout 3 docker info >/dev/null 2>&1 || sleep 1; done; down "$P-$n"
# daemon::socket_only
session s; ag "$s" 'stat -c %a /run/docker/docker.sock; cat /proc/net/tcp /proc/net/tcp6 >/dev/null'; down "$s"
# workspace::shared: two sessions
session s; session t; ag "$s" '/tmp/agentctl write /workspace/f 1048576 1 >/dev/null'; docker exec "$s-d" sha256sum /workspace/f >/dev/null; down "$s"; down "$t"
# image::build_run
session s; build "$s"; ag "$s" 'docker run --rm --network none probe echo hi >/dev/null'; down "$s"
# bind::workspace
session s; build "$s"; ag "$s" 'mkdir -p b && /tmp/agentctl write b/in 2097152 7 >/dev/null && docker run --rm -v /workspace/b:/d probe digest /d/in >/dev/null && docker run --rm -v /workspace/b:/d probe write /d/out 1048576 9 >/dev/null'; down "$s"
# compose::cleanup
session s; build "$s"
ag "$s" 'mkdir -p c/in c/out && echo x > c/in/i && printf "version: \"2.4\"\nservices:\n  w:\n    image: probe\n    command: [write, /o/r, \"524288\", \"1\"]\n    volumes: [\"./out:/o\", \"./in:/i:ro\", \"v:/v\"]\n  r:\n    image: probe\n    command: [digest, /i/i]\n    volumes: [\"./in:/i:ro\"]\nvolumes:\n  v: {}\n" > c/docker-compose.yml && cd c && docker-compose -p base up --no-color >/dev/null 2>&1; docker-compose -p base down -v >/dev/null 2>&1'
down "$s"
# browser::launch
session s
ag "$s" 'echo "<h1 id=s>x</h1><script>s.textContent=42</script>" > p.html; f="--headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking --disable-component-update --disable-sync --disable-dev-shm-usage"; chromium $f --user-data-dir=$(mktemp -d) --dump-dom file:///workspace/p.html >/dev/null 2>&1; chromium $f --user-data-dir=$(mktemp -d) --window-size=800,600 --screenshot=/workspace/s.png file:///workspace/p.html >/dev/null 2>&1'
down "$s"
# network::mtu: an HTTPS peer outside the session, a TLS client image, 64 MiB
docker run -d --label "$P" --name "$P-peer" "$D" sh -c 'cd /tmp && openssl req -x509 -newkey rsa:2048 -nodes -keyout k -out c -subj /CN=p -days 1 2>/dev/null && head -c 67108864 /dev/urandom > big && touch ready && exec openssl s_server -quiet -WWW -accept 8443 -cert c -key k' >/dev/null
session s
ag "$s" 'd=/workspace/t; mkdir -p $d/r; for f in /bin/sh $(command -v openssl); do cp --parents -L $f $d/r/; for l in $(ldd $f | awk "/=>/ {print \$3} /ld-linux/ {print \$1}"); do cp --parents -L $l $d/r/; done; done; cp /tmp/agentctl $d/r/workload; printf "FROM scratch\nCOPY r/ /\n" > $d/Dockerfile; docker build -q --network none -t tls $d >/dev/null'
until docker exec "$P-peer" test -f /tmp/ready; do sleep 0.2; done
ip=$(docker inspect -f '{{.NetworkSettings.IPAddress}}' "$P-peer")
ag "$s" "docker run --rm tls /bin/sh -c 'printf \"GET /big HTTP/1.0\r\n\r\n\" | openssl s_client -quiet -connect $ip:8443 2>/dev/null | /workload http-body-digest' >/dev/null"
down "$s"; docker rm -f "$P-peer" >/dev/null
# cgroup::accounting: a held allocation, then a hog beyond the budget (3 GiB companion limit)
n=$((n + 1)); s=$P-$n
for v in ws sock data; do docker volume create --label "$P" "$s-$v" >/dev/null; done
docker run -d --label "$P" --name "$s-d" --privileged --memory 3g --memory-swap 3g -v "$s-ws:/workspace:nocopy" -v "$s-sock:/run/docker:nocopy" -v "$s-data:/var/lib/docker" "$D" sh -c "chgrp 1000 /workspace /run/docker && chmod 2775 /workspace /run/docker && $dind" >/dev/null
docker run -d --label "$P" --name "$s-a" --network "container:$s-d" -u 1000:1000 --group-add 1000 -e DOCKER_HOST=unix:///run/docker/docker.sock -v "$s-ws:/workspace:nocopy" -v "$s-sock:/run/docker:nocopy" "$W" sleep infinity >/dev/null
docker cp "$A" "$s-a:/tmp/agentctl" >/dev/null; ready "$s"; build "$s"
ag "$s" 'docker run -d probe alloc 32 300 >/dev/null; docker run --rm probe alloc 7424 0 >/dev/null 2>&1 || true'
down "$s"
# worker::toolchain
session s
ag "$s" 'cd $(mktemp -d -p /workspace) && git init -q r && python3 -m venv v && printf "import unittest\n" > t.py && v/bin/python -m unittest -q t 2>/dev/null; printf "int main(void){return 0;}\n" > h.c && cc -o h h.c && ./h && node -e "1" && docker version >/dev/null && printf "services:\n  a:\n    image: scratch\n" > c.yml && docker-compose -f c.yml config -q'
down "$s"
# isolation::cross_session
session s; session t; build "$s"; ag "$s" 'docker volume create iv >/dev/null; docker network create inet >/dev/null; docker create --name ic probe sleep 1 >/dev/null'
ag "$t" 'docker inspect ic >/dev/null 2>&1; docker volume inspect iv >/dev/null 2>&1; true'; down "$s"; down "$t"
# lifecycle::stop_retains: a session, its nested state, a replacement on the same workspace
session s; build "$s"; ag "$s" 'docker run -d --name keeper probe sleep 600 >/dev/null; echo kept > /workspace/r'
docker rm -f "$s-a" "$s-d" >/dev/null; docker volume rm "$s-sock" "$s-data" >/dev/null
for v in sock data; do docker volume create --label "$P" "$s-$v" >/dev/null; done
docker run -d --label "$P" --name "$s-d" --privileged -v "$s-ws:/workspace:nocopy" -v "$s-sock:/run/docker:nocopy" -v "$s-data:/var/lib/docker" "$D" sh -c "chgrp 1000 /run/docker && chmod 2775 /run/docker && $dind" >/dev/null
docker run -d --label "$P" --name "$s-a" --network "container:$s-d" -u 1000:1000 --group-add 1000 -e DOCKER_HOST=unix:///run/docker/docker.sock -v "$s-ws:/workspace:nocopy" -v "$s-sock:/run/docker:nocopy" "$W" sleep infinity >/dev/null
ready "$s"; ag "$s" 'cat /workspace/r >/dev/null'; down "$s"
# lifecycle::teardown_exact: two sessions, a nested process, then two look-alikes
session s; session t; build "$s"; ag "$s" 'docker run -d probe sleep 600 >/dev/null'; down "$s"; session u; session v; down "$t"; down "$u"; down "$v"
end=$(date +%s.%N)
awk -v n="$n" -v a="$start" -v b="$end" 'BEGIN { printf "hand-run baseline: %d sessions, %.1f s\n", n, b - a }'
