#!/usr/bin/env bash
# CPU per exported value: prometheus-node-exporter (infiniband collector, whole process) vs
# fabricmon's ib_sysfs Collect() (in-process: no threads, no transport, no process around it), on
# the same generated DGX H100 tree. Unequal things, so its ratio says so; the whole-process
# comparison of the agent with node_exporter and with a pread floor is
# tests/bench/floor/run_agent_floor.sh.
#
#   tests/bench/compare_node_exporter.sh [BUILD_DIR] [SCRAPES]
#
# BUILD_DIR (default /work/main/build) must already hold tests/bench/fabricmon_ib_sysfs_bench;
# this script builds nothing. SCRAPES defaults to 200. BENCH_SMOKE=1 in the environment shrinks
# the run to a few seconds (5 scrapes, 0.05 s per benchmark) to prove the script still works: its
# figures are then not measurements.
#
# node_exporter: the process's utime+stime (/proc/PID/stat) across SCRAPES scrapes of /metrics
# (HTTP, collection and text encoding included), divided by the node_infiniband_* values per
# scrape. fabricmon: CPU time of one Collect() (BM_IbSysfsCollect) and of Collect() + text
# exposition (BM_IbSysfsCollectAndSerialize) divided by the values emitted, from the benchmark's
# JSON. hw_counters off, so both read the same files (node_exporter 1.5 has no hw_counters).
# node_exporter 1.5 fails its whole infiniband collector when a device has no counters/
# directory, so the irdma and efa devices are left out of the tree for both.
set -euo pipefail

BUILD_DIR=${1:-/work/main/build}
SMOKE=${BENCH_SMOKE:-0}
if [[ "$SMOKE" == 1 ]]; then
  SCRAPES=${2:-5}
  MIN_TIME=0.05
else
  SCRAPES=${2:-200}
  MIN_TIME=1
fi
SOURCE_DIR=$(cd "$(dirname "$0")/../.." && pwd)
BENCH="$BUILD_DIR/tests/bench/fabricmon_ib_sysfs_bench"
PYTHON=$(command -v /usr/bin/python3 || command -v python3)

if [[ ! -x "$BENCH" ]]; then
  echo "missing $BENCH (ninja -C $BUILD_DIR fabricmon_ib_sysfs_bench)" >&2
  exit 2
fi
NODE_EXPORTER=$(command -v prometheus-node-exporter || command -v node_exporter || true)
if [[ -z "$NODE_EXPORTER" ]]; then
  echo "prometheus-node-exporter is not installed" >&2
  exit 77
fi
command -v curl >/dev/null || { echo "curl is required" >&2; exit 77; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fabricmon-compare-XXXXXX")
NE_PID=""
cleanup() {
  if [[ -n "$NE_PID" ]]; then
    kill "$NE_PID" 2>/dev/null || true
    wait "$NE_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# 1. The tree: dgx-h100 without the hw_counters-only devices.
TREE="$WORK/sys"
"$PYTHON" "$SOURCE_DIR/tests/sim/gen_sysfs_tree.py" --profile dgx-h100 --seed 1 --out "$TREE" --without-kinds irdma,efa >/dev/null

# 2. node_exporter on a free port (bounded wait).
PORT=$("$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$NODE_EXPORTER" --collector.disable-defaults --collector.infiniband --web.disable-exporter-metrics \
  --path.sysfs="$TREE" --web.listen-address="127.0.0.1:$PORT" >"$WORK/ne.log" 2>&1 &
NE_PID=$!
URL="http://127.0.0.1:$PORT/metrics"
for _ in $(seq 100); do
  curl -sf -o /dev/null "$URL" && break
  sleep 0.1
done
curl -sf -o "$WORK/first.prom" "$URL" || { echo "node_exporter did not start:" >&2; cat "$WORK/ne.log" >&2; exit 1; }
NE_VALUES=$(grep -c '^node_infiniband_' "$WORK/first.prom" || true)
if ! grep -q '^node_scrape_collector_success{collector="infiniband"} 1' "$WORK/first.prom"; then
  echo "node_exporter's infiniband collector failed on the tree" >&2
  exit 1
fi

cpu_ticks() {  # utime + stime of a process, in clock ticks
  "$PYTHON" -c '
import sys
stat = open("/proc/%s/stat" % sys.argv[1]).read()
fields = stat[stat.rindex(")") + 2:].split()
print(int(fields[11]) + int(fields[12]))' "$1"
}
for _ in $(seq 10); do curl -sf -o /dev/null "$URL"; done  # warm up
BEFORE=$(cpu_ticks "$NE_PID")
START=$(date +%s%N)
for _ in $(seq "$SCRAPES"); do curl -sf -o /dev/null "$URL"; done
END=$(date +%s%N)
AFTER=$(cpu_ticks "$NE_PID")
TICK=$(getconf CLK_TCK)

# 3. fabricmon on the same tree.
"$BENCH" --sysfs_root="$TREE" --benchmark_filter='BM_(IbSysfsCollect|IbSysfsCollectAndSerialize|PreadFloor)/hw_counters:0$' \
  --benchmark_min_time="$MIN_TIME" --benchmark_format=json >"$WORK/bench.json" 2>"$WORK/bench.err"

"$PYTHON" - "$WORK/bench.json" "$SCRAPES" "$NE_VALUES" "$BEFORE" "$AFTER" "$TICK" "$START" "$END" <<'EOF'
import json, sys
bench_path, scrapes, ne_values, before, after, tick, start, end = sys.argv[1:]
scrapes, ne_values, tick = int(scrapes), int(ne_values), int(tick)
ne_cpu_s = (int(after) - int(before)) / tick
ne_ns_per_scrape = ne_cpu_s * 1e9 / scrapes
ne_ns_per_value = ne_ns_per_scrape / ne_values
wall_ms = (int(end) - int(start)) / 1e6 / scrapes
runs = {b["name"]: b for b in json.load(open(bench_path))["benchmarks"]}
def ns(b):  # CPU ns per iteration
    scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b["time_unit"]]
    return b["cpu_time"] * scale
collect = runs["BM_IbSysfsCollect/hw_counters:0"]
serialize = runs["BM_IbSysfsCollectAndSerialize/hw_counters:0"]
floor = runs["BM_PreadFloor/hw_counters:0"]
ours_values = collect["values_per_cycle"]
ours_collect = ns(collect) / ours_values
ours_full = ns(serialize) / serialize["values_per_cycle"]
print("tree: generated dgx-h100 (seed 1) without irdma/efa; %d scrapes" % scrapes)
print("node_exporter   %6d values/scrape  %9.0f ns CPU/scrape  %7.0f ns CPU/value  (%.2f ms wall/scrape incl. curl; %.2f s CPU total, tick %d Hz)"
      % (ne_values, ne_ns_per_scrape, ne_ns_per_value, wall_ms, ne_cpu_s, tick))
print("fabricmon       %6d values/cycle   %9.0f ns CPU/cycle   %7.0f ns CPU/value  (Collect only)"
      % (ours_values, ns(collect), ours_collect))
print("fabricmon       %6d values/cycle   %9.0f ns CPU/cycle   %7.0f ns CPU/value  (Collect + text exposition)"
      % (serialize["values_per_cycle"], ns(serialize), ours_full))
print("pread floor     %6d preads/cycle   %9.0f ns CPU/cycle   Collect/floor = %.2fx"
      % (floor["preads_per_cycle"], ns(floor), ns(collect) / ns(floor)))
print("ratio node_exporter (whole process) / fabricmon Collect() (in-process) CPU per value: "
      "%.1fx (Collect only), %.1fx (Collect + exposition)"
      % (ne_ns_per_value / ours_collect, ne_ns_per_value / ours_full))
EOF
