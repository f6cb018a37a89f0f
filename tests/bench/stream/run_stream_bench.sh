#!/usr/bin/env bash
# Runs the streaming benchmarks of the README's "Benchmarks" section (aggregator ingest,
# wire size, memory per series, reconnect after restart, /metrics exposition), each bounded in
# time (about 4 minutes in all on a 2-core machine).
#
#   tests/bench/stream/run_stream_bench.sh BUILD_DIR [quick]
#
# BUILD_DIR must hold fabricmon_load_generator and fabricmon_exposition_bench
# (ninja -C BUILD_DIR fabricmon_load_generator fabricmon_exposition_bench). "quick" shortens the
# windows. BENCH_SMOKE=1 in the environment shrinks everything to a few seconds (4 agents, 1 s
# windows, the small exposition cases at 0.01 s each) to prove the script still works: its
# figures are then not measurements.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [quick]" >&2
  exit 2
fi
build=$1
quick=${2:-}
loadgen=$build/tests/bench/stream/fabricmon_load_generator
bench=$build/tests/bench/stream/fabricmon_exposition_bench
for binary in "$loadgen" "$bench"; do
  if [[ ! -x $binary ]]; then
    echo "missing $binary" >&2
    exit 2
  fi
done

warmup=5
window=20
agents=32
wire_agents=16
wire_window=5
wire_warmup=2
downtime=2000
filter='.*'
bench_args=()
loadgen_args=()
if [[ $quick == quick ]]; then
  warmup=2
  window=5
  filter='BM_(ExporterAppendText|Scrape|Ingest|EncodeBatch)/'
fi
if [[ "${BENCH_SMOKE:-0}" == 1 ]]; then
  warmup=1 window=1 agents=4 wire_agents=4 wire_window=1 wire_warmup=1 downtime=300
  filter='BM_(ExporterAppendText/100000/|Ingest/1/0/)'
  bench_args=(--benchmark_min_time=0.01)
  loadgen_args=(--initial_backoff_ms=100 --max_backoff_ms=500)  # reconnect in ~1 s
fi

echo "### machine: $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "### ingest, wire, memory, restart: $agents DGX nodes x ~490 series, one cycle per node every 20 ms"
timeout 240 "$loadgen" --agents="$agents" --interval_ms=20 --warmup_s="$warmup" \
  --duration_s="$window" --restart_downtime_ms="$downtime" "${loadgen_args[@]}"
echo
echo "### wire size by counter motion"
for profile in idle busy; do
  timeout 120 "$loadgen" --agents="$wire_agents" --interval_ms=50 --warmup_s="$wire_warmup" \
    --duration_s="$wire_window" \
    --restart=false --profile="$profile" | grep -E "^load:|bytes per sample"
done
echo
echo "### exposition and ingest micro-benchmarks"
timeout 600 "$bench" --benchmark_filter="$filter" --benchmark_counters_tabular=true \
  "${bench_args[@]}"
