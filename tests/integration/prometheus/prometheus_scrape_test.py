#!/usr/bin/env python3
"""End-to-end test against a real Prometheus server (Debian `prometheus` 2.42, `promtool`).

Starts, all on loopback with ports found at run time:
  * fabricmon-aggregator (--grpc_listen=127.0.0.1:0, --port_file, --metrics_listen=<free>),
  * two fabricmon-agent processes, nodeA on a GPU-node sysfs capture and nodeB on a second
    capture, streaming to the aggregator (short reconnect backoff), nodeA also serving its own
    /metrics,
  * prometheus scraping the aggregator every second,
then checks through Prometheus' HTTP API (/api/v1/query):
  * up{job="fabricmon-aggregator"} == 1,
  * fabricmon_node_up == 1 for nodeA and nodeB,
  * fabricmon_ib_port_xmit_data_bytes_total{node="nodeA"} holds exactly one series per HCA port,
    each with the value `fabricmon-agent --once` prints for the same tree,
  * rate(fabricmon_aggregator_samples_total[5s]) > 0,
and that `promtool check metrics` is silent (exit 0, no output) on a raw scrape of the
aggregator's /metrics and of nodeA's --listen_metrics.

Every wait is bounded; every child dies with this script (PR_SET_PDEATHSIG plus a kill in
`finally`), temp dirs are removed. Exit status 77 (ctest SKIP_RETURN_CODE) when prometheus or
promtool is not installed.

Usage:
  prometheus_scrape_test.py --aggregator=BIN --agent=BIN --fixtures=DIR [--keep] [--verbose]
"""

import argparse
import ctypes
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

SKIP = 77
JOB = "fabricmon-aggregator"
# The two captures (see ../shared/fixtures/PROVENANCE.md): a DGX H100 with 9 mlx5 HCAs
# (gpud-h100) and procfs' mixed tree (mlx4 with 2 ports, mlx5, hfi1).
NODES = {"nodeA": "sysfs/gpud-h100/sys", "nodeB": "sysfs/procfs/sys"}
XMIT_METRIC = "fabricmon_ib_port_xmit_data_bytes_total"

# Hermetic agent config: only the ib_sysfs collector (the others would read the real host), a 1 s
# interval and a short reconnect backoff.
AGENT_CONFIG = """\
tls { insecure_plaintext: true }
reconnect_initial_backoff_ms: 100
reconnect_max_backoff_ms: 1000
collectors {
  ib_sysfs { interval_ms: 1000 }
  ethtool { enabled: false }
  netdev { enabled: false }
  nvml { enabled: false }
  ib_fabric { enabled: false }
}
"""

AGGREGATOR_CONFIG = """\
tls { insecure_plaintext: true }
"""

PROMETHEUS_CONFIG = """\
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
scrape_configs:
  - job_name: {job}
    static_configs:
      - targets: ['127.0.0.1:{port}']
"""

VERBOSE = False


def log(*parts):
    print("[prometheus_scrape_test]", *parts, file=sys.stderr, flush=True)


class Failure(Exception):
    pass


def free_port():
    """A TCP port that was free a moment ago (the caller retries if it is taken meanwhile)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent():
    # Runs in the child between fork and exec: SIGKILL it if this script dies, even by SIGKILL
    # (ctest timeout), so no daemon outlives the test.
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    PR_SET_PDEATHSIG = 1
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Processes:
    """Children started by the test; all stopped by stop_all()."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.children = []  # (name, Popen, log path)

    def start(self, name, argv):
        log_path = os.path.join(self.workdir, name + ".log")
        log_file = open(log_path, "wb")
        if VERBOSE:
            log("starting", name + ":", " ".join(argv))
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log_file,
                                stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
                                cwd=self.workdir)
        log_file.close()
        self.children.append((name, proc, log_path))
        return proc

    def check_alive(self, proc):
        for name, p, log_path in self.children:
            if p is proc and p.poll() is not None:
                raise Failure("%s exited early with status %s; log:\n%s" %
                              (name, p.returncode, tail(log_path)))

    def stop_all(self):
        for _, proc, _ in self.children:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        for _, proc, _ in self.children:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def dump_logs(self):
        for name, _, log_path in self.children:
            log("---- log of", name, "----\n" + tail(log_path))


def tail(path, lines=40):
    try:
        with open(path, "r", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_for(what, predicate, timeout_s, interval_s=0.2):
    """Polls `predicate` until it returns a truthy value; Failure after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, urllib.error.URLError, ValueError, KeyError) as e:
            last_error = e
        time.sleep(interval_s)
    raise Failure("timed out after %.0f s waiting for %s%s" %
                  (timeout_s, what, " (last error: %s)" % last_error if last_error else ""))


def http_get(url, timeout_s=5):
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.read().decode("utf-8")


def prom_query(base, expr):
    """Instant query; returns the result vector as [(labels, float value)]."""
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = json.loads(http_get(url))
    if body.get("status") != "success":
        raise Failure("query %r failed: %s" % (expr, body))
    data = body["data"]
    if data["resultType"] != "vector":
        raise Failure("query %r: expected a vector, got %s" % (expr, data["resultType"]))
    return [(r["metric"], float(r["value"][1])) for r in data["result"]]


_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*')


def parse_text_exposition(text):
    """Prometheus text format → [(name, {labels}, float)]; comments skipped."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            raise Failure("unparsable exposition line: %r" % line)
        name, label_text, value = m.group(1), m.group(2) or "", m.group(3)
        labels = {}
        pos = 0
        while pos < len(label_text):
            lm = _LABEL.match(label_text, pos)
            if not lm:
                raise Failure("unparsable labels in line: %r" % line)
            labels[lm.group(1)] = re.sub(
                r'\\(.)', lambda e: {"n": "\n"}.get(e.group(1), e.group(1)), lm.group(2))
            pos = lm.end()
        samples.append((name, labels, float(value)))
    return samples


def promtool_check(promtool, text, what):
    result = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                            capture_output=True, timeout=30)
    output = (result.stdout + result.stderr).decode(errors="replace").strip()
    if result.returncode != 0 or output:
        raise Failure("promtool check metrics on %s: exit %d, output:\n%s" %
                      (what, result.returncode, output))
    log("promtool check metrics clean on", what, "(%d lines)" % len(text.splitlines()))


def write(path, content):
    with open(path, "w") as f:
        f.write(content)
    return path


def start_with_free_port(procs, name, make_argv, ready, attempts=5):
    """Starts a server on a port picked at run time; retries on another port if it was taken."""
    for _ in range(attempts):
        port = free_port()
        proc = procs.start(name, make_argv(port))
        wait_for(name + " to listen on port %d" % port,
                 lambda: proc.poll() is not None or ready(port), timeout_s=20)
        if proc.poll() is None:
            return proc, port
        log(name, "could not use port", port, "(exit %s); retrying" % proc.returncode)
    raise Failure("%s: no usable port after %d attempts" % (name, attempts))


def run(args, workdir):
    prometheus = shutil.which("prometheus")
    promtool = shutil.which("promtool")
    if prometheus is None or promtool is None:
        log("SKIP: prometheus and promtool (Debian package 'prometheus') are not installed")
        return SKIP
    for node, rel in NODES.items():
        if not os.path.isdir(os.path.join(args.fixtures, rel, "class/infiniband")):
            log("SKIP: fixture tree", os.path.join(args.fixtures, rel), "is missing")
            return SKIP

    agent_config = write(os.path.join(workdir, "agent.textproto"), AGENT_CONFIG)
    aggregator_config = write(os.path.join(workdir, "aggregator.textproto"), AGGREGATOR_CONFIG)
    procs = Processes(workdir)
    try:
        # 1. Expected values: --once on nodeA's tree.
        once = subprocess.run([args.agent, "--once", "--config=" + agent_config,
                               "--sysfs_root=" + os.path.join(args.fixtures, NODES["nodeA"])],
                              capture_output=True, timeout=30)
        if once.returncode != 0:
            raise Failure("fabricmon-agent --once failed: %s" %
                          once.stderr.decode(errors="replace"))
        expected = {}
        for name, labels, value in parse_text_exposition(once.stdout.decode()):
            if name == XMIT_METRIC:
                key = (labels.get("device"), labels.get("port"))
                if key in expected:
                    raise Failure("--once printed %s twice for %s" % (XMIT_METRIC, key))
                expected[key] = value
        if not expected:
            raise Failure("--once printed no %s series" % XMIT_METRIC)
        log("--once: %d %s series on nodeA's tree" % (len(expected), XMIT_METRIC))

        # 2. Aggregator: gRPC on port 0 (port file), /metrics on a free port.
        port_file = os.path.join(workdir, "grpc.port")

        def aggregator_argv(port):
            if os.path.exists(port_file):
                os.unlink(port_file)
            return [args.aggregator, "--config=" + aggregator_config, "--grpc_listen=127.0.0.1:0",
                    "--port_file=" + port_file, "--metrics_listen=127.0.0.1:%d" % port,
                    "--log_level=info"]

        def metrics_ready(port):
            return "fabricmon_aggregator_streams" in http_get("http://127.0.0.1:%d/metrics" % port)

        aggregator, metrics_port = start_with_free_port(procs, "aggregator", aggregator_argv,
                                                        metrics_ready)
        grpc_port = int(wait_for("the aggregator's port file",
                                 lambda: open(port_file).read().strip(), timeout_s=10))
        log("aggregator: gRPC port %d, /metrics port %d" % (grpc_port, metrics_port))

        # 3. Agents. nodeA also serves its own /metrics (for promtool).
        agent_metrics_port = None
        for node, rel in NODES.items():
            base_argv = [args.agent, "--config=" + agent_config,
                         "--aggregator=127.0.0.1:%d" % grpc_port, "--node_name=" + node,
                         "--sysfs_root=" + os.path.join(args.fixtures, rel), "--log_level=info"]
            if node == "nodeA":
                _, agent_metrics_port = start_with_free_port(
                    procs, "agent-" + node,
                    lambda port: base_argv + ["--listen_metrics=127.0.0.1:%d" % port],
                    lambda port: XMIT_METRIC in http_get("http://127.0.0.1:%d/metrics" % port))
            else:
                procs.start("agent-" + node, base_argv)

        def both_nodes_in_aggregator():
            procs.check_alive(aggregator)
            text = http_get("http://127.0.0.1:%d/metrics" % metrics_port)
            up = {labels.get("node"): value
                  for name, labels, value in parse_text_exposition(text)
                  if name == "fabricmon_node_up"}
            return up.get("nodeA") == 1 and up.get("nodeB") == 1

        wait_for("both agents to stream to the aggregator", both_nodes_in_aggregator, timeout_s=30)
        log("both agents connected")

        # 4. Prometheus.
        prom_config = write(os.path.join(workdir, "prometheus.yml"),
                            PROMETHEUS_CONFIG.format(job=JOB, port=metrics_port))
        tsdb = os.path.join(workdir, "tsdb")

        def prometheus_argv(port):
            return [prometheus, "--config.file=" + prom_config, "--storage.tsdb.path=" + tsdb,
                    "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn",
                    "--storage.tsdb.retention.time=1h"]

        def prometheus_ready(port):
            try:
                return "Ready" in http_get("http://127.0.0.1:%d/-/ready" % port, timeout_s=2)
            except urllib.error.HTTPError:
                return False  # 503 while starting

        prom, prom_port = start_with_free_port(procs, "prometheus", prometheus_argv,
                                               prometheus_ready)
        base = "http://127.0.0.1:%d" % prom_port
        log("prometheus ready on port", prom_port)

        # 5. Queries.
        def target_up():
            procs.check_alive(prom)
            result = prom_query(base, 'up{job="%s"}' % JOB)
            return len(result) == 1 and result[0][1] == 1

        wait_for('up{job="%s"} == 1' % JOB, target_up, timeout_s=30, interval_s=0.5)
        log('up{job="%s"} == 1' % JOB)

        def nodes_up():
            result = prom_query(base, "fabricmon_node_up")
            values = {labels.get("node"): value for labels, value in result}
            return values if values == {"nodeA": 1.0, "nodeB": 1.0} else None

        wait_for("fabricmon_node_up == 1 for nodeA and nodeB", nodes_up, timeout_s=20,
                 interval_s=0.5)
        log("fabricmon_node_up == 1 for nodeA and nodeB")

        result = prom_query(base, '%s{node="nodeA"}' % XMIT_METRIC)
        got = {}
        for labels, value in result:
            key = (labels.get("device"), labels.get("port"))
            if key in got:
                raise Failure("Prometheus has two %s series for %s: %s" %
                              (XMIT_METRIC, key, result))
            if labels.get("job") != JOB:
                raise Failure("unexpected job label: %s" % labels)
            got[key] = value
        if got.keys() != expected.keys():
            raise Failure("%s{node=\"nodeA\"}: series for %s, --once has %s" %
                          (XMIT_METRIC, sorted(got), sorted(expected)))
        for key, value in sorted(expected.items()):
            if got[key] != value:
                raise Failure("%s{device=%s,port=%s}: Prometheus has %r, --once printed %r" %
                              (XMIT_METRIC, key[0], key[1], got[key], value))
        log("%s{node=\"nodeA\"}: %d series (one per HCA port), values equal to --once" %
            (XMIT_METRIC, len(got)))

        def samples_rate():
            result = prom_query(base, "rate(fabricmon_aggregator_samples_total[5s])")
            return result[0][1] if len(result) == 1 and result[0][1] > 0 else None

        rate = wait_for("rate(fabricmon_aggregator_samples_total[5s]) > 0", samples_rate,
                        timeout_s=30, interval_s=0.5)
        log("rate(fabricmon_aggregator_samples_total[5s]) = %.1f/s" % rate)
        if not math.isfinite(rate):
            raise Failure("samples rate is not finite: %r" % rate)

        # 6. promtool on raw scrapes.
        promtool_check(promtool, http_get("http://127.0.0.1:%d/metrics" % metrics_port),
                       "the aggregator's /metrics")
        promtool_check(promtool, http_get("http://127.0.0.1:%d/metrics" % agent_metrics_port),
                       "nodeA's --listen_metrics")
        log("PASS")
        return 0
    except (Failure, OSError, subprocess.SubprocessError) as e:
        log("FAIL:", e)
        procs.dump_logs()
        return 1
    finally:
        procs.stop_all()


def main():
    global VERBOSE
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--aggregator", required=True, help="fabricmon-aggregator binary")
    parser.add_argument("--agent", required=True, help="fabricmon-agent binary")
    parser.add_argument("--fixtures", default=os.environ.get("FABRICMON_SHARED_FIXTURES", ""),
                        help="../shared/fixtures directory")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs, TSDB)")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    VERBOSE = args.verbose
    if not args.fixtures:
        parser.error("--fixtures (or FABRICMON_SHARED_FIXTURES) is required")
    # Children run in the temp dir: make every path absolute.
    args.aggregator = os.path.abspath(args.aggregator)
    args.agent = os.path.abspath(args.agent)
    args.fixtures = os.path.abspath(args.fixtures)

    # SIGTERM (e.g. from a harness) goes through the same cleanup as a failure.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    workdir = tempfile.mkdtemp(prefix="fabricmon-prom-")
    try:
        return run(args, workdir)
    finally:
        if args.keep:
            log("kept", workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
