"""Command line of the fabric simulator (run from tests/sim: `python3 -m fabric_sim ...`).

  list                                      the scenarios and what each must find
  generate --out DIR [--nodes N] [--fabric ib|roce] [--topology fat-tree|rail] [--ticks K]
                                            write a cluster's files (and advance K ticks)
  run --build-dir B [--scenario NAME ...] [--mode auto|sysfs|ibsim] [--keep] [--report F]
                                            play scenarios against the real daemons, print tables
  demo --build-dir B [--nodes N] [--interactive|--no-interactive] [--no-ibsim]
                                            the README's demo (deploy/run-demo.sh calls this)
  selftest [--scenario-list "a b c"]        checks of the generated files (no daemons)
  campaign --build-dir B [--seed N] [--faults N] [--flavour ib|roce|both|straggler] [--slice]
           [--kinds k1,k2] [--concurrency K] [--json F] [--keep] [--save-recording DIR]
                                            random clusters, background traffic and N injected
                                            faults against the real daemons, scored per kind
                                            (campaign.py; --slice: each fault kind once)

Exit status of run: 0 all passed, 1 a scenario failed, 77 (ctest skip) when a single scenario
was asked for in ibsim mode and ibsim or the ib_fabric collector is not available.
"""

import argparse
import os
import sys
import time

from . import cluster as cluster_mod
from . import runner
from . import scenarios
from . import traffic


def cmd_list(args):
    for s in scenarios.ALL:
        print("%-20s %-4s %s" % (s.name, s.fabric, "(prefers ibsim)" if s.prefers_ibsim else ""))
        print("    %s" % s.summary)
    return 0


def cmd_generate(args):
    c = cluster_mod.Cluster.build(args.nodes, fabric=args.fabric, topology=args.topology,
                                  spines=args.spines, rails=args.rails)
    initial = c.generate(args.out, seed=args.seed)
    sim = traffic.Simulation(c, args.out, initial, seed=args.seed)
    sim.tick(time.time())
    for _ in range(args.ticks):
        time.sleep(0.2)
        sim.tick(time.time())
    sim.close()
    print("%s: %s" % (args.out, c.describe()))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="fabric_sim", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list")
    g = sub.add_parser("generate")
    g.add_argument("--out", required=True)
    g.add_argument("--nodes", type=int, default=16)
    g.add_argument("--fabric", choices=["ib", "roce"], default="ib")
    g.add_argument("--topology", choices=["fat-tree", "rail"], default="fat-tree")
    g.add_argument("--spines", type=int, default=2)
    g.add_argument("--rails", type=int, default=4)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--ticks", type=int, default=0)
    r = sub.add_parser("run")
    r.add_argument("--build-dir", required=True)
    r.add_argument("--scenario", action="append")
    r.add_argument("--mode", choices=["auto", "sysfs", "ibsim"], default="auto")
    r.add_argument("--keep", action="store_true", help="keep the temporary directory")
    r.add_argument("--report", help="write the (last) scenario's result as JSON")
    r.add_argument("--replay", action="store_true",
                   help="record the run (aggregator recording) and check that `fabricmon replay` "
                        "of it finds what the live aggregator found")
    r.add_argument("--save-recording", metavar="DIR",
                   help="with --replay: keep a passed run's recording, configuration and "
                        "expected replay timeline in DIR/<scenario>/ (tests/replay fixtures)")
    d = sub.add_parser("demo")
    d.add_argument("--build-dir", required=True)
    d.add_argument("--nodes", type=int, default=16)
    d.add_argument("--interactive", dest="interactive", action="store_true", default=None)
    d.add_argument("--no-interactive", dest="interactive", action="store_false")
    d.add_argument("--no-ibsim", action="store_true")
    d.add_argument("--no-prometheus", action="store_true")
    d.add_argument("--state-file", help="append 'dir PATH' / 'pgid N' lines for a wrapper's "
                   "cleanup (deploy/run-demo.sh)")
    t = sub.add_parser("selftest")
    t.add_argument("--scenario-list", help="scenario names registered in CMake (checked)")
    k = sub.add_parser("campaign")
    k.add_argument("--build-dir", required=True)
    k.add_argument("--seed", type=int, default=1)
    k.add_argument("--faults", type=int, default=20)
    k.add_argument("--flavour", choices=["ib", "roce", "both", "straggler"], default="both")
    k.add_argument("--slice", action="store_true",
                   help="each fault kind of the flavour once (overrides --faults)")
    k.add_argument("--kinds", help="comma-separated fault kinds (campaign.IB_KINDS/ROCE_KINDS/"
                   "STRAGGLER_FLAVOUR_KINDS)")
    k.add_argument("--concurrency", type=int, default=3)
    k.add_argument("--json", help="write the results (rows, failures, faults) as JSON")
    k.add_argument("--keep", action="store_true", help="keep the temporary directory")
    k.add_argument("--save-recording", metavar="DIR",
                   help="record the campaign and keep it, with every fault's ground truth, as a "
                        "replay fixture in DIR/campaign_<flavour>/ when its replay scores clean "
                        "(tests/replay; not the straggler flavour)")
    args = parser.parse_args(argv)
    if args.command == "list":
        return cmd_list(args)
    if args.command == "generate":
        return cmd_generate(args)
    if args.command == "run":
        return runner.main_run(args)
    if args.command == "selftest":
        from . import selftest
        return selftest.main(args)
    if args.command == "campaign":
        from . import campaign
        return campaign.main(args)
    if args.command == "demo":
        from . import demo
        return demo.main(args)
    return 2


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main())
