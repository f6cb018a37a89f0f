#!/usr/bin/env python3
"""`fabricmon replay --listen_metrics` end to end, on a checked-in fixture (no simulator):

    replay_metrics.py FABRICMON_CLI LAST_VALUES_TOOL FIXTURE_DIR

  - a malformed or unbindable --listen_metrics is refused before anything is replayed: exit 2
    and a message naming the flag or the address;
  - the replay (--fast) serves /metrics on 127.0.0.1:0, says its port and, when the replay has
    ended, that it goes on serving until SIGINT or SIGTERM; SIGTERM then ends it with exit 0;
  - the scrape is `promtool check metrics` clean (skipped without promtool: Debian package
    prometheus);
  - fabricmon_finding_active holds every finding the fixture's expected timeline leaves active
    (kind, node, device, port), and no other;
  - every series the recording's last batch holds is served with its last recorded value: read
    straight from the recording's records by fabricmon_recording_last_values, not through the
    ingest, store or exporter that serve /metrics; the node label is the recorded node.
Exit 0 pass, 1 fail."""

import json
import os
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import replay_matches  # this directory: the fixtures' recording

LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def unescape(value):
    return value.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def parse(text):
    """{(name, frozenset(labels)): value} of the text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = LINE.match(line)
        if not m:
            raise ValueError("not a sample line: %r" % line)
        labels = frozenset((k, unescape(v)) for k, v in LABEL.findall(m.group(3) or ""))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def expected_active(fixture):
    active = {}
    with open(os.path.join(fixture, "expected.json")) as f:
        for event in json.load(f)["events"]:
            fid = event["finding"]["id"]
            if event["event"] == "cleared":
                active.pop(fid, None)
            else:
                active[fid] = event["finding"]
    return active


def exporter_value(row):
    """What the aggregator exports for a recorded raw value (the wire protocol's rule: counters
    unsigned, gauges signed 64-bit, times the scale; info series 1)."""
    raw = int(row["raw"])
    if row["type"] == "info":
        return 1.0
    if row["type"] == "gauge":
        raw = struct.unpack("<q", struct.pack("<Q", raw))[0]
    return float(raw) * row["scale"]


def run_refused(cli, recording, address, want):
    result = subprocess.run([cli, "replay", recording, "--listen_metrics=" + address],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    err = result.stderr.decode(errors="replace")
    if result.returncode != 2 or want not in err or result.stdout:
        return ["--listen_metrics=%s: exit %d (want 2), stdout %d bytes, stderr %r (want it to "
                "name %r)" % (address, result.returncode, len(result.stdout), err, want)]
    return []


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    cli, last_values_tool, fixture = argv[1:]
    failures = []
    with tempfile.TemporaryDirectory(prefix="fabricmon-replay-metrics-") as scratch:
        recording = replay_matches.write_recording(fixture, scratch)
        for address, want in (("nonsense", "--listen_metrics=nonsense"),
                              ("127.0.0.1:65536", "0..65535"), ("127.0.0.1:", "0..65535"),
                              (":9470", "no host"), ("127.0.0.1:http", "0..65535"),
                              # TEST-NET-1: no interface of this machine has it.
                              ("192.0.2.1:0", "cannot listen on 192.0.2.1:0")):
            failures += run_refused(cli, recording, address, want)

        stdout_path = os.path.join(scratch, "timeline.json")
        with open(stdout_path, "wb") as stdout:
            proc = subprocess.Popen(
                [cli, "replay", recording, "--fast", "--json", "--listen_metrics=127.0.0.1:0",
                 "--config=" + os.path.join(fixture, "aggregator.textproto"),
                 "--link_list=" + os.path.join(fixture, "links.txt")],
                stdout=stdout, stderr=subprocess.PIPE)
        try:
            port, ended, err = None, False, b""
            deadline = time.monotonic() + 60
            while not ended and time.monotonic() < deadline and proc.poll() is None:
                ready, _, _ = select.select([proc.stderr], [], [], 1.0)
                if ready:
                    chunk = os.read(proc.stderr.fileno(), 4096)
                    err += chunk
                    m = re.search(rb"serving /metrics on port (\d+)", err)
                    port = int(m.group(1)) if m else None
                    ended = b"until SIGINT or SIGTERM" in err
            if port is None or not ended:
                print("the replay never said it serves /metrics and ended (exit %s): %s"
                      % (proc.poll(), err.decode(errors="replace")))
                return 1
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as r:
                text = r.read().decode()
            # Still serving after the replay ended: a second scrape gives the same values.
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=30) as r:
                again = r.read().decode()
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=30)
            err += proc.stderr.read()
            if rc != 0 or b"SIGTERM, stopping" not in err:
                failures.append("SIGTERM after the replay: exit %d (want 0), stderr %r"
                                % (rc, err.decode(errors="replace")))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        with open(stdout_path, "rb") as f:
            timeline = f.read()
        with open(os.path.join(fixture, "expected.json"), "rb") as f:
            if timeline != f.read():
                failures.append("with --listen_metrics the timeline differs from expected.json")

        promtool = shutil.which("promtool")
        if promtool:
            check = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            if check.returncode != 0:
                failures.append("promtool check metrics: %s" % check.stdout.decode()[:2000])
        else:
            print("promtool not installed (Debian package prometheus): lint skipped")

        served = parse(text)
        if not any(k[0] == "fabricmon_finding_active" for k in parse(again)):
            failures.append("a second scrape after the replay ended serves no findings")
        active = {(name, labels): v for (name, labels), v in served.items()
                  if name == "fabricmon_finding_active"}
        want = set()
        for finding in expected_active(fixture).values():
            s = finding.get("subject", {})
            want.add((finding["kind"], s.get("node", ""), s.get("device", ""),
                      str(s.get("port", "")) if s.get("port") else ""))
        got = set()
        for (_, labels), value in active.items():
            d = dict(labels)
            if value != 1:
                failures.append("fabricmon_finding_active%s = %g, want 1" % (sorted(labels), value))
            got.add((d.get("kind"), d.get("node"), d.get("device"), d.get("port")))
        if got != want:
            failures.append("fabricmon_finding_active: served %s, the expected timeline leaves "
                            "%s active" % (sorted(got), sorted(want)))

        dump = subprocess.run([last_values_tool, recording], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=60)
        if dump.returncode != 0:
            print("%s exited %d: %s" % (last_values_tool, dump.returncode,
                                        dump.stderr.decode(errors="replace")))
            return 1
        compared = 0
        nodes = set()
        for line in dump.stdout.decode().splitlines():
            row = json.loads(line)
            if not row["present"]:
                continue  # absent in its stream's last batch: the aggregator exports nothing
            key = (row["name"], frozenset([("node", row["node"])] + list(row["labels"].items())))
            if key not in served:
                failures.append("not served: %s%s (recorded last value %s)"
                                % (row["name"], sorted(key[1]), exporter_value(row)))
                continue
            want_value = exporter_value(row)
            if served[key] != want_value and abs(served[key] - want_value) > 1e-9 * abs(want_value):
                failures.append("%s%s: served %r, recorded last value %r"
                                % (row["name"], sorted(key[1]), served[key], want_value))
            compared += 1
            nodes.add(row["node"])
        if compared == 0:
            failures.append("no recorded series to compare")
    if failures:
        for line in failures[:40]:
            print("FAIL: " + line)
        if len(failures) > 40:
            print("... %d more" % (len(failures) - 40))
        return 1
    print("%s: /metrics served %d findings as expected and %d series of %d nodes at their last "
          "recorded values; bad addresses refused" % (
              os.path.basename(os.path.normpath(fixture)), len(active), compared, len(nodes)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
