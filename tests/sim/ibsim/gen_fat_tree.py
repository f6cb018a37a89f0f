#!/usr/bin/env python3
"""Writes a 2-tier fat tree in ibsim's net format (the ibnetdiscover-like text ibsim -s reads).

    gen_fat_tree.py --spines 4 --leaves 8 --hcas 4 [--width 4] > fat.net

Leaf L has its HCAs on ports 1..H and one uplink to every spine on ports H+1..H+S; spine S has
leaf L on port L. Node ids become NodeDescriptions in ibsim: "spine01", "leaf01",
"node0001". The first record is node0001, the node clients attach to unless SIM_HOST says
otherwise (an agent on a compute node, as in production).

ibsim's limits (ibsim 0.10 banner): 256 switches, 2048 nodes, 13312 ports in all, switch port
numbers up to 255. The script refuses fabrics beyond them. Python 3 standard library only.
"""

import argparse
import sys

MAX_SWITCHES = 256
MAX_NODES = 2048
MAX_PORTS = 13312


def build(spines, leaves, hcas, width):
    lines = ["# 2-tier fat tree: %d spines x %d leaves x %d HCAs per leaf (gen_fat_tree.py)"
             % (spines, leaves, hcas), ""]
    w = " w=%d" % width if width else ""

    def hca(leaf, i):
        return "node%04d" % ((leaf - 1) * hcas + i)

    hca_records = []
    for leaf in range(1, leaves + 1):
        for i in range(1, hcas + 1):
            hca_records.append(['Hca\t1 "%s"' % hca(leaf, i),
                                '[1]\t"leaf%02d"[%d]%s' % (leaf, i, w), ""])
    # First record: the attach point.
    lines += hca_records[0]
    for leaf in range(1, leaves + 1):
        lines.append('Switch\t%d "leaf%02d"' % (hcas + spines, leaf))
        for i in range(1, hcas + 1):
            lines.append('[%d]\t"%s"[1]%s' % (i, hca(leaf, i), w))
        for s in range(1, spines + 1):
            lines.append('[%d]\t"spine%02d"[%d]%s' % (hcas + s, s, leaf, w))
        lines.append("")
    for s in range(1, spines + 1):
        lines.append('Switch\t%d "spine%02d"' % (leaves, s))
        for leaf in range(1, leaves + 1):
            lines.append('[%d]\t"leaf%02d"[%d]%s' % (leaf, leaf, hcas + s, w))
        lines.append("")
    for record in hca_records[1:]:
        lines += record
    return "\n".join(lines) + "\n"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spines", type=int, required=True)
    parser.add_argument("--leaves", type=int, required=True)
    parser.add_argument("--hcas", type=int, required=True, help="HCAs per leaf")
    parser.add_argument("--width", type=int, default=4, choices=[0, 1, 4, 8, 12],
                        help="link width in lanes (ibsim w=); 0 = ibsim's default")
    args = parser.parse_args(argv)
    if args.spines < 1 or args.leaves < 1 or args.hcas < 0:
        parser.error("need at least one spine and one leaf")
    switches = args.spines + args.leaves
    nodes = switches + args.leaves * args.hcas
    # Every node has a port 0 in ibsim's port table.
    ports = (args.leaves * (args.hcas + args.spines + 1) + args.spines * (args.leaves + 1)
             + args.leaves * args.hcas * 2)
    if switches > MAX_SWITCHES or nodes > MAX_NODES or ports > MAX_PORTS:
        parser.error("beyond ibsim's limits: %d switches (max %d), %d nodes (max %d), "
                     "%d ports (max %d)" % (switches, MAX_SWITCHES, nodes, MAX_NODES, ports,
                                            MAX_PORTS))
    if args.hcas + args.spines > 255 or args.leaves > 255:
        parser.error("a switch cannot have more than 255 ports")
    sys.stdout.write(build(args.spines, args.leaves, args.hcas, args.width))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
