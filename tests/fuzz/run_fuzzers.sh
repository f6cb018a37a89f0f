#!/usr/bin/env bash
# Builds the libFuzzer targets (FABRICMON_FUZZ=ON, clang) and runs each for a bounded time with
# seed corpora: tests/fuzz/corpus/<target>/ (hand-made), tests/fuzz/regressions/<target>/ (past
# crashes) and the real captures in ../shared/fixtures. Prints executions per target (from
# libFuzzer's final stats) and exits 1 if any target crashed, leaked, timed out or ran out of
# memory; the reproducer is kept under <build>/fuzz-artifacts/<target>/.
#
#   tests/fuzz/run_fuzzers.sh [TARGET...]
#
# Environment:
#   FUZZ_SECONDS     run time per target (default 20)
#   FUZZ_BUILD_DIR   build directory (default build-fuzz)
#   FUZZ_JOBS        parallel build jobs (default: nproc)
#   FUZZ_PARALLEL    targets fuzzed at once, one core each (default: nproc)
#   FUZZ_RSS_MB      libFuzzer -rss_limit_mb (default 2048)
#   FUZZ_MALLOC_MB   libFuzzer -malloc_limit_mb: largest single allocation (default 512)
#   FUZZ_EXTRA       extra libFuzzer flags (e.g. "-seed=1 -runs=100000")
#   CC, CXX          compilers (default clang-14, clang++-14)
#
# A crash found here becomes a regression input: copy the artifact to
# tests/fuzz/regressions/<target>/ (fabricmon_fuzz_replay_test replays it in every build), fix
# the code, and re-run.
set -euo pipefail
cd "$(dirname "$0")/../.."
SOURCE_DIR=$(pwd)
SHARED=${FABRICMON_SHARED_FIXTURES:-$SOURCE_DIR/../shared/fixtures}

SECONDS_PER_TARGET=${FUZZ_SECONDS:-20}
BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
JOBS=${FUZZ_JOBS:-$(nproc)}
PARALLEL=${FUZZ_PARALLEL:-$(nproc)}
RSS_MB=${FUZZ_RSS_MB:-2048}
MALLOC_MB=${FUZZ_MALLOC_MB:-512}
CC=${CC:-clang-14}
CXX=${CXX:-clang++-14}
ALL_TARGETS=(sysfs_value ethtool_text proc_net_snmp rdma_netlink ibnetdiscover link_list text_config
  ingest exposition batch_template)
TARGETS=("$@")
if ((${#TARGETS[@]} == 0)); then TARGETS=("${ALL_TARGETS[@]}"); fi

if ! command -v "$CXX" >/dev/null; then
  echo "run_fuzzers: $CXX not found (deploy/install-deps.sh installs clang)" >&2
  exit 2
fi

echo "== configure $BUILD_DIR ($CXX, FABRICMON_FUZZ=ON)"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DFABRICMON_FUZZ=ON -DFABRICMON_BUILD_TESTS=ON -DFABRICMON_BUILD_BENCHMARKS=OFF \
  -DCMAKE_PROJECT_fabricmon_INCLUDE="$SOURCE_DIR/tests/fuzz/fuzzing.cmake" >/dev/null
echo "== build fuzz targets (-j$JOBS)"
build_start=$(date +%s)
cmake --build "$BUILD_DIR" --parallel "$JOBS" --target fabricmon_fuzzers
echo "   built in $(( $(date +%s) - build_start )) s"

# Copies up to $3 files smaller than 64 KiB found by `find $1 $2` into corpus dir $4.
seed_from() {
  local root=$1 expr=$2 limit=$3 out=$4
  [[ -d $root ]] || return 0
  set -f  # $expr holds find patterns, not shell globs
  # Read whole, then cut: `find | head` under pipefail and set -e would end the script when
  # find wrote on after head had exited (SIGPIPE), as soon as a tree holds more than $limit.
  local files=()
  # shellcheck disable=SC2086
  mapfile -t files < <(find "$root" -type f -size -64k $expr 2>/dev/null)
  set +f
  local f
  for f in "${files[@]:0:limit}"; do
    cp "$f" "$out/shared_$(echo "$f" | md5sum | cut -c1-16)" 2>/dev/null || true
  done
}

# Seeds from ../shared/fixtures for one target, into $2.
shared_seeds() {
  local target=$1 out=$2
  case $target in
    sysfs_value)
      seed_from "$SHARED/sysfs" "-path */infiniband/*/ports/* ( -name state -o -name phys_state -o -name rate -o -name lid -o -name sm_lid -o -path */counters/* -o -path */hw_counters/* )" 1500 "$out" ;;
    ethtool_text)
      seed_from "$SHARED/ethtool" "" 200 "$out" ;;
    proc_net_snmp)
      seed_from "$SHARED" "( -name snmp -o -name netstat -o -name snmp6 )" 50 "$out" ;;
    ibnetdiscover)
      seed_from "$SHARED/ib" "" 200 "$out" ;;
    text_config)
      local i=0
      for f in deploy/config/*.textproto; do
        [[ -f $f ]] || continue
        { printf '\x00'; cat "$f"; } >"$out/deploy_agent_$i"
        { printf '\x01'; cat "$f"; } >"$out/deploy_aggregator_$i"
        i=$((i + 1))
      done ;;
  esac
}

ARTIFACTS=$BUILD_DIR/fuzz-artifacts
mkdir -p "$ARTIFACTS"
declare -A EXECS RATE STATUS CORPUS

# One target: its seeds, then libFuzzer for SECONDS_PER_TARGET; the exit status goes to
# $ARTIFACTS/$target.rc. Runs in the background beside the others (FUZZ_PARALLEL at a time).
fuzz_one() {
  local target=$1 bin=$2
  local work=$BUILD_DIR/fuzz-corpus/$target  # grows across runs; cache it in CI if you like
  local seeds=$BUILD_DIR/fuzz-seeds/$target
  rm -rf "$seeds"
  mkdir -p "$work" "$seeds" "$ARTIFACTS/$target"
  for dir in tests/fuzz/corpus/$target tests/fuzz/regressions/$target; do
    [[ -d $dir ]] && find "$dir" -maxdepth 1 -type f ! -name README.md -exec cp {} "$seeds/" \;
  done
  shared_seeds "$target" "$seeds"
  local dict=()
  [[ -f tests/fuzz/dict/$target.dict ]] && dict=(-dict="tests/fuzz/dict/$target.dict")
  echo "== $target: ${SECONDS_PER_TARGET}s, $(find "$seeds" -type f | wc -l) seeds"
  local rc=0
  # shellcheck disable=SC2086
  "$bin" -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 -timeout=10 \
    -rss_limit_mb="$RSS_MB" -malloc_limit_mb="$MALLOC_MB" -artifact_prefix="$ARTIFACTS/$target/" \
    "${dict[@]}" ${FUZZ_EXTRA:-} "$work" "$seeds" >"$ARTIFACTS/$target.log" 2>&1 || rc=$?
  echo "$rc" >"$ARTIFACTS/$target.rc"
}

running=0
for target in "${TARGETS[@]}"; do
  bin=$BUILD_DIR/tests/fuzz/fabricmon_fuzz_$target
  if [[ ! -x $bin ]]; then
    echo "== $target: not built in this configuration (skipped)"
    STATUS[$target]=skipped
    continue
  fi
  rm -f "$ARTIFACTS/$target.rc"
  fuzz_one "$target" "$bin" &
  running=$((running + 1))
  if ((running >= PARALLEL)); then
    wait -n || true
    running=$((running - 1))
  fi
done
wait

failed=0
for target in "${TARGETS[@]}"; do
  [[ ${STATUS[$target]:-} == skipped ]] && continue
  log=$ARTIFACTS/$target.log
  rc=$(cat "$ARTIFACTS/$target.rc" 2>/dev/null || echo "none")
  EXECS[$target]=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  RATE[$target]=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
  CORPUS[$target]=$(find "$BUILD_DIR/fuzz-corpus/$target" -type f | wc -l)
  if [[ $rc == 0 ]]; then
    STATUS[$target]=ok
  else
    STATUS[$target]="FAILED (exit $rc)"
    failed=1
    echo "   $target failed; last lines of $log:"
    { grep -E "ERROR: |SUMMARY|fuzz invariant|Test unit written|runtime error" "$log" |
        grep -v "libprotobuf ERROR" | head -n 20 | sed 's/^/   /'; } || true
  fi
done

echo
printf '%-16s %14s %10s %8s  %s\n' TARGET EXECUTIONS EXEC/S CORPUS STATUS
for target in "${TARGETS[@]}"; do
  printf '%-16s %14s %10s %8s  %s\n' "$target" "${EXECS[$target]:--}" "${RATE[$target]:--}" \
    "${CORPUS[$target]:--}" "${STATUS[$target]}"
done
if ((failed)); then
  echo
  echo "Reproduce: $BUILD_DIR/tests/fuzz/fabricmon_fuzz_<target> <artifact>; then copy the artifact"
  echo "to tests/fuzz/regressions/<target>/ and fix."
  exit 1
fi
