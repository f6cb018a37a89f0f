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


class Scenario:
    name = ""
    fabric = "ib"
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


ALL = [HealthyBusy, SingleFlap, FlappingLink, RoceFlappingLink, SubIntervalFlap,
       IncastCongestion, PauseStorm, EcnMisconfigured, TcpFallback, NvlinkCrcBurst, CounterReset,
       SaturatedCounter]
BY_NAME = {s.name: s for s in ALL}
