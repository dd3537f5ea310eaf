"""Predicted data-parallel step time and efficiency at 8, 64 and 512 ranks, from measured inputs.

Ring allreduce of B bytes over N ranks, in k buckets, on a network of bandwidth W and per-message
latency a:

    T_comm(N) = 2(N-1)/N * B / W  +  2(N-1) * a * k

Weak scaling (every rank keeps its local batch, so the compute time t_c per step stays the same):
step = t_c + T_comm without overlap, max(t_c, T_comm) with perfect overlap; efficiency =
t_c / step. The inputs are what bench/data_parallel_step.py and bench/allreduce.py measure (the
1-thread compute time of each model, its gradient bytes, the local allreduce's bandwidth and
latency at the 4 MB bucket size), read from their --json files or, by default, the values
measured for bench/README.md.

    python bench/scaling_model.py [--dp dp.json] [--allreduce allreduce.json] [--speedup 100]
"""
from __future__ import annotations

import argparse
import json
import math
import sys

BUCKET = 4 << 20
# Measured on the 2-core AMD EPYC (AVX2) used for bench/README.md, loaded by other work:
# 1-thread compute per rank and gradient bytes, and 2 local ranks' allreduce.
DEFAULTS = {
    "mlp": {"grad_bytes": 23_298_088, "compute_s": 0.302,
            "label": "MLP 784-2048-2048-10, 256 rows/rank"},
    "transformer": {"grad_bytes": 466_304, "compute_s": 0.0866,
                    "label": "char transformer (2 layers, d=64), 16x64 tokens/rank"},
    "local": {"bus_bandwidth_Bps": 0.60e9, "latency_s": 7.5e-6, "allreduce_s": 0.0239},
}
# Networks: bandwidth in bits/s and an assumed per-message latency (not measured here).
NETWORKS = [("25 Gb/s Ethernet (RoCE), 10 us", 25e9, 10e-6),
            ("200 Gb/s InfiniBand HDR, 2 us", 200e9, 2e-6)]
RANKS = (8, 64, 512)


def ring_allreduce_s(nbytes: float, ranks: int, bandwidth_Bps: float, latency_s: float,
                     buckets: int = 1) -> float:
    """``2(N-1)/N * bytes / bandwidth + 2(N-1) * latency`` per bucket's message chain."""
    if ranks <= 1:
        return 0.0
    return (2 * (ranks - 1) / ranks * nbytes / bandwidth_Bps
            + 2 * (ranks - 1) * latency_s * buckets)


def inputs(dp_path: str | None, ar_path: str | None) -> dict:
    out = json.loads(json.dumps(DEFAULTS))
    if dp_path:
        with open(dp_path) as f:
            dp = json.load(f)
        for name in ("mlp", "transformer"):
            out[name].update(dp["model_inputs"][name])
        out["local"]["allreduce_s"] = dp["data_parallel"]["allreduce"]["median_s"]
    if ar_path:
        with open(ar_path) as f:
            ar = json.load(f)
        out["local"].update(bus_bandwidth_Bps=ar["bucket_bus_bandwidth_Bps"],
                            latency_s=ar["latency_s"])
    return out


def table(inp: dict) -> list[dict]:
    rows = []
    for name in ("mlp", "transformer"):
        m = inp[name]
        k = max(1, math.ceil(m["grad_bytes"] / BUCKET))
        for net, bits, lat in NETWORKS:
            for n in RANKS:
                comm = ring_allreduce_s(m["grad_bytes"], n, bits / 8, lat, k)
                step = m["compute_s"] + comm
                rows.append({"model": name, "network": net, "ranks": n, "comm_s": comm,
                             "step_s": step, "efficiency": m["compute_s"] / step,
                             "efficiency_overlap": m["compute_s"] / max(m["compute_s"], comm)})
    return rows


def main(argv: list[str]) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dp", default=None, help="bench/data_parallel_step.py --json output")
    ap.add_argument("--allreduce", default=None, help="bench/allreduce.py --json output")
    ap.add_argument("--speedup", type=float, default=1.0,
                    help="divide the compute times by this (a faster node, e.g. a GPU)")
    args = ap.parse_args(argv)
    inp = inputs(args.dp, args.allreduce)
    for name in ("mlp", "transformer"):
        inp[name]["compute_s"] /= args.speedup
    loc = inp["local"]
    mlp = inp["mlp"]
    k = max(1, math.ceil(mlp["grad_bytes"] / BUCKET))
    check = ring_allreduce_s(mlp["grad_bytes"], 2, loc["bus_bandwidth_Bps"], loc["latency_s"], k)
    print(f"check at N=2 (local shared memory, bus bandwidth {loc['bus_bandwidth_Bps'] / 1e9:.2f}"
          f" GB/s, latency {loc['latency_s'] * 1e6:.1f} us): model {check * 1e3:.1f} ms, "
          f"measured {loc['allreduce_s'] * 1e3:.1f} ms for the MLP's gradients")
    print()
    for name in ("mlp", "transformer"):
        m = inp[name]
        print(f"== {m['label']}: {m['grad_bytes'] / 1e6:.2f} MB of gradients, compute "
              f"{m['compute_s'] * 1e3:.1f} ms/step per rank ==")
        print(f"  {'network':<34} {'ranks':>5} {'allreduce':>10} {'step':>9} {'efficiency':>10} "
              f"{'with overlap':>12}")
        for r in table(inp):
            if r["model"] == name:
                print(f"  {r['network']:<34} {r['ranks']:>5} {r['comm_s'] * 1e3:8.2f}ms "
                      f"{r['step_s'] * 1e3:7.1f}ms {100 * r['efficiency']:9.1f}% "
                      f"{100 * r['efficiency_overlap']:11.1f}%")
        print()
    return table(inp)


if __name__ == "__main__":
    main(sys.argv[1:])
