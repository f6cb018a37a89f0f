"""The campaign's job faults (flavour "straggler"): synchronous jobs registered through the CLI
(`fabricmon job start --name --nodes`, `fabricmon job end`) on a random set of GPU nodes, one
straggler each, or uneven by design and quiet.

Every job fault takes 3-8 free GPU nodes, sets them to one RDMA rate (3-10 GB/s each way, +-2 %
per node) with busy GPUs, registers the job 1 s later (its first samples then hold the job's
traffic only), plays its fault, ends the job and gives the nodes back to the background.

Stragglers (one expected `straggler` finding on the node, naming the job; plus what the other
detectors rightly see of the same fault):
  straggler_drop       after 3 s at pace, one node's rail at 30-55 % of its rate, nothing else
  straggler_held_back  one node at 40-55 % from the job's start, its port waiting for credits
                       (IB XmitWait) or paused by its switch (RoCE PFC) 30-50 % of the time: also
                       `congestion` on that port
  straggler_tcp        after 3 s at pace, one node's RDMA stops and its management netdev moves
                       ~1.1 GB/s (NCCL on sockets): also `tcp_fallback`
  straggler_nvlink     after 3 s at pace, one GPU link of one node retries on CRC errors and
                       the node's RDMA falls to 40-55 %: also `nvlink_degraded` on the link
                       (NVLink throughput is not collected: the slow link shows through its
                       errors and the node's RDMA)
Healthy jobs (silent: any finding on their nodes is false):
  job_pipeline         two stages from the start (the second at 30-60 % of the first)
  job_param_server     one rank at 2-3x the others
  job_first_stage      one node at 30-60 % of the others from the start
  job_phase_change     the whole job slows to 40-70 % at once, mid-job
  job_restart          the whole job stops (RDMA and GPUs to 0) for 2 s and comes back
  job_idle             registered, GPUs idle, ~10 MB/s
  job_small            3 nodes; one halves mid-job (below straggler_min_job_nodes)

Python 3 standard library only.
"""

from . import campaign as cm
from .scenarios import finding_job, outside_ticks, set_gpu as _set_gpu, set_rate as _set_rate

GB = 1e9

STRAGGLER_KINDS = ["straggler_drop", "straggler_held_back", "straggler_tcp", "straggler_nvlink"]
HEALTHY_KINDS = ["job_pipeline", "job_param_server", "job_first_stage", "job_phase_change",
                 "job_restart", "job_idle", "job_small"]
# The schedule's round robin: two of each straggler kind per healthy job of each kind.
WEIGHTED_KINDS = STRAGGLER_KINDS * 2 + HEALTHY_KINDS

REGISTER_AT = 1.0   # after the rates are set: the job's first samples hold its traffic only
FAULT_AT = 4.0      # mid-job faults: 3 s (6 samples) after registration, at pace
HOLD_S = 3.0        # how long a fault lasts (6 samples; found within 4)
# Time to detect, as the campaign measures it for every rule that holds for several samples by
# design: from the moment the rule could first fire, one interval after a change mid-job reached
# the counters (the detector wants 2 slow samples, straggler_samples); for a node slow from the
# job's start, at its registration (the sample before it is already slow). Target: p95 within 3
# intervals after that (README "Fault campaign"; the first sample after a change still holds
# part of the healthy rate, and a 4-node job's median and MAD are noisy); a detection later than
# 4 fails the run.
STRAGGLER_DELAY_S = cm.INTERVAL_MS / 1000.0
STRAGGLER_BUDGET = 4.0


class JobExpected(cm.Expected):
    """A straggler finding: the node, and the job its evidence names."""

    def __init__(self, node, job, fire_mark, mid_job=True):
        super().__init__("straggler", subject=("node", node), fire_mark=fire_mark,
                         fire_delay_s=STRAGGLER_DELAY_S if mid_job else 0.0,
                         budget=STRAGGLER_BUDGET)
        self.job = job

    def describe(self):
        return "straggler %s of job %s" % (self.subject[1], self.job)

    def right_subject(self, f):
        return super().right_subject(f) and finding_job(f) == self.job


class _Saved:
    """A node's rates and states before the job took it, given back when the job ends."""

    def __init__(self, model):
        self.ports = {d: (p.tx_bps, p.rx_bps, p.wait_fraction) for d, p in model.ports.items()}
        self.pause = {n: dict(e.pause_fraction) for n, e in model.ethtool.items()}
        self.mgmt = (model.mgmt.tx_bps, model.mgmt.rx_bps)
        self.gpu = model.gpu_util

    def restore(self, model):
        for d, (tx, rx, wait) in self.ports.items():
            port = model.ports[d]
            port.tx_bps, port.rx_bps, port.wait_fraction = tx, rx, wait
        for n, fractions in self.pause.items():
            model.ethtool[n].pause_fraction.update(fractions)
        model.mgmt.tx_bps, model.mgmt.rx_bps = self.mgmt
        model.gpu_util = self.gpu
        model.nvml_dirty = True


def _cli(ctx, *args):
    rc, out, err = ctx.harness.cli(*args)
    if rc != 0:
        raise RuntimeError("fabricmon %s: exit %d: %s" % (" ".join(args), rc, err.strip()))


def _job_name(rng):
    style = rng.randrange(4)
    number = rng.randrange(100000, 9999999)
    if style == 0:
        return str(number)                                   # a Slurm job id
    if style == 1:
        return "%d_%d" % (number, rng.randrange(0, 64))      # an array task
    if style == 2:
        return "%d+%d" % (number, rng.randrange(0, 3))       # a het job component
    return "%s-%d" % (rng.choice(["llm-pretrain", "ft.7b", "rlhf", "vit@eu"]), number % 10000)


def make_job_fault(fid, kind, c, rng, free, state):
    """One job fault of `kind` on free GPU nodes of cluster `c`; None when too few are free."""
    size = 3 if kind == "job_small" else rng.randint(4, 8)
    cands = [n for n in c.nodes if n.role == "gpu" and n.ports and free({"node:" + n.name})]
    if len(cands) < size:
        return None
    chosen = sorted(rng.sample(cands, size), key=lambda n: n.name)
    nodes = [n.name for n in chosen]
    job = _job_name(rng)
    rate = rng.uniform(3, 10) * GB
    jitter = {n: rng.uniform(0.98, 1.02) for n in nodes}
    gpu = {n: rng.randint(85, 97) for n in nodes}
    odd_node = rng.choice(chosen)                      # the node the fault is about
    odd, hp = odd_node.name, odd_node.ports[0]
    level = {n: 1.0 for n in nodes}                    # rate factors from the job's start
    held = 0.0                                         # held_back: its wait / pause fraction
    mid_job = kind in ("straggler_drop", "straggler_tcp", "straggler_nvlink",
                       "job_phase_change", "job_restart", "job_small")
    end_at = (FAULT_AT if mid_job else REGISTER_AT) + HOLD_S + 1.0
    place = "job %s on %s" % (job, ",".join(nodes))
    expected = []
    related = {("node", n) for n in nodes}
    congestion = False
    change = {}                                        # mid-job: node -> rate factor
    gpus_to = None                                     # mid-job: every node's GPUs to this
    link = None                                        # straggler_nvlink: (gpu, link)
    tcp = False

    if kind == "straggler_drop":
        change[odd] = rng.uniform(0.3, 0.55)
        place += ": %s's rail at %.0f %%" % (odd, change[odd] * 100)
        expected = [JobExpected(odd, job, "visible")]
    elif kind == "straggler_held_back":
        level[odd] = rng.uniform(0.4, 0.55)
        held = rng.uniform(0.3, 0.5)
        place += ": %s at %.0f %%, %s %.0f %% of the time" % (
            odd, level[odd] * 100, "waiting" if c.fabric == "ib" else "paused", held * 100)
        expected = [JobExpected(odd, job, "visible", mid_job=False),
                    # The port waits from the job's first traffic on, before it is registered;
                    # a plain congestion finding wants 2 samples (congestion_raise_samples).
                    cm.Expected("congestion", subject=cm.host_ep(hp), fire_mark="start",
                                fire_delay_s=cm.INTERVAL_MS / 1000.0)]
        related |= cm._cable_related(hp)
        congestion = True
    elif kind == "straggler_tcp":
        change[odd] = 0.0
        tcp = True
        place += ": %s on TCP sockets" % odd
        expected = [JobExpected(odd, job, "visible"),
                    # RDMA stops and sockets start at once here (campaign.py's tcp_fallback
                    # stops RDMA 1.5 s earlier): the first sample after still holds RDMA bytes,
                    # as for the straggler.
                    cm.Expected("tcp_fallback", subject=("node", odd),
                                fire_delay_s=2 * cm.TICK_MS / 1000.0, budget=STRAGGLER_BUDGET)]
    elif kind == "straggler_nvlink":
        link = (rng.randrange(8), rng.randrange(18))
        change[odd] = rng.uniform(0.4, 0.55)
        place += ": %s gpu%d link%d retries, its RDMA at %.0f %%" % (odd, link[0], link[1],
                                                                      change[odd] * 100)
        subject = ("gpu", odd, link[0], link[1])
        expected = [JobExpected(odd, job, "visible"),
                    cm.Expected("nvlink_degraded", subject=subject)]
        related.add(subject)
    elif kind == "job_pipeline":
        second = rng.uniform(0.3, 0.6)
        split = rng.randint(1, size - 1)
        for n in nodes[split:]:
            level[n] = second
        place += ": stages of %d and %d nodes, the second at %.0f %%" % (
            split, size - split, second * 100)
    elif kind == "job_param_server":
        level[odd] = rng.uniform(2.0, 3.0)
        place += ": %s serves at %.1fx" % (odd, level[odd])
    elif kind == "job_first_stage":
        level[odd] = rng.uniform(0.3, 0.6)
        place += ": %s at %.0f %% from the start" % (odd, level[odd] * 100)
    elif kind == "job_phase_change":
        factor = rng.uniform(0.4, 0.7)
        change = {n: factor for n in nodes}
        place += ": the whole job slows to %.0f %%" % (factor * 100)
    elif kind == "job_restart":
        change = {n: 0.0 for n in nodes}
        gpus_to = 0
        place += ": the whole job restarts"
    elif kind == "job_small":
        change[odd] = 0.5
        place += ": %s halves (3 nodes: too small to judge)" % odd
    elif kind == "job_idle":
        place += ": GPUs idle"
    else:
        return None

    f = cm.Fault(fid, kind, place, end_at + 0.5,
                 cm.CONGESTION_CLEAR_S if congestion else 2.0,
                 {"node:" + n for n in nodes} | ({"congestion"} if congestion else set()),
                 related, expected, congestion=congestion)
    saved = {}
    idle = kind == "job_idle"

    def at_pace(ctx, n):
        _set_rate(ctx, n, 0.01 * GB if idle else rate * jitter[n] * level[n])
        _set_gpu(ctx, n, 0 if idle else gpu[n])

    def setup(ctx):
        for n in nodes:
            saved[n] = _Saved(ctx.sim.node(n))
            at_pace(ctx, n)
        if held:
            if c.fabric == "ib":
                ctx.sim.port(odd, hp.device).wait_fraction = held
            else:
                ctx.sim.node(odd).ethtool[hp.netdev].pause_fraction["rx"] = held

    def fault(ctx):
        for n, factor in change.items():
            _set_rate(ctx, n, rate * jitter[n] * level[n] * factor)
            if gpus_to is not None:
                _set_gpu(ctx, n, gpus_to)
        if link is not None:
            ctx.sim.node(odd).nvlink_rates[link] = {"crc_flit": 400.0, "replay": 30.0,
                                                    "crc_data": 4.0}
        if tcp:
            mgmt = ctx.sim.node(odd).mgmt
            mgmt.tx_bps = mgmt.rx_bps = 0.55e9

    def heal(ctx):
        for n in nodes:
            at_pace(ctx, n)
        model = ctx.sim.node(odd)
        model.nvlink_rates.pop(link, None)
        model.mgmt.tx_bps, model.mgmt.rx_bps = saved[odd].mgmt
        model.ports[hp.device].wait_fraction = saved[odd].ports[hp.device][2]
        for netdev, fractions in saved[odd].pause.items():
            model.ethtool[netdev].pause_fraction.update(fractions)
        if held:
            level[odd] = 1.0
            at_pace(ctx, odd)

    def register(ctx):
        _cli(ctx, "job", "start", "--name=" + job, "--nodes=" + ",".join(nodes))

    def end(ctx):
        _cli(ctx, "job", "end", "--name=" + job)

    def give_back(ctx):
        for n in nodes:
            saved[n].restore(ctx.sim.node(n))

    f.step(0.0, "%s: its nodes at one rate" % job, setup)  # stamps "start"
    f.step(REGISTER_AT, "%s: fabricmon job start" % job, outside_ticks(register),
           mark=None if mid_job else "visible")
    if mid_job:
        f.step(FAULT_AT, "%s: %s" % (job, kind), fault, mark="visible")
    f.step(end_at - 1.0, "%s: healthy again" % job, heal)
    # The job ends while its nodes still run at pace: ending it first, then letting the
    # background take the nodes, never judges a job whose nodes are back at unrelated rates.
    f.step(end_at, "%s: fabricmon job end" % job, outside_ticks(end))
    f.step(end_at + 0.5, "%s: nodes back to the background" % job, give_back)
    return f
