#!/usr/bin/env python3
"""Self-test of tests/sim/gen_sysfs_tree.py: the trees the ib_sysfs tests rely on look like the
kernel's (newline-terminated values, class symlinks, device/driver links, widths respected) and
mutate() keeps the overflow semantics (PMA counters clamp, mlx5 q-counters wrap)."""

import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "sim"))
import gen_sysfs_tree as gen  # noqa: E402


def scratch_dir():
    """/dev/shm unless TMPDIR is set: a tree is ~900 files, slow to create on a busy disk."""
    if "TMPDIR" not in os.environ and os.access("/dev/shm", os.W_OK | os.X_OK):
        return "/dev/shm"
    return None


def read(path):
    with open(path) as f:
        return f.read()


class GenSysfsTreeTest(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="fabricmon-gen-test-",
                                                dir=scratch_dir())
        self.tmp = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def generate(self, name, profile="dgx-h100", seed=1):
        out = os.path.join(self.tmp, name)
        return out, gen.generate(out, profile, seed)

    def test_dgx_h100_layout(self):
        out, manifest = self.generate("a")
        names = sorted(d["name"] for d in manifest["devices"])
        self.assertEqual(sorted(os.listdir(os.path.join(out, "class", "infiniband"))), names)
        kinds = [d["kind"] for d in manifest["devices"]]
        self.assertEqual(kinds.count("ib"), 9)  # 8 compute HCAs + the restricted PF
        self.assertEqual(kinds.count("roce"), 1)
        self.assertIn("ibp12s0", names)
        for d in manifest["devices"]:
            link = os.path.join(out, "class", "infiniband", d["name"])
            self.assertTrue(os.path.islink(link))
            driver = os.path.realpath(os.path.join(link, "device", "driver"))
            self.assertEqual(os.path.basename(driver), d["driver"])
            port = os.path.join(link, "ports", "1")
            has_pma = os.path.isdir(os.path.join(port, "counters"))
            self.assertEqual(has_pma, d["kind"] in ("ib", "roce"), d["name"])
            if has_pma:
                self.assertEqual(len(os.listdir(os.path.join(port, "counters"))), 21)
                self.assertIn("unicast_xmit_packets", os.listdir(os.path.join(port, "counters")))
            self.assertTrue(os.path.isdir(os.path.join(port, "hw_counters")))
        ib_rates = {read(os.path.join(out, "class/infiniband", d["name"], "ports/1/rate"))
                    for d in manifest["devices"] if d["kind"] == "ib"}
        self.assertEqual(ib_rates, {"400 Gb/sec (4X NDR)\n"})
        self.assertEqual(read(os.path.join(out, "class/infiniband/mlx5_8/ports/1/link_layer")),
                         "Ethernet\n")
        self.assertEqual(read(os.path.join(out, "class/infiniband/mlx5_8/ports/1/gid_attrs/ndevs/0")),
                         "enp170s0f0np0\n")
        self.assertEqual(read(os.path.join(out, "class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0")), "")
        self.assertEqual(sorted(os.listdir(os.path.join(out, "class/net/ib3/device/infiniband"))),
                         ["ibp12s0"])
        self.assertEqual(read(os.path.join(out, "class/infiniband/mlx5_0/ports/1/lid"))[:2], "0x")
        self.assertEqual(manifest["einval_paths"],
                         ["infiniband/mlx5_9/ports/1/counters/",
                          "infiniband/mlx5_9/ports/1/hw_counters/"])

    def test_values_end_with_newline_and_fit_their_width(self):
        out, manifest = self.generate("a")
        for path, width, _ in gen.counter_files(out, manifest):
            text = read(path)
            self.assertTrue(text.endswith("\n"), path)
            self.assertLess(int(text), 1 << width, path)
        sat = os.path.join(out, "class/infiniband/mlx5_1/ports/1/counters")
        self.assertEqual(read(os.path.join(sat, "link_downed")), "255\n")
        self.assertEqual(read(os.path.join(sat, "symbol_error")), "65535\n")
        self.assertEqual(read(os.path.join(sat, "port_xmit_wait")), "4294967295\n")

    def test_deterministic_per_seed(self):
        a, _ = self.generate("a", seed=5)
        b, _ = self.generate("b", seed=5)
        c, _ = self.generate("c", seed=6)
        rel = "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data"
        self.assertEqual(read(os.path.join(a, rel)), read(os.path.join(b, rel)))
        self.assertNotEqual(read(os.path.join(a, rel)), read(os.path.join(c, rel)))

    def test_mutate_clamps_pma_and_wraps_q_counters(self):
        out, manifest = self.generate("a", profile="minimal")
        port = os.path.join(out, "class/infiniband/mlx5_0/ports/1")
        # Plant values at the edge, through the manifest (mutate() works from it).
        m = gen.load_manifest(out)
        values = m["devices"][0]["values"]["1"]
        values["counters/port_xmit_wait"] = (1 << 32) - 2
        values["counters/link_downed"] = 254
        values["hw_counters/out_of_buffer"] = (1 << 32) - 1
        gen._save_manifest(out, m)
        inode = os.stat(os.path.join(port, "counters/port_xmit_data")).st_ino
        before = int(read(os.path.join(port, "counters/port_xmit_data")))
        self.assertGreater(gen.mutate(out, steps=50), 0)
        self.assertGreater(int(read(os.path.join(port, "counters/port_xmit_data"))), before)
        self.assertEqual(read(os.path.join(port, "counters/port_xmit_wait")), "4294967295\n")
        self.assertEqual(read(os.path.join(port, "counters/link_downed")), "255\n")
        # 2^32 - 1 plus 50 increments below 10^4 each: wrapped to a small value.
        self.assertLess(int(read(os.path.join(port, "hw_counters/out_of_buffer"))), 10**6)
        # Rewritten in place: open descriptors see the new values, as with sysfs.
        self.assertEqual(os.stat(os.path.join(port, "counters/port_xmit_data")).st_ino, inode)

    def test_refuses_to_overwrite_a_tree(self):
        out, _ = self.generate("a", profile="minimal")
        with self.assertRaises(ValueError):
            gen.generate(out, "minimal", 1)
        with self.assertRaises(ValueError):
            gen.generate(os.path.join(self.tmp, "b"), "no-such-profile", 1)


if __name__ == "__main__":
    unittest.main()
