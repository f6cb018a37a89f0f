#!/usr/bin/env python3
"""Oracle test: Debian's prometheus-node-exporter (1.5, infiniband collector) against
`fabricmon-agent --once` on the same sysfs trees.

Every node_infiniband_* value node_exporter exports must equal ours after unit mapping (the
MAPPING table below); a metric name missing from the table fails the test, so a newer
node_exporter cannot silently widen or narrow the comparison. Trees: the three real captures in
../shared/fixtures/sysfs and generated dgx-h100 trees (tests/sim/gen_sysfs_tree.py).

Exit status: 0 pass, 1 mismatch or error, 77 skipped (node_exporter not installed).

Usage: node_exporter_oracle_test.py --agent PATH [--fixtures DIR] [--verbose]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "sim"))
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "testing"))
import gen_sysfs_tree  # noqa: E402
from fabricmon_testing import SKIP, free_port  # noqa: E402
from fabricmon_testing import parse_text_exposition as parse_exposition  # noqa: E402

# node_exporter 1.5 (procfs 0.8) family → (our family, files it reads). The sysfs file names
# say where each value comes from; the comparison uses our family for the same device/port.
# Data counters: node_exporter multiplies PortXmitData/PortRcvData by 4 in procfs; our series
# carry scale 4 (`fabricmon-agent --once` prints raw × scale), so both are bytes.
PORT_COUNTERS = {
    # counters/ (PortCounters / PortCountersExtended)
    "node_infiniband_excessive_buffer_overrun_errors_total":
        ("fabricmon_ib_excessive_buffer_overrun_errors_total", "counters/excessive_buffer_overrun_errors"),
    "node_infiniband_link_downed_total": ("fabricmon_ib_link_downed_total", "counters/link_downed"),
    "node_infiniband_link_error_recovery_total":
        ("fabricmon_ib_link_error_recovery_total", "counters/link_error_recovery"),
    "node_infiniband_local_link_integrity_errors_total":
        ("fabricmon_ib_local_link_integrity_errors_total", "counters/local_link_integrity_errors"),
    "node_infiniband_multicast_packets_received_total":
        ("fabricmon_ib_multicast_rcv_packets_total", "counters/multicast_rcv_packets"),
    "node_infiniband_multicast_packets_transmitted_total":
        ("fabricmon_ib_multicast_xmit_packets_total", "counters/multicast_xmit_packets"),
    "node_infiniband_port_constraint_errors_received_total":
        ("fabricmon_ib_port_rcv_constraint_errors_total", "counters/port_rcv_constraint_errors"),
    "node_infiniband_port_constraint_errors_transmitted_total":
        ("fabricmon_ib_port_xmit_constraint_errors_total", "counters/port_xmit_constraint_errors"),
    "node_infiniband_port_data_received_bytes_total":
        ("fabricmon_ib_port_rcv_data_bytes_total", "counters/port_rcv_data"),
    "node_infiniband_port_data_transmitted_bytes_total":
        ("fabricmon_ib_port_xmit_data_bytes_total", "counters/port_xmit_data"),
    "node_infiniband_port_discards_received_total":
        ("fabricmon_ib_port_rcv_discards_total", "counters/port_rcv_discards"),
    "node_infiniband_port_discards_transmitted_total":
        ("fabricmon_ib_port_xmit_discards_total", "counters/port_xmit_discards"),
    "node_infiniband_port_errors_received_total":
        ("fabricmon_ib_port_rcv_errors_total", "counters/port_rcv_errors"),
    "node_infiniband_port_packets_received_total":
        ("fabricmon_ib_port_rcv_packets_total", "counters/port_rcv_packets"),
    "node_infiniband_port_packets_transmitted_total":
        ("fabricmon_ib_port_xmit_packets_total", "counters/port_xmit_packets"),
    "node_infiniband_port_receive_remote_physical_errors_total":
        ("fabricmon_ib_port_rcv_remote_physical_errors_total", "counters/port_rcv_remote_physical_errors"),
    "node_infiniband_port_receive_switch_relay_errors_total":
        ("fabricmon_ib_port_rcv_switch_relay_errors_total", "counters/port_rcv_switch_relay_errors"),
    "node_infiniband_port_transmit_wait_total":
        ("fabricmon_ib_port_xmit_wait_total", "counters/port_xmit_wait"),
    "node_infiniband_symbol_error_total": ("fabricmon_ib_symbol_error_total", "counters/symbol_error"),
    "node_infiniband_unicast_packets_received_total":
        ("fabricmon_ib_unicast_rcv_packets_total", "counters/unicast_rcv_packets"),
    "node_infiniband_unicast_packets_transmitted_total":
        ("fabricmon_ib_unicast_xmit_packets_total", "counters/unicast_xmit_packets"),
    "node_infiniband_vl15_dropped_total": ("fabricmon_ib_vl15_dropped_total", "counters/VL15_dropped"),
    # counters_ext/ (pre-4.5 kernels' 64-bit group): node_exporter exports them as legacy_*; we
    # fold them into the same family as counters/, preferring counters_ext/ when both exist.
    "node_infiniband_legacy_data_received_bytes_total":
        ("fabricmon_ib_port_rcv_data_bytes_total", "counters_ext/port_rcv_data_64"),
    "node_infiniband_legacy_data_transmitted_bytes_total":
        ("fabricmon_ib_port_xmit_data_bytes_total", "counters_ext/port_xmit_data_64"),
    "node_infiniband_legacy_packets_received_total":
        ("fabricmon_ib_port_rcv_packets_total", "counters_ext/port_rcv_packets_64"),
    "node_infiniband_legacy_packets_transmitted_total":
        ("fabricmon_ib_port_xmit_packets_total", "counters_ext/port_xmit_packets_64"),
    "node_infiniband_legacy_multicast_packets_received_total":
        ("fabricmon_ib_multicast_rcv_packets_total", "counters_ext/port_multicast_rcv_packets"),
    "node_infiniband_legacy_multicast_packets_transmitted_total":
        ("fabricmon_ib_multicast_xmit_packets_total", "counters_ext/port_multicast_xmit_packets"),
    "node_infiniband_legacy_unicast_packets_received_total":
        ("fabricmon_ib_unicast_rcv_packets_total", "counters_ext/port_unicast_rcv_packets"),
    "node_infiniband_legacy_unicast_packets_transmitted_total":
        ("fabricmon_ib_unicast_xmit_packets_total", "counters_ext/port_unicast_xmit_packets"),
    # Port attributes.
    "node_infiniband_state_id": ("fabricmon_ib_port_state", "state"),
    "node_infiniband_physical_state_id": ("fabricmon_ib_port_phys_state", "phys_state"),
    "node_infiniband_rate_bytes_per_second": ("fabricmon_ib_port_rate_bytes_per_second", "rate"),
}
# node_infiniband_info{board_id,device,firmware_version,hca_type} = 1 is compared label by label
# with fabricmon_ib_device_info{device,board_id,fw_ver,hca_type}.
INFO_LABELS = {"board_id": "board_id", "firmware_version": "fw_ver", "hca_type": "hca_type"}
# Exported by node_exporter but deliberately not compared (name → why). Empty today: everything
# node_exporter 1.5's infiniband collector exports has a counterpart.
DELIBERATELY_UNMAPPED = {}


def scratch_dir():
    """/dev/shm unless TMPDIR is set: a tree is ~900 files, slow to create on a busy disk."""
    if "TMPDIR" not in os.environ and os.access("/dev/shm", os.W_OK | os.X_OK):
        return "/dev/shm"
    return None


def find_node_exporter():
    for name in ("prometheus-node-exporter", "node_exporter"):
        path = shutil.which(name)
        if path:
            return path
    return None


def scrape_node_exporter(binary, tree, deadline_s=15.0):
    """Starts node_exporter on `tree`, scrapes /metrics once, stops it. Returns the text."""
    last_error = None
    for _ in range(3):  # the free port can be taken between bind() and node_exporter's listen
        port = free_port()
        proc = subprocess.Popen(
            [binary, "--collector.disable-defaults", "--collector.infiniband",
             "--path.sysfs=" + tree, "--web.listen-address=127.0.0.1:%d" % port],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            end = time.monotonic() + deadline_s
            while time.monotonic() < end:
                if proc.poll() is not None:
                    last_error = proc.stderr.read().decode(errors="replace")[-2000:]
                    break
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port,
                                                timeout=5) as r:
                        return r.read().decode()
                except OSError as e:
                    last_error = str(e)
                    time.sleep(0.05)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            proc.stderr.close()
    raise RuntimeError("node_exporter did not serve /metrics: %s" % last_error)


# Only ib_sysfs: the other collectors read the host (netdev, ethtool, NVML) or a fabric.
AGENT_CONFIG = """collectors {
  ethtool { enabled: false }
  netdev { enabled: false }
  nvml { enabled: false }
  ib_fabric { enabled: false }
}
"""


def run_agent(agent, tree, config):
    result = subprocess.run([agent, "--once", "--sysfs_root=" + tree, "--config=" + config],
                            capture_output=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError("fabricmon-agent failed (%d): %s" %
                           (result.returncode, result.stderr.decode(errors="replace")))
    return result.stdout.decode()


class Comparison:
    def __init__(self, name):
        self.name = name
        self.compared = 0
        self.shadowed = []
        self.failures = []


def compare(tree_name, tree, ne_text, our_text, verbose):
    """Compares node_exporter's node_infiniband_* samples with ours. Returns a Comparison."""
    c = Comparison(tree_name)
    ours = {}
    for name, labels, value in parse_exposition(our_text):
        if name.startswith("fabricmon_ib_"):
            ours[(name, labels.get("device"), labels.get("port"))] = (labels, value)
    ne = [s for s in parse_exposition(ne_text) if s[0].startswith("node_infiniband_")]
    ib_dir = os.path.join(tree, "class", "infiniband")
    for name, labels, value in ne:
        device, port = labels.get("device"), labels.get("port")
        if name in DELIBERATELY_UNMAPPED:
            continue
        if name == "node_infiniband_info":
            key = ("fabricmon_ib_device_info", device, None)
            if key not in ours:
                c.failures.append("%s{device=%s}: no fabricmon_ib_device_info" % (name, device))
                continue
            c.compared += 1
            for ne_label, our_label in INFO_LABELS.items():
                if labels.get(ne_label, "") != ours[key][0].get(our_label, ""):
                    c.failures.append("%s{device=%s} %s=%r, ours %s=%r" % (
                        name, device, ne_label, labels.get(ne_label), our_label,
                        ours[key][0].get(our_label)))
            continue
        if name not in PORT_COUNTERS:
            c.failures.append("%s: not in the mapping table (update MAPPING or "
                              "DELIBERATELY_UNMAPPED)" % name)
            continue
        our_name, source = PORT_COUNTERS[name]
        port_dir = os.path.join(ib_dir, device, "ports", port)
        # One series per counter: when counters_ext/ has the same counter, ours comes from it
        # and node_exporter's counters/ copy (non-legacy name) is shadowed.
        if source.startswith("counters/"):
            base = source.split("/", 1)[1]
            ext_names = {"port_xmit_data": "port_xmit_data_64",
                         "port_rcv_data": "port_rcv_data_64",
                         "port_xmit_packets": "port_xmit_packets_64",
                         "port_rcv_packets": "port_rcv_packets_64",
                         "unicast_xmit_packets": "port_unicast_xmit_packets",
                         "unicast_rcv_packets": "port_unicast_rcv_packets",
                         "multicast_xmit_packets": "port_multicast_xmit_packets",
                         "multicast_rcv_packets": "port_multicast_rcv_packets"}
            ext = ext_names.get(base)
            if ext and os.path.exists(os.path.join(port_dir, "counters_ext", ext)):
                c.shadowed.append("%s{device=%s,port=%s}=%r (counters_ext/%s wins)" % (
                    name, device, port, value, ext))
                continue
        key = (our_name, device, port)
        if key not in ours:
            c.failures.append("%s{device=%s,port=%s}=%r: ours has no %s" % (
                name, device, port, value, our_name))
            continue
        c.compared += 1
        our_value = ours[key][1]
        if our_value != value:
            c.failures.append("%s{device=%s,port=%s}: node_exporter %r != ours %s %r (%s)" % (
                name, device, port, value, our_name, our_value, source))
        elif verbose:
            print("  ok %s{device=%s,port=%s} = %r" % (name, device, port, value))
    return c


def ne_success(ne_text):
    for name, labels, value in parse_exposition(ne_text):
        if name == "node_scrape_collector_success" and labels.get("collector") == "infiniband":
            return value == 1.0
    return False


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--agent", required=True)
    parser.add_argument("--fixtures",
                        default=os.environ.get("FABRICMON_SHARED_FIXTURES",
                                               os.path.join(SOURCE_DIR, "..", "shared", "fixtures")))
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()

    binary = find_node_exporter()
    if binary is None:
        print("SKIPPED: prometheus-node-exporter is not installed (apt-get install "
              "prometheus-node-exporter)")
        return SKIP

    failures = []
    with tempfile.TemporaryDirectory(prefix="fabricmon-oracle-", dir=scratch_dir()) as tmp:
        trees = []
        for name in ("procfs", "node_exporter", "gpud-h100"):
            trees.append(("fixture " + name,
                          os.path.join(args.fixtures, "sysfs", name, "sys"), True))
        full = os.path.join(tmp, "dgx-full")
        manifest = gen_sysfs_tree.generate(full, "dgx-h100", seed=1)
        # node_exporter 1.5 (procfs 0.8) fails the whole infiniband collector when one device
        # has no counters/ directory (irdma, efa: hw_counters only). It then exports nothing,
        # which the test asserts (so a fixed node_exporter turns the comparison on), and the
        # comparison runs on a copy without those devices.
        trees.append(("generated dgx-h100 (all devices)", full, False))
        reduced = os.path.join(tmp, "dgx-ib")
        shutil.copytree(full, reduced, symlinks=True)
        hw_only = [d["name"] for d in manifest["devices"] if d["kind"] in ("irdma", "efa")]
        for name in hw_only:
            os.unlink(os.path.join(reduced, "class", "infiniband", name))
        trees.append(("generated dgx-h100 without %s" % "/".join(hw_only), reduced, True))
        mutated = os.path.join(tmp, "dgx-ib-mutated")
        shutil.copytree(reduced, mutated, symlinks=True)
        gen_sysfs_tree.mutate(mutated, steps=5)
        trees.append(("generated dgx-h100 without hw-only devices, mutated x5", mutated, True))

        config = os.path.join(tmp, "agent.textproto")
        with open(config, "w") as f:
            f.write(AGENT_CONFIG)
        total = 0
        for tree_name, tree, expect_success in trees:
            ne_text = scrape_node_exporter(binary, tree)
            our_text = run_agent(args.agent, tree, config)
            ok = ne_success(ne_text)
            if not ok:
                ours_devices = {l.get("device") for n, l, _ in parse_exposition(our_text)
                                if n == "fabricmon_ib_device_info"}
                if expect_success:
                    failures.append("%s: node_exporter's infiniband collector failed" %
                                    tree_name)
                elif not ours_devices:
                    failures.append("%s: neither exporter collected anything" % tree_name)
                else:
                    print("%-58s node_exporter collector failed (known procfs 0.8 limitation); "
                          "ours: %d devices" % (tree_name, len(ours_devices)))
                    continue
            c = compare(tree_name, tree, ne_text, our_text, args.verbose)
            total += c.compared
            print("%-58s compared %4d values, %d shadowed, %d mismatches" % (
                tree_name, c.compared, len(c.shadowed), len(c.failures)))
            for s in c.shadowed:
                print("    shadowed: " + s)
            if expect_success and c.compared == 0:
                failures.append("%s: nothing compared" % tree_name)
            failures.extend("%s: %s" % (tree_name, f) for f in c.failures)
        print("total values compared: %d" % total)

    if failures:
        print("\nFAILED: %d mismatches" % len(failures))
        for f in failures:
            print("  " + f)
        return 1
    print("PASSED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
