"""The CNN training step of examples/cnn_digits.py: jitgraph.train_step vs PyTorch eager and
torch.compile, same model, weights, batch (32 x 8 x 8 x 1) and Adam.

    python bench/cnn_step.py [--quick] [--json out.json]
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits)

import sys

import numpy as np

from common import ResultTable, check_close, guarded, import_torch, timeit
from train_models import torch_cnn, torch_steps

BATCH = 32
LR = 1e-3


def run(args) -> dict:
    import jitgraph
    import jitgraph.optim as optim
    import jitgraph.random as jr
    from cnn_digits import CNN, loss_fn

    rng = np.random.default_rng(0)
    x = rng.random((BATCH, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 10, BATCH)
    model0 = CNN(jr.key(0))
    ref_loss = float(loss_fn(model0, x, y))
    table = ResultTable(f"CNN digits training step, batch {BATCH}, float32, Adam (ms/step)",
                        unit="ms", extra_cols=("check",))
    reps = dict(warmup=2 if args.quick else 5, repeats=10 if args.quick else 50,
                max_time=3.0 if args.quick else 10.0)

    torch = import_torch()
    if torch is not None:
        tx = torch.tensor(x.transpose(0, 3, 1, 2).copy())
        ty = torch.tensor(y)
        loss_of = lambda m, a, b: torch.nn.functional.cross_entropy(m(a), b)  # noqa: E731

        def torch_eager():
            step, _ = torch_steps(torch, torch_cnn(torch, model0), loss_of, LR)
            first = float(step(tx, ty))
            table.add("torch eager", timeit(lambda: step(tx, ty), **reps),
                      check=check_close("torch eager", first, ref_loss))
        guarded("torch eager", torch_eager)

        def torch_compiled():
            step, _ = torch_steps(torch, torch_cnn(torch, model0), loss_of, LR)
            cstep = torch.compile(step)
            first = float(cstep(tx, ty))
            table.add("torch.compile", timeit(lambda: cstep(tx, ty), **reps),
                      check=check_close("torch.compile", first, ref_loss))
        guarded("torch.compile", torch_compiled)
    else:
        table.add_unavailable("torch eager", "n/a (pip install torch==2.13.0)")

    def jitgraph_bench():
        opt = optim.adam(LR)
        step = jitgraph.train_step(loss_fn, opt)
        state = {"m": jitgraph.train.copy_tree(model0)}
        state["s"] = opt.init(state["m"])
        m, s, first = step(state["m"], state["s"], x, y)
        state.update(m=m, s=s)

        def call():
            state["m"], state["s"], loss = step(state["m"], state["s"], x, y)
            return loss
        table.add("jitgraph.train_step", timeit(call, **reps),
                  check=check_close("jitgraph", float(first), ref_loss))
    guarded("jitgraph", jitgraph_bench)
    table.print()
    return {"table": table.as_dict()}


if __name__ == "__main__":
    common.run_main(__doc__, "CNN train step", "cnn_step", run, sys.argv[1:])
