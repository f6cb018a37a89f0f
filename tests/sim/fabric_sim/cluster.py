"""The simulated cluster: nodes, HCAs, switches and cables, and the files describing them.

A cluster is N GPU nodes (default 16) cabled as
  * a 2-tier fat tree ("fat-tree"): one HCA per node (mlx5_0); hosts spread over L leaves
    (leaf port 1..H), every leaf has one uplink to each of S spines (leaf ports H+1..H+S, spine
    port = leaf number); or
  * rail-optimized ("rail"): R HCAs per node (mlx5_0..mlx5_{R-1}); rail r is one leaf that takes
    HCA r of every node (leaf port = node number), and the rail leaves uplink to S spines.

Fabric: "ib" (InfiniBand HCAs, each with an IPoIB netdev ib<r>) or "roce" (RoCE HCAs, link layer
Ethernet, each with a RoCE netdev eth<r+1> named by gid_attrs/ndevs and ethtool statistics).
Every node also has a management Ethernet netdev eth0 (no RDMA device).

Files written per node (under <root>/nodes/<name>/):
  sys/      a sysfs tree (class/infiniband/<hca> with node_guid equal to the HCA's GUID in the
            ibsim topology, ports/1/{state,phys_state,rate,counters/,hw_counters/}; class/net with
            the IPoIB or RoCE netdevs and eth0, statistics/ and carrier_* counts). The layout and
            the counter set come from tests/sim/gen_sysfs_tree.py (its functions are reused).
  proc/     net/snmp and net/netstat in the kernel's format (template: a real capture).
  ethtool/  RoCE only: <netdev>/statistics (`ethtool -S` text) and <netdev>/driver, for
            EthtoolCollectorConfig.stats_dir.
  nvml.state  the NVML stand-in's state (tests/fakes/nvml_standin/README.md): 8 GPUs x 18 links.
Fabric-wide files (under <root>/):
  fabric.net   ibsim topology (ibnetdiscover-like; caguid=/switchguid= lines pin every GUID)
  links.txt    the aggregator's link list (daemon/detectors/cable_graph.h format)

Python 3 standard library only.
"""

import json
import os
import random
import sys

from . import files

_SIM_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _SIM_DIR not in sys.path:
    sys.path.insert(0, _SIM_DIR)
import gen_sysfs_tree as gst  # noqa: E402  (tests/sim/gen_sysfs_tree.py)

GPUS_PER_NODE = 8
NVLINKS_PER_GPU = 18
RATE_TEXT = "400 Gb/sec (4X NDR)"
HCA_GUID_BASE = 0x0002C90300A00000
SWITCH_GUID_BASE = 0x0008F10500B00000
MGMT_BDF = "0000:05:00.0"


def guid_sysfs(guid):
    """0x0002c90300a00110 → "0002:c903:00a0:0110" (the kernel's node_guid format)."""
    text = "%016x" % guid
    return ":".join(text[i:i + 4] for i in range(0, 16, 4))


class HostPort:
    """One HCA port of a node and the switch port it is cabled to."""

    def __init__(self, node, device, rail, guid, netdev, leaf, leaf_port, bdf):
        self.node = node
        self.device = device
        self.port = 1
        self.rail = rail
        self.guid = guid
        self.netdev = netdev
        self.leaf = leaf
        self.leaf_port = leaf_port
        self.bdf = bdf

    @property
    def ibsim_id(self):
        return "%s-%s" % (self.node, self.device)

    def key(self):
        return (self.node, self.device, self.port)


class Node:
    """role: "gpu" (8 GPUs behind NVML), "storage" or "login" (no GPU, no NVML; maybe no RDMA
    device at all: then `ports` is empty and the node is not cabled into the fabric)."""

    def __init__(self, name, index, role="gpu", mgmt_netdev="eth0"):
        self.name = name
        self.index = index  # 1-based
        self.ports = []
        self.role = role
        self.mgmt_netdev = mgmt_netdev

    @property
    def has_gpu(self):
        return self.role == "gpu"

    def dir(self, root):
        return os.path.join(root, "nodes", self.name)

    def sysfs(self, root):
        return os.path.join(self.dir(root), "sys")

    def procfs(self, root):
        return os.path.join(self.dir(root), "proc")

    def ethtool_dir(self, root):
        return os.path.join(self.dir(root), "ethtool")

    def nvml_state(self, root):
        return os.path.join(self.dir(root), "nvml.state")


class Switch:
    def __init__(self, name, guid, nports, tier):
        self.name = name
        self.guid = guid
        self.nports = nports
        self.tier = tier  # "leaf" or "spine"
        self.peers = {}   # port → ("host", HostPort) or ("switch", name, port)


class Cluster:
    """The fabric and its nodes. Build with Cluster.build(...)."""

    def __init__(self, fabric, topology, nodes, switches):
        self.fabric = fabric
        self.topology = topology
        self.nodes = nodes
        self.switches = switches
        self.by_name = {n.name: n for n in nodes}

    # -------------------------------------------------------------------------------------
    @staticmethod
    def build(nodes=16, fabric="ib", topology="fat-tree", leaves=None, spines=2, rails=4):
        if fabric not in ("ib", "roce"):
            raise ValueError("fabric must be ib or roce")
        if topology not in ("fat-tree", "rail"):
            raise ValueError("topology must be fat-tree or rail")
        if nodes < 2 or spines < 1:
            raise ValueError("need at least 2 nodes and 1 spine")
        node_list = [Node("node%02d" % i if nodes < 100 else "node%03d" % i, i)
                     for i in range(1, nodes + 1)]
        switches = {}
        hcas = 1 if topology == "fat-tree" else rails
        if topology == "fat-tree":
            leaves = leaves or max(1, (nodes + 3) // 4)
            per_leaf = (nodes + leaves - 1) // leaves
        else:
            leaves = rails
            per_leaf = nodes
        if per_leaf + spines > 255 or leaves > 255:
            raise ValueError("a switch cannot have more than 255 ports")
        sw_index = 0
        for l in range(1, leaves + 1):
            sw_index += 1
            switches["leaf%02d" % l] = Switch("leaf%02d" % l, SWITCH_GUID_BASE + sw_index,
                                              per_leaf + spines, "leaf")
        for s in range(1, spines + 1):
            sw_index += 1
            switches["spine%02d" % s] = Switch("spine%02d" % s, SWITCH_GUID_BASE + sw_index,
                                               leaves, "spine")
        for node in node_list:
            for r in range(hcas):
                if topology == "fat-tree":
                    leaf_no = (node.index - 1) // per_leaf + 1
                    leaf_port = (node.index - 1) % per_leaf + 1
                else:
                    leaf_no = r + 1
                    leaf_port = node.index
                leaf = "leaf%02d" % leaf_no
                netdev = "ib%d" % r if fabric == "ib" else "eth%d" % (r + 1)
                hp = HostPort(node.name, "mlx5_%d" % r, r,
                              HCA_GUID_BASE + node.index * 0x100 + r * 0x10, netdev, leaf,
                              leaf_port, "0000:%02x:00.0" % (0x18 + 0x10 * r))
                node.ports.append(hp)
                switches[leaf].peers[leaf_port] = ("host", hp)
        for l in range(1, leaves + 1):
            leaf = switches["leaf%02d" % l]
            for s in range(1, spines + 1):
                spine = switches["spine%02d" % s]
                leaf.peers[per_leaf + s] = ("switch", spine.name, l)
                spine.peers[l] = ("switch", leaf.name, per_leaf + s)
        cluster = Cluster(fabric, topology, node_list, switches)
        cluster.per_leaf = per_leaf
        cluster.spines = spines
        cluster.leaves = leaves
        return cluster

    def port(self, node, device=None):
        """The node's HCA port `device` (default: its first HCA)."""
        for hp in self.by_name[node].ports:
            if device is None or hp.device == device:
                return hp
        raise KeyError("%s/%s" % (node, device))

    def fabric_nodes(self):
        """Nodes with at least one HCA cabled into the fabric (the first one sweeps in ibsim
        mode and is ibsim's default attach point)."""
        return [n for n in self.nodes if n.ports]

    def leaf_names(self):
        return sorted(n for n, s in self.switches.items() if s.tier == "leaf")

    def uplink(self, leaf, spine):
        """The leaf port cabled to `spine`, and the spine port it lands on."""
        for port, peer in sorted(self.switches[leaf].peers.items()):
            if peer[0] == "switch" and peer[1] == spine:
                return port, peer[2]
        raise KeyError("%s-%s" % (leaf, spine))

    def spine_names(self):
        return sorted(n for n, s in self.switches.items() if s.tier == "spine")

    def describe(self):
        return ("%d nodes, %s %s, %d leaves x %d spines, %d HCA(s)/node"
                % (len(self.nodes), self.fabric.upper(), self.topology, self.leaves, self.spines,
                   len(self.fabric_nodes()[0].ports)))

    # -------------------------------------------------------------------------------------
    # Fabric-wide files.

    def link_list_text(self):
        lines = ["# fabric_sim link list: %s" % self.describe(),
                 "# host port (RDMA device, or RoCE netdev) <-> switch port; switch <-> switch"]
        for node in self.nodes:
            for hp in node.ports:
                host = ("%s/%s/%d" % (hp.node, hp.device, hp.port) if self.fabric == "ib"
                        else "%s/%s" % (hp.node, hp.netdev))  # RoCE: by netdev, as operators do
                lines.append("%-22s switch:%s/%d" % (host, hp.leaf, hp.leaf_port))
        for name in sorted(self.switches):
            sw = self.switches[name]
            if sw.tier != "leaf":
                continue
            for port, peer in sorted(sw.peers.items()):
                if peer[0] == "switch":
                    lines.append("%-22s switch:%s/%d" % ("switch:%s/%d" % (name, port),
                                                          peer[1], peer[2]))
        return "\n".join(lines) + "\n"

    def ibsim_net_text(self):
        """ibsim topology. caguid=/switchguid= before each record pin its node GUID, so the
        fabric collector's GUIDs resolve to the hosts whose sysfs node_guid carries them. The
        first record is the first node's first HCA: the default attach point."""
        out = ["# fabric_sim: %s (ibsim net format, ibnetdiscover-like)" % self.describe(), ""]

        def hca_record(hp):
            return ["caguid=0x%016x" % hp.guid,
                    'Hca\t1 "%s" # "%s %s"' % (hp.ibsim_id, hp.node, hp.device),
                    '[1]\t"%s"[%d]' % (hp.leaf, hp.leaf_port), ""]

        first = self.fabric_nodes()[0].ports[0]
        out += hca_record(first)
        for name in sorted(self.switches, key=lambda n: (self.switches[n].tier != "leaf", n)):
            sw = self.switches[name]
            out.append("switchguid=0x%016x" % sw.guid)
            out.append('Switch\t%d "%s" # "%s"' % (sw.nports, name, name))
            for port, peer in sorted(sw.peers.items()):
                if peer[0] == "host":
                    out.append('[%d]\t"%s"[1]' % (port, peer[1].ibsim_id))
                else:
                    out.append('[%d]\t"%s"[%d]' % (port, peer[1], peer[2]))
            out.append("")
        for node in self.nodes:
            for hp in node.ports:
                if hp is not first:
                    out += hca_record(hp)
        return "\n".join(out) + "\n"

    # -------------------------------------------------------------------------------------
    # Per-node trees (initial content; traffic.Simulation rewrites the counters).

    def generate(self, root, seed=0):
        """Writes every file of the cluster under `root` (which must not hold one yet).

        Returns the initial counter values, {(node, device): {"counters/x": v, ...}}, the
        starting point of the traffic model.
        """
        if os.path.exists(os.path.join(root, "nodes")):
            raise ValueError("%s already holds a cluster" % root)
        os.makedirs(root, exist_ok=True)
        initial = {}
        for node in self.nodes:
            rng = random.Random("fabric_sim/%d/%s" % (seed, node.name))
            out = node.sysfs(root)
            os.makedirs(os.path.join(out, "class", "infiniband"), exist_ok=True)
            os.makedirs(os.path.join(out, "class", "net"), exist_ok=True)
            for hp in node.ports:
                device = gst._device(
                    hp.device, "mlx5_core", "ib" if self.fabric == "ib" else "roce", hp.bdf,
                    hca_type="MT4129", board_id="MT_0000000838", fw_ver="28.39.1002",
                    netdev=hp.netdev, rate=RATE_TEXT,
                    link_layer="InfiniBand" if self.fabric == "ib" else "Ethernet")
                md = {}
                gst._write_device(out, device, rng, md)
                dev = gst.device_dir(out, device)
                guid = guid_sysfs(hp.guid)
                files.write_new(os.path.join(dev, "node_guid"), guid + "\n")
                files.write_new(os.path.join(dev, "sys_image_guid"), guid + "\n")
                files.write_new(os.path.join(dev, "node_desc"), "%s %s\n" % (node.name, hp.device))
                pdir = os.path.join(dev, "ports", "1")
                if self.fabric == "ib":
                    files.write_new(os.path.join(pdir, "gids", "0"),
                                    "fe80:0000:0000:0000:%s\n" % guid)
                    files.write_new(os.path.join(pdir, "lid"), "0x%x\n" % (node.index * 8 + hp.rail + 1))
                values = dict(md["values"]["1"])
                widths = {"%s/%s" % (g, n): (w, o) for g, n, w, o, _ in gst.counter_specs(device)}
                netdev_dir = os.path.join(gst._pci_dir(out, device), "net", hp.netdev)
                files.write_new(os.path.join(netdev_dir, "speed"), "400000\n")  # Mb/s
                initial[(node.name, hp.device)] = {"values": values, "widths": widths,
                                                   "port_dir": pdir,
                                                   "netdev_dir": os.path.join(
                                                       gst._pci_dir(out, device), "net",
                                                       hp.netdev)}
            # Management Ethernet: a PCI function of its own, no RDMA device.
            gst._write_netdev(out, {"bdf": MGMT_BDF}, node.mgmt_netdev, 0, "Ethernet", rng)
            files.write_new(os.path.join(out, "devices", "pci0000:00", MGMT_BDF, "net",
                                         node.mgmt_netdev, "speed"), "100000\n")
            files.write_new(os.path.join(out, "devices", "pci0000:00", MGMT_BDF, "vendor"),
                            "0x8086\n")
            # procfs (written by the traffic model), ethtool dir and NVML state come next.
            os.makedirs(os.path.join(node.procfs(root), "net"), exist_ok=True)
            if self.fabric == "roce":
                for hp in node.ports:
                    files.write_new(os.path.join(node.ethtool_dir(root), hp.netdev, "driver"),
                                    "driver: mlx5_core\nversion: 24.10-1.1.4\n"
                                    "firmware-version: 28.39.1002 (MT_0000000838)\n"
                                    "bus-info: %s\n" % hp.bdf)
        files.write_new(os.path.join(root, "links.txt"), self.link_list_text())
        files.write_new(os.path.join(root, "fabric.net"), self.ibsim_net_text())
        with open(os.path.join(root, "cluster.json"), "w") as f:
            json.dump(self.summary(), f, indent=1, sort_keys=True)
            f.write("\n")
        return initial

    def summary(self):
        return {
            "fabric": self.fabric,
            "topology": self.topology,
            "nodes": [{"name": n.name, "role": n.role,
                       "ports": [{"device": p.device, "guid": "0x%016x" % p.guid,
                                  "netdev": p.netdev, "leaf": p.leaf, "leaf_port": p.leaf_port}
                                 for p in n.ports]}
                      for n in self.nodes],
            "switches": [{"name": s.name, "guid": "0x%016x" % s.guid, "ports": s.nports,
                          "tier": s.tier} for s in self.switches.values()],
        }
