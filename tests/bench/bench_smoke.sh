#!/usr/bin/env bash
# Runs one benchmark script or program in its smoke configuration (BENCH_SMOKE=1: tiny sizes, a
# few seconds) and fails unless it exits 0 and prints every expected figure: for each --figure,
# a line matching that extended regular expression. Registered as ctests with the label
# bench_smoke (tests/bench/CMakeLists.txt), so that no benchmark rots unnoticed. The figures of a
# smoke run are not measurements.
#
#   tests/bench/bench_smoke.sh --figure REGEX [--figure REGEX]... -- COMMAND [ARGS...]
#
# Exit status: the command's when it fails (77, a missing dependency, is passed on as a skip),
# 1 when a figure is missing, 2 for usage.
set -uo pipefail

figures=()
while [[ $# -gt 0 && $1 != -- ]]; do
  case $1 in
    --figure) figures+=("$2"); shift 2 ;;
    *) echo "usage: $0 --figure REGEX... -- COMMAND [ARGS...]" >&2; exit 2 ;;
  esac
done
if [[ $# -lt 2 || ${#figures[@]} -eq 0 ]]; then
  echo "usage: $0 --figure REGEX... -- COMMAND [ARGS...]" >&2
  exit 2
fi
shift  # --
out=$(mktemp "${TMPDIR:-/tmp}/fabricmon-bench-smoke-XXXXXX")
trap 'rm -f "$out"' EXIT

BENCH_SMOKE=1 "$@" >"$out" 2>&1
rc=$?
cat "$out"
if [[ $rc -ne 0 ]]; then
  echo "bench_smoke: $1 exited $rc" >&2
  exit "$rc"
fi
for regex in "${figures[@]}"; do
  if ! grep -Eq -- "$regex" "$out"; then
    echo "bench_smoke: $1 printed no figure matching: $regex" >&2
    exit 1
  fi
done
echo "bench_smoke: ok: ${#figures[@]} figure(s) found"
