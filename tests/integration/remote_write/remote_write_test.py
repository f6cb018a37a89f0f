#!/usr/bin/env python3
"""fabricmon-aggregator's remote_write against real and fake receivers (all on loopback, ports
found at run time, every child dying with this script).

--case=engines: a real VictoriaMetrics (Debian `victoria-metrics`) and a real Prometheus
  (`prometheus --web.enable-remote-write-receiver`) as two remote_write endpoints of one
  aggregator fed by two agents on captured sysfs trees. Once the agents are paused (SIGSTOP:
  their nodes stay up, so /metrics keeps showing the last sample stored of each series) and the
  queues are empty, checks through VictoriaMetrics' /api/v1/export and Prometheus'
  /api/v1/query (a range selector returns raw samples):
    * both engines hold exactly the agent series the aggregator's /metrics shows (same names,
      same labels as a scrape stores them, plus the external label, and no `shard` label),
      each ending with the value /metrics shows;
    * both hold the same samples at the same timestamps, and as many as the aggregator stored
      (fabricmon_aggregator_samples_total): nothing lost, nothing twice;
    * the aggregator's own families arrived (findings, fabricmon_node_up), with the `shard`
      label; the remote_write
      metrics say nothing failed or dropped, and `promtool check metrics` is silent on /metrics;
    * a batch replayed to VictoriaMetrics (the same request again, as an agent's replay after an
      aggregator restart produces) adds no sample (-dedup.minScrapeInterval).
  Skips (77) without victoria-metrics or prometheus.

--case=receiver: a fake receiver (Python HTTP server decoding snappy + protobuf itself) that
  answers 500 then 429 (the same batch must come again, and then be accepted), 400 twice (never
  sent again as it was: a request of several runs comes again only as its halves, a run refused
  alone is dropped and counted), and goes away for 3 s (retried until it is back, then delivered;
  meanwhile the agent must still hold the batches stored but not delivered, read from its own
  /metrics: the aggregator acknowledges a batch once remote_write is done with it, not on store).
  At the end every sample the aggregator stored reached the receiver once or was refused by a
  400, and the aggregator's counters say exactly that. Every request carries the remote-write
  headers, the bearer token from bearer_token_file and the configured extra header; the
  aggregator's own series carry the `shard` label and the agent's do not; the token never
  appears in the aggregator's log.

--case=tls: mutual TLS into a real Prometheus (`--web.config.file`: its certificate from a CA
  made here with openssl, client_auth_type RequireAndVerifyClientCert). One endpoint with a
  client certificate from that CA: every stored sample of the agent arrives. Another with a
  client certificate from a second CA: refused at the handshake, so counted as code="error" and
  retried, never sent nor failed; the aggregator keeps serving and stops in bounded time.
  Skips (77) without prometheus or openssl.

--case=refusal: both engines again, one request queue each; one of nodeA's series is given a
  sample 10 minutes ahead straight in Prometheus, so that each later sample of it is out of
  order there and Prometheus refuses (400) the whole request carrying it, as it refuses a batch
  an agent replays after a failover when the old shard had already delivered it. Once the agents
  pause and the queues drain: every sample VictoriaMetrics holds and Prometheus lacks is of
  nodeA (the refused requests were split until the refused run stood alone, so the other runs
  they carried, nodeB's batches among them, arrived), the series given the sample ahead is among
  them, Prometheus holds nothing VictoriaMetrics lacks, and what it lacks is exactly what the
  aggregator counts as failed. Without the split, nodeB's samples are lost with nodeA's (checked
  by hand). Skips (77) without the engines.
--case=failover: two aggregator shards, each remote-writing to a real VictoriaMetrics and a real
  Prometheus; four agents on generated sysfs trees (tests/sim/gen_sysfs_tree.py) given both,
  failover_after_ms and failback_after_ms 1 s. The shard primary for the most agents is
  SIGKILLed: its agents must stream to the other within 2 x failover_after_ms; it restarts on
  its port: they must return. Then, in both engines, each moved node's periodic series: one
  series whatever shard wrote it (no `shard` label on an agent's series, so a sample stored by
  both shards is one exact duplicate the engine keeps once), one sample per timestamp, and no
  step longer than 1.5 of the series' own cycle across the kill and the restart. Without the
  agent's replay the cycles of the failover time are missing (checked by hand with
  replay_buffer_bytes: 1: a 1.5 s step); with acks on store instead of on delivery, the cycle
  the killed shard had stored but not yet sent is missing (1 run in 2 failed that way).
  Skips (77) without the engines.

Usage:
  remote_write_test.py --case=engines|receiver|tls|failover|refusal --aggregator=BIN --agent=BIN
                       --fixtures=DIR
                       [--keep] [--verbose]
"""

import argparse
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "testing"))
sys.path.insert(0, HERE)
import fabricmon_testing as fmt  # noqa: E402
import prompb  # noqa: E402
from fabricmon_testing import Failure, SKIP, http_get, parse_text_exposition, wait_for  # noqa: E402

NODES = {"nodeA": "sysfs/gpud-h100/sys", "nodeB": "sysfs/procfs/sys"}
EXTERNAL = ("cluster", "rw-test")

VERBOSE = False


def log(*parts):
    print("[remote_write_test]", *parts, file=sys.stderr, flush=True)


def write(path, content):
    with open(path, "w") as f:
        f.write(content)
    return path


# The aggregator's shard name: its own series carry it as the `shard` label, the agents' series
# do not (a node's series is one series whatever shard wrote it).
SHARD = "rw-test-shard"

# The aggregator's own families (sent each detector tick); every other series is an agent's (a
# node's counters and gauges, their saturation flags).
AGGREGATOR_FAMILIES = ("fabricmon_aggregator_", "fabricmon_remote_write_", "fabricmon_node_",
                       "fabricmon_finding", "fabricmon_job", "fabricmon_detector_",
                       "fabricmon_topology_", "fabricmon_recording_")


def shard_of(name):
    """The `shard` label a remote series of family `name` must carry: SHARD on the aggregator's
    own, none on an agent's."""
    return SHARD if name.startswith(AGGREGATOR_FAMILIES) else None


def pop_shard(name, labels):
    """Removes the `shard` label and checks it (shard_of). A series with the wrong one keeps a
    `bad_shard` label, so the comparison with /metrics reports it (extra and missing) instead of
    this failing inside a poll."""
    shard = labels.pop("shard", None)
    if shard != shard_of(name):
        labels["bad_shard"] = repr(shard)


def key_of(name, labels):
    return (name, tuple(sorted(labels.items())))


def scrape(port):
    return parse_text_exposition(http_get("http://127.0.0.1:%d/metrics" % port))


def metric(samples, name, **labels):
    """Sum of the values of `name` whose labels include `labels`."""
    return sum(v for n, l, v in samples
               if n == name and all(l.get(k) == want for k, want in labels.items()))


def agent_series(samples):
    """The agents' series of a /metrics scrape as a scrape stores them: node-labelled families
    other than the aggregator's own (with the saturation flags beside them), without empty
    labels (an empty label is no label)."""
    out = {}
    for name, labels, value in samples:
        if "node" not in labels or name.startswith("fabricmon_node_"):
            continue
        out[key_of(name, {k: v for k, v in labels.items() if v != ""})] = value
    return out


class Daemons:
    """The aggregator (config given) and the agents, started on `procs`."""

    def __init__(self, args, workdir, procs):
        self.args, self.workdir, self.procs = args, workdir, procs
        self.agents = {}
        self.agent_metrics_ports = {}
        self.metrics_port = None
        self.grpc_port = None

    def start_aggregator(self, config):
        path = write(os.path.join(self.workdir, "aggregator.textproto"), config)
        port_file = os.path.join(self.workdir, "grpc.port")

        def argv(port):
            if os.path.exists(port_file):
                os.unlink(port_file)
            return [self.args.aggregator, "--config=" + path, "--grpc_listen=127.0.0.1:0",
                    "--port_file=" + port_file, "--metrics_listen=127.0.0.1:%d" % port,
                    "--shard=" + SHARD,
                    "--log_level=info"]

        _, self.metrics_port = self.procs.start_server(
            "aggregator", argv,
            lambda port: "fabricmon_aggregator_streams" in http_get(
                "http://127.0.0.1:%d/metrics" % port), attempts=5)
        self.grpc_port = int(wait_for("the aggregator's port file",
                                      lambda: open(port_file).read().strip(), timeout_s=10,
                                      procs=self.procs))

    def start_agents(self, nodes, with_metrics=False):
        """`with_metrics`: each agent serves its own /metrics (agent_metrics_ports[node])."""
        config = write(os.path.join(self.workdir, "agent.textproto"), fmt.HERMETIC_AGENT_CONFIG)
        for node in nodes:
            argv = [self.args.agent, "--config=" + config,
                    "--aggregator=127.0.0.1:%d" % self.grpc_port, "--node_name=" + node,
                    "--sysfs_root=" + os.path.join(self.args.fixtures, NODES[node]),
                    "--log_level=info"]
            if with_metrics:
                self.agents[node], self.agent_metrics_ports[node] = self.procs.start_server(
                    "agent-" + node, lambda port: argv + ["--listen_metrics=127.0.0.1:%d" % port],
                    lambda port: "fabricmon_agent" in http_get(
                        "http://127.0.0.1:%d/metrics" % port))
            else:
                self.agents[node] = self.procs.start("agent-" + node, argv)

        def all_up():
            up = {l.get("node"): v for n, l, v in scrape(self.metrics_port)
                  if n == "fabricmon_node_up"}
            return all(up.get(node) == 1 for node in nodes)

        wait_for("the agents to stream", all_up, timeout_s=30, procs=self.procs)

    def wait_batches(self, count):
        wait_for("%d stored batches" % count,
                 lambda: metric(scrape(self.metrics_port), "fabricmon_aggregator_batches_total")
                 >= count, timeout_s=30, interval_s=0.2, procs=self.procs)

    def stop_agents(self):
        for proc in self.agents.values():
            proc.send_signal(signal.SIGTERM)
        for proc in self.agents.values():
            proc.wait(timeout=10)
            self.procs.forget(proc)  # exited on purpose
        # Each stream's end is seen once its agent is gone; nothing is stored after that.
        wait_for("the streams to close",
                 lambda: metric(scrape(self.metrics_port), "fabricmon_aggregator_streams") == 0,
                 timeout_s=10, procs=self.procs)

    def pause_agents(self):
        """SIGSTOPs the agents: their streams stay open and their nodes up (for the stale
        interval), so /metrics keeps showing the last samples stored, and nothing new comes."""
        for proc in self.agents.values():
            proc.send_signal(signal.SIGSTOP)
        last = [None]

        def quiet():
            stored = metric(scrape(self.metrics_port), "fabricmon_aggregator_samples_total")
            settled = stored == last[0]
            last[0] = stored
            return settled

        wait_for("ingest to settle", quiet, timeout_s=10, interval_s=0.5, procs=self.procs)

    def wait_drained(self, endpoints):
        def drained():
            samples = scrape(self.metrics_port)
            return all(metric(samples, "fabricmon_remote_write_samples_pending", endpoint=e) == 0
                       for e in endpoints)
        wait_for("the remote_write queues to drain", drained, timeout_s=30, interval_s=0.1,
                 procs=self.procs)
        return scrape(self.metrics_port)


def post(url, body, headers=None):
    request = urllib.request.Request(url, data=body, headers=headers or {}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.status


# ------------------------------------------------------------------------------------------
# --case=engines


def same_value(engine, got, want):
    """Whether `got` (an engine's sample) is `want` (from /metrics, or the other engine).
    /metrics prints "%.16g" (as prometheus-cpp does), one digit short of float64's round trip,
    so a value from it is compared at that precision; Prometheus keeps float64 samples as they
    are; VictoriaMetrics stores a float as a decimal of about 12 significant digits
    (4.800000000000001e-06 comes back as 4.8e-06)."""
    if engine != "victoria-metrics":
        return got == want or float("%.16g" % got) == want
    return got == want or abs(got - want) <= 1e-12 * max(abs(got), abs(want))


def vm_export(port, selector, keep_shard=False):
    """{(name, labels)} → [(timestamp ms, value)] from VictoriaMetrics' /api/v1/export (the
    `shard` label checked (pop_shard) and removed unless `keep_shard`)."""
    http_get("http://127.0.0.1:%d/internal/force_flush" % port)
    query = urllib.parse.urlencode({"match[]": selector})
    out = {}
    for line in http_get("http://127.0.0.1:%d/api/v1/export?%s" % (port, query), 30).splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        labels = dict(row["metric"])
        name = labels.pop("__name__")
        if not keep_shard:
            pop_shard(name, labels)
        out[key_of(name, labels)] = sorted(zip(row["timestamps"], row["values"]))
    return out


def prom_samples(base, selector, keep_shard=False):
    """{(name, labels)} → [(timestamp ms, value)]: the raw samples of the last 10 minutes."""
    result = fmt.PromApi(base).query("%s[10m]" % selector)
    out = {}
    for row in result:
        labels = dict(row["metric"])
        name = labels.pop("__name__")
        if not keep_shard:
            pop_shard(name, labels)
        out[key_of(name, labels)] = [(int(round(float(t) * 1000)), float(v))
                                     for t, v in row["values"]]
    return out


def start_engines(workdir, procs, vm_binary, prometheus):
    """A VictoriaMetrics (deduplicating) and a Prometheus remote-write receiver on loopback.
    Returns their ports."""
    vm_dir = os.path.join(workdir, "vm")
    _, vm_port = procs.start_server(
        "victoria-metrics",
        lambda port: [vm_binary, "-storageDataPath=" + vm_dir,
                      "-httpListenAddr=127.0.0.1:%d" % port, "-retentionPeriod=1d",
                      "-loggerLevel=ERROR", "-search.latencyOffset=0s",
                      # Identical samples (a replayed batch) are stored once.
                      "-dedup.minScrapeInterval=1ms"],
        lambda port: http_get("http://127.0.0.1:%d/health" % port).strip() == "OK")
    prom_dir = os.path.join(workdir, "prometheus")
    os.makedirs(prom_dir)
    write(os.path.join(prom_dir, "prometheus.yml"), "global:\n  scrape_interval: 15s\n")
    _, prom_port = procs.start_server(
        "prometheus",
        lambda port: fmt.prometheus_argv(prometheus, prom_dir, port) +
        ["--web.enable-remote-write-receiver"],
        fmt.prometheus_ready)
    log("victoria-metrics on port %d, prometheus on port %d" % (vm_port, prom_port))
    return vm_port, prom_port


def start_engines_or_skip(workdir, procs):
    """start_engines' ports, or None (logged) when the Debian packages are missing."""
    vm_binary = shutil.which("victoria-metrics")
    prometheus = shutil.which("prometheus")
    if vm_binary is None or prometheus is None:
        log("SKIP: victoria-metrics and prometheus (Debian packages) are needed")
        return None
    return start_engines(workdir, procs, vm_binary, prometheus)


def engines_config(vm_port, prom_port, queue, external=True):
    """An aggregator config (plaintext) remote-writing to both engines as endpoints "vm" and
    "prometheus", each with the `queue` block and, if `external`, the EXTERNAL label."""
    labels = 'external_labels { key: "%s" value: "%s" } ' % EXTERNAL if external else ""
    config = "tls { insecure_plaintext: true }\n"
    for name, port in (("vm", vm_port), ("prometheus", prom_port)):
        config += ('remote_write { url: "http://127.0.0.1:%d/api/v1/write" name: "%s" %s%s }\n' %
                   (port, name, labels, queue))
    return config


def run_engines(args, workdir, procs):
    ports = start_engines_or_skip(workdir, procs)
    if ports is None:
        return SKIP
    vm_port, prom_port = ports
    daemons = Daemons(args, workdir, procs)
    daemons.start_aggregator(engines_config(
        vm_port, prom_port,
        "queue { shards: 2 batch_send_deadline_ms: 100 min_backoff_ms: 20 max_backoff_ms: 500 }"))
    daemons.start_agents(NODES)
    daemons.wait_batches(16)
    daemons.pause_agents()
    final = daemons.wait_drained(["vm", "prometheus"])
    expected = agent_series(final)  # the latest sample stored of each series
    stored = metric(final, "fabricmon_aggregator_samples_total")
    log("%d agent series on /metrics, %d samples stored" % (len(expected), stored))

    # The agents' series; fabricmon_node_* (node health, also node-labelled) come each tick.
    selector = '{node=~"%s",__name__!~"fabricmon_node_.*"}' % "|".join(NODES)

    # An engine makes what it accepted searchable within a moment (VictoriaMetrics buffers rows
    # and registers new series in the background): wait until it holds as many samples as were
    # stored, or time out and check what it has.
    def settled(read):
        last = [None]

        def complete():
            last[0] = read()
            return sum(len(s) for (name, _), s in last[0].items()
                       if name != "fabricmon_series_saturated") >= stored
        try:
            wait_for("the engine to hold %d samples" % stored, complete, timeout_s=15,
                     interval_s=0.5, procs=procs)
        except Failure:
            pass  # the comparison below says what differs
        return last[0]

    engines = {"victoria-metrics": settled(lambda: vm_export(vm_port, selector)),
               "prometheus": settled(lambda: prom_samples("http://127.0.0.1:%d" % prom_port,
                                                          selector))}
    want_keys = {key_of(name, dict(labels, **{EXTERNAL[0]: EXTERNAL[1]}))
                 for name, labels in ((n, dict(l)) for n, l in expected)}
    for engine, series in engines.items():
        if set(series) != want_keys:
            missing = sorted(want_keys - set(series))[:5]
            extra = sorted(set(series) - want_keys)[:5]
            raise Failure("%s: series differ from /metrics; missing %s; extra %s" %
                          (engine, missing, extra))
        # Stored samples, the saturation flags (sent beside each pinned sample) apart.
        total = sum(len(s) for (name, _), s in series.items()
                    if name != "fabricmon_series_saturated")
        if total != stored:
            raise Failure("%s holds %d samples of the agents' series, the aggregator stored %d" %
                          (engine, total, stored))
        for (name, labels), samples in series.items():
            want = expected[key_of(name, {k: v for k, v in labels if k != EXTERNAL[0]})]
            if not same_value(engine, samples[-1][1], want):
                raise Failure("%s: %s%s ends with %r at %d, /metrics says %r" % (
                    engine, name, labels, samples[-1][1], samples[-1][0], want))
        log("%s: %d series, %d samples, each ending with /metrics' value" %
            (engine, len(series), total))
    vm, prom = engines["victoria-metrics"], engines["prometheus"]
    for key in vm:
        if ([t for t, _ in vm[key]] != [t for t, _ in prom[key]] or
                not all(same_value("victoria-metrics", a, b)
                        for (_, a), (_, b) in zip(vm[key], prom[key]))):
            raise Failure("%s: VictoriaMetrics %s, Prometheus %s" % (key, vm[key][:4],
                                                                    prom[key][:4]))
    log("both engines hold the same samples at the same timestamps")

    # The aggregator's own families, each detector tick: findings and node health.
    own = vm_export(vm_port, '{__name__=~"fabricmon_(finding|node_).*"}')
    wrong = [key for key in own if "bad_shard" in dict(key[1])]
    if wrong:
        raise Failure("the aggregator's own series without its shard label: %s" % wrong[:5])
    for family, node in (("fabricmon_findings_total", None), ("fabricmon_node_up", "nodeA"),
                         ("fabricmon_node_up", "nodeB")):
        if not any(name == family and (EXTERNAL[0], EXTERNAL[1]) in labels and
                   (node is None or ("node", node) in labels) for name, labels in own):
            raise Failure("no %s%s series in VictoriaMetrics: %s" % (
                family, "{node=%s}" % node if node else "", sorted(own)[:5]))
    for endpoint in ("vm", "prometheus"):
        for name in ("fabricmon_remote_write_samples_failed_total",
                     "fabricmon_remote_write_samples_dropped_total"):
            if metric(final, name, endpoint=endpoint) != 0:
                raise Failure("%s{endpoint=%s} is not 0" % (name, endpoint))
        if metric(final, "fabricmon_remote_write_samples_sent_total", endpoint=endpoint) < stored:
            raise Failure("%s: fewer samples sent than stored" % endpoint)
        # Each agent's collectors (ib_sysfs and the agent's own) take turns on its stream, each
        # with its layout: from a layout's second batch on, its labels are not compressed again.
        templated = metric(final, "fabricmon_remote_write_samples_templated_total",
                           endpoint=endpoint)
        log("%s: %d of %d samples queued by a layout's template" % (endpoint, templated, stored))

    # The remote_write families keep /metrics clean for promtool.
    promtool = shutil.which("promtool")
    if promtool is not None:
        text = http_get("http://127.0.0.1:%d/metrics" % daemons.metrics_port)
        result = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                                capture_output=True, timeout=30)
        output = (result.stdout + result.stderr).decode(errors="replace").strip()
        if result.returncode != 0 or output:
            raise Failure("promtool check metrics: exit %d\n%s" % (result.returncode, output))
        log("promtool check metrics: clean")

    # A replay: the same samples again, as the agent's replay after an aggregator restart would
    # produce (same series, same timestamps, same values). VictoriaMetrics keeps one of each.
    replay_key = sorted(vm)[0]
    name, labels = replay_key
    body = encode_request([([("__name__", name)] + sorted(labels), vm[replay_key])])
    status = post("http://127.0.0.1:%d/api/v1/write" % vm_port, body,
                  {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf",
                   "X-Prometheus-Remote-Write-Version": "0.1.0"})
    if status // 100 != 2:
        raise Failure("VictoriaMetrics answered the replay with %d" % status)
    again = vm_export(vm_port, selector)[replay_key]
    if again != vm[replay_key]:
        raise Failure("after a replay VictoriaMetrics holds %d samples of %s, not %d" %
                      (len(again), replay_key, len(vm[replay_key])))
    log("a replayed batch adds nothing to VictoriaMetrics (%d samples before and after)" %
        len(again))
    return 0


# ------------------------------------------------------------------------------------------
# --case=refusal


def run_refusal(args, workdir, procs):
    ports = start_engines_or_skip(workdir, procs)
    if ports is None:
        return SKIP
    vm_port, prom_port = ports
    prom = "http://127.0.0.1:%d" % prom_port
    daemons = Daemons(args, workdir, procs)
    # One queue per endpoint and a batch deadline that gathers runs: a request holds several
    # (the agents' batches of both nodes and the aggregator's own series), yet the queues are
    # empty between ticks once the agents pause.
    daemons.start_aggregator(engines_config(
        vm_port, prom_port,
        "queue { shards: 1 batch_send_deadline_ms: 250 min_backoff_ms: 20 max_backoff_ms: 500 }"))
    daemons.start_agents(NODES)
    # The agents' series (fabricmon_node_* come each detector tick, agents paused or not).
    selector = '{node=~"%s",__name__!~"fabricmon_node_.*"}' % "|".join(NODES)
    agents_only = '{node="nodeA",__name__!~"fabricmon_node_.*|fabricmon_series_saturated"}'

    # One of nodeA's series gets a sample 10 minutes ahead, written straight into Prometheus:
    # from then on each of its samples is out of order there, and Prometheus refuses the whole
    # request that carries one, as it does a batch an agent replays after a failover when the
    # old shard had already delivered it.
    held = wait_for("nodeA's series in Prometheus",
                    lambda: prom_samples(prom, agents_only, keep_shard=True), timeout_s=30,
                    interval_s=0.5, procs=procs)
    victim_name, victim_labels = sorted(held)[0]
    ahead_ms = int(time.time() * 1000) + 600000
    body = encode_request([([("__name__", victim_name)] + sorted(victim_labels), [(ahead_ms, 0.0)])])
    status = post(prom + "/api/v1/write", body,
                  {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf",
                   "X-Prometheus-Remote-Write-Version": "0.1.0"})
    if status // 100 != 2:
        raise Failure("Prometheus answered the sample ahead with %d" % status)
    log("%s%s: a sample 10 minutes ahead written into Prometheus" % (victim_name,
                                                                     dict(victim_labels)))
    wait_for("Prometheus refusing requests",
             lambda: metric(scrape(daemons.metrics_port), "fabricmon_remote_write_samples_failed_total",
                            endpoint="prometheus") > 0, timeout_s=20, procs=procs)
    daemons.wait_batches(metric(scrape(daemons.metrics_port),
                                "fabricmon_aggregator_batches_total") + 8)
    daemons.pause_agents()
    final = daemons.wait_drained(["vm", "prometheus"])
    failed = metric(final, "fabricmon_remote_write_samples_failed_total", endpoint="prometheus")
    refusals = metric(final, "fabricmon_remote_write_requests_total", endpoint="prometheus",
                      code="400")
    if metric(final, "fabricmon_remote_write_samples_failed_total", endpoint="vm") != 0:
        raise Failure("VictoriaMetrics refused samples")

    # VictoriaMetrics took every request: what Prometheus lacks of it is what it refused. Read
    # until two reads agree (VictoriaMetrics registers new series in the background).
    last = [None]

    def vm_settled():
        now = vm_export(vm_port, selector)
        settled = now == last[0]
        last[0] = now
        return settled
    wait_for("VictoriaMetrics to settle", vm_settled, timeout_s=15, interval_s=1, procs=procs)
    vm = last[0]
    held = prom_samples(prom, selector)
    missing = {}
    for key, samples in vm.items():
        have = {t for t, _ in held.get(key, [])}
        extra = have - {t for t, _ in samples}
        if extra:
            raise Failure("Prometheus holds samples of %s VictoriaMetrics lacks: %s" %
                          (key, sorted(extra)[:3]))
        lost = [t for t, _ in samples if t not in have]
        if lost:
            missing[key] = lost
    lost_total = sum(len(t) for t in missing.values())
    others = sorted(key for key in missing if ("node", "nodeA") not in key[1])
    log("Prometheus answered 400 to %d requests and lacks %d samples of %d series (%d of them "
        "not nodeA's); %d samples counted failed" % (refusals, lost_total, len(missing),
                                                     len(others), failed))
    if others:
        raise Failure("a refusal cost samples of runs it did not concern: %s lacks %s" %
                      (others[0], missing[others[0]][:5]))
    if (victim_name, victim_labels) not in missing:
        raise Failure("no sample of %s was refused: the test's premise failed" % victim_name)
    if lost_total != failed:
        raise Failure("Prometheus lacks %d samples, the aggregator counts %d failed" %
                      (lost_total, failed))
    return 0


# ------------------------------------------------------------------------------------------
# --case=failover

FAILOVER_AFTER_MS = 1000
FAILBACK_AFTER_MS = 1000
CYCLE_MS = 500  # the agents' ib_sysfs interval
SIM_NODES = ["sim-%d" % i for i in range(4)]


class Aggregator:
    """One aggregator shard on a gRPC port chosen once, so that it restarts where the agents
    look for it; remote_write to both engines."""

    def __init__(self, args, workdir, procs, name, config):
        self.args, self.procs, self.name = args, procs, name
        self.config = write(os.path.join(workdir, name + ".textproto"), config)
        self.grpc_port = fmt.free_port()
        self.proc = None
        self.metrics_port = None
        self.starts = 0

    def start(self):
        self.starts += 1
        self.proc, self.metrics_port = self.procs.start_server(
            "%s-%d" % (self.name, self.starts),
            lambda port: [self.args.aggregator, "--config=" + self.config,
                          "--grpc_listen=127.0.0.1:%d" % self.grpc_port,
                          "--metrics_listen=127.0.0.1:%d" % port, "--shard=" + self.name,
                          "--log_level=info"],
            lambda port: "fabricmon_aggregator_streams" in http_get(
                "http://127.0.0.1:%d/metrics" % port), attempts=5)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.procs.forget(self.proc)

    def nodes_up(self):
        return {l.get("node") for n, l, v in scrape(self.metrics_port)
                if n == "fabricmon_node_up" and v == 1}


def agent_timelines(engine, series_by_key):
    """{(name, labels)} → [(timestamp ms, shard)] of the agents' own series (the aggregators'
    families apart, the saturation flags go beside stored samples, and an agent reports
    fabricmon_agent_aggregator_info only for the aggregator it streams to: each of those series
    pauses while the node is elsewhere). Each must be one series whatever shard wrote it: one
    with a `shard` label, or stored as several series, fails."""
    out = {}
    shards = {}
    for (name, labels), samples in series_by_key.items():
        if shard_of(name) is not None or name in ("fabricmon_series_saturated",
                                                  "fabricmon_agent_aggregator_info"):
            continue
        labels = dict(labels)
        shard = labels.pop("shard", None)
        key = key_of(name, labels)
        shards.setdefault(key, []).append(shard)
        out.setdefault(key, []).extend((t, shard) for t, _ in samples)
    for (name, labels), found in shards.items():
        if found != [None]:
            raise Failure("%s: %s%s is stored as %d series, shard labels %s: a node's series "
                          "must be one series whatever shard wrote it" %
                          (engine, name, dict(labels), len(found), found))
    return {key: sorted(points) for key, points in out.items()}


def check_no_gap_no_duplicate(engine, timelines, moved, kill_ms, restart_ms):
    """Each moved node's series: one sample per timestamp over all shards (a sample stored by
    two shards would be counted twice by any query across them), and no step between samples
    longer than 1.5 of the series' own cycle (its collector's interval: the median step before
    the kill) from its first sample to its last: a cycle missing across a move shows as a step of
    two cycles or more; without the replay, the failover time's worth of cycles would be missing.
    The series must span the kill and the restart."""
    checked = 0
    for (name, labels), points in timelines.items():
        node = dict(labels).get("node")
        if node not in moved:
            continue
        stamps = [t for t, _ in points]
        if len(set(stamps)) != len(stamps):
            twice = sorted({(t, s) for t, s in points if stamps.count(t) > 1})[:6]
            raise Failure("%s: %s%s holds a timestamp twice (timestamp, shard): %s" %
                          (engine, name, dict(labels), twice))
        before = [b - a for a, b in zip(stamps, stamps[1:]) if b < kill_ms]
        if len(before) < 2:
            continue  # not periodic (sent once, or on a change): no cadence to check against
        if stamps[-1] < restart_ms + 2 * CYCLE_MS:
            raise Failure("%s: %s%s ends before the restart (at %d, restart at %d)" %
                          (engine, name, dict(labels), stamps[-1], restart_ms))
        cycle = sorted(before)[len(before) // 2]
        steps = [(b - a, a) for a, b in zip(stamps, stamps[1:])]
        longest, at = max(steps)
        if longest > 1.5 * cycle:
            raise Failure("%s: %s%s misses samples: %d ms without one after %d (its cycle %d "
                          "ms; kill at %d, restart at %d; (timestamp, shard) around it: %s)" % (
                              engine, name, dict(labels), longest, at, cycle, kill_ms,
                              restart_ms,
                              [p for p in points if at - 2 * cycle <= p[0] <= at + longest]))
        checked += 1
    if checked < 10 * len(moved):
        raise Failure("%s holds %d periodic series of the moved nodes %s, fewer than expected" %
                      (engine, checked, sorted(moved)))
    return checked


def run_failover(args, workdir, procs):
    sys.path.insert(0, os.path.join(HERE, "..", "..", "sim"))
    import gen_sysfs_tree  # noqa: E402

    ports = start_engines_or_skip(workdir, procs)
    if ports is None:
        return SKIP
    vm_port, prom_port = ports
    config = engines_config(
        vm_port, prom_port,
        "queue { shards: 2 batch_send_deadline_ms: 100 min_backoff_ms: 20 max_backoff_ms: 500 }",
        external=False)
    shards = [Aggregator(args, workdir, procs, "shard-%s" % n, config) for n in "ab"]
    for shard in shards:
        shard.start()
    agent_config = write(os.path.join(workdir, "agent.textproto"), fmt.HERMETIC_AGENT_CONFIG.replace(
        "ib_sysfs { interval_ms: 1000 }", "ib_sysfs { interval_ms: %d }" % CYCLE_MS) +
        "failover_after_ms: %d\nfailback_after_ms: %d\n" % (FAILOVER_AFTER_MS, FAILBACK_AFTER_MS))
    aggregators = ",".join("127.0.0.1:%d" % s.grpc_port for s in shards)
    agents = []
    for i, node in enumerate(SIM_NODES):
        tree = os.path.join(workdir, "trees", node)
        gen_sysfs_tree.generate(tree, profile="minimal", seed=i)
        agents.append(procs.start("agent-" + node, [
            args.agent, "--config=" + agent_config, "--aggregator=" + aggregators,
            "--node_name=" + node, "--sysfs_root=" + tree, "--log_level=info"]))

    def placement():
        return {s.name: s.nodes_up() for s in shards}

    wait_for("every agent to stream to a shard",
             lambda: set().union(*placement().values()) >= set(SIM_NODES), timeout_s=30,
             procs=procs)
    where = placement()
    log("placement: %s" % {k: sorted(v) for k, v in where.items()})
    victim = max(shards, key=lambda s: len(where[s.name]))  # primary for some agents
    survivor = next(s for s in shards if s is not victim)
    moved = set(where[victim.name])
    time.sleep(3)  # a few cycles of every collector stored and remote-written before the kill

    kill_ms = int(time.time() * 1000)
    killed_at = time.monotonic()
    victim.kill()
    wait_for("the victim's nodes on %s" % survivor.name,
             lambda: moved <= survivor.nodes_up(), timeout_s=10, interval_s=0.05, procs=procs)
    failover_s = time.monotonic() - killed_at
    log("SIGKILL %s: %s on %s after %.2f s" % (victim.name, sorted(moved), survivor.name,
                                               failover_s))
    if failover_s > 2 * FAILOVER_AFTER_MS / 1000:
        raise Failure("failover took %.2f s, more than 2 x failover_after_ms" % failover_s)
    time.sleep(4 * CYCLE_MS / 1000)

    restart_ms = int(time.time() * 1000)
    restarted_at = time.monotonic()
    victim.start()
    wait_for("the nodes back on %s" % victim.name, lambda: moved <= victim.nodes_up(),
             timeout_s=20, interval_s=0.05, procs=procs)
    failback_s = time.monotonic() - restarted_at
    log("%s restarted: %s back after %.2f s" % (victim.name, sorted(moved), failback_s))
    if failback_s > 2 * FAILBACK_AFTER_MS / 1000 + 2:  # + the restart itself
        raise Failure("failback took %.2f s" % failback_s)
    time.sleep(4 * CYCLE_MS / 1000)

    for agent in agents:
        agent.send_signal(signal.SIGSTOP)  # nothing new; what was stored drains
    time.sleep(CYCLE_MS / 1000)
    for shard in shards:
        wait_for("%s's remote_write queues to drain" % shard.name,
                 lambda: all(metric(scrape(shard.metrics_port),
                                    "fabricmon_remote_write_samples_pending", endpoint=e) == 0
                             for e in ("vm", "prometheus")),
                 timeout_s=30, interval_s=0.1, procs=procs)

    selector = '{node=~"%s"}' % "|".join(sorted(moved))
    time.sleep(1)  # what the engines accepted becomes searchable
    for engine, read in (
            ("victoria-metrics", lambda: vm_export(vm_port, selector, keep_shard=True)),
            ("prometheus", lambda: prom_samples("http://127.0.0.1:%d" % prom_port, selector,
                                                keep_shard=True))):
        checked = check_no_gap_no_duplicate(engine, agent_timelines(engine, read()), moved,
                                            kill_ms, restart_ms)
        log("%s: %d series of the moved nodes, one series each, no gap and no duplicate across "
            "the kill and the restart" % (engine, checked))
    for shard in shards:
        final = scrape(shard.metrics_port)
        for endpoint in ("vm", "prometheus"):
            for name in ("fabricmon_remote_write_samples_failed_total",
                         "fabricmon_remote_write_samples_dropped_total"):
                if metric(final, name, endpoint=endpoint) != 0:
                    raise Failure("%s: %s{endpoint=%s} is not 0" % (shard.name, name, endpoint))
    return 0


# ------------------------------------------------------------------------------------------
# --case=tls


def openssl(workdir, *argv):
    result = subprocess.run(["openssl"] + list(argv), cwd=workdir, capture_output=True,
                            timeout=60)
    if result.returncode != 0:
        raise Failure("openssl %s: %s" % (" ".join(argv), result.stderr.decode(errors="replace")))


def make_pki(workdir):
    """Two CAs; a server certificate for 127.0.0.1 and a client certificate from the first, a
    client certificate from the second (which the receiver must refuse)."""
    pki = os.path.join(workdir, "pki")
    os.makedirs(pki)
    for ca in ("ca", "other-ca"):
        openssl(pki, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", ca + ".key", "-out", ca + ".crt", "-days", "1",
                "-subj", "/CN=fabricmon test " + ca)
    write(os.path.join(pki, "server.ext"), "subjectAltName=IP:127.0.0.1\n")
    write(os.path.join(pki, "client.ext"), "extendedKeyUsage=clientAuth\n")
    for name, ca, ext in (("server", "ca", "server.ext"), ("client", "ca", "client.ext"),
                          ("stranger", "other-ca", "client.ext")):
        openssl(pki, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + name)
        openssl(pki, "x509", "-req", "-in", name + ".csr", "-CA", ca + ".crt", "-CAkey",
                ca + ".key", "-CAcreateserial", "-out", name + ".crt", "-days", "1",
                "-extfile", ext)
    return pki


def run_tls(args, workdir, procs):
    import ssl

    prometheus = shutil.which("prometheus")
    if prometheus is None or shutil.which("openssl") is None:
        log("SKIP: prometheus and openssl (Debian packages) are needed")
        return SKIP
    pki = make_pki(workdir)
    path = lambda name: os.path.join(pki, name)  # noqa: E731
    prom_dir = os.path.join(workdir, "prometheus")
    os.makedirs(prom_dir)
    write(os.path.join(prom_dir, "prometheus.yml"), "global:\n  scrape_interval: 15s\n")
    web = write(os.path.join(prom_dir, "web.yml"),
                "tls_server_config:\n  cert_file: %s\n  key_file: %s\n"
                "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: %s\n" %
                (path("server.crt"), path("server.key"), path("ca.crt")))
    # The test reads Prometheus as the aggregator writes to it: verifying it, with the client
    # certificate.
    context = ssl.create_default_context(cafile=path("ca.crt"))
    context.load_cert_chain(path("client.crt"), path("client.key"))

    def https_get(url):
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            return response.read().decode("utf-8")

    def ready(port):
        try:
            return "Ready" in https_get("https://127.0.0.1:%d/-/ready" % port)
        except (urllib.error.URLError, OSError):
            return False

    _, prom_port = procs.start_server(
        "prometheus", lambda port: fmt.prometheus_argv(prometheus, prom_dir, port) +
        ["--web.enable-remote-write-receiver", "--web.config.file=" + web], ready)
    # Without a client certificate the receiver refuses (the test's own check of the setup).
    bare = ssl.create_default_context(cafile=path("ca.crt"))
    try:
        urllib.request.urlopen("https://127.0.0.1:%d/-/ready" % prom_port, timeout=5,
                               context=bare).read()
        raise Failure("Prometheus answered a client without a certificate")
    except (urllib.error.URLError, ssl.SSLError, ConnectionError):
        pass

    url = "https://127.0.0.1:%d/api/v1/write" % prom_port
    queue = ("queue { shards: 1 batch_send_deadline_ms: 100 min_backoff_ms: 20 max_backoff_ms: 300 "
             "flush_deadline_ms: 500 }")
    config = "tls { insecure_plaintext: true }\n"
    for name, client in (("mtls", "client"), ("stranger", "stranger")):
        config += ('remote_write { url: "%s" name: "%s" '
                   'tls { ca_file: "%s" cert_file: "%s" key_file: "%s" } %s }\n' %
                   (url, name, path("ca.crt"), path(client + ".crt"), path(client + ".key"),
                    queue))
    daemons = Daemons(args, workdir, procs)
    daemons.start_aggregator(config)
    daemons.start_agents(["nodeA"])
    daemons.wait_batches(6)

    def delivered():
        samples = scrape(daemons.metrics_port)
        return (metric(samples, "fabricmon_remote_write_samples_sent_total", endpoint="mtls") > 0
                and metric(samples, "fabricmon_remote_write_requests_total", endpoint="stranger",
                           code="error") >= 3)
    wait_for("samples over mutual TLS, refusals of the stranger", delivered, timeout_s=20,
             interval_s=0.2, procs=procs)
    daemons.pause_agents()
    final = daemons.wait_drained(["mtls"])
    stored = metric(final, "fabricmon_aggregator_samples_total")

    def arrived():
        query = urllib.parse.urlencode({"query": '{node="nodeA",__name__!~"fabricmon_node_.*|'
                                                 'fabricmon_series_saturated"}[10m]'})
        body = json.loads(https_get("https://127.0.0.1:%d/api/v1/query?%s" % (prom_port, query)))
        return sum(len(row["values"]) for row in body["data"]["result"])
    last = [0]

    def complete():
        last[0] = arrived()
        return last[0] >= stored
    try:
        wait_for("Prometheus to hold %d samples" % stored, complete, timeout_s=15,
                 interval_s=0.5, procs=procs)
    except Failure:
        pass
    if last[0] != stored:
        raise Failure("Prometheus holds %d of nodeA's samples over mutual TLS, the aggregator "
                      "stored %d" % (last[0], stored))
    log("mutual TLS: Prometheus holds all %d samples stored" % stored)

    # The stranger's certificate is refused at the handshake: no response, so counted as
    # `error` and retried (with backoff), never sent, never failed as a 4xx would be; the
    # aggregator stays up, and stops in bounded time (its queue dropped at the flush deadline).
    for name, want in (("fabricmon_remote_write_samples_sent_total", 0),
                       ("fabricmon_remote_write_samples_failed_total", 0)):
        if metric(final, name, endpoint="stranger") != want:
            raise Failure("%s{endpoint=stranger} = %s" % (name, metric(final, name,
                                                                      endpoint="stranger")))
    codes = {l["code"] for n, l, v in final
             if n == "fabricmon_remote_write_requests_total" and l.get("endpoint") == "stranger"}
    if codes != {"error"}:
        raise Failure("the stranger's requests got codes %s, not only 'error'" % sorted(codes))
    if metric(final, "fabricmon_remote_write_retries_total", endpoint="stranger") < 2:
        raise Failure("the stranger's refused requests were not retried")
    if metric(final, "fabricmon_remote_write_samples_pending", endpoint="stranger") == 0:
        raise Failure("nothing pending for the stranger")
    log("a client certificate from another CA: %d requests refused (code error), retried, "
        "nothing sent" % metric(final, "fabricmon_remote_write_requests_total",
                                endpoint="stranger"))
    aggregator = next(proc for name, proc, _ in procs.children if name == "aggregator")
    stopping = time.monotonic()
    aggregator.send_signal(signal.SIGTERM)
    try:
        aggregator.wait(timeout=15)
    except subprocess.TimeoutExpired:
        raise Failure("the aggregator did not stop within 15 s of SIGTERM (remote_write hang?)")
    if aggregator.returncode != 0:
        raise Failure("the aggregator exited %d" % aggregator.returncode)
    log("the aggregator stopped in %.1f s" % (time.monotonic() - stopping))
    procs.forget(aggregator)
    return 0


def encode_request(series):
    """WriteRequest of [(labels, [(ts ms, value)])], snappy-compressed as all-literal blocks."""
    import struct

    def varint(n):
        out = bytearray()
        while True:
            b = n & 0x7F
            n >>= 7
            if n:
                out.append(b | 0x80)
            else:
                out.append(b)
                return bytes(out)

    def field(number, payload):
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    raw = b""
    for labels, samples in series:
        ts = b""
        for name, value in labels:
            ts += field(1, field(1, name.encode()) + field(2, value.encode()))
        for t, v in samples:
            ts += field(2, b"\x09" + struct.pack("<d", v) + b"\x10" + varint(t))
        raw += field(1, ts)
    compressed = varint(len(raw))
    for start in range(0, len(raw), 60):  # literals of ≤ 60 bytes: a one-byte tag each
        chunk = raw[start:start + 60]
        compressed += bytes([(len(chunk) - 1) << 2]) + chunk
    if prompb.snappy_decompress(compressed) != raw:
        raise Failure("the test's own snappy encoder is broken")
    return compressed


# ------------------------------------------------------------------------------------------
# --case=receiver


class FakeReceiver:
    """A remote-write receiver on 127.0.0.1:`port` answering the codes in `script` in turn (200
    once it is used up) and recording (code, body, series) of every request."""

    def __init__(self):
        self.lock = threading.Lock()
        self.script = []
        self.required = {}  # headers every request must carry (else 415)
        self.requests = []
        self.server = None
        self.thread = None
        self.port = None

    def start(self, port=0):
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers_ok = (self.headers.get("Content-Encoding") == "snappy" and
                              self.headers.get("Content-Type") == "application/x-protobuf" and
                              self.headers.get("X-Prometheus-Remote-Write-Version") == "0.1.0" and
                              all(self.headers.get(k) == v
                                  for k, v in receiver.required.items()))
                try:
                    series = prompb.parse_write_request(body)
                except ValueError as e:
                    series, headers_ok = None, False
                    log("undecodable body:", e)
                with receiver.lock:
                    code = receiver.script.pop(0) if receiver.script else 200
                    if not headers_ok:
                        code = 415
                    receiver.requests.append((code, body, series))
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_):
                pass

        class Server(http.server.HTTPServer):
            allow_reuse_address = True

        self.server = Server(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def snapshot(self):
        with self.lock:
            return list(self.requests)


def count(series):
    return sum(len(samples) for _, samples in series)


def run_receiver(args, workdir, procs):
    token = "s3cr3t-%d" % os.getpid()
    token_file = write(os.path.join(workdir, "token"), token + "\n")
    receiver = FakeReceiver().start()
    receiver.script = [500, 429]
    receiver.required = {"Authorization": "Bearer " + token, "X-Scope-OrgID": "fabric"}
    config = ("tls { insecure_plaintext: true }\n"
              'remote_write { url: "http://127.0.0.1:%d/api/v1/write" name: "fake" '
              'bearer_token_file: "%s" headers { key: "X-Scope-OrgID" value: "fabric" } '
              "queue { shards: 1 batch_send_deadline_ms: 100 min_backoff_ms: 50 "
              "max_backoff_ms: 400 } }\n" % (receiver.port, token_file))
    daemons = Daemons(args, workdir, procs)
    daemons.start_aggregator(config)
    daemons.start_agents(["nodeA"], with_metrics=True)

    # What the agent holds when nothing is stuck, as its own gauge reads it once a cycle: the
    # ib_sysfs and the agent's own collector each push a cycle a millisecond apart every second;
    # the first asks for its ack, the second is sent with ack_later and rides on the next ask
    # unless it settled before that ack was written (a race either way). Sampled beside a cycle
    # whose ack is on its way, the gauge reads 1 or 2, steadily 2 in some runs.
    steady_holds = 2

    def agent_holds():
        """Batches nodeA's agent keeps because the aggregator has not acknowledged them."""
        return metric(scrape(daemons.agent_metrics_ports["nodeA"]),
                      "fabricmon_agent_replay_buffer_batches")
    try:
        # 500, then 429: the same batch twice more, the third time accepted.
        wait_for("three requests", lambda: len(receiver.snapshot()) >= 4, timeout_s=20,
                 procs=procs)
        first = receiver.snapshot()[:3]
        if [r[0] for r in first] != [500, 429, 200]:
            raise Failure("codes %s" % [r[0] for r in first])
        if not first[0][1] == first[1][1] == first[2][1]:
            raise Failure("the batch refused with 500/429 was not retried as it was")
        log("500 and 429: the same batch retried and then accepted")

        # 400 twice: a request of several runs is split in halves, the first of which meets the
        # second 400 (a request of one run is dropped); none is sent again as it was.
        with receiver.lock:
            receiver.script = [400, 400]
            mark = len(receiver.requests)
        wait_for("two 400s", lambda: len(receiver.snapshot()) >= mark + 3, timeout_s=20,
                 procs=procs)
        after = receiver.snapshot()
        refused = [r for r in after[mark:] if r[0] == 400]
        if len(refused) != 2 or refused[0][1] == refused[1][1]:
            raise Failure("expected two different batches refused with 400: %s" %
                          [r[0] for r in after[mark:]])
        log("400: two requests refused, neither sent again as it was")

        # Down for 3 s: retried (no response) until it is back, then delivered.
        port = receiver.port
        receiver.stop()
        down_since = time.monotonic()
        time.sleep(3)
        wait_for("retries while the receiver is down",
                 lambda: metric(scrape(daemons.metrics_port),
                                "fabricmon_remote_write_requests_total", code="error") > 0,
                 timeout_s=10, procs=procs)
        pending = metric(scrape(daemons.metrics_port), "fabricmon_remote_write_samples_pending")
        if pending == 0:
            raise Failure("nothing buffered while the receiver was down")
        # Stored but not delivered: the agent must still hold those batches, so that they are
        # not lost if this aggregator dies before the receiver is back (acknowledged on
        # settlement, not on store).
        held = agent_holds()
        if held <= steady_holds:
            raise Failure("the receiver has been down %.1f s with %d samples pending, but the agent "
                          "holds only %d batches: the aggregator acknowledged batches it had "
                          "not delivered" % (time.monotonic() - down_since, pending, held))
        log("receiver down %.1f s: %d samples pending, the agent holds %d batches" %
            (time.monotonic() - down_since, pending, held))
        restarted = FakeReceiver()
        restarted.requests = receiver.requests
        restarted.lock = receiver.lock
        restarted.required = receiver.required
        receiver = restarted.start(port)
        daemons.wait_batches(metric(scrape(daemons.metrics_port),
                                    "fabricmon_aggregator_batches_total") + 2)
        try:
            wait_for("the agent's held batches acknowledged once delivered",
                     lambda: agent_holds() <= steady_holds, timeout_s=10, interval_s=0.2,
                     procs=procs)
        except Failure as e:
            # What each side saw, so that a failure here says where the batches stuck.
            aggregator = http_get("http://127.0.0.1:%d/metrics" % daemons.metrics_port)
            agent = http_get("http://127.0.0.1:%d/metrics" % daemons.agent_metrics_ports["nodeA"])
            lines = [l for l in (aggregator + agent).splitlines() if not l.startswith("#") and (
                "remote_write" in l or "fabricmon_agent_replay" in l or "fabricmon_agent_stream" in l
                or "fabricmon_aggregator_batches_total" in l)]
            raise Failure("%s; the receiver got %d requests; metrics:\n%s" %
                          (e, len(receiver.snapshot()), "\n".join(lines)))
        daemons.stop_agents()
        final = daemons.wait_drained(["fake"])
    finally:
        receiver.stop()

    requests = receiver.snapshot()
    for code, body, series in requests:
        if series is None or code == 415:
            raise Failure("a request the receiver could not decode, or without the remote-write "
                          "headers, the bearer token and the configured header")
    with open(os.path.join(workdir, "logs", "aggregator.log"), errors="replace") as f:
        if token in f.read():
            raise Failure("the bearer token appears in the aggregator's log")
    # A request refused with 400 is never sent again as it was: when it held several runs its
    # samples come again only in smaller requests (its halves), so a sample's fate is that of
    # the last request that carried it.
    last_code = {}
    for index, (code, body, series) in enumerate(requests):
        samples = count(series)
        for labels, points in series:
            for t, _ in points:
                earlier = last_code.get((tuple(labels), t))
                if earlier is not None and earlier[0] == 400 and earlier[1] <= samples:
                    raise Failure("a sample of a request refused with 400 (%d samples) came again "
                                  "in one of %d" % (earlier[1], samples))
                last_code[(tuple(labels), t)] = (code, samples)
        if code == 400 and any(r[1] == body for r in requests[index + 1:]):
            raise Failure("a batch refused with 400 was sent again")
    accepted = [s for code, _, series in requests if code == 200 for s in series]
    failed = [(labels, [(t, v) for t, v in points if last_code[(tuple(labels), t)][0] == 400])
              for code, _, series in requests if code == 400 for labels, points in series]
    # Each finally refused sample once (the last 400 that carried it).
    failed = list({(tuple(labels), t): (labels, [(t, v)]) for labels, points in failed
                   for t, v in points}.values())
    for labels, _ in accepted:
        labels = dict(labels)
        if labels.get("shard") != shard_of(labels["__name__"]):
            raise Failure("%s arrived with shard %r, not %r (the aggregator's own series carry "
                          "it, the agents' do not)" % (labels, labels.get("shard"),
                                                       shard_of(labels["__name__"])))
    seen = set()
    for labels, samples in accepted:
        for t, _ in samples:
            if (tuple(labels), t) in seen:
                raise Failure("%s at %d accepted twice" % (labels, t))
            seen.add((tuple(labels), t))
    stored = metric(final, "fabricmon_aggregator_samples_total")

    def agent_samples(series):
        # The agent's series (fabricmon_node_* are the aggregator's own, sent each tick, and
        # the saturation flags go beside stored samples).
        return sum(len(s) for labels, s in series if ("node", "nodeA") in labels and
                   not dict(labels)["__name__"].startswith(("fabricmon_node_",
                                                            "fabricmon_series_saturated")))

    got = agent_samples(accepted) + agent_samples(failed)
    if got != stored:
        raise Failure("the receiver got %d agent samples (accepted or refused), the aggregator "
                      "stored %d" % (got, stored))
    checks = {"fabricmon_remote_write_samples_sent_total": count(accepted),
              "fabricmon_remote_write_samples_failed_total": count(failed),
              "fabricmon_remote_write_samples_dropped_total": 0}
    for name, want in checks.items():
        value = metric(final, name, endpoint="fake")
        if value != want:
            raise Failure("%s = %s, the receiver saw %s" % (name, value, want))
    for code in ("500", "429", "400", "200"):
        if metric(final, "fabricmon_remote_write_requests_total", code=code) != sum(
                1 for r in requests if str(r[0]) == code):
            raise Failure("requests_total{code=%s} disagrees with the receiver" % code)
    log("%d samples stored; %d accepted once each, %d refused with 400 (counted as failed)" %
        (stored, count(accepted), count(failed)))
    return 0


CASES = {"engines": run_engines, "receiver": run_receiver, "failover": run_failover,
         "refusal": run_refusal,
         "tls": run_tls}


def main():
    global VERBOSE
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", required=True, choices=sorted(CASES))
    parser.add_argument("--aggregator", required=True)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--fixtures", required=True)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    VERBOSE = args.verbose
    args.aggregator = os.path.abspath(args.aggregator)
    args.agent = os.path.abspath(args.agent)
    args.fixtures = os.path.abspath(args.fixtures)
    for rel in NODES.values():
        if not os.path.isdir(os.path.join(args.fixtures, rel, "class/infiniband")):
            log("SKIP: fixture tree", os.path.join(args.fixtures, rel), "is missing")
            return SKIP
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    with fmt.workdir("fabricmon-rw-", keep=args.keep, log=log) as workdir:
        procs = fmt.Processes(workdir, log=log, verbose=VERBOSE)
        try:
            status = CASES[args.case](args, workdir, procs)
            if status == 0:
                log("PASS")
            return status
        except (Failure, OSError, ValueError, subprocess.SubprocessError) as e:
            log("FAIL:", e)
            procs.dump_logs(lines=30)
            return 1
        finally:
            procs.stop_all()


if __name__ == "__main__":
    sys.exit(main())
