"""Command-line options and time caps shared by the GPU benchmark scripts, read before Numba
loads: ``--sim`` must switch on the CUDA simulator (and a cache directory of its own) before
anything imports numba.cuda.

Time caps: ``bench/gpu_check.sh`` gives each step a ``timeout``; the scripts keep inside it by
themselves (``--budget``) so that they end with what they measured rather than being killed.
``time_cap`` raises ``StepTimeout`` in the main thread when a cap runs out (SIGALRM: it lands
between Python bytecodes, so a long call into C returns first); ``on_termination`` turns the
SIGTERM/SIGINT of a shell ``timeout`` into ``Interrupted``. Both are ``BaseException``s, so
an ``except Exception`` inside a library does not swallow them."""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import tempfile
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_gpu_args(description: str,
                   add: Callable[[argparse.ArgumentParser], None] = lambda p: None):
    """Parse ``--out``/``--sim``/``--quick``/``--budget`` plus the script's own options
    (``add``); with ``--sim``, run under the CUDA simulator with tiny sizes. Puts the checkout
    on ``sys.path``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", default=os.path.join(HERE, "gpu_results.md"))
    parser.add_argument("--sim", action="store_true", help="tiny sizes under the CUDA simulator")
    parser.add_argument("--quick", action="store_true", help="fewer repeats, shorter caps")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds this script may take in all (it stops measuring and "
                             "reports what it has before then)")
    add(parser)
    args = parser.parse_args()
    if args.sim:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        os.environ["JITGRAPH_CACHE_DIR"] = os.environ.get("JITGRAPH_CACHE_DIR") or \
            os.path.join(tempfile.gettempdir(), "jitgraph-gpu-bench-sim")
        # the simulator's block barrier waits for every thread to take the GIL: a short
        # switch interval makes reductions several times faster (as in tests_cuda/conftest.py)
        sys.setswitchinterval(5e-4)
    sys.path.insert(0, os.path.dirname(HERE))
    return args


class StepTimeout(BaseException):
    """A ``time_cap`` ran out."""


class Interrupted(BaseException):
    """SIGTERM or SIGINT (the shell's ``timeout``, or Ctrl-C)."""


def on_termination() -> None:
    """Raise ``Interrupted`` in the main thread on SIGTERM/SIGINT."""
    def handler(signum, frame):
        raise Interrupted(signal.Signals(signum).name)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


@contextlib.contextmanager
def time_cap(seconds: float):
    """Raise ``StepTimeout`` in the main thread once ``seconds`` have passed in the block."""
    def handler(signum, frame):
        raise StepTimeout(f"{seconds:.0f} s")
    old = signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, max(float(seconds), 0.01))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
