#!/bin/sh
# Records the simulator scenarios that serve as replay regression fixtures again, and rewrites
# their expected timelines: tests/replay/<scenario>/{recording.fmrec, aggregator.textproto,
# links.txt, expected.json}. Run after a detector changes on purpose, review the diff of the
# expected.json files (git diff), and commit them with the change.
#
#   tests/replay/regenerate.sh BUILD_DIR [SCENARIO...]
#
# Each scenario runs live (16 agents, the aggregator recording), must pass its own checks and
# replay to the findings the live aggregator raised (fabric_sim run --replay) before it is kept.
set -eu
if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [SCENARIO...]" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
# Keep in step with FABRICMON_REPLAY_FIXTURES in tests/replay/CMakeLists.txt.
scenarios=${*:-"single_flap flapping_link incast_congestion tcp_fallback healthy_busy"}
cd "$here/../sim"
for name in $scenarios; do
  PYTHONDONTWRITEBYTECODE=1 python3 -m fabric_sim run --build-dir "$build_dir" --scenario "$name" \
    --mode sysfs --replay --save-recording "$here"
done
du -sh "$here"
