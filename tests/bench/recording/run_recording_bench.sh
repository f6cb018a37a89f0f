#!/usr/bin/env bash
# The recording's costs (README "Recording and replay"): bytes per sample on disk, the
# aggregator's ingest CPU with recording on against off, and replay speed on one core.
#
#   tests/bench/recording/run_recording_bench.sh BUILD_DIR
#
# Runs the load generator (tests/bench/stream) twice against the real aggregator, with the same
# load: DGX-node agents streaming every 20 ms, once without and once with recording { ... }; then
# replays the recording with `fabricmon replay` pinned to one CPU. BENCH_SMOKE=1 shrinks it to a
# few seconds (its figures are then not measurements).
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build=$1
loadgen=$build/tests/bench/stream/fabricmon_load_generator
cli=$build/daemon/cli/fabricmon
for binary in "$loadgen" "$cli"; do
  if [[ ! -x $binary ]]; then
    echo "missing $binary (ninja -C $build fabricmon_load_generator fabricmon)" >&2
    exit 2
  fi
done

agents=32 warmup=5 window=20 rounds=2
if [[ "${BENCH_SMOKE:-0}" == 1 ]]; then
  agents=4 warmup=1 window=1 rounds=1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/fabricmon-recording-bench-XXXXXX")
trap 'rm -rf "$work"' EXIT

# ns of aggregator CPU per stored sample, from one load-generator run.
run_load() {
  "$loadgen" --agents="$agents" --interval_ms=20 --warmup_s="$warmup" --duration_s="$window" \
    --restart=false "$@" | tee -a "$work/loadgen.log" |
    sed -nE 's/^per aggregator core .*\(([0-9.]+) ns CPU per sample\)/\1/p'
}

echo "### machine: $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "### ingest CPU: $agents DGX nodes x ~490 series every 20 ms, ${window} s windows," \
     "recording off and on alternately, $rounds round(s)"
off=() on=()
for ((round = 0; round < rounds; ++round)); do
  off+=("$(run_load)")
  rm -rf "$work/recording"
  on+=("$(run_load --aggregator_config="recording { directory: \"$work/recording\" max_bytes: 17179869184 }")")
done
best() { printf '%s\n' "$@" | sort -g | head -1; }
off_ns=$(best "${off[@]}")
on_ns=$(best "${on[@]}")
if [[ -z $off_ns || -z $on_ns ]]; then
  echo "the load generator printed no CPU figure; its output:" >&2
  cat "$work/loadgen.log" >&2
  exit 1
fi
echo "ingest CPU per sample, recording off: $off_ns ns (runs: ${off[*]})"
echo "ingest CPU per sample, recording on:  $on_ns ns (runs: ${on[*]})"
awk -v off="$off_ns" -v on="$on_ns" \
  'BEGIN { printf "recording overhead: %.1f %% of ingest CPU (best of each)\n", (on - off) * 100 / off }'

echo "### the last recording (warm-up and window of the last 'on' run)"
bytes=$(cat "$work"/recording/*.fmrec | wc -c)
start=$(date +%s.%N)
taskset -c 0 "$cli" replay "$work/recording" --json > "$work/replay.json"
end=$(date +%s.%N)
samples=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["summary"]["samples"])' \
  "$work/replay.json")
awk -v b="$bytes" -v s="$samples" \
  'BEGIN { printf "bytes per sample on disk: %.3f (%d bytes, %d samples)\n", b / s, b, s }'
awk -v s="$samples" -v t0="$start" -v t1="$end" \
  'BEGIN { printf "replay: %.2f M samples/s on one core (%d samples in %.2f s, whole process)\n", s / (t1 - t0) / 1e6, s, t1 - t0 }'
