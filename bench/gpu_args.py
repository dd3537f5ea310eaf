"""Command-line options shared by the GPU benchmark scripts, read before Numba loads: ``--sim``
must switch on the CUDA simulator (and a cache directory of its own) before anything imports
numba.cuda."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_gpu_args(description: str,
                   add: Callable[[argparse.ArgumentParser], None] = lambda p: None):
    """Parse ``--out``/``--sim`` plus the script's own options (``add``); with ``--sim``, run
    under the CUDA simulator with tiny sizes. Puts the checkout on ``sys.path``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", default=os.path.join(HERE, "gpu_results.md"))
    parser.add_argument("--sim", action="store_true", help="tiny sizes under the CUDA simulator")
    add(parser)
    args = parser.parse_args()
    if args.sim:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        os.environ["JITGRAPH_CACHE_DIR"] = os.environ.get("JITGRAPH_CACHE_DIR") or \
            os.path.join("/tmp", "jitgraph-gpu-bench-sim")
    sys.path.insert(0, os.path.dirname(HERE))
    return args
