#!/usr/bin/env python3
"""`fabricmon record export --from` keeps true values, on a checked-in fixture (no simulator):

    record_export_window.py FABRICMON_CLI LAST_VALUES_TOOL FIXTURE_DIR

The window starts mid-stream (halfway through the recording, read from what `fabricmon replay`
says of it), so every stream is carried into it with its earlier batches left out. Values are
read straight from the recordings' records by fabricmon_recording_last_values (deltas summed
there, not by the exporter's decoder), on the whole recording and on the exports:
  - the export from the window's start to the end: every series at the whole recording's last
    value (same raw value, same presence); a series it lacks is one last sent before the window;
  - the export of the window's first 0.3 s against the whole recording cut at the same instant:
    every series the window's first batches hold, counters and gauges among them, at the value
    the whole recording has then;
  - both exports replay (`fabricmon replay --fast`) with no message refused.
Exit 0 pass, 1 fail."""

import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
import replay_matches  # this directory: the fixtures' recording

SUMMARY = re.compile(r"from (\S+Z) to (\S+Z);")


def last_values(tool, recording):
    """{(node, name, labels): row} of a recording, read by the oracle tool."""
    out = subprocess.run([tool, recording], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError("%s %s: exit %d: %s" % (tool, recording, out.returncode, out.stderr))
    rows = {}
    for line in out.stdout.splitlines():
        row = json.loads(line)
        rows[(row["node"], row["name"], tuple(sorted(row["labels"].items())))] = row
    return rows


def replay(cli, recording):
    """The replay's summary line; raises when it fails or refuses a message."""
    out = subprocess.run([cli, "replay", recording, "--fast"], capture_output=True, text=True,
                         timeout=60)
    text = out.stdout + out.stderr
    if out.returncode != 0 or " 0 messages refused" not in text:
        raise RuntimeError("replay of %s: exit %d: %s" % (recording, out.returncode, text[-2000:]))
    return text


def export(cli, recording, start, end, path):
    with open(path, "wb") as f:
        out = subprocess.run([cli, "record", "export", "--dir=" + recording, "--from=" + start,
                              "--to=" + end], stdout=f, stderr=subprocess.PIPE, text=True,
                             timeout=60)
    if out.returncode != 0:
        raise RuntimeError("export %s..%s: exit %d: %s" % (start, end, out.returncode, out.stderr))


def unix_seconds(rfc3339):
    """2026-11-26T07:35:27.060Z (how replay prints its range) as Unix seconds."""
    return datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=timezone.utc).timestamp()


def compare(what, got, want, failures):
    """Every series of `got` at `want`'s value; returns how many were compared."""
    for key, row in sorted(got.items()):
        if key not in want:
            failures.append("%s: %s is not in the whole recording" % (what, key))
        elif row["present"] != want[key]["present"]:
            failures.append("%s: %s present=%s, the whole recording says %s"
                            % (what, key, row["present"], want[key]["present"]))
        elif row["present"] and row["raw"] != want[key]["raw"]:
            failures.append("%s: %s reads %s, the whole recording %s"
                            % (what, key, row["raw"], want[key]["raw"]))
    return len(got)


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    cli, tool, fixture = argv[1:]
    failures = []
    with tempfile.TemporaryDirectory(prefix="fabricmon-record-export-") as scratch:
        recording = replay_matches.write_recording(fixture, scratch)
        m = SUMMARY.search(replay(cli, recording))
        if not m:
            print("the replay did not say the recording's time range")
            return 1
        first, last = unix_seconds(m.group(1)), unix_seconds(m.group(2))
        start = "%.3f" % ((first + last) / 2)
        early_end = "%.3f" % ((first + last) / 2 + 0.3)

        # From the window's start to the end: the last values are the whole recording's.
        whole = last_values(tool, recording)
        tail = os.path.join(scratch, "tail.fmrec")
        export(cli, recording, start, "%.3f" % (last + 1), tail)
        replay(cli, tail)
        exported = last_values(tool, tail)
        compare("export from %s" % start, exported, whole, failures)
        # A series with no batch in the window is not in the export (nothing of it is): it must
        # be one the whole recording last sent before the window.
        before = os.path.join(scratch, "before.fmrec")
        export(cli, recording, "%.3f" % (first - 1), "%.3f" % (float(start) - 0.001), before)
        at_start = last_values(tool, before)
        for key in sorted(set(whole) - set(exported)):
            if at_start.get(key, {}).get("raw") != whole[key]["raw"]:
                failures.append("export from %s lacks %s, which the window changes"
                                % (start, key))

        # The window's first batches: the values the whole recording has at the same instant.
        cut = os.path.join(scratch, "cut.fmrec")
        head = os.path.join(scratch, "head.fmrec")
        export(cli, recording, "%.3f" % (first - 1), early_end, cut)
        export(cli, recording, start, early_end, head)
        replay(cli, head)
        at_cut = last_values(tool, cut)
        window_start = last_values(tool, head)
        compare("export %s..%s" % (start, early_end), window_start, at_cut, failures)
        types = {row["type"] for row in window_start.values() if row["present"]}
        nonzero = sum(1 for row in window_start.values() if row["present"] and row["raw"] != "0")
        if not {"counter", "gauge"} <= types or nonzero == 0:
            failures.append("the window's first batches hold no nonzero counter and gauge "
                            "(types %s, %d nonzero): the test checks nothing" % (types, nonzero))
        print("%d series checked at the end, %d (%d nonzero) at the window's first batches"
              % (len(exported), len(window_start), nonzero))

    for failure in failures[:40]:
        print("FAIL " + failure)
    if len(failures) > 40:
        print("... and %d more" % (len(failures) - 40))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
