#!/usr/bin/env python3
"""Replays one recorded fault campaign (tests/replay/campaign_<flavour>/) with `fabricmon replay
--json` and scores the findings against the campaign's ground truth (truth.json): every expected
finding raised on the right node/port (a cable: either end) and in time, nothing on the nodes no
fault touched, on the silent faults' places or outside every fault's window, and no churn
(tests/sim/fabric_sim/campaign_replay.py, the scorer the campaign used when it saved them).

    campaign_matches.py FABRICMON_CLI FIXTURE_DIR

Exit 0 when the replay scores clean; 1 with the failures otherwise. No simulator, no daemons:
the recording is the aggregator's. `tests/replay/regenerate.sh BUILD_DIR campaign` records the
campaigns again."""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sim"))
from fabric_sim import campaign_replay  # noqa: E402

import replay_matches  # noqa: E402  (this directory: the replay itself)


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    cli, fixture = argv[1], argv[2]
    with open(os.path.join(fixture, "truth.json")) as f:
        truth = json.load(f)
    required = [fault for fault in truth["faults"] if fault.get("required", True)]
    expected = sum(len(fault["expected"]) for fault in required)
    if expected == 0 or not truth["healthy_nodes"]:
        print("%s/truth.json: no expected finding or no healthy node: nothing to score" % fixture)
        return 1
    stdout = replay_matches.replay_json(cli, fixture)
    if stdout is None:
        return 1
    failures, right = campaign_replay.score_replay(truth, stdout)
    name = os.path.basename(os.path.normpath(fixture))
    if failures:
        print("%s: the replay does not score clean against truth.json (a detector changed? "
              "tests/replay/regenerate.sh BUILD_DIR campaign records the campaigns again):"
              % name)
        for line in failures:
            print("  - " + line)
        return 1
    print("%s: %d faults (%s), %d/%d expected findings at the right place in time, nothing "
          "false (%d healthy nodes)" % (
              name, len(required), ", ".join(sorted(fault["kind"] for fault in required)), right,
              expected, len(truth["healthy_nodes"])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
