"""The README's main job: a simulated GPU cluster watched by fabricmon, with faults to find.

deploy/run-demo.sh builds fabricmon and runs `python3 -m fabric_sim demo --build-dir B`, which
  1. generates a 16-node InfiniBand fat tree (4 leaves x 2 spines) and starts ibsim + opensm when
     the agent's ib_fabric collector can sweep it (then node01's agent also reads every switch
     port by MADs); otherwise host counters only, and says so;
  2. starts the aggregator, one agent per node and a Prometheus server scraping the aggregator
     (temporary storage, loopback, free ports), and prints their addresses;
  3. plays a timeline on a healthy, busy training job: a flapping link (node07), an incast into
     node01 whose congestion spreads over both switch tiers, and a job on node11 that comes back
     from a restart on TCP instead of RDMA; then the congestion ends;
  4. prints `fabricmon diagnose --nodes=<all>` every few seconds whenever its content changes;
  5. interactive (stdin is a terminal): keeps everything running as the timeline left it
     (node11 still on TCP) until Ctrl-C; otherwise prints a summary and exits 0. Everything it started is stopped and its
     temporary directory removed in every case.
"""

import re
import sys
import time

import fabricmon_testing as fmt  # on sys.path through __init__.py

from . import runner
from . import scenarios

INTERVAL_MS = 1000
TICK_S = 0.25
DIAGNOSE_EVERY_S = 3.0

# What makes a diagnose report "changed": its findings and victims, not the rates and ages.
_NUMBERS = re.compile(r"(?<![\w/])[0-9][0-9.e+]*")


def _say(text=""):
    print(text, flush=True)


def _timeline(senders, target, fallback, flapper):
    """(t seconds, label, action(ctx)) on top of healthy traffic."""
    def flap_down(c):
        scenarios._down(c, flapper)

    def flap_up(c):
        scenarios._up(c, flapper)

    def incast_start(c):
        for node in senders:
            port = c.sim.port(node)
            port.tx_bps = 0.25e9
            port.wait_fraction = 0.8
        c.sim.port(target).rx_bps = 6.0e9
        if c.ibsim is not None:
            c.ibsim.start_incast(c.cluster, senders, target)

    def incast_end(c):
        for node in senders:
            port = c.sim.port(node)
            port.tx_bps = 10.0e9
            port.wait_fraction = 0.001
        c.sim.port(target).rx_bps = 10.0e9
        if c.ibsim is not None:
            c.ibsim.end_incast(c.cluster)

    def fallback_restart(c):
        port = c.sim.port(fallback)
        port.tx_bps = port.rx_bps = 0

    def fallback_sockets(c):
        eth0 = c.sim.node(fallback).netdevs["eth0"]
        eth0.tx_bps = eth0.rx_bps = 0.55e9

    return [
        (10, "%s: link down (flap 1 of 3)" % flapper, flap_down),
        (12, "%s: link up" % flapper, flap_up),
        (15, "%s: link down (flap 2 of 3)" % flapper, flap_down),
        (17, "%s: link up" % flapper, flap_up),
        (20, "%s: link down (flap 3 of 3)" % flapper, flap_down),
        (22, "%s: link up; the link stays quiet from now on" % flapper, flap_up),
        (28, "incast: %s write to %s (congestion spreads)" % (",".join(senders), target),
         incast_start),
        (38, "%s: the job restarts; RDMA traffic stops" % fallback, fallback_restart),
        (40, "%s: the job is back, on TCP sockets (eth0 ~1.1 GB/s, no RDMA)" % fallback,
         fallback_sockets),
        (44, "incast ends: traffic back to normal", incast_end),
    ]


def _remember(seen, f):
    """Keeps per finding its largest tree (victims) and its latest state."""
    old = seen.get(f.get("id"))
    if old is not None and len(old.get("victims", [])) > len(f.get("victims", [])):
        f = dict(f, victims=old["victims"], depth_hops=old.get("depth_hops", 0))
    seen[f.get("id")] = f


def main(args):
    runner.install_signal_handlers()
    bins = runner.Binaries(args.build_dir)
    missing = bins.missing()
    if missing:
        _say("fabricmon demo: missing build outputs: %s" % ", ".join(missing))
        return 1
    interactive = sys.stdin.isatty() if args.interactive is None else args.interactive
    t_start = time.time()
    harness = runner.Harness(bins, fabric="ib", nodes=args.nodes, interval_ms=INTERVAL_MS,
                             tick_ms=INTERVAL_MS, detectors="flap_window_s: 30 flap_quiet_s: 20",
                             want_ibsim=not args.no_ibsim, prometheus=not args.no_prometheus,
                             log=_say, state_file=args.state_file)
    try:
        _say("== simulated cluster: %s" % harness.cluster.describe())
        harness.start()
        _say("   mode: %s (%s)" % (harness.mode, harness.mode_note))
        harness.wait_ready(timeout=60)
        names = [n.name for n in harness.cluster.nodes]
        _say("== running (agents sample every %d ms; detectors tick every %d ms)"
             % (INTERVAL_MS, INTERVAL_MS))
        _say("   aggregator gRPC  %s    e.g. %s --aggregator=%s findings"
             % (harness.grpc, bins.cli, harness.grpc))
        _say("   /metrics         http://127.0.0.1:%d/metrics" % harness.metrics_port)
        if harness.prometheus_port:
            _say("   Prometheus       http://127.0.0.1:%d/graph?g0.expr=fabricmon_finding_active"
                 % harness.prometheus_port)
        _say("   files            %s (sysfs/procfs trees per node, fabric.net, links.txt)"
             % harness.root)

        ctx = runner.Context(harness)
        senders = ("node05", "node06", "node09", "node10", "node13", "node14")
        events = _timeline(senders, "node01", "node11", "node07")
        end_at = 70
        t0 = time.monotonic()
        next_tick = t0
        next_diag = t0 + 2
        last_shape = None
        announced = False
        seen = {}
        while True:
            now = time.monotonic()
            elapsed = now - t0
            if now >= next_tick:
                harness.sim.tick(time.time())
                next_tick = max(next_tick + TICK_S, now)
            while events and events[0][0] <= elapsed:
                at, label, action = events.pop(0)
                action(ctx)
                harness.sim.flush()
                _say("-- [t+%3ds] %s" % (elapsed, label))
            if now >= next_diag:
                next_diag = now + DIAGNOSE_EVERY_S
                rc, out, err = harness.cli("diagnose", "--nodes=" + ",".join(names))
                text = out if rc == 0 else "fabricmon diagnose failed: %s" % err.strip()
                shape = _NUMBERS.sub("#", "\n".join(
                    line for line in text.splitlines() if not line.startswith("         fabricmon_")))
                if shape != last_shape:
                    last_shape = shape
                    _say("-- [t+%3ds] fabricmon diagnose --nodes=node01,...,%s" %
                         (elapsed, names[-1]))
                    for line in text.rstrip().splitlines():
                        _say("   " + line)
                for f in harness.findings():
                    _remember(seen, f)
            dead = harness.dead_processes()
            if dead:
                _say("fabricmon demo: process(es) exited: %s (logs in %s/logs)"
                     % (dead, harness.root))
                return 1
            if elapsed >= end_at and not interactive:
                break
            if elapsed >= end_at and not announced:
                announced = True  # interactive: the timeline is over, traffic stays healthy
                _say("== the timeline is over; everything keeps running. Ctrl-C to stop.")
                _say("   /metrics http://127.0.0.1:%d/metrics%s" % (
                    harness.metrics_port,
                    ("   Prometheus http://127.0.0.1:%d/" % harness.prometheus_port)
                    if harness.prometheus_port else ""))
            time.sleep(0.05)

        for f in harness.findings(include_cleared=True):
            _remember(seen, f)
        _say("== summary (%.0f s since start)" % (time.time() - t_start))
        _say("   mode: %s" % harness.mode)
        _say("   findings raised during the demo (%d):" % len(seen))
        for f in sorted(seen.values(), key=lambda f: int(f.get("onset_unix_nanos", 0))):
            state = "cleared" if f.get("cleared_unix_nanos") not in (None, "0", 0) else "active"
            _say("     - %-8s %s" % (state, scenarios.finding_text(f)))
        if harness.prometheus_port:
            try:
                prom = fmt.PromApi("http://127.0.0.1:%d" % harness.prometheus_port)
                _say("   Prometheus (scraping the aggregator): fabricmon_finding_active has %d "
                     "series now; fabricmon_node_up: %d nodes" % (
                         len(prom.query("fabricmon_finding_active")),
                         len(prom.query("fabricmon_node_up == 1"))))
            except (OSError, ValueError, fmt.Failure) as e:
                _say("   Prometheus query failed: %s" % e)
        return 0
    except KeyboardInterrupt:
        _say("\n== stopping")
        return 0
    except RuntimeError as e:
        _say("fabricmon demo: %s" % e)
        return 1
    finally:
        harness.stop()
