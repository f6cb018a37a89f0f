"""fabric_sim: a simulated GPU cluster for fabricmon's scenario tests and demo.

Modules: cluster (topology and generated files), files (how files are written while agents read
them), traffic (the counter model advanced every tick), scenarios (faults and what must be found),
ibsim (the InfiniBand fabric simulator and opensm), runner (processes, playback, checks),
campaign (random clusters, background traffic and hundreds of scored faults). Run
`python3 -m fabric_sim --help` from tests/sim. Python 3 standard library only (and
tests/testing/fabricmon_testing.py, the helpers fabricmon's Python tests share).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "testing"))
