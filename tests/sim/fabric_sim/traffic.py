"""The counter model: what every simulated file holds, advanced every tick.

Simulation keeps, per node, the values of every counter the agents read and the rates that drive
them, and on each tick(now) advances the counters by rate x elapsed wall time (so the counters are
continuous whatever the tick jitter) and writes what changed (files.py says how). Scenarios change
rates and states (set_*, link_down, ...) between ticks and call flush() to make a change visible at
once.

Default traffic is a healthy, busy training job:
  * RDMA: ~10 GB/s each way on every HCA port (IB port data; on RoCE also the ethtool vport RDMA
    bytes), XmitWait about 0.1 % of the data words (some credit waits are normal);
  * kernel networking: ~1 MB/s on eth0, ~0.2 MB/s on IPoIB, TCP segments to match;
  * RoCE: PFC pause 0.1-0.2 % of the time, ECN marks and CNPs flowing (congestion control works);
  * GPUs 90 % busy, every NVLink active with a handful of old CRC errors.

Counter semantics follow the hardware: PMA counters saturate at their width (tests/sim/
gen_sysfs_tree.py's table), mlx5 q-counters wrap at 32 bits, everything else is 64-bit.
Python 3 standard library only.
"""

import os
import random

from . import files

MB = 1e6
GB = 1e9

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
_PROC_TEMPLATE = os.path.join(_REPO, "tests", "unit", "collectors", "netdev", "testdata", "proc",
                              "net")

# RoCE ethtool keys, in the driver's order (a subset of mlx5's ETH_SS_STATS with the keys the
# ethtool collector types; prio 3 is the lossless RDMA priority).
ROCE_ETHTOOL_KEYS = [
    "rx_packets", "rx_bytes", "tx_packets", "tx_bytes",
    "rx_vport_unicast_packets", "rx_vport_unicast_bytes",
    "tx_vport_unicast_packets", "tx_vport_unicast_bytes",
    "rx_vport_rdma_unicast_packets", "rx_vport_rdma_unicast_bytes",
    "tx_vport_rdma_unicast_packets", "tx_vport_rdma_unicast_bytes",
    "rx_vport_rdma_multicast_packets", "rx_vport_rdma_multicast_bytes",
    "tx_vport_rdma_multicast_packets", "tx_vport_rdma_multicast_bytes",
    "rx_packets_phy", "rx_bytes_phy", "tx_packets_phy", "tx_bytes_phy",
    "rx_prio3_bytes", "rx_prio3_packets", "tx_prio3_bytes", "tx_prio3_packets",
    "rx_prio3_pause", "rx_prio3_pause_duration", "tx_prio3_pause", "tx_prio3_pause_duration",
    "rx_prio3_pause_transition", "rx_prio3_marked",
    "tx_pause_storm_warning_events", "tx_pause_storm_error_events",
    "rx_out_of_buffer", "rx_discards_phy", "tx_discards_phy",
    "link_down_events_phy", "rx_crc_errors_phy", "rx_pcs_symbol_err_phy", "rx_symbol_err_phy",
]

GPU_PCI = ["00000000:18:00.0", "00000000:2a:00.0", "00000000:3a:00.0", "00000000:5d:00.0",
           "00000000:9a:00.0", "00000000:ab:00.0", "00000000:ba:00.0", "00000000:db:00.0"]
NVLINK_COUNTERS = ["replay", "recovery", "crc_flit", "crc_data", "ecc"]


def _limit(width):
    return (1 << width) - 1


class PortModel:
    """One HCA port: its counter files, state and traffic rates."""

    def __init__(self, hp, info, rng, fabric):
        self.hp = hp
        self.dir = info["port_dir"]
        self.widths = info["widths"]
        self.values = dict(info["values"])
        self.fabric = fabric
        self.up = True
        self.tx_bps = rng.uniform(9.5, 10.5) * GB
        self.rx_bps = rng.uniform(9.5, 10.5) * GB
        self.wait_fraction = 0.001
        # Congestion-control counters per second (RoCE; on IB they do not move).
        self.cc = ({"np_ecn_marked_roce_packets": 2000.0, "np_cnp_sent": 1500.0,
                    "rp_cnp_handled": 1400.0, "rp_cnp_ignored": 0.0}
                   if fabric == "roce" else {})
        self.pinned = {}
        self._frac = {}
        self._written = {}
        self._paths = {}
        # Narrow counters start low (weeks of uptime on a healthy port) so that no scenario runs
        # into saturation by accident; pinned ones are set explicitly. The capture generator
        # saturates every mlx5_1 port 1 on purpose (gen_sysfs_tree.SATURATED_PORT), SymbolError
        # included: left at 65535, symbol errors injected on an mlx5_1 port could not show (the
        # campaign's IB misses on dgx-1798 mlx5_1).
        for rel in ("counters/link_downed", "counters/link_error_recovery",
                    "counters/port_xmit_wait", "counters/symbol_error"):
            self.values[rel] = rng.randrange(0, 4) if rel != "counters/port_xmit_wait" else \
                rng.randrange(0, 10**6)

    def bump(self, rel, n):
        if n <= 0 or rel not in self.values:
            return
        width, overflow = self.widths.get(rel, (64, "wraps"))
        value = self.values[rel] + n
        if overflow == "saturates":
            value = min(value, _limit(width))
        else:
            value &= _limit(width)
        self.values[rel] = value

    def add(self, rel, amount):
        """Adds a fractional amount; whole units reach the counter as they accumulate."""
        acc = self._frac.get(rel, 0.0) + amount
        whole = int(acc)
        self._frac[rel] = acc - whole
        self.bump(rel, whole)

    def advance(self, dt):
        if self.up:
            tx_words = self.tx_bps * dt / 4
            rx_words = self.rx_bps * dt / 4
            self.add("counters/port_xmit_data", tx_words)
            self.add("counters/port_rcv_data", rx_words)
            for direction, words in (("xmit", tx_words), ("rcv", rx_words)):
                packets = words / 1024  # 4 KiB MTU
                self.add("counters/port_%s_packets" % direction, packets)
                self.add("counters/unicast_%s_packets" % direction, packets)
            f = min(self.wait_fraction, 0.99)
            self.add("counters/port_xmit_wait", tx_words * f / (1 - f) if f > 0 else 0)
            for name, rate in self.cc.items():
                self.add("hw_counters/" + name, rate * dt)
        for rel, value in self.pinned.items():
            self.values[rel] = value

    def render(self, writer):
        written = self._written
        for rel, value in self.values.items():
            if written.get(rel) != value:
                path = self._paths.get(rel)
                if path is None:
                    path = self._paths[rel] = os.path.join(self.dir, rel)
                writer.inplace(path, "%d\n" % value)
                written[rel] = value
        if written.get("state") != self.up:
            writer.inplace(os.path.join(self.dir, "state"),
                           "4: ACTIVE\n" if self.up else "1: DOWN\n")
            writer.inplace(os.path.join(self.dir, "phys_state"),
                           "5: LinkUp\n" if self.up else "2: Polling\n")
            written["state"] = self.up


class NetdevModel:
    """A netdev's sysfs files: statistics/, carrier and its counts, operstate."""

    STATS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_errors", "tx_errors",
             "rx_dropped", "tx_dropped")

    def __init__(self, name, path, kind, rng):
        self.name = name
        self.dir = path
        self.kind = kind  # "ipoib", "roce", "mgmt"
        self.stats = {s: 0 for s in self.STATS}
        self.stats["rx_bytes"] = rng.randrange(10**9, 10**11)
        self.stats["tx_bytes"] = rng.randrange(10**9, 10**11)
        self.stats["rx_packets"] = self.stats["rx_bytes"] // 1500
        self.stats["tx_packets"] = self.stats["tx_bytes"] // 1500
        self.carrier_down = rng.randrange(0, 3)
        self.carrier_up = self.carrier_down + 1
        self.carrier = 1
        base = {"ipoib": 0.2 * MB, "roce": 0.2 * MB, "mgmt": 1.0 * MB}[kind]
        self.tx_bps = base * rng.uniform(0.8, 1.2)
        self.rx_bps = base * rng.uniform(0.8, 1.2)
        self._frac = {}
        self._written = {}

    def add(self, stat, amount):
        acc = self._frac.get(stat, 0.0) + amount
        whole = int(acc)
        self._frac[stat] = acc - whole
        self.stats[stat] = (self.stats[stat] + whole) & _limit(64)

    def advance(self, dt):
        if not self.carrier:
            return
        self.add("tx_bytes", self.tx_bps * dt)
        self.add("rx_bytes", self.rx_bps * dt)
        self.add("tx_packets", self.tx_bps * dt / 1500)
        self.add("rx_packets", self.rx_bps * dt / 1500)

    def render(self, writer):
        written = self._written
        for stat, value in self.stats.items():
            if written.get(stat) != value:
                writer.inplace(os.path.join(self.dir, "statistics", stat), "%d\n" % value)
                written[stat] = value
        carrier = (self.carrier_down, self.carrier_up, self.carrier)
        if written.get("carrier") != carrier:
            writer.inplace(os.path.join(self.dir, "carrier_down_count"),
                           "%d\n" % self.carrier_down)
            writer.inplace(os.path.join(self.dir, "carrier_up_count"), "%d\n" % self.carrier_up)
            writer.inplace(os.path.join(self.dir, "carrier_changes"),
                           "%d\n" % (self.carrier_down + self.carrier_up))
            writer.inplace(os.path.join(self.dir, "carrier"), "%d\n" % self.carrier)
            writer.inplace(os.path.join(self.dir, "operstate"),
                           "up\n" if self.carrier else "lowerlayerdown\n")
            written["carrier"] = carrier


class EthtoolModel:
    """A RoCE netdev's `ethtool -S` statistics (stats_dir), replaced atomically."""

    def __init__(self, netdev, path, port, kernel, rng):
        self.netdev = netdev
        self.path = path
        self.port = port      # PortModel: RDMA bytes follow its data rates
        self.kernel = kernel  # NetdevModel: kernel bytes follow its statistics
        self.values = {k: 0 for k in ROCE_ETHTOOL_KEYS}
        for k in ("rx_vport_rdma_unicast_bytes", "tx_vport_rdma_unicast_bytes", "rx_bytes_phy",
                  "tx_bytes_phy", "rx_prio3_bytes", "tx_prio3_bytes"):
            self.values[k] = rng.randrange(10**13, 10**15)
        for k in ("rx_prio3_pause", "tx_prio3_pause"):
            self.values[k] = rng.randrange(10**4, 10**6)
        for k in ("rx_prio3_pause_duration", "tx_prio3_pause_duration"):
            self.values[k] = rng.randrange(10**6, 10**8)
        self.values["rx_prio3_marked"] = rng.randrange(10**6, 10**8)
        self.pause_fraction = {"rx": 0.002, "tx": 0.001}
        self.ecn_marks_per_s = 1500.0
        self._frac = {}

    def add(self, key, amount):
        acc = self._frac.get(key, 0.0) + amount
        whole = int(acc)
        self._frac[key] = acc - whole
        width = 32 if key == "link_down_events_phy" else 64
        self.values[key] = (self.values[key] + whole) & _limit(width)

    def advance(self, dt):
        up = self.port.up
        tx = self.port.tx_bps * dt if up else 0
        rx = self.port.rx_bps * dt if up else 0
        self.add("tx_vport_rdma_unicast_bytes", tx)
        self.add("rx_vport_rdma_unicast_bytes", rx)
        self.add("tx_vport_rdma_unicast_packets", tx / 4096)
        self.add("rx_vport_rdma_unicast_packets", rx / 4096)
        self.add("tx_prio3_bytes", tx)
        self.add("rx_prio3_bytes", rx)
        self.add("tx_prio3_packets", tx / 4096)
        self.add("rx_prio3_packets", rx / 4096)
        self.add("tx_bytes_phy", tx * 1.02)
        self.add("rx_bytes_phy", rx * 1.02)
        self.add("tx_packets_phy", tx / 4000)
        self.add("rx_packets_phy", rx / 4000)
        for direction in ("rx", "tx"):
            fraction = min(1.0, self.pause_fraction[direction]) if up else 0
            self.add("%s_prio3_pause_duration" % direction, fraction * dt * 1e6)  # µs
            self.add("%s_prio3_pause" % direction, fraction * dt * 2e4)
        if up:
            self.add("rx_prio3_marked", self.ecn_marks_per_s * dt)

    def render(self, writer):
        k = self.kernel.stats
        self.values["rx_bytes"], self.values["tx_bytes"] = k["rx_bytes"], k["tx_bytes"]
        self.values["rx_packets"], self.values["tx_packets"] = k["rx_packets"], k["tx_packets"]
        self.values["rx_vport_unicast_bytes"] = k["rx_bytes"]
        self.values["tx_vport_unicast_bytes"] = k["tx_bytes"]
        self.values["rx_vport_unicast_packets"] = k["rx_packets"]
        self.values["tx_vport_unicast_packets"] = k["tx_packets"]
        text = "NIC statistics:\n" + "".join(
            "     %s: %d\n" % (key, self.values[key]) for key in ROCE_ETHTOOL_KEYS)
        writer.atomic(self.path, text)


class NodeModel:
    def __init__(self, node, cluster, root, initial, rng):
        self.name = node.name
        self.node = node
        self.ports = {}
        self.netdevs = {}
        self.ethtool = {}
        for hp in node.ports:
            info = initial[(node.name, hp.device)]
            port = PortModel(hp, info, rng, cluster.fabric)
            self.ports[hp.device] = port
            netdev = NetdevModel(hp.netdev, info["netdev_dir"],
                                 "ipoib" if cluster.fabric == "ib" else "roce", rng)
            self.netdevs[hp.netdev] = netdev
            if cluster.fabric == "roce":
                self.ethtool[hp.netdev] = EthtoolModel(
                    hp.netdev, os.path.join(node.ethtool_dir(root), hp.netdev, "statistics"),
                    port, netdev, rng)
        mgmt = getattr(node, "mgmt_netdev", "eth0")
        self.mgmt = self.netdevs[mgmt] = NetdevModel(
            mgmt, os.path.realpath(os.path.join(node.sysfs(root), "class", "net", mgmt)),
            "mgmt", rng)
        self.has_gpu = getattr(node, "has_gpu", True)
        self.procfs = node.procfs(root)
        self.tcp = {"InSegs": rng.randrange(10**8, 10**9), "OutSegs": rng.randrange(10**8, 10**9),
                    "RetransSegs": rng.randrange(10**3, 10**5), "ActiveOpens": 4211,
                    "PassiveOpens": 1880, "CurrEstab": 64}
        self._tcp_frac = {}
        self.retrans_fraction = 0.0002
        # NVML stand-in state.
        self.nvml_path = node.nvml_state(root)
        self.gpu_util = 90
        self.nvlinks = {(g, l): {"active": 1, "replay": rng.randrange(0, 3), "recovery": 0,
                                 "crc_flit": rng.randrange(0, 20), "crc_data": 0, "ecc": 0}
                        for g in range(8) for l in range(18)}
        self.nvlink_rates = {}  # (gpu, link) → {counter: per second}
        self._nv_frac = {}
        self.nvml_dirty = True

    def advance(self, dt):
        for port in self.ports.values():
            port.advance(dt)
        kernel = 0.0
        for netdev in self.netdevs.values():
            netdev.advance(dt)
            if netdev.carrier:
                kernel += netdev.tx_bps + netdev.rx_bps
        for model in self.ethtool.values():
            model.advance(dt)
        segments = kernel * dt / 1448 / 2
        for name, amount in (("InSegs", segments), ("OutSegs", segments),
                             ("RetransSegs", segments * self.retrans_fraction)):
            acc = self._tcp_frac.get(name, 0.0) + amount
            whole = int(acc)
            self._tcp_frac[name] = acc - whole
            self.tcp[name] += whole
        for (gpu, link), rates in self.nvlink_rates.items():
            for counter, rate in rates.items():
                key = (gpu, link, counter)
                acc = self._nv_frac.get(key, 0.0) + rate * dt
                whole = int(acc)
                self._nv_frac[key] = acc - whole
                if whole:
                    self.nvlinks[(gpu, link)][counter] += whole
                    self.nvml_dirty = True

    def render(self, writer, snmp_template, netstat_template):
        for port in self.ports.values():
            port.render(writer)
        for netdev in self.netdevs.values():
            netdev.render(writer)
        for model in self.ethtool.values():
            model.render(writer)
        writer.inplace(os.path.join(self.procfs, "net", "snmp"), snmp_template.render(
            {"Tcp": self.tcp}))
        writer.inplace(os.path.join(self.procfs, "net", "netstat"), netstat_template.render({}))
        if self.nvml_dirty and self.has_gpu:
            writer.atomic(self.nvml_path, self.nvml_text())
            self.nvml_dirty = False

    def nvml_text(self):
        lines = ["# fabric_sim NVML stand-in state for %s" % self.name, "count 8"]
        for g in range(8):
            lines.append('gpu %d uuid=GPU-%s-%d pci=%s name="NVIDIA H100 80GB HBM3" util=%d '
                         'mem=60 pids=%d' % (g, self.name, g, GPU_PCI[g], self.gpu_util,
                                             4000 + g))
        for (g, l), link in sorted(self.nvlinks.items()):
            lines.append("link %d %d active=%d remote=00000000:%02x:00.0 %s" % (
                g, l, link["active"], 5 + l % 4,
                " ".join("%s=%d" % (c, link[c]) for c in NVLINK_COUNTERS)))
        return "\n".join(lines) + "\n"


class ProcTemplate:
    """A /proc/net/{snmp,netstat} file: pairs of "Prefix: names" / "Prefix: values" lines."""

    def __init__(self, text):
        self.sections = []  # [prefix, names, values]
        lines = text.splitlines()
        for i in range(0, len(lines) - 1, 2):
            head, vals = lines[i].split(), lines[i + 1].split()
            if not head or head[0] != vals[0]:
                continue
            self.sections.append([head[0][:-1], head[1:], vals[1:]])

    def render(self, updates):
        out = []
        for prefix, names, values in self.sections:
            values = list(values)
            for name, value in updates.get(prefix, {}).items():
                if name in names:
                    values[names.index(name)] = str(value)
            out.append("%s: %s" % (prefix, " ".join(names)))
            out.append("%s: %s" % (prefix, " ".join(values)))
        return "\n".join(out) + "\n"


def _read_template(name):
    for directory in (_PROC_TEMPLATE, "/proc/net"):
        try:
            with open(os.path.join(directory, name)) as f:
                return f.read()
        except OSError:
            continue
    if name == "snmp":
        return ("Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails "
                "EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n"
                "Tcp: 1 200 120000 -1 0 0 0 0 0 0 0 0 0 0 0\n")
    return "TcpExt: TCPTimeouts TCPLostRetransmit\nTcpExt: 0 0\n"


class Simulation:
    """All nodes of a generated cluster; tick() advances and writes them."""

    def __init__(self, cluster, root, initial, seed=0):
        self.cluster = cluster
        self.root = root
        rng = random.Random("traffic/%d" % seed)
        self.nodes = {n.name: NodeModel(n, cluster, root, initial, rng) for n in cluster.nodes}
        self.writer = files.FileWriter()
        self.snmp = ProcTemplate(_read_template("snmp"))
        self.netstat = ProcTemplate(_read_template("netstat"))
        self.last = None

    def node(self, name):
        return self.nodes[name]

    def port(self, node, device=None):
        ports = self.nodes[node].ports
        return ports[device] if device is not None else next(iter(ports.values()))

    def tick(self, now):
        dt = 0.0 if self.last is None else max(0.0, now - self.last)
        self.last = now
        for model in self.nodes.values():
            model.advance(dt)
        self.flush()

    def flush(self):
        for model in self.nodes.values():
            model.render(self.writer, self.snmp, self.netstat)
        self.writer.fresh = False  # from now on agents may be reading

    def close(self):
        self.writer.close()

    # -------------------------------------------------------------------------------------
    # Changes scenarios make.

    def link_down(self, node, device=None):
        """The link goes down: port DOWN/Polling, LinkDowned +1 (IB) or link_down_events_phy +1
        (RoCE), the port's netdev loses carrier (carrier_down_count +1). Traffic stops."""
        model = self.nodes[node]
        port = self.port(node, device)
        if not port.up:
            return
        port.up = False
        if self.cluster.fabric == "ib":
            port.bump("counters/link_downed", 1)
        else:
            model.ethtool[port.hp.netdev].add("link_down_events_phy", 1)
        netdev = model.netdevs[port.hp.netdev]
        netdev.carrier = 0
        netdev.carrier_down += 1

    def link_up(self, node, device=None):
        model = self.nodes[node]
        port = self.port(node, device)
        if port.up:
            return
        port.up = True
        netdev = model.netdevs[port.hp.netdev]
        netdev.carrier = 1
        netdev.carrier_up += 1

    def blip(self, node, device=None):
        """A flap shorter than a sampling interval: down and up again between two reads, so
        only the counters show it (the state files never leave ACTIVE)."""
        self.link_down(node, device)
        self.link_up(node, device)

    def reset_counters(self, node):
        """Driver reload / counter clear: every HCA, netdev and NVLink counter of `node` to 0."""
        model = self.nodes[node]
        for port in model.ports.values():
            for rel in port.values:
                port.values[rel] = 0
            port._frac.clear()
        for netdev in model.netdevs.values():
            for stat in netdev.stats:
                netdev.stats[stat] = 0
            netdev.carrier_down = 0
            netdev.carrier_up = 1
        for ethtool in model.ethtool.values():
            for key in ethtool.values:
                ethtool.values[key] = 0
        for link in model.nvlinks.values():
            for counter in NVLINK_COUNTERS:
                link[counter] = 0
        model.nvml_dirty = True
