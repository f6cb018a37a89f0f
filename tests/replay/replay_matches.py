#!/usr/bin/env python3
"""Replays one recorded regression fixture (tests/replay/<scenario>/) with `fabricmon replay
--json` and compares the timeline with the expected one checked in beside it, byte for byte.

    replay_matches.py FABRICMON_CLI FIXTURE_DIR

Exit 0 when identical; 1 with a unified diff of the two timelines otherwise. When a detector
changes on purpose, tests/replay/regenerate.sh records the scenarios again and rewrites the
expectations (review the diff of expected.json before committing it)."""

import difflib
import json
import lzma
import os
import subprocess
import sys
import tempfile


def write_recording(fixture, directory):
    """Decompresses a fixture's recording (checked in xz-compressed: the export is the wire
    encoding, uncompressed) into `directory`; returns its path."""
    recording = os.path.join(directory, "recording.fmrec")
    with open(os.path.join(fixture, "recording.fmrec.xz"), "rb") as f, \
            open(recording, "wb") as out:
        out.write(lzma.decompress(f.read()))
    return recording


def replay_json(cli, fixture):
    """`fabricmon replay --json` of a fixture directory's recording with its aggregator config and
    link list: its stdout, or None after printing why the replay failed."""
    with tempfile.TemporaryDirectory(prefix="fabricmon-replay-") as scratch:
        recording = write_recording(fixture, scratch)
        result = subprocess.run(
            [cli, "replay", recording,
             "--config=" + os.path.join(fixture, "aggregator.textproto"),
             "--link_list=" + os.path.join(fixture, "links.txt"), "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    if result.returncode != 0:
        print("fabricmon replay exited %d: %s"
              % (result.returncode, result.stderr.decode(errors="replace")))
        return None
    return result.stdout


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    cli, fixture = argv[1], argv[2]
    with open(os.path.join(fixture, "expected.json"), "rb") as f:
        expected = f.read()
    stdout = replay_json(cli, fixture)
    if stdout is None:
        return 1
    if stdout == expected:
        summary = json.loads(stdout).get("summary", {})
        print("%s: %d events, %d samples replayed, timeline as expected"
              % (os.path.basename(os.path.normpath(fixture)),
                 len(json.loads(stdout).get("events", [])), summary.get("samples", 0)))
        return 0

    def lines(data):
        # Pretty-printed so that the diff names the event and field that changed.
        try:
            return json.dumps(json.loads(data), indent=1, sort_keys=True).splitlines()
        except ValueError:
            return data.decode(errors="replace").splitlines()

    print("the replay's timeline differs from %s/expected.json "
          "(a detector changed? tests/replay/regenerate.sh rewrites it):" % fixture)
    for line in difflib.unified_diff(lines(expected), lines(stdout), "expected.json",
                                     "replay", lineterm="", n=3):
        print(line)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
