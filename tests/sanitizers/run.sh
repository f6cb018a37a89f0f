#!/usr/bin/env bash
# Sanitizer runs of the test suite, each in its own build directory:
#
#   tests/sanitizers/run.sh address [ctest args...]   ASan+UBSan, every test labelled `unit`
#   tests/sanitizers/run.sh thread  [ctest args...]   TSan, the concurrency tests: the stream
#                                                     (agent ↔ aggregator over gRPC), agent,
#                                                     aggregator, detector and remote_write suites
#
# Configures with -DFABRICMON_SANITIZE=<mode>, builds what the selected tests need, runs ctest and
# prints the build and test times. Exit status: ctest's (a sanitizer report fails the test that
# produced it: UBSan is not recoverable, ASan/TSan exit non-zero).
#
# Environment:
#   SAN_BUILD_DIR    build directory (default build-asan / build-tsan)
#   SAN_JOBS         parallel build and test jobs (default: nproc)
#   CC, CXX          compilers (default clang-14 / clang++-14 if present, else gcc / g++)
#   SAN_TSAN_TESTS   TSan: the test executables to build and run (default below)
set -euo pipefail
cd "$(dirname "$0")/../.."
SOURCE_DIR=$(pwd)

MODE=${1:-}
shift || true
case $MODE in
  address) DEFAULT_DIR=build-asan ;;
  thread) DEFAULT_DIR=build-tsan ;;
  *) echo "usage: $0 address|thread [ctest args...]" >&2; exit 2 ;;
esac
BUILD_DIR=${SAN_BUILD_DIR:-$DEFAULT_DIR}
JOBS=${SAN_JOBS:-$(nproc)}
if [[ -z ${CXX:-} ]]; then
  if command -v clang++-14 >/dev/null; then CC=clang-14 CXX=clang++-14; else CC=gcc CXX=g++; fi
fi
SUPP=$SOURCE_DIR/tests/sanitizers

# Runtime options: stop at the first report, with the suppressions for the uninstrumented
# Debian libraries (gRPC, Abseil, protobuf) documented in each file.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$SUPP/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$SUPP/ubsan.supp}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0:second_deadlock_stack=1:history_size=4:suppressions=$SUPP/tsan.supp}

echo "== configure $BUILD_DIR ($CXX, FABRICMON_SANITIZE=$MODE)"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DFABRICMON_SANITIZE="$MODE" -DFABRICMON_BUILD_TESTS=ON -DFABRICMON_BUILD_BENCHMARKS=OFF \
  -DCMAKE_PROJECT_fabricmon_INCLUDE="$SUPP/sanitizers.cmake" >/dev/null

start=$(date +%s)
if [[ $MODE == address ]]; then
  cmake --build "$BUILD_DIR" --parallel "$JOBS"
else
  read -r -a tsan_tests <<<"${SAN_TSAN_TESTS:-fabricmon_stream_test fabricmon_agent_test fabricmon_aggregator_test fabricmon_detectors_test fabricmon_remote_write_test fabricmon_remote_write_feed_test}"
  cmake --build "$BUILD_DIR" --parallel "$JOBS" --target "${tsan_tests[@]}" fabricmon-agent
fi
build_s=$(( $(date +%s) - start ))
echo "== built in ${build_s} s"

cd "$BUILD_DIR"
start=$(date +%s)
set +e
if [[ $MODE == address ]]; then
  ctest --output-on-failure --timeout 900 -j "$JOBS" -L unit "$@"
  rc=$?
else
  # ctest names tests Suite.Case (gtest_discover_tests): select the suites of the TSan binaries.
  suites=()
  for t in "${tsan_tests[@]}"; do
    bin=$(find . -type f -name "$t" -perm -u+x | head -n1)
    [[ -n $bin ]] || { echo "no $t in $BUILD_DIR" >&2; exit 2; }
    while read -r s; do suites+=("$s"); done < <("$bin" --gtest_list_tests | sed -n 's/^\([^ #][^ ]*\)\.$/\1/p' | sed 's|.*/||' | sort -u)
  done
  regex="(^|/)($(IFS='|'; echo "${suites[*]}"))\\."
  # One test at a time: TSan multiplies memory by 5-8 and the stream tests run real threads.
  ctest --output-on-failure --timeout 900 -j 1 -R "$regex" "$@"
  rc=$?
fi
set -e
echo "== tests ran in $(( $(date +%s) - start )) s (build ${build_s} s); ctest exit $rc"
exit $rc
