"""Cold start of a real program: the digits example run as a user would, in new processes.

    python bench/cold_start.py [--quick] [--json out.json]

1. "fresh machine": empty jitgraph cache and empty Numba cache (so jitgraph's own helper
   kernels compile too), 2. "new cache": empty jitgraph cache, helper kernels already compiled,
3. "warm": everything cached; then 1 and 2 again with ``JITGRAPH_COMPILE_WORKERS=0``. Each
is the wall time of the whole process (``python examples/train_digits.py``), median of the
repeats (``--repeats``, default 5); the ratios to the warm run are what the compile-latency
targets speak of. Each repeat runs its five processes back to back, so besides the ratio of
the medians the table gives the median of each repeat's own ratio (fresh / warm of the same
repeat), which a machine whose speed drifts over seconds moves less.
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy loads)

import os
import subprocess
import sys
import time

import numpy as np

from common import fmt_time, print_kv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "train_digits.py")


def run_example(jit_cache: str, numba_cache: str | None, extra: list[str],
                workers: str | None = None) -> float:
    env = dict(os.environ, JITGRAPH_CACHE_DIR=jit_cache, BENCH_KEEP_CACHES="1")
    if workers is not None:
        env["JITGRAPH_COMPILE_WORKERS"] = workers
    if numba_cache is not None:
        env["NUMBA_CACHE_DIR"] = numba_cache
    else:
        env.pop("NUMBA_CACHE_DIR", None)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, EXAMPLE, *extra], env=env, capture_output=True,
                       text=True, timeout=900)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"example failed: {(p.stderr or p.stdout).strip()[-300:]}")
    return wall


def run(args) -> dict:
    extra = ["--smoke"] if args.quick else []
    n = 1 if args.quick else args.repeats
    fresh, new_cache, warm, fresh0, new_cache0 = [], [], [], [], []
    for _ in range(n):
        numba_dir = common.fresh_dir("cold-numba")
        fresh.append(run_example(common.fresh_dir("cold-jit"), numba_dir, extra))
        jit_dir = common.fresh_dir("cold-jit")
        new_cache.append(run_example(jit_dir, numba_dir, extra))
        warm.append(run_example(jit_dir, numba_dir, extra))
        # the same without compile workers (JITGRAPH_COMPILE_WORKERS=0)
        fresh0.append(run_example(common.fresh_dir("cold-jit"), common.fresh_dir("cold-numba"),
                                  extra, workers="0"))
        new_cache0.append(run_example(common.fresh_dir("cold-jit"), numba_dir, extra, "0"))
    runs = {"fresh machine": fresh, "new jitgraph cache": new_cache, "warm": warm,
            "fresh machine, no compile workers": fresh0,
            "new jitgraph cache, no compile workers": new_cache0}
    med = {k: float(np.median(v)) for k, v in runs.items()}
    paired = {k: float(np.median([t / w for t, w in zip(v, warm)])) for k, v in runs.items()}
    print_kv(f"digits example{' --smoke' if extra else ''}: process wall time, median of {n}", [
        (k, f"{fmt_time(v)}   ({v / med['warm']:.2f}x the warm run; "
            f"median of the repeats' own ratios {paired[k]:.2f}x)") for k, v in med.items()])
    return {"median_s": med, "paired_ratio": paired,
            "runs": {"fresh": fresh, "new_cache": new_cache, "warm": warm,
                     "fresh_no_workers": fresh0, "new_cache_no_workers": new_cache0}}


def _options(p) -> None:
    p.add_argument("--repeats", type=int, default=5, help="repeats of the five runs (default 5)")


def main(argv=None) -> dict:
    return common.run_main(__doc__, "cold start", "cold_start", run, argv, extra=_options)


if __name__ == "__main__":
    main()
