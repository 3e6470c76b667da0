#!/usr/bin/env bash
# Benchmark of the catalogue against its hand-run baseline (issues #15, #23): builds the
# harness, makes one warm-up catalogue run (images built, the report naming the images and the
# mock agent), checks that the run's scenarios are the ones the baseline does
# (`hand-run-baseline.sh --scenarios`; otherwise the comparison means nothing and it stops),
# then runs `kandev-acceptance run` and harness/scripts/hand-run-baseline.sh alternately, PAIRS
# times (the order within a pair alternating too). For every run it records the wall time and
# the machine-wide busy CPU time (/proc/stat: user+nice+system+irq+softirq+steal), split by
# where it went, from cgroups that already exist or that the benchmark makes:
#   driver  the command itself: the harness process (catalogue), or the baseline's shell and
#           docker CLI processes (baseline); each run is started in a cgroup of its own,
#           kandev-bench/<kind>-<pair>, which its children inherit
#   engine  dockerd, containerd, the shims and runc: the engine's cgroup (ensure-engine.sh
#           starts dockerd in kandev-engine; a systemd unit has one too)
#   pods    the Pods' containers and everything nested in them: the cgroup parent the
#           catalogue's local backend gives every Pod (kandev-acceptance/pod<uid>) and the one
#           the baseline gives its containers (BASELINE_CGROUP, /kandev-baseline)
#   rest    the machine's busy CPU less those three (the kernel's work for nobody's cgroup,
#           other processes)
# It then prints each command's median and spread (min-max) with the split, the
# catalogue-baseline difference per component, what each scenario cost in the last catalogue
# run (its Pods' CPU and its checks' execs and tunnel exchanges, from the run's report), the ratios catalogue/baseline of the medians,
# and the goals (issue #35: catalogue CPU <= 1.05x the baseline's, wall <= 1.15x the floor:
# the catalogue's CPU over the cores, against the baseline's wall), and writes it all as JSON.
# cgroup v1 (cpuacct.usage) and v2 (cpu.stat usage_usec) alike; root, as the engine needs.
#
# Usage: harness/scripts/bench-catalogue.sh [--pairs N] [--release] [--out FILE] [-- RUN_ARGS...]
#   --pairs N   catalogue/baseline pairs (default 5: single pairs' ratios vary by up to a
#               quarter on the 2-core machine; fewer than 3 only for a smoke test)
#   --release   benchmark the release build of the harness (default: the debug build, which
#               README's run command uses)
#   --out FILE  the JSON results (default target/bench/bench-<timestamp>.json)
#   RUN_ARGS    extra arguments of every catalogue run (`kandev-acceptance run RUN_ARGS`);
#               the baseline takes the run's Pod MTU, prepare bound, tools and prepare script
#               from the warm-up's report. It always does the whole catalogue's work, so
#               arguments that select scenarios are refused (after the warm-up run).
#
# Machine-wide CPU counts everything the machine does: run it on a quiet machine. The load
# average and the busy cores over 5 idle seconds are taken at the start and the end (printed,
# and kept in the JSON): background work shows there. A failed catalogue or
# baseline run stops the benchmark with a non-zero exit; goals not met do not (it measures).
set -euo pipefail

pairs=5
out=
profile=debug
run_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --pairs) pairs=${2:?--pairs needs a number}; shift 2 ;;
    --pairs=*) pairs=${1#--pairs=}; shift ;;
    --release) profile=release; shift ;;
    --out) out=${2:?--out needs a file}; shift 2 ;;
    --out=*) out=${1#--out=}; shift ;;
    --) shift; run_args=("$@"); break ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench-catalogue: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case $pairs in '' | *[!0-9]* | 0) echo "bench-catalogue: --pairs must be a positive integer" >&2; exit 2 ;; esac
[ "$pairs" -ge 3 ] || echo "bench-catalogue: warning: $pairs pair(s): medians of fewer than 3 pairs are a smoke test, not a benchmark" >&2

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
target=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
work=$target/bench/$stamp
mkdir -p "$work"
out=${out:-$target/bench/bench-$stamp.json}
runs=$work/runs.tsv
: >"$runs"
# Reports go under the bench's folder unless the run arguments choose a folder.
report_args=(--report-dir "$work/reports")
for a in "${run_args[@]}"; do case $a in --report-dir | --report-dir=* | --report | --report=*) report_args=() ;; esac; done

clk_tck=$(getconf CLK_TCK)
busy_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
# background SECONDS: the cores busy while the benchmark runs nothing.
background() {
  local c0 c1
  c0=$(busy_ticks); sleep "$1"; c1=$(busy_ticks)
  awk -v a="$c0" -v b="$c1" -v hz="$clk_tck" -v s="$1" 'BEGIN { printf "%.2f", (b - a) / hz / s }'
}
load_start=$(loadavg)
idle_start=$(background 5)
echo "bench-catalogue: $(nproc) cores, load average $load_start (1, 5, 15 min), $idle_start cores busy with nothing running: run it on a quiet machine"

echo "bench-catalogue: building kandev-acceptance ($profile)"
if [ "$profile" = release ]; then
  cargo build -q --release -p kandev-scenarios --bin kandev-acceptance
else
  cargo build -q -p kandev-scenarios --bin kandev-acceptance
fi
bin=$target/$profile/kandev-acceptance
baseline=$root/harness/scripts/hand-run-baseline.sh

# --- Where the CPU went: cgroups ------------------------------------------------------------
cgroup_v2=0
[ -f /sys/fs/cgroup/cgroup.controllers ] && cgroup_v2=1
# cg_dir REL: the folder of the cgroup REL (below the hierarchy's root) whose CPU is read.
cg_dir() { if [ $cgroup_v2 = 1 ]; then echo "/sys/fs/cgroup/${1#/}"; else echo "/sys/fs/cgroup/cpuacct/${1#/}"; fi; }
# cg_ns REL: the CPU the cgroup and its descendants have used, in ns (0 while it does not
# exist: a Pods' parent the first run creates).
cg_ns() {
  local d
  d=$(cg_dir "$1")
  if [ $cgroup_v2 = 1 ]; then
    awk '$1 == "usage_usec" { print $2 * 1000; found = 1 } END { if (!found) print 0 }' "$d/cpu.stat" 2>/dev/null || echo 0
  else
    cat "$d/cpuacct.usage" 2>/dev/null || echo 0
  fi
}
# The engine's cgroup: dockerd's (containerd, the shims and runc are its children there).
dockerd_pid=$(pgrep -xo dockerd || true)
[ -n "$dockerd_pid" ] || { echo "bench-catalogue: no dockerd process on this machine: the split needs the engine here (harness/scripts/ensure-engine.sh)" >&2; exit 2; }
if [ $cgroup_v2 = 1 ]; then
  engine_cg=$(sed -n 's/^0:://p' "/proc/$dockerd_pid/cgroup")
else
  engine_cg=$(awk -F: '$2 ~ /(^|,)cpuacct(,|$)/ { print $3 }' "/proc/$dockerd_pid/cgroup")
fi
case $engine_cg in
  '' | /) echo "bench-catalogue: dockerd runs in the root cgroup, where its CPU cannot be told from the machine's: start it with harness/scripts/ensure-engine.sh (cgroup kandev-engine) or as a systemd unit" >&2; exit 2 ;;
esac
# The Pods' cgroup parents: the local backend's (harness/src/backend/local/plan: CGROUP_ROOT)
# and the baseline's.
catalogue_pods_cg=kandev-acceptance
# Absolute, as the local backend's: a relative parent is taken below dockerd's own cgroup.
export BASELINE_CGROUP=/kandev-baseline
mkdir -p "$(cg_dir kandev-bench)"
echo "bench-catalogue: cgroup v$((cgroup_v2 + 1)); engine $engine_cg, Pods $catalogue_pods_cg (catalogue) and $BASELINE_CGROUP (baseline), each run in kandev-bench/<run>"

# measure KIND PAIR LOG CMD...: runs CMD (output to LOG) in a cgroup of its own, appends a
# line to runs.tsv: wall, machine CPU, and its split (driver, engine, Pods) in seconds.
# Returns CMD's exit status.
measure() {
  local kind=$1 pair=$2 log=$3; shift 3
  local t0 c0 t1 c1 rc=0 pods_cg=$catalogue_pods_cg driver_cg=kandev-bench/$kind-$pair-$$
  [ "$kind" != baseline ] || pods_cg=$BASELINE_CGROUP
  mkdir -p "$(cg_dir "$driver_cg")"
  local e0 p0 e1 p1 d1
  t0=$(date +%s.%N); c0=$(busy_ticks); e0=$(cg_ns "$engine_cg"); p0=$(cg_ns "$pods_cg")
  sh -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' sh "$(cg_dir "$driver_cg")" "$@" >"$log" 2>&1 || rc=$?
  c1=$(busy_ticks); t1=$(date +%s.%N); e1=$(cg_ns "$engine_cg"); p1=$(cg_ns "$pods_cg"); d1=$(cg_ns "$driver_cg")
  rmdir "$(cg_dir "$driver_cg")" 2>/dev/null || true
  local report=
  [ "$kind" = baseline ] || report=$(sed -n 's/^  report: //p' "$log" | tail -n1)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$kind" "$pair" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" \
    "$(awk -v a="$c0" -v b="$c1" -v hz="$clk_tck" 'BEGIN { printf "%.2f", (b - a) / hz }')" \
    "$rc" "$log" "$report" \
    "$(awk -v n="$d1" 'BEGIN { printf "%.2f", n / 1e9 }')" \
    "$(awk -v a="$e0" -v b="$e1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')" \
    "$(awk -v a="$p0" -v b="$p1" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')" >>"$runs"
  tail -n1 "$runs" | awk -F'\t' '{ printf "  %-9s %-6s wall %7.1f s  cpu %7.1f s (driver %.1f, engine %.1f, pods %.1f, rest %.1f)  exit %s\n", $1, $2, $3, $4, $8, $9, $10, $4 - $8 - $9 - $10, $5 }'
  return "$rc"
}
fail() {
  echo "bench-catalogue: $1 failed (exit $2); its output: $3" >&2
  tail -n 25 "$3" >&2
  exit 1
}

echo "bench-catalogue: warm-up catalogue run (builds the images)"
measure warmup 0 "$work/warmup.log" "$bin" run "${report_args[@]}" "${run_args[@]}" || fail "the warm-up catalogue run" $? "$work/warmup.log"
report=$(tail -n1 "$runs" | cut -f7)
[ -f "$report" ] || { echo "bench-catalogue: the warm-up run named no report.json (looked for '  report: PATH' in $work/warmup.log)" >&2; exit 1; }
# The baseline's inputs, from the warm-up's report: images, mock agent, the run's settings.
eval "$(python3 - "$report" "$("$baseline" --scenarios)" <<'EOF'
import json, shlex, sys
r = json.load(open(sys.argv[1]))
# The baseline does exactly its scenarios' nested work: a run of others compares nothing.
# A scenario the run skipped or found incompatible did no work (locally launch::connection:
# no API server), so it is not compared.
ran = [s.get("name") for s in r.get("scenarios", [])
       if s.get("outcome") not in ("skipped", "incompatible")]
done = sys.argv[2].split()
if sorted(ran) != sorted(done):
    print("echo %s >&2; exit 1" % shlex.quote(
        "bench-catalogue: the warm-up run's scenarios are not the ones hand-run-baseline.sh does (run but not in the baseline: %s; in the baseline but not run, or run and skipped or incompatible: %s): extend the baseline to a new scenario's nested work, or do not select scenarios with RUN_ARGS"
        % (", ".join(sorted(set(ran) - set(done))) or "none", ", ".join(sorted(set(done) - set(ran))) or "none")))
    sys.exit()
images = {i.get("role"): i.get("reference") for i in r.get("environment", {}).get("images", [])}
agent = next((s.get("evidence", {}).get("path") for s in r.get("setup", [])
              if s.get("name") == "mock_agent_binary" and isinstance(s.get("evidence"), dict)), None)
settings = r.get("configuration", {}).get("settings", {})
missing = [n for n, v in (("worker image", images.get("worker")), ("daemon image", images.get("daemon")),
                          ("mock agent binary", agent)) if not v]
if missing:
    print("echo %s >&2; exit 1" % shlex.quote(
        "bench-catalogue: the warm-up report %s names no %s (environment.images[role=worker|daemon].reference, setup[mock_agent_binary].evidence.path)"
        % (sys.argv[1], ", ".join(missing))))
    sys.exit()
values = {
    "WORKER": images["worker"], "DAEMON": images["daemon"], "MOCK_AGENT": agent,
    "POD_MTU": settings.get("pod_mtu", 1450),
    "DOCKER_READY_TIMEOUT_SECONDS": settings.get("docker_ready_timeout_seconds", 60),
    "REQUIRED_TOOLS": " ".join(settings.get("required_tools") or []),
    "OPTIONAL_TOOLS": " ".join(settings.get("optional_tools") or []),
    "PREPARE_SCRIPT": settings.get("prepare_script") or "",
}
for k, v in values.items():
    print("%s=%s" % (k, shlex.quote(str(v))))
EOF
)"
: "${WORKER:?bench-catalogue: could not read the warm-up report $report}"
export POD_MTU DOCKER_READY_TIMEOUT_SECONDS REQUIRED_TOOLS OPTIONAL_TOOLS
[ -z "$PREPARE_SCRIPT" ] || export PREPARE_SCRIPT
echo "bench-catalogue: worker $WORKER, daemon $DAEMON, mock agent $MOCK_AGENT"

run_catalogue() {
  measure catalogue "$1" "$work/catalogue-$1.log" "$bin" run "${report_args[@]}" "${run_args[@]}" ||
    fail "catalogue run $1" $? "$work/catalogue-$1.log"
}
run_baseline() {
  measure baseline "$1" "$work/baseline-$1.log" "$baseline" "$WORKER" "$DAEMON" "$MOCK_AGENT" ||
    fail "baseline run $1" $? "$work/baseline-$1.log"
}
# The order alternates within pairs too (catalogue first in odd pairs, baseline first in even
# ones): what one run leaves the engine to finish lands on the other command alike.
for pair in $(seq 1 "$pairs"); do
  echo "bench-catalogue: pair $pair/$pairs"
  if [ $((pair % 2)) -eq 1 ]; then run_catalogue "$pair"; run_baseline "$pair"; else run_baseline "$pair"; run_catalogue "$pair"; fi
done
load_end=$(loadavg)
idle_end=$(background 5)

python3 - "$runs" "$out" "$pairs" "$load_start $idle_start" "$load_end $idle_end" "$(nproc)" "$clk_tck" "$WORKER" "$DAEMON" "$MOCK_AGENT" "$stamp" "$profile" "${run_args[@]}" <<'EOF'
import json, statistics, sys
runs_file, out, pairs, start, end, cores, clk_tck, worker, daemon, agent, stamp, profile = sys.argv[1:13]
load_start, idle_start = start.rsplit(" ", 1)
load_end, idle_end = end.rsplit(" ", 1)
run_args = sys.argv[13:]
runs = []
for line in open(runs_file):
    kind, pair, wall, cpu, rc, log, report, driver, engine, pods = line.rstrip("\n").split("\t")
    split = {"driver": float(driver), "engine": float(engine), "pods": float(pods)}
    split["rest"] = round(float(cpu) - sum(split.values()), 2)
    runs.append({"kind": kind, "pair": int(pair), "wall_s": float(wall), "cpu_s": float(cpu),
                 "cpu_split_s": split, "exit_code": int(rc), "log": log, "report": report or None})
COMPONENTS = ("driver", "engine", "pods", "rest")
CPU_GOAL, WALL_FLOOR_GOAL = 1.05, 1.15  # issue #35

def stats(values):
    return {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values), "n": len(values)}

summary = {}
for kind in ("catalogue", "baseline"):
    mine = [r for r in runs if r["kind"] == kind]
    summary[kind] = {"wall_s": stats([r["wall_s"] for r in mine]), "cpu_s": stats([r["cpu_s"] for r in mine]),
                     "cpu_split_s": {c: stats([r["cpu_split_s"][c] for r in mine]) for c in COMPONENTS}}
ratio = {k: round(summary["catalogue"][k]["median"] / summary["baseline"][k]["median"], 3)
         for k in ("cpu_s", "wall_s")}
# Where the catalogue's extra CPU goes: the difference of the medians, per component.
difference = {c: round(summary["catalogue"]["cpu_split_s"][c]["median"] - summary["baseline"]["cpu_split_s"][c]["median"], 2)
              for c in COMPONENTS}
difference["total"] = round(summary["catalogue"]["cpu_s"]["median"] - summary["baseline"]["cpu_s"]["median"], 2)
# The catalogue's wall cannot go below its CPU spread over every core with nothing idle: the
# floor. The wall goal compares the catalogue's wall with it.
wall_floor = {"cores": int(cores),
              "wall_s": round(summary["catalogue"]["cpu_s"]["median"] / int(cores), 3)}
wall_floor["ratio"] = round(wall_floor["wall_s"] / summary["baseline"]["wall_s"]["median"], 3)
wall_over_floor = round(summary["catalogue"]["wall_s"]["median"] / wall_floor["wall_s"], 3)
goals = {
    "cpu": {"ratio": ratio["cpu_s"], "limit": CPU_GOAL, "met": ratio["cpu_s"] <= CPU_GOAL},
    "wall_over_floor": {"ratio": wall_over_floor, "limit": WALL_FLOOR_GOAL, "met": wall_over_floor <= WALL_FLOOR_GOAL},
}

print()
print("%-10s %5s %8s %8s %8s %8s %8s %8s" % ("run", "pair", "wall s", "cpu s", "driver", "engine", "pods", "rest"))
for r in runs:
    sp = r["cpu_split_s"]
    print("%-10s %5s %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f" % (r["kind"], r["pair"] or "-", r["wall_s"], r["cpu_s"],
                                                          sp["driver"], sp["engine"], sp["pods"], sp["rest"]))
print()
print("%-10s %24s %24s" % ("command", "wall s: median (min-max)", "cpu s: median (min-max)"))
for kind in ("catalogue", "baseline"):
    w, c = summary[kind]["wall_s"], summary[kind]["cpu_s"]
    print("%-10s %24s %24s" % (kind, "%.1f (%.1f-%.1f)" % (w["median"], w["min"], w["max"]),
                               "%.1f (%.1f-%.1f)" % (c["median"], c["min"], c["max"])))
print()
print("cpu s by component, median (min-max):")
print("%-10s %20s %20s %12s" % ("component", "catalogue", "baseline", "difference"))
for comp in COMPONENTS:
    a, b = summary["catalogue"]["cpu_split_s"][comp], summary["baseline"]["cpu_split_s"][comp]
    print("%-10s %20s %20s %+12.1f" % (comp, "%.1f (%.1f-%.1f)" % (a["median"], a["min"], a["max"]),
                                      "%.1f (%.1f-%.1f)" % (b["median"], b["min"], b["max"]), difference[comp]))
print("%-10s %20s %20s %+12.1f" % ("total", "%.1f" % summary["catalogue"]["cpu_s"]["median"],
                                  "%.1f" % summary["baseline"]["cpu_s"]["median"], difference["total"]))
print("(medians of each component need not add up to the median of the total)")
print()
by_pair = {}
for r in runs:
    if r["kind"] in ("catalogue", "baseline"):
        by_pair.setdefault(r["pair"], {})[r["kind"]] = r
pair_ratios = [{"pair": p, "cpu": round(k["catalogue"]["cpu_s"] / k["baseline"]["cpu_s"], 3),
                "wall": round(k["catalogue"]["wall_s"] / k["baseline"]["wall_s"], 3)}
               for p, k in sorted(by_pair.items()) if len(k) == 2]
for pr in pair_ratios:
    print("pair %d catalogue/baseline: cpu %.2fx, wall %.2fx" % (pr["pair"], pr["cpu"], pr["wall"]))
print("catalogue/baseline (medians, %s pair%s): cpu %.2fx, wall %.2fx" % (pairs, "" if pairs == "1" else "s", ratio["cpu_s"], ratio["wall_s"]))
print("wall floor: the catalogue's median CPU over %d cores, %.1f s, is %.2fx the baseline's median wall; the catalogue's wall is %.2fx its floor"
      % (wall_floor["cores"], wall_floor["wall_s"], wall_floor["ratio"], wall_over_floor))
for name, g in goals.items():
    print("goal %-15s <= %.2fx: %.2fx  %s" % (name, g["limit"], g["ratio"], "met" if g["met"] else "NOT MET"))
print("load average (1, 5, 15 min): %s at the start, %s at the end; busy cores with nothing running: %s at the start, %s at the end (of %s)"
      % (load_start, load_end, idle_start, idle_end, cores))

# What each scenario's checks cost, from the last catalogue run's report: its Pods' CPU (their
# cgroups, read at teardown) and the control calls its checks made (execs into its Pods,
# exchanges over its agents' tunnels). The baseline does each scenario's nested work without
# those calls; the engine's and the Pods' differences above are what they cost in all. A Pod
# the scenario deleted itself (lifecycle::task_sessions' terminal cleanup) is not in its
# reading, only in the Pods column above.
last = [r for r in runs if r["kind"] == "catalogue" and r["report"]]
per_scenario = []
if last:
    report = json.load(open(last[-1]["report"]))
    for s in report.get("scenarios", []):
        res, calls = s.get("resources") or {}, s.get("calls") or {}
        per_scenario.append({"scenario": s["name"], "pods": res.get("pods", 0),
                             "pods_cpu_s": round(res.get("cpu_ms", 0) / 1000, 2),
                             "execs": calls.get("exec", {}).get("count", 0),
                             "port_exchanges": calls.get("port_exchange", {}).get("count", 0),
                             "duration_s": round(s.get("duration_ms", 0) / 1000, 1)})
    per_scenario.sort(key=lambda x: -x["pods_cpu_s"])
    print()
    print("what each scenario cost in the last catalogue run (its report): Pods' CPU, control calls")
    print("%-32s %5s %9s %6s %9s %9s" % ("scenario", "pods", "pods cpu", "execs", "exchanges", "wall s"))
    for x in per_scenario:
        print("%-32s %5d %9.1f %6d %9d %9.1f" % (x["scenario"], x["pods"], x["pods_cpu_s"], x["execs"], x["port_exchanges"], x["duration_s"]))

result = {
    "started_at": stamp, "pairs": int(pairs), "run_args": run_args,
    "machine": {"cores": int(cores), "clk_tck": int(clk_tck), "loadavg_start": load_start, "loadavg_end": load_end,
                "idle_busy_cores_start": float(idle_start), "idle_busy_cores_end": float(idle_end)},
    "cpu_measure": "machine-wide busy time from /proc/stat: user+nice+system+irq+softirq+steal; split by cgroup: driver (the command's own cgroup), engine (dockerd's), pods (the Pods' cgroup parent), rest (the machine less those)",
    "profile": profile,
    "baseline_inputs": {"worker_image": worker, "daemon_image": daemon, "mock_agent": agent},
    "runs": runs, "summary": summary, "ratios": ratio, "cpu_difference_s": difference,
    "pair_ratios": pair_ratios, "goals": goals,
    "wall_floor": wall_floor, "per_scenario": per_scenario,
}
with open(out, "w") as f:
    json.dump(result, f, indent=2)
    f.write("\n")
print("results: %s" % out)
EOF
