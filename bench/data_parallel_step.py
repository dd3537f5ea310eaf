"""Data-parallel training step: the W2-sized MLP (784-2048-2048-10, tanh, global batch 512,
float32, SGD) as 1 process x 2 threads (plain ``train_step``) against 2 MPI ranks x 1 thread
(``train_step(distributed=True)``, 256 rows each), with and without overlap (and 1 process x
1 thread for the speed-up); the fraction of
the step spent communicating; whether a non-blocking allreduce progresses while the rank
computes; and the inputs of the scaling model (bench/scaling_model.py): gradient bytes and
1-thread compute time of the MLP and of examples/char_transformer.py's model.

    python bench/data_parallel_step.py [--quick] [--rounds 3] [--json out.json]  # runs mpiexec
    MPIR_CVAR_ASYNC_PROGRESS=1 python bench/data_parallel_step.py   # MPICH progress thread
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits)

import argparse
import json
import os
import statistics
import sys

import numpy as np

from mpi_bench import run_child, sync_time

SIZES, GLOBAL_BATCH, LR = [784, 2048, 2048, 10], 512, 0.01
TRANSFORMER = dict(batch=16, context=64, dim=64, heads=4, layers=2, vocab=96)


def mlp_setup(batch: int):
    import jitgraph.nn as nn
    import jitgraph.optim as optim
    import jitgraph.random as jr
    rng = np.random.default_rng(0)
    x = rng.standard_normal((GLOBAL_BATCH, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], GLOBAL_BATCH)
    model = nn.MLP(SIZES, key=jr.key(0), activation=__import__("jitgraph").numpy.tanh)
    opt = optim.sgd(LR)

    def loss_fn(model, x, y):
        return nn.cross_entropy(model(x), y)
    return model, opt, loss_fn, x, y


class Stepper:
    """Holds the donated parameters and state between timed calls."""

    def __init__(self, step, model, opt, x, y):
        self.step, self.x, self.y = step, x, y
        self.params, self.state = model, opt.init(model)

    def __call__(self):
        self.params, self.state, loss = self.step(self.params, self.state, self.x, self.y)
        return loss


def nbytes(tree) -> int:
    import jitgraph
    return int(sum(np.asarray(a).nbytes for a in jitgraph.tree_leaves(tree)))


def child_single(args) -> dict:
    """1 process, BENCH_THREADS threads: the plain step on the whole global batch."""
    import jitgraph
    model, opt, loss_fn, x, y = mlp_setup(GLOBAL_BATCH)
    run = Stepper(jitgraph.train_step(loss_fn, opt), model, opt, x, y)
    t = common.timeit(run, warmup=2, repeats=5 if args.quick else 15, max_time=None)
    return {"step_s": t.median, "iqr_s": t.iqr, "n": len(t.samples), "other_load": t.other_load,
            "grad_bytes": nbytes(model)}


def child_dp(args) -> dict:
    """Every rank, 1 thread: the distributed step, its phases, and the overlap probe."""
    from mpi4py import MPI

    import jitgraph
    import jitgraph.distributed as dist
    from jitgraph.transforms import value_and_grad
    comm = MPI.COMM_WORLD
    reps = 5 if args.quick else 15
    model, opt, loss_fn, x, y = mlp_setup(GLOBAL_BATCH)
    xs, ys = dist.shard((x, y))
    out = {"ranks": comm.Get_size(), "async_progress": os.environ.get("MPIR_CVAR_ASYNC_PROGRESS")}
    for overlap in (False, True):
        run = Stepper(jitgraph.train_step(loss_fn, opt, distributed=True, overlap=overlap),
                      model, opt, xs, ys)
        out["overlap" if overlap else "blocking"] = sync_time(comm, run, reps)

    # phases of the blocking step, timed one by one (every rank, slowest rank's time)
    dp = jitgraph.train_step(loss_fn, opt, distributed=True)._jitted
    params = dist.broadcast(model)
    plan, grads, _ = dp.programs(params, (xs, ys))
    scale = 1.0 / comm.Get_size()
    buckets = grads(params, scale, xs, ys)
    out["buckets"] = [int(b.nbytes) for b in buckets]
    out["grads_program"] = sync_time(comm, lambda: grads(params, scale, xs, ys), reps)
    out["allreduce"] = sync_time(comm, lambda: dist.allreduce_buffers(buckets), reps)

    # does a non-blocking allreduce progress while this rank runs the backward pass?
    def sequential():
        grads(params, scale, xs, ys)
        dist.allreduce_buffers(buckets)

    def overlapped():
        pending = dist.iallreduce_buffers(buckets)
        grads(params, scale, xs, ys)
        pending.wait()
    out["compute_then_allreduce"] = sync_time(comm, sequential, reps)
    out["iallreduce_during_compute"] = sync_time(comm, overlapped, reps)

    # packing inside the program vs a program returning the gradient tree, packed by NumPy
    tree_grads = jitgraph.jit(value_and_grad(loss_fn))
    into = plan.empty()

    def tree_then_pack():
        loss, g = tree_grads(params, xs, ys)
        dist.pack(jitgraph.tree_leaves(g) + [loss], plan, out=into, scale=scale)
    out["grads_tree_then_numpy_pack"] = sync_time(comm, tree_then_pack, reps)
    out["grad_bytes"] = nbytes(model)
    return out if comm.Get_rank() == 0 else None


def child_transformer(args) -> dict:
    """1 process, 1 thread: examples/char_transformer.py's step (the model's compute input)."""
    import jitgraph
    import jitgraph.optim as optim
    import jitgraph.random as jr
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
    from char_transformer import CharTransformer, loss_fn
    c = TRANSFORMER
    rng = np.random.default_rng(0)
    ids = rng.integers(0, c["vocab"], (c["batch"], c["context"]))
    tgt = rng.integers(0, c["vocab"], (c["batch"], c["context"]))
    model = CharTransformer(c["vocab"], c["context"], c["dim"], c["heads"], c["layers"],
                            jr.key(0))
    opt = optim.adam(1e-3)
    run = Stepper(jitgraph.train_step(loss_fn, opt), model, opt, ids, tgt)
    t = common.timeit(run, warmup=2, repeats=10 if args.quick else 30, max_time=None)
    n_params = sum(int(np.asarray(a).size) for a in jitgraph.tree_leaves(model))
    return {"step_s": t.median, "iqr_s": t.iqr, "n": len(t.samples), "grad_bytes": nbytes(model),
            "params": n_params, "num_leaves": len(jitgraph.tree_leaves(model)),
            "config": c}


def ms(t) -> str:
    return f"{t['median_s'] * 1e3:8.1f} ms"


def median_of_rounds(rounds: list[dict]) -> dict:
    """One dict like each round's, every number the median over the rounds."""
    first = rounds[0]
    if isinstance(first, dict):
        return {k: median_of_rounds([r[k] for r in rounds]) for k in first}
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        return statistics.median(rounds)
    return first


def report(rounds: list[tuple[dict, dict, dict]], tr: dict) -> dict:
    single, single1, dp = (median_of_rounds([r[i] for r in rounds]) for i in range(3))
    paired = [s["step_s"] / d["blocking"]["median_s"] for s, _, d in rounds]
    name = "-".join(map(str, SIZES))
    print(f"{len(rounds)} rounds, the configurations in turn; medians over the rounds")
    print(f"== MLP {name} tanh, global batch {GLOBAL_BATCH}, SGD, float32 (median, slowest "
          "rank) ==")
    ratio_b = statistics.median(paired)
    ratio_o = statistics.median(s["step_s"] / d["overlap"]["median_s"] for s, _, d in rounds)
    print(f"  1 process x 2 threads, train_step         {single['step_s'] * 1e3:8.1f} ms  "
          f"(IQR {single['iqr_s'] * 1e3:.1f} ms)")
    print(f"  1 process x 1 thread, train_step          {single1['step_s'] * 1e3:8.1f} ms  "
          f"(IQR {single1['iqr_s'] * 1e3:.1f} ms): 2 ranks are "
          f"{single1['step_s'] / dp['blocking']['median_s']:.2f}x its throughput")
    print(f"  2 ranks x 1 thread, distributed, blocking {ms(dp['blocking'])}  throughput "
          f"{ratio_b:.2f}x of 1 x 2 threads (rounds: {', '.join(f'{p:.2f}' for p in paired)})")
    print(f"  2 ranks x 1 thread, distributed, overlap  {ms(dp['overlap'])}  throughput "
          f"{ratio_o:.2f}x  (Iallreduce per bucket)")
    step = dp["blocking"]["median_s"]
    comm = dp["allreduce"]["median_s"]
    print(f"  phases: gradient program {ms(dp['grads_program'])}, allreduce of "
          f"{len(dp['buckets'])} buckets ({sum(dp['buckets']) / 1e6:.1f} MB) {ms(dp['allreduce'])}"
          f" = {100 * comm / step:.1f} % of the step")
    seq, ovl = dp["compute_then_allreduce"]["median_s"], dp["iallreduce_during_compute"]["median_s"]
    hidden = (seq - ovl) / comm if comm > 0 else 0.0
    print(f"  overlap probe: compute then allreduce {seq * 1e3:.1f} ms; Iallreduce started "
          f"before compute, waited after {ovl * 1e3:.1f} ms -> {100 * hidden:.0f} % of the "
          "allreduce hidden"
          + (" (MPICH progress thread on)" if dp.get("async_progress") else ""))
    print(f"  packing: in the compiled program {ms(dp['grads_program'])}; gradient tree + "
          f"NumPy pack {ms(dp['grads_tree_then_numpy_pack'])}")
    print()
    print("== scaling-model inputs (1 thread per process) ==")
    print(f"  MLP: {dp['grad_bytes'] / 1e6:.2f} MB of gradients, compute "
          f"{(step - comm) * 1e3:.1f} ms per rank at {GLOBAL_BATCH // dp['ranks']} rows")
    print(f"  char transformer: {tr['params']:,} parameters ({tr['grad_bytes'] / 1e6:.3f} MB "
          f"of gradients), step {tr['step_s'] * 1e3:.1f} ms at {tr['config']['batch']} x "
          f"{tr['config']['context']} tokens")
    print()
    return {"rounds": rounds, "single": single, "single_1thread": single1, "data_parallel": dp,
            "transformer": tr,
            "throughput_ratio_blocking": ratio_b, "throughput_ratio_overlap": ratio_o,
            "comm_fraction": comm / step, "overlap_hidden_fraction": hidden,
            "model_inputs": {
                "mlp": {"grad_bytes": dp["grad_bytes"], "compute_s": step - comm},
                "transformer": {"grad_bytes": tr["grad_bytes"], "compute_s": tr["step_s"]}}}


def main(argv: list[str]) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--rounds", type=int, default=3,
                    help="run the configurations in turn this many times (shared machine)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        result = {"single": child_single, "dp": child_dp,
                  "transformer": child_transformer}[args.child](args)
        if result is not None:
            with open(args.out, "w") as f:
                json.dump(result, f)
        return {}
    common.print_header("data-parallel training step")
    flags = ["--quick"] if args.quick else []
    rounds = [(run_child(__file__, ["single", *flags], ranks=1, threads=2),
               run_child(__file__, ["single", *flags], ranks=1, threads=1),
               run_child(__file__, ["dp", *flags], ranks=2, threads=1))
              for _ in range(args.rounds)]
    tr = run_child(__file__, ["transformer", *flags], ranks=1, threads=1)
    r = report(rounds, tr)
    common.dump_json(args.json, r)
    return r


if __name__ == "__main__":
    main(sys.argv[1:])
