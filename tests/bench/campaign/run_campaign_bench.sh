#!/usr/bin/env bash
# Full fault campaign: random fat trees, random background traffic and >= 200 injected faults
# (both flavours: IB with ibsim, RoCE with sysfs + ethtool) against the real daemons, scored
# per finding kind: precision, recall, localisation, time to detect (median, p95, in sampling
# intervals after the rule could first fire) and churn (finding ids, and fabricmon_findings_total
# increments, per incident; target 1). See README "Fault campaign" and
# tests/sim/fabric_sim/campaign.py.
#
#   tests/bench/campaign/run_campaign_bench.sh [BUILD_DIR] [FAULTS_PER_FLAVOUR] [SEED]
#
# Defaults: build, 100 faults per flavour (200 in all), seed 1; then the straggler flavour
# (STRAGGLER_FAULTS jobs, default 200). Bounded: every campaign stops at its schedule's end plus
# 60 s; this script stops after 40 + 30 minutes whatever happens.
# Exit status: the campaign's (0 only when every target was met).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
build="$(cd "${1:-$repo/build}" && pwd)"
faults="${2:-100}"
seed="${3:-1}"
out="${CAMPAIGN_JSON:-$build/campaign-results.json}"
cd "$repo/tests/sim"
echo "campaign: $faults faults per flavour, seed $seed, build $build (results: $out)"
rc=0
PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 timeout 2400 \
  python3 -m fabric_sim campaign --build-dir "$build" --seed "$seed" --faults "$faults" \
  --flavour both --json "$out" || rc=$?
# Straggler flavour: registered jobs, two straggler faults of each kind per healthy job of each
# kind; STRAGGLER_FAULTS jobs in all (default 200: >= 104 stragglers, >= 91 healthy jobs), 4 at once.
straggler_out="${out%.json}-straggler.json"
echo "straggler campaign: ${STRAGGLER_FAULTS:-200} jobs, seed $seed (results: $straggler_out)"
PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 timeout 1800 \
  python3 -m fabric_sim campaign --build-dir "$build" --seed "$seed" \
  --faults "${STRAGGLER_FAULTS:-200}" --flavour straggler --concurrency 4 \
  --json "$straggler_out" || rc=$?
exit "$rc"
