#!/usr/bin/env python3
"""Opt-in Alertmanager webhook receiver that drains Slurm nodes for fabricmon alerts.

For each *firing* alert whose name is in --alerts and which has a `node` label, runs
    scontrol update NodeName=<node> State=DRAIN Reason="fabricmon: <alertname>: <summary>"
A drained node finishes its running jobs and takes no new ones; nothing here ever resumes a node
(an operator does, after the repair: `scontrol update NodeName=<node> State=RESUME`).

Risks, and what limits them (README "Slurm"):
  - a false or flapping alert takes capacity away: only the alerts named in --alerts act (default:
    the critical, node-local ones), and at most --max_drains nodes are drained per hour;
  - a fabric-wide problem (a spine switch) raises alerts on many nodes: beyond --max_drains the
    receiver stops draining and logs what it would have done;
  - anyone who can POST to it can drain nodes: it listens on 127.0.0.1 by default, can require a
    bearer token (--token_file, Alertmanager's http_config.authorization), and only acts on
    node names of [A-Za-z0-9._-];
  - without --enable it only logs what it would do (dry run).
Alertmanager config:
    receivers:
      - name: slurm-drain
        webhook_configs:
          - url: http://127.0.0.1:9787/drain
            send_resolved: false
"""

import argparse
import hmac
import json
import logging
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_ALERTS = "FabricLinkFlapping,FabricNvlinkDown,FabricTcpFallback,FabricPortDown"
NODE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,253}$")
MAX_BODY = 1 << 20


class Drainer:
    """Drains nodes through scontrol, at most `max_drains` per hour."""

    def __init__(self, scontrol, enabled, max_drains):
        self.scontrol = scontrol
        self.enabled = enabled
        self.max_drains = max_drains
        self.recent = []  # times of the drains in the last hour
        self.lock = threading.Lock()

    def drain(self, node, reason):
        with self.lock:
            now = time.monotonic()
            self.recent = [t for t in self.recent if now - t < 3600]
            if len(self.recent) >= self.max_drains:
                logging.warning("NOT draining %s (%s): %d drains in the last hour already "
                                "(--max_drains)", node, reason, len(self.recent))
                return False
            command = [self.scontrol, "update", f"NodeName={node}", "State=DRAIN",
                       f"Reason={reason}"]
            if not self.enabled:
                logging.info("dry run (no --enable): would run %s", command)
                return False
            result = subprocess.run(command, capture_output=True, text=True, timeout=30,
                                    check=False)
            if result.returncode != 0:
                logging.error("%s failed (%d): %s", command, result.returncode,
                              result.stderr.strip())
                return False
            self.recent.append(now)
            logging.warning("drained %s: %s", node, reason)
            return True


def reason_of(alert):
    """Slurm's Reason: printable ASCII, one line, bounded."""
    summary = alert.get("annotations", {}).get("summary", "")
    text = f"fabricmon: {alert['labels'].get('alertname', '?')}: {summary}"
    text = "".join(c if 32 <= ord(c) < 127 else " " for c in text)
    return text[:200]


def handle(payload, alerts, drainer):
    """Acts on one Alertmanager notification; returns the nodes drained."""
    drained = []
    if not isinstance(payload, dict) or not isinstance(payload.get("alerts"), list):
        raise ValueError("not an Alertmanager webhook payload (no alerts list)")
    for alert in payload["alerts"]:
        if not isinstance(alert, dict) or alert.get("status") != "firing":
            continue
        labels = alert.get("labels")
        if not isinstance(labels, dict) or labels.get("alertname") not in alerts:
            continue
        node = labels.get("node", "")
        if not isinstance(node, str) or not NODE_NAME.match(node):
            logging.info("alert %s has no usable node label (%r): skipped",
                         labels.get("alertname"), node)
            continue
        if drainer.drain(node, reason_of(alert)):
            drained.append(node)
    return drained


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="127.0.0.1:9787", help="HOST:PORT")
    parser.add_argument("--alerts", default=DEFAULT_ALERTS,
                        help="comma-separated alert names that drain their node")
    parser.add_argument("--max_drains", type=int, default=3, help="drains per hour, at most")
    parser.add_argument("--scontrol", default="scontrol")
    parser.add_argument("--token_file", help="require 'Authorization: Bearer <token>'")
    parser.add_argument("--enable", action="store_true",
                        help="really drain (without it: log what would be done)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    token = None
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            token = f.read().strip()
    alerts = {a.strip() for a in args.alerts.split(",") if a.strip()}
    drainer = Drainer(args.scontrol, args.enable, args.max_drains)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            if token is not None and not hmac.compare_digest(
                    self.headers.get("Authorization", ""), f"Bearer {token}"):
                self.send_error(401)
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
                if length < 0 or length > MAX_BODY:
                    raise ValueError(f"body of {length} bytes")
                payload = json.loads(self.rfile.read(length))
                drained = handle(payload, alerts, drainer)
            except (ValueError, json.JSONDecodeError) as error:
                self.send_error(400, str(error)[:200])
                return
            body = json.dumps({"drained": drained}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt, *fmt_args):
            logging.debug(fmt, *fmt_args)

    host, _, port = args.listen.rpartition(":")
    server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
    logging.info("listening on %s; %s; draining for %s, at most %d per hour", args.listen,
                 "ENABLED" if args.enable else "dry run", ",".join(sorted(alerts)),
                 args.max_drains)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
