"""Run every jitgraph comparison benchmark, one fresh process each, then print one
combined report.

    python bench/run_all.py [--quick] [--json all.json] [--only w1,w3,w5,trace,eager,prof]

Each benchmark runs as its own process (``python bench/<script>.py --json ...``) so that
compile caches, thread pools and torch.compile/JAX state do not leak between them; their
live output is shown as they run, and the combined report is printed at the end.
"""

from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy/torch/jax load)

import argparse
import json
import os
import subprocess
import sys
import time

from common import ResultTable, print_kv

HERE = os.path.dirname(os.path.abspath(__file__))

BENCHES = [
    ("w1", "w1_mlp_train_step.py"),
    ("w2", "w2_softmax_xent.py"),
    ("w3", "w3_elementwise_grad.py"),
    ("w5", "w5_call_overhead.py"),
    ("trace", "trace_time.py"),
    ("cold", "cold_start.py"),
    ("eager", "eager_grad.py"),
    ("prof", "profiler_check.py"),
]


def run_one(key: str, script: str, quick: bool) -> tuple[dict | None, float, int]:
    out = os.path.join(common.fresh_dir("results"), key + ".json")
    cmd = [sys.executable, os.path.join(HERE, script), "--no-header", "--json", out]
    if quick:
        cmd.append("--quick")
    print(f"\n##### {script}{' --quick' if quick else ''}", flush=True)
    t0 = time.perf_counter()
    try:   # each child sets up its own fresh compile caches (unless BENCH_KEEP_CACHES=1)
        rc = subprocess.run(cmd, timeout=900).returncode
    except subprocess.TimeoutExpired:
        rc = -1
        print(f"{script}: timed out", flush=True)
    wall = time.perf_counter() - t0
    data = None
    if os.path.exists(out):
        with open(out) as f:
            data = json.load(f)
    return data, wall, rc


def print_report(results: dict, walls: dict) -> None:
    print("\n" + "=" * 100)
    print("COMBINED REPORT")
    print("=" * 100)
    common.print_header("jitgraph benchmarks")

    w1 = (results.get("w1") or {}).get("w1")
    if w1:
        ResultTable.from_dict(w1["table"]).print()
        comp = w1.get("compile_s") or {}
        print_kv("W1 cold compile (s, first call - warm call)",
                 [(k, f"{comp[k]:.3f}" if k in comp else "n/a")
                  for k in ("torch.compile", "jax.jit", "jitgraph.jit")])
        ws = w1.get("warm_start")
        if ws:
            print_kv("W1 jitgraph start-up in a new process (s)", [
                ("cold: import+first call", f"{ws['cold']['in_process_s']:.3f}  "
                                            f"(process wall {ws['cold']['wall_s']:.3f})"),
                ("warm: import+first call", f"{ws['warm_in_process_s']:.3f}  "
                                            f"(process wall {ws['warm_wall_s']:.3f})"),
            ])
        else:
            print_kv("W1 jitgraph start-up in a new process", [("warm start", "unavailable")])
        sizes = w1.get("new_batch_sizes")
        if sizes:
            print_kv("W1 first call at a new batch size, after batch 128 (s)", [
                (name, "  ".join(f"batch {b}: {t:.3f}" for b, t in row))
                for name, row in sizes.items()])
        print()
    elif "w1" in walls:
        print("W1: no results (see its output above)\n")

    w2 = (results.get("w2") or {}).get("w2")
    if w2:
        for table in w2.values():
            ResultTable.from_dict(table).print()
            print()
    elif "w2" in walls:
        print("W2: no results (see its output above)\n")

    w3 = (results.get("w3") or {}).get("w3")
    if w3:
        for table in w3.values():
            ResultTable.from_dict(table).print()
            print()
    elif "w3" in walls:
        print("W3: no results (see its output above)\n")

    for key, name in (("w5", "W5"), ("trace", "trace time")):
        d = (results.get(key) or {}).get("w5" if key == "w5" else "trace_time")
        if d:
            ResultTable.from_dict(d["table"]).print()
            print()
        elif key in walls:
            print(f"{name}: no results (see its output above)\n")

    cold = (results.get("cold") or {}).get("cold_start")
    if cold:
        warm = cold["median_s"]["warm"]
        print_kv("digits example, process wall time (s)", [
            (k, f"{v:.2f}  ({v / warm:.2f}x warm)") for k, v in cold["median_s"].items()])
        print()

    eager = (results.get("eager") or {}).get("eager_grad")
    if eager:
        for table in eager["tables"]:
            ResultTable.from_dict(table).print()
            print()
        if eager.get("ratios"):
            print_kv("eager grad: jitgraph / autograd (median time ratio)",
                     [(k, f"{v:.2f}") for k, v in eager["ratios"].items()])
            print()
    elif "eager" in walls:
        print("eager grad: no results (see its output above)\n")

    prof = results.get("prof")
    if prof:
        cov, ovh = prof["coverage"], prof["overhead"]
        print_kv("jitgraph.profile and jitgraph.benchmark (bench/profiler_check.py)", [
            ("W1 step: program steps' share of each profiled call (median)",
             f"{100 * cov['steps_share_median_per_call']:.1f} %"),
            (f"benchmark / timeit on {ovh['function']}",
             f"{ovh['ratio_median']:.3f} (overhead {100 * (ovh['ratio_median'] - 1):+.1f} %)")])
        print()
    elif "prof" in walls:
        print("profiler check: no results (see its output above)\n")

    print_kv("process wall time (s)", [(k, f"{v:.1f}") for k, v in walls.items()]
             + [("total", f"{sum(walls.values()):.1f}")])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fast smoke run of every benchmark")
    p.add_argument("--json", metavar="PATH", help="write all results as JSON to PATH")
    p.add_argument("--only", default="", help="comma-separated subset of: "
                   + ",".join(k for k, _ in BENCHES))
    p.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                   help="shared machine: before each benchmark wait up to SECONDS for other "
                        "processes to leave the CPUs idle, and let each benchmark spend up to "
                        "SECONDS more re-measuring rows that were timed on a busy machine")
    args = p.parse_args(argv)
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    unknown = only - {k for k, _ in BENCHES}
    if unknown:
        p.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")

    common.print_header("jitgraph benchmarks")
    results, walls, failed = {}, {}, []
    for key, script in BENCHES:
        if only and key not in only:
            continue
        if args.wait_quiet > 0:
            os.environ["BENCH_WAIT_QUIET"] = str(args.wait_quiet)   # for the children
            common.wait_quiet(args.wait_quiet, verbose=True)
        data, wall, rc = run_one(key, script, args.quick)
        results[key], walls[key] = data, wall
        if rc != 0:
            failed.append(f"{script} (exit {rc})")
    print_report(results, walls)
    if failed:
        print("FAILED: " + ", ".join(failed))
    common.dump_json(args.json, {k: v for k, v in results.items() if v is not None})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
