"""Checks of the simulator itself (ctest fabricmon_fabric_sim_selftest, label unit): the files it
generates are consistent with each other and with the kernel formats the collectors read, and
updates are made the way running readers need. No daemon is started.
"""

import os
import re
import shutil
import tempfile
import time

from . import cluster as cluster_mod
from . import scenarios
from . import traffic


class Failure(Exception):
    pass


def _check(cond, message):
    if not cond:
        raise Failure(message)


def _read(path):
    with open(path) as f:
        return f.read()


def check_cluster(fabric, topology, root):
    c = cluster_mod.Cluster.build(16, fabric=fabric, topology=topology)
    initial = c.generate(root)
    sim = traffic.Simulation(c, root, initial)
    sim.tick(time.time())

    # ibsim topology: every HCA's pinned GUID equals its node's sysfs node_guid; every switch of
    # the link list is a Switch record; every cable appears from both ends.
    net = _read(os.path.join(root, "fabric.net"))
    guid_of = {}
    pending = None
    for line in net.splitlines():
        m = re.match(r"caguid=0x([0-9a-f]{16})$", line)
        if m:
            pending = m.group(1)
            continue
        m = re.match(r'Hca\t1 "([^"]+)"', line)
        if m:
            _check(pending is not None, "Hca %s without caguid" % m.group(1))
            guid_of[m.group(1)] = pending
            pending = None
    switches = set(re.findall(r'^Switch\t\d+ "([^"]+)"', net, re.M))
    _check(switches == set(c.switches), "ibsim switches %s != %s" % (switches, set(c.switches)))
    for node in c.nodes:
        for hp in node.ports:
            sysfs_guid = _read(os.path.join(node.sysfs(root), "class", "infiniband", hp.device,
                                            "node_guid")).strip().replace(":", "")
            _check(guid_of.get(hp.ibsim_id) == sysfs_guid,
                   "%s: sysfs node_guid %s, ibsim %s" % (hp.ibsim_id, sysfs_guid,
                                                         guid_of.get(hp.ibsim_id)))
    cables = set()
    for line in _read(os.path.join(root, "links.txt")).splitlines():
        line = line.split("#")[0].split()
        if not line:
            continue
        _check(len(line) == 2, "link list line %r" % line)
        for end in line:
            if end.startswith("switch:"):
                name, port = end[7:].split("/")
                _check(name in c.switches and port.isdigit(), "bad switch end %s" % end)
            else:
                parts = end.split("/")
                _check(parts[0] in c.by_name and len(parts) in (2, 3), "bad host end %s" % end)
        cables.add(tuple(sorted(line)))
    expected = sum(len(n.ports) for n in c.nodes) + c.leaves * c.spines
    _check(len(cables) == expected, "%d cables in the link list, want %d" % (len(cables),
                                                                             expected))

    # Kernel formats.
    node = c.nodes[0]
    port_dir = os.path.join(node.sysfs(root), "class", "infiniband", "mlx5_0", "ports", "1")
    _check(_read(os.path.join(port_dir, "state")) == "4: ACTIVE\n", "port state")
    _check(_read(os.path.join(port_dir, "rate")).startswith("400 Gb/sec"), "port rate")
    snmp = _read(os.path.join(node.procfs(root), "net", "snmp")).splitlines()
    for head, values in zip(snmp[::2], snmp[1::2]):
        _check(head.split()[0] == values.split()[0] and
               len(head.split()) == len(values.split()), "snmp section %s" % head[:20])
    state = _read(node.nvml_state(root))
    _check(len(re.findall(r"^gpu \d", state, re.M)) == 8, "8 GPUs in the NVML state")
    _check(len(re.findall(r"^link \d+ \d+ active=1", state, re.M)) == 8 * 18, "8x18 NVLinks")
    netdev = node.ports[0].netdev
    ntype = _read(os.path.join(node.sysfs(root), "class", "net", netdev, "type")).strip()
    _check(ntype == ("32" if fabric == "ib" else "1"), "%s type %s" % (netdev, ntype))
    if fabric == "roce":
        stats = _read(os.path.join(node.ethtool_dir(root), netdev, "statistics"))
        _check(stats.startswith("NIC statistics:\n") and
               re.search(r"^     tx_prio3_pause_duration: \d+$", stats, re.M),
               "ethtool statistics format")
        ndev = _read(os.path.join(port_dir, "gid_attrs", "ndevs", "0")).strip()
        _check(ndev == netdev, "gid_attrs/ndevs/0 names %s" % ndev)

    # Updates: counters rewritten in place (same inode, never shorter), ethtool/NVML replaced.
    xmit = os.path.join(port_dir, "counters", "port_xmit_data")
    inode = os.stat(xmit).st_ino
    before = int(_read(xmit))
    fd = os.open(xmit, os.O_RDONLY)
    time.sleep(0.05)
    sim.tick(time.time())
    after = int(os.pread(fd, 64, 0).decode())
    os.close(fd)
    _check(os.stat(xmit).st_ino == inode, "port_xmit_data replaced instead of rewritten")
    _check(after > before, "port_xmit_data did not advance (%d -> %d)" % (before, after))
    sim.reset_counters(node.name)
    sim.flush()
    text = _read(xmit)
    _check(text.strip() == "0" and text.endswith("\n"), "reset value %r" % text)
    nvml_inode = os.stat(node.nvml_state(root)).st_ino
    sim.node(node.name).nvlink_rates[(3, 5)] = {"crc_flit": 1000.0}
    time.sleep(0.05)
    sim.tick(time.time())
    _check(os.stat(node.nvml_state(root)).st_ino != nvml_inode, "NVML state not replaced")
    sim.close()


def main(args):
    names = [s.name for s in scenarios.ALL]
    if args.scenario_list is not None:
        listed = args.scenario_list.replace(";", " ").split()
        if listed != names:
            print("tests/scenarios/CMakeLists.txt lists %s, scenarios.py has %s" % (listed, names))
            return 1
    base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # ext4 renames are slow
    root = tempfile.mkdtemp(prefix="fabric-sim-selftest-", dir=base)
    try:
        for fabric, topology in (("ib", "fat-tree"), ("roce", "fat-tree"), ("ib", "rail")):
            check_cluster(fabric, topology, os.path.join(root, "%s-%s" % (fabric, topology)))
            print("ok  %s %s" % (fabric, topology))
    except Failure as e:
        print("FAIL: %s" % e)
        return 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("ok  %d scenarios" % len(names))
    return 0
