"""Fault scenarios: what changes when, and which findings must (and must not) follow.

A scenario runs on a generated cluster (fabric "ib" or "roce", 16 nodes by default) after a
healthy baseline. It lists timed steps relative to the fault's start; a step marked `visible`
records the moment its change reached the files (the fault becoming visible in the counters): the
detection delay is measured from there to the finding's onset. It states the findings that must
appear (kind, subject, peer, root and victims for spreading) and, implicitly, that nothing else
fires: every other finding seen at any time is a false finding.

Modes: "sysfs" (host counters only: sysfs, procfs, ethtool capture directory, NVML stand-in) and
"ibsim" (additionally an ibsim fabric whose switch ports the ib_fabric collector sweeps by MADs;
the scenario then also drives switch counters through ibsim's console). Scenarios that gain
from switch data ask for ibsim (`prefers_ibsim`) and fall back to sysfs mode when ibsim or the
ib_fabric collector is not available; the report says which mode ran.

Python 3 standard library only.
"""

MAX32 = (1 << 32) - 1


class Expect:
    """A finding that must appear.

    kind: finding kind. node/device/port: the subject (a switch port: node = switch name,
    switch=True). gpu/link: NVLink subjects. peer: (node, device, port) of the cable's other end
    when topology must know it; the finding may name either end as subject. victims: minimum
    number of victims (spreading); victim_nodes: hosts that must be among the victims; depth:
    minimum depth in hops. extra_budget: detection delay the detector needs by design on top of
    the 2-interval budget (e.g. pause_storm wants 3 consecutive paused intervals), in intervals.
    """

    def __init__(self, kind, node, device="", port=0, gpu=None, link=None, peer=None,
                 victims=0, victim_nodes=(), depth=0, extra_budget=0.0, note=""):
        self.kind = kind
        self.node = node
        self.device = device
        self.port = port
        self.gpu = gpu
        self.link = link
        self.peer = peer
        self.victims = victims
        self.victim_nodes = tuple(victim_nodes)
        self.depth = depth
        self.extra_budget = extra_budget
        self.note = note

    def subject_text(self):
        if self.gpu is not None:
            text = "%s gpu%d link%d" % (self.node, self.gpu, self.link)
        elif self.device or self.port:
            text = "%s %s/%d" % (self.node, self.device, self.port) if self.device else \
                "switch %s/%d" % (self.node, self.port)
        else:
            text = self.node
        if self.peer:
            text += " <-> %s" % _endpoint_text(self.peer)
        return text

    def describe(self):
        text = "%s %s" % (self.kind, self.subject_text())
        if self.victims or self.depth:
            text += " (>=%d victims, depth>=%d)" % (self.victims, self.depth)
        return text

    def same_subject(self, finding):
        """Kind and subject match (victims and depth aside): the expected finding, or an
        earlier, partial view of it (a spreading tree whose victims are still being reported)."""
        if finding.get("kind") != self.kind:
            return False
        if self.gpu is not None:
            return self.matches(finding)
        subject = _subject(finding.get("subject", {}))
        mine = (self.node, self.device, self.port)
        return subject == mine or (self.peer is not None and subject == tuple(self.peer))

    def matches(self, finding):
        if finding.get("kind") != self.kind:
            return False
        subject = _subject(finding.get("subject", {}))
        peer = _peer(finding.get("subject", {}))
        mine = (self.node, self.device, self.port)
        if self.gpu is not None:
            s = finding.get("subject", {})
            return (s.get("node") == self.node and bool(s.get("has_gpu")) and
                    int(s.get("gpu", 0)) == self.gpu and int(s.get("link", 0)) == self.link)
        if subject == mine:
            if self.peer and peer != tuple(self.peer):
                return False
        elif self.peer and subject == tuple(self.peer) and peer == mine:
            pass  # the same cable, named from its other end
        else:
            return False
        victims = finding.get("victims", [])
        if len(victims) < self.victims or int(finding.get("depth_hops", 0)) < self.depth:
            return False
        victim_hosts = {v.get("node") for v in victims}
        return all(n in victim_hosts for n in self.victim_nodes)


def _endpoint_text(e):
    node, device, port = e
    return "%s %s/%d" % (node, device, port) if device else "switch %s/%d" % (node, port)


def _subject(s):
    if s.get("is_switch"):  # a switch port: the switch is the subject's device, no node
        return (s.get("device", ""), "", int(s.get("port", 0)))
    return (s.get("node", ""), s.get("device", ""), int(s.get("port", 0)))


def _peer(s):
    if s.get("peer_is_switch"):
        return (s.get("peer_device", ""), "", int(s.get("peer_port", 0)))
    return (s.get("peer_node", ""), s.get("peer_device", ""), int(s.get("peer_port", 0)))


def finding_text(f):
    s = f.get("subject", {})
    if s.get("has_gpu"):
        subject = "%s gpu%s link%s" % (s.get("node"), s.get("gpu", 0), s.get("link", 0))
    else:
        node, device, port = _subject(s)
        subject = ("%s %s/%d" % (node, device, port) if device else
                   ("switch %s/%d" % (node, port) if port else node))
    peer = _peer(s)
    if peer[0]:
        subject += " <-> " + _endpoint_text(peer)
    text = "%s %s" % (f.get("kind"), subject)
    if f.get("victims"):
        text += " (%d victims, depth %s)" % (len(f["victims"]), f.get("depth_hops", 0))
    return text


class Step:
    def __init__(self, at, action, visible=False, label=""):
        self.at = at            # seconds after the fault starts
        self.action = action    # callable(ctx)
        self.visible = visible  # the fault is visible in the counters once this step is written
        self.label = label


def outside_ticks(action):
    """Marks a step action that leaves the counter model alone and may block (a `fabricmon job
    start` call): it runs without the ticker's lock, so that the counters keep moving while it
    waits for the aggregator (a tick held back ~0.3 s leaves a sampling interval without one)."""
    action.outside_ticks = True
    return action


class Scenario:
    name = ""
    fabric = "ib"
    nodes = 16         # cluster size (node01..nodeNN)
    # Seconds between two advances of the counter model. A sample holds the traffic of a whole
    # number of ticks: 0.2 s ticks make a 0.5 s interval read 0.4 or 0.6 s of it (+-20 %), noise
    # that thresholds far from the healthy values ignore; scenarios that compare rates across
    # nodes (stragglers) tick every 50 ms (+-5 %; ~5 ms of CPU per tick for 20 nodes).
    tick_s = 0.2
    prefers_ibsim = False
    summary = ""
    observe_s = 4.0    # after the last visible step: time to wait for the findings
    tail_s = 1.0       # after everything was found: keep watching for false findings
    # A recorded regression fixture (tests/replay) keeps the nodes the findings name; a scenario
    # that must raise nothing names here the nodes whose recording shows it (None: every node).
    recorded_nodes = None

    def baseline(self, ctx):
        """Changes to the healthy cluster before the agents start (e.g. pinned counters)."""

    def steps(self, ctx):
        return []

    def expect(self, ctx):
        return []

    def transients(self, ctx):
        """Findings that may show up while the fault's picture is still incomplete (partial
        views of an expected finding on other subjects), provided they are gone by the end."""
        return []

    def checks(self, ctx):
        """Extra checks after the run: [(description, ok, detail)]."""
        return []


# ---------------------------------------------------------------------------------------------
# Helpers that act on the simulation and, in ibsim mode, on the switch end of the cable.


def _leaf_of(ctx, node, device="mlx5_0"):
    hp = ctx.cluster.port(node, device)
    return hp.leaf, hp.leaf_port


def _down(ctx, node, device="mlx5_0"):
    ctx.sim.link_down(node, device)
    if ctx.ibsim is not None:
        leaf, port = _leaf_of(ctx, node, device)
        ctx.ibsim.cable_down(leaf, port)


def _up(ctx, node, device="mlx5_0"):
    ctx.sim.link_up(node, device)
    if ctx.ibsim is not None:
        leaf, port = _leaf_of(ctx, node, device)
        ctx.ibsim.cable_up(leaf, port)


def _blip(ctx, node, device="mlx5_0"):
    ctx.sim.blip(node, device)
    if ctx.ibsim is not None:
        leaf, port = _leaf_of(ctx, node, device)
        ctx.ibsim.bump_link_downed(leaf, port)


# ---------------------------------------------------------------------------------------------


class HealthyBusy(Scenario):
    name = "healthy_busy"
    recorded_nodes = ("node01", "node02", "node03", "node04")
    summary = ("all 16 nodes train at ~10 GB/s RDMA each way, little kernel TCP, GPUs 90 % busy, "
               "normal XmitWait: no finding may fire")
    observe_s = 6.0

    def steps(self, ctx):
        # A burst of heavier (but healthy) traffic halfway: busy is not broken.
        def burst(c):
            for node in c.sim.nodes.values():
                for port in node.ports.values():
                    port.tx_bps *= 1.8
                    port.rx_bps *= 1.8
        return [Step(0.0, burst, visible=True, label="traffic x1.8 on every node")]


class SingleFlap(Scenario):
    name = "single_flap"
    recorded_nodes = ("node03",)
    summary = ("node03's HCA link goes down once for ~1 s and comes back: one event is not "
               "flapping (flap_transitions 2), so nothing may fire")
    observe_s = 5.0

    def steps(self, ctx):
        return [Step(0.0, lambda c: _down(c, "node03"), visible=True, label="node03 link down"),
                Step(1.1, lambda c: _up(c, "node03"), label="node03 link up")]


class FlappingLink(Scenario):
    name = "flapping_link"
    prefers_ibsim = True
    summary = ("node05's HCA link goes down and up three times in 6 s (down ~0.9 s each, long "
               "enough for the state to be sampled): one link_flapping finding for the cable "
               "node05 mlx5_0/1 <-> its leaf port")

    def steps(self, ctx):
        steps = []
        for i, t in enumerate((0.0, 2.2, 4.4)):
            steps.append(Step(t, lambda c: _down(c, "node05"), visible=(i == 1),
                              label="node05 link down #%d" % (i + 1)))
            steps.append(Step(t + 0.9, lambda c: _up(c, "node05"), label="node05 link up"))
        return steps

    def expect(self, ctx):
        leaf, port = _leaf_of(ctx, "node05")
        return [Expect("link_flapping", "node05", "mlx5_0", 1, peer=(leaf, "", port))]


class RoceFlappingLink(Scenario):
    name = "roce_flapping_link"
    fabric = "roce"
    summary = ("RoCE: node03's port flaps three times in 6 s. Three collectors see each flap: "
               "ethtool link_down_events_phy, the netdev's carrier_down_count and the port state "
               "in sysfs, each on its own schedule; the link list names the port by its netdev "
               "(node03/eth1). One link_flapping finding for node03 mlx5_0/1 <-> its leaf port, "
               "not before the second flap")

    def steps(self, ctx):
        steps = []
        for i, t in enumerate((0.0, 2.2, 4.4)):
            steps.append(Step(t, lambda c: _down(c, "node03"), visible=(i == 1),
                              label="node03 link down #%d" % (i + 1)))
            steps.append(Step(t + 0.9, lambda c: _up(c, "node03"), label="node03 link up"))
        return steps

    def expect(self, ctx):
        leaf, port = _leaf_of(ctx, "node03")
        return [Expect("link_flapping", "node03", "mlx5_0", 1, peer=(leaf, "", port))]


class SubIntervalFlap(Scenario):
    name = "subinterval_flap"
    summary = ("node07's link flaps twice, each time down and up between two reads (~50 ms): the "
               "port state never shows it, only LinkDowned and the IPoIB carrier_down_count do; "
               "link_flapping must still be found (edge-exact from counters)")

    def steps(self, ctx):
        return [Step(0.0, lambda c: _blip(c, "node07"), label="node07 blip #1"),
                Step(1.6, lambda c: _blip(c, "node07"), visible=True, label="node07 blip #2")]

    def expect(self, ctx):
        leaf, port = _leaf_of(ctx, "node07")
        return [Expect("link_flapping", "node07", "mlx5_0", 1, peer=(leaf, "", port))]


class IncastCongestion(Scenario):
    name = "incast_congestion"
    prefers_ibsim = True
    summary = ("six senders on three other leaves (node05,06 / node09,10 / node13,14) all write "
               "to node01: their HCAs wait for credits (6:1 incast: XmitWait ~85 % of wait+data "
               "while data drops to ~0.25 GB/s). ibsim mode: the switch ports on the path wait too (leaf "
               "uplinks, both spines toward leaf01, leaf01's port toward node01): one "
               "congestion_spreading tree rooted at leaf01's port to node01, 3 hops deep, with "
               "the senders among its victims. sysfs mode (no switch counters): one congestion "
               "finding per sender HCA")
    senders = ("node05", "node06", "node09", "node10", "node13", "node14")
    target = "node01"

    def steps(self, ctx):
        def start(c):
            for node in self.senders:
                port = c.sim.port(node)
                port.tx_bps = 0.25e9
                port.wait_fraction = 0.85
            target = c.sim.port(self.target)
            target.rx_bps = 6.0e9
            if c.ibsim is not None:
                c.ibsim.start_incast(c.cluster, self.senders, self.target)
        return [Step(0.0, start, visible=True, label="incast to node01 starts")]

    def expect(self, ctx):
        if ctx.ibsim is not None:
            leaf, port = _leaf_of(ctx, self.target)
            return [Expect("congestion_spreading", leaf, "", port, victims=len(self.senders),
                           victim_nodes=self.senders, depth=3)]
        out = []
        for node in self.senders:
            leaf, port = _leaf_of(ctx, node)
            out.append(Expect("congestion", node, "mlx5_0", 1, extra_budget=1.0,
                              note="peer %s/%d; +1: 2 samples (congestion_raise_samples)" %
                              (leaf, port)))
        return out

    def transients(self, ctx):
        # ibsim: a sender's HCA can report its wait one sample before its leaf's uplinks do;
        # until they do, it is plain congestion, then a victim of the tree. Likewise the root
        # itself: in the sample the incast starts in, each port's wait fraction is diluted by
        # the healthy traffic of the rest of the interval; the root (85 % wait, 3x the spines'
        # wait per second; rates in Ibsim.start_incast) crosses the 5 % threshold when ~6 % of
        # the interval was incast, the spines' ports toward leaf01 at ~15 %, the senders'
        # uplinks at ~35 %. A sample taken 6-15 % of the way in shows the root waiting alone:
        # plain congestion on leaf01's port, one sample before the tree rooted there.
        if ctx.ibsim is None:
            return []
        leaf, port = _leaf_of(ctx, self.target)
        return ([Expect("congestion", node, "mlx5_0", 1) for node in self.senders] +
                [Expect("congestion", leaf, "", port)])


class PauseStorm(Scenario):
    name = "pause_storm"
    fabric = "roce"
    summary = ("RoCE: node04's receiver stalls: its NIC sends PFC pause on priority 3 all the time "
               "(tx pause duration ~100 %) and after 0.5 s (the stall's minor watermark) the "
               "NIC's pause-storm watchdog fires (tx_pause_storm_warning_events +1). pause_storm "
               "on node04 mlx5_0/1 (from the watchdog, or after 3 consecutive paused intervals "
               "by design) and the congestion detector's view of the same port (it pauses its "
               "peer 100 % of the time)")

    def steps(self, ctx):
        def stall(c):
            model = c.sim.node("node04").ethtool["eth1"]
            model.pause_fraction["tx"] = 1.0
            port = c.sim.port("node04")
            port.rx_bps = 0.05e9
            port.tx_bps = 0.05e9

        def watchdog(c):
            c.sim.node("node04").ethtool["eth1"].add("tx_pause_storm_warning_events", 1)
        return [Step(0.0, stall, visible=True, label="node04 pauses its switch port"),
                Step(0.5, watchdog, label="node04 pause-storm watchdog")]

    def expect(self, ctx):
        leaf, port = _leaf_of(ctx, "node04")
        return [Expect("pause_storm", "node04", "mlx5_0", 1, extra_budget=1.0,
                       note="+1: the watchdog trips 0.5 s into the stall"),
                Expect("congestion", "node04", "mlx5_0", 1, extra_budget=1.0,
                       note="same port: pauses its peer (%s/%d); +1: 2 samples" % (leaf, port))]


class EcnMisconfigured(Scenario):
    name = "ecn_misconfigured"
    fabric = "roce"
    summary = ("RoCE: node06's reaction point is disabled by configuration drift: CNPs arrive "
               "but rp_cnp_ignored rises (~800/s) instead of rp_cnp_handled: ecn_misconfigured "
               "on node06")

    def steps(self, ctx):
        def drift(c):
            port = c.sim.port("node06")
            port.cc["rp_cnp_ignored"] = 800.0
            port.cc["rp_cnp_handled"] = 0.0
        return [Step(0.0, drift, visible=True, label="node06 ignores CNPs")]

    def expect(self, ctx):
        return [Expect("ecn_misconfigured", "node06", extra_budget=2.0,
                       note="+2: the rule holds for 3 samples (detectors.ecn_ticks)")]


class TcpFallback(Scenario):
    name = "tcp_fallback"
    summary = ("node11's job restarts and comes back on TCP sockets (RDMA init failed): its IB "
               "port data goes flat, 1.5 s later eth0 starts moving ~1.1 GB/s (rx+tx) while its "
               "GPUs stay busy; the 15 other nodes keep ~10 GB/s RDMA each: tcp_fallback on "
               "node11 (after 2 consecutive samples, by design)")

    def steps(self, ctx):
        def restart(c):
            port = c.sim.port("node11")
            port.tx_bps = 0
            port.rx_bps = 0

        def sockets(c):
            eth0 = c.sim.node("node11").netdevs["eth0"]
            eth0.tx_bps = 0.55e9
            eth0.rx_bps = 0.55e9
        return [Step(0.0, restart, label="node11's job restarts: RDMA stops"),
                Step(1.5, sockets, visible=True, label="node11 moves its traffic over TCP")]

    def expect(self, ctx):
        return [Expect("tcp_fallback", "node11", extra_budget=1.0,
                       note="+1: the rule holds for 2 samples (detectors.tcp_fallback_ticks)")]


class NvlinkCrcBurst(Scenario):
    name = "nvlink_crc_burst"
    summary = ("node08 GPU 3 NVLink 5 retries on CRC errors (~400 CRC flit errors/s, 30 "
               "replays/s) for a few seconds: nvlink_degraded on node08 gpu3 link5")

    def steps(self, ctx):
        def burst(c):
            c.sim.node("node08").nvlink_rates[(3, 5)] = {"crc_flit": 400.0, "replay": 30.0,
                                                         "crc_data": 4.0}
        return [Step(0.0, burst, visible=True, label="CRC burst on node08 gpu3 link5")]

    def expect(self, ctx):
        return [Expect("nvlink_degraded", "node08", gpu=3, link=5)]


class CounterReset(Scenario):
    name = "counter_reset"
    summary = ("node09's driver reloads: every HCA, netdev and NVLink counter drops to 0 and "
               "counts on from there (traffic continues). A reset is a new baseline, never a "
               "negative rate or an event: nothing may fire")
    observe_s = 5.0

    def steps(self, ctx):
        return [Step(0.0, lambda c: c.sim.reset_counters("node09"), visible=True,
                     label="node09 counters reset to 0")]


class SaturatedCounter(Scenario):
    name = "saturated_counter"
    summary = ("node10's PortXmitWait is pinned at 2^32-1 and SymbolError at 65535 (saturated, "
               "traffic continues): no congestion or link_degraded may be read from them, and "
               "both are exported as fabricmon_series_saturated. node12's LinkDowned is pinned "
               "at 255, then its link flaps twice visibly: link_flapping on node12 from the "
               "state changes and the IPoIB carrier count, LinkDowned seeing nothing")

    def baseline(self, ctx):
        port = ctx.sim.port("node10")
        port.pinned["counters/port_xmit_wait"] = MAX32
        port.pinned["counters/symbol_error"] = 65535
        ctx.sim.port("node12").pinned["counters/link_downed"] = 255

    def steps(self, ctx):
        return [Step(0.0, lambda c: _down(c, "node12"), label="node12 down #1"),
                Step(1.1, lambda c: _up(c, "node12"), label="node12 up"),
                Step(2.3, lambda c: _down(c, "node12"), visible=True, label="node12 down #2"),
                Step(3.4, lambda c: _up(c, "node12"), label="node12 up")]

    def expect(self, ctx):
        leaf, port = _leaf_of(ctx, "node12")
        return [Expect("link_flapping", "node12", "mlx5_0", 1, peer=(leaf, "", port))]

    def checks(self, ctx):
        text = ctx.metrics_text()
        out = []
        for name in ("fabricmon_ib_port_xmit_wait_total", "fabricmon_ib_symbol_error_total"):
            ok = any(line.startswith("fabricmon_series_saturated{") and
                     'metric="%s"' % name in line and 'node="node10"' in line and
                     line.rstrip().endswith(" 1")
                     for line in text.splitlines())
            out.append(("%s of node10 exported as saturated" % name, ok,
                        "" if ok else "no fabricmon_series_saturated{metric=%s,node=node10} 1"
                        % name))
        return out


# ---------------------------------------------------------------------------------------------
# Stragglers: jobs registered through the CLI, as an operator would (`fabricmon job start`), over
# nodes that run one synchronous job: the same RDMA rate on every node, GPUs busy. One node then
# falls behind; or a job is uneven by design and must stay quiet.

GB = 1e9


def set_rate(ctx, node, bps):
    """The node's RDMA rate each way (every HCA port), from now on."""
    for port in ctx.sim.node(node).ports.values():
        port.tx_bps = port.rx_bps = bps


def set_gpu(ctx, node, util):
    model = ctx.sim.node(node)
    model.gpu_util = util
    model.nvml_dirty = True


def job_start_step(at, name, nodes, label=""):
    """`fabricmon job start --name=NAME --nodes=...` against the running aggregator."""
    def start(ctx):
        rc, out, err = ctx.harness.cli("job", "start", "--name=" + name,
                                       "--nodes=" + ",".join(nodes))
        if rc != 0:
            raise RuntimeError("fabricmon job start --name=%s: exit %d: %s" % (name, rc,
                                                                               err.strip()))
    return Step(at, outside_ticks(start), label=label or "job %s starts on %d nodes" % (
        name, len(nodes)))


def finding_job(finding):
    """The job a straggler finding names (its evidence's job= label); "" when none does."""
    for evidence in finding.get("evidence", []):
        for label in evidence.get("labels", []):
            if label.startswith("job="):
                return label[4:]
    return ""


def _names(first, last):
    return ["node%02d" % i for i in range(first, last + 1)]


class StragglerScenario(Scenario):
    """A synchronous job over `job_nodes` at `job_bps` each way, GPUs busy, registered at the
    start; `fault(ctx)` 3 s later (6 samples at pace: the detector's "kept pace" needs 3)."""
    job = "train-0001"
    job_nodes = _names(1, 8)
    job_bps = 6 * GB
    fault_at = 3.0
    tick_s = 0.05
    straggler = ""

    def baseline(self, ctx):
        for i, node in enumerate(self.job_nodes):
            set_rate(ctx, node, self.job_bps * (0.98 + 0.04 * i / len(self.job_nodes)))
            set_gpu(ctx, node, 92)

    def fault(self, ctx):
        raise NotImplementedError

    def steps(self, ctx):
        return [job_start_step(0.0, self.job, self.job_nodes),
                Step(self.fault_at, self.fault, visible=True, label=self.fault_label)]

    def expect(self, ctx):
        # The detector wants 2 slow samples (of the last 3) and the first sample after the change
        # still holds part of the healthy rate; 0.5 s rates of a loaded test machine are noisy.
        return [Expect("straggler", self.straggler, extra_budget=2.0,
                       note="+2: 2 slow samples (straggler_samples) after a mixed one")]

    def checks(self, ctx):
        found = [f for f in ctx.harness.findings(include_cleared=True)
                 if f.get("kind") == "straggler"]
        jobs = sorted({finding_job(f) for f in found})
        ok = bool(found) and jobs == [self.job]
        return [("the straggler finding names job %s in its evidence" % self.job, ok,
                 "" if ok else "jobs named: %s" % jobs)]


class StragglerHalfRate(StragglerScenario):
    name = "straggler_half_rate"
    straggler = "node05"
    fault_label = "node05's rail drops to half rate"
    summary = ("job train-0001 on node01-08 (6 GB/s RDMA each way, GPUs 92 %, registered with "
               "`fabricmon job start`); after 6 samples at pace node05's rail runs at half rate, "
               "nothing else to see (no wait, no kernel traffic): straggler on node05 (a drop "
               "after keeping pace)")

    def fault(self, ctx):
        set_rate(ctx, "node05", self.job_bps / 2)


class StragglerHeldBack(StragglerScenario):
    name = "straggler_held_back"
    fabric = "roce"
    straggler = "node03"
    fault_label = "node03 paused by its switch 40 % of the time, rate halves"
    summary = ("RoCE: job train-0001 on node01-08 at 6 GB/s; node03's switch port pauses it "
               "(PFC rx pause 40 % of the time) and its RDMA rate halves: straggler on node03 "
               "and the congestion detector's view of the same port")

    def fault(self, ctx):
        set_rate(ctx, "node03", self.job_bps / 2)
        port = ctx.sim.port("node03")
        ctx.sim.node("node03").ethtool[port.hp.netdev].pause_fraction["rx"] = 0.4

    def expect(self, ctx):
        return super().expect(ctx) + [
            Expect("congestion", "node03", "mlx5_0", 1, extra_budget=1.0,
                   note="the paused port; +1: 2 samples (congestion_raise_samples)")]


class StragglerTcp(StragglerScenario):
    name = "straggler_tcp"
    job_nodes = _names(9, 14)
    straggler = "node12"
    fault_label = "node12's ranks move to TCP sockets"
    summary = ("job train-0001 on node09-14 at 6 GB/s; node12's NCCL falls back to sockets: its "
               "RDMA stops and eth0 moves ~1.1 GB/s (rx+tx), GPUs still busy: straggler and "
               "tcp_fallback on node12")

    def fault(self, ctx):
        set_rate(ctx, "node12", 0)
        eth0 = ctx.sim.node("node12").netdevs["eth0"]
        eth0.tx_bps = eth0.rx_bps = 0.55e9

    def expect(self, ctx):
        return super().expect(ctx) + [
            Expect("tcp_fallback", "node12", extra_budget=1.5,
                   note="+1.5: 2 samples (detectors.tcp_fallback_ticks) after a mixed one "
                        "(0.5 s samples of 50 ms counter ticks; 3.17 seen with two CPU hogs)")]


class StragglerSlowNvlink(StragglerScenario):
    name = "straggler_slow_nvlink"
    straggler = "node06"
    fault_label = "node06 gpu2 link7 retries (CRC), its RDMA falls to 55 %"
    summary = ("job train-0001 on node01-08 at 6 GB/s; node06 GPU 2 NVLink 7 replays on CRC "
               "errors (~400/s), the node's reductions slow down and its RDMA falls to 55 % of "
               "its peers': nvlink_degraded on the link and straggler on node06 (NVLink "
               "throughput is not collected: the slow link shows through its errors and the "
               "node's RDMA)")

    def fault(self, ctx):
        ctx.sim.node("node06").nvlink_rates[(2, 7)] = {"crc_flit": 400.0, "replay": 30.0,
                                                       "crc_data": 4.0}
        set_rate(ctx, "node06", self.job_bps * 0.55)

    def expect(self, ctx):
        return super().expect(ctx) + [Expect("nvlink_degraded", "node06", gpu=2, link=7)]


class StragglerUnevenHealthy(Scenario):
    name = "straggler_uneven_healthy"
    nodes = 20
    tick_s = 0.05
    observe_s = 6.0
    summary = ("five jobs registered with `fabricmon job start`, uneven by design, none may "
               "raise a straggler: pipeline stages (node01-03 at 8 GB/s, node04-05 at 3.5 GB/s "
               "from the start; later the whole job slows to 60 %), a parameter server (node06 "
               "at 3x its workers node07-09), an embedding stage (node10 at 45 % of node11-13 "
               "from the start), a 3-node job (node14-16; node16 halves: too small to judge) and "
               "an idle job (node17-20: GPUs 0 %, ~10 MB/s)")
    jobs = {"pp-0001": _names(1, 5), "ps-0002": _names(6, 9), "embed-0003": _names(10, 13),
            "small-0004": _names(14, 16), "idle-0005": _names(17, 20)}

    def baseline(self, ctx):
        rates = {"node01": 8, "node02": 8, "node03": 8, "node04": 3.5, "node05": 3.5,
                 "node06": 12, "node07": 4, "node08": 4, "node09": 4,
                 "node10": 2.7, "node11": 6, "node12": 6, "node13": 6,
                 "node14": 6, "node15": 6, "node16": 6}
        for node, gbps in rates.items():
            set_rate(ctx, node, gbps * GB)
            set_gpu(ctx, node, 90)
        for node in self.jobs["idle-0005"]:
            set_rate(ctx, node, 0.01 * GB)
            set_gpu(ctx, node, 0)

    def steps(self, ctx):
        steps = [job_start_step(0.0, name, nodes) for name, nodes in sorted(self.jobs.items())]

        def slow_down(c):
            for node in self.jobs["pp-0001"]:
                for port in c.sim.node(node).ports.values():
                    port.tx_bps *= 0.6
                    port.rx_bps *= 0.6
            set_rate(c, "node16", 3 * GB)
        steps.append(Step(3.0, slow_down, visible=True,
                          label="pp-0001 slows to 60 % on every node; node16 halves"))
        return steps


ALL = [HealthyBusy, SingleFlap, FlappingLink, RoceFlappingLink, SubIntervalFlap,
       IncastCongestion, PauseStorm, EcnMisconfigured, TcpFallback, NvlinkCrcBurst, CounterReset,
       SaturatedCounter, StragglerHalfRate, StragglerHeldBack, StragglerTcp, StragglerSlowNvlink,
       StragglerUnevenHealthy]
BY_NAME = {s.name: s for s in ALL}
