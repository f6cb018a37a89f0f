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
      same labels as a scrape stores them, plus the external label), each ending with the value
      /metrics shows;
    * both hold the same samples at the same timestamps, and as many as the aggregator stored
      (fabricmon_aggregator_samples_total): nothing lost, nothing twice;
    * the aggregator's own families arrived (findings, fabricmon_node_up); the remote_write
      metrics say nothing failed or dropped, and `promtool check metrics` is silent on /metrics;
    * a batch replayed to VictoriaMetrics (the same request again, as an agent's replay after an
      aggregator restart produces) adds no sample (-dedup.minScrapeInterval).
  Skips (77) without victoria-metrics or prometheus.

--case=receiver: a fake receiver (Python HTTP server decoding snappy + protobuf itself) that
  answers 500 then 429 (the same batch must come again, and then be accepted), 400 (dropped and
  counted, never sent again), and goes away for 3 s (retried until it is back, then delivered).
  At the end every sample the aggregator stored reached the receiver once or was refused by a
  400, and the aggregator's counters say exactly that. Every request carries the remote-write
  headers, the bearer token from bearer_token_file and the configured extra header; the token
  never appears in the aggregator's log.

Usage:
  remote_write_test.py --case=engines|receiver --aggregator=BIN --agent=BIN --fixtures=DIR
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


# The aggregator's shard name: every remote series carries it as the `shard` external label.
SHARD = "rw-test-shard"


def pop_shard(labels):
    """Removes the `shard` label, which every series must carry with the aggregator's name. A
    series without it, or with another value, keeps a `bad_shard` label, so the comparison with
    /metrics reports it (extra and missing) instead of this failing inside a poll."""
    shard = labels.pop("shard", None)
    if shard != SHARD:
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

    def start_agents(self, nodes):
        config = write(os.path.join(self.workdir, "agent.textproto"), fmt.HERMETIC_AGENT_CONFIG)
        for node in nodes:
            self.agents[node] = self.procs.start("agent-" + node, [
                self.args.agent, "--config=" + config,
                "--aggregator=127.0.0.1:%d" % self.grpc_port, "--node_name=" + node,
                "--sysfs_root=" + os.path.join(self.args.fixtures, NODES[node]),
                "--log_level=info"])

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


def vm_export(port, selector):
    """{(name, labels)} → [(timestamp ms, value)] from VictoriaMetrics' /api/v1/export."""
    http_get("http://127.0.0.1:%d/internal/force_flush" % port)
    query = urllib.parse.urlencode({"match[]": selector})
    out = {}
    for line in http_get("http://127.0.0.1:%d/api/v1/export?%s" % (port, query), 30).splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        labels = dict(row["metric"])
        name = labels.pop("__name__")
        pop_shard(labels)
        out[key_of(name, labels)] = sorted(zip(row["timestamps"], row["values"]))
    return out


def prom_samples(base, selector):
    """{(name, labels)} → [(timestamp ms, value)]: the raw samples of the last 10 minutes."""
    result = fmt.PromApi(base).query("%s[10m]" % selector)
    out = {}
    for row in result:
        labels = dict(row["metric"])
        name = labels.pop("__name__")
        pop_shard(labels)
        out[key_of(name, labels)] = [(int(round(float(t) * 1000)), float(v))
                                     for t, v in row["values"]]
    return out


def run_engines(args, workdir, procs):
    vm_binary = shutil.which("victoria-metrics")
    prometheus = shutil.which("prometheus")
    if vm_binary is None or prometheus is None:
        log("SKIP: victoria-metrics and prometheus (Debian packages) are needed")
        return SKIP
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

    queue = "queue { shards: 2 batch_send_deadline_ms: 100 min_backoff_ms: 20 max_backoff_ms: 500 }"
    config = "tls { insecure_plaintext: true }\n"
    for name, port in (("vm", vm_port), ("prometheus", prom_port)):
        config += ('remote_write { url: "http://127.0.0.1:%d/api/v1/write" name: "%s" '
                   'external_labels { key: "%s" value: "%s" } %s }\n' %
                   (port, name, EXTERNAL[0], EXTERNAL[1], queue))
    daemons = Daemons(args, workdir, procs)
    daemons.start_aggregator(config)
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
    daemons.start_agents(["nodeA"])
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

        # 400 twice: two batches dropped, never sent again.
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
        log("400: two batches dropped")

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
        log("receiver down %.1f s: %d samples pending" % (time.monotonic() - down_since, pending))
        restarted = FakeReceiver()
        restarted.requests = receiver.requests
        restarted.lock = receiver.lock
        restarted.required = receiver.required
        receiver = restarted.start(port)
        daemons.wait_batches(metric(scrape(daemons.metrics_port),
                                    "fabricmon_aggregator_batches_total") + 2)
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
    for refused in (r for r in requests if r[0] == 400):
        if sum(1 for r in requests if r[1] == refused[1]) != 1:
            raise Failure("a batch refused with 400 was sent again")
    accepted = [s for code, _, series in requests if code == 200 for s in series]
    failed = [s for code, _, series in requests if code == 400 for s in series]
    for labels, _ in accepted:
        if ("shard", SHARD) not in [tuple(label) for label in labels]:
            raise Failure("%s arrived without the aggregator's shard label" % (labels,))
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


def main():
    global VERBOSE
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", required=True, choices=["engines", "receiver"])
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
            status = (run_engines if args.case == "engines" else run_receiver)(args, workdir,
                                                                                procs)
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
