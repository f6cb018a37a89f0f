#!/usr/bin/env python3
"""The daemons speak the sd_notify protocol their Type=notify units rely on, without systemd.

Plays systemd's part: binds an AF_UNIX datagram socket with SO_PASSCRED, starts the daemon with
NOTIFY_SOCKET pointing at it (and WATCHDOG_USEC as WatchdogSec= would set it), and
checks what arrives:

  agent (deploy/systemd/fabricmon-agent.service: Type=notify, WatchdogSec=30, NotifyAccess=main)
    * READY=1 (with STATUS=) once its collectors have run (ib_sysfs on a captured tree; the
      aggregator it streams to does not exist, which must not delay READY),
    * WATCHDOG=1 at least every WATCHDOG_USEC/2 (here 1 s),
    * on SIGTERM: STOPPING=1, exit status 0 within the unit's TimeoutStopSec (20 s).
  aggregator (deploy/systemd/fabricmon-aggregator.service: Type=notify, WatchdogSec=30,
  NotifyAccess=main)
    * READY=1 once both listeners are bound (127.0.0.1:0 for both),
    * WATCHDOG=1 at least every WATCHDOG_USEC/2 while its detector thread ticks and its gRPC
      server answers (that the pings stop when one stalls is tested in the unit tests of
      CheckProgress and DetectionEngine::last_tick_monotonic_nanos),
    * on SIGTERM: STOPPING=1, exit status 0.
Every datagram must come from the daemon's main PID (SCM_CREDENTIALS), as NotifyAccess=main
requires: systemd ignores messages from any other process.

Exit 77 (skip) without the fixtures.

Usage: sd_notify_test.py --daemon=agent|aggregator --binary=BIN --fixtures=DIR
"""

import argparse
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import fabricmon_testing as fmt  # noqa: E402
from fabricmon_testing import SKIP  # noqa: E402

WATCHDOG_USEC = 2_000_000

AGENT_CONFIG = fmt.HERMETIC_AGENT_CONFIG


class NotifySocket:
    """systemd's side of sd_notify(3): a datagram socket that records (pid, fields)."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(path)
        self.messages = []  # (monotonic time, sender pid, {field: value})

    def poll(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                return
            data, ancdata, _, _ = self.sock.recvmsg(4096, socket.CMSG_SPACE(12))
            pid = None
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid, _, _ = struct.unpack("iII", payload[:12])
            fields = dict(line.split("=", 1) for line in data.decode().splitlines() if "=" in line)
            print(f"  notify from pid {pid}: {fields}")
            self.messages.append((time.monotonic(), pid, fields))

    def wait_for(self, key, timeout, after=0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for t, pid, fields in self.messages[after:]:
                if key in fields:
                    return t, pid, fields
            self.poll(min(0.2, max(0.0, deadline - time.monotonic())))
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--daemon", choices=("agent", "aggregator"), required=True)
    parser.add_argument("--binary", required=True)
    parser.add_argument("--fixtures", required=True)
    args = parser.parse_args()
    fixtures = os.environ.get("FABRICMON_SHARED_FIXTURES", args.fixtures)
    sysfs = os.path.join(fixtures, "sysfs", "gpud-h100", "sys")
    if args.daemon == "agent" and not os.path.isdir(sysfs):
        print(f"SKIP: fixture {sysfs} not found (set FABRICMON_SHARED_FIXTURES)")
        return SKIP

    errors = []
    with tempfile.TemporaryDirectory(prefix="fabricmon-notify-") as tmp:
        notify = NotifySocket(os.path.join(tmp, "notify"))
        env = dict(os.environ, NOTIFY_SOCKET=os.path.join(tmp, "notify"))
        env.pop("WATCHDOG_PID", None)
        env["WATCHDOG_USEC"] = str(WATCHDOG_USEC)
        if args.daemon == "agent":
            config = os.path.join(tmp, "agent.textproto")
            with open(config, "w") as f:
                f.write(AGENT_CONFIG)
            # Nothing listens on port 1: the stream keeps retrying, READY must not wait for it.
            cmd = [args.binary, f"--config={config}", f"--sysfs_root={sysfs}",
                   "--aggregator=127.0.0.1:1", "--node_name=notify-test", "--log_level=error"]
        else:
            config = os.path.join(tmp, "aggregator.textproto")
            with open(config, "w") as f:
                f.write("tls { insecure_plaintext: true }\n")
            cmd = [args.binary, f"--config={config}", "--grpc_listen=127.0.0.1:0",
                   "--metrics_listen=127.0.0.1:0", "--log_level=error"]
        print("running: " + " ".join(cmd))
        start = time.monotonic()
        proc = subprocess.Popen(cmd, env=env)
        try:
            ready_timeout = 20 if args.daemon == "agent" else 10
            ready = notify.wait_for("READY", timeout=ready_timeout)
            if ready is None:
                errors.append(
                    f"fabricmon-{args.daemon} sent no READY=1 within {ready_timeout} s, but "
                    f"deploy/systemd/fabricmon-{args.daemon}.service is Type=notify: systemd "
                    "would kill it after TimeoutStartSec"
                    + ("" if args.daemon == "agent" else
                       " (daemon/aggregator/aggregator_main.cc needs sd_notify(0, \"READY=1\") "
                       "once both listeners are bound, and sd_notify(0, \"STOPPING=1\") on "
                       "SIGTERM)"))
            else:
                print(f"ok: READY=1 after {ready[0] - start:.2f} s "
                      f"(STATUS={ready[2].get('STATUS', '')!r})")
                if "STATUS" not in ready[2]:
                    errors.append("READY=1 came without STATUS=")
            if ready is not None:
                notify.poll(2.6)
                pings = [t for t, _, f in notify.messages if f.get("WATCHDOG") == "1"]
                gaps = [b - a for a, b in zip(pings, pings[1:])]
                limit = WATCHDOG_USEC / 1e6 / 2 * 1.5
                if len(pings) < 2 or max(gaps) > limit:
                    errors.append(f"WATCHDOG=1 pings {len(pings)}, gaps {gaps}: expected every "
                                  f"{WATCHDOG_USEC / 2e6:.1f} s (half of WATCHDOG_USEC)")
                else:
                    print(f"ok: {len(pings)} WATCHDOG=1 pings, largest gap {max(gaps):.2f} s")
            count = len(notify.messages)
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                stopping = notify.wait_for("STOPPING", timeout=10 if ready else 1, after=count)
                if stopping is None and ready is not None:
                    errors.append("no STOPPING=1 after SIGTERM")
                elif stopping is not None:
                    print("ok: STOPPING=1 after SIGTERM")
                try:
                    code = proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    errors.append("still running 20 s after SIGTERM (unit TimeoutStopSec=20)")
                    code = None
                if code is not None and code != 0:
                    errors.append(f"exit status {code} after SIGTERM, expected 0")
            else:
                errors.append(f"exited early with status {proc.returncode}")
            wrong = {pid for _, pid, _ in notify.messages if pid != proc.pid}
            if wrong:
                errors.append(f"notifications from pids {wrong}, not the main pid {proc.pid} "
                              "(NotifyAccess=main would drop them)")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for e in errors:
        print("FAIL: " + e)
    if errors:
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
