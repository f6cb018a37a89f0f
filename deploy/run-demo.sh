#!/usr/bin/env bash
# README main job: install what is missing, build fabricmon, then run it on a simulated GPU
# cluster and watch it find faults.
#
# tests/sim/fabric_sim generates 16 GPU nodes (8 GPUs x 18 NVLinks, one ConnectX-7 HCA each) on a
# 2-tier InfiniBand fat tree (4 leaves x 2 spines) as sysfs/procfs trees and NVML stand-in state;
# when the agent's ib_fabric collector can sweep it, the same fabric also runs in ibsim with opensm
# and node01's agent reads every switch port by MADs. It starts the aggregator, one agent per node
# and a Prometheus server scraping the aggregator (temporary storage, loopback, free ports), plays
# a flapping link, an incast whose congestion spreads over both switch tiers and a job falling
# back from RDMA to TCP, and prints `fabricmon diagnose --nodes=<all>` whenever it changes.
#
# With a terminal on stdin it then keeps running (addresses printed) until Ctrl-C; otherwise it
# exits 0 after the timeline with a summary. Every process and temporary directory it created is
# removed on exit, whatever the exit. Re-runnable at will. FABRICMON_BUILD_DIR selects the build
# directory (default: build).
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install-deps.sh
BUILD_DIR=${FABRICMON_BUILD_DIR:-build}
TARGETS=(fabricmon-agent fabricmon-aggregator fabricmon fabricmon_nvml_standin)

# -U: forget a collector skip left in the cache by an earlier fallback (below), so a fixed tree
# builds everything again.
CMAKE_LOG=$(mktemp /tmp/fabricmon-demo-cmake.XXXXXX)
if ! cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
     -UFABRICMON_SKIP_COLLECTORS >"$CMAKE_LOG" 2>&1; then
  tail -20 "$CMAKE_LOG"
  echo "run-demo: configure failed; retrying without the ib_fabric collector (the demo then" \
       "runs on host counters only, without ibsim)"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DFABRICMON_SKIP_COLLECTORS=ib_fabric >/dev/null
fi
rm -f "$CMAKE_LOG"
cmake --build "$BUILD_DIR" --parallel "$(nproc)" --target "${TARGETS[@]}"

DEMO_PID=""
cleanup() {
  # fabric_sim stops its own children (each in its own process group) and removes its temporary
  # directory; this covers a demo that was killed before it could.
  if [[ -n "$DEMO_PID" ]] && kill -0 "$DEMO_PID" 2>/dev/null; then
    kill -TERM "$DEMO_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$DEMO_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$DEMO_PID" 2>/dev/null || true
  fi
  if [[ -n "${STATE_FILE:-}" && -s "$STATE_FILE" ]]; then
    while read -r kind value; do
      case "$kind" in
        pgid) kill -KILL -- "-$value" 2>/dev/null || true ;;
        dir) [[ "$value" == */fabricmon-sim-* ]] && rm -rf -- "$value" ;;
      esac
    done < "$STATE_FILE"
  fi
  rm -f "${STATE_FILE:-}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

STATE_FILE=$(mktemp /tmp/fabricmon-demo-state.XXXXXX)
INTERACTIVE=--no-interactive
if [[ -t 0 ]]; then INTERACTIVE=--interactive; fi
echo "== fabricmon demo: simulated cluster (build: $BUILD_DIR)"
# The demo runs in the foreground so that Ctrl-C reaches it (it then stops everything itself).
set +e
PYTHONPATH=tests/sim PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
  python3 -m fabric_sim demo --build-dir "$BUILD_DIR" "$INTERACTIVE" --state-file "$STATE_FILE" &
DEMO_PID=$!
wait "$DEMO_PID"
status=$?
set -e
DEMO_PID=""
exit "$status"
