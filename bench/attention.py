"""Causal self-attention, forward + backward (sum of squares of the output, gradients of q, k,
v), float32, batch 1 x 8 heads x T=2048 x d=64 (``--quick``: T=512): jitgraph with the fused
tiled kernels (the graph rewrite of ``softmax(q k^T / sqrt(d) masked) v``) against the same
program with attention left unfused, torch.compile and jax.jit of the same source; with
jitgraph's planned peak and largest scratch buffer (``memory_analysis()``), against the
(T, T) score matrix.

    python bench/attention.py [--quick] [--json out.json]
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits)

import sys

import numpy as np

from common import ResultTable, check_close, guarded, import_jax, import_torch, timeit


def scale_of(x) -> float:
    """An absolute tolerance for float32 gradients: 1e-4 of their largest magnitude."""
    return 1e-4 * float(np.abs(np.asarray(x)).max())

HEADS, DIM = 8, 64


def run(args) -> dict:
    import jitgraph
    import jitgraph.nn as nn
    import jitgraph.numpy as jnp

    t = 512 if args.quick else 2048
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, HEADS, t, DIM)).astype(np.float32) for _ in range(3))
    mask = np.tril(np.ones((t, t), bool))

    def loss(q, k, v):
        return jnp.sum(nn.dot_product_attention(q, k, v, mask) ** 2)

    step = jitgraph.grad(loss, argnums=(0, 1, 2))
    reps = dict(warmup=1, repeats=3 if args.quick else 7, max_time=20.0)
    scores = t * t * 4
    table = ResultTable(f"causal attention fwd+bwd, 1 x {HEADS} heads x T={t} x d={DIM}, float32",
                        unit="ms", extra_cols=("planned peak MiB", "largest buffer / TxT",
                                               "check"))
    out: dict = {}

    def jitgraph_row(name, fused: bool):
        # fused wherever the pattern matches (past the cost model): the kernels are measured
        ctx = jitgraph.attention.always_fused() if fused else jitgraph.attention.unfused()
        with ctx:
            f = jitgraph.jit(step)
            mem = f.lower(q, k, v).memory_analysis()
            ref = f(q, k, v)
            out[name] = ref
            table.add(name, timeit(lambda: f(q, k, v), **reps),
                      **{"planned peak MiB": f"{mem.peak_memory_in_bytes / 2**20:.1f}",
                         "largest buffer / TxT": f"{mem.largest_temp_in_bytes / scores:.3f}",
                         "check": "reference" if fused else
                         check_close(name, ref[0], out["jitgraph (fused)"][0],
                                     atol=scale_of(ref[0]))})
    guarded("jitgraph fused", jitgraph_row, "jitgraph (fused)", True)
    guarded("jitgraph unfused", jitgraph_row, "jitgraph unfused", False)
    want = out.get("jitgraph (fused)")

    torch = import_torch()
    if torch is not None:
        def torch_row():
            tm = torch.tensor(mask)

            def tstep(a, b, c):
                a, b, c = (x.detach().requires_grad_() for x in (a, b, c))
                s = a @ b.transpose(-1, -2) / DIM ** 0.5
                s = s.masked_fill(~tm, float(np.finfo(np.float32).min) / 2)
                (torch.softmax(s, -1) @ c).pow(2).sum().backward()
                return a.grad
            cstep = torch.compile(tstep)
            tq, tk, tv = (torch.tensor(x) for x in (q, k, v))
            g = cstep(tq, tk, tv)
            table.add("torch.compile", timeit(lambda: cstep(tq, tk, tv), **reps),
                      check=check_close("torch", g.numpy(), want[0], atol=scale_of(want[0]))
                      if want else "")
        guarded("torch.compile", torch_row)
    jax = import_jax()
    if jax is not None:
        def jax_row():
            import jax.numpy as xnp

            def jloss(a, b, c):
                s = a @ xnp.swapaxes(b, -1, -2) / DIM ** 0.5
                s = xnp.where(mask, s, np.finfo(np.float32).min / 2)
                return xnp.sum((jax.nn.softmax(s, axis=-1) @ c) ** 2)
            jstep = jax.jit(jax.grad(jloss, argnums=(0, 1, 2)))
            g = jstep(q, k, v)
            table.add("jax.jit", timeit(lambda: jstep(q, k, v), **reps),
                      check=check_close("jax", np.asarray(g[0]), want[0], atol=scale_of(want[0]))
                      if want else "")
        guarded("jax.jit", jax_row)
    table.print()
    return {"table": table.as_dict()}


if __name__ == "__main__":
    common.run_main(__doc__, "fused attention", "attention", run, sys.argv[1:])
