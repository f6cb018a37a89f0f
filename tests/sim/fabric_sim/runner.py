"""Runs a simulated cluster against the real daemons and checks what they find.

Harness: generates the cluster (cluster.py) in a temporary directory (tmpfs when available),
starts fabricmon-aggregator (loopback, free ports, --link_list, detector thresholds), optionally
ibsim + opensm (ibsim.py) and one fabricmon-agent per simulated node (ib_sysfs, netdev, nvml
through the NVML stand-in, ethtool through stats_dir; on the first node also ib_fabric under
umad2sim in ibsim mode), advances the traffic model every tick, and polls `fabricmon findings
--json`. Every child runs in its own process group and is killed, by group, when the harness
stops; the temporary directory is removed (unless keep=True).

run_scenario() plays one scenario (scenarios.py) and prints its table: expected findings, found
or not, detection delay in sampling intervals (from the moment the fault reached the counter files
to the finding's onset), false findings, extra checks, and the mode that ran.

Python 3 standard library only.
"""

import atexit
import glob
import json
import lzma
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import fabricmon_testing as fmt  # on sys.path through __init__.py
from fabricmon_testing import free_port

from . import cluster as cluster_mod
from . import ibsim as ibsim_mod
from . import scenarios as scenarios_mod
from . import traffic

SKIP = 77  # ctest SKIP_RETURN_CODE


class Binaries:
    def __init__(self, build_dir):
        self.build_dir = os.path.abspath(build_dir)
        self.agent = os.path.join(self.build_dir, "daemon", "agent", "fabricmon-agent")
        self.aggregator = os.path.join(self.build_dir, "daemon", "aggregator",
                                       "fabricmon-aggregator")
        self.cli = os.path.join(self.build_dir, "daemon", "cli", "fabricmon")
        self.nvml = None
        for pattern in ("tests/unit/collectors/nvml/nvml_standin/libnvidia-ml-standin.so",
                        "tests/**/libnvidia-ml-standin.so"):
            found = sorted(glob.glob(os.path.join(self.build_dir, pattern), recursive=True))
            if found:
                self.nvml = found[0]
                break
        # Preloaded in front of umad2sim by every ibsim client (tests/sim/ibsim/
        # umad2sim_close_fix.c); built with the ib_fabric collector, absent without it.
        self.umad2sim_fix = os.path.join(self.build_dir, "tests", "sim", "ibsim",
                                         "libfabricmon-umad2sim-close-fix.so")

    def missing(self):
        out = [p for p in (self.agent, self.aggregator, self.cli) if not os.access(p, os.X_OK)]
        if self.nvml is None:
            out.append("libnvidia-ml-standin.so (target fabricmon_nvml_standin)")
        return out


def _scratch_dir(prefix):
    """A fresh directory "<prefix><pid>-XXXX" on tmpfs when there is one (ext4 renames are slow).
    Directories left by runs that were killed outright (their pid is gone) are removed first."""
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    for entry in os.listdir(base):
        if not entry.startswith(prefix):
            continue
        pid = entry[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                shutil.rmtree(os.path.join(base, entry), ignore_errors=True)
            except OSError:
                pass
    return tempfile.mkdtemp(prefix="%s%d-" % (prefix, os.getpid()), dir=base)


_LIVE = set()


def _kill_live():
    for harness in list(_LIVE):
        harness.stop()


atexit.register(_kill_live)


def install_signal_handlers():
    """SIGTERM/SIGHUP end the run like Ctrl-C does: through the finally blocks and atexit."""
    def handler(signum, frame):
        raise KeyboardInterrupt()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)


class Harness:
    def __init__(self, bins, fabric="ib", nodes=16, topology="fat-tree", interval_ms=500,
                 tick_ms=500, detectors="flap_window_s: 60", want_ibsim=False, keep=False, log=print,
                 seed=0, prometheus=False, state_file=None, cluster=None, record=False):
        self.bins = bins
        self.record = record  # the aggregator records what it accepts (recording { ... })
        self.interval_ms = interval_ms
        self.tick_ms = tick_ms
        self.detectors = detectors
        self.want_ibsim = want_ibsim
        self.keep = keep
        self.log = log
        self.procs = []
        self.root = _scratch_dir("fabricmon-sim-")
        # For a wrapper that must clean up if this process is killed outright (run-demo.sh):
        # "dir PATH" and one "pgid N" per child process group.
        self.state_file = state_file
        self._note_state("dir", self.root)
        try:
            # A prebuilt cluster (campaign.py's random fat trees) or the standard one.
            self.cluster = cluster or cluster_mod.Cluster.build(nodes, fabric=fabric,
                                                                topology=topology)
            initial = self.cluster.generate(self.root, seed=seed)
            self.sim = traffic.Simulation(self.cluster, self.root, initial, seed=seed)
        except Exception:
            shutil.rmtree(self.root, ignore_errors=True)
            raise
        self.ibsim = None
        self.mode = "sysfs"
        self.mode_note = "host counters only (sysfs, procfs, ethtool stats_dir, NVML stand-in)"
        self.ibsim_missing = False
        self.grpc = None
        self.metrics_port = None
        self.want_prometheus = prometheus
        self.prometheus_port = None
        _LIVE.add(self)

    # -------------------------------------------------------------------------------------
    def _note_state(self, kind, value):
        if self.state_file:
            with open(self.state_file, "a") as f:
                f.write("%s %s\n" % (kind, value))

    def _spawn(self, name, argv, env=None, cwd=None):
        logf = open(os.path.join(self.root, "logs", name + ".log"), "w")
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=dict(os.environ, **(env or {})),
                                cwd=cwd or self.root, start_new_session=True,
                                preexec_fn=fmt.die_with_parent)
        logf.close()
        self.procs.append((name, proc))
        self._note_state("pgid", proc.pid)
        return proc

    def start(self):
        os.makedirs(os.path.join(self.root, "logs"), exist_ok=True)
        self.sim.tick(time.time())  # every file at its first value before anyone reads
        if self.want_ibsim:
            self._start_ibsim()
        self._start_aggregator()
        for node in self.cluster.nodes:
            self._start_agent(node)
        if self.want_prometheus:
            self._start_prometheus()

    def _start_ibsim(self):
        ok, why = ibsim_mod.available()
        if not ok:
            self.mode_note = "ibsim unavailable (%s)" % why
            self.ibsim_missing = True  # a dependency is absent: the only reason to skip
            return
        if self.cluster.fabric != "ib":
            self.mode_note = "host counters only (ibsim simulates InfiniBand, not RoCE)"
            return
        if not os.access(self.bins.umad2sim_fix, os.R_OK):
            # Built by this tree (target fabricmon_umad2sim_close_fix): not a missing dependency.
            self.mode_note = "%s not built" % self.bins.umad2sim_fix
            return
        try:
            ib = ibsim_mod.Ibsim(os.path.join(self.root, "fabric.net"),
                                 os.path.join(self.root, "ibsim"),
                                 on_spawn=lambda pid: self._note_state("pgid", pid),
                                 preload=[self.bins.umad2sim_fix])
        except (OSError, RuntimeError) as e:
            self.mode_note = "ibsim did not start (%s)" % e
            return
        try:
            t = time.time()
            ib.run_opensm()
            probe = self._probe_ib_fabric(ib)
        except (OSError, RuntimeError, subprocess.SubprocessError) as e:
            probe = "failed: %s" % e
        if probe != "ok":
            ib.stop()
            self.mode_note = "the agent's ib_fabric collector does not sweep ibsim (%s)" % probe
            return
        self.ibsim = ib
        self.mode = "ibsim"
        self.mode_note = ("%d switches in ibsim (opensm + probe %.1f s), their ports swept by "
                          "%s's ib_fabric collector over umad2sim" %
                          (len(self.cluster.switches), time.time() - t, self.sweeper_node().name))
        ib.healthy_traffic(self.cluster)
        ib.start_stepping()  # its own thread: see ibsim.py on why not the playback loop

    def sweeper_node(self):
        """The node whose agent sweeps the fabric in ibsim mode: the first one with an HCA."""
        return self.cluster.fabric_nodes()[0]

    def _sweeper_host(self):
        return self.sweeper_node().ports[0].ibsim_id

    def _probe_ib_fabric(self, ib):
        """Runs the agent once with only ib_fabric enabled: "ok" when it returns switch ports."""
        cwd = os.path.join(self.root, "ibsim", "probe")
        os.makedirs(cwd, exist_ok=True)
        config = os.path.join(cwd, "probe.textproto")
        with open(config, "w") as f:
            f.write("collectors {\n  ib_sysfs { enabled: false }\n  netdev { enabled: false }\n"
                    "  ethtool { enabled: false }\n  nvml { enabled: false }\n"
                    "  ib_fabric { enabled: true }\n}\n")
        result = subprocess.run([self.bins.agent, "--once", "--config=" + config], cwd=cwd,
                                env=dict(os.environ, **ib.client_env(self._sweeper_host())),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        text = result.stdout.decode(errors="replace")
        if result.returncode != 0:
            return "agent --once exited %d: %s" % (result.returncode,
                                                   result.stderr.decode(errors="replace")[-300:])
        if 'switch="%s"' % self.cluster.leaf_names()[0] not in text:
            return "no switch-port series in its output (collector not built or not working)"
        return "ok"

    def _start_aggregator(self):
        for attempt in range(5):
            self.metrics_port = free_port()
            port_file = os.path.join(self.root, "aggregator.port")
            if os.path.exists(port_file):
                os.unlink(port_file)
            config = os.path.join(self.root, "aggregator.textproto")
            with open(config, "w") as f:
                f.write('grpc_listen: "127.0.0.1:0"\nmetrics_listen: "127.0.0.1:%d"\n'
                        'tls { insecure_plaintext: true }\nnode_stale_after_ms: 10000\n'
                        # The first node's agent sweeps the ibsim fabric (ib_fabric): only a
                        # fabric sweeper's switch topology is used.
                        'authorization { fabric_sweepers: "%s" }\n'
                        'detectors { tick_ms: %d %s }\n'
                        % (self.metrics_port, self.sweeper_node().name,
                           self.tick_ms, self.detectors))
                if self.record:
                    f.write('recording { directory: "%s" }\n' % self.recording_dir())
            proc = self._spawn("aggregator", [
                self.bins.aggregator, "--config=" + config, "--port_file=" + port_file,
                "--link_list=" + os.path.join(self.root, "links.txt"), "--log_level=warning"])
            deadline = time.time() + 10
            while time.time() < deadline and proc.poll() is None:
                try:
                    with open(port_file) as f:
                        text = f.read().strip()
                    if text:
                        self.grpc = "127.0.0.1:%s" % text
                        break
                except OSError:
                    pass
                time.sleep(0.02)
            if self.grpc:
                # /metrics binds after gRPC: give it a moment and check it answers.
                for _ in range(100):
                    if proc.poll() is not None:
                        break
                    try:
                        self.metrics_text(timeout=1)
                        return
                    except OSError:
                        time.sleep(0.05)
            self.grpc = None
            proc.kill()
            proc.wait()
        raise RuntimeError("fabricmon-aggregator did not start (see %s/logs/aggregator.log)"
                           % self.root)

    def recording_dir(self):
        return os.path.join(self.root, "recording")

    def aggregator_config(self):
        return os.path.join(self.root, "aggregator.textproto")

    def link_list(self):
        return os.path.join(self.root, "links.txt")

    def stop_agents(self):
        """Ends every agent (their streams end: the recording gets their stream ends)."""
        agents = [(n, p) for n, p in self.procs if n.startswith("agent-") and p.poll() is None]
        for name, proc in agents:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except OSError:
                pass
        for name, proc in agents:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def _agent_config(self, node, sweeper):
        root = self.root
        iv = self.interval_ms
        roce = self.cluster.fabric == "roce"
        lines = [
            'node_name: "%s"' % node.name,
            'aggregator: "%s"' % self.grpc,
            "tls { insecure_plaintext: true }",
            "reconnect_initial_backoff_ms: 100",
            "reconnect_max_backoff_ms: 1000",
            "collectors {",
            '  ib_sysfs { interval_ms: %d sysfs_root: "%s" }' % (iv, node.sysfs(root)),
            '  netdev { interval_ms: %d sysfs_root: "%s" procfs_root: "%s" }'
            % (iv, node.sysfs(root), node.procfs(root)),
            ('  nvml { interval_ms: %d library: "%s" }' % (iv, self.bins.nvml))
            if getattr(node, "has_gpu", True) else "  nvml { enabled: false }",
            ('  ethtool { interval_ms: %d sysfs_root: "%s" stats_dir: "%s" }'
             % (max(iv, 100), node.sysfs(root), node.ethtool_dir(root))) if roce else
            "  ethtool { enabled: false }",
        ]
        if sweeper:
            lines.append("  ib_fabric { enabled: true interval_ms: %d }" % iv)
        lines.append("}")
        return "\n".join(lines) + "\n"

    def _start_agent(self, node):
        sweeper = self.ibsim is not None and node is self.sweeper_node()
        config = os.path.join(node.dir(self.root), "agent.textproto")
        with open(config, "w") as f:
            f.write(self._agent_config(node, sweeper))
        env = {"FABRICMON_NVML_STANDIN_STATE": node.nvml_state(self.root)}
        cwd = node.dir(self.root)
        if sweeper:
            env.update(self.ibsim.client_env(self._sweeper_host()))
            cwd = os.path.join(self.root, "ibsim", "sweeper")  # umad2sim's fake sysfs goes here
            os.makedirs(cwd, exist_ok=True)
        self._spawn("agent-" + node.name, [self.bins.agent, "--config=" + config,
                                           "--log_level=warning"], env=env, cwd=cwd)

    def _start_prometheus(self):
        prom = shutil.which("prometheus")
        if prom is None:
            self.log("   (prometheus not installed: no Prometheus server)")
            return
        for attempt in range(3):
            self.prometheus_port = free_port()
            directory = os.path.join(self.root, "prometheus")
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(directory, "prometheus.yml"), "w") as f:
                f.write(fmt.prometheus_config("fabricmon-aggregator", self.metrics_port,
                                              interval_s=2))
            proc = self._spawn("prometheus", fmt.prometheus_argv(prom, directory,
                                                                 self.prometheus_port))
            for _ in range(100):
                if proc.poll() is not None:
                    break
                try:
                    if fmt.prometheus_ready(self.prometheus_port):
                        return
                except OSError:
                    pass
                time.sleep(0.1)
            proc.kill()
            proc.wait()
        self.log("   (prometheus did not start; see %s/logs/prometheus.log)" % self.root)
        self.prometheus_port = None

    # -------------------------------------------------------------------------------------
    def cli(self, *args, timeout=5):
        result = subprocess.run([self.bins.cli, "--aggregator=" + self.grpc, "--timeout_s=3"] +
                                list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                timeout=timeout)
        return result.returncode, result.stdout.decode(errors="replace"), \
            result.stderr.decode(errors="replace")

    def findings(self, include_cleared=False):
        args = ["findings", "--json"] + (["--all"] if include_cleared else [])
        rc, out, err = self.cli(*args)
        if rc != 0:
            raise RuntimeError("fabricmon findings: %s" % err.strip())
        return json.loads(out or "{}").get("findings", [])

    def nodes_up(self):
        rc, out, _ = self.cli("nodes", "--json")
        if rc != 0:
            return 0
        return sum(1 for n in json.loads(out or "{}").get("nodes", []) if n.get("up"))

    def metrics_text(self, timeout=5):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port,
                                    timeout=timeout) as r:
            return r.read().decode(errors="replace")

    def dead_processes(self):
        dead = [(name, p.returncode) for name, p in self.procs if p.poll() is not None]
        if self.ibsim is not None and self.ibsim.step_error is not None:
            dead.append(("ibsim counter steps", self.ibsim.step_error))
        return dead

    def wait_ready(self, timeout=30):
        """Until every node's agent streams and a few samples of each have arrived."""
        deadline = time.time() + timeout
        want = len(self.cluster.nodes)
        up = 0
        while time.time() < deadline:
            dead = self.dead_processes()
            if dead:
                raise RuntimeError("process(es) exited: %s (logs in %s/logs)" % (dead, self.root))
            self.sim.tick(time.time())
            up = self.nodes_up()
            if up >= want:
                return
            time.sleep(0.1)
        raise RuntimeError("only %d of %d nodes up after %d s" % (up, want, timeout))

    def stop(self):
        if self not in _LIVE:
            return
        _LIVE.discard(self)
        # Agents first (they stop collecting), then ibsim's clients are gone, then the rest.
        for name, proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except OSError:
                    pass
        deadline = time.time() + 2
        for name, proc in self.procs:
            try:
                proc.wait(timeout=max(0.05, deadline - time.time()))
            except subprocess.TimeoutExpired:
                pass
        for name, proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # also whatever is left in its group
            except OSError:
                pass
            if proc.poll() is None:
                proc.wait()
        if self.ibsim is not None:
            self.ibsim.stop()
        self.sim.close()
        if not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)


# -----------------------------------------------------------------------------------------


def run_step(ticker, sim, action, ctx):
    """Runs one scenario or campaign step: under the ticker's lock, so that a tick never sees
    half a change, and flushed at once (unless it is marked outside_ticks)."""
    if getattr(action, "outside_ticks", False):
        action(ctx)
        return
    with ticker.lock:
        action(ctx)
        sim.flush()


class Context:
    """What scenario steps and checks see."""

    def __init__(self, harness):
        self.harness = harness
        self.cluster = harness.cluster
        self.sim = harness.sim
        self.ibsim = harness.ibsim

    def metrics_text(self):
        return self.harness.metrics_text()


def _finding_key(f):
    return f.get("id")


class Ticker:
    """Advances the counter model (host files) every `tick_s` from a thread of its own.

    The collectors read a port's counters one file at a time, so a tick that lands between two
    of those reads gives that sample one file from after the tick and one from before. Harmless
    while every sampling interval holds several ticks; but when ticks ran on the playback loop
    they waited behind each `fabricmon findings` poll (~0.35 s on a loaded 2-core machine) and
    fell up to 0.55 s apart, so a 0.5 s interval could hold none: wait without data, a busy
    healthy HCA "waiting 100 % of the time". Scenario steps take `lock` so that a tick never sees
    half a fault (and a step's "visible" stamp stays after its change)."""

    def __init__(self, sim, tick_s):
        self.sim = sim
        self.tick_s = tick_s
        self.lock = threading.Lock()
        self.error = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sim-ticks", daemon=True)

    def start(self):
        self._thread.start()

    def _run(self):
        while True:
            try:
                with self.lock:
                    self.sim.tick(time.time())
            except OSError as e:
                self.error = "counter ticks stopped: %s" % e
                return
            if self._stop.wait(self.tick_s):
                return

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=10)


def play(harness, scenario, baseline_s=3.0, poll_s=0.25, tick_s=None, out=print):
    """Plays `scenario` on a started, ready harness (counter ticks every `tick_s`, by default
    the scenario's). Returns the result dict."""
    tick_s = tick_s or scenario.tick_s
    ctx = Context(harness)
    interval_s = harness.interval_ms / 1000.0
    steps = sorted(scenario.steps(ctx), key=lambda s: s.at)
    expectations = scenario.expect(ctx)
    seen = {}         # id → finding (latest version seen; the tracker keeps its onset)
    full = {}         # id → the version that matched an expectation fully, if any
    visible_ns = None
    step_log = []
    start = time.monotonic()
    fault_start = start + baseline_s
    fault_start_ns = None
    last_step_at = fault_start + (steps[-1].at if steps else 0.0)
    last_visible = fault_start + max([s.at for s in steps if s.visible] or [0.0])
    hard_end = last_visible + scenario.observe_s + 2 * interval_s + 4.0
    found_all_at = None
    next_poll = start
    pending = list(steps)
    ticker = Ticker(harness.sim, tick_s)

    def note(findings):
        for f in findings:
            key = _finding_key(f)
            seen[key] = f
            if key not in full and any(e.matches(f) for e in expectations):
                full[key] = f

    def poll():
        nonlocal found_all_at
        note(harness.findings())
        if expectations and found_all_at is None and all(
                any(e.matches(f) for f in full.values()) for e in expectations):
            found_all_at = time.monotonic()

    # Ticks go on until the last findings are read: frozen counters would read as idle ports.
    ticker.start()
    try:
        while True:
            now = time.monotonic()
            while pending and fault_start + pending[0].at <= now:
                step = pending.pop(0)
                if fault_start_ns is None:
                    fault_start_ns = time.time_ns()
                run_step(ticker, harness.sim, step.action, ctx)
                stamp = time.time_ns()
                if step.visible and visible_ns is None:
                    visible_ns = stamp
                step_log.append((stamp, step.label, step.visible))
            if now >= next_poll:
                poll()
                next_poll = time.monotonic() + poll_s
            if not pending:
                if expectations:
                    if found_all_at is not None and now >= max(found_all_at + scenario.tail_s,
                                                               last_step_at + scenario.tail_s):
                        break
                    if now >= hard_end:
                        break
                elif now >= max(last_step_at, last_visible) + scenario.observe_s:
                    break
            dead = harness.dead_processes()
            if ticker.error:
                dead.append(("ticker", ticker.error))
            if dead:
                raise RuntimeError("process(es) exited during the scenario: %s" % dead)
            wake = min(next_poll, fault_start + pending[0].at if pending else next_poll)
            time.sleep(max(0.0, min(wake - time.monotonic(), 0.05)))

        # Recently cleared findings too: a false finding that came and went between two polls.
        note(harness.findings(include_cleared=True))
    finally:
        ticker.stop()

    return evaluate(harness, scenario, ctx, expectations, seen, full, visible_ns,
                    fault_start_ns, interval_s, step_log)


def evaluate(harness, scenario, ctx, expectations, seen, full, visible_ns, fault_start_ns,
             interval_s, step_log):
    rows = []
    matched_ids = set()
    ok = True
    for e in expectations:
        # Partial views of an expected finding (same kind and subject, the tree still growing)
        # are that finding, not false ones.
        for key, f in seen.items():
            if e.same_subject(f) and (fault_start_ns is None or
                                      int(f.get("onset_unix_nanos", 0)) >= fault_start_ns):
                matched_ids.add(key)
        matches = [f for f in full.values() if e.matches(f)]
        budget = 2.0 + e.extra_budget
        if not matches:
            rows.append({"expected": e.describe(), "found": False, "delay": None,
                         "budget": budget, "note": e.note})
            ok = False
            continue
        onset = min(int(f.get("onset_unix_nanos", 0)) for f in matches)
        delay = (onset - visible_ns) / 1e9 / interval_s if visible_ns else None
        early = fault_start_ns is not None and onset < fault_start_ns
        in_budget = delay is not None and -0.0 <= delay <= budget and not early
        ok = ok and in_budget
        rows.append({"expected": e.describe(), "found": True, "delay": delay, "budget": budget,
                     "early": early or (delay is not None and delay < 0), "note": e.note,
                     "in_budget": in_budget,
                     "finding": scenarios_mod.finding_text(matches[0])})
    false = []
    transient = []
    allowed = scenario.transients(ctx)
    for key, f in seen.items():
        if key in matched_ids:
            continue
        # Partial views on other subjects while the picture completes are tolerated when the
        # scenario names them and they are gone by the end; anything else is a false finding
        # (also one matching an expectation's subject but raised before the fault).
        onset = int(f.get("onset_unix_nanos", 0))
        cleared = int(f.get("cleared_unix_nanos", 0) or 0)
        if (any(a.same_subject(f) for a in allowed) and cleared != 0 and
                (fault_start_ns is None or onset >= fault_start_ns)):
            transient.append(f)
            continue
        false.append(f)
    ok = ok and not false
    checks = []
    for description, passed, detail in scenario.checks(ctx):
        checks.append({"check": description, "ok": passed, "detail": detail})
        ok = ok and passed
    return {"scenario": scenario.name, "mode": harness.mode, "mode_note": harness.mode_note,
            "fabric": harness.cluster.fabric, "nodes": len(harness.cluster.nodes),
            "interval_ms": harness.interval_ms, "rows": rows,
            "false": [scenarios_mod.finding_text(f) + "  [" + f.get("summary", "") + "]"
                      for f in false],
            "transient": [scenarios_mod.finding_text(f) for f in transient],
            "checks": checks, "ok": ok, "steps": [(label, vis) for _, label, vis in step_log]}


def print_table(result, scenario, elapsed, out=print):
    out("== scenario %s  [%s: %s]" % (result["scenario"], result["mode"], result["mode_note"]))
    out("   %s" % scenario.summary)
    out("   cluster: %d nodes, %s fabric; agent interval %d ms" %
        (result["nodes"], result["fabric"].upper(), result["interval_ms"]))
    width = max([len(r["expected"]) for r in result["rows"]] + [40])
    out("   %-*s  %-5s  %-18s  %s" % (width, "EXPECTED", "FOUND", "DELAY (intervals)", "BUDGET"))
    if not result["rows"]:
        out("   %-*s  %-5s  %-18s  %s" % (width, "(no finding)", "-", "-", "-"))
    for r in result["rows"]:
        if r["delay"] is None:
            delay = "-"
        else:
            delay = "%.2f%s" % (r["delay"], " EARLY" if r.get("early") else
                                ("" if r.get("in_budget") else " LATE"))
        out("   %-*s  %-5s  %-18s  %.1f%s" % (width, r["expected"], "yes" if r["found"] else "NO",
                                           delay, r["budget"],
                                           ("  (%s)" % r["note"]) if r.get("note") else ""))
    if result["false"]:
        out("   FALSE FINDINGS (%d):" % len(result["false"]))
        for text in result["false"]:
            out("     - %s" % text)
    else:
        out("   FALSE FINDINGS: none")
    if result.get("transient"):
        out("   transient partial views, cleared once the whole fault was visible: %s"
            % "; ".join(result["transient"]))
    for c in result["checks"]:
        out("   CHECK %-60s %s%s" % (c["check"], "ok" if c["ok"] else "FAILED",
                                     ("  " + c["detail"]) if c["detail"] else ""))
    out("   RESULT: %s (%.1f s)" % ("PASS" if result["ok"] else "FAIL", elapsed))


def _incidents(findings):
    """(kind, subject, severity) of each finding, as comparable text."""
    return sorted(set(
        (f.get("kind", ""), json.dumps(f.get("subject", {}), sort_keys=True),
         f.get("severity", "")) for f in findings))


def check_replay(harness, live, out=print):
    """Replays the aggregator's recording of the run just played (twice) and compares: the
    findings the replay raises (kind, subject, severity) must be those the live aggregator
    raised, and the two replays' output byte-identical. Returns a list of failures."""
    argv = [harness.bins.cli, "replay", harness.recording_dir(),
            "--config=" + harness.aggregator_config(), "--link_list=" + harness.link_list(),
            "--json"]
    runs = []
    for _ in range(2):
        t = time.time()
        result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        if result.returncode != 0:
            return ["fabricmon replay exited %d: %s" % (result.returncode,
                                                        result.stderr.decode(errors="replace"))]
        runs.append((result.stdout, time.time() - t))
    failures = []
    if runs[0][0] != runs[1][0]:
        failures.append("two replays of the same recording printed different timelines")
    # `fabricmon record export` of the whole recording replays to the same timeline.
    exported = os.path.join(harness.root, "export.fmrec")
    with open(exported, "wb") as f:
        result = subprocess.run([harness.bins.cli, "record", "export",
                                 "--dir=" + harness.recording_dir(), "--from=0",
                                 "--to=4102444800"], stdout=f, stderr=subprocess.PIPE, timeout=60)
    if result.returncode != 0:
        failures.append("fabricmon record export exited %d: %s"
                        % (result.returncode, result.stderr.decode(errors="replace")))
    else:
        again = subprocess.run([argv[0], "replay", exported] + argv[3:], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=120)
        if again.returncode != 0 or again.stdout != runs[0][0]:
            failures.append("the replay of `fabricmon record export` of the whole recording "
                            "differs from the replay of the directory")
    doc = json.loads(runs[0][0])
    summary = doc.get("summary", {})
    # The last version of each incident the replay raised (a later escalation replaces it).
    last = {}
    for event in doc.get("events", []):
        last[event["finding"].get("id")] = event["finding"]
    replayed = _incidents(last.values())
    expected = _incidents(live)
    out("   REPLAY %d records, %d samples, %d ticks in %.2f s: %d incidents (live %d)%s"
        % (summary.get("records", 0), summary.get("samples", 0), summary.get("ticks", 0),
           runs[0][1], len(replayed), len(expected),
           "" if replayed == expected else "  MISMATCH"))
    if summary.get("refused_messages", 0) != 0:
        failures.append("the replay refused %d recorded messages" % summary["refused_messages"])
    if summary.get("samples", 0) == 0:
        failures.append("the recording holds no samples")
    if replayed != expected:
        only_live = [i for i in expected if i not in replayed]
        only_replay = [i for i in replayed if i not in expected]
        failures.append("findings differ: live only %s; replay only %s" % (only_live, only_replay))
    return failures


def _nodes_named(value, out):
    """Every string under a "node" key (subjects, victims, evidence) of a finding."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "node" and isinstance(item, str):
                out.add(item)
            else:
                _nodes_named(item, out)
    elif isinstance(value, list):
        for item in value:
            _nodes_named(item, out)
    return out


def _replay_json(harness, recording, config, links):
    result = subprocess.run([harness.bins.cli, "replay", recording, "--config=" + config,
                             "--link_list=" + links, "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, timeout=120)
    if result.returncode != 0:
        raise RuntimeError("fabricmon replay of %s exited %d: %s"
                           % (recording, result.returncode,
                              result.stderr.decode(errors="replace")))
    return result.stdout


def _replayed_incidents(doc):
    last = {}
    for event in json.loads(doc).get("events", []):
        last[event["finding"].get("id")] = event["finding"]
    return _incidents(last.values())


def save_recording(harness, dest, live, quiet_nodes=None, out=print):
    """Keeps a passed run's recording as a regression fixture (tests/replay/<scenario>/):
    recording.fmrec.xz (`fabricmon record export`, xz-compressed: the export is the wire
    encoding uncompressed), the detectors' configuration it ran with, the link list, and
    expected.json, what `fabricmon replay --json` prints for them. To stay small, only the nodes
    the live findings name are exported (with no finding: `quiet_nodes`, or every node when
    None), provided the replay of that still raises what the live aggregator raised; else every
    node is kept.
    Returns a list of failures."""
    os.makedirs(dest, exist_ok=True)
    config = os.path.join(dest, "aggregator.textproto")
    links = os.path.join(dest, "links.txt")
    # Only what the replay reads: the detectors and the staleness bound (no ports, no paths).
    with open(config, "w") as f:
        f.write("# Written by tests/replay/regenerate.sh: what the live aggregator ran with.\n"
                "node_stale_after_ms: 10000\n"
                "detectors { tick_ms: %d %s }\n" % (harness.tick_ms, harness.detectors))
    shutil.copyfile(harness.link_list(), links)
    nodes = sorted(_nodes_named(list(live), set()) or quiet_nodes or [])
    exported = os.path.join(harness.root, "fixture.fmrec")
    for selection in ([nodes] if nodes else []) + [None]:
        argv = [harness.bins.cli, "record", "export", "--dir=" + harness.recording_dir(),
                "--from=0", "--to=4102444800"]
        if selection:
            argv.append("--nodes=" + ",".join(selection))
        with open(exported, "wb") as f:
            result = subprocess.run(argv, stdout=f, stderr=subprocess.PIPE, timeout=60)
        if result.returncode != 0:
            return ["fabricmon record export exited %d: %s"
                    % (result.returncode, result.stderr.decode(errors="replace"))]
        try:
            timeline = _replay_json(harness, exported, config, links)
        except RuntimeError as e:
            return [str(e)]
        if _replayed_incidents(timeline) == _incidents(live):
            break
        out("   (the recording of nodes %s alone does not replay to the live findings: "
            "keeping every node)" % ",".join(selection or []))
    else:
        return ["the saved recording does not replay to the live findings"]
    with open(exported, "rb") as f:
        compressed = lzma.compress(f.read(), preset=9 | lzma.PRESET_EXTREME)
    with open(os.path.join(dest, "recording.fmrec.xz"), "wb") as f:
        f.write(compressed)
    with open(os.path.join(dest, "expected.json"), "wb") as f:
        f.write(timeline)
    out("   SAVED %s (%s; %d bytes of recording, %d compressed)"
        % (dest, "nodes " + ",".join(selection) if selection else "every node",
           os.path.getsize(exported), len(compressed)))
    return []


def run_scenario(build_dir, name, mode="auto", keep=False, out=print, report=None, results=None,
                 replay=False, save_recording_dir=None):
    """Runs one scenario end to end. mode: auto (ibsim when the scenario prefers it and it
    works), sysfs, or ibsim (required: exit SKIP when unavailable). replay: the aggregator
    records the run, which is then replayed offline (check_replay). save_recording_dir (with
    replay): a passed run's recording and its expected timeline are kept in
    <save_recording_dir>/<scenario>/ (save_recording). Returns an exit status; appends the result
    to `results` when given."""
    bins = Binaries(build_dir)
    missing = bins.missing()
    if missing:
        out("fabric_sim: missing build outputs: %s" % ", ".join(missing))
        return 1
    scenario = scenarios_mod.BY_NAME[name]()
    want_ibsim = mode == "ibsim" or (mode == "auto" and scenario.prefers_ibsim)
    t0 = time.time()
    install_signal_handlers()
    # Detectors tick at half the sampling interval: a fault sampled just after a tick is then
    # evaluated within half an interval, so the 2-interval target holds for any sampling phase.
    harness = Harness(bins, fabric=scenario.fabric, nodes=scenario.nodes, want_ibsim=want_ibsim,
                      keep=keep, log=out, interval_ms=500, tick_ms=250, record=replay)
    try:
        scenario.baseline(Context(harness))
        harness.start()
        if mode == "ibsim" and harness.mode != "ibsim":
            if harness.ibsim_missing:
                out("== scenario %s: SKIPPED: ibsim mode required but %s" %
                    (name, harness.mode_note))
                return SKIP
            # ibsim is installed: not sweeping it is the product failing, not a missing tool.
            out("== scenario %s: FAILED: ibsim mode required but %s" % (name, harness.mode_note))
            return 1
        harness.wait_ready()
        result = play(harness, scenario, out=out)
        if replay:
            # The agents end first, so that the recording ends where the live findings were
            # last read; the aggregator's recorder writes within milliseconds.
            harness.stop_agents()
            live = harness.findings(include_cleared=True)
            time.sleep(1.0)
            failures = check_replay(harness, live, out=out)
            result["checks"].append({"check": "replay of the recording finds what the live "
                                              "aggregator found", "ok": not failures,
                                     "detail": "; ".join(failures)})
            result["ok"] = result["ok"] and not failures
            if result["ok"] and save_recording_dir:
                failures = save_recording(harness, os.path.join(save_recording_dir, name), live,
                                          quiet_nodes=scenario.recorded_nodes, out=out)
                result["checks"].append({"check": "the recording was saved with its timeline",
                                         "ok": not failures, "detail": "; ".join(failures)})
                result["ok"] = not failures
        result["elapsed_s"] = time.time() - t0
        print_table(result, scenario, time.time() - t0, out=out)
        if results is not None:
            results.append(result)
        if report:
            with open(report, "w") as f:
                json.dump(result, f, indent=1)
        if not result["ok"] and keep:
            out("   (kept %s)" % harness.root)
        return 0 if result["ok"] else 1
    except RuntimeError as e:
        out("== scenario %s: ERROR: %s" % (name, e))
        return 1
    except KeyboardInterrupt:
        out("== scenario %s: interrupted" % name)
        return 130
    finally:
        harness.stop()


def main_run(args):
    names = args.scenario or [s.name for s in scenarios_mod.ALL]
    status = 0
    for name in names:
        if name not in scenarios_mod.BY_NAME:
            print("unknown scenario %r (have: %s)" % (name, ", ".join(scenarios_mod.BY_NAME)))
            return 2
    results = []
    for name in names:
        rc = run_scenario(args.build_dir, name, mode=args.mode, keep=args.keep,
                          report=args.report, results=results,
                          replay=getattr(args, "replay", False),
                          save_recording_dir=getattr(args, "save_recording", None))
        sys.stdout.flush()
        if rc == SKIP and len(names) == 1:
            return SKIP
        if rc not in (0, SKIP):
            status = 1
    if len(results) > 1:
        print("== %d scenarios" % len(results))
        print("   %-20s %-6s %-7s %-9s %-6s %s" % ("SCENARIO", "MODE", "RESULT", "EXPECTED",
                                                 "FALSE", "MAX DELAY (intervals)"))
        for r in results:
            delays = [row["delay"] for row in r["rows"] if row["delay"] is not None]
            found = sum(1 for row in r["rows"] if row["found"])
            print("   %-20s %-6s %-7s %-9s %-6d %s" % (
                r["scenario"], r["mode"], "PASS" if r["ok"] else "FAIL",
                "%d/%d" % (found, len(r["rows"])), len(r["false"]),
                "%.2f" % max(delays) if delays else "-"))
    return status
