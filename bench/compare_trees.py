"""Two checkouts of jitgraph side by side: is a change (a refactor) slower than what it replaced?

    python bench/compare_trees.py BEFORE_DIR [AFTER_DIR] [--rounds N] [--json out.json]

``BEFORE_DIR`` and ``AFTER_DIR`` (default: this checkout) are repository roots, e.g. a
``git worktree add /some/dir <old commit>``. Each measurement is a new process importing
jitgraph from one tree; the trees alternate (before, after, after, before, ...) so a drift of
the machine's speed hits both alike. Per process, for the W1 training step (784-512-512-10,
batch 128, float32, SGD, as ``w1_mlp_train_step.py``) and W5's function (``(a*b + a).sum()``
on 16 float32, as ``w5_call_overhead.py``):

* **cold compile**: the step's first call (trace, compile, run) in a new process with an
  empty ``JITGRAPH_CACHE_DIR``; jitgraph's own ``kernels/`` helpers are already compiled
  (one warm-up process per tree fills its Numba cache first), as in W1's "new cache" row;
* **warm compile**: the same first call in a second new process with that cache filled;
* **step**: median ms per step afterwards; **call overhead**: median µs per cached W5 call.

The table gives the median over rounds and the after/before ratio.
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy loads)

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

from common import dump_json, fmt_time, print_header, time_per_call, timeit

HERE = os.path.dirname(os.path.abspath(__file__))
METRICS = ("cold_compile_s", "warm_compile_s", "step_s", "call_s")


def child() -> None:
    """One process: the step's first call, its step time and the W5 call overhead."""
    import jitgraph
    import w1_mlp_train_step as w1
    tree = os.environ["COMPARE_TREE"]
    if not os.path.abspath(jitgraph.__file__).startswith(os.path.abspath(tree)):
        raise SystemExit(f"imported {jitgraph.__file__}, not the tree {tree}")
    params = w1.init_params()
    x, y = w1.make_data()
    step = w1.make_step(jitgraph)
    t0 = time.perf_counter()
    params, loss = step(params, x, y)
    first = time.perf_counter() - t0
    box = [params]

    def one_step():
        box[0], value = step(box[0], x, y)
        return value
    step_t = timeit(one_step, warmup=5, repeats=15, number=10)
    f = jitgraph.jit(lambda a, b: (a * b + a).sum())
    a, b = np.ones(16, np.float32), np.ones(16, np.float32)
    f(a, b)
    call_t = time_per_call(lambda: f(a, b), number=5000, repeats=9)
    print("COMPARE_JSON " + json.dumps({"first_call_s": first, "step_s": step_t.median,
                                        "call_s": call_t.median}), flush=True)


def _spawn(tree: str, jit_dir: str, numba_dir: str) -> dict:
    env = dict(os.environ, PYTHONPATH=tree, COMPARE_TREE=tree, JITGRAPH_CACHE_DIR=jit_dir,
               NUMBA_CACHE_DIR=numba_dir, BENCH_KEEP_CACHES="1",
               BENCH_USE_INSTALLED_JITGRAPH="1")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child"], env=env,
                          capture_output=True, text=True, timeout=900, cwd=tree)
    for line in proc.stdout.splitlines():
        if line.startswith("COMPARE_JSON "):
            return json.loads(line[len("COMPARE_JSON "):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:] or ["no output"]
    raise RuntimeError(f"{tree}: child exited {proc.returncode}: {' | '.join(tail)}")


def measure(tree: str, numba_dir: str) -> dict:
    """A cold process (empty jitgraph cache), then a warm one on the cache it filled."""
    jit_dir = common.fresh_dir("compare-jit")
    cold = _spawn(tree, jit_dir, numba_dir)
    warm = _spawn(tree, jit_dir, numba_dir)
    return {"cold_compile_s": cold["first_call_s"], "warm_compile_s": warm["first_call_s"],
            "step_s": float(np.median([cold["step_s"], warm["step_s"]])),
            "call_s": float(np.median([cold["call_s"], warm["call_s"]]))}


def main(argv=None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child()
        return {}
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("before")
    p.add_argument("after", nargs="?", default=os.path.dirname(HERE))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    trees = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    print_header("jitgraph: two trees side by side")
    numba_dirs = {k: common.fresh_dir(f"compare-numba-{k}") for k in trees}
    for name, tree in trees.items():        # compile each tree's kernels/ helpers once
        _spawn(tree, common.fresh_dir("compare-jit"), numba_dirs[name])
    rows: dict = {k: [] for k in trees}
    for r in range(args.rounds):
        for name in (["before", "after"] if r % 2 == 0 else ["after", "before"]):
            m = measure(trees[name], numba_dirs[name])
            rows[name].append(m)
            print(f"round {r} {name:6s} " + "  ".join(
                f"{k} {fmt_time(m[k])}" for k in METRICS), flush=True)
    med = {k: {m: float(np.median([row[m] for row in rows[k]])) for m in METRICS}
           for k in trees}
    print(f"\nmedians over {args.rounds} rounds (before: {trees['before']}, "
          f"after: {trees['after']})")
    print(f"{'':24s}{'before':>12s}{'after':>12s}{'after/before':>14s}")
    for m in METRICS:
        b, a = med["before"][m], med["after"][m]
        print(f"{m:24s}{fmt_time(b):>12s}{fmt_time(a):>12s}{a / b:>14.2f}")
    result = {"trees": trees, "rounds": rows, "medians": med}
    dump_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
