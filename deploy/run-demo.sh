#!/usr/bin/env bash
# README main job: build fabricmon, then run an aggregator and one agent per real captured node
# from ../shared/fixtures (8×H100 with ConnectX-7; a mixed mlx4/mlx5/Omni-Path host; a host with
# an iWARP NIC whose counters say "N/A (no PMA)"), and show what fabricmon sees: the nodes, one
# node's inventory, a few series and the aggregator's own health. With a terminal it keeps running
# (metrics browsable at the printed address) until Ctrl-C; without one it exits after printing.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/install-deps.sh
BUILD_DIR=${FABRICMON_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" --parallel "$(nproc)" --target fabricmon-agent fabricmon-aggregator fabricmon

FIXTURES=${FABRICMON_SHARED_FIXTURES:-$(cd .. && pwd)/shared/fixtures}
AGENT=$BUILD_DIR/daemon/agent/fabricmon-agent
AGGREGATOR=$BUILD_DIR/daemon/aggregator/fabricmon-aggregator
CLI=$BUILD_DIR/daemon/cli/fabricmon
WORK=$(mktemp -d /tmp/fabricmon-demo.XXXXXX)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
METRICS_PORT=${FABRICMON_DEMO_METRICS_PORT:-$(free_port)}

echo "== fabricmon-agent --once on the 8×H100 capture (first lines)"
"$AGENT" --once --sysfs_root="$FIXTURES/sysfs/gpud-h100/sys" > "$WORK/once.prom"
grep -E '^fabricmon_ib_(port_xmit_data_bytes_total|link_downed_total)\{device="mlx5_[01]"' "$WORK/once.prom"
grep -E '^fabricmon_series_saturated' "$WORK/once.prom" | head -3
echo "   ($(grep -vc '^#' "$WORK/once.prom") samples; promtool: $(promtool check metrics < "$WORK/once.prom" 2>&1 && echo clean))"

echo "== aggregator on 127.0.0.1 (gRPC port from --port_file), /metrics on 127.0.0.1:$METRICS_PORT"
"$AGGREGATOR" --grpc_listen=127.0.0.1:0 --port_file="$WORK/port" \
  --metrics_listen="127.0.0.1:$METRICS_PORT" --log_level=warning 2> "$WORK/aggregator.log" &
PIDS+=($!)
for _ in $(seq 50); do [[ -s "$WORK/port" ]] && break; sleep 0.1; done
GRPC_PORT=$(cat "$WORK/port")

echo 'tls { insecure_plaintext: true } reconnect_initial_backoff_ms: 100' > "$WORK/agent.textproto"
for node in gpud-h100 procfs node_exporter; do
  "$AGENT" --aggregator="127.0.0.1:$GRPC_PORT" --node_name="demo-$node" \
    --sysfs_root="$FIXTURES/sysfs/$node/sys" --config="$WORK/agent.textproto" 2> "$WORK/agent-$node.log" &
  PIDS+=($!)
done
for _ in $(seq 50); do
  [[ $("$CLI" --aggregator="127.0.0.1:$GRPC_PORT" nodes 2>/dev/null | grep -c ' yes ') -ge 3 ]] && break
  sleep 0.2
done

echo "== fabricmon nodes"
"$CLI" --aggregator="127.0.0.1:$GRPC_PORT" nodes
echo "== fabricmon node demo-procfs"
"$CLI" --aggregator="127.0.0.1:$GRPC_PORT" node demo-procfs
echo "== /metrics (selection)"
curl -s "http://127.0.0.1:$METRICS_PORT/metrics" > "$WORK/aggregator.prom"
grep -E '^fabricmon_(node_up|aggregator_(samples_total|series|streams) )' "$WORK/aggregator.prom"
grep -E '^fabricmon_ib_device_info\{node="demo-node_exporter"' "$WORK/aggregator.prom"
echo "   ($(grep -vc '^#' "$WORK/aggregator.prom") samples; promtool: $(promtool check metrics < "$WORK/aggregator.prom" 2>&1 && echo clean))"

if [[ -t 0 ]]; then
  echo "== running: http://127.0.0.1:$METRICS_PORT/metrics, fabricmon --aggregator=127.0.0.1:$GRPC_PORT nodes; Ctrl-C to stop"
  wait
fi
