#!/usr/bin/env bash
# Fabric sweep benchmark: fabricmon's ib_fabric collector vs. ibqueryerrors (infiniband-diags) on
# the same ibsim fabric, in the same run, interleaved: absolute times drift on shared machines,
# the ratio counts (target: at least 3× faster per sweep in steady state).
#
#   tests/bench/ib_fabric/sweep_bench.sh [--build DIR] [--probe PATH] [--spines N] [--leaves N]
#                                        [--hcas N] [--rounds N]
#
# --probe defaults to DIR/tests/sim/ibsim/fabricmon_ib_fabric_probe (ninja -C DIR
# fabricmon_ib_fabric_probe). BENCH_SMOKE=1 in the environment shrinks the run to a few seconds
# (2 spines x 2 leaves x 2 HCAs, 1 round) to prove the script still works: its figures are not
# measurements.
#
# Default fabric: the issue's 2-tier fat tree, 20 spines x 64 leaves x 20 HCAs per leaf (84
# switches, 1,280 HCAs, 3,840 cabled switch ports), within ibsim's limits (256 switches, 2,048
# nodes, 13,312 ports). Scale it down with the flags when opensm or ibsim is too slow.
#
# Each round runs, back to back:
#   fabricmon (3 long-lived probe processes, discovered once, capabilities cached: steady state)
#     F1  concurrency 64, port_info: false  - 2 MADs per port (PortCountersExtended + PortCounters),
#                                             the attributes ibqueryerrors reads
#     F2  concurrency 64, default config    - 3 MADs per port (+ PortInfo: state, width, speed)
#     F3  concurrency 1,  port_info: false  - serial, what the pipeline buys
#   ibqueryerrors --switch --data --skip-sl, with one error counter set on every switch so that it
#   reads every port (on a clean fabric it reads only each switch's AllPortSelect aggregate):
#     Q1  as operators run it (it walks the subnet first)
#     Q2  --load-cache of an ibnetdiscover cache (no walk: its steady state)
# Reported: median wall time per sweep / run, MADs per sweep counted by a umad_send shim
# (mad_count_preload.c, stacked before libumad2sim.so for every client), MADs per second, and the
# ratios Q2/F1 (same MADs per port, no discovery on either side) and Q1/F2 (what each tool does
# in practice per sweep). Before the rounds, ibqueryerrors on the clean fabric (Q0) for reference.
#
# ibsim is one single-threaded process simulating every hop of every MAD, on the same cores as the
# clients: on ibsim the sweep is bound by the simulator's CPU per MAD, not by MAD round trips.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
build="$root/build"
spines=20
leaves=64
hcas=20
rounds=5
probe=""
if [[ "${BENCH_SMOKE:-0}" == 1 ]]; then
  spines=2 leaves=2 hcas=2 rounds=1
fi
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --probe) probe="$2"; shift 2 ;;
    --spines) spines="$2"; shift 2 ;;
    --leaves) leaves="$2"; shift 2 ;;
    --hcas) hcas="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

umad2sim=/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so
probe="${probe:-$build/tests/sim/ibsim/fabricmon_ib_fabric_probe}"
[[ "$probe" == /* ]] || probe="$PWD/$probe"  # the rounds run in a temporary directory
export PATH="$PATH:/usr/sbin:/sbin"
for need in ibsim opensm ibqueryerrors ibnetdiscover cc python3; do
  command -v "$need" >/dev/null || { echo "sweep_bench: $need not found" >&2; exit 77; }
done
[[ -r "$umad2sim" ]] || { echo "sweep_bench: $umad2sim missing (ibsim-utils)" >&2; exit 77; }
[[ -x "$probe" ]] || { echo "sweep_bench: build fabricmon_ib_fabric_probe first ($probe)" >&2; exit 2; }

work="$(mktemp -d /tmp/fabricmon-sweep-bench-XXXXXX)"
pids=()
cleanup() {
  for fd in 3 11 12 13 21 22 23; do eval "exec $fd>&-" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  done
  sleep 0.3
  for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"

export IBSIM_SOCKNAME="fmbench$$"
export OSM_TMP_DIR="$work" OSM_CACHE_DIR="$work"
cc -O2 -shared -fPIC -o "$work/madcount.so" "$here/mad_count_preload.c" -ldl
preload="$work/madcount.so $umad2sim"

now_ns() { date +%s%N; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR == 0) print 0; else if (NR % 2) print a[(NR+1)/2]; else print int((a[NR/2]+a[NR/2+1])/2)}'; }
mad_sum() { awk '{s += $1} END {print s + 0}' "$1" 2>/dev/null || echo 0; }

python3 "$root/tests/sim/ibsim/gen_fat_tree.py" --spines "$spines" --leaves "$leaves" --hcas "$hcas" > fabric.net
ports=$((leaves * (hcas + spines) + spines * leaves))
echo "# fabric: $spines spines x $leaves leaves x $hcas HCAs/leaf: $((spines + leaves)) switches, $((leaves * hcas)) HCAs, $ports cabled switch ports"
echo "# host: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg); ibsim-utils $(dpkg-query -W -f='${Version}' ibsim-utils 2>/dev/null), infiniband-diags $(dpkg-query -W -f='${Version}' infiniband-diags 2>/dev/null)"

# --- the simulator, its console on a FIFO we hold open ---------------------------------------
mkfifo console
setsid ibsim -s fabric.net < console > ibsim.log 2>&1 &
pids+=($!)
sim_pid=$!
exec 3> console
start=$(now_ns)
until grep -q "sim> " ibsim.log 2>/dev/null; do
  kill -0 "$sim_pid" 2>/dev/null || { echo "ibsim died:"; cat ibsim.log; exit 1; }
  (( $(now_ns) - start < 300000000000 )) || { echo "ibsim not ready in 300 s" >&2; exit 1; }
  sleep 0.1
done
echo "# ibsim ready in $(( ($(now_ns) - start) / 1000000 )) ms"
start=$(now_ns)
LD_PRELOAD="$umad2sim" timeout 1200 opensm -o -f "$work/opensm.log" > opensm.out 2>&1 || {
  echo "opensm failed:"; tail -20 opensm.out; exit 1; }
echo "# opensm -o (LIDs, routes) in $(( ($(now_ns) - start) / 1000000 )) ms"

console() {  # one console command; waits for ibsim's next prompt
  local before; before=$(grep -o "sim> " ibsim.log | wc -l)
  echo "$1" >&3
  local t0; t0=$(now_ns)
  while (( $(grep -o "sim> " ibsim.log | wc -l) <= before )); do
    (( $(now_ns) - t0 < 10000000000 )) || { echo "console timeout: $1" >&2; return 1; }
    sleep 0.01
  done
}

# --- ibqueryerrors -----------------------------------------------------------------------------
# iqe <label> <args...>: one run; appends its wall ms and MADs to iqe-<label>.{ms,mads}.
iqe() {
  local label="$1"; shift
  rm -f "$work/madcount-iqe"
  local t0; t0=$(now_ns)
  FABRICMON_MAD_COUNT_FILE="$work/madcount-iqe" LD_PRELOAD="$preload" \
    timeout 1200 ibqueryerrors "$@" > "iqe-$label.out" 2> "iqe-$label.err" || true
  echo $(( ($(now_ns) - t0) / 1000000 )) >> "iqe-$label.ms"
  mad_sum madcount-iqe >> "iqe-$label.mads"
}

echo
echo "## clean fabric"
for _ in $(seq "$rounds"); do iqe Q0 --switch --data --skip-sl; done
# One error on every switch: its AllPortSelect aggregate then exceeds the threshold and
# ibqueryerrors reads every port of it, as fabricmon does.
for s in $(seq "$spines"); do console "$(printf 'PerformanceSet "spine%02d"[1] PortCounters.SymbolErrorCounter=100' "$s")"; done
for l in $(seq "$leaves"); do console "$(printf 'PerformanceSet "leaf%02d"[1] PortCounters.SymbolErrorCounter=100' "$l")"; done
LD_PRELOAD="$umad2sim" ibnetdiscover --cache "$work/fabric.cache" > /dev/null 2>&1

# --- fabricmon probes: long-lived, driven over FIFOs ------------------------------------------
# start_probe <name> <in fd> <out fd> <config>
start_probe() {
  local name="$1" in_fd="$2" out_fd="$3" config="$4"
  mkfifo "$name.in" "$name.out"
  FABRICMON_MAD_COUNT_FILE="$work/madcount-$name" LD_PRELOAD="$preload" \
    setsid "$probe" --config="$config" < "$name.in" > "$name.out" 2> "$name.err" &
  pids+=($!)
  eval "exec $in_fd> $name.in"
  eval "exec $out_fd< $name.out"
}
# probe_cmd <in fd> <out fd> <command>: prints the answer's lines (without BEGIN/END).
probe_cmd() {
  local in_fd="$1" out_fd="$2"
  echo "$3" >&"$in_fd"
  local line
  while IFS= read -r -t 1200 line <&"$out_fd"; do
    [[ "$line" == "END" ]] && return 0
    [[ "$line" == BEGIN* ]] || echo "$line"
  done
  echo "probe did not answer $3" >&2
  return 1
}
start_probe F1 11 21 "enabled: true concurrency: 64 port_info: false"
start_probe F2 12 22 "enabled: true concurrency: 64"
start_probe F3 13 23 "enabled: true concurrency: 1 per_node_inflight: 1 port_info: false"
for p in "F1 11 21" "F2 12 22" "F3 13 23"; do
  set -- $p
  t0=$(now_ns)
  probe_cmd "$2" "$3" discover > "$1.inventory"
  echo "# $1 discovery: $(( ($(now_ns) - t0) / 1000000 )) ms, $(grep -c fabric_links "$1.inventory") links"
  probe_cmd "$2" "$3" "sweep 1" > /dev/null   # warm-up: ClassPortInfo of every switch
done

echo "## $rounds interleaved rounds"
for r in $(seq "$rounds"); do
  for p in "F1 11 21" "F2 12 22" "F3 13 23"; do
    set -- $p
    probe_cmd "$2" "$3" "sweep 1" | awk -F'\t' '$1 == "T"' >> "$1.tsv"
  done
  iqe Q1 --switch --data --skip-sl
  iqe Q2 --load-cache "$work/fabric.cache" --switch --data --skip-sl
done

report_probe() {  # <name> <description>
  local ms us mads swept timeouts
  us=$(( $(cut -f2 "$1.tsv" | median) / 1000 ))
  ms=$(( us / 1000 ))
  mads=$(cut -f3 "$1.tsv" | median)
  swept=$(cut -f8 "$1.tsv" | tail -1)
  timeouts=$(awk -F'\t' '{s += $5} END {print s + 0}' "$1.tsv")
  printf '%-4s %-52s %8d ms %7d MADs %7d MADs/s  %5d ports  %d timeouts\n' "$1" "$2" "$ms" "$mads" \
    "$(( us > 0 ? mads * 1000000 / us : 0 ))" "$swept" "$timeouts"
  # Ratios from microseconds: a sweep of a tiny fabric (the smoke run) takes under a millisecond.
  eval "us_$1=$us"
}
report_iqe() {  # <name> <description>
  local ms mads checked
  ms=$(median < "iqe-$1.ms")
  mads=$(median < "iqe-$1.mads")
  checked=$(sed -n 's/^##  *\([0-9]*\) ports checked.*/\1/p' "iqe-$1.out" | tail -1)
  printf '%-4s %-52s %8d ms %7d MADs %7d MADs/s  %5s ports checked\n' "$1" "$2" "$ms" "$mads" \
    "$(( ms > 0 ? mads * 1000 / ms : 0 ))" "${checked:-?}"
  eval "us_$1=$(( ms * 1000 ))"
}
echo
echo "## medians (wall time per sweep or run; MADs counted at umad_send)"
report_probe F1 "fabricmon, 64 in flight, port_info: false"
report_probe F2 "fabricmon, 64 in flight, default (+PortInfo)"
report_probe F3 "fabricmon, serial (1 in flight), port_info: false"
report_iqe Q0 "ibqueryerrors, clean fabric (aggregates only)"
report_iqe Q1 "ibqueryerrors, every port, with its subnet walk"
report_iqe Q2 "ibqueryerrors, every port, --load-cache"
echo
awk -v q1="$us_Q1" -v q2="$us_Q2" -v f1="$us_F1" -v f2="$us_F2" -v f3="$us_F3" 'BEGIN {
  if (f1 > 0) printf "ratio Q2/F1 (same MADs per port, no discovery on either side): %.2fx\n", q2 / f1;
  if (f2 > 0) printf "ratio Q1/F2 (each tool as run: ibqueryerrors walks the subnet per run): %.2fx\n", q1 / f2;
  if (f1 > 0) printf "pipelining: serial F3 / F1 = %.2fx\n", f3 / f1 }'
ibsim_cpu=$(awk '{print ($14 + $15) / 100}' "/proc/$sim_pid/stat")
echo "# ibsim used ${ibsim_cpu} s CPU over the whole run (single-threaded: the ceiling on ibsim)"
