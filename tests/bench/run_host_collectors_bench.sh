#!/usr/bin/env bash
# Host collectors benchmark (the "Host collectors" issue): CPU per Collect() cycle of ethtool,
# nvml and netdev, and of a whole DGX H100 node with ib_sysfs, against the target "all collectors
# together < 1 % of one core at 10 Hz". Runs fabricmon_host_collectors_bench (3 repetitions,
# medians; about 40 s on 2 cores) and prints a summary table.
#
#   tests/bench/run_host_collectors_bench.sh BUILD_DIR [JSON_OUT]
#
# BUILD_DIR must hold tests/bench/fabricmon_host_collectors_bench and the NVML stand-in
# (ninja -C BUILD_DIR fabricmon_host_collectors_bench); this script builds nothing. JSON_OUT,
# if given, keeps Google Benchmark's JSON. The veth (real SIOCETHTOOL) rows need root; without
# it they read "skipped". MIN_TIME (seconds per benchmark, default 0.3) and REPETITIONS
# (default 3) can be set in the environment; BENCH_SMOKE=1 makes them 0.01 and 1 (a few seconds,
# to prove the script still works: its figures are then not measurements).
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [JSON_OUT]" >&2
  exit 2
fi
build=$1
bench=$build/tests/bench/fabricmon_host_collectors_bench
if [[ ! -x $bench ]]; then
  echo "missing $bench (ninja -C $build fabricmon_host_collectors_bench)" >&2
  exit 2
fi
python=$(command -v /usr/bin/python3 || command -v python3)
work=$(mktemp -d "${TMPDIR:-/tmp}/fabricmon-host-bench-XXXXXX")
trap 'rm -rf "$work"' EXIT
json=${2:-$work/host_collectors.json}

if [[ "${BENCH_SMOKE:-0}" == 1 ]]; then
  MIN_TIME=${MIN_TIME:-0.01}
  REPETITIONS=${REPETITIONS:-1}
fi
echo "### machine: $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
timeout 110 "$bench" --benchmark_min_time="${MIN_TIME:-0.3}" \
  --benchmark_repetitions="${REPETITIONS:-3}" --benchmark_report_aggregates_only=true \
  --benchmark_out="$json" --benchmark_out_format=json >"$work/console.txt" 2>&1 || {
  cat "$work/console.txt" >&2
  exit 1
}

"$python" - "$json" <<'EOF'
import json, sys

data = json.load(open(sys.argv[1]))
runs = {}
for b in data["benchmarks"]:
    name = b.get("run_name", b["name"])
    if b.get("error_occurred"):
        runs.setdefault(name, {"error": b.get("error_message", "error")})
    elif b.get("run_type") != "aggregate" or b.get("aggregate_name") == "median":
        runs[name] = b

def us(seconds):
    return "%.2f us" % (seconds * 1e6)

def row(label, name, unit_counter=None, unit_label="", extra=""):
    b = runs.get(name)
    if b is None:
        print("| %s | (not run) | | | |" % label)
        return None
    if "error" in b:
        print("| %s | %s | | | |" % (label, b["error"]))
        return None
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b["time_unit"]]
    cycle = b["cpu_time"] * scale
    per_unit = (us(b[unit_counter]) + " " + unit_label) if unit_counter else ""
    print("| %s | %s | %s | %.3f %% | %s |" % (label, us(cycle), per_unit, cycle * 1e3, extra))
    return b

print()
print("CPU per Collect() cycle (median of repetitions); '% core at 10 Hz' = cycle x 10 x 100")
print()
print("| measurement | CPU per cycle | per unit | % core at 10 Hz | notes |")
print("|---|---|---|---|---|")
for n in (1, 8):
    b = runs.get("BM_EthtoolCollectFixture/netdevs:%d" % n, {})
    row("ethtool, %d mlx5 netdev(s), fixture seam" % n, "BM_EthtoolCollectFixture/netdevs:%d" % n,
        "cpu_per_netdev", "/netdev", "%d keys/netdev, %d values" % (
            b.get("keys_per_netdev", 0), round(b.get("values_per_cycle", 0))))
for q in (1, 16):
    b = runs.get("BM_EthtoolCollectIoctl/queues:%d" % q, {})
    row("ethtool, veth %d queue(s), SIOCETHTOOL" % q, "BM_EthtoolCollectIoctl/queues:%d" % q,
        "cpu_per_netdev", "/netdev", "%d keys, all exported" % b.get("keys_per_netdev", 0))
    row("  GSTATS ioctl alone, veth %d queue(s)" % q, "BM_EthtoolGstatsIoctl/queues:%d" % q)
for g in (1, 8):
    b = runs.get("BM_NvmlCollect/gpus:%d" % g, {})
    row("nvml, %d H100 x 18 NVLinks, stand-in lib" % g, "BM_NvmlCollect/gpus:%d" % g,
        "cpu_per_gpu", "/GPU", "%d NVML calls/cycle" % b.get("nvml_calls_per_cycle", 0))
row("nvml, 8 H100, in-process NVML (collector only)", "BM_NvmlCollectInProcess/gpus:8",
    "cpu_per_gpu", "/GPU")
b = runs.get("BM_NetdevCollect", {})
row("netdev, %d netdevs + TCP" % b.get("netdevs", 0), "BM_NetdevCollect", "cpu_per_netdev",
    "/netdev", "%d values" % round(b.get("values_per_cycle", 0)))
for arg, label in ((0, "stand-in NVML"), (1, "in-process NVML")):
    name = "BM_NodeCycle/nvml_in_process:%d" % arg
    b = runs.get(name)
    parts = ""
    if b and "error" not in b:
        parts = ", ".join("%s %.3f %%" % (c, b["%s_percent_at_10hz" % c])
                          for c in ("ib_sysfs", "ethtool", "nvml", "netdev"))
    row("DGX H100 node cycle, %s" % label, name, extra=parts)

print()
for arg, label in ((1, "collectors' own CPU (in-process NVML)"), (0, "with the NVML stand-in")):
    b = runs.get("BM_NodeCycle/nvml_in_process:%d" % arg)
    if b and "error" not in b:
        pct = b["core_percent_at_10hz"]
        print("node, %s: %.3f %% of one core at 10 Hz (target < 1 %%: %s); "
              "%.3f %% at default intervals" % (label, pct, "met" if pct < 1 else "NOT met",
                                                 b["core_percent_at_default_intervals"]))
EOF
