"""The training step of examples/char_transformer.py (2 layers, dim 64, 4 heads, context 64,
batch 16, vocabulary 96, Adam): jitgraph.train_step vs PyTorch eager and torch.compile on the
same model and weights, in tokens per second.

    python bench/transformer_step.py [--quick] [--json out.json]
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits)

import sys

import numpy as np

from common import ResultTable, check_close, guarded, import_torch, timeit
from train_models import torch_steps, torch_transformer

BATCH, CONTEXT, DIM, HEADS, LAYERS, VOCAB = 16, 64, 64, 4, 2, 96
LR = 1e-3


def run(args) -> dict:
    import jitgraph
    import jitgraph.optim as optim
    import jitgraph.random as jr
    from char_transformer import CharTransformer, loss_fn

    rng = np.random.default_rng(0)
    ids = rng.integers(0, VOCAB, (BATCH, CONTEXT))
    tgt = rng.integers(0, VOCAB, (BATCH, CONTEXT))
    model0 = CharTransformer(VOCAB, CONTEXT, DIM, HEADS, LAYERS, jr.key(0))
    ref_loss = float(loss_fn(model0, ids, tgt))
    tokens = BATCH * CONTEXT
    table = ResultTable(f"char transformer training step, {LAYERS} layers, dim {DIM}, batch "
                        f"{BATCH} x {CONTEXT} tokens, Adam (ms/step)", unit="ms",
                        extra_cols=("tokens/s", "check"))
    reps = dict(warmup=2 if args.quick else 3, repeats=10 if args.quick else 30,
                max_time=5.0 if args.quick else 15.0)

    def add(name, timing, first):
        table.add(name, timing, **{"tokens/s": f"{tokens / timing.median:,.0f}",
                                   "check": check_close(name, float(first), ref_loss)})

    torch = import_torch()
    if torch is not None:
        tids, ttgt = torch.tensor(ids), torch.tensor(tgt)

        def loss_of(m, a, b):
            z = m(a)
            return torch.nn.functional.cross_entropy(z.reshape(-1, z.shape[-1]), b.reshape(-1))

        def torch_eager():
            step, _ = torch_steps(torch, torch_transformer(torch, model0), loss_of, LR)
            first = step(tids, ttgt)
            add("torch eager", timeit(lambda: step(tids, ttgt), **reps), first)
        guarded("torch eager", torch_eager)

        def torch_compiled():
            step, _ = torch_steps(torch, torch_transformer(torch, model0), loss_of, LR)
            cstep = torch.compile(step)
            first = cstep(tids, ttgt)
            add("torch.compile", timeit(lambda: cstep(tids, ttgt), **reps), first)
        guarded("torch.compile", torch_compiled)
    else:
        table.add_unavailable("torch eager", "n/a (pip install torch==2.13.0)")

    def jitgraph_bench():
        opt = optim.adam(LR)
        step = jitgraph.train_step(loss_fn, opt)
        m = jitgraph.train.copy_tree(model0)
        state = {"s": None}
        state["m"], state["s"], first = step(m, opt.init(m), ids, tgt)

        def call():
            state["m"], state["s"], loss = step(state["m"], state["s"], ids, tgt)
            return loss
        add("jitgraph.train_step", timeit(call, **reps), first)
    guarded("jitgraph", jitgraph_bench)
    table.print()
    return {"table": table.as_dict()}


if __name__ == "__main__":
    common.run_main(__doc__, "transformer train step", "transformer_step", run, sys.argv[1:])
