#!/usr/bin/env bash
# README main job. Today: build fabricmon-agent and run it once on real sysfs captures from
# ../shared/fixtures (an 8×H100 node with ConnectX-7 HCAs, and a mixed mlx4/mlx5/Omni-Path host),
# printing the Prometheus exposition and a short summary.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install-deps.sh
BUILD_DIR=${FABRICMON_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" --parallel "$(nproc)" --target fabricmon-agent

FIXTURES=${FABRICMON_SHARED_FIXTURES:-$(cd .. && pwd)/shared/fixtures}
for tree in gpud-h100 procfs node_exporter; do
  root="$FIXTURES/sysfs/$tree/sys"
  echo "=== fabricmon-agent --once --sysfs_root=$root"
  "$BUILD_DIR/daemon/agent/fabricmon-agent" --once --sysfs_root="$root" | tee "/tmp/fabricmon-once-$tree.prom" \
    | grep -E '^fabricmon_(ib_device_info|ib_port_info|ib_port_xmit_data_bytes_total|ib_link_downed_total|counter_saturated|collector_)' || true
  echo "--- $(grep -vc '^#' "/tmp/fabricmon-once-$tree.prom") samples; full output in /tmp/fabricmon-once-$tree.prom"
done
