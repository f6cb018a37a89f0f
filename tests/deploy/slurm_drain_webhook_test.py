#!/usr/bin/env python3
"""deploy/slurm/alertmanager-drain-webhook.py: which alerts drain which nodes, and its limits.

Drives the receiver's handle() with Alertmanager payloads and a stand-in scontrol that records
its arguments: firing alerts named in --alerts drain their node with a fabricmon Reason; resolved
alerts, other alerts, missing or hostile node labels do nothing; beyond --max_drains per hour and
without --enable nothing is drained; a body that is not a webhook payload is refused. Then one
real HTTP POST (with and without the bearer token) against the server main() starts.
Python 3 standard library only.
"""

import importlib.util
import json
import os
import stat
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "deploy", "slurm", "alertmanager-drain-webhook.py")


def load():
    spec = importlib.util.spec_from_file_location("drain_webhook", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def alert(name, node, status="firing", summary="link flapping"):
    labels = {"alertname": name}
    if node is not None:
        labels["node"] = node
    return {"status": status, "labels": labels, "annotations": {"summary": summary}}


def check(condition, what):
    if not condition:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)
    print("ok:", what, file=sys.stderr)


def main():
    webhook = load()
    with tempfile.TemporaryDirectory(prefix="fabricmon-drain-") as work:
        calls = os.path.join(work, "calls")
        scontrol = os.path.join(work, "scontrol")
        with open(scontrol, "w") as f:
            f.write('#!/bin/sh\nfor a in "$@"; do printf "%%s|" "$a"; done >> %s\necho >> %s\n'
                    % (calls, calls))
        os.chmod(scontrol, stat.S_IRWXU)

        def recorded():
            return open(calls).read().splitlines() if os.path.exists(calls) else []

        alerts = {"FabricLinkFlapping", "FabricNvlinkDown"}
        dry = webhook.Drainer(scontrol, enabled=False, max_drains=3)
        check(webhook.handle({"alerts": [alert("FabricLinkFlapping", "gpu001")]}, alerts, dry)
              == [] and recorded() == [], "without --enable nothing is drained")

        drainer = webhook.Drainer(scontrol, enabled=True, max_drains=2)
        payload = {"alerts": [
            alert("FabricLinkFlapping", "gpu001", summary="gpu001 mlx5_0/1 \u2194 leaf01/3\nflaps"),
            alert("FabricLinkFlapping", "gpu002", status="resolved"),
            alert("FabricPortErrors", "gpu003"),
            alert("FabricNvlinkDown", None),
            alert("FabricNvlinkDown", "gpu004;reboot"),
            alert("FabricNvlinkDown", "$(id)"),
            "not an alert",
        ]}
        drained = webhook.handle(payload, alerts, drainer)
        check(drained == ["gpu001"], "only the firing, listed alert with a valid node drains")
        check(recorded() == ["update|NodeName=gpu001|State=DRAIN|Reason=fabricmon: "
                             "FabricLinkFlapping: gpu001 mlx5_0/1   leaf01/3 flaps|"],
              "scontrol update NodeName=... State=DRAIN Reason=\"fabricmon: ...\" (one line, "
              "ASCII), no shell: %s" % recorded())
        webhook.handle({"alerts": [alert("FabricNvlinkDown", "gpu005"),
                                   alert("FabricNvlinkDown", "gpu006")]}, alerts, drainer)
        check(len(recorded()) == 2 and "gpu005" in recorded()[1],
              "at most --max_drains (2) per hour: gpu006 is not drained")
        for bad in (None, [], {"alerts": "x"}, "text"):
            try:
                webhook.handle(bad, alerts, drainer)
                check(False, "refuses %r" % (bad,))
            except ValueError:
                pass
        check(True, "a body that is not a webhook payload is refused")

        # The HTTP server, with a bearer token.
        token = os.path.join(work, "token")
        with open(token, "w") as f:
            f.write("s3cret\n")
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = threading.Thread(target=webhook.main, daemon=True, args=([
            "--listen=127.0.0.1:%d" % port, "--scontrol=" + scontrol, "--token_file=" + token,
            "--enable", "--max_drains=5"],))
        server.start()
        body = json.dumps({"alerts": [alert("FabricLinkFlapping", "gpu010")]}).encode()

        def post(auth):
            request = urllib.request.Request("http://127.0.0.1:%d/drain" % port, data=body,
                                             headers={"Content-Type": "application/json"})
            if auth:
                request.add_header("Authorization", auth)
            try:
                with urllib.request.urlopen(request, timeout=5) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as error:
                return error.code, None
            except urllib.error.URLError:
                return None, None

        deadline = time.monotonic() + 10
        while post("Bearer wrong")[0] is None and time.monotonic() < deadline:
            time.sleep(0.1)
        check(post("Bearer wrong")[0] == 401 and post(None)[0] == 401,
              "without the bearer token: 401, nothing drained")
        check(post("Bearer s3cret") == (200, {"drained": ["gpu010"]}), "with the token: drained")
        check(sum("gpu010" in line for line in recorded()) == 1, "gpu010 drained once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
