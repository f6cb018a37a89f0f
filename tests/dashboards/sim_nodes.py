"""Simulated GPU nodes for the dashboard test: every file fabricmon's collectors read, advanced
cycle by cycle so that rates are non-zero and findings appear.

Per node (under <workdir>/<node>/):
  sys/        a DGX-H100-like sysfs tree from tests/sim/gen_sysfs_tree.py (8 InfiniBand
              ConnectX-7 HCAs with IPoIB netdevs, a RoCE HCA mlx5_8 with netdev enp170s0f0np0, an
              irdma and an efa device, a firmware-restricted PF, one port with saturated
              counters). mlx5_0 and mlx5_1 get fixed node GUIDs (they are HCAs of the ibsim
              fabric, see ibsim_net_text()).
  proc/net/   snmp and netstat (template: tests/unit/collectors/netdev/testdata/proc/net).
  ethtool/    `ethtool -S` text per Ethernet netdev behind an RDMA device
              (EthtoolCollectorConfig.stats_dir): enp170s0f0np0 (mlx5) and ens152f0 (ice).
  nvml.state  the NVML stand-in's state (tests/fakes/nvml_standin/README.md): 8 GPUs x 18 links.

Node.advance() is one cycle of traffic: HCA counters (with gen_sysfs_tree's widths and overflow:
PMA counters saturate, mlx5 q-counters wrap), netdev statistics, TCP counters, ethtool
statistics and NVML counters, plus the faults the test scripts (link_down(), carrier_flap(),
roce_link_down(), wait_for_credits(), pause_fraction). Counters are kept in memory and written
like the kernel would show them: sysfs/procfs files in place on descriptors kept open (cheaper
than gen_sysfs_tree.mutate(), which rewrites the manifest every step), the ethtool and NVML files
by atomic rename.

Python 3 standard library only.
"""

import os
import random

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROC_TEMPLATE = os.path.join(REPO, "tests", "unit", "collectors", "netdev", "testdata", "proc",
                             "net")

ROCE_NETDEV = "enp170s0f0np0"   # mlx5_8 of gen_sysfs_tree's dgx-h100 profile
IRDMA_NETDEV = "ens152f0"       # rocep152s0f0 (irdma)
IB_FABRIC_HCAS = ("mlx5_0", "mlx5_1")
HCA_GUID_BASE = 0x0002C90300A00000
SWITCH_GUID_BASE = 0x0008F10500B00000
GPUS = 8
NVLINKS = 18
PRIORITIES = ("0", "3")  # 3: the lossless RDMA priority; 0: best effort

MAX32 = (1 << 32) - 1


def guid_sysfs(guid):
    text = "%016x" % guid
    return ":".join(text[i:i + 4] for i in range(0, 16, 4))


def hca_guid(node_index, device):
    return HCA_GUID_BASE + node_index * 0x100 + IB_FABRIC_HCAS.index(device) * 0x10


def write_atomic(path, text):
    """For readers that open the file afresh (ethtool stats_dir, NVML stand-in state)."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, ".%s.tmp" % os.path.basename(path))
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class InPlaceWriter:
    """For sysfs/procfs files that collectors keep open and pread(): same inode, one pwrite,
    padded with blanks so the file never shrinks (a reader sees old or new bytes, never an empty
    or truncated file). Descriptors stay open between cycles."""

    def __init__(self):
        self.files = {}  # path → [fd, size, last text]

    def write(self, path, text):
        f = self.files.get(path)
        if f is None:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
            f = self.files[path] = [fd, os.fstat(fd).st_size, None]
        if f[2] == text:
            return
        data = text.encode()
        if len(data) < f[1]:
            data = data[:-1] + b" " * (f[1] - len(data)) + b"\n"
        os.pwrite(f[0], data, 0)
        f[1] = max(f[1], len(data))
        f[2] = text

    def close(self):
        for fd, _, _ in self.files.values():
            os.close(fd)
        self.files.clear()


class ProcNet:
    """/proc/net/{snmp,netstat}: pairs of "Prefix: names" / "Prefix: values" lines."""

    def __init__(self, text):
        self.sections = []
        lines = text.splitlines()
        for i in range(0, len(lines) - 1, 2):
            head, values = lines[i].split(), lines[i + 1].split()
            if head and values and head[0] == values[0]:
                self.sections.append([head[0][:-1], head[1:], values[1:]])

    def bump(self, prefix, name, n):
        for section, names, values in self.sections:
            if section == prefix and name in names:
                i = names.index(name)
                values[i] = str(int(values[i]) + n)

    def render(self):
        out = []
        for prefix, names, values in self.sections:
            out.append("%s: %s" % (prefix, " ".join(names)))
            out.append("%s: %s" % (prefix, " ".join(values)))
        return "\n".join(out) + "\n"


def _template(name):
    with open(os.path.join(PROC_TEMPLATE, name)) as f:
        return f.read()


class Node:
    """One simulated node. `gst` is the imported tests/sim/gen_sysfs_tree module."""

    def __init__(self, gst, root, name, index):
        self.gst = gst
        self.name = name
        self.index = index
        self.dir = os.path.join(root, name)
        self.sysfs = os.path.join(self.dir, "sys")
        self.procfs = os.path.join(self.dir, "proc")
        self.ethtool_dir = os.path.join(self.dir, "ethtool")
        self.nvml_state = os.path.join(self.dir, "nvml.state")
        self.rng = random.Random("dashboards/%s" % name)
        self.writer = InPlaceWriter()
        self.cycle = 0
        # Per-cycle behaviour the faults change.
        self.pause_fraction = {"rx": {"0": 0.0, "3": 0.002}, "tx": {"0": 0.0, "3": 0.001}}
        self.netdev_bumps = []   # (netdev, file, n)
        self.ethtool_bumps = []  # (key, n)
        self.nvlink_rates = {(2, 5): {"crc_flit": 40, "replay": 3}}
        self.inactive_links = {(3, 17)}
        self.phy_crc_errors_per_cycle = 0

    # -------------------------------------------------------------------------------------
    def generate(self, seed):
        self.gst.generate(self.sysfs, "dgx-h100", seed=seed)
        manifest = self.gst.load_manifest(self.sysfs)
        self.devices = {d["name"]: d for d in manifest["devices"]}
        # Fixed node GUIDs for the HCAs cabled into the ibsim fabric.
        for device in IB_FABRIC_HCAS:
            path = os.path.join(self.sysfs, self.devices[device]["path"])
            guid = guid_sysfs(hca_guid(self.index, device))
            for attr in ("node_guid", "sys_image_guid"):
                with open(os.path.join(path, attr), "w") as f:
                    f.write(guid + "\n")
        for device in self.devices.values():
            with open(os.path.join(self.sysfs, device["path"], "node_desc"), "w") as f:
                f.write("%s %s\n" % (self.name, device["name"]))
        self.ports = {}
        for d in manifest["devices"]:
            for port in d["ports"]:
                self.ports[(d["name"], port)] = {
                    "dir": os.path.join(self.sysfs, d["path"], "ports", str(port)),
                    "kind": d["kind"],
                    "values": dict(d["values"][str(port)]),
                    "specs": {"%s/%s" % (g, n): (w, o, k) for g, n, w, o, k in d["counters"]},
                    "bumps": [], "extra_wait": 0, "errors": {}}
        self.netdevs = sorted(os.listdir(os.path.join(self.sysfs, "class", "net")))
        for netdev in self.netdevs:
            # What gen_sysfs_tree leaves out: link speed (Mb/s) and carrier_changes.
            base = os.path.join(self.sysfs, "class", "net", netdev)
            with open(os.path.join(base, "speed"), "w") as f:
                f.write("%d\n" % (200000 if netdev == ROCE_NETDEV else
                                   100000 if netdev == IRDMA_NETDEV else 400000))
        self.netdev_stats = {}
        for netdev in self.netdevs:
            stats = os.path.join(self.sysfs, "class", "net", netdev, "statistics")
            self.netdev_stats[netdev] = {
                f: int(open(os.path.join(stats, f)).read()) for f in os.listdir(stats)}
        self.carrier_down = {n: int(open(os.path.join(self.sysfs, "class", "net", n,
                                                      "carrier_down_count")).read())
                             for n in self.netdevs}
        os.makedirs(os.path.join(self.procfs, "net"), exist_ok=True)
        self.snmp = ProcNet(_template("snmp"))
        self.netstat = ProcNet(_template("netstat"))
        self._init_ethtool()
        self._init_nvml()
        self.render(first=True)

    def _init_ethtool(self):
        v = {}
        for d in ("rx", "tx"):
            for key in ("bytes", "packets", "vport_unicast_bytes", "vport_unicast_packets",
                        "vport_rdma_unicast_bytes", "vport_rdma_unicast_packets",
                        "vport_rdma_multicast_bytes", "vport_rdma_multicast_packets",
                        "bytes_phy", "packets_phy", "discards_phy", "pause_ctrl_phy"):
                v["%s_%s" % (d, key)] = self.rng.randrange(10**6, 10**12)
            for p in PRIORITIES:
                for key in ("bytes", "packets", "pause", "pause_duration"):
                    v["%s_prio%s_%s" % (d, p, key)] = self.rng.randrange(10**4, 10**9)
        for p in PRIORITIES:
            for key in ("pause_transition", "marked", "discards", "buf_discard", "cong_discard"):
                v["rx_prio%s_%s" % (p, key)] = self.rng.randrange(0, 10**5)
        for key in ("tx_pause_storm_warning_events", "tx_pause_storm_error_events",
                    "rx_out_of_buffer", "link_down_events_phy", "rx_crc_errors_phy",
                    "rx_pcs_symbol_err_phy", "rx_symbol_err_phy", "total_success_recovery_phy",
                    "rx_bits_phy", "rx_corrected_bits_phy", "rx_buffer_passed_thres_phy",
                    "outbound_pci_stalled_rd_events", "outbound_pci_stalled_wr_events",
                    "outbound_pci_buffer_overflow", "module_unplug", "module_high_temp"):
            v[key] = self.rng.randrange(0, 100)
        v["outbound_pci_stalled_rd"] = 0
        v["outbound_pci_stalled_wr"] = 1
        self.ethtool = v
        self.ice = {"rx_bytes": 10**9, "tx_bytes": 10**9, "rx_packets": 10**6,
                    "tx_packets": 10**6, "rx_dropped": 0, "tx_errors": 0}
        write_atomic(os.path.join(self.ethtool_dir, ROCE_NETDEV, "driver"),
                     "driver: mlx5_core\nversion: 24.10-1.1.4\nfirmware-version: 28.39.1002 "
                     "(MT_0000000834)\nbus-info: 0000:aa:00.0\n")
        write_atomic(os.path.join(self.ethtool_dir, IRDMA_NETDEV, "driver"),
                     "driver: ice\nversion: 1.13.7\nfirmware-version: 4.40\n"
                     "bus-info: 0000:98:00.0\n")

    def _init_nvml(self):
        self.nvlinks = {(g, l): {"replay": self.rng.randrange(0, 3), "recovery": 0,
                                 "crc_flit": self.rng.randrange(0, 20), "crc_data": 0, "ecc": 0,
                                 "nvl5_recovery_successful": 2, "nvl5_recovery_failed": 0,
                                 "nvl5_recovery_events": 2, "nvl5_effective_errors": 0,
                                 "nvl5_symbol_errors": 0}
                        for g in range(GPUS) for l in range(NVLINKS)}

    # -------------------------------------------------------------------------------------
    def advance(self, dt):
        """One cycle of `dt` seconds of traffic."""
        self.cycle += 1
        self._advance_hca_counters(dt)
        for netdev, stats in self.netdev_stats.items():
            kernel_bps = 2e6 if netdev.startswith("ib") else 20e6
            for stat, rate in (("rx_bytes", kernel_bps), ("tx_bytes", kernel_bps),
                               ("rx_packets", kernel_bps / 1500),
                               ("tx_packets", kernel_bps / 1500)):
                if stat in stats:
                    stats[stat] += int(rate * dt * self.rng.uniform(0.8, 1.2))
        for netdev, name, n in self.netdev_bumps:
            if name == "carrier_down_count":
                self.carrier_down[netdev] += n
        self.netdev_bumps = []
        segments = int(40e6 * dt / 1448)
        self.snmp.bump("Tcp", "InSegs", segments)
        self.snmp.bump("Tcp", "OutSegs", segments)
        self.snmp.bump("Tcp", "RetransSegs", max(1, segments // 2000))
        self.netstat.bump("TcpExt", "TCPTimeouts", self.rng.randrange(0, 3))
        self.netstat.bump("TcpExt", "TCPLostRetransmit", self.rng.randrange(0, 3))
        self._advance_ethtool(dt)
        for (gpu, link), rates in self.nvlink_rates.items():
            for counter, per_s in rates.items():
                self.nvlinks[(gpu, link)][counter] += max(1, int(per_s * dt))
        self.nvlinks[(1, 2)]["nvl5_recovery_events"] += 1
        self.nvlinks[(1, 2)]["nvl5_recovery_successful"] += 1
        self.render()

    def _advance_hca_counters(self, dt):
        """Traffic on every RDMA port: ~5 GB/s of data each way, packets, a little XmitWait,
        congestion-control and q-counters, now and then an error. Widths and overflow as
        gen_sysfs_tree's counter model (PMA counters saturate, mlx5 q-counters wrap)."""
        rng = self.rng
        for (device, port), p in self.ports.items():
            values, specs = p["values"], p["specs"]
            bumps = list(p["bumps"])
            p["bumps"] = []
            words = 5e9 * dt / 4 * rng.uniform(0.9, 1.1)
            for rel, (width, overflow, kind) in specs.items():
                if kind == "data":
                    n = int(words * 4 if p["kind"] in ("irdma", "efa") else words)
                elif kind == "packets":
                    n = int(words / 1024)
                elif kind == "error":
                    # Only scripted errors (port_errors(), link_down()); XmitWait ~0.1 % of the
                    # data words (some credit waits are normal) plus wait_for_credits().
                    n = p["errors"].get(rel, 0)
                    if rel == "counters/port_xmit_wait":
                        n = int(words * 0.001) + p["extra_wait"]
                else:  # hw counters
                    n = rng.randrange(0, 50)
                if n:
                    bumps.append((rel, n))
            for rel, n in bumps:
                width, overflow, _ = specs[rel]
                value = values[rel] + n
                limit = (1 << width) - 1
                values[rel] = min(value, limit) if overflow == "saturates" else value & limit
                self.writer.write(os.path.join(p["dir"], rel), "%d\n" % values[rel])

    def _advance_ethtool(self, dt):
        v = self.ethtool
        rdma_bps = 8e9
        for d in ("rx", "tx"):
            v["%s_vport_rdma_unicast_bytes" % d] += int(rdma_bps * dt)
            v["%s_vport_rdma_unicast_packets" % d] += int(rdma_bps * dt / 4096)
            v["%s_bytes_phy" % d] += int(rdma_bps * dt * 1.02)
            v["%s_packets_phy" % d] += int(rdma_bps * dt / 4000)
            v["%s_prio3_bytes" % d] += int(rdma_bps * dt)
            v["%s_prio3_packets" % d] += int(rdma_bps * dt / 4096)
            v["%s_prio0_bytes" % d] += int(20e6 * dt)
            v["%s_prio0_packets" % d] += int(20e6 * dt / 1500)
            v["%s_pause_ctrl_phy" % d] += self.rng.randrange(0, 1000)
            v["%s_discards_phy" % d] += self.rng.randrange(0, 3)
            for p in PRIORITIES:
                fraction = self.pause_fraction[d][p]
                v["%s_prio%s_pause_duration" % (d, p)] += int(fraction * dt * 1e6)  # µs
                v["%s_prio%s_pause" % (d, p)] += int(fraction * dt * 2e4)
        v["rx_prio3_marked"] += int(1500 * dt)
        v["rx_prio3_pause_transition"] += self.rng.randrange(0, 10)
        v["rx_out_of_buffer"] += self.rng.randrange(0, 5)
        v["rx_crc_errors_phy"] += self.phy_crc_errors_per_cycle
        v["rx_bits_phy"] += int(rdma_bps * 8 * dt)
        v["rx_corrected_bits_phy"] += self.rng.randrange(0, 10**4)
        v["tx_bytes"] = self.netdev_stats[ROCE_NETDEV]["tx_bytes"]
        v["rx_bytes"] = self.netdev_stats[ROCE_NETDEV]["rx_bytes"]
        for key, n in self.ethtool_bumps:
            v[key] += n
        self.ethtool_bumps = []
        for key in self.ice:
            self.ice[key] += int(1e6 * dt) if "bytes" in key else 0

    # -------------------------------------------------------------------------------------
    def render(self, first=False):
        for netdev, stats in self.netdev_stats.items():
            base = os.path.join(self.sysfs, "class", "net", netdev)
            for stat, value in stats.items():
                self.writer.write(os.path.join(base, "statistics", stat), "%d\n" % value)
            self.writer.write(os.path.join(base, "carrier_down_count"),
                           "%d\n" % self.carrier_down[netdev])
            self.writer.write(os.path.join(base, "carrier_up_count"),
                              "%d\n" % (self.carrier_down[netdev] + 1))
            self.writer.write(os.path.join(base, "carrier_changes"),
                              "%d\n" % (2 * self.carrier_down[netdev] + 1))
        self.writer.write(os.path.join(self.procfs, "net", "snmp"), self.snmp.render())
        self.writer.write(os.path.join(self.procfs, "net", "netstat"), self.netstat.render())
        write_atomic(os.path.join(self.ethtool_dir, ROCE_NETDEV, "statistics"),
                     "NIC statistics:\n" + "".join("     %s: %d\n" % kv
                                                   for kv in self.ethtool.items()))
        write_atomic(os.path.join(self.ethtool_dir, IRDMA_NETDEV, "statistics"),
                     "NIC statistics:\n" + "".join("     %s: %d\n" % kv
                                                   for kv in self.ice.items()))
        lines = ["# dashboards test: NVML stand-in state of %s" % self.name, "count %d" % GPUS]
        for g in range(GPUS):
            lines.append('gpu %d uuid=GPU-%s-%d pci=00000000:%02x:00.0 name="NVIDIA H100 80GB '
                         'HBM3" util=%d mem=%d pids=%d' % (
                             g, self.name, g, 0x18 + 0x10 * g, 85 + (self.cycle + g) % 10,
                             40 + g, 4000 + g))
        for (g, l), c in sorted(self.nvlinks.items()):
            lines.append("link %d %d active=%d remote=00000000:%02x:00.0 %s" % (
                g, l, 0 if (g, l) in self.inactive_links else 1, 5 + l % 4,
                " ".join("%s=%d" % kv for kv in sorted(c.items()))))
        write_atomic(self.nvml_state, "\n".join(lines) + "\n")

    # -------------------------------------------------------------------------------------
    # Faults.

    def link_down(self, device, port=1):
        """A sub-interval flap: LinkDowned +1 (the state files never leave ACTIVE)."""
        self.ports[(device, port)]["bumps"].append(("counters/link_downed", 1))

    def port_errors(self, device, counter, per_cycle, port=1):
        """An IBA error counter (e.g. "symbol_error") rises by `per_cycle` every cycle."""
        self.ports[(device, port)]["errors"]["counters/" + counter] = per_cycle

    def wait_for_credits(self, device, ticks_per_cycle, port=1):
        """XmitWait rises by `ticks_per_cycle` on top of the normal ~0.1 % of the data words."""
        self.ports[(device, port)]["extra_wait"] = ticks_per_cycle

    def carrier_flap(self, netdev):
        self.netdev_bumps.append((netdev, "carrier_down_count", 1))

    def roce_link_down(self):
        self.ethtool_bumps.append(("link_down_events_phy", 1))

    def agent_config(self, aggregator, nvml_library, interval_ms, ib_fabric):
        lines = [
            'node_name: "%s"' % self.name,
            'aggregator: "%s"' % aggregator,
            "tls { insecure_plaintext: true }",
            "reconnect_initial_backoff_ms: 100",
            "reconnect_max_backoff_ms: 1000",
            "collectors {",
            '  ib_sysfs { interval_ms: %d sysfs_root: "%s" }' % (interval_ms, self.sysfs),
            '  netdev { interval_ms: %d sysfs_root: "%s" procfs_root: "%s" }'
            % (interval_ms, self.sysfs, self.procfs),
            '  ethtool { interval_ms: %d sysfs_root: "%s" stats_dir: "%s" }'
            % (max(interval_ms, 1000), self.sysfs, self.ethtool_dir),
            ('  nvml { interval_ms: %d library: "%s" }' % (interval_ms, nvml_library))
            if nvml_library else "  nvml { enabled: false }",
            # Slower than the test's cycle, so every sweep sees the ibsim counters move.
            ("  ib_fabric { enabled: true interval_ms: %d }" % max(interval_ms * 2, 1000))
            if ib_fabric else "  ib_fabric { enabled: false }",
            "}",
        ]
        return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------
# Fabric description: the link list (RoCE, read by the aggregator) and the ibsim topology (IB,
# swept by gpu-node-01's ib_fabric collector).
#
#   IB:   <node> mlx5_0 -> leaf01 port <i>, <node> mlx5_1 -> leaf02 port <i>,
#         leaf01/leaf02 port 9 -> spine01 port 1/2.
#   RoCE: <node> enp170s0f0np0 -> eth-leaf0<i> port 1, eth-leaf0<i> port 33 -> eth-spine01 port i.

def link_list_text(nodes):
    lines = ["# dashboards test link list: RoCE netdevs and Ethernet switches"]
    for node in nodes:
        lines.append("%s/%s switch:eth-leaf%02d/1" % (node.name, ROCE_NETDEV, node.index))
        lines.append("switch:eth-leaf%02d/33 switch:eth-spine01/%d" % (node.index, node.index))
    return "\n".join(lines) + "\n"


IB_SWITCHES = {"leaf01": (SWITCH_GUID_BASE + 1, 9), "leaf02": (SWITCH_GUID_BASE + 2, 9),
               "spine01": (SWITCH_GUID_BASE + 3, 2)}
IB_UPLINK_PORT = 9


def ibsim_id(node, device):
    return "%s-%s" % (node.name, device)


def ibsim_net_text(nodes):
    """ibsim topology (ibnetdiscover-like); caguid=/switchguid= pin the GUIDs. The first record
    (nodes[0]'s mlx5_0) is where the sweeping agent attaches."""
    out = ["# dashboards test IB fabric", ""]

    def hca(node, device):
        leaf = "leaf%02d" % (IB_FABRIC_HCAS.index(device) + 1)
        return ["caguid=0x%016x" % hca_guid(node.index, device),
                'Hca\t1 "%s" # "%s %s"' % (ibsim_id(node, device), node.name, device),
                '[1]\t"%s"[%d]' % (leaf, node.index), ""]

    out += hca(nodes[0], "mlx5_0")
    for name, (guid, nports) in IB_SWITCHES.items():
        out.append("switchguid=0x%016x" % guid)
        out.append('Switch\t%d "%s" # "%s"' % (nports, name, name))
        if name.startswith("leaf"):
            device = IB_FABRIC_HCAS[int(name[-2:]) - 1]
            for node in nodes:
                out.append('[%d]\t"%s"[1]' % (node.index, ibsim_id(node, device)))
            out.append('[%d]\t"spine01"[%d]' % (IB_UPLINK_PORT, int(name[-2:])))
        else:
            for leaf in (1, 2):
                out.append('[%d]\t"leaf%02d"[%d]' % (leaf, leaf, IB_UPLINK_PORT))
        out.append("")
    for node in nodes:
        for device in IB_FABRIC_HCAS:
            if (node, device) != (nodes[0], "mlx5_0"):
                out += hca(node, device)
    return "\n".join(out) + "\n"

