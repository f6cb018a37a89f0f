#!/usr/bin/env bash
# NVML collector check on a real GPU machine (there is none in CI). Builds only what it needs,
# prints the driver's own view (nvidia-smi) next to fabricmon's, and runs:
#   1. fabricmon_collector_nvml_gpu_test (ctest label `gpu`): the collector against the real
#      libnvidia-ml.so.1 — identity, link states, counter monotonicity, promtool lint;
#   2. fabricmon-agent --once with only the nvml collector enabled, output checked by promtool.
#
# Usage: bash tests/gpu/run_nvml_check.sh
# Environment: FABRICMON_BUILD_DIR (default build-gpu), JOBS (default nproc),
#   FABRICMON_NVML_LIBRARY (default libnvidia-ml.so.1; e.g. an absolute path in a container),
#   FABRICMON_SKIP_BUILD=1 to use what is already built in FABRICMON_BUILD_DIR.
# Needs the build dependencies of deploy/install-deps.sh (run that first on a fresh machine).
# Exit status: 0 all good, 1 a check failed, 2 NVML was not usable (the test skipped).
set -uo pipefail
cd "$(dirname "$0")/../.."

BUILD_DIR=${FABRICMON_BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
LIBRARY=${FABRICMON_NVML_LIBRARY:-libnvidia-ml.so.1}
OUT_DIR=$(mktemp -d)
trap 'rm -rf "$OUT_DIR"' EXIT

section() { printf '\n===== %s =====\n' "$*"; }

if [[ "${FABRICMON_SKIP_BUILD:-0}" != 1 ]]; then
  section "build ($BUILD_DIR)"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || exit 1
  cmake --build "$BUILD_DIR" --parallel "$JOBS" \
    --target fabricmon_collector_nvml_gpu_test fabricmon-agent || exit 1
fi

section "driver view: nvidia-smi"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,uuid,pci.bus_id,name,utilization.gpu,utilization.memory \
    --format=csv
  nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name --format=csv
  echo "--- nvidia-smi nvlink -s (state; compare fabricmon_nvlink_state)"
  nvidia-smi nvlink -s
  echo "--- nvidia-smi nvlink -e (error counters; compare fabricmon_nvlink_errors_total)"
  nvidia-smi nvlink -e
  echo "--- nvidia-smi nvlink -R (remote PCI ids; compare fabricmon_nvlink_info)"
  nvidia-smi nvlink -R 2>/dev/null || echo "(nvlink -R not supported by this nvidia-smi)"
else
  echo "nvidia-smi not found"
fi

section "fabricmon_collector_nvml_gpu_test"
test_log="$OUT_DIR/gpu_test.log"
FABRICMON_NVML_LIBRARY="$LIBRARY" \
  "$BUILD_DIR/tests/unit/collectors/nvml/fabricmon_collector_nvml_gpu_test" --gtest_color=no \
  2>&1 | tee "$test_log"
test_rc=${PIPESTATUS[0]}
if grep -q '\[  SKIPPED \]' "$test_log"; then
  echo "NVML was not usable (see the skip reason above): is the driver loaded, is" \
       "$LIBRARY on the loader path?" >&2
  exit 2
fi

section "fabricmon-agent --once (nvml collector only)"
config="$OUT_DIR/agent.textproto"
# Every default-on collector is disabled explicitly so that only nvml runs.
cat >"$config" <<EOF
collectors {
  ib_sysfs { enabled: false }
  ethtool { enabled: false }
  netdev { enabled: false }
  nvml { enabled: true library: "$LIBRARY" }
}
EOF
cat "$config"
agent_out="$OUT_DIR/agent.prom"
"$BUILD_DIR/daemon/agent/fabricmon-agent" --once --config="$config" --log_level=info \
  >"$agent_out"
agent_rc=$?
cat "$agent_out"
promtool_rc=0
if command -v promtool >/dev/null 2>&1; then
  section "promtool check metrics (agent output)"
  promtool check metrics <"$agent_out"
  promtool_rc=$?
  [[ $promtool_rc -eq 0 ]] && echo "clean"
fi
if ! grep -q '^fabricmon_collector_success{collector="nvml"} 1' "$agent_out"; then
  echo "fabricmon_collector_success{collector=\"nvml\"} is not 1" >&2
  agent_rc=1
fi

section "summary"
echo "gpu test: rc=$test_rc  agent: rc=$agent_rc  promtool: rc=$promtool_rc"
if [[ $test_rc -ne 0 || $agent_rc -ne 0 || $promtool_rc -ne 0 ]]; then
  exit 1
fi
exit 0
