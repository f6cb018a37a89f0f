"""Helpers shared by fabricmon's Python end-to-end tests (Python 3 standard library only).

A test script imports this module by its own location, before anything else of the repository:

    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    sys.path.insert(0, os.path.join(<repository root>, "tests", "testing"))
    import fabricmon_testing as fmt

What is here:
  * Failure, SKIP (ctest SKIP_RETURN_CODE), HERMETIC_AGENT_CONFIG (an agent that reads only
    the ib_sysfs tree it is given),
  * workdir() (a temporary directory, kept on request), free_port(), die_with_parent()
    (preexec_fn: SIGKILL the child when the test dies), http_get(), wait_for() (bounded
    polling), parse_text_exposition(),
  * Processes: children with a log file each, started on free ports, all stopped at the end,
  * Prometheus: a real Prometheus server (Debian `prometheus`) scraping one target on loopback,
    and PromApi for its HTTP API.
"""

import contextlib
import ctypes
import json
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

# Only the ib_sysfs collector (the others would read the real host), a 1 s interval and a short
# reconnect backoff; plaintext to the aggregator.
HERMETIC_AGENT_CONFIG = """\
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


class Failure(Exception):
    pass


def _stderr_log(*parts):
    print(*parts, file=sys.stderr, flush=True)


@contextlib.contextmanager
def workdir(prefix, keep=False, tmpfs=False, log=_stderr_log):
    """A fresh temporary directory "<prefix>XXXX" (in /dev/shm with `tmpfs` when it is writable),
    removed afterwards unless `keep` (then logged)."""
    base = "/dev/shm" if tmpfs and os.access("/dev/shm", os.W_OK) else None
    path = tempfile.mkdtemp(prefix=prefix, dir=base)
    try:
        yield path
    finally:
        if keep:
            log("kept", path)
        else:
            shutil.rmtree(path, ignore_errors=True)


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (the caller retries if it is taken
    meanwhile: see Processes.start_server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent():
    """preexec_fn: runs in the child between fork and exec and has it SIGKILLed when the test
    dies, even by SIGKILL (ctest timeout), so no daemon outlives the test. Linux
    prctl(PR_SET_PDEATHSIG); a no-op where that is missing."""
    PR_SET_PDEATHSIG = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def http_get(url, timeout_s=5):
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.read().decode("utf-8")


def tail(path, lines=40):
    try:
        with open(path, "r", errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_for(what, predicate, timeout_s, interval_s=0.2, procs=None):
    """Polls `predicate` until it returns a truthy value and returns that value. OSError (URLError
    included), ValueError, KeyError and Failure from `predicate` count as "not yet" (the last one
    is named in the timeout message). Failure after `timeout_s`, or as soon as one of `procs`'
    children has exited."""
    deadline = time.monotonic() + timeout_s
    last_error = None
    while time.monotonic() < deadline:
        if procs is not None and procs.dead():
            raise Failure("process(es) exited while waiting for %s: %s" % (what, procs.dead()))
        try:
            value = predicate()
            if value:
                return value
        except (OSError, ValueError, KeyError, Failure) as e:
            last_error = e
        time.sleep(interval_s)
    raise Failure("timed out after %.0f s waiting for %s%s" %
                  (timeout_s, what, " (last error: %s)" % last_error if last_error else ""))


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*')


def parse_text_exposition(text):
    """Prometheus text format → [(name, {label: value}, float)]; comments skipped, label values
    unescaped. ValueError on a line it cannot parse."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError("unparsable exposition line: %r" % line)
        name, label_text, value = m.group(1), m.group(2) or "", m.group(3)
        labels = {}
        pos = 0
        while pos < len(label_text):
            lm = _LABEL.match(label_text, pos)
            if not lm:
                raise ValueError("unparsable labels in line: %r" % line)
            labels[lm.group(1)] = re.sub(
                r'\\(.)', lambda e: {"n": "\n"}.get(e.group(1), e.group(1)), lm.group(2))
            pos = lm.end()
        samples.append((name, labels, float(value)))
    return samples


class Processes:
    """Children started by a test, each writing stdout and stderr to <workdir>/logs/<name>.log and
    dying with the test (die_with_parent); stop_all() stops them (SIGTERM, then SIGKILL after
    `stop_grace_s`). `log` prints a line of the test's log; `verbose` also logs every start."""

    def __init__(self, workdir, log=_stderr_log, verbose=False, stop_grace_s=5):
        self.workdir = workdir
        self.log = log
        self.verbose = verbose
        self.stop_grace_s = stop_grace_s
        self.children = []  # (name, Popen, log path)

    def start(self, name, argv, env=None, cwd=None, stdin=None):
        """Starts `argv` with `env` added to this environment, in `cwd` (default: the workdir)."""
        log_path = os.path.join(self.workdir, "logs", name + ".log")
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        if self.verbose:
            self.log("starting", name + ":", " ".join(argv))
        with open(log_path, "wb") as log_file:
            proc = subprocess.Popen(argv, stdin=stdin or subprocess.DEVNULL, stdout=log_file,
                                    stderr=subprocess.STDOUT, preexec_fn=die_with_parent,
                                    cwd=cwd or self.workdir,
                                    env=dict(os.environ, **(env or {})))
        self.children.append((name, proc, log_path))
        return proc

    def forget(self, proc):
        """Stops `proc` (if still running) and drops it from the children."""
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        self.children = [c for c in self.children if c[1] is not proc]

    def start_server(self, name, make_argv, ready, attempts=3):
        """Starts the server `make_argv(port)` on a free port, another one if it was taken
        meanwhile, and waits until `ready(port)`. Returns (Popen, port)."""
        for _ in range(attempts):
            port = free_port()
            proc = self.start(name, make_argv(port))
            wait_for("%s to listen on port %d" % (name, port),
                     lambda: proc.poll() is not None or ready(port), 20, 0.05)
            if proc.poll() is None:
                return proc, port
            self.log("%s could not use port %d (exit %s); retrying" % (name, port, proc.returncode))
            self.forget(proc)
        raise Failure("%s: no usable port after %d attempts" % (name, attempts))

    def dead(self):
        return [(n, p.returncode) for n, p, _ in self.children if p.poll() is not None]

    def stop_all(self):
        for _, proc, _ in self.children:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.stop_grace_s
        for _, proc, _ in self.children:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def dump_logs(self, lines=25, only=None):
        for name, _, path in self.children:
            if not only or name == only:
                self.log("---- %s ----\n%s" % (name, tail(path, lines)))


# ------------------------------------------------------------------------------------------
# Prometheus.


def prometheus_config(job, target_port, interval_s=1, labels=None):
    """prometheus.yml: one job scraping 127.0.0.1:<target_port> every `interval_s`, its series
    given the target `labels` (dict) if any."""
    text = ("global:\n  scrape_interval: {i}s\n  scrape_timeout: {t}ms\n"
            "  evaluation_interval: {i}s\nscrape_configs:\n  - job_name: {job}\n"
            "    static_configs:\n      - targets: ['127.0.0.1:{port}']\n").format(
                i=interval_s, t=interval_s * 900, job=job, port=target_port)
    if labels:
        text += "        labels:\n" + "".join(
            "          %s: %s\n" % (k, json.dumps(v)) for k, v in sorted(labels.items()))
    return text


def prometheus_argv(binary, directory, port):
    """Serves 127.0.0.1:<port> with <directory>/prometheus.yml and a TSDB in <directory>/data."""
    return [binary, "--config.file=" + os.path.join(directory, "prometheus.yml"),
            "--storage.tsdb.path=" + os.path.join(directory, "data"),
            "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn",
            "--storage.tsdb.retention.time=1h"]


def prometheus_ready(port):
    try:
        return "Ready" in http_get("http://127.0.0.1:%d/-/ready" % port, timeout_s=2)
    except urllib.error.HTTPError:
        return False  # 503 while starting


class Prometheus:
    """A Prometheus server (child of `procs`, named "prometheus") scraping
    127.0.0.1:<target_port> as `job` every second (with target `labels`), data in `directory`. launch() starts it and
    returns at once (it is the slowest to start); wait_ready() waits for it, on another port if
    its port was taken meanwhile. `url` is its base URL once ready."""

    def __init__(self, procs, binary, directory, job, target_port, labels=None):
        self.procs = procs
        self.binary = binary
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "prometheus.yml"), "w") as f:
            f.write(prometheus_config(job, target_port, labels=labels))
        self.proc = None
        self.port = None

    def _argv(self, port):
        return prometheus_argv(self.binary, self.directory, port)

    def launch(self):
        self.port = free_port()
        self.proc = self.procs.start("prometheus", self._argv(self.port))
        return self

    def wait_ready(self, timeout_s=20):
        if self.proc is None:
            self.launch()
        wait_for("prometheus to answer", lambda: self.proc.poll() is not None or
                 prometheus_ready(self.port), timeout_s, 0.1)
        if self.proc.poll() is not None:  # its port was taken meanwhile: another one
            self.procs.forget(self.proc)
            self.proc, self.port = self.procs.start_server("prometheus", self._argv,
                                                           prometheus_ready)
        return self

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port


class PromApi:
    """Prometheus' HTTP API at `base` (http://host:port). Failure when a call does not succeed."""

    def __init__(self, base):
        self.base = base

    def _call(self, path, params):
        data = urllib.parse.urlencode(params, doseq=True).encode()
        try:
            with urllib.request.urlopen(self.base + path, data=data, timeout=10) as r:
                body = json.loads(r.read().decode())
        except urllib.error.HTTPError as e:
            body = json.loads(e.read().decode() or "{}")
        if body.get("status") != "success":
            raise Failure("%s: %s: %s" % (body.get("errorType", "error"),
                                          body.get("error", body), params.get("query", params)))
        return body["data"]

    def query(self, expr):
        """Instant query: the raw result list."""
        return self._call("/api/v1/query", {"query": expr})["result"]

    def vector(self, expr):
        """Instant query that must give a vector: [(labels, float value)]."""
        data = self._call("/api/v1/query", {"query": expr})
        if data["resultType"] != "vector":
            raise Failure("query %r: expected a vector, got %s" % (expr, data["resultType"]))
        return [(r["metric"], float(r["value"][1])) for r in data["result"]]

    def query_range(self, expr, seconds, step):
        now = time.time()
        return self._call("/api/v1/query_range", {"query": expr, "start": now - seconds,
                                                   "end": now, "step": step})["result"]

    def label_values(self, selector, label):
        now = time.time()
        if selector is None:
            return sorted(self._call("/api/v1/label/%s/values" % label,
                                     {"start": now - 300, "end": now}))
        series = self._call("/api/v1/series", {"match[]": selector, "start": now - 300,
                                               "end": now})
        return sorted({s[label] for s in series if s.get(label)})
