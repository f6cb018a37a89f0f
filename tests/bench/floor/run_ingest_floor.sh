#!/usr/bin/env bash
# Aggregator ingest at the floor (issue 19's aggregator rows): the load generator's simulated
# agents (the production streaming stack, one DGX node's ~490 series each) against the real
# fabricmon-aggregator, detectors on, at three shapes, plus the realistic shape with remote_write
# on to a local receiver. Per row, from the aggregator process alone (CPU over the window from its
# threads' schedstat, /proc/PID/status RSS growth over the declared series):
#   samples/s per aggregator core (goal 8 M for few fast agents, 5 M at 1 Hz), ns CPU per sample,
#   bytes per series (goal <= 600), each with its ratio to the goal (>= 1.00 meets it).
#
#   tests/bench/floor/run_ingest_floor.sh BUILD_DIR [quick]
#
# BUILD_DIR must hold fabricmon_load_generator and fabricmon-aggregator (ninja -C BUILD_DIR
# fabricmon_load_generator fabricmon-aggregator). "quick" shortens the windows; BENCH_SMOKE=1
# shrinks every row to a few agents and seconds (figures then prove the script works, nothing
# more); WARMUP_S sets the load before each window (below). The generator shares the machine
# with the aggregator: on a small machine, a row whose "stored" falls short of "offered"
# measured a starved generator, and says so.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR [quick]" >&2
  exit 2
fi
build=$1
quick=${2:-}
loadgen=$build/tests/bench/stream/fabricmon_load_generator
if [[ ! -x $loadgen ]]; then
  echo "missing $loadgen" >&2
  exit 2
fi

warmup=10 window=20
if [[ $quick == quick ]]; then warmup=6 window=8; fi
# WARMUP_S: seconds of load before each row's window (default 10). The simulated fabric has a few
# bad links (node_model.h: 1 % of the ports); their findings are there within a minute, and a
# link that goes down twice in five minutes flaps, so WARMUP_S=240 measures the fabric as it
# stays.
warmup=${WARMUP_S:-$warmup}
# name agents interval_ms remote_write
rows=("32x10Hz 32 100 no" "400x1Hz 400 1000 no" "1000x1Hz 1000 1000 no" "1000x1Hz+rw 1000 1000 yes")
goals=(8000000 5000000 5000000 5000000)
if [[ "${BENCH_SMOKE:-0}" == 1 ]]; then
  warmup=2 window=2
  rows=("4x10Hz 4 100 no" "8x1Hz+rw 8 1000 yes")
  goals=(8000000 5000000)
fi
bytes_goal=600

workdir=$(mktemp -d /tmp/fabricmon-ingest-floor-XXXXXX)
receiver_pid=
cleanup() {
  if [[ -n $receiver_pid ]]; then kill "$receiver_pid" 2>/dev/null || true; fi
  rm -rf "$workdir"
}
trap cleanup EXIT

# remote_write receiver: answers every POST 204 (HTTP/1.1 keep-alive, a thread per connection),
# so what the aggregator spends is encoding and sending, not a real database's ingest.
start_receiver() {
  python3 - "$workdir/receiver.port" <<'PY' &
import http.server, socketserver, sys
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
with open(sys.argv[1] + ".tmp", "w") as out:
    out.write(str(server.server_address[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
PY
  receiver_pid=$!
  for _ in $(seq 100); do
    [[ -s $workdir/receiver.port ]] && return 0
    sleep 0.1
  done
  echo "remote_write receiver did not start" >&2
  exit 1
}

# ratio VALUE GOAL: VALUE/GOAL with two decimals ("-" when VALUE is missing).
ratio() { awk -v v="$1" -v g="$2" 'BEGIN { if (v == "") print "-"; else printf "%.2f", v / g }'; }

echo "### machine: $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-12s %9s %9s %16s %6s %8s %10s %6s %8s  %s\n' row offered stored "per-core/s" ratio "ns/smpl" "B/series" ratio findings note
status=0
for i in "${!rows[@]}"; do
  read -r name agents interval rw <<<"${rows[$i]}"
  goal=${goals[$i]}
  config=""
  if [[ $rw == yes ]]; then
    [[ -n $receiver_pid ]] || start_receiver
    config="remote_write { url: \"http://127.0.0.1:$(cat "$workdir/receiver.port")/api/v1/write\" }"
  fi
  out=$workdir/$name.txt
  if ! timeout 300 "$loadgen" --agents="$agents" --interval_ms="$interval" --warmup_s="$warmup" \
      --duration_s="$window" --restart=false --aggregator_config="$config" >"$out" 2>&1; then
    echo "$name: load generator failed:" >&2
    tail -5 "$out" >&2
    status=1
    continue
  fi
  offered=$(awk '/^offered/ { print $2 }' "$out")
  stored=$(awk '/^stored/ { print $2 }' "$out")
  per_core=$(awk '/^per aggregator core/ { print $4 }' "$out")
  ns=$(awk '/^per aggregator core/ { gsub(/\(/, "", $6); print $6 }' "$out")
  bytes=$(awk '/^per series/ { print $3 }' "$out")
  findings=$(awk '/^findings active/ { print $3 }' "$out")
  # By kind, as the generator lists them: "link_degraded 36, link_flapping 4".
  note=$(sed -n 's/^findings active.*fabricmon_finding_active: \(.*\))$/\1/p' "$out")
  if awk -v o="$offered" -v s="$stored" 'BEGIN { exit !(s < 0.95 * o) }'; then
    note="stored < offered: generator or aggregator starved; $note"
  fi
  printf '%-12s %9s %9s %16s %6s %8s %10s %6s %8s  %s\n' "$name" "$offered" "$stored" "$per_core" \
    "$(ratio "$per_core" "$goal")" "$ns" "$bytes" \
    "$(awk -v b="$bytes" -v g="$bytes_goal" 'BEGIN { if (b == "") print "-"; else printf "%.2f", g / b }')" \
    "${findings:--}" "$note"
done
echo "(ratios: per-core samples/s over its goal, ${goals[*]}; ${bytes_goal} B over bytes per series. >= 1.00 meets the goal)"
echo "(findings: active at the window's end, by kind in the note; the simulated fabric's few bad links are degraded and some flap, and each finding costs every detector tick)"
exit $status
