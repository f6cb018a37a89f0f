#!/usr/bin/env bash
# Runs the streaming benchmarks of the README's "Benchmarks" section (aggregator ingest,
# wire size, memory per series, reconnect after restart, /metrics exposition), each bounded in
# time (about 4 minutes in all on a 2-core machine).
#
#   tests/bench/stream/run_stream_bench.sh BUILD_DIR [quick]
#
# BUILD_DIR must hold fabricmon_load_generator and fabricmon_exposition_bench
# (ninja -C BUILD_DIR fabricmon_load_generator fabricmon_exposition_bench). "quick" shortens the
# windows (for a smoke run).
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
if [[ $quick == quick ]]; then
  warmup=2
  window=5
fi

echo "### machine: $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "### ingest, wire, memory, restart: 32 DGX nodes x ~490 series, one cycle per node every 20 ms"
timeout 240 "$loadgen" --agents=32 --interval_ms=20 --warmup_s="$warmup" --duration_s="$window" \
  --restart_downtime_ms=2000
echo
echo "### wire size by counter motion"
for profile in idle busy; do
  timeout 120 "$loadgen" --agents=16 --interval_ms=50 --warmup_s=2 --duration_s=5 \
    --restart=false --profile="$profile" | grep -E "^load:|bytes per sample"
done
echo
echo "### exposition and ingest micro-benchmarks"
filter='.*'
if [[ $quick == quick ]]; then
  filter='BM_(ExporterAppendText|Scrape|Ingest|EncodeBatch)/'
fi
timeout 600 "$bench" --benchmark_filter="$filter" --benchmark_counters_tabular=true
