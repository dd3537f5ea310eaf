"""Cold start of a real program: the digits example run as a user would, in new processes.

    python bench/cold_start.py [--quick] [--json out.json]
    python bench/cold_start.py --gpt tiny|small [--repeats N]

1. "fresh machine": empty jitgraph cache and empty Numba cache (so jitgraph's own helper
   kernels compile too), 2. "new cache": empty jitgraph cache, helper kernels already compiled,
3. "warm": everything cached; then 1 and 2 again with ``JITGRAPH_COMPILE_WORKERS=0``. Each
is the wall time of the whole process (``python examples/train_digits.py``), median of the
repeats (``--repeats``, default 5); the ratios to the warm run are what the compile-latency
targets speak of. Each repeat runs its five processes back to back, so besides the ratio of
the medians the table gives the median of each repeat's own ratio (fresh / warm of the same
repeat), which a machine whose speed drifts over seconds moves less.

``--gpt SIZE``: instead, the first call of ``bench/gpt_step.py``'s step (untied output, SGD,
explicit attention) in new processes, with the split ``JITGRAPH_LOG=compiles`` prints (trace,
autodiff, optimise, fuse, generate, load, Numba) and its kernel counts: "cold" (an empty
jitgraph cache, the kernels' helpers compiled already, as on a machine that ran jitgraph
before), "cold, no compile workers", and "warm" (the cold run's cache). Besides wall time it
gives the CPU seconds of the process and its compile workers, which other work on a shared
machine moves less than wall time.
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy loads)

import json
import os
import re
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
    if args.gpt:
        return run_gpt(args)
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


GPT_CHILD = """
import json, os, resource, sys, time
sys.path.insert(0, {examples!r})
import numpy as np
import jitgraph, jitgraph.optim as optim, jitgraph.random as jr
from gpt import GPT, GPTConfig, loss_fn
s = {size!r}
model = GPT(GPTConfig(vocab=s["vocab"], context=s["context"], dim=s["dim"], heads=s["heads"],
                      layers=s["layers"], tied=False, attention="explicit"), jr.key(0))
rng = np.random.default_rng(0)
ids = rng.integers(0, s["vocab"], (s["batch"], s["context"]))
tgt = rng.integers(0, s["vocab"], (s["batch"], s["context"]))
opt = optim.sgd(1e-3)
step = jitgraph.train_step(loss_fn, opt)
state = opt.init(model)
def cpu():
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
c0, t0 = cpu(), time.perf_counter()
model, state, loss = step(model, state, ids, tgt)
print(json.dumps({{"wall": time.perf_counter() - t0, "cpu": cpu() - c0, "loss": float(loss)}}))
"""
# (a program run from its native bundle has no kernel counts: nothing was loaded by Numba)
SPLIT = re.compile(r"^jitgraph:   split: (.*), other (\d+\.\d+)s(?:; kernels: (\d+) steps -> "
                   r"(\d+) distinct .*?(\d+) in memory, (\d+) on disk, (\d+) new; Numba "
                   r"compiled (\d+) here, (\d+) in workers; LLVM compiled (\d+))?$", re.M)


def gpt_first_call(size: str, jit_cache: str, helpers: str, workers: str | None) -> dict:
    """One new process's first call of the GPT step: wall and CPU seconds, the split."""
    from gpt_step import SIZES
    env = dict(os.environ, JITGRAPH_CACHE_DIR=jit_cache, JITGRAPH_HELPER_CACHE_DIR=helpers,
               JITGRAPH_LOG="compiles")
    env.pop("JITGRAPH_COMPILE_WORKERS", None)
    if workers is not None:
        env["JITGRAPH_COMPILE_WORKERS"] = workers
    code = GPT_CHILD.format(examples=os.path.join(ROOT, "examples"), size=SIZES[size])
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=1800, cwd=ROOT)
    if p.returncode != 0:
        raise RuntimeError(f"gpt first call failed: {(p.stderr or p.stdout).strip()[-300:]}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    m = SPLIT.search(p.stderr)
    if m is None:
        raise RuntimeError(f"no split line in the compile log: {p.stderr.strip()[-300:]}")
    out["phases"] = {k: float(v) for k, v in re.findall(r"(\w+) (\d+\.\d+)s", m.group(1))}
    out["phases"]["other"] = float(m.group(2))
    out["kernels"] = None if m.group(3) is None else dict(zip(
        ("steps", "distinct", "in_memory", "on_disk", "new", "here", "workers", "llvm"),
        map(int, m.groups()[2:])))
    return out


def run_gpt(args) -> dict:
    n = 1 if args.quick else args.repeats
    helpers = common.fresh_dir("cold-helpers")
    gpt_first_call(args.gpt, common.fresh_dir("cold-jit"), helpers, None)  # compiles the helpers
    runs: dict = {"cold": [], "cold, no compile workers": [], "warm": []}
    for _ in range(n):
        jit_dir = common.fresh_dir("cold-jit")
        runs["cold"].append(gpt_first_call(args.gpt, jit_dir, helpers, None))
        runs["warm"].append(gpt_first_call(args.gpt, jit_dir, helpers, None))
        runs["cold, no compile workers"].append(
            gpt_first_call(args.gpt, common.fresh_dir("cold-jit"), helpers, "0"))
    rows = []
    for name, rs in runs.items():
        med = {k: float(np.median([r[k] for r in rs])) for k in ("wall", "cpu")}
        phases = {k: float(np.median([r["phases"].get(k, 0.0) for r in rs]))
                  for k in rs[0]["phases"]}
        k = rs[-1]["kernels"]
        counts = "; run from its native bundle" if k is None else (
            f"; kernels {k['steps']} steps -> {k['distinct']} distinct, {k['new']} new, Numba "
            f"compiled {k['here']} here + {k['workers']} in workers, LLVM {k['llvm']}")
        rows.append((name, f"{fmt_time(med['wall'])} wall, {med['cpu']:.1f} s CPU; "
                           + ", ".join(f"{p} {v:.2f}" for p, v in phases.items()) + counts))
    print_kv(f"GPT step ({args.gpt}, untied, SGD) first call in a new process, median of {n} "
             "(stage seconds from JITGRAPH_LOG=compiles)", rows)
    return {"runs": runs}


def _options(p) -> None:
    p.add_argument("--repeats", type=int, default=5, help="repeats of the five runs (default 5)")
    p.add_argument("--gpt", choices=("tiny", "small", "large"), default=None,
                   help="measure the GPT step's first call and its compile split instead")


def main(argv=None) -> dict:
    return common.run_main(__doc__, "cold start", "cold_start", run, argv, extra=_options)


if __name__ == "__main__":
    main()
