"""The InfiniBand side of the simulated fabric: ibsim serving the cluster's topology, opensm run
once so every port is Active with a LID, and the switch-port counters scenarios drive through
ibsim's console (PerformanceSet), which the ib_fabric collector then reads by real PMA MADs.

Switch counters advance in steps of STEP_S from a thread of their own, each step one console
line (`!file`: ibsim runs the whole file in one pass of its loop, between two MADs). Counters on
hardware move continuously; here they move in steps, and the sweep reads a port's XmitData
(PortCountersExtended) and XmitWait (PortCounters) with two MADs that ibsim answers at different
moments. When a sweep interval holds no step for a port but a step landed between that port's
two MADs at one end of it, the interval shows wait and no data: a busy, healthy port "waiting
100 % of the time". Steps must therefore come much more often than sweeps and never wait on the
harness. On the playback loop they came every 200 ms only when nothing else ran: behind a
`fabricmon findings` poll (~0.35 s on a loaded 2-core machine) the gap reached 0.55 s, longer
than the 0.5 s sweep interval, and such straddled intervals raised false congestion findings
(the incast_congestion_ibsim flake). One line per step also means no MAD sees half of a step.

Clients (opensm, the sweeping agent) reach the simulator through LD_PRELOAD=libumad2sim.so with
IBSIM_SOCKNAME naming this simulator's socket (unique per instance, so runs never share one) and
SIM_HOST naming the node they attach to. umad2sim writes a fake sysfs into the client's working
directory, so each client runs in a directory of its own. In front of umad2sim every client
preloads tests/sim/ibsim/umad2sim_close_fix.c: umad2sim's close() of a umad fd releases only one
of the fd's agents (of 32 per process), so a sweeper that rediscovers after port state changes
ran out of agents after a dozen rediscoveries; with the fix, close() releases them all, as the
kernel does.

Python 3 standard library only.
"""

import os
import shutil
import subprocess
import threading
import time

import fabricmon_testing as fmt  # on sys.path through __init__.py

UMAD2SIM = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"
MAX32 = (1 << 32) - 1


def available():
    """(True, "") when ibsim, opensm and umad2sim are installed, else (False, why)."""
    for tool in ("ibsim", "opensm"):
        if shutil.which(tool) is None:
            return False, "%s not installed" % tool
    if not os.access(UMAD2SIM, os.R_OK):
        return False, "%s missing (ibsim-utils)" % UMAD2SIM
    return True, ""


class Ibsim:
    def __init__(self, net_file, directory, on_spawn=None, preload=()):
        self.dir = directory
        self.preload = " ".join(list(preload) + [UMAD2SIM])  # the fix in front of umad2sim
        os.makedirs(directory, exist_ok=True)
        self.socket = "fsim%dx%d" % (os.getpid(), int(time.time() * 1000) % 10**7)
        self.log_path = os.path.join(directory, "ibsim.log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            ["ibsim", "-s", net_file], stdin=subprocess.PIPE, stdout=self._log,
            stderr=open(os.path.join(directory, "ibsim.err"), "w"), cwd=directory,
            env=dict(os.environ, IBSIM_SOCKNAME=self.socket), start_new_session=True,
            preexec_fn=fmt.die_with_parent)
        if on_spawn is not None:
            on_spawn(self.proc.pid)
        self.switch_counters = {}  # (switch, port) → {"data": words, "wait": ticks, ...}
        self.rates = {}            # (switch, port) → (data words/s, wait ticks/s)
        self.link_downed = {}
        # The console (ibsim's stdin and the prompts in its log) and the counters are shared by
        # the stepping thread and the scenario's steps: one lock for both.
        self._lock = threading.RLock()
        self._stepping = threading.Event()
        self._stepper = None
        self._last_step = None
        self.step_error = None  # why the stepping thread stopped, for the harness to report
        deadline = time.time() + 20
        while self._prompts() == 0:
            if self.proc.poll() is not None:
                raise RuntimeError("ibsim exited at start: %s" % self._read_log()[-2000:])
            if time.time() > deadline:
                raise RuntimeError("ibsim not ready within 20 s")
            time.sleep(0.02)

    def _read_log(self):
        try:
            with open(self.log_path) as f:
                return f.read()
        except OSError:
            return ""

    def _prompts(self):
        return self._read_log().count("sim> ")

    def client_env(self, sim_host=None):
        env = {"LD_PRELOAD": self.preload, "IBSIM_SOCKNAME": self.socket,
               "OSM_TMP_DIR": self.dir, "OSM_CACHE_DIR": self.dir}
        if sim_host:
            env["SIM_HOST"] = sim_host
        return env

    def run_opensm(self, timeout=60):
        log = os.path.join(self.dir, "opensm.log")
        result = subprocess.run(["opensm", "-o", "-f", log], cwd=self.dir,
                                env=dict(os.environ, **self.client_env()),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError("opensm exited %d (log %s)" % (result.returncode, log))

    def console(self, *commands, timeout=5.0):
        """Sends console commands (pipelined) and waits for ibsim's prompt after each; returns
        the replies. RuntimeError when ibsim rejects one ("# ..." answers)."""
        with self._lock:
            return self._console_locked(commands, timeout)

    def _console_locked(self, commands, timeout):
        with open(self.log_path, "rb") as f:
            f.seek(0, os.SEEK_END)  # the previous command's prompt is already in the log
            self.proc.stdin.write("".join(c + "\n" for c in commands).encode())
            self.proc.stdin.flush()
            deadline = time.time() + timeout
            reply = b""
            while reply.count(b"sim> ") < len(commands):
                chunk = f.read()
                if chunk:
                    reply += chunk
                    continue
                if time.time() > deadline:
                    raise RuntimeError("ibsim did not answer %r" % (commands,))
                time.sleep(0.001)
        reply = reply.decode(errors="replace")
        if reply.startswith("# ") or "\n# " in reply or "sim> # " in reply:
            raise RuntimeError("ibsim rejected %r: %s" % (commands, reply.strip()[:500]))
        return reply

    # -------------------------------------------------------------------------------------
    # Switch counters the scenarios drive.

    def _link_downed_command(self, switch, port):
        value = min(255, self.link_downed.get((switch, port), 0) + 1)
        self.link_downed[(switch, port)] = value
        return 'PerformanceSet "%s"[%d] PortCounters.LinkDownedCounter=%d' % (switch, port, value)

    def bump_link_downed(self, switch, port):
        """The switch end of a cable that went down: LinkDownedCounter +1 (8 bits, saturates)."""
        with self._lock:
            self.console(self._link_downed_command(switch, port))

    def cable_down(self, switch, port):
        """The cable at a switch port goes down: Unlink (both ports Down/Polling in ibsim) and
        LinkDownedCounter +1 on the switch port, in one go: on hardware the counter counts the
        link going down, so no sweep may see the port Down with its counter not yet moved (the
        flap detector would count the state change and the counter's rise as two events)."""
        with self._lock:
            self._run_file_locked("cable.cmds", ['Unlink "%s"[%d]' % (switch, port),
                                                 self._link_downed_command(switch, port)])

    def cable_up(self, switch, port):
        """ReLink, then one opensm sweep: a relinked port stays in Initialize until an SM arms
        and activates it (LIDs are kept: opensm's guid2lid cache is in this directory)."""
        self.console('ReLink "%s"[%d]' % (switch, port))
        self.run_opensm()

    # PortXmitWait is 32 bits and saturates (IBA); at real switch rates a congested port pins
    # it within seconds, after which it shows nothing (see the saturated_counter scenario). The
    # simulated switch ports therefore count 1/16 of the bytes they carry: the detectors use the
    # unit-free ratio wait / (wait + data), and a congestion tree stays measurable for a minute.
    SWITCH_SCALE = 1.0 / 16

    def set_port_rate(self, switch, port, data_bytes_per_s, wait_fraction):
        words = data_bytes_per_s * self.SWITCH_SCALE / 4
        f = min(wait_fraction, 0.99)
        with self._lock:
            self.rates[(switch, port)] = (words, words * f / (1 - f))
            self.switch_counters.setdefault((switch, port), {"data": 10**12, "wait": 1000,
                                                             "frac": [0.0, 0.0]})

    def healthy_traffic(self, cluster):
        """Busy, healthy switch ports: ~10 GB/s out of every cabled port, XmitWait 0.1 %. Set
        from the start, so that a scenario's change continues the counters instead of jumping
        them (a first PerformanceSet from ibsim's own tiny MAD counts would read as a burst)."""
        with self._lock:  # every port changes in the same step
            self._catch_up_locked()
            for name, sw in cluster.switches.items():
                for port in sw.peers:
                    self.set_port_rate(name, port, 10.0e9, 0.001)

    def start_incast(self, cluster, senders, target):
        """Credit back-pressure of an incast into `target`, on every switch port of its path:
        the uplinks of the senders' leaves (to every spine, ECMP), every spine's port toward the
        target's leaf, and the target leaf's port toward the target (the root: it waits on the
        slow receiver)."""
        target_port = cluster.port(target)
        spines = cluster.spine_names()
        per_leaf = {}
        for node in senders:
            hp = cluster.port(node)
            per_leaf[hp.leaf] = per_leaf.get(hp.leaf, 0) + 1
        per_sender = 0.25e9  # bytes/s each sender still gets through
        total = per_sender * len(senders)
        with self._lock:  # every port of the path changes in the same step
            self._catch_up_locked()
            self._incast_locked(cluster, per_leaf, spines, target_port, per_sender, total)

    def _incast_locked(self, cluster, per_leaf, spines, target_port, per_sender, total):
        for leaf, count in per_leaf.items():
            if leaf == target_port.leaf:
                continue
            for spine in spines:
                up, _ = cluster.uplink(leaf, spine)
                self.set_port_rate(leaf, up, per_sender * count / len(spines), 0.8)
        for spine in spines:
            _, down = cluster.uplink(target_port.leaf, spine)
            self.set_port_rate(spine, down, total / len(spines), 0.8)
        self.set_port_rate(target_port.leaf, target_port.leaf_port, total, 0.85)

    def end_incast(self, cluster):
        self.healthy_traffic(cluster)

    STEP_S = 0.05  # 10 steps per 0.5 s sampling interval (see the module comment)

    def start_stepping(self):
        """Starts advancing the driven switch counters every STEP_S from a thread of its own."""
        with self._lock:
            self._step_locked()
        self._stepper = threading.Thread(target=self._step_loop, name="ibsim-steps", daemon=True)
        self._stepper.start()

    def _step_loop(self):
        while not self._stepping.wait(self.STEP_S):
            try:
                with self._lock:
                    self._step_locked()
            except (OSError, RuntimeError) as e:
                self.step_error = str(e)  # frozen switch counters would fail the scenario late
                return

    def _catch_up_locked(self):
        """Before rates change: the time since the last step ran at the old rates."""
        if self._last_step is not None:
            self._step_locked()

    def _step_locked(self):
        """Advances the driven switch counters by the time since the last step (rates x elapsed,
        so the counters are continuous whatever the thread's jitter) and pushes them to ibsim as
        one console line that runs a command file."""
        now = time.monotonic()
        dt = 0.0 if self._last_step is None else now - self._last_step
        self._last_step = now
        commands = []
        for key, (words, wait) in self.rates.items():
            c = self.switch_counters[key]
            c["frac"][0] += words * dt
            c["frac"][1] += wait * dt
            dw, ww = int(c["frac"][0]), int(c["frac"][1])
            c["frac"][0] -= dw
            c["frac"][1] -= ww
            c["data"] += dw
            c["wait"] = min(MAX32, c["wait"] + ww)
            switch, port = key
            commands.append('PerformanceSet "%s"[%d] PortCountersExtended.PortXmitData=%d'
                            % (switch, port, c["data"]))
            commands.append('PerformanceSet "%s"[%d] PortCounters.PortXmitWait=%d'
                            % (switch, port, c["wait"]))
        if commands:
            self._run_file_locked("step.cmds", commands)

    def _run_file_locked(self, name, commands):
        """Runs `commands` as one console line (`!name`): ibsim runs the file when it reads that
        line, in one pass of its loop, so no MAD is answered between two of them. The file is
        in ibsim's directory and named relative to it (ibsim reads console lines of up to 127
        characters)."""
        with open(os.path.join(self.dir, name), "w") as f:
            f.write("".join(c + "\n" for c in commands))
        self._console_locked(("!" + name,), 5.0)

    def stop(self):
        self._stepping.set()
        if self._stepper is not None:
            self._stepper.join(timeout=10)
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b"Quit\n")
                self.proc.stdin.flush()
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except OSError:
                pass
            self.proc.wait()
        self._log.close()
