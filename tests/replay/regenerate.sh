#!/bin/sh
# Records the simulator scenarios and fault campaigns that serve as replay regression fixtures
# again. Run after a detector changes on purpose, review the diff (git diff tests/replay), and
# commit it with the change.
#
#   tests/replay/regenerate.sh BUILD_DIR [SCENARIO... | campaign]
#
# Scenarios: tests/replay/<scenario>/{recording.fmrec.xz, aggregator.textproto, links.txt,
# expected.json}. Each runs live (16 agents, the aggregator recording), must pass its own checks
# and replay to the findings the live aggregator raised (fabric_sim run --replay) before it is kept.
#
# campaign: tests/replay/campaign_<flavour>/{recording.fmrec.xz, aggregator.textproto, links.txt,
# truth.json} for the IB and RoCE flavours: one slice each (every fault kind of the flavour once,
# on a random cluster with random background traffic; the IB flavour needs ibsim), kept when the
# replay of its recording scores clean against the faults' ground truth (fabric_sim campaign
# --save-recording). A slice that does not (a fault missed on a loaded machine) is not saved:
# run it again, or with another CAMPAIGN_SEED.
set -eu
if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [SCENARIO... | campaign]" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../sim"
if [ "${1:-}" = campaign ]; then
  # Keep in step with FABRICMON_REPLAY_CAMPAIGNS in tests/replay/CMakeLists.txt.
  for flavour in ${CAMPAIGN_FLAVOURS:-roce ib}; do
    rm -f "$here/campaign_$flavour/truth.json"  # saved anew only when the replay scores clean
    PYTHONDONTWRITEBYTECODE=1 python3 -m fabric_sim campaign --build-dir "$build_dir" \
      --flavour "$flavour" --slice --seed "${CAMPAIGN_SEED:-16}" --save-recording "$here" || true
    test -f "$here/campaign_$flavour/truth.json" || {
      echo "campaign_$flavour was not saved" >&2
      exit 1
    }
  done
  du -sh "$here"
  exit 0
fi
# Keep in step with FABRICMON_REPLAY_FIXTURES in tests/replay/CMakeLists.txt.
scenarios=${*:-"single_flap flapping_link incast_congestion tcp_fallback healthy_busy"}
for name in $scenarios; do
  PYTHONDONTWRITEBYTECODE=1 python3 -m fabric_sim run --build-dir "$build_dir" --scenario "$name" \
    --mode sysfs --replay --save-recording "$here"
done
du -sh "$here"
