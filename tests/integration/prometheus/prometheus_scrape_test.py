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
import math
import os
import shutil
import signal
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "testing"))
import fabricmon_testing as fmt  # noqa: E402
from fabricmon_testing import (Failure, SKIP, http_get, parse_text_exposition,  # noqa: E402
                               wait_for)

JOB = "fabricmon-aggregator"
# The two captures (see ../shared/fixtures/PROVENANCE.md): a DGX H100 with 9 mlx5 HCAs
# (gpud-h100) and procfs' mixed tree (mlx4 with 2 ports, mlx5, hfi1).
NODES = {"nodeA": "sysfs/gpud-h100/sys", "nodeB": "sysfs/procfs/sys"}
XMIT_METRIC = "fabricmon_ib_port_xmit_data_bytes_total"

AGENT_CONFIG = fmt.HERMETIC_AGENT_CONFIG

AGGREGATOR_CONFIG = """\
tls { insecure_plaintext: true }
"""

VERBOSE = False


def log(*parts):
    print("[prometheus_scrape_test]", *parts, file=sys.stderr, flush=True)


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
    procs = fmt.Processes(workdir, log=log, verbose=VERBOSE)
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

        _, metrics_port = procs.start_server("aggregator", aggregator_argv, metrics_ready,
                                             attempts=5)
        grpc_port = int(wait_for("the aggregator's port file",
                                 lambda: open(port_file).read().strip(), timeout_s=10,
                                 procs=procs))
        log("aggregator: gRPC port %d, /metrics port %d" % (grpc_port, metrics_port))

        # 3. Agents. nodeA also serves its own /metrics (for promtool).
        agent_metrics_port = None
        for node, rel in NODES.items():
            base_argv = [args.agent, "--config=" + agent_config,
                         "--aggregator=127.0.0.1:%d" % grpc_port, "--node_name=" + node,
                         "--sysfs_root=" + os.path.join(args.fixtures, rel), "--log_level=info"]
            if node == "nodeA":
                _, agent_metrics_port = procs.start_server(
                    "agent-" + node,
                    lambda port: base_argv + ["--listen_metrics=127.0.0.1:%d" % port],
                    lambda port: XMIT_METRIC in http_get("http://127.0.0.1:%d/metrics" % port),
                    attempts=5)
            else:
                procs.start("agent-" + node, base_argv)

        def both_nodes_in_aggregator():
            text = http_get("http://127.0.0.1:%d/metrics" % metrics_port)
            up = {labels.get("node"): value
                  for name, labels, value in parse_text_exposition(text)
                  if name == "fabricmon_node_up"}
            return up.get("nodeA") == 1 and up.get("nodeB") == 1

        wait_for("both agents to stream to the aggregator", both_nodes_in_aggregator, timeout_s=30,
                 procs=procs)
        log("both agents connected")

        # 4. Prometheus.
        base = fmt.Prometheus(procs, prometheus, os.path.join(workdir, "prometheus"), JOB,
                              metrics_port).launch().wait_ready().url
        prom = fmt.PromApi(base)
        log("prometheus ready at", base)

        # 5. Queries.
        def target_up():
            result = prom.vector('up{job="%s"}' % JOB)
            return len(result) == 1 and result[0][1] == 1

        wait_for('up{job="%s"} == 1' % JOB, target_up, timeout_s=30, interval_s=0.5,
                 procs=procs)
        log('up{job="%s"} == 1' % JOB)

        def nodes_up():
            result = prom.vector("fabricmon_node_up")
            values = {labels.get("node"): value for labels, value in result}
            return values if values == {"nodeA": 1.0, "nodeB": 1.0} else None

        wait_for("fabricmon_node_up == 1 for nodeA and nodeB", nodes_up, timeout_s=20,
                 interval_s=0.5, procs=procs)
        log("fabricmon_node_up == 1 for nodeA and nodeB")

        result = prom.vector('%s{node="nodeA"}' % XMIT_METRIC)
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
            result = prom.vector("rate(fabricmon_aggregator_samples_total[5s])")
            return result[0][1] if len(result) == 1 and result[0][1] > 0 else None

        rate = wait_for("rate(fabricmon_aggregator_samples_total[5s]) > 0", samples_rate,
                        timeout_s=30, interval_s=0.5, procs=procs)
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
    except (Failure, OSError, ValueError, subprocess.SubprocessError) as e:
        log("FAIL:", e)
        procs.dump_logs(lines=40)
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
    with fmt.workdir("fabricmon-prom-", keep=args.keep, log=log) as workdir:
        return run(args, workdir)


if __name__ == "__main__":
    sys.exit(main())
