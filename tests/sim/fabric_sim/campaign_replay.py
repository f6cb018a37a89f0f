"""Fault campaigns as recorded replay fixtures (tests/replay/campaign_*/).

A campaign run with --save-recording records what the aggregator accepted (recording { ... }).
When the run is over, its recording, the aggregator's detector configuration, the link list and
the ground truth of every injected fault (truth.json: where and when it was injected, the
findings it must cause, the places that belong to it; and the nodes no fault touched) are kept
together. score_replay() scores `fabricmon replay --json` of that recording against the ground
truth, as campaign.score() scores the live findings:
  - every expected finding is raised, of its kind, on its subject (a cable: either end, the peer
    the other end), between the moment its rule could first fire and that plus its budget in
    sampling intervals (campaign.Expected);
  - every finding the replay raises is attributed to a fault (its onset in the fault's window,
    its subject or peer a place of the fault, its kind one the fault accepts); a finding on a
    node no fault touched, on a silent fault's place, or outside every window is false;
  - no more findings per fault than it is expected to cause (churn).
Not scored offline: fabricmon_findings_total and the faults' /metrics checks (the replay's
timeline holds the findings, not the live aggregator's counters).

The stamps are the campaign's wall clock (time.time_ns()) and the replay's onsets are recorded
receive times of the same machine's clock, so the windows hold in the replay as they did live.
"""

import json
import lzma
import os
import shutil
import subprocess

from . import campaign


TRUTH_FORMAT = 1


def _key_json(k):
    return list(k) if k is not None else None


def _key(v):
    return tuple(v) if v is not None else None


def ground_truth(faults, cluster, flavour, seed, interval_s, sweeper=None):
    """The ground truth of a played campaign, as JSON-ready data. sweeper: the node whose agent
    sweeps the (ibsim) fabric, when switch ports are swept."""
    touched = set()
    out = []
    for f in faults:
        for k in f.related:
            touched.add(k[1])
        out.append({
            "id": f.id, "kind": f.kind, "place": f.place,
            "start_ns": f.stamps.get("start"), "end_ns": f.stamps.get("end"),
            "quiet_s": f.quiet_s,
            "related": sorted(_key_json(k) for k in f.related),
            "accept": sorted(f.accept),
            "expected": [{"kind": e.kind, "subject": _key_json(e.subject),
                          "pair": sorted(_key_json(k) for k in e.pair) if e.pair else None,
                          "fire_ns": f.stamps.get(e.fire_mark), "fire_delay_s": e.fire_delay_s,
                          "early_ok": e.early_ok, "budget": e.budget}
                         for e in f.expected],
        })
    nodes = sorted(n.name for n in cluster.nodes)
    return {"format": TRUTH_FORMAT, "flavour": flavour, "seed": seed, "interval_s": interval_s,
            "sweeper": [sweeper] if sweeper else [],
            "nodes": nodes, "healthy_nodes": [n for n in nodes if n not in touched],
            "faults": out}


class _Fault:
    """A fault of truth.json, with what campaign.score() reads of a live one."""

    def __init__(self, d):
        self.id = d["id"]
        self.kind = d["kind"]
        self.place = d["place"]
        self.start_ns = d["start_ns"]
        self.end_ns = d["end_ns"] if d["end_ns"] is not None else d["start_ns"]
        self.quiet_s = d["quiet_s"]
        self.related = {_key(k) for k in d["related"]}
        self.accept = set(d["accept"])
        self.required = d.get("required", True)
        self.expected = []
        for e in d["expected"]:
            x = campaign.Expected(e["kind"], subject=_key(e["subject"]),
                                  pair=[_key(k) for k in e["pair"]] if e["pair"] else None,
                                  fire_delay_s=e["fire_delay_s"], early_ok=e["early_ok"],
                                  budget=e["budget"])
            x.fire_ns = e["fire_ns"]
            self.expected.append(x)


def replayed_findings(timeline):
    """The last version of every finding `fabricmon replay --json` raised (an escalation
    replaces the raised one; the onset stays)."""
    last = {}
    for event in json.loads(timeline).get("events", []):
        if event.get("event") == "cleared":
            continue
        last[event["finding"].get("id")] = event["finding"]
    return list(last.values())


def score_replay(truth, timeline):
    """Failures (a list of lines; empty: the replay finds what the ground truth says) and the
    number of expected findings found at the right place."""
    if truth.get("format") != TRUTH_FORMAT:
        return ["truth.json: format %r, not %d" % (truth.get("format"), TRUTH_FORMAT)], 0
    interval_s = truth["interval_s"]
    faults = [_Fault(d) for d in truth["faults"] if d["start_ns"] is not None]
    healthy = set(truth["healthy_nodes"])
    findings = replayed_findings(timeline)
    failures = []
    by_fault = {f.id: [] for f in faults}
    for fd in findings:
        onset = int(fd.get("onset_unix_nanos", 0))
        key, peer = campaign.finding_key(fd), campaign.finding_peer(fd)
        best = None
        for f in faults:
            lo = f.start_ns - int(0.2e9)
            hi = f.end_ns + int((f.quiet_s + 2) * 1e9)
            if not (lo <= onset <= hi):
                continue
            if key not in f.related and (peer is None or peer not in f.related):
                continue
            if f.expected and fd.get("kind") not in f.accept:
                continue
            exact = any(e.kind == fd.get("kind") and e.right_subject(fd) for e in f.expected)
            if best is None or (exact and not best[1]) or exact == best[1]:
                best = (f, exact)
        if best is not None and not best[0].required:
            continue  # a tolerated fault's finding
        if best is None or not best[0].expected:
            where = ("on healthy node %s" % key[1]) if key and key[1] in healthy else (
                "at silent fault %d %s [%s]" % (best[0].id, best[0].kind, best[0].place)
                if best else "attributable to no fault")
            failures.append("FALSE finding %s: %s" % (where, campaign.finding_text(fd)))
        else:
            by_fault[best[0].id].append(fd)
    right_total = 0
    for f in faults:
        if not f.required:
            continue  # left out of the fixture: its findings are its own, not required
        got = by_fault[f.id]
        for e in f.expected:
            same = [fd for fd in got if fd.get("kind") == e.kind]
            right = [fd for fd in same if e.right_subject(fd)]
            if not right:
                failures.append("fault %d %s [%s]: %s %s" % (
                    f.id, f.kind, f.place,
                    "WRONG SUBJECT: expected" if same else "MISSED", e.describe()) +
                    ("; got %s" % "; ".join(campaign.finding_text(fd) for fd in same)
                     if same else ""))
                continue
            right_total += 1
            if e.fire_ns is None:
                continue
            onset = min(int(fd.get("onset_unix_nanos", 0)) for fd in right)
            ttd = ((onset - e.fire_ns) / 1e9 - e.fire_delay_s) / interval_s
            if ttd > e.budget or ttd < -e.early_ok:
                failures.append("fault %d %s [%s]: %s detected %.2f intervals after the rule "
                                "could fire (target %g..%g)" % (
                                    f.id, f.kind, f.place, e.describe(), ttd, -e.early_ok,
                                    e.budget))
        if f.expected and len(got) > len(f.expected):
            failures.append("fault %d %s [%s]: CHURN: %d findings for %d expected: %s" % (
                f.id, f.kind, f.place, len(got), len(f.expected),
                "; ".join(campaign.finding_text(fd) for fd in got)))
    return failures, right_total


def _nodes_of(fault, all_nodes):
    """The cluster nodes a fault's places are on (its related keys name switches too)."""
    return {k[1] for k in fault["related"] if k[1] in all_nodes}


def select(truth, node_budget, healthy_kept):
    """A representative part of a campaign that fits a size: faults, smallest first, as long as
    the nodes they are on stay within `node_budget` (a GPU node's recording is ~50 KB xz per 90 s);
    then `healthy_kept` healthy nodes (no fault on them), in name order. A fault left out stays in
    the truth as tolerated (required: false): findings attributed to it are neither false nor
    required. Returns (truth, nodes)."""
    all_nodes = set(truth["nodes"])
    # In ibsim mode the switch ports' counters come from the fabric sweeper's agent.
    chosen = set(truth.get("sweeper") or [])
    kept = []
    for f in sorted(truth["faults"], key=lambda f: (len(_nodes_of(f, all_nodes)), f["id"])):
        need = _nodes_of(f, all_nodes)
        if len(chosen | need) <= node_budget + len(truth.get("sweeper") or []):
            chosen |= need
            kept.append(f["id"])
    # The faults left out stay as tolerated: their findings can still show where their places
    # meet the kept nodes (an incast's senders, a cable's switch end through the sweeper).
    faults = [dict(f, required=f["id"] in kept) for f in truth["faults"]]
    healthy = truth["healthy_nodes"][:healthy_kept]
    nodes = sorted(chosen | set(healthy))
    return dict(truth, faults=faults, healthy_nodes=healthy, nodes=nodes), nodes


def make_fixture(cli, whole, config, links, truth, dest, node_budget=3, healthy_kept=2,
                 scratch=None, out=print):
    """Writes dest/{recording.fmrec.xz, truth.json} (config and links already there) from the
    whole recording of a campaign `whole`: the part select() keeps, provided its replay scores
    clean. Returns a list of failures."""
    part, nodes = select(truth, node_budget, healthy_kept)
    exported = os.path.join(scratch or dest, "part.fmrec")
    with open(exported, "wb") as f:
        result = subprocess.run([cli, "record", "export", "--dir=" + whole, "--from=0",
                                 "--to=4102444800", "--nodes=" + ",".join(nodes)],
                                stdout=f, stderr=subprocess.PIPE, timeout=120)
    if result.returncode != 0:
        return ["fabricmon record export exited %d: %s" % (
            result.returncode, result.stderr.decode(errors="replace"))]
    replayed = subprocess.run([cli, "replay", exported, "--config=" + config,
                               "--link_list=" + links, "--json"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=300)
    if replayed.returncode != 0:
        return ["fabricmon replay exited %d: %s" % (
            replayed.returncode, replayed.stderr.decode(errors="replace"))]
    failures, right = score_replay(part, replayed.stdout)
    if failures:
        return ["the replay of nodes %s does not score clean:" % ",".join(nodes)] + failures
    with open(exported, "rb") as f:
        raw = f.read()
    os.unlink(exported)
    compressed = lzma.compress(raw, preset=9 | lzma.PRESET_EXTREME)
    with open(os.path.join(dest, "recording.fmrec.xz"), "wb") as f:
        f.write(compressed)
    with open(os.path.join(dest, "truth.json"), "w") as f:
        json.dump(part, f, indent=1, sort_keys=True)
        f.write("\n")
    out("   SAVED %s (%d required faults: %s; nodes %s; %d expected findings; %d bytes of "
        "recording, %d compressed)" % (
            dest, sum(1 for f in part["faults"] if f["required"]),
            ", ".join(f["kind"] for f in part["faults"] if f["required"]), ",".join(nodes),
            right, len(raw), len(compressed)))
    return []


def save(harness, dest, truth, out=print):
    """Keeps a played campaign as a fixture in `dest`: aggregator.textproto (the detectors it ran
    with), links.txt, and make_fixture()'s part of the recording with its truth. The agents must
    have ended (their stream ends recorded). Returns a list of failures: nothing is saved unless
    the replay scores clean against the ground truth."""
    os.makedirs(dest, exist_ok=True)
    config = os.path.join(dest, "aggregator.textproto")
    links = os.path.join(dest, "links.txt")
    with open(config, "w") as f:
        f.write("# Written by tests/replay/regenerate.sh (fabric_sim campaign --save-recording): "
                "what the live aggregator ran with.\n"
                "node_stale_after_ms: 10000\n"
                "detectors { tick_ms: %d %s }\n" % (harness.tick_ms, harness.detectors))
    shutil.copyfile(harness.link_list(), links)
    whole = os.path.join(harness.root, "campaign.fmrec")
    with open(whole, "wb") as f:
        result = subprocess.run([harness.bins.cli, "record", "export",
                                 "--dir=" + harness.recording_dir(), "--from=0",
                                 "--to=4102444800"], stdout=f, stderr=subprocess.PIPE,
                                timeout=120)
    if result.returncode != 0:
        return ["fabricmon record export exited %d: %s" % (
            result.returncode, result.stderr.decode(errors="replace"))]
    return make_fixture(harness.bins.cli, whole, config, links, truth, dest,
                        scratch=harness.root, out=out)
