"""Fault campaign: random fat trees, random background traffic, hundreds of injected faults with
their ground truth, played against the real daemons and scored.

  python3 -m fabric_sim campaign --build-dir B --seed N --faults N --flavour ib|roce [--json F]
  python3 -m fabric_sim campaign --build-dir B --seed N --faults N --flavour straggler
      (registered jobs with one straggler each, or uneven by design and quiet: campaign_jobs.py)

One campaign = one random cluster (campaign_cluster(): 2-4 leaves x 3-5 hosts, 1-3 spines, random
names: node prefixes like "gpu-a17", "r3-n2", "dgx-0042", switches like "r3-tor2", "ibsw-s001";
random HCA device and netdev names), GPU nodes plus storage and login nodes (no GPU, no NVML;
some with no RDMA device at all), started once (runner.Harness: aggregator, one agent per node,
in the IB flavour ibsim + opensm with a fabric sweeper). Background traffic is random: busy jobs
at 2-12 GB/s, idle nodes, job restarts (RDMA and GPUs to 0 for a few seconds, then back),
storage bursts (kernel TCP 150-800 MB/s on storage nodes), stray ignored CNPs (RoCE). Faults are
scheduled (schedule()) sequentially and concurrently on disjoint places; a place is reused only
after the fault has cleared and the detector's window has passed (Fault.quiet_s).

Every fault records its ground truth: the findings it must cause (kind, subject: a cable as the
unordered pair of its ends, a port, a tree's root port, a node, a GPU link), the moment the rule
could first fire (stamped when that step's change reached the files), and the places it touches
(partial views there are the same incident, not false findings). "Silent" faults (counter reset,
saturated counters, a single flap) must cause nothing.

Scoring (score()), from every finding seen by polling `fabricmon findings --json` during the run
and `--all` (cleared ones too) at the end, and from fabricmon_findings_total scraped before and
after:
  precision     findings attributed to an injected fault / all findings
  recall        expected findings found / expected findings
  localisation  found with the right subject / found (cables: either end, peer the other end)
  TTD           onset - moment the rule could first fire, in sampling intervals (median, p95)
  churn         distinct finding ids per expected finding (target 1), and the increase of
                fabricmon_findings_total per expected finding

--save-recording DIR (IB and RoCE flavours): the aggregator records the campaign, and a part of
it that stays small is kept with every fault's ground truth as a replay fixture
(campaign_replay.py; tests/replay/campaign_<flavour>/, scored offline by its ctest).

Exit status: 0 when every fault was found at the right place, nothing else fired and churn is
exactly 1; 1 otherwise (the failures are listed); 77 when the IB flavour needs ibsim and it is
not available.

Python 3 standard library only.
"""

import json
import os
import random
import re
import statistics
import sys
import time

from . import cluster as cluster_mod
from . import runner
from . import traffic

GB = 1e9
MB = 1e6
MAX32 = (1 << 32) - 1

INTERVAL_MS = 500
TICK_MS = 250
# Detector windows of the campaign's aggregator: short, so that places can be reused quickly.
FLAP_WINDOW_S = 15
FLAP_QUIET_S = 6
DEGRADED_WINDOW_S = 8
DETECTORS = ("flap_window_s: %d flap_quiet_s: %d degraded_window_s: %d"
             % (FLAP_WINDOW_S, FLAP_QUIET_S, DEGRADED_WINDOW_S))
# With ibsim, a cable coming back up runs opensm (ibsim.cable_up), which blocks the playback for
# up to a couple of seconds on a loaded machine and delays the fault's later flaps by as much: a
# flap fault reserves its place that much longer per cable_up, or its last flap can fall in the
# detector's window of the next fault on the same cable (seen: a switch cable reused 18 s after
# the planned end raised at the next fault's first flap).
OPENSM_SLACK_S = 2.0
PAUSE_STORM_HOLD_S = 60  # roce_detectors.cc: a storm event keeps the finding up for a minute
# A congested port clears after detectors.congestion_clear_samples (3) samples in a row below half
# the threshold; the first sample after a fault ends still covers part of it, an agent's cycle
# can start up to an interval after the change, and the detector ticks every TICK_MS. A
# congestion fault's places are reused only after that (plus scheduling slack on a loaded
# machine): before, an incast into the receiver of one that had just ended, or a pause storm on
# one of its ports, met the first tree still held by the hysteresis and was counted as its
# re-raise (the detector right: the ports had not been quiet long enough to clear).
CONGESTION_CLEAR_S = (3 + 2) * INTERVAL_MS / 1000.0 + TICK_MS / 1000.0 + 2.0

# Fault kinds per flavour. The slice plays each once.
IB_KINDS = ["flap", "subsweep_flap", "switch_flap", "single_flap", "symbol_errors",
            "link_error_recovery", "incast", "tcp_fallback", "nvlink_crc", "nvlink_down",
            "saturated_flap", "saturated_wait", "counter_reset"]
ROCE_KINDS = ["flap", "subsweep_flap", "single_flap", "pcs_symbol_errors", "incast",
              "pause_storm", "ecn", "tcp_fallback", "nvlink_crc", "nvlink_down",
              "counter_reset"]
# Flavour "straggler" (campaign_jobs.py): registered jobs with one straggler each, and healthy
# jobs uneven by design.
STRAGGLER_FLAVOUR_KINDS = ["straggler_drop", "straggler_held_back", "straggler_tcp",
                           "straggler_nvlink", "job_pipeline", "job_param_server",
                           "job_first_stage", "job_phase_change", "job_restart", "job_idle",
                           "job_small"]


# ---------------------------------------------------------------------------------------------
# Random clusters.

def _names(rng, count, style):
    """`count` distinct host names in one of several site conventions."""
    out = []
    used = set()
    letter = rng.choice("abcdefgh")
    base = rng.randrange(1, 60)
    while len(out) < count:
        if style == "gpu":
            name = "gpu-%s%02d" % (letter, base + rng.randrange(0, 80))
        elif style == "rack":
            name = "r%d-n%d" % (rng.randrange(1, 9), rng.randrange(1, 40))
        elif style == "dgx":
            name = "dgx-%04d" % rng.randrange(1, 3000)
        else:
            name = "hgx%s-%d" % (letter, rng.randrange(100, 999))
        if name not in used:
            used.add(name)
            out.append(name)
    return out


def campaign_cluster(rng, fabric, leaves=None, per_leaf=None):
    """A random 2-tier fat tree with random names, GPU, storage and login nodes (`leaves` x
    `per_leaf` host slots when given)."""
    leaves = leaves or rng.randint(2, 4)
    per_leaf = per_leaf or rng.randint(3, 5)
    spines = rng.randint(1, 3)
    sw_style = rng.choice(["rack", "ibsw", "lf"])
    rack0 = rng.randrange(1, 8)
    leaf_names, spine_names = [], []
    for l in range(leaves):
        if sw_style == "rack":
            leaf_names.append("r%d-tor%d" % (rack0 + l, rng.randint(1, 2)))
        elif sw_style == "ibsw":
            leaf_names.append("ibsw-l%03d" % (10 * rack0 + l))
        else:
            leaf_names.append("lf-%s%d" % (rng.choice("xyz"), l + rack0))
    for s in range(spines):
        spine_names.append(rng.choice(["sp%d", "core-%d", "ibsw-s%03d"]) % (s + 1))
    if len(set(leaf_names + spine_names)) != leaves + spines:
        spine_names = ["spine-%s%d" % (rng.choice("pq"), s + 1) for s in range(spines)]
        leaf_names = ["leaf-%s%d" % (rng.choice("mn"), l + 1) for l in range(leaves)]
    slots = leaves * per_leaf
    storage_rdma = rng.randint(0, 1)
    storage_plain = rng.randint(1, 2)
    logins = rng.randint(0, 1)
    empty = rng.randint(0, 1)
    gpus = slots - storage_rdma - empty
    host_names = _names(rng, gpus, rng.choice(["gpu", "rack", "dgx", "hgx"]))
    storage_names = ["%s%d" % (rng.choice(["stor-", "nfs", "weka-"]), i + 1)
                     for i in range(storage_rdma + storage_plain)]
    login_names = ["%s%d" % (rng.choice(["login", "bastion-"]), i + 1) for i in range(logins)]
    nodes = []
    index = 0
    for name in host_names:
        index += 1
        nodes.append(cluster_mod.Node(name, index, role="gpu",
                                      mgmt_netdev=rng.choice(["eth0", "eno1", "enp5s0"])))
    for i, name in enumerate(storage_names):
        index += 1
        nodes.append(cluster_mod.Node(name, index, role="storage",
                                      mgmt_netdev=rng.choice(["eth0", "ens3f0"])))
        nodes[-1].rdma = i < storage_rdma
    for name in login_names:
        index += 1
        nodes.append(cluster_mod.Node(name, index, role="login", mgmt_netdev="eth0"))
    switches = {}
    guid = cluster_mod.SWITCH_GUID_BASE + rng.randrange(0, 0x1000) * 0x100
    for name in leaf_names:
        guid += 1
        switches[name] = cluster_mod.Switch(name, guid, per_leaf + spines, "leaf")
    for name in spine_names:
        guid += 1
        switches[name] = cluster_mod.Switch(name, guid, leaves, "spine")
    cabled = [n for n in nodes if n.role == "gpu" or getattr(n, "rdma", False)]
    free = [(l, p) for l in range(leaves) for p in range(1, per_leaf + 1)]
    rng.shuffle(free)
    hca_base = cluster_mod.HCA_GUID_BASE + rng.randrange(0, 0x100) * 0x10000
    for node in cabled:
        l, p = free.pop()
        device = rng.choice(["mlx5_0", "mlx5_0", "mlx5_1", "mlx5_2"])
        if fabric == "ib":
            netdev = rng.choice(["ib0", "ibp%ds0" % rng.choice([24, 65, 154])])
        else:
            netdev = rng.choice(["eth1", "ens%df0np0" % rng.choice([1, 3, 5])])
        hp = cluster_mod.HostPort(node.name, device, 0, hca_base + node.index * 0x100, netdev,
                                  leaf_names[l], p, "0000:%02x:00.0" % (0x18 + (node.index % 8)))
        node.ports.append(hp)
        switches[leaf_names[l]].peers[p] = ("host", hp)
    for l, leaf_name in enumerate(leaf_names):
        for s, spine_name in enumerate(spine_names):
            switches[leaf_name].peers[per_leaf + s + 1] = ("switch", spine_name, l + 1)
            switches[spine_name].peers[l + 1] = ("switch", leaf_name, per_leaf + s + 1)
    rng.shuffle(nodes)  # agents start, and the sweeper is picked, in no particular order
    c = cluster_mod.Cluster(fabric, "fat-tree", nodes, switches)
    c.per_leaf, c.spines, c.leaves = per_leaf, spines, leaves
    return c


# ---------------------------------------------------------------------------------------------
# Ground truth.

def ep(node, device, port):
    return ("ep", node, device, int(port))


def host_ep(hp):
    return ep(hp.node, hp.device, hp.port)


def leaf_ep(hp):
    return ep(hp.leaf, "", hp.leaf_port)


class Expected:
    """A finding a fault must cause. subject: ("ep", ...), ("node", n) or ("gpu", n, g, l);
    pair: a cable's two ends (either may be the subject, the other must then be the peer)."""

    def __init__(self, kind, subject=None, pair=None, fire_mark="visible", fire_delay_s=0.0,
                 early_ok=0.05, budget=2.0):
        self.kind = kind
        self.subject = subject
        self.pair = frozenset(pair) if pair else None
        self.fire_mark = fire_mark      # the fault's stamp from which the rule can fire
        self.fire_delay_s = fire_delay_s  # design delay on top (debounce ticks)
        self.early_ok = early_ok          # intervals before that still count as on time
        self.budget = budget              # intervals after it that still count as on time

    def describe(self):
        if self.pair:
            a, b = sorted(self.pair)
            return "%s %s <-> %s" % (self.kind, key_text(a), key_text(b))
        return "%s %s" % (self.kind, key_text(self.subject))

    def right_subject(self, f):
        s, p = finding_key(f), finding_peer(f)
        if self.pair:
            return s in self.pair and (p is None or frozenset((s, p)) == self.pair)
        return s == self.subject


class Fault:
    def __init__(self, fid, kind, place, duration_s, quiet_s, resources, related, expected,
                 congestion=False):
        self.id = fid
        self.kind = kind
        self.place = place            # text
        self.duration_s = duration_s  # from its first step to its last
        self.quiet_s = quiet_s        # after its last step until its place may be reused
        self.resources = set(resources)
        self.related = set(related)   # subjects whose findings belong to this incident
        self.expected = expected      # [Expected]; empty: a silent fault
        self.congestion = congestion  # congestion-family faults never overlap
        # Finding kinds that belong to this incident at its related places: the expected ones,
        # and for congestion the partial views of the same tree (churn, not false findings).
        self.accept = {e.kind for e in expected}
        if congestion:
            self.accept |= {"congestion", "congestion_spreading"}
        self.steps = []               # (offset_s, label, action(ctx), mark or None)
        self.checks = []              # callables(metrics_text) → (ok, detail)
        self.baseline = None          # callable(sim) before the agents start
        self.pins = {}                # node → counters the baseline pins for the whole run
        self.start = None             # scheduled start, seconds into the campaign
        self.stamps = {}              # mark → time_ns when its step reached the files
        self.errors = []

    def step(self, at, label, action, mark=None):
        self.steps.append((at, label, action, mark))


def key_text(k):
    if k is None:
        return "-"
    if k[0] == "node":
        return k[1]
    if k[0] == "gpu":
        return "%s gpu%d link%d" % k[1:]
    _, node, device, port = k
    return "%s %s/%d" % (node, device, port) if device else "switch %s/%d" % (node, port)


def finding_key(f):
    s = f.get("subject", {})
    if s.get("has_gpu"):
        return ("gpu", s.get("node", ""), int(s.get("gpu", 0)), int(s.get("link", 0)))
    if s.get("is_switch"):  # a switch port: the switch is the subject's device, no node
        return ep(s.get("device", ""), "", int(s.get("port", 0)))
    node, device, port = s.get("node", ""), s.get("device", ""), int(s.get("port", 0))
    if device or port:
        return ep(node, device, port)
    return ("node", node)


def finding_peer(f):
    s = f.get("subject", {})
    if s.get("peer_is_switch"):
        return ep(s.get("peer_device", ""), "", s.get("peer_port", 0))
    if not s.get("peer_node"):
        return None
    return ep(s.get("peer_node", ""), s.get("peer_device", ""), s.get("peer_port", 0))


def finding_text(f):
    text = "%s %s" % (f.get("kind"), key_text(finding_key(f)))
    p = finding_peer(f)
    if p:
        text += " <-> " + key_text(p)
    if f.get("victims"):
        text += " (%d victims, depth %s)" % (len(f["victims"]), f.get("depth_hops", 0))
    return text


# ---------------------------------------------------------------------------------------------
# Fault makers. Each returns a Fault or None when the cluster has no place for it. `free(res)`
# says whether resources are free at the candidate start.

def _gpu_nodes(c):
    return [n for n in c.nodes if n.role == "gpu" and n.ports]


ANY_COUNTER = "*"


def _host_port_fault(fid, kind, c, rng, free, build, state=None, needs=()):
    """A fault on a random free GPU node's first HCA port. `needs`: the counters the fault must
    see move (ANY_COUNTER: all of them). A counter pinned for the whole run (saturated_* faults)
    cannot show anything, on hardware neither: such a node is no place for the fault."""
    pinned = (state or {}).get("pinned", {})

    def usable(n):
        held = pinned.get(n.name, set())
        return not held or not (ANY_COUNTER in needs or held & set(needs))
    cands = [n for n in _gpu_nodes(c) if free({"node:" + n.name}) and usable(n)]
    if not cands:
        return None
    node = rng.choice(cands)
    hp = node.ports[0]
    return build(node, hp)


def _cable_related(hp):
    return {host_ep(hp), leaf_ep(hp), ("node", hp.node)}


def make_fault(fid, kind, c, rng, free, state):
    """One fault of `kind` on a random free place of cluster `c`."""
    if kind in STRAGGLER_FLAVOUR_KINDS:
        from . import campaign_jobs  # it builds on this module's Fault and Expected
        return campaign_jobs.make_job_fault(fid, kind, c, rng, free, state)
    ib = c.fabric == "ib"

    if kind in ("flap", "saturated_flap", "single_flap"):
        def build(node, hp):
            pair = (host_ep(hp), leaf_ep(hp))
            cycles = {"flap": 3, "saturated_flap": 2, "single_flap": 1}[kind]
            expected = [] if kind == "single_flap" else \
                [Expected("link_flapping", pair=pair, fire_mark="second_down")]
            f = Fault(fid, kind, "%s %s/1 <-> %s/%d" % (hp.node, hp.device, hp.leaf,
                                                         hp.leaf_port),
                      2.2 * cycles, FLAP_WINDOW_S + 3 + (OPENSM_SLACK_S * cycles if ib else 0),
                      {"node:" + hp.node, "sw:" + hp.leaf},
                      _cable_related(hp), expected)
            for i in range(cycles):
                f.step(2.2 * i, "%s down #%d" % (hp.node, i + 1),
                       lambda ctx, hp=hp: _down(ctx, hp),
                       mark="second_down" if i == 1 else ("visible" if i == 0 else None))
                f.step(2.2 * i + 0.9, "%s up" % hp.node, lambda ctx, hp=hp: _up(ctx, hp))
            if kind == "saturated_flap":
                f.place += " (LinkDowned pinned at 255)"

                def pin(sim, hp=hp):
                    sim.port(hp.node, hp.device).pinned["counters/link_downed"] = 255
                f.baseline = pin
                f.pins = {hp.node: {"counters/link_downed"}}
            return f
        if kind == "saturated_flap" and not ib:
            return None
        if kind == "saturated_flap" and state.get("started"):
            return None  # pinned from the start: only faults scheduled at generation time
        return _host_port_fault(fid, kind, c, rng, free, build, state)

    if kind == "subsweep_flap":
        def build(node, hp):
            pair = (host_ep(hp), leaf_ep(hp))
            f = Fault(fid, kind, "%s %s/1 <-> %s/%d (two ~0 ms blips)" % (
                hp.node, hp.device, hp.leaf, hp.leaf_port), 1.6, FLAP_WINDOW_S + 3,
                {"node:" + hp.node, "sw:" + hp.leaf}, _cable_related(hp),
                [Expected("link_flapping", pair=pair, fire_mark="second_down")])
            f.step(0.0, "%s blip #1" % hp.node, lambda ctx, hp=hp: _blip(ctx, hp), mark="visible")
            f.step(1.6, "%s blip #2" % hp.node, lambda ctx, hp=hp: _blip(ctx, hp),
                   mark="second_down")
            return f
        # Blips never leave ACTIVE: only LinkDowned shows them.
        return _host_port_fault(fid, kind, c, rng, free, build, state,
                                needs=("counters/link_downed",))

    if kind == "switch_flap":
        if not ib or not state.get("ibsim"):
            return None
        cands = []
        for leaf in c.leaf_names():
            for spine in c.spine_names():
                if free({"sw:" + leaf, "sw:" + spine}):
                    cands.append((leaf, spine))
        if not cands:
            return None
        leaf, spine = rng.choice(cands)
        lp, sp = c.uplink(leaf, spine)
        pair = (ep(leaf, "", lp), ep(spine, "", sp))
        f = Fault(fid, kind, "switch %s/%d <-> switch %s/%d" % (leaf, lp, spine, sp), 4.4,
                  FLAP_WINDOW_S + 3 + 3 * OPENSM_SLACK_S, {"sw:" + leaf, "sw:" + spine}, set(pair),
                  [Expected("link_flapping", pair=pair, fire_mark="second_down")])
        for i in range(3):
            f.step(2.2 * i, "%s/%d down #%d" % (leaf, lp, i + 1),
                   lambda ctx, leaf=leaf, lp=lp: ctx.ibsim.cable_down(leaf, lp),
                   mark="second_down" if i == 1 else ("visible" if i == 0 else None))
            f.step(2.2 * i + 0.9, "%s/%d up" % (leaf, lp),
                   lambda ctx, leaf=leaf, lp=lp: ctx.ibsim.cable_up(leaf, lp))
        return f

    if kind in ("symbol_errors", "link_error_recovery", "pcs_symbol_errors"):
        if (kind == "pcs_symbol_errors") == ib:
            return None

        def build(node, hp):
            f = Fault(fid, kind, "%s %s/1 (%s)" % (hp.node, hp.device, kind.replace("_", " ")),
                      4.0, DEGRADED_WINDOW_S + 3, {"node:" + hp.node},
                      _cable_related(hp),
                      [Expected("link_degraded", pair=(host_ep(hp), leaf_ep(hp)))])

            def errors(ctx, n, hp=hp):
                if kind == "symbol_errors":
                    ctx.sim.port(hp.node, hp.device).bump("counters/symbol_error", n)
                elif kind == "link_error_recovery":
                    ctx.sim.port(hp.node, hp.device).bump("counters/link_error_recovery", 1)
                else:
                    ctx.sim.node(hp.node).ethtool[hp.netdev].add("rx_pcs_symbol_err_phy", n)
            f.step(0.0, "%s: %s burst" % (hp.node, kind), lambda ctx: errors(ctx, 12),
                   mark="visible")
            for i in range(1, 5):
                f.step(1.0 * i, "%s: more errors" % hp.node, lambda ctx: errors(ctx, 3))
            return f
        return _host_port_fault(fid, kind, c, rng, free, build, state, needs={
            "symbol_errors": ("counters/symbol_error",),
            "link_error_recovery": ("counters/link_error_recovery",)}.get(kind, ()))

    if kind == "incast":
        return _incast(fid, c, rng, free, state)

    if kind == "pause_storm":
        if ib:
            return None

        def build(node, hp):
            f = Fault(fid, kind, "%s %s/1 pauses %s/%d" % (hp.node, hp.device, hp.leaf,
                                                          hp.leaf_port),
                      4.0, PAUSE_STORM_HOLD_S + 5, {"node:" + hp.node, "congestion"},
                      _cable_related(hp),
                      [Expected("pause_storm", subject=host_ep(hp), fire_mark="watchdog"),
                       # A plain congestion finding wants 2 samples (congestion_raise_samples).
                       Expected("congestion", subject=host_ep(hp),
                                fire_delay_s=INTERVAL_MS / 1000.0)], congestion=True)

            def stall(ctx, hp=hp):
                ctx.sim.node(hp.node).ethtool[hp.netdev].pause_fraction["tx"] = 1.0
                port = ctx.sim.port(hp.node, hp.device)
                port.saved_rates = (port.tx_bps, port.rx_bps)
                port.tx_bps = port.rx_bps = 0.05e9

            def watchdog(ctx, hp=hp):
                ctx.sim.node(hp.node).ethtool[hp.netdev].add("tx_pause_storm_warning_events", 1)

            def end(ctx, hp=hp):
                ctx.sim.node(hp.node).ethtool[hp.netdev].pause_fraction["tx"] = 0.001
                port = ctx.sim.port(hp.node, hp.device)
                port.tx_bps, port.rx_bps = port.saved_rates
            f.step(0.0, "%s stalls" % hp.node, stall, mark="visible")
            f.step(0.5, "%s pause-storm watchdog" % hp.node, watchdog, mark="watchdog")
            f.step(4.0, "%s drains again" % hp.node, end)
            return f
        return _host_port_fault(fid, kind, c, rng, free, build)

    if kind == "ecn":
        if ib:
            return None

        def build(node, hp):
            f = Fault(fid, kind, "%s ignores CNPs" % hp.node, 4.0, 4.0, {"node:" + hp.node},
                      {("node", hp.node)} | _cable_related(hp),
                      # The rule holds for detectors.ecn_ticks (3) samples before it raises:
                      # they span 2 intervals from the first sample after the drift, and an agent
                      # stamps a sample when its cycle starts, a little before it reads the file,
                      # so the third can carry a stamp a quarter interval early, and up to half
                      # an interval on a loaded machine (0.37 seen with 5 builds on 2 cores;
                      # firing on 2 samples would show as a full interval early).
                      [Expected("ecn_misconfigured", subject=("node", hp.node),
                                fire_delay_s=1.75 * INTERVAL_MS / 1000.0, early_ok=0.5)])

            def drift(ctx, hp=hp):
                port = ctx.sim.port(hp.node, hp.device)
                port.cc["rp_cnp_ignored"] = 800.0
                port.cc["rp_cnp_handled"] = 0.0

            def fix(ctx, hp=hp):
                port = ctx.sim.port(hp.node, hp.device)
                port.cc["rp_cnp_ignored"] = 0.0
                port.cc["rp_cnp_handled"] = 1400.0
            f.step(0.0, "%s ignores CNPs" % hp.node, drift, mark="visible")
            f.step(4.0, "%s handles CNPs again" % hp.node, fix)
            return f
        return _host_port_fault(fid, kind, c, rng, free, build)

    if kind == "tcp_fallback":
        def build(node, hp):
            f = Fault(fid, kind, "%s's job restarts on TCP sockets" % hp.node, 6.0, 4.0,
                      {"node:" + hp.node}, {("node", hp.node)},
                      [Expected("tcp_fallback", subject=("node", hp.node),
                                fire_delay_s=2 * TICK_MS / 1000.0)])

            def restart(ctx, hp=hp):
                port = ctx.sim.port(hp.node, hp.device)
                port.saved_rates = (port.tx_bps, port.rx_bps)
                port.tx_bps = port.rx_bps = 0
                ctx.sim.node(hp.node).gpu_util = 0
                ctx.sim.node(hp.node).nvml_dirty = True

            def sockets(ctx, hp=hp):
                mgmt = ctx.sim.node(hp.node).mgmt
                mgmt.saved = (mgmt.tx_bps, mgmt.rx_bps)
                mgmt.tx_bps = mgmt.rx_bps = 0.55e9
                ctx.sim.node(hp.node).gpu_util = 88
                ctx.sim.node(hp.node).nvml_dirty = True

            def back(ctx, hp=hp):
                mgmt = ctx.sim.node(hp.node).mgmt
                mgmt.tx_bps, mgmt.rx_bps = mgmt.saved
                port = ctx.sim.port(hp.node, hp.device)
                port.tx_bps, port.rx_bps = port.saved_rates
            f.step(0.0, "%s: RDMA stops (job restarts)" % hp.node, restart)
            f.step(1.5, "%s: traffic over TCP" % hp.node, sockets, mark="visible")
            f.step(6.0, "%s: back on RDMA" % hp.node, back)
            return f
        return _host_port_fault(fid, kind, c, rng, free, build)

    if kind in ("nvlink_crc", "nvlink_down"):
        def build(node, hp):
            gpu, link = rng.randrange(8), rng.randrange(18)
            subject = ("gpu", node.name, gpu, link)
            f = Fault(fid, kind, "%s gpu%d link%d" % (node.name, gpu, link), 4.0, 3.0,
                      {"node:" + node.name}, {subject},
                      [Expected("nvlink_degraded" if kind == "nvlink_crc" else "nvlink_down",
                                subject=subject)])

            def start(ctx):
                model = ctx.sim.node(node.name)
                if kind == "nvlink_crc":
                    model.nvlink_rates[(gpu, link)] = {"crc_flit": 400.0, "replay": 30.0,
                                                       "crc_data": 4.0}
                else:
                    model.nvlinks[(gpu, link)]["active"] = 0
                    model.nvml_dirty = True

            def end(ctx):
                model = ctx.sim.node(node.name)
                model.nvlink_rates.pop((gpu, link), None)
                model.nvlinks[(gpu, link)]["active"] = 1
                model.nvml_dirty = True
            f.step(0.0, "%s gpu%d link%d %s" % (node.name, gpu, link, kind), start,
                   mark="visible")
            f.step(4.0, "%s gpu%d link%d healthy" % (node.name, gpu, link), end)
            return f
        return _host_port_fault(fid, kind, c, rng, free, build)

    if kind == "saturated_wait":
        if not ib or state.get("started"):
            return None

        def build(node, hp):
            f = Fault(fid, kind, "%s %s/1 XmitWait pinned at 2^32-1, SymbolError at 65535" % (
                hp.node, hp.device), 4.0, 3.0, {"node:" + hp.node}, _cable_related(hp), [])

            def pin(sim, hp=hp):
                port = sim.port(hp.node, hp.device)
                port.pinned["counters/port_xmit_wait"] = MAX32
                port.pinned["counters/symbol_error"] = 65535
            f.baseline = pin
            f.pins = {hp.node: {"counters/port_xmit_wait", "counters/symbol_error"}}
            f.step(0.0, "%s (pinned since start)" % hp.node, lambda ctx: None, mark="visible")
            name = hp.node

            def check(text, name=name):
                out = []
                for metric in ("fabricmon_ib_port_xmit_wait_total",
                               "fabricmon_ib_symbol_error_total"):
                    ok = any(line.startswith("fabricmon_series_saturated{") and
                             'metric="%s"' % metric in line and 'node="%s"' % name in line and
                             line.rstrip().endswith(" 1") for line in text.splitlines())
                    out.append((ok, "%s of %s exported as fabricmon_series_saturated" % (
                        metric, name)))
                return out
            f.checks.append(check)
            return f
        return _host_port_fault(fid, kind, c, rng, free, build)

    if kind == "counter_reset":
        def build(node, hp):
            f = Fault(fid, kind, "%s: every counter back to 0 (driver reload)" % node.name,
                      0.5, 3.0, {"node:" + node.name},
                      _cable_related(hp) | {("gpu", node.name, g, l)
                                            for g in range(8) for l in range(18)}, [])
            f.step(0.0, "%s counters reset" % node.name,
                   lambda ctx: ctx.sim.reset_counters(node.name), mark="visible")
            return f
        # A reset of a pinned counter would read as 0 and then the pin again: a jump no
        # hardware shows (a saturated counter cleared counts up from 0).
        return _host_port_fault(fid, kind, c, rng, free, build, state, needs=(ANY_COUNTER,))
    return None


def _incast(fid, c, rng, free, state):
    ib = c.fabric == "ib"
    if not free({"congestion"}):
        return None
    targets = [n for n in _gpu_nodes(c)
               if free({"node:" + n.name, "sw:" + n.ports[0].leaf})]
    rng.shuffle(targets)
    for target in targets:
        tp = target.ports[0]
        senders = [n for n in _gpu_nodes(c) if n.ports[0].leaf != tp.leaf and
                   free({"node:" + n.name, "sw:" + n.ports[0].leaf})]
        if len(senders) < 2:
            continue
        senders = rng.sample(senders, min(len(senders), rng.randint(2, 5)))
        leaves = {n.ports[0].leaf for n in senders} | {tp.leaf}
        resources = {"congestion"} | {"node:" + n.name for n in senders + [target]} | \
            {"sw:" + leaf for leaf in leaves}
        if ib:
            resources |= {"sw:" + s for s in c.spine_names()}
        if not free(resources):
            continue
        related = {host_ep(n.ports[0]) for n in senders + [target]} | \
            {leaf_ep(n.ports[0]) for n in senders + [target]}
        for leaf in leaves:
            for spine in c.spine_names():
                lp, sp = c.uplink(leaf, spine)
                related |= {ep(leaf, "", lp), ep(spine, "", sp)}
        if ib and state.get("ibsim"):
            root = leaf_ep(tp)
        else:
            root = host_ep(tp)  # RoCE: the slow receiver's port sends the pause
        f = Fault(fid, "incast", "%d senders -> %s (root %s)" % (len(senders), target.name,
                                                              key_text(root)),
                  5.0, CONGESTION_CLEAR_S, resources, related,
                  [Expected("congestion_spreading", subject=root)], congestion=True)
        names = [n.name for n in senders]

        def start(ctx, names=names, target=target.name):
            for name in names:
                port = ctx.sim.port(name)
                port.saved_rates = (port.tx_bps, port.rx_bps, port.wait_fraction)
                port.tx_bps = 0.25e9
                port.wait_fraction = 0.85
                if c.fabric == "roce":
                    ctx.sim.node(name).ethtool[port.hp.netdev].pause_fraction["rx"] = 0.5
            port = ctx.sim.port(target)
            port.saved_rates = (port.tx_bps, port.rx_bps, port.wait_fraction)
            port.rx_bps = 0.25e9 * len(names)
            if c.fabric == "roce":
                ctx.sim.node(target).ethtool[port.hp.netdev].pause_fraction["tx"] = 0.4
            if ctx.ibsim is not None:
                ctx.ibsim.start_incast(c, names, target)

        def end(ctx, names=names, target=target.name):
            for name in names + [target]:
                port = ctx.sim.port(name)
                port.tx_bps, port.rx_bps, port.wait_fraction = port.saved_rates
                if c.fabric == "roce":
                    fr = ctx.sim.node(name).ethtool[port.hp.netdev].pause_fraction
                    fr["rx"], fr["tx"] = 0.002, 0.001
            if ctx.ibsim is not None:
                ctx.ibsim.end_incast(c)
        f.step(0.0, "incast into %s starts" % target.name, start, mark="visible")
        f.step(5.0, "incast ends", end)
        return f
    return None


# Helpers acting on the host and, with ibsim, on the switch end of the cable.

def _down(ctx, hp):
    ctx.sim.link_down(hp.node, hp.device)
    if ctx.ibsim is not None:
        ctx.ibsim.cable_down(hp.leaf, hp.leaf_port)


def _up(ctx, hp):
    ctx.sim.link_up(hp.node, hp.device)
    if ctx.ibsim is not None:
        ctx.ibsim.cable_up(hp.leaf, hp.leaf_port)


def _blip(ctx, hp):
    ctx.sim.blip(hp.node, hp.device)
    if ctx.ibsim is not None:
        ctx.ibsim.bump_link_downed(hp.leaf, hp.leaf_port)


# ---------------------------------------------------------------------------------------------
# Schedule.

def schedule(c, rng, nfaults, kinds, concurrency, ibsim):
    """Places `nfaults` faults (kinds round-robin in random order) on the timeline: at most
    `concurrency` at once, never two on one resource until the first has cleared (quiet_s),
    congestion-family faults one at a time. Returns the faults, start times set."""
    faults = []
    reserved = []  # (until, resources)
    active = []    # end times
    t = 0.0
    order = []
    state = {"ibsim": ibsim}
    while len(order) < nfaults:
        batch = list(kinds)
        rng.shuffle(batch)
        order += batch
    order = order[:nfaults]
    # Faults pinned from the start first (saturated counters), the rest as they come.
    order.sort(key=lambda k: 0 if k in ("saturated_flap", "saturated_wait") else 1)
    skipped = {}
    for kind in order:
        if kind not in ("saturated_flap", "saturated_wait"):
            state["started"] = True
        for _ in range(400):
            reserved = [(u, r) for u, r in reserved if u > t]
            active = [e for e in active if e > t]

            def free(res):
                return all(not (res & r) for _, r in reserved)
            f = None
            if len(active) < concurrency:
                f = make_fault(len(faults) + 1, kind, c, rng, free, state)
                # Every resource of the fault, not only the place its maker picked: a pause
                # storm's "congestion" kept it out of an incast only once this was checked.
                if f is not None and not free(f.resources):
                    f = None
            if f is not None:
                if kind in ("saturated_flap", "saturated_wait"):
                    f.start = t + 2.0 + rng.uniform(0, 2)  # flaps happen mid-run, pinned early
                else:
                    f.start = t
                end = f.start + f.duration_s
                reserved.append((end + f.quiet_s, f.resources))
                active.append(end)
                faults.append(f)
                for node, rels in f.pins.items():
                    state.setdefault("pinned", {}).setdefault(node, set()).update(rels)
                t += rng.uniform(0.3, 2.5)
                break
            if kind in ("saturated_flap", "saturated_wait", "switch_flap", "pause_storm",
                        "ecn", "pcs_symbol_errors") and make_fault(
                    0, kind, c, rng, lambda r: True, state) is None:
                skipped[kind] = skipped.get(kind, 0) + 1
                break  # this flavour / cluster has no such fault
            nxt = [u for u, _ in reserved] + active
            t = min(nxt) + 0.05 if nxt else t + 1.0
        else:
            skipped[kind] = skipped.get(kind, 0) + 1
    for i, f in enumerate(sorted(faults, key=lambda f: f.start)):
        f.id = i + 1
    return sorted(faults, key=lambda f: f.start), skipped


class Background:
    """Random healthy life of the cluster: job rates, idle nodes, job restarts, storage bursts,
    stray ignored CNPs. Never touches a node while a fault holds it."""

    def __init__(self, c, sim, rng, faults):
        self.c = c
        self.sim = sim
        self.rng = rng
        self.busy = {}  # node → [(from, until)] seconds into the campaign, held by faults
        for f in faults:
            for r in f.resources:
                if r.startswith("node:"):
                    self.busy.setdefault(r[5:], []).append((f.start - 1.0,
                                                            f.start + f.duration_s + 2.0))
        self.events = []
        self.idle = set()
        self.counts = {}

    def setup(self, horizon):
        """Initial rates (before agents start) and the timeline of background events."""
        rng = self.rng
        gpu_nodes = [n for n in self.c.nodes if n.role == "gpu"]
        for n in gpu_nodes:
            model = self.sim.node(n.name)
            # Idle nodes (no job: RDMA and GPUs at 0) may still be a fault's place: a cable
            # flaps whether or not it carries traffic.
            if n.ports and rng.random() < 0.2:
                self.idle.add(n.name)
                for port in model.ports.values():
                    port.tx_bps = port.rx_bps = 0
                model.gpu_util = 0
            else:
                rate = rng.uniform(2, 12) * GB
                for port in model.ports.values():
                    port.tx_bps = rate * rng.uniform(0.95, 1.05)
                    port.rx_bps = rate * rng.uniform(0.95, 1.05)
                model.gpu_util = rng.randint(70, 99)
        t = 1.0
        while t < horizon:
            t += rng.uniform(0.5, 3.0)
            what = rng.choice(["restart", "restart", "storage", "storage", "rate", "cnp"])
            if what == "cnp" and self.c.fabric != "roce":
                what = "rate"
            if what == "storage":
                stor = [n for n in self.c.nodes if n.role == "storage"]
                if stor:
                    self._storage(t, rng.choice(stor), rng.uniform(2, 6))
                continue
            cands = [n for n in gpu_nodes if n.ports and n.name not in self.idle and
                     self._free(n.name, t, t + 6.0)]
            if not cands:
                continue
            node = rng.choice(cands)
            if what == "restart":
                self._restart(t, node, rng.uniform(1.5, 4.0))
            elif what == "rate":
                self._rate(t, node, rng.uniform(0.5, 1.6))
            else:
                self._cnp(t, node, rng.randint(1, 3))
        self.events.sort(key=lambda e: e[0])

    def _free(self, name, a, b):
        return all(b < x or a > y for x, y in self.busy.get(name, []))

    def _count(self, what):
        self.counts[what] = self.counts.get(what, 0) + 1

    def _restart(self, t, node, dur):
        self._count("job restart")
        saved = {}

        def stop(ctx):
            model = ctx.sim.node(node.name)
            for d, port in model.ports.items():
                saved[d] = (port.tx_bps, port.rx_bps)
                port.tx_bps = port.rx_bps = 0
            saved["gpu"] = model.gpu_util
            model.gpu_util = 0
            model.nvml_dirty = True

        def back(ctx):
            model = ctx.sim.node(node.name)
            for d, port in model.ports.items():
                port.tx_bps, port.rx_bps = saved[d]
            model.gpu_util = saved["gpu"]
            model.nvml_dirty = True
        self.events.append((t, "bg: %s job restarts" % node.name, stop))
        self.events.append((t + dur, "bg: %s job back" % node.name, back))

    def _rate(self, t, node, factor):
        self._count("traffic change")

        def change(ctx):
            for port in ctx.sim.node(node.name).ports.values():
                port.tx_bps = min(12 * GB, port.tx_bps * factor)
                port.rx_bps = min(12 * GB, port.rx_bps * factor)
        self.events.append((t, "bg: %s traffic x%.2f" % (node.name, factor), change))

    def _storage(self, t, node, dur):
        self._count("storage burst")
        rate = self.rng.uniform(150, 800) * MB
        write = self.rng.random() < 0.5

        def burst(ctx):
            mgmt = ctx.sim.node(node.name).mgmt
            if not hasattr(mgmt, "calm"):
                mgmt.calm = (mgmt.tx_bps, mgmt.rx_bps)
            if write:
                mgmt.rx_bps = rate
            else:
                mgmt.tx_bps = rate

        def calm(ctx):
            mgmt = ctx.sim.node(node.name).mgmt
            mgmt.tx_bps, mgmt.rx_bps = mgmt.calm
        self.events.append((t, "bg: %s storage burst %.0f MB/s" % (node.name, rate / MB), burst))
        self.events.append((t + dur, "bg: %s storage calm" % node.name, calm))

    def _cnp(self, t, node, n):
        self._count("stray ignored CNPs")

        def stray(ctx):
            for port in ctx.sim.node(node.name).ports.values():
                port.bump("hw_counters/rp_cnp_ignored", n)
        self.events.append((t, "bg: %s %d stray ignored CNP(s)" % (node.name, n), stray))


# ---------------------------------------------------------------------------------------------
# Playback.

def _findings_total(text):
    out = {}
    for line in text.splitlines():
        if line.startswith("fabricmon_findings_total{"):
            m = re.search(r'kind="([^"]*)"', line)
            if m:
                out[m.group(1)] = out.get(m.group(1), 0) + float(line.rsplit(" ", 1)[1])
    return out


def play(harness, faults, background, out, poll_s=0.5, tick_s=0.2, baseline_s=3.0,
         max_extra_s=60.0):
    ctx = runner.Context(harness)
    seen = {}
    timeline = []
    for f in faults:
        for at, label, action, mark in f.steps:
            timeline.append((f.start + at, 1, label, action, f, mark))
    for t, label, action in background.events:
        timeline.append((t, 0, label, action, None, None))
    timeline.sort(key=lambda e: (e[0], e[1]))
    last = max([f.start + f.duration_s + 3.0 for f in faults] + [0.0])
    log = []

    def note(findings):
        for f in findings:
            seen[f.get("id")] = f

    ticker = runner.Ticker(harness.sim, tick_s)
    ticker.start()
    try:
        t_end = time.monotonic() + baseline_s
        while time.monotonic() < t_end:
            time.sleep(0.1)
        totals_before = _findings_total(harness.metrics_text())
        start = time.monotonic()
        start_ns = time.time_ns()
        next_poll = start
        next_all = start + 10.0
        hard_end = start + last + max_extra_s
        i = 0
        while True:
            now = time.monotonic()
            while i < len(timeline) and start + timeline[i][0] <= now:
                t, _, label, action, fault, mark = timeline[i]
                i += 1
                try:
                    runner.run_step(ticker, harness.sim, action, ctx)
                except (OSError, RuntimeError) as e:
                    if fault is not None:
                        fault.errors.append("%s: %s" % (label, e))
                    log.append("step %r failed: %s" % (label, e))
                stamp = time.time_ns()
                if fault is not None:
                    fault.stamps.setdefault("start", stamp)
                    if mark:
                        fault.stamps[mark] = stamp
                    fault.stamps["end"] = stamp
            if now >= next_poll:
                note(harness.findings())
                next_poll = time.monotonic() + poll_s
            if now >= next_all:
                note(harness.findings(include_cleared=True))
                next_all = time.monotonic() + 10.0
            if i >= len(timeline) and now >= start + last:
                break
            if now > hard_end:
                log.append("campaign stopped at its time bound")
                break
            dead = harness.dead_processes()
            if ticker.error:
                dead.append(("ticker", ticker.error))
            if dead:
                raise RuntimeError("process(es) exited during the campaign: %s" % dead)
            wake = start + timeline[i][0] if i < len(timeline) else next_poll
            time.sleep(max(0.0, min(wake - time.monotonic(), next_poll - time.monotonic(),
                                    0.05)))
        note(harness.findings(include_cleared=True))
        metrics = harness.metrics_text()
    finally:
        ticker.stop()
    totals_after = _findings_total(metrics)
    delta = {k: totals_after.get(k, 0) - totals_before.get(k, 0)
             for k in set(totals_after) | set(totals_before)}
    return {"seen": seen, "start_ns": start_ns, "metrics": metrics, "totals_delta": delta,
            "log": log, "wall_s": time.monotonic() - start}


# ---------------------------------------------------------------------------------------------
# Scoring.

def _pct(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def score(faults, run, interval_s):
    """Attributes every finding to a fault (or to none: false) and scores per finding kind."""
    findings = list(run["seen"].values())
    by_fault = {f.id: [] for f in faults}
    false = []
    for fd in findings:
        onset = int(fd.get("onset_unix_nanos", 0))
        key, peer = finding_key(fd), finding_peer(fd)
        best = None
        for f in faults:
            if "start" not in f.stamps:
                continue
            lo = f.stamps["start"] - int(0.2e9)
            hi = f.stamps.get("end", f.stamps["start"]) + int((f.quiet_s + 2) * 1e9)
            if not (lo <= onset <= hi):
                continue
            if key not in f.related and (peer is None or peer not in f.related):
                continue
            if f.expected and fd.get("kind") not in f.accept:
                continue
            exact = any(e.kind == fd.get("kind") and e.right_subject(fd) for e in f.expected)
            # A matching subject first; between equals the fault that started last (faults go
            # by start): a place reused right after its window belongs to the new fault.
            if best is None or (exact and not best[1]) or exact == best[1]:
                best = (f, exact)
        if best is None or not best[0].expected:
            false.append((fd, best[0] if best else None))
        else:
            by_fault[best[0].id].append(fd)
    rows = {}
    failures = []

    def row(kind):
        return rows.setdefault(kind, {"expected": 0, "found": 0, "right": 0, "ttd": [],
                                      "ids": [], "attributed": 0, "false": 0, "late": 0})
    for f in faults:
        got = by_fault[f.id]
        if not f.expected:
            r = row("(silent: %s)" % f.kind)
            r["expected"] += 1
            bad = [fd for fd, g in false if g is f]
            if not bad:
                r["found"] += 1
                r["right"] += 1
            for fd in bad:
                failures.append("fault %d %s [%s]: FALSE finding %s" % (
                    f.id, f.kind, f.place, finding_text(fd)))
            r["ids"].append(len(bad))
        for e in f.expected:
            r = row(e.kind)
            r["expected"] += 1
            same = [fd for fd in got if fd.get("kind") == e.kind]
            right = [fd for fd in same if e.right_subject(fd)]
            if same:
                r["found"] += 1
            if right:
                r["right"] += 1
                onset = min(int(fd.get("onset_unix_nanos", 0)) for fd in right)
                fire = f.stamps.get(e.fire_mark)
                if fire is not None:
                    ttd = ((onset - fire) / 1e9 - e.fire_delay_s) / interval_s
                    r["ttd"].append(ttd)
                    if ttd > e.budget or ttd < -e.early_ok:
                        r["late"] += 1
                        failures.append("fault %d %s [%s]: %s detected %.2f intervals after "
                                        "the rule could fire (target <= %g)" % (
                                            f.id, f.kind, f.place, e.describe(), ttd,
                                            e.budget))
            elif same:
                failures.append("fault %d %s [%s]: WRONG SUBJECT: expected %s, got %s" % (
                    f.id, f.kind, f.place, e.describe(),
                    "; ".join(finding_text(fd) for fd in same)))
            else:
                failures.append("fault %d %s [%s]: MISSED %s%s" % (
                    f.id, f.kind, f.place, e.describe(),
                    (" (saw: %s)" % "; ".join(finding_text(fd) for fd in got)) if got else ""))
        # Churn: every finding attributed to this fault counts once; the target is one per
        # expected finding.
        if f.expected:
            share = len(got) / float(len(f.expected))
            for e in f.expected:
                row(e.kind)["ids"].append(share)
            for fd in got:
                row(fd.get("kind", "?"))["attributed"] += 1
            if len(got) > len(f.expected):
                failures.append("fault %d %s [%s]: CHURN: %d findings for %d expected: %s" % (
                    f.id, f.kind, f.place, len(got), len(f.expected),
                    "; ".join("#%s %s" % (fd.get("id"), finding_text(fd)) for fd in got)))
        for err in f.errors:
            failures.append("fault %d %s [%s]: step failed: %s" % (f.id, f.kind, f.place, err))
    for fd, f in false:
        if f is None:
            row(fd.get("kind", "?"))["false"] += 1
            failures.append("FALSE finding (no fault there): #%s %s  [%s]" % (
                fd.get("id"), finding_text(fd), fd.get("summary", "")[:160]))
        else:
            row(fd.get("kind", "?"))["false"] += 1
    expected_by_kind = {}
    for f in faults:
        for e in f.expected:
            expected_by_kind[e.kind] = expected_by_kind.get(e.kind, 0) + 1
    for kind, n in sorted(run["totals_delta"].items()):
        want = expected_by_kind.get(kind, 0)
        if n != want:
            failures.append("fabricmon_findings_total{kind=%s} rose by %d, %d incident(s) of "
                            "that kind were injected" % (kind, n, want))
    for f in faults:
        for check in f.checks:
            for ok, detail in check(run["metrics"]):
                if not ok:
                    failures.append("fault %d %s [%s]: CHECK FAILED: %s" % (
                        f.id, f.kind, f.place, detail))
    total_findings = len(findings)
    attributed = sum(len(v) for v in by_fault.values())
    return {"rows": rows, "failures": failures, "findings": total_findings,
            "attributed": attributed, "false": len(false),
            "expected_by_kind": expected_by_kind}


def print_table(result, out=print):
    rows = result["rows"]
    delta = result.get("totals_delta", {})
    out("   %-26s %5s %7s %7s %7s %10s %10s %6s %8s" % (
        "KIND", "N", "RECALL", "PRECIS", "LOCAL", "TTD med", "TTD p95", "CHURN", "TOTAL/N"))
    keys = sorted(rows, key=lambda k: (k.startswith("("), k))
    for kind in keys:
        r = rows[kind]
        n = r["expected"]
        silent = kind.startswith("(")
        findings_of_kind = r["attributed"] + r["false"]
        precision = ("%.3f" % (r["attributed"] / findings_of_kind) if findings_of_kind
                     else "-") if not silent else "-"
        med, p95 = statistics.median(r["ttd"]) if r["ttd"] else None, _pct(r["ttd"], 0.95)
        churn = ("%.2f" % (sum(r["ids"]) / len(r["ids"]))) if r["ids"] and not silent else "-"
        total = ("%.2f" % (delta.get(kind, 0) / n)) if n and not silent else "-"
        out("   %-26s %5d %7s %7s %7s %10s %10s %6s %8s" % (
            kind, n, "%.3f" % (r["found"] / n) if n else "-", precision,
            "%.3f" % (r["right"] / r["found"]) if r["found"] else "-",
            "%.2f" % med if med is not None else "-", "%.2f" % p95 if p95 is not None else "-",
            churn, total))
    exp = sum(r["expected"] for k, r in rows.items() if not k.startswith("("))
    found = sum(r["found"] for k, r in rows.items() if not k.startswith("("))
    right = sum(r["right"] for k, r in rows.items() if not k.startswith("("))
    ttd = [t for r in rows.values() for t in r["ttd"]]
    ids = [x for k, r in rows.items() if not k.startswith("(") for x in r["ids"]]
    findings = result["findings"]
    out("   %-26s %5d %7s %7s %7s %10s %10s %6s %8s" % (
        "ALL", exp, "%.3f" % (found / exp) if exp else "-",
        "%.3f" % (result["attributed"] / findings) if findings else "-",
        "%.3f" % (right / found) if found else "-",
        "%.2f" % statistics.median(ttd) if ttd else "-",
        "%.2f" % _pct(ttd, 0.95) if ttd else "-",
        "%.2f" % (sum(ids) / len(ids)) if ids else "-",
        "%.2f" % (sum(v for k, v in delta.items()) / exp) if exp else "-"))


# ---------------------------------------------------------------------------------------------

def run_campaign(build_dir, seed, nfaults, flavour, kinds=None, concurrency=3, keep=False,
                 out=print, save_recording_dir=None):
    """save_recording_dir: the aggregator records the campaign, which is kept with its ground
    truth as a replay fixture in <save_recording_dir>/campaign_<flavour>/ when its replay scores
    clean (campaign_replay.save). Not for the straggler flavour: its jobs are registered over
    the Diagnostics service, which the recording does not hold."""
    bins = runner.Binaries(build_dir)
    missing = bins.missing()
    if missing:
        out("fabric_sim campaign: missing build outputs: %s" % ", ".join(missing))
        return 1, None
    rng = random.Random("campaign/%d/%s" % (seed, flavour))
    if flavour == "straggler":
        # Jobs of 3-8 nodes, several at once: 4 leaves x 5 hosts. Host counters only (switch
        # ports add nothing to a job's comparison); the fabric is drawn from the seed.
        c = campaign_cluster(rng, rng.choice(["ib", "roce"]), leaves=4, per_leaf=5)
    else:
        c = campaign_cluster(rng, "ib" if flavour == "ib" else "roce")
    all_kinds = flavour_kinds(flavour)
    kinds = [k for k in (kinds or default_kinds(flavour)) if k in all_kinds]
    want_ibsim = flavour == "ib"
    runner.install_signal_handlers()
    t0 = time.time()
    harness = runner.Harness(bins, fabric=c.fabric, cluster=c, want_ibsim=want_ibsim,
                             keep=keep, log=out, interval_ms=INTERVAL_MS, tick_ms=TICK_MS,
                             detectors=DETECTORS, seed=seed,
                             record=save_recording_dir is not None)
    try:
        # ibsim availability decides the switch faults; probe before scheduling.
        ibsim_ok = want_ibsim and runner.ibsim_mod.available()[0]
        faults, skipped = schedule(c, rng, nfaults, kinds, concurrency, ibsim_ok)
        background = Background(c, harness.sim, rng, faults)
        horizon = max([f.start + f.duration_s for f in faults] + [10.0])
        background.setup(horizon)
        for f in faults:
            if f.baseline:
                f.baseline(harness.sim)
        harness.start()
        if want_ibsim and harness.mode != "ibsim":
            out("== campaign seed %d ib: SKIPPED: ibsim mode required but %s"
                % (seed, harness.mode_note))
            return runner.SKIP, None
        harness.wait_ready(timeout=60)
        roles = {}
        for n in c.nodes:
            label = n.role + ("" if n.ports or n.role == "gpu" else " (no RDMA)")
            roles[label] = roles.get(label, 0) + 1
        out("== campaign seed %d flavour %s: %s; %s" % (
            seed, flavour, c.describe(), ", ".join("%d %s" % (v, k)
                                                  for k, v in sorted(roles.items()))))
        out("   switches: %s; nodes: %s" % (", ".join(sorted(c.switches)),
                                           ", ".join(sorted(n.name for n in c.nodes))))
        out("   mode: %s (%s)" % (harness.mode, harness.mode_note))
        out("   %d faults over %.0f s (at most %d at once)%s; background: %s" % (
            len(faults), horizon, concurrency,
            (" (not placed: %s)" % skipped) if skipped else "",
            ", ".join("%d %s" % (v, k) for k, v in sorted(background.counts.items())) +
            (", %d idle GPU node(s)" % len(background.idle))))
        sys.stdout.flush()
        # Jobs are judged by comparing nodes' rates: counter ticks every 50 ms, not 200 ms, so
        # that a sample's rate is not +-20 % off by holding 2 or 3 ticks (scenarios.Scenario).
        run = play(harness, faults, background, out,
                   tick_s=0.05 if flavour == "straggler" else 0.2)
        if keep:
            with open(harness.root + "/metrics-end.txt", "w") as mf:
                mf.write(run["metrics"])
            with open(harness.root + "/findings.json", "w") as ff:
                json.dump(list(run["seen"].values()), ff, indent=1)
        result = score(faults, run, INTERVAL_MS / 1000.0)
        result["totals_delta"] = run["totals_delta"]
        result.update({"seed": seed, "flavour": flavour, "faults": len(faults),
                       "wall_s": time.time() - t0, "mode": harness.mode,
                       "cluster": c.summary(), "log": run["log"],
                       "fault_list": [{"id": f.id, "kind": f.kind, "place": f.place,
                                       "start_s": round(f.start, 2),
                                       "expected": [e.describe() for e in f.expected]}
                                      for f in faults]})
        if save_recording_dir is not None:
            from . import campaign_replay
            # The agents end first, so that the recording ends with their streams' ends.
            harness.stop_agents()
            time.sleep(1.0)
            saved = campaign_replay.save(
                harness, os.path.join(save_recording_dir, "campaign_%s" % flavour),
                campaign_replay.ground_truth(
                    faults, c, flavour, seed, INTERVAL_MS / 1000.0,
                    sweeper=harness.sweeper_node().name if harness.mode == "ibsim" else None),
                out=out)
            result["failures"] += ["saving the recording: %s" % line for line in saved]
        print_table(result, out=out)
        for line in run["log"]:
            out("   note: %s" % line)
        if result["failures"]:
            out("   FAILURES (%d):" % len(result["failures"]))
            for line in result["failures"]:
                out("     - %s" % line)
        out("   RESULT: %s (%.0f s; reproduce: python3 -m fabric_sim campaign --build-dir B "
            "--seed=%d --faults=%d --flavour=%s%s%s)" % (
                "PASS" if not result["failures"] else "FAIL", time.time() - t0, seed, nfaults,
                flavour,
                (" --kinds=%s" % ",".join(kinds)) if kinds != default_kinds(flavour) else "",
                (" --concurrency=%d" % concurrency) if concurrency != 3 else ""))
        if result["failures"] and keep:
            out("   (kept %s)" % harness.root)
        return (0 if not result["failures"] else 1), result
    except RuntimeError as e:
        out("== campaign seed %d %s: ERROR: %s" % (seed, flavour, e))
        return 1, None
    except KeyboardInterrupt:
        out("== campaign interrupted")
        return 130, None
    finally:
        harness.stop()


def flavour_kinds(flavour):
    return {"ib": IB_KINDS, "roce": ROCE_KINDS,
            "straggler": STRAGGLER_FLAVOUR_KINDS}[flavour]


def default_kinds(flavour):
    """The schedule's round robin: every kind once per round, but in the straggler flavour
    two of each straggler kind per healthy job of each kind (100 stragglers in ~190 jobs)."""
    if flavour == "straggler":
        from . import campaign_jobs
        return campaign_jobs.WEIGHTED_KINDS
    return flavour_kinds(flavour)


def main(args):
    flavours = ["ib", "roce"] if args.flavour == "both" else [args.flavour]
    kinds = args.kinds.split(",") if args.kinds else None
    status = 0
    results = []
    for flavour in flavours:
        n = args.faults
        flavour_list = kinds
        if args.slice:
            flavour_list = kinds or flavour_kinds(flavour)
            n = len(set(flavour_list))
        if getattr(args, "save_recording", None) and flavour == "straggler":
            print("fabric_sim campaign: --save-recording: not for the straggler flavour (its "
                  "jobs are not in the recording)")
            return 2
        rc, result = run_campaign(args.build_dir, args.seed, n, flavour, kinds=flavour_list,
                                  concurrency=args.concurrency, keep=args.keep,
                                  save_recording_dir=getattr(args, "save_recording", None))
        sys.stdout.flush()
        if result:
            results.append(result)
        if rc == 130:
            return rc  # interrupted: no further flavour
        if rc == runner.SKIP and len(flavours) == 1:
            return rc
        if rc not in (0, runner.SKIP):
            status = 1
    if len(results) > 1:
        merged = merge(results)
        print("== all flavours: %d faults, seeds %s" % (
            sum(r["faults"] for r in results), sorted({r["seed"] for r in results})))
        print_table(merged)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=list)
    return status


def merge(results):
    rows = {}
    for r in results:
        for kind, row in r["rows"].items():
            m = rows.setdefault(kind, {"expected": 0, "found": 0, "right": 0, "ttd": [],
                                       "ids": [], "attributed": 0, "false": 0, "late": 0})
            for k in ("expected", "found", "right", "attributed", "false", "late"):
                m[k] += row[k]
            m["ttd"] += row["ttd"]
            m["ids"] += row["ids"]
    delta = {}
    for r in results:
        for k, v in r["totals_delta"].items():
            delta[k] = delta.get(k, 0) + v
    return {"rows": rows, "totals_delta": delta,
            "findings": sum(r["findings"] for r in results),
            "attributed": sum(r["attributed"] for r in results),
            "failures": [x for r in results for x in r["failures"]]}
