"""Helpers for the MPI benchmarks: launch a script's child mode under ``mpiexec`` with one
thread per rank, and time collectives the way every rank sees them.

A sample is ``Barrier(); t0; fn(); t1``; the sample's time is the slowest rank's (a collective is
done when the last rank is done), and the result is the median over samples.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def child_env(threads: int) -> dict:
    """Environment for a child run with ``threads`` threads per process (common.py reads it)."""
    env = dict(os.environ)
    env["BENCH_THREADS"] = str(threads)
    env["BENCH_NO_PIN"] = "1"          # common.py would pin every rank to the same first CPU
    env["BENCH_KEEP_CACHES"] = "1"     # children share the parent's (fresh) compile caches
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([repo] + [p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    return env


def run_child(script: str, args: list[str], ranks: int, threads: int,
              timeout: float = 1800) -> dict:
    """Run ``script --child ARGS --out FILE`` (under ``mpiexec -n ranks`` when ranks > 1), echo
    its output, and return the JSON rank 0 wrote to FILE."""
    if ranks > 1 and shutil.which("mpiexec") is None:
        raise RuntimeError("mpiexec not found: pip install -e '.[distributed]'")
    fd, out = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(script), "--child", *args, "--out", out]
    if ranks > 1:
        cmd = ["mpiexec", "-n", str(ranks), *cmd]
    proc = subprocess.run(cmd, env=child_env(threads), capture_output=True, text=True,
                          timeout=timeout)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        sys.stdout.write(proc.stderr[-4000:])
        raise RuntimeError(f"{' '.join(cmd[:6])} ... exited {proc.returncode}")
    with open(out) as f:
        result = json.load(f)
    os.unlink(out)
    return result


def sync_time_interleaved(comm, fns: dict, repeats: int, warmup: int = 2) -> dict:
    """``sync_time`` of several functions, one sample of each in turn, so that the load of a
    shared machine falls on all of them alike (their ratios are what to read)."""
    for _ in range(warmup):
        for fn in fns.values():
            comm.Barrier()
            fn()
    samples: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
    return {name: _summary(comm, ts) for name, ts in samples.items()}


def _summary(comm, samples: list[float]) -> dict:
    slowest = [max(ts) for ts in zip(*comm.allgather(samples))]
    q = statistics.quantiles(slowest, n=4) if len(slowest) >= 4 else [min(slowest),
                                                                        0, max(slowest)]
    return {"median_s": statistics.median(slowest), "q1_s": q[0], "q3_s": q[2],
            "n": len(slowest)}


def sync_time(comm, fn, repeats: int, warmup: int = 2) -> dict:
    """Median (and quartiles) over ``repeats`` samples of the slowest rank's time for ``fn()``."""
    for _ in range(warmup):
        comm.Barrier()
        fn()
    samples = []
    for _ in range(repeats):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return _summary(comm, samples)
