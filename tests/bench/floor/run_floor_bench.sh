#!/usr/bin/env bash
# Issue 19's figures in one run (README "Benchmarks"): the aggregator's ingest per core at 32, 400
# and 1,000 agents and its memory per series (run_ingest_floor.sh), then the agent, whole process,
# against the pread floor and node_exporter (run_agent_floor.sh). Each part prints its rows with
# their ratios to the goals; run on an otherwise idle machine, the two parts one after the other
# so that neither loads the other.
#
#   tests/bench/floor/run_floor_bench.sh BUILD_DIR [quick]
#
# BUILD_DIR needs: ninja -C BUILD_DIR fabricmon_load_generator fabricmon-aggregator
# fabricmon-agent fabricmon_pread_floor. ROUNDS, DURATION_S, HW_COUNTERS and BENCH_SMOKE pass
# through to the agent part (see run_agent_floor.sh).
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [quick]" >&2
  exit 2
fi
here=$(cd "$(dirname "$0")" && pwd)
echo "== aggregator ingest (goals: 8 M samples/s per core at 32 agents x 10 Hz, 5 M at 1 Hz; <= 600 B per series)"
bash "$here/run_ingest_floor.sh" "$@"
echo
echo "== agent, whole process (goals: <= 1.2x the pread floor, >= 15x less CPU per value than node_exporter)"
bash "$here/run_agent_floor.sh" "$1"
