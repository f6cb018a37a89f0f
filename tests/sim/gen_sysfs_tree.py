#!/usr/bin/env python3
"""Generates synthetic sysfs trees for the ib_sysfs collector's tests and benchmarks.

The layout follows the kernel's (drivers/infiniband/core/sysfs.c, net/core/net-sysfs.c):

  <out>/class/infiniband/<dev>   -> ../../devices/pci0000:00/<bdf>/infiniband/<dev>   (symlink)
  <out>/class/net/<netdev>       -> ../../devices/pci0000:00/<bdf>/net/<netdev>       (symlink)
  <out>/devices/pci0000:00/<bdf>/driver -> ../../../bus/pci/drivers/<driver>         (symlink)
  <out>/devices/.../infiniband/<dev>/device -> ../../../<bdf>                         (symlink)

so `class/infiniband/<dev>/device/driver` resolves to a directory whose basename is the driver
(mlx5_core, irdma, efa), exactly as on a host. Every value file ends with a newline like the
kernel's; counter values are random but deterministic per seed.

Profiles:
  dgx-h100   8 ConnectX-7 IB HCAs at 400 Gb/sec (4X NDR), one of them renamed by systemd
             (ibp12s0), each with the 21 PMA files of the extended group (counters/), mlx5
             hw_counters/ (q-counters, congestion counters, rx_icrc_encapsulated, lifespan) and an
             IPoIB netdev ib0..ib7; a RoCE storage HCA (link_layer Ethernet, gid_attrs/ndevs/0
             names its Ethernet netdev); an irdma device and an efa device with hw_counters/ only;
             and a firmware-restricted ConnectX-7 PF whose counter files must fail with EINVAL
             (the tree cannot do that by itself: the manifest lists the paths for
             tests/testing/einval_preload.c, FABRICMON_EINVAL_PATHS).
  minimal    one ConnectX-7 IB HCA (mlx5_0) with an IPoIB netdev; for quick tests.

One port of the dgx-h100 profile (mlx5_1, port 1) has its narrow PMA counters pinned at
saturation: link_downed=255, symbol_error=65535, port_xmit_wait=4294967295.

A manifest describing what was generated is written to <out>/fabricmon_sim_manifest.json
(outside class/, so no collector reads it).

CLI:
  gen_sysfs_tree.py --profile dgx-h100 --out DIR [--seed N]     generate (DIR must be empty/absent)
  gen_sysfs_tree.py --out DIR --mutate [--steps N] [--seed N]   bump counters of an existing tree
  gen_sysfs_tree.py --out DIR --einval-paths                     print FABRICMON_EINVAL_PATHS value

Python API (stdlib only, importable): generate(), mutate(), load_manifest(), einval_paths(),
counter_files(), PROFILES.
"""

import argparse
import json
import os
import random
import sys

MANIFEST_NAME = "fabricmon_sim_manifest.json"

# PMA PortCounters widths (IBA; kernel drivers/infiniband/core/sysfs.c PORT_PMA_ATTR; libibmad
# fields.c). They clamp at all ones.
PMA_ERROR_COUNTERS = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
    "port_xmit_wait": 32,  # 32-bit even in the extended group
}
# PortCountersExtended (pma_group_ext): 64-bit data (octets / 4), packets, unicast/multicast.
PMA_EXT_TRAFFIC_COUNTERS = [
    "port_xmit_data",
    "port_rcv_data",
    "port_xmit_packets",
    "port_rcv_packets",
    "unicast_xmit_packets",
    "unicast_rcv_packets",
    "multicast_xmit_packets",
    "multicast_rcv_packets",
]

# mlx5 hw_counters (drivers/infiniband/hw/mlx5/counters.c): q-counters 32-bit (wrap),
# congestion counters and rx_icrc_encapsulated 64-bit.
MLX5_Q_COUNTERS = [
    "rx_write_requests", "rx_read_requests", "rx_atomic_requests", "rx_dct_connect",
    "out_of_buffer", "out_of_sequence", "duplicate_request", "rnr_nak_retry_err",
    "packet_seq_err", "implied_nak_seq_err", "local_ack_timeout_err", "resp_local_length_error",
    "resp_cqe_error", "req_cqe_error", "req_remote_invalid_request", "req_remote_access_errors",
    "resp_remote_access_errors", "resp_cqe_flush_error", "req_cqe_flush_error",
    "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart", "roce_slow_restart_cnps",
    "roce_slow_restart_trans",
]
MLX5_CC_COUNTERS = [
    "rp_cnp_ignored", "rp_cnp_handled", "np_ecn_marked_roce_packets", "np_cnp_sent",
    "rx_icrc_encapsulated",
]

# irdma hw_counters (drivers/infiniband/hw/irdma/verbs.c irdma_hw_stat_names): 64-bit names in
# the RFC 4293 / iWARP MIB style.
IRDMA_HW_COUNTERS = [
    "ip4InOctets", "ip4InPkts", "ip4InDiscards", "ip4InTruncatedPkts", "ip4InMcastOctets",
    "ip4InMcastPkts", "ip4OutOctets", "ip4OutPkts", "ip4OutSegRqd", "ip4OutMcastOctets",
    "ip4OutMcastPkts", "ip6InOctets", "ip6InPkts", "ip6InDiscards", "ip6InTruncatedPkts",
    "ip6InMcastOctets", "ip6InMcastPkts", "ip6OutOctets", "ip6OutPkts", "ip6OutSegRqd",
    "ip6OutMcastOctets", "ip6OutMcastPkts", "tcpRetransSegs", "tcpInSegs", "tcpOutSegs",
    "tcpInOptErrors", "tcpInProtoErrors", "iwInRdmaReads", "iwInRdmaSends", "iwInRdmaWrites",
    "iwOutRdmaReads", "iwOutRdmaSends", "iwOutRdmaWrites", "iwRdmaBnd", "iwRdmaInv",
    "RxUDP", "TxUDP", "RxECNMrkd", "cnpHandled", "cnpIgnored", "cnpSent", "RxVlanErrors",
]

# efa port hw_counters (drivers/infiniband/hw/efa/efa_verbs.c efa_port_stats_descs).
EFA_HW_COUNTERS = [
    "tx_bytes", "tx_pkts", "rx_bytes", "rx_pkts", "rx_drops", "send_bytes", "send_wrs",
    "recv_bytes", "recv_wrs", "rdma_read_wrs", "rdma_read_bytes", "rdma_read_wr_err",
    "rdma_read_resp_bytes", "rdma_write_wrs", "rdma_write_bytes", "rdma_write_wr_err",
    "rdma_write_recv_bytes",
]
# efa device-level hw_counters (<dev>/hw_counters, not per port).
EFA_DEVICE_HW_COUNTERS = [
    "alloc_pd_err", "alloc_ucontext_err", "create_ah_err", "create_cq_err", "create_qp_err",
    "keep_alive_rcvd", "mmap_err", "reg_mr_err", "submitted_cmds", "completed_cmds",
    "cmds_err", "no_completion_cmds",
]

SATURATED_PORT = ("mlx5_1", 1)
SATURATED_VALUES = {"link_downed": 255, "symbol_error": 65535, "port_xmit_wait": 4294967295}


def _device(name, driver, kind, bdf, **kw):
    d = {
        "name": name,
        "driver": driver,
        "kind": kind,  # "ib", "roce", "irdma", "efa"
        "bdf": bdf,
        "ports": [1],
        "restricted": False,
        "netdev": None,
        "hca_type": kw.get("hca_type", ""),
        "board_id": kw.get("board_id", ""),
        "fw_ver": kw.get("fw_ver", ""),
        "rate": kw.get("rate", "400 Gb/sec (4X NDR)"),
        "link_layer": kw.get("link_layer", "InfiniBand"),
        "renamed": kw.get("renamed", False),
    }
    d.update(kw)
    return d


def _dgx_h100_devices():
    devices = []
    # Compute HCAs: 8 x ConnectX-7 (MT4129) NDR; the fourth one renamed by systemd's
    # predictable naming (ID_NET_NAME_PATH), so it is only found by directory and its driver only
    # by device/driver.
    bdfs = ["0000:18:00.0", "0000:40:00.0", "0000:4f:00.0", "0000:0c:00.0",
            "0000:9a:00.0", "0000:c0:00.0", "0000:ce:00.0", "0000:dc:00.0"]
    for i, bdf in enumerate(bdfs):
        name = "ibp12s0" if i == 3 else "mlx5_%d" % i
        devices.append(_device(
            name, "mlx5_core", "ib", bdf, hca_type="MT4129", board_id="MT_0000000838",
            fw_ver="28.39.1002", netdev="ib%d" % i, renamed=(i == 3)))
    # Storage / in-band management HCA: ConnectX-7 in Ethernet mode, RoCE.
    devices.append(_device(
        "mlx5_8", "mlx5_core", "roce", "0000:aa:00.0", hca_type="MT4129",
        board_id="MT_0000000834", fw_ver="28.39.1002", rate="200 Gb/sec (4X HDR)",
        link_layer="Ethernet", netdev="enp170s0f0np0"))
    # Firmware-restricted ConnectX-7 PF (HGX "Limited PF"): every counter read fails with EINVAL.
    devices.append(_device(
        "mlx5_9", "mlx5_core", "ib", "0000:ab:00.0", hca_type="MT4129",
        board_id="MT_0000000838", fw_ver="28.39.1002", restricted=True, netdev="ib8"))
    # Intel E810 iWARP/RoCE: hw_counters only.
    devices.append(_device(
        "rocep152s0f0", "irdma", "irdma", "0000:98:00.0", hca_type="",
        board_id="", fw_ver="1.57", rate="100 Gb/sec (4X EDR)", link_layer="Ethernet",
        netdev="ens152f0"))
    # AWS EFA: hw_counters only.
    devices.append(_device(
        "rdmap16s27", "efa", "efa", "0000:10:1b.0", hca_type="", board_id="",
        fw_ver="0.0.0.0", rate="100 Gb/sec (4X EDR)", link_layer="Unknown"))
    return devices


def _minimal_devices():
    return [_device("mlx5_0", "mlx5_core", "ib", "0000:18:00.0", hca_type="MT4129",
                    board_id="MT_0000000838", fw_ver="28.39.1002", netdev="ib0")]


PROFILES = {"dgx-h100": _dgx_h100_devices, "minimal": _minimal_devices}


# ------------------------------------------------------------------------------------------
# Counter model: which files a device has, their widths and how they overflow.


def counter_specs(device):
    """[(group, file, width, overflow, kind)] for one port of `device`.

    group: "counters" or "hw_counters"; overflow: "saturates" or "wraps";
    kind: "data", "packets", "error", "hw" (drives value sizes and increments).
    """
    specs = []
    if device["kind"] in ("ib", "roce"):
        for name, width in PMA_ERROR_COUNTERS.items():
            specs.append(("counters", name, width, "saturates", "error"))
        for name in PMA_EXT_TRAFFIC_COUNTERS:
            kind = "data" if name.endswith("_data") else "packets"
            specs.append(("counters", name, 64, "saturates", kind))
        for name in MLX5_Q_COUNTERS:
            specs.append(("hw_counters", name, 32, "wraps", "hw"))
        for name in MLX5_CC_COUNTERS:
            specs.append(("hw_counters", name, 64, "wraps", "hw"))
    elif device["kind"] == "irdma":
        for name in IRDMA_HW_COUNTERS:
            kind = "data" if "Octets" in name else "hw"
            specs.append(("hw_counters", name, 64, "wraps", kind))
    elif device["kind"] == "efa":
        for name in EFA_HW_COUNTERS:
            kind = "data" if "bytes" in name else "hw"
            specs.append(("hw_counters", name, 64, "wraps", kind))
    return sorted(specs)


def _initial_value(rng, width, kind, name):
    if kind == "data":
        # Weeks of traffic at 400 Gb/s, in 4-byte words for PMA data: ~1e14..1e15.
        return rng.randrange(10**13, 10**15)
    if kind == "packets":
        return rng.randrange(10**9, 10**12)
    if kind == "error":
        limit = (1 << width) - 1
        # Mostly zero or small, never at the limit unless chosen for saturation.
        if rng.random() < 0.5:
            return 0
        return rng.randrange(0, max(1, min(limit - 1, 200)))
    # hw counters: 32-bit q-counters anywhere in range (some close to the wrap), 64-bit ones
    # partly above 2^32 so a 32-bit reader would be caught.
    if width == 32:
        return rng.randrange(0, 1 << 32) if rng.random() < 0.2 else rng.randrange(0, 10**6)
    if name.startswith(("np_", "rp_")):
        return rng.randrange(1 << 32, 1 << 40)
    return rng.randrange(0, 10**9)


def _increment(rng, width, kind):
    if kind == "data":
        return rng.randrange(10**6, 10**9)  # up to ~4 GB per step
    if kind == "packets":
        return rng.randrange(10**3, 10**6)
    if kind == "error":
        return 1 if rng.random() < 0.1 else 0
    return rng.randrange(0, 10**4)


# ------------------------------------------------------------------------------------------
# Writing.


def _write(path, content):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    # Overwrite in place (same inode): readers keep files open and pread them again, as sysfs
    # allows. os.replace() would leave them reading the old inode.
    with open(path, "w") as f:
        f.write(content)


def _symlink(target, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.symlink(target, path)


def _guid(rng):
    return ":".join("%04x" % rng.randrange(0, 1 << 16) for _ in range(4))


def _pci_dir(out, device):
    return os.path.join(out, "devices", "pci0000:00", device["bdf"])


def device_dir(out, device):
    """The real (non-symlink) directory of an RDMA device in the tree."""
    return os.path.join(_pci_dir(out, device), "infiniband", device["name"])


def _write_netdev(out, device, netdev, port_index, link_layer, rng):
    pci = _pci_dir(out, device)
    nd = os.path.join(pci, "net", netdev)
    is_ib = link_layer == "InfiniBand"
    _write(os.path.join(nd, "dev_port"), "%d\n" % port_index)
    _write(os.path.join(nd, "dev_id"), "0x0\n")
    _write(os.path.join(nd, "type"), "32\n" if is_ib else "1\n")
    _write(os.path.join(nd, "mtu"), "4092\n" if is_ib else "9000\n")
    _write(os.path.join(nd, "operstate"), "up\n")
    _write(os.path.join(nd, "carrier"), "1\n")
    _write(os.path.join(nd, "carrier_down_count"), "%d\n" % rng.randrange(0, 4))
    _write(os.path.join(nd, "carrier_up_count"), "%d\n" % rng.randrange(1, 5))
    _write(os.path.join(nd, "address"),
           ("00:00:10:87:fe:80:00:00:00:00:00:00:%s\n" %
            ":".join("%02x" % rng.randrange(256) for _ in range(8)))
           if is_ib else
           ("%s\n" % ":".join("%02x" % rng.randrange(256) for _ in range(6))))
    for stat in ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets", "rx_errors", "tx_errors"):
        _write(os.path.join(nd, "statistics", stat), "%d\n" % rng.randrange(0, 10**12))
    _symlink("../../../%s" % device["bdf"], os.path.join(nd, "device"))
    _symlink("../../devices/pci0000:00/%s/net/%s" % (device["bdf"], netdev),
             os.path.join(out, "class", "net", netdev))


def _write_device(out, device, rng, manifest_device):
    pci = _pci_dir(out, device)
    dev = device_dir(out, device)
    driver = device["driver"]
    # PCI function: driver link and a few attributes.
    os.makedirs(os.path.join(out, "bus", "pci", "drivers", driver), exist_ok=True)
    if not os.path.lexists(os.path.join(pci, "driver")):
        _symlink("../../../bus/pci/drivers/%s" % driver, os.path.join(pci, "driver"))
        _write(os.path.join(pci, "vendor"),
               {"mlx5_core": "0x15b3\n", "irdma": "0x8086\n", "efa": "0x1d0f\n"}[driver])
        _write(os.path.join(pci, "numa_node"), "%d\n" % (0 if device["bdf"] < "0000:80" else 1))
    _symlink("../../../%s" % device["bdf"], os.path.join(dev, "device"))
    _symlink("../../devices/pci0000:00/%s/infiniband/%s" % (device["bdf"], device["name"]),
             os.path.join(out, "class", "infiniband", device["name"]))

    node_guid = _guid(rng)
    _write(os.path.join(dev, "node_guid"), node_guid + "\n")
    _write(os.path.join(dev, "sys_image_guid"), node_guid + "\n")
    _write(os.path.join(dev, "node_type"), "1: CA\n")
    _write(os.path.join(dev, "node_desc"), "dgx-node-01 %s\n" % device["name"])
    for attr in ("fw_ver", "board_id", "hca_type"):
        # Real drivers without the attribute simply have no file (efa has no board_id).
        if device[attr]:
            _write(os.path.join(dev, attr), device[attr] + "\n")
    if device["kind"] == "efa":
        dev_hw = os.path.join(dev, "hw_counters")
        for name in EFA_DEVICE_HW_COUNTERS:
            _write(os.path.join(dev_hw, name), "%d\n" % rng.randrange(0, 10**6))
        _write(os.path.join(dev_hw, "lifespan"), "10\n")
    manifest_device["node_guid"] = node_guid
    manifest_device["path"] = os.path.relpath(dev, out)

    specs = counter_specs(device)
    lid_base = rng.randrange(1, 0xBFFF - 8)
    for port in device["ports"]:
        pdir = os.path.join(dev, "ports", str(port))
        _write(os.path.join(pdir, "state"), "4: ACTIVE\n")
        _write(os.path.join(pdir, "phys_state"), "5: LinkUp\n")
        _write(os.path.join(pdir, "rate"), device["rate"] + "\n")
        _write(os.path.join(pdir, "link_layer"), device["link_layer"] + "\n")
        _write(os.path.join(pdir, "cap_mask"), "0xa751e848\n")
        _write(os.path.join(pdir, "lid_mask_count"), "0\n")
        _write(os.path.join(pdir, "sm_sl"), "0\n")
        if device["link_layer"] == "InfiniBand":
            _write(os.path.join(pdir, "lid"), "0x%x\n" % (lid_base + port))
            _write(os.path.join(pdir, "sm_lid"), "0x1\n")
            # IB GIDs have no netdev: the kernel's ndevs files exist but name nothing.
            for i in range(4):
                _write(os.path.join(pdir, "gid_attrs", "ndevs", str(i)), "")
                _write(os.path.join(pdir, "gid_attrs", "types", str(i)), "IB/RoCE v1\n")
            _write(os.path.join(pdir, "gids", "0"),
                   "fe80:0000:0000:0000:%s\n" % node_guid)
        else:
            _write(os.path.join(pdir, "lid"), "0x0\n")
            _write(os.path.join(pdir, "sm_lid"), "0x0\n")
            if device["netdev"]:
                for i, gid_type in enumerate(("IB/RoCE v1", "RoCE v2")):
                    _write(os.path.join(pdir, "gid_attrs", "ndevs", str(i)),
                           device["netdev"] + "\n")
                    _write(os.path.join(pdir, "gid_attrs", "types", str(i)), gid_type + "\n")
        port_values = {}
        for group, name, width, overflow, kind in specs:
            value = _initial_value(rng, width, kind, name)
            if (device["name"], port) == SATURATED_PORT and name in SATURATED_VALUES:
                value = SATURATED_VALUES[name]
            value = min(value, (1 << width) - 1)
            _write(os.path.join(pdir, group, name), "%d\n" % value)
            port_values["%s/%s" % (group, name)] = value
        if any(group == "hw_counters" for group, *_ in specs):
            _write(os.path.join(pdir, "hw_counters", "lifespan"), "10\n")
        manifest_device.setdefault("values", {})[str(port)] = port_values
        if device["netdev"]:
            _write_netdev(out, device, device["netdev"], port - 1, device["link_layer"], rng)


def generate(out, profile="dgx-h100", seed=0):
    """Writes the tree of `profile` under `out` (created; must not hold a tree yet).

    Returns the manifest (also written to <out>/fabricmon_sim_manifest.json).
    """
    if profile not in PROFILES:
        raise ValueError("unknown profile %r (have: %s)" % (profile, ", ".join(sorted(PROFILES))))
    if os.path.exists(os.path.join(out, "class")):
        raise ValueError("%s already holds a tree" % out)
    rng = random.Random("%s/%d" % (profile, seed))
    devices = PROFILES[profile]()
    manifest = {"profile": profile, "seed": seed, "step": 0, "devices": [],
                "saturated": [], "einval_paths": []}
    os.makedirs(os.path.join(out, "class", "infiniband"), exist_ok=True)
    os.makedirs(os.path.join(out, "class", "net"), exist_ok=True)
    for device in devices:
        md = dict(device)
        _write_device(out, device, rng, md)
        md["counters"] = [[g, n, w, o, k] for g, n, w, o, k in counter_specs(device)]
        manifest["devices"].append(md)
        if device["restricted"]:
            for port in device["ports"]:
                for group in ("counters", "hw_counters"):
                    manifest["einval_paths"].append(
                        "infiniband/%s/ports/%d/%s/" % (device["name"], port, group))
    dev_names = [d["name"] for d in devices]
    if SATURATED_PORT[0] in dev_names:
        for name, value in sorted(SATURATED_VALUES.items()):
            manifest["saturated"].append(
                {"device": SATURATED_PORT[0], "port": SATURATED_PORT[1], "file": name,
                 "value": value})
    _save_manifest(out, manifest)
    return manifest


def _save_manifest(out, manifest):
    with open(os.path.join(out, MANIFEST_NAME), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


def load_manifest(out):
    with open(os.path.join(out, MANIFEST_NAME)) as f:
        return json.load(f)


def einval_paths(manifest):
    """FABRICMON_EINVAL_PATHS value (colon-separated substrings) for the restricted devices."""
    return ":".join(manifest["einval_paths"])


def counter_files(out, manifest=None, include_restricted=True):
    """[(path, width, overflow)] of every counter file in the tree (for the benchmark's floor)."""
    manifest = manifest or load_manifest(out)
    files = []
    for d in manifest["devices"]:
        if d["restricted"] and not include_restricted:
            continue
        for port in d["ports"]:
            for group, name, width, overflow, _ in d["counters"]:
                files.append((os.path.join(out, d["path"], "ports", str(port), group, name),
                              width, overflow))
    return files


def mutate(out, steps=1, seed=None):
    """Bumps every counter of every device `steps` times, like traffic would.

    Saturating counters (PMA) stick at 2^width - 1; wrapping ones (mlx5 q-counters) wrap modulo
    2^width. Files are rewritten in place. Returns the number of files whose value changed.
    """
    manifest = load_manifest(out)
    base = manifest["seed"] if seed is None else seed
    changed = set()
    for _ in range(steps):
        manifest["step"] += 1
        rng = random.Random("mutate/%d/%d" % (base, manifest["step"]))
        for d in manifest["devices"]:
            for port in d["ports"]:
                values = d["values"][str(port)]
                for group, name, width, overflow, kind in d["counters"]:
                    key = "%s/%s" % (group, name)
                    limit = (1 << width) - 1
                    old = values[key]
                    new = old + _increment(rng, width, kind)
                    if overflow == "saturates":
                        new = min(new, limit)
                    else:
                        new &= limit
                    if new != old:
                        values[key] = new
                        changed.add((d["name"], port, key))
    for d in manifest["devices"]:
        for port in d["ports"]:
            for key, value in d["values"][str(port)].items():
                if (d["name"], port, key) in changed:
                    _write(os.path.join(out, d["path"], "ports", str(port), key), "%d\n" % value)
    _save_manifest(out, manifest)
    return len(changed)


def unlist_kinds(out, manifest, kinds):
    """Removes the class/infiniband entries of devices of `kinds` (their device directories stay).

    The benchmarks compare with node_exporter, whose infiniband collector refuses a device without
    a counters/ directory (irdma, efa have only hw_counters/): both sides then read the same tree.
    Returns the number of devices unlisted.
    """
    unlisted = 0
    for d in manifest["devices"]:
        if d["kind"] in kinds:
            os.unlink(os.path.join(out, "class", "infiniband", d["name"]))
            unlisted += 1
    return unlisted


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="dgx-h100", choices=sorted(PROFILES))
    parser.add_argument("--out", required=True, help="sysfs root to create (like /sys)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mutate", action="store_true", help="bump counters of an existing tree")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--without-kinds", default="",
                        help="comma list of device kinds (e.g. irdma,efa) left out of class/infiniband")
    parser.add_argument("--einval-paths", action="store_true",
                        help="print the FABRICMON_EINVAL_PATHS value of an existing tree")
    args = parser.parse_args(argv)
    try:
        if args.einval_paths:
            print(einval_paths(load_manifest(args.out)))
        elif args.mutate:
            print(mutate(args.out, steps=args.steps,
                         seed=args.seed if args.seed else None))
        else:
            manifest = generate(args.out, args.profile, args.seed)
            kinds = {k for k in args.without_kinds.split(",") if k}
            if kinds:
                unlist_kinds(args.out, manifest, kinds)
            print("%s: %d devices" % (args.out, len(manifest["devices"])))
    except (OSError, ValueError) as e:
        print("gen_sysfs_tree: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
