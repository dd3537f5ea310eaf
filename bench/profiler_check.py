"""The two targets of jitgraph's profiler, measured.

1. ``jitgraph.profile`` of the W1 MLP training step (784-512-512-10, tanh, batch 128, float32,
   params donated) accounts for at least 90 % of the measured call time in named steps on the
   CPU. Printed: the profile table; the share of the program's steps (kernels, BLAS calls) in
   each profiled call, median over calls; the rest of the call is its entry (dispatch,
   argument checks, output allocation) and exit, measured in the same calls by the same
   clock; the plain (unprofiled) call's median beside the profiled call's.
2. The overhead of ``jitgraph.benchmark`` itself on a 2 us function (``np.sin`` of 16 float64)
   is below 5 %: benchmark's median per-call time over the median of a tight ``timeit`` loop
   of the same call with as many calls per sample. The two alternate, round by round, so that
   a change in the machine's load hits both alike; the ratio is the median over rounds.

    python bench/profiler_check.py [--quick] [--json OUT]
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy/torch/jax load)

import statistics
import timeit

import numpy as np

from common import dump_json, import_jitgraph, parse_args, print_header, print_kv
from w1_mlp_train_step import init_params, make_data, make_step


def profile_coverage(jitgraph, reps: int) -> dict:
    step = make_step(jitgraph)
    params = init_params()
    x, y = make_data()
    r = jitgraph.profile(step, params, x, y, reps=reps, min_time=0.5, peaks=False)
    print(r)
    out = {"steps_share_median_per_call": r.coverage,
           "profiled_call_median_s": r.call_s, "plain_call_median_s": r.stats.median,
           "call_entry_s": r.call_entry_s, "call_exit_s": r.call_exit_s,
           "steps": len(r.kernels)}
    print_kv("target 1: jitgraph.profile of the W1 step accounts for the call time", [
        ("program steps' share of each profiled call (median)", f"{100 * r.coverage:.1f} %"),
        ("the call's entry (dispatch, checks, allocation) / exit",
         f"{r.call_entry_s * 1e6:.0f} us / {r.call_exit_s * 1e6:.0f} us of "
         f"{r.call_s * 1e3:.2f} ms (medians)"),
        ("profiled call / plain call (medians)", f"{r.call_s / r.stats.median:.3f}")])
    return out


def benchmark_overhead(jitgraph, rounds: int) -> dict:
    x = np.linspace(0.0, 1.0, 16)
    f = np.sin
    ratios, bench_s, tight_s = [], [], []
    timer = timeit.Timer("f(x)", globals={"f": f, "x": x})
    for _ in range(rounds):
        r = jitgraph.benchmark(f, x, warmup=1, reps=7, min_time=0.07)
        tight = statistics.median(t / r.stats.number
                                  for t in timer.repeat(repeat=7, number=r.stats.number))
        ratios.append(r.stats.median / tight)
        bench_s.append(r.stats.median)
        tight_s.append(tight)
    ratio = statistics.median(ratios)
    out = {"function": "np.sin(16 float64)", "benchmark_median_s": statistics.median(bench_s),
           "timeit_median_s": statistics.median(tight_s), "ratio_median": ratio,
           "ratio_min": min(ratios), "ratio_max": max(ratios), "rounds": rounds,
           "calls_per_sample": r.stats.number}
    print_kv("target 2: jitgraph.benchmark's own overhead on a 2 us function", [
        ("np.sin of 16 float64, benchmark", f"{statistics.median(bench_s) * 1e6:.3f} us/call"),
        ("np.sin of 16 float64, timeit", f"{statistics.median(tight_s) * 1e6:.3f} us/call"),
        ("benchmark / timeit (median of rounds)",
         f"{ratio:.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}, {rounds} rounds): "
         f"overhead {100 * (ratio - 1):+.1f} %")])
    return out


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    if not args.no_header:
        print_header("jitgraph.profile coverage and jitgraph.benchmark overhead")
    jitgraph = import_jitgraph()
    if jitgraph is None:
        raise SystemExit("jitgraph cannot be imported")
    results = {"coverage": profile_coverage(jitgraph, 10 if args.quick else 40),
               "overhead": benchmark_overhead(jitgraph, 5 if args.quick else 21)}
    dump_json(args.json, results)


if __name__ == "__main__":
    main()
