"""The real fabricmon-agent binary on captured and generated trees: the capture rule and --doctor.

Capture rule: with a sysfs/procfs root other than the live one, collectors that would read this
host instead of the tree (nvml on the loader path, rdma_qp, ethtool's ioctl, ib_fabric) are off
unless enabled explicitly; one log line names them; fabricmon_collector_turned_off says so.

--doctor: one line per collector and the exit status (0 all enabled collectors work, 1 not,
2 usage), on the real captures in ../shared/fixtures, on generated trees (tests/sim/
gen_sysfs_tree.py, a firmware-restricted HCA through the einval shim), with a missing NVML
library, and inside a network namespace with a veth pair for the ethtool ioctl (root and
iproute2; that case is skipped without them).

Usage: agent_capture_doctor_test.py --agent PATH --einval_preload PATH [--nvml_standin PATH]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "sim"))
import gen_sysfs_tree  # noqa: E402

FIXTURES = os.path.abspath(os.path.join(SOURCE_DIR, "..", "shared", "fixtures"))
CAPTURE = os.path.join(FIXTURES, "sysfs", "gpud-h100", "sys")
PROCFS = os.path.join(SOURCE_DIR, "tests", "unit", "collectors", "netdev", "testdata", "proc")
ARGS = None

# Families only the host-reading collectors emit (their own series, not the health ones).
HOST_FAMILIES = ("fabricmon_gpu_", "fabricmon_nvlink_", "fabricmon_rdma_qp", "fabricmon_rdma_process",
                 "fabricmon_ethtool_", "fabricmon_roce_")


def run_agent(*args, env=None, prefix=()):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(list(prefix) + [ARGS.agent] + list(args), capture_output=True, text=True,
                          env=full_env, timeout=120)


def write(directory, name, text):
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def doctor_lines(stdout):
    """{collector: line} of a --doctor output (the summary line under "doctor")."""
    lines = {}
    for line in stdout.splitlines():
        name, _, _ = line.partition(":")
        lines[name] = line
    return lines


def series_of(text, collector):
    return [line for line in text.splitlines() if f'collector="{collector}"' in line]


class CaptureRuleTest(unittest.TestCase):
    def setUp(self):
        if not os.path.isdir(CAPTURE):
            self.skipTest(f"{CAPTURE} missing (../shared/fixtures)")

    def test_capture_turns_off_host_collectors_with_one_log_line(self):
        result = run_agent("--once", f"--sysfs_root={CAPTURE}")
        self.assertEqual(result.returncode, 0, result.stderr)
        out = result.stdout
        for family in HOST_FAMILIES:
            self.assertNotIn("\n" + family, out, family)
        for name in ("ethtool", "rdma_qp", "nvml"):
            self.assertIn(
                f'fabricmon_collector_turned_off{{collector="{name}",reason="capture"}} 1', out)
            self.assertNotIn(f'fabricmon_collector_success{{collector="{name}"}}', out)
        # What reads the capture still runs.
        self.assertIn('fabricmon_collector_success{collector="ib_sysfs"} 1', out)
        self.assertNotIn('collector_turned_off{collector="ib_sysfs"', out)
        logged = [line for line in result.stderr.splitlines() if "turned off" in line]
        self.assertEqual(len(logged), 1, result.stderr)
        for name in ("ethtool (", "rdma_qp (", "nvml ("):
            self.assertIn(name, logged[0])
        self.assertIn(CAPTURE, logged[0])

    def test_procfs_root_alone_is_a_capture(self):
        result = run_agent("--once", f"--procfs_root={PROCFS}")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn('fabricmon_collector_turned_off{collector="rdma_qp",reason="capture"} 1',
                      result.stdout)

    def test_live_roots_turn_nothing_off(self):
        result = run_agent("--once", "--sysfs_root=/sys/", "--procfs_root=/proc")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("fabricmon_collector_turned_off", result.stdout)
        self.assertIn('fabricmon_collector_success{collector="rdma_qp"}', result.stdout)

    def test_explicit_enable_keeps_a_collector_on(self):
        with tempfile.TemporaryDirectory() as tmp:
            config = write(tmp, "agent.textproto", "collectors { rdma_qp { enabled: true } }\n")
            result = run_agent("--once", f"--sysfs_root={CAPTURE}", f"--config={config}",
                               "--enable_collectors=nvml")
        self.assertEqual(result.returncode, 0, result.stderr)
        for name in ("rdma_qp", "nvml"):
            self.assertNotIn(f'collector_turned_off{{collector="{name}"', result.stdout)
            self.assertIn(f'fabricmon_collector_success{{collector="{name}"}}', result.stdout)
        self.assertIn('fabricmon_collector_turned_off{collector="ethtool",reason="capture"} 1',
                      result.stdout)

    def test_sources_under_the_capture_stay_on(self):
        # ethtool with a statistics directory and nvml with a library path read no host source.
        if not ARGS.nvml_standin:
            self.skipTest("no NVML stand-in built")
        with tempfile.TemporaryDirectory() as tmp:
            state = write(tmp, "nvml.state", 'gpu 0 uuid=GPU-0 pci=00000000:18:00.0 name="H100"\n')
            config = write(tmp, "agent.textproto", f"""collectors {{
  ethtool {{ stats_dir: "{tmp}/ethtool" }}
  nvml {{ library: "{ARGS.nvml_standin}" }}
}}
""")
            result = run_agent("--once", f"--sysfs_root={CAPTURE}", f"--config={config}",
                               env={"FABRICMON_NVML_STANDIN_STATE": state})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn('fabricmon_collector_success{collector="nvml"} 1', result.stdout)
        self.assertIn('fabricmon_gpu_info{', result.stdout)
        self.assertNotIn('collector_turned_off{collector="ethtool"', result.stdout)
        self.assertIn('collector_turned_off{collector="rdma_qp"', result.stdout)

    def test_unknown_collector_to_enable_is_a_usage_error(self):
        result = run_agent("--once", "--enable_collectors=nosuch")
        self.assertEqual(result.returncode, 2)
        self.assertIn("nosuch", result.stderr)


class DoctorTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fabricmon-doctor-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_capture_every_enabled_collector_works(self):
        if not os.path.isdir(CAPTURE):
            self.skipTest(f"{CAPTURE} missing")
        result = run_agent("--doctor", f"--sysfs_root={CAPTURE}")
        lines = doctor_lines(result.stdout)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertRegex(lines["ib_sysfs"], r"^ib_sysfs: ok: 9 RDMA device\(s\), 9 port\(s\)")
        self.assertRegex(lines["netdev"], r"^netdev: ok: ")
        for name in ("ethtool", "rdma_qp", "nvml"):
            self.assertRegex(lines[name], rf"^{name}: off: the agent reads a capture")
        self.assertEqual(lines["ib_fabric"], "ib_fabric: disabled in the config")
        self.assertEqual(lines["doctor"], "doctor: 2 of 2 enabled collector(s) work")

    def test_restricted_function_fails_and_names_the_exclude_option(self):
        tree = os.path.join(self.tmp, "sys")
        gen_sysfs_tree.generate(tree, profile="dgx-h100", seed=1)
        manifest = gen_sysfs_tree.load_manifest(tree)
        restricted = sorted(d["name"] for d in manifest["devices"] if d["restricted"])
        self.assertTrue(restricted)
        env = {"LD_PRELOAD": ARGS.einval_preload,
               "FABRICMON_EINVAL_PATHS": gen_sysfs_tree.einval_paths(manifest)}
        result = run_agent("--doctor", f"--sysfs_root={tree}", env=env)
        lines = doctor_lines(result.stdout)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("ib_sysfs: FAIL: counters of " + ", ".join(restricted), lines["ib_sysfs"])
        self.assertIn("firmware-restricted PCI function", lines["ib_sysfs"])
        exclude = "|".join(restricted)
        self.assertIn(f'fix: leave them out: ib_sysfs {{ devices {{ exclude: "{exclude}" }} }}',
                      lines["ib_sysfs"])
        # The fix it names works.
        config = write(self.tmp, "fixed.textproto",
                       f'collectors {{ ib_sysfs {{ devices {{ exclude: "{exclude}" }} }} }}\n')
        result = run_agent("--doctor", f"--sysfs_root={tree}", f"--config={config}", env=env)
        self.assertEqual(result.returncode, 0, result.stdout)
        self.assertRegex(doctor_lines(result.stdout)["ib_sysfs"], r"^ib_sysfs: ok: ")

    def test_no_rdma_devices(self):
        tree = os.path.join(self.tmp, "empty")
        os.makedirs(os.path.join(tree, "class", "net"))
        config = write(self.tmp, "a.textproto", "collectors { netdev { enabled: false } }\n")
        result = run_agent("--doctor", f"--sysfs_root={tree}", f"--config={config}")
        lines = doctor_lines(result.stdout)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn("ib_sysfs: FAIL: no RDMA devices", lines["ib_sysfs"])
        self.assertIn("ib_sysfs { enabled: false }", lines["ib_sysfs"])

    def test_missing_nvml_library_fails_with_the_path_tried(self):
        missing = os.path.join(self.tmp, "nowhere", "libnvidia-ml.so.1")
        config = write(self.tmp, "a.textproto", f"""collectors {{
  ib_sysfs {{ enabled: false }} ethtool {{ enabled: false }} netdev {{ enabled: false }}
  rdma_qp {{ enabled: false }} nvml {{ library: "{missing}" }}
}}
""")
        result = run_agent("--doctor", f"--config={config}")
        lines = doctor_lines(result.stdout)
        self.assertEqual(result.returncode, 1, result.stdout)
        self.assertIn(f"nvml: FAIL: cannot load {missing}", lines["nvml"])
        self.assertIn(f"tried {missing} only", lines["nvml"])
        self.assertIn("fix: install the NVIDIA driver", lines["nvml"])
        self.assertEqual(lines["doctor"], "doctor: 0 of 1 enabled collector(s) work")

    def test_nvml_standin_works(self):
        if not ARGS.nvml_standin:
            self.skipTest("no NVML stand-in built")
        state = write(self.tmp, "nvml.state", 'gpu 0 uuid=GPU-0 pci=00000000:18:00.0 name="H100"\n'
                                              "link 0 0 active=1\n")
        config = write(self.tmp, "a.textproto", f"""collectors {{
  ib_sysfs {{ enabled: false }} ethtool {{ enabled: false }} netdev {{ enabled: false }}
  rdma_qp {{ enabled: false }} nvml {{ library: "{ARGS.nvml_standin}" }}
}}
""")
        result = run_agent("--doctor", f"--config={config}",
                           env={"FABRICMON_NVML_STANDIN_STATE": state})
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertRegex(doctor_lines(result.stdout)["nvml"], r"^nvml: ok: 1 GPU\(s\) through NVML")

    def test_bad_config_is_a_usage_error(self):
        config = write(self.tmp, "a.textproto", "collectors { no_such_field: 1 }\n")
        self.assertEqual(run_agent("--doctor", f"--config={config}").returncode, 2)


class DoctorNetnsTest(unittest.TestCase):
    """ethtool's real ioctl on a veth pair and on lo (no ethtool statistics: EOPNOTSUPP)."""

    def setUp(self):
        if os.geteuid() != 0 or shutil.which("ip") is None:
            self.skipTest("needs root and iproute2 for a network namespace")
        self.ns = f"fmdoctor-{os.getpid()}"
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        if subprocess.run(["ip", "netns", "add", self.ns], capture_output=True).returncode != 0:
            self.skipTest("cannot create a network namespace")
        self.tmp = tempfile.mkdtemp(prefix="fabricmon-doctor-netns-")
        ip = ["ip", "-n", self.ns]
        subprocess.run(ip + ["link", "add", "fmda", "type", "veth", "peer", "name", "fmdb"],
                       check=True)
        for dev in ("fmda", "fmdb", "lo"):
            subprocess.run(ip + ["link", "set", dev, "up"], check=True)
        # A sysfs tree that lists fmda and lo as physical netdevs (a `device` entry each): the
        # ioctl then asks the namespace's real devices.
        for dev in ("fmda", "lo"):
            os.makedirs(os.path.join(self.tmp, "sys", "class", "net", dev, "device"))

    def tearDown(self):
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def doctor(self, extra):
        config = write(self.tmp, "agent.textproto", f"""collectors {{
  ib_sysfs {{ enabled: false }}
  ethtool {{ enabled: true sysfs_root: "{self.tmp}/sys" all_physical_netdevs: true {extra} }}
}}
""")
        return run_agent("--doctor", f"--config={config}", prefix=("ip", "netns", "exec", self.ns))

    def test_ethtool_refusal_names_the_netdev_and_the_exclude(self):
        result = self.doctor("")
        lines = doctor_lines(result.stdout)
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertIn("ethtool: FAIL: ethtool ioctl refused on lo (EOPNOTSUPP", lines["ethtool"])
        self.assertIn("reads ethtool statistics of fmda", lines["ethtool"])
        self.assertIn('fix: leave them out: ethtool { netdevs { exclude: "lo" } }',
                      lines["ethtool"])
        # netdev reads the namespace's live /sys and /proc; nvml and rdma_qp are off (capture).
        self.assertRegex(lines["netdev"], r"^netdev: ok: ")
        self.assertRegex(lines["rdma_qp"], r"^rdma_qp: off: ")
        result = self.doctor('netdevs { exclude: "lo" }')
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertRegex(doctor_lines(result.stdout)["ethtool"],
                         r"^ethtool: ok: ethtool statistics of fmda, \d+ series")


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--agent", required=True)
    parser.add_argument("--einval_preload", required=True)
    parser.add_argument("--nvml_standin", default="")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
