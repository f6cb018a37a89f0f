#!/usr/bin/env bash
# The agent, whole process, against the syscall floor and against node_exporter (README
# "Benchmarks"): CPU per value of three processes reading the same generated sysfs tree at 10 Hz.
#
#   tests/bench/floor/run_agent_floor.sh BUILD_DIR
#
# Environment: DURATION_S (measured window, default 20), ROUNDS (windows, default 1: the ratios
# are then over all of them, each window's printed too; on a loaded 2-core machine one window's
# agent / floor ratio varies by ±15 %), AGENT (another fabricmon-agent binary to
# measure, e.g. an older build), BASELINE_AGENT (another fabricmon-agent binary run side by side
# with AGENT in the same windows, streaming to the same aggregator: a before/after comparison that
# the load of a shared machine does not skew; its ratios print as "baseline"), HW_COUNTERS (1,
# default: the agent reads
# hw_counters/ as it does by default; 0: exactly the files node_exporter 1.5 reads),
# BENCH_SMOKE=1 (a 2 s window: proves the script works, its figures are not measurements).
#
# The tree: tests/sim/gen_sysfs_tree.py's dgx-h100 (8 compute ConnectX-7 HCAs, a RoCE one and a
# restricted PF, all readable here) without the irdma and efa devices, whose lack of a counters/
# directory fails node_exporter 1.5's whole infiniband collector. On tmpfs (/dev/shm) when there
# is one, so that no disk is measured.
#
# The three processes, run side by side over the same window (so that the load of a shared
# machine hits all three alike), each started and warmed up first:
#   floor          tests/bench/floor/pread_floor.cc: opens each file once and pread(2)s it at
#                  offset 0 every cycle, nothing else. The file list is the agent's own: the
#                  descriptors under the tree that the running agent holds (/proc/PID/fd), so the
#                  floor reads exactly the agent's files. It does not re-open per cycle because
#                  the agent does not need to: sysfs regenerates an attribute on every read at
#                  offset 0 of an open descriptor.
#   agent          the real fabricmon-agent (ib_sysfs only, interval 100 ms, other collectors off)
#                  streaming over gRPC (plaintext, loopback) to a real fabricmon-aggregator; the
#                  aggregator's batch count proves that it streamed during the window. The
#                  aggregator's CPU is not counted (nor is Prometheus' for node_exporter).
#   agent_local    the same agent without a stream (only its local /metrics endpoint, never
#                  scraped): what collection costs apart from the transport. Nothing acknowledges
#                  its cycles, so its replay buffer is kept at 64 KiB (oldest evicted): a growing
#                  one would charge it page faults the streaming agent does not pay.
#   node_exporter  Debian's prometheus-node-exporter --collector.infiniband only, scraped at 10 Hz
#                  over one keep-alive HTTP connection (as Prometheus does) by a bounded loop.
# CPU of each whole process (every thread) over the window: utime+stime from /proc/PID/stat,
# printed; the ratios use the sum of /proc/PID/task/*/schedstat (ns) instead when no thread
# exited during the window, because stat's 10 ms ticks are ±5 % of what the floor spends in 20 s.
# A value: one sample the process exports per cycle (agent: ib_sysfs samples; node_exporter:
# node_infiniband_* lines; floor: files read). agent / floor compares CPU per cycle, as both read
# the same files at the same rate.
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
BUILD=$1
SOURCE_DIR=$(cd "$(dirname "$0")/../../.." && pwd)
AGENT=${AGENT:-$BUILD/daemon/agent/fabricmon-agent}  # AGENT=... measures another build of it
BASELINE_AGENT=${BASELINE_AGENT:-}
AGGREGATOR=$BUILD/daemon/aggregator/fabricmon-aggregator
FLOOR=$BUILD/tests/bench/floor/fabricmon_pread_floor
for binary in "$AGENT" "$AGGREGATOR" "$FLOOR" ${BASELINE_AGENT:+"$BASELINE_AGENT"}; do
  if [[ ! -x $binary ]]; then
    echo "missing $binary (ninja -C $BUILD fabricmon-agent fabricmon-aggregator fabricmon_pread_floor)" >&2
    exit 2
  fi
done
# /usr/bin/python3 first: a version manager's shim (pyenv) costs seconds per start.
PYTHON=$(command -v /usr/bin/python3 || command -v python3 || true)
[[ -n $PYTHON ]] || { echo "python3 is required" >&2; exit 77; }
NODE_EXPORTER=$(command -v prometheus-node-exporter || command -v node_exporter || true)
[[ -n $NODE_EXPORTER ]] || { echo "prometheus-node-exporter is not installed" >&2; exit 77; }

DURATION_S=${DURATION_S:-20}
ROUNDS=${ROUNDS:-1}
WARMUP_S=3
if [[ ${BENCH_SMOKE:-0} == 1 ]]; then
  DURATION_S=2
  ROUNDS=1
  WARMUP_S=1
fi
HW_COUNTERS=${HW_COUNTERS:-1}
case $HW_COUNTERS in
  0) HW=false ;;
  1) HW=true ;;
  *) echo "HW_COUNTERS must be 0 or 1" >&2; exit 2 ;;
esac

TMP_BASE=${TMPDIR:-/tmp}
if [[ -d /dev/shm && -w /dev/shm ]]; then
  TMP_BASE=/dev/shm
fi
WORK=$(mktemp -d "$TMP_BASE/fabricmon-agent-floor-XXXXXX")
PIDS=()
cleanup() {
  local pid i
  # Newest first: the agents stop while the aggregator can still acknowledge their last batches
  # (a streaming agent waits up to 5 s for that at exit).
  for ((i = ${#PIDS[@]} - 1; i >= 0; --i)); do
    pid=${PIDS[i]}
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE  # so that cleanup runs (a closed pipe, e.g. | head, too)

# 1. The tree.
TREE=$WORK/sys
"$PYTHON" "$SOURCE_DIR/tests/sim/gen_sysfs_tree.py" --profile dgx-h100 --seed 1 --out "$TREE" --without-kinds irdma,efa >/dev/null

free_port() {
  "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_http() {  # URL: bounded wait for a 200
  local _
  for _ in $(seq 100); do
    if "$PYTHON" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' "$1" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# 2. The aggregator and the agent.
GRPC_PORT=$(free_port)
AGG_METRICS_PORT=$(free_port)
"$AGGREGATOR" --grpc_listen="127.0.0.1:$GRPC_PORT" --metrics_listen="127.0.0.1:$AGG_METRICS_PORT" \
  --insecure_plaintext --log_level=warning >"$WORK/aggregator.log" 2>&1 &
PIDS+=($!)
AGG_METRICS=http://127.0.0.1:$AGG_METRICS_PORT/metrics
wait_http "$AGG_METRICS" || { echo "the aggregator did not start:" >&2; cat "$WORK/aggregator.log" >&2; exit 1; }

cat >"$WORK/agent.textproto" <<EOF
collectors {
  ib_sysfs { interval_ms: 100 hw_counters: $HW sysfs_root: "$TREE" }
  ethtool { enabled: false }
  netdev { enabled: false }
  nvml { enabled: false }
  ib_fabric { enabled: false }
  rdma_qp { enabled: false }
}
EOF
"$AGENT" --config="$WORK/agent.textproto" --aggregator="127.0.0.1:$GRPC_PORT" --insecure_plaintext \
  --node_name=floor-bench --log_level=warning >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
PIDS+=("$AGENT_PID")
LOCAL_PORT=$(free_port)
{ cat "$WORK/agent.textproto"; echo "replay_buffer_bytes: 65536"; } >"$WORK/agent_local.textproto"
"$AGENT" --config="$WORK/agent_local.textproto" --listen_metrics="127.0.0.1:$LOCAL_PORT" \
  --node_name=floor-bench-local --log_level=warning >"$WORK/agent_local.log" 2>&1 &
LOCAL_PID=$!
PIDS+=("$LOCAL_PID")
BASELINE_PID=0
if [[ -n $BASELINE_AGENT ]]; then
  "$BASELINE_AGENT" --config="$WORK/agent.textproto" --aggregator="127.0.0.1:$GRPC_PORT" \
    --insecure_plaintext --node_name=floor-bench-baseline --log_level=warning \
    >"$WORK/agent_baseline.log" 2>&1 &
  BASELINE_PID=$!
  PIDS+=("$BASELINE_PID")
fi
# The same collector once, for the values it exports per cycle (ib_sysfs samples, its own
# collector health series left out).
"$AGENT" --once --config="$WORK/agent.textproto" >"$WORK/once.prom" 2>"$WORK/once.log"
AGENT_VALUES=$(grep -v '^#' "$WORK/once.prom" | grep -c '^fabricmon_ib_' || true)

# 3. node_exporter.
NE_PORT=$(free_port)
"$NODE_EXPORTER" --collector.disable-defaults --collector.infiniband --web.disable-exporter-metrics \
  --path.sysfs="$TREE" --web.listen-address="127.0.0.1:$NE_PORT" >"$WORK/ne.log" 2>&1 &
NE_PID=$!
PIDS+=("$NE_PID")
NE_URL=http://127.0.0.1:$NE_PORT/metrics
wait_http "$NE_URL" || { echo "node_exporter did not start:" >&2; cat "$WORK/ne.log" >&2; exit 1; }

# 4. The floor, on the files the agent holds open once it has collected.
for _ in $(seq 100); do
  if "$PYTHON" -c 'import sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=1).read().decode()
sys.exit(0 if any(l.startswith("fabricmon_aggregator_batches_total ") and float(l.split()[1]) > 0
                  for l in text.splitlines()) else 1)' "$AGG_METRICS" 2>/dev/null; then
    break
  fi
  sleep 0.1
done
"$PYTHON" - "$AGENT_PID" "$TREE" >"$WORK/files.txt" <<'EOF'
import os, sys
pid, tree = sys.argv[1], os.path.realpath(sys.argv[2]) + "/"
fd_dir = "/proc/%s/fd" % pid
targets = []
for fd in os.listdir(fd_dir):
    try:
        target = os.readlink(os.path.join(fd_dir, fd))
    except OSError:
        continue  # closed meanwhile
    if target.startswith(tree):
        targets.append(target)
print("\n".join(sorted(targets)))
EOF
FILES=$(wc -l <"$WORK/files.txt")
if [[ $FILES -eq 0 ]]; then
  echo "the agent holds no file of the tree open; its log:" >&2
  cat "$WORK/agent.log" >&2
  exit 1
fi
"$FLOOR" --files="$WORK/files.txt" --interval_ms=100 >"$WORK/floor.log" 2>&1 &
FLOOR_PID=$!
PIDS+=("$FLOOR_PID")

# 5. Warm up, then measure the three over one window while scraping node_exporter at 10 Hz.
sleep "$WARMUP_S"
echo "### machine: $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "### tree: dgx-h100 (seed 1) without irdma/efa on $(stat -f -c %T "$WORK"), hw_counters $HW_COUNTERS;" \
     "agent and floor read $FILES files per cycle; $ROUNDS window(s) of ${DURATION_S} s at 10 Hz"
"$PYTHON" - "$DURATION_S" "$ROUNDS" "$AGENT_PID" "$LOCAL_PID" "$FLOOR_PID" "$NE_PID" "$NE_URL" \
  "$AGG_METRICS" "$FILES" "$AGENT_VALUES" "$BASELINE_PID" <<'EOF'
import http.client, os, sys, time, urllib.parse, urllib.request

(duration, rounds, agent, local, floor, ne, ne_url, agg_metrics, files,
 agent_values, baseline) = sys.argv[1:]
duration, rounds, files, agent_values = float(duration), int(rounds), int(files), int(agent_values)
tick = os.sysconf("SC_CLK_TCK")

def snapshot(pid):
    stat = open("/proc/%s/stat" % pid).read()
    fields = stat[stat.rindex(")") + 2:].split()
    tasks = {}
    for tid in os.listdir("/proc/%s/task" % pid):
        try:
            tasks[tid] = int(open("/proc/%s/task/%s/schedstat" % (pid, tid)).read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return int(fields[11]) + int(fields[12]), tasks

def cpu_seconds(before, after):
    ticks = (after[0] - before[0]) / tick
    exited = set(before[1]) - set(after[1])
    if exited or not after[1]:
        return ticks, ticks, "stat ticks (%d threads exited)" % len(exited)
    ns = sum(v - before[1].get(tid, 0) for tid, v in after[1].items())
    return ns / 1e9, ticks, "schedstat"

def agg_batches():
    text = urllib.request.urlopen(agg_metrics, timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith("fabricmon_aggregator_batches_total "):
            return float(line.split()[1])
    return 0.0

url = urllib.parse.urlparse(ne_url)
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=5)
def scrape():
    conn.request("GET", url.path)
    response = conn.getresponse()
    body = response.read().decode()
    if response.status != 200:
        sys.exit("node_exporter answered %d" % response.status)
    return body

first = scrape()
if 'node_scrape_collector_success{collector="infiniband"} 1' not in first:
    sys.exit("node_exporter's infiniband collector failed on the tree")
ne_values = sum(1 for l in first.splitlines() if l.startswith("node_infiniband_"))

pids = {"floor": floor, "agent": agent, "agent_local": local, "node_exporter": ne}
if baseline != "0":
    pids["baseline"] = baseline
streaming_agents = 2 if "baseline" in pids else 1

def measure_window():
    """One window: {name: (cpu_s, values_per_cycle, cycles)}, printed."""
    batches0 = agg_batches()
    before = {name: snapshot(pid) for name, pid in pids.items()}
    start = time.monotonic()
    scrapes = 0
    next_at = start
    while True:
        now = time.monotonic()
        if now >= start + duration:
            break
        if now < next_at:
            time.sleep(min(next_at - now, start + duration - now))
            continue
        scrape()
        scrapes += 1
        next_at += 0.1
        if next_at < time.monotonic():  # fell behind: skip ticks rather than burst
            next_at = time.monotonic() + 0.1
    elapsed = time.monotonic() - start
    after = {name: snapshot(pid) for name, pid in pids.items()}
    batches = agg_batches() - batches0

    cycles = elapsed * 10  # the floor and the agents run on fixed 100 ms schedules
    # One batch per ib_sysfs cycle plus one a second from the agent's own health collector.
    expected_batches = elapsed * 11 * streaming_agents
    if batches < 0.9 * expected_batches:
        sys.exit("the aggregator stored %d batches in %.1f s, expected ~%d: the agent did not "
                 "stream" % (batches, elapsed, expected_batches))
    rows = {}
    for name, values, count in (("floor", files, cycles), ("agent", agent_values, cycles),
                                ("agent_local", agent_values, cycles),
                                ("baseline", agent_values, cycles),
                                ("node_exporter", ne_values, scrapes)):
        if name not in pids:
            continue
        cpu, ticks, source = cpu_seconds(before[name], after[name])
        rows[name] = (cpu, values, count)
        print("%-13s %5d values/cycle %6d cycles  %8.1f us CPU/cycle  %6.2f us CPU/value  "
              "(%.3f s CPU by %s; stat ticks %.2f s)"
              % (name, values, count, cpu / count * 1e6, cpu / count / values * 1e6, cpu,
                 source, ticks))
    print("%s streamed %d batches to the aggregator in %.1f s"
          % ("agent and baseline" if "baseline" in pids else "agent", batches, elapsed))
    return rows

def per_cycle(rows, name):
    cpu, _, count = rows[name]
    return cpu / count

def per_value(rows, name):
    cpu, values, count = rows[name]
    return cpu / count / values

def ratios(rows):
    return (per_cycle(rows, "agent") / per_cycle(rows, "floor"),
            per_cycle(rows, "agent_local") / per_cycle(rows, "floor"),
            per_value(rows, "node_exporter") / per_value(rows, "agent"))

windows = []
for window in range(rounds):
    if rounds > 1:
        print("# window %d of %d" % (window + 1, rounds))
    windows.append(measure_window())
conn.close()

# Over all windows: total CPU over total cycles.
total = {name: tuple(sum(w[name][i] for w in windows) if i != 1 else windows[0][name][1]
                     for i in range(3)) for name in pids}
agent_floor, local_floor, ne_agent = ratios(total)
spread = ""
if rounds > 1:
    per_window = [ratios(w) for w in windows]
    spread = "; windows: %s" % ", ".join("%.2fx" % r[0] for r in per_window)
print("ratio agent / pread floor: %.2fx (CPU per cycle, the same %d files; without the stream "
      "%.2fx%s)" % (agent_floor, files, local_floor, spread))
print("ratio node_exporter / agent (CPU per value): %.1fx (per cycle: %.1fx, %d vs %d values)"
      % (ne_agent, per_cycle(total, "node_exporter") / per_cycle(total, "agent"), ne_values,
         agent_values))
if "baseline" in pids:
    def against_baseline(rows):
        return per_cycle(rows, "agent") / per_cycle(rows, "baseline")
    spread = ""
    if rounds > 1:
        spread = "; windows: %s" % ", ".join("%.2fx" % against_baseline(w) for w in windows)
    print("ratio baseline / pread floor: %.2fx; agent / baseline: %.2fx (CPU per cycle, the same "
          "windows%s); stream cost per cycle (streaming minus agent_local): agent %.0f us, "
          "baseline %.0f us"
          % (per_cycle(total, "baseline") / per_cycle(total, "floor"), against_baseline(total),
             spread, (per_cycle(total, "agent") - per_cycle(total, "agent_local")) * 1e6,
             (per_cycle(total, "baseline") - per_cycle(total, "agent_local")) * 1e6))
EOF
