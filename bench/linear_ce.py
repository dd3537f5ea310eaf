"""Fused linear cross-entropy, value and gradients of ``cross_entropy(h @ W, labels)`` (mean),
float32, 4,096 tokens x d=512 x vocabulary 32,000 (``--quick``: 1,024 x 256 x 8,192):
jitgraph with the chunked kernels (the graph rewrite; forward and backward in one sweep)
against the same program unfused, torch.compile and jax.jit of the same source; with each
jitgraph program's planned peak (``memory_analysis()``) against the logits' size.

    python bench/linear_ce.py [--quick] [--json out.json]
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits)

import sys

import numpy as np

from common import ResultTable, check_close, guarded, import_jax, import_torch, timeit


def scale_of(x) -> float:
    """An absolute tolerance for float32 gradients: 1e-4 of their largest magnitude."""
    return 1e-4 * float(np.abs(np.asarray(x)).max())


def run(args) -> dict:
    import jitgraph
    import jitgraph.nn as nn

    n, d, v = (1024, 256, 8192) if args.quick else (4096, 512, 32000)
    rng = np.random.default_rng(0)
    h = rng.standard_normal((n, d)).astype(np.float32)
    w = (rng.standard_normal((d, v)) / np.sqrt(d)).astype(np.float32)
    y = rng.integers(0, v, n)

    def loss(h, w, y):
        return nn.cross_entropy(h @ w, y)

    step = jitgraph.value_and_grad(loss, argnums=(0, 1))
    reps = dict(warmup=1, repeats=3 if args.quick else 5, max_time=30.0)
    logits = n * v * 4
    table = ResultTable(f"linear cross-entropy value+grad, {n} tokens x d={d} x V={v}, float32",
                        unit="ms", extra_cols=("planned peak MiB", "peak / logits", "check"))
    out: dict = {}

    def jitgraph_row(name, fused: bool):
        # fused wherever the pattern matches (past the cost model): the kernels are measured
        ctx = jitgraph.linear_ce.always_fused() if fused else jitgraph.linear_ce.unfused()
        with ctx:
            f = jitgraph.jit(step)
            mem = f.lower(h, w, y).memory_analysis()
            res = f(h, w, y)
            out[name] = res
            table.add(name, timeit(lambda: f(h, w, y), **reps),
                      **{"planned peak MiB": f"{mem.peak_memory_in_bytes / 2**20:.1f}",
                         "peak / logits": f"{mem.peak_memory_in_bytes / logits:.2f}",
                         "check": "reference" if fused else
                         check_close(name, res[1][1], out["jitgraph (fused)"][1][1],
                                     atol=scale_of(res[1][1]))})
    guarded("jitgraph fused", jitgraph_row, "jitgraph (fused)", True)
    guarded("jitgraph unfused", jitgraph_row, "jitgraph unfused", False)
    want = out.get("jitgraph (fused)")

    torch = import_torch()
    if torch is not None:
        def torch_row():
            def tstep(a, b, c):
                a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
                lv = torch.nn.functional.cross_entropy(a @ b, c)
                lv.backward()
                return lv, b.grad
            cstep = torch.compile(tstep)
            th, tw, ty = torch.tensor(h), torch.tensor(w), torch.tensor(y)
            _, g = cstep(th, tw, ty)
            table.add("torch.compile", timeit(lambda: cstep(th, tw, ty), **reps),
                      check=check_close("torch", g.numpy(), want[1][1], atol=scale_of(want[1][1]))
                      if want else "")
        guarded("torch.compile", torch_row)
    jax = import_jax()
    if jax is not None:
        def jax_row():
            import jax.numpy as xnp

            def jloss(a, b, c):
                z = a @ b
                return xnp.mean(jax.nn.logsumexp(z, axis=1) - xnp.take_along_axis(
                    z, c[:, None], axis=1)[:, 0])
            jstep = jax.jit(jax.value_and_grad(jloss, argnums=(0, 1)))
            _, g = jstep(h, w, y)
            table.add("jax.jit", timeit(lambda: jstep(h, w, y), **reps),
                      check=check_close("jax", np.asarray(g[1]), want[1][1], atol=scale_of(want[1][1]))
                      if want else "")
        guarded("jax.jit", jax_row)
    table.print()
    return {"table": table.as_dict()}


if __name__ == "__main__":
    common.run_main(__doc__, "fused linear cross-entropy", "linear_ce", run, sys.argv[1:])
