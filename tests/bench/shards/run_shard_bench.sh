#!/usr/bin/env bash
# Issue 17's benchmark: simulated DGX nodes (the load generator's node model, each node's stream
# the agent's own stack) spread over aggregator shards by the agents' rendezvous ranking,
# detectors on, into one real VictoriaMetrics. Two runs of fabricmon_shard_bench at the same
# shape: remote_write off, then on (with the delay probe and a shard SIGKILLed at the end). Prints
# each run's per-shard table and, from the two totals:
#   remote_write adds X % to ingest CPU per sample (target <= 20 %).
#
#   tests/bench/shards/run_shard_bench.sh BUILD_DIR
#
# The environment sets the shape: NODES (8192), SHARDS (4), INTERVAL_MS (each node's cycle
# period: 30000 on a 2-core machine shared with builds; reduce the rate, never the nodes), WINDOW_S
# (60), FAILOVER_AFTER_MS (10000, the agent's default). BENCH_SMOKE=1: 64 nodes, 5 s windows, 1 s
# failover (figures then prove the script works, nothing more). Skips (77) without the Debian
# package victoria-metrics.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
build=$1
bench=$build/tests/bench/shards/fabricmon_shard_bench
if [[ ! -x $bench ]]; then
  echo "missing $bench (ninja -C $build fabricmon_shard_bench)" >&2
  exit 2
fi
vm_binary=$(command -v victoria-metrics || true)
if [[ -z $vm_binary ]]; then
  echo "SKIP: victoria-metrics (Debian package) is needed"
  exit 77
fi

nodes=${NODES:-8192} shards=${SHARDS:-4} interval=${INTERVAL_MS:-30000} window=${WINDOW_S:-60}
failover_after=${FAILOVER_AFTER_MS:-10000} warmup=10 held=10
if [[ "${BENCH_SMOKE:-0}" == 1 ]]; then
  nodes=64 shards=4 interval=1000 window=5 failover_after=1000 warmup=2 held=2
fi

workdir=$(mktemp -d /tmp/fabricmon-shard-bench-XXXXXX)
vm_pid=
cleanup() {
  if [[ -n $vm_pid ]]; then
    kill "$vm_pid" 2>/dev/null || true
    wait "$vm_pid" 2>/dev/null || true
  fi
  rm -rf "$workdir"
}
trap cleanup EXIT

# A free loopback port (bound and released: VictoriaMetrics takes it right after).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
vm_port=$(free_port)
# -dedup.minScrapeInterval=1ms: a sample replayed after a failover (same series, same timestamp)
# is stored once, as the README's Remote write section asks of receivers.
"$vm_binary" -storageDataPath="$workdir/vm" -httpListenAddr="127.0.0.1:$vm_port" \
  -retentionPeriod=1d -loggerLevel=ERROR -dedup.minScrapeInterval=1ms >"$workdir/vm.log" 2>&1 &
vm_pid=$!
for _ in $(seq 100); do
  if [[ $(curl -s "http://127.0.0.1:$vm_port/health" 2>/dev/null) == OK ]]; then break; fi
  sleep 0.1
done
if [[ $(curl -s "http://127.0.0.1:$vm_port/health" 2>/dev/null) != OK ]]; then
  echo "VictoriaMetrics did not start:" >&2
  tail -5 "$workdir/vm.log" >&2
  exit 1
fi
echo "### VictoriaMetrics $(dpkg-query -W -f='${Version}' victoria-metrics 2>/dev/null || true) on 127.0.0.1:$vm_port"

common=(--nodes="$nodes" --shards="$shards" --interval_ms="$interval" --duration_s="$window"
        --warmup_s="$warmup" --held_s="$held" --failover_after_ms="$failover_after")
status=0
echo "### remote_write off"
"$bench" "${common[@]}" --failover=false | tee "$workdir/off.txt" || status=1
echo
echo "### remote_write on"
"$bench" "${common[@]}" --victoria_metrics="$vm_port" | tee "$workdir/on.txt" || status=1

# CPU per sample of the totals: as measured in the window (at the reduced rate), and at 1 Hz (the
# held cost, rate-independent, plus the per-sample cost: the figure that compares with a real
# fleet).
window_ns() { awk '$1 == "total" { print $8 }' "$1"; }
hz_ns() { sed -n 's/^total@1Hz .*(\([0-9]*\) ns CPU per sample at 1 Hz)/\1/p' "$1"; }
echo
for kind in window hz; do
  off=$(${kind}_ns "$workdir/off.txt")
  on=$(${kind}_ns "$workdir/on.txt")
  if [[ $kind == hz ]] && grep -q '^total@1Hz not derived' "$workdir/off.txt" "$workdir/on.txt"; then
    # The bench declined: a shard's per-sample rest was within the noise of its held cores.
    echo "remote_write overhead at 1 Hz: not derived (a run's per-sample rest was within noise)"
    continue
  fi
  if [[ -z $off || -z $on || $off == 0 ]]; then
    echo "remote_write overhead ($kind): missing a total row" >&2
    status=1
    continue
  fi
  label="at 1 Hz (derived)"
  [[ $kind == window ]] && label="in the window, at the reduced rate"
  awk -v off="$off" -v on="$on" -v label="$label" 'BEGIN {
    printf "remote_write adds %.1f %% to ingest CPU per sample %s (%d ns with, %d ns without; target <= 20 %%)\n",
      100 * (on - off) / off, label, on, off }'
done
exit $status
