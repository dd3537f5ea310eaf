"""Allreduce latency and bandwidth between 2 local MPI ranks (one thread each), 8 B to 64 MB,
with raw mpi4py ``Allreduce`` on float32 buffers; then a 4 MB float32 bucket reduced by raw
mpi4py against ``jitgraph.distributed`` (bucket API, tree API, non-blocking).

    python bench/allreduce.py [--quick] [--json out.json]     # launches mpiexec -n 2 itself

Bus bandwidth is ``2(N-1)/N * bytes / time`` (what a ring allreduce moves per rank), the
quantity the scaling model in bench/README.md (bench/scaling_model.py) takes.
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits)

import argparse
import json
import sys

import numpy as np

from mpi_bench import run_child, sync_time, sync_time_interleaved

SIZES = [8 * 8 ** k for k in range(8)] + [64 << 20]     # 8 B, 64 B, ... 16 MB, 64 MB
BUCKET = 4 << 20


def repeats_for(nbytes: int, quick: bool) -> int:
    n = 200 if nbytes <= 64 << 10 else 50 if nbytes <= 4 << 20 else 15
    return max(5, n // 5) if quick else n


def child(args) -> None:
    from mpi4py import MPI

    import jitgraph.distributed as dist
    comm = MPI.COMM_WORLD
    n = comm.Get_size()
    sweep = []
    for nbytes in SIZES:
        buf = np.ones(nbytes // 4, np.float32)
        t = sync_time(comm, lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
                      repeats_for(nbytes, args.quick))
        t.update(bytes=nbytes, bus_GBps=2 * (n - 1) / n * nbytes / t["median_s"] / 1e9)
        sweep.append(t)

    buf = np.ones(BUCKET // 4, np.float32)
    tree = {"g": np.ones(BUCKET // 4, np.float32)}
    reps = repeats_for(BUCKET, args.quick)
    bucket = {
        "raw mpi4py Allreduce(IN_PLACE)":
            lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
        "distributed.allreduce_buffers (sum)": lambda: dist.allreduce_buffers([buf], "sum"),
        "distributed.allreduce_buffers (mean)": lambda: dist.allreduce_buffers([buf], "mean"),
        "distributed.iallreduce_buffers + wait": lambda: dist.iallreduce_buffers([buf]).wait(),
        "distributed.allreduce(tree, inplace=True)":
            lambda: dist.allreduce(tree, op="sum", inplace=True),
        "distributed.allreduce(tree) (new tree)": lambda: dist.allreduce(tree, op="sum"),
    }
    rows = sync_time_interleaved(comm, bucket, 2 * reps)
    if comm.Get_rank() == 0:
        result = {"ranks": n, "mpi": MPI.Get_library_version().splitlines()[0].strip(),
                  "sweep": sweep, "bucket_4MB": rows,
                  "latency_s": sweep[0]["median_s"],
                  "bus_bandwidth_Bps": max(s["bus_GBps"] for s in sweep) * 1e9,
                  # what the scaling model takes: the bandwidth at the bucket size
                  "bucket_bus_bandwidth_Bps": 2 * (n - 1) / n * BUCKET
                  / rows["raw mpi4py Allreduce(IN_PLACE)"]["median_s"]}
        with open(args.out, "w") as f:
            json.dump(result, f)


def report(r: dict) -> None:
    print(f"== allreduce between {r['ranks']} local ranks, 1 thread each ({r['mpi']}) ==")
    print(f"  {'bytes':>10}  {'median':>10}  {'IQR':>9}  {'n':>4}  {'bus GB/s':>8}")
    for s in r["sweep"]:
        print(f"  {s['bytes']:>10,}  {s['median_s'] * 1e6:8.1f}µs  "
              f"{(s['q3_s'] - s['q1_s']) * 1e6:7.1f}µs  {s['n']:>4}  {s['bus_GBps']:8.2f}")
    print(f"  latency (8 B) {r['latency_s'] * 1e6:.1f} µs, peak bus bandwidth "
          f"{r['bus_bandwidth_Bps'] / 1e9:.2f} GB/s, at the 4 MB bucket "
          f"{r['bucket_bus_bandwidth_Bps'] / 1e9:.2f} GB/s")
    print()
    print("== one 4 MB float32 bucket (median, slowest rank; the rows' samples interleaved) ==")
    raw = r["bucket_4MB"]["raw mpi4py Allreduce(IN_PLACE)"]["median_s"]
    for name, t in r["bucket_4MB"].items():
        print(f"  {name:<42} {t['median_s'] * 1e3:8.3f} ms  {t['median_s'] / raw:5.2f}x raw")
    print()


def main(argv: list[str]) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return {}
    common.print_header("allreduce between 2 local ranks")
    r = run_child(__file__, ["--quick"] if args.quick else [], ranks=2, threads=1)
    report(r)
    common.dump_json(args.json, r)
    return r


if __name__ == "__main__":
    main(sys.argv[1:])
