"""Reductions over one axis of a float32 matrix, the shapes of bias gradients and row norms:
``(sum(x, axis), max(x, axis))`` with jitgraph.jit, NumPy, torch.compile and jax.jit.

Why: a sum over the leading axis (a bias gradient: the batch's rows summed into one row) reads
memory with a stride when the reduced loop is innermost; jitgraph loops in column order there
(rows outside, one accumulator per output, blocks of outputs on threads), and threads over the
outputs only for a few rows (``STRIDED_COLUMN_MAX_ROWS``). Each shape takes one of those paths.
GB/s = bytes of x / time.

    python bench/reductions.py [--quick] [--json out.json]
"""

from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy/torch/jax load)

import sys

import numpy as np

from common import (ResultTable, check_close, guarded, import_error, import_jax,
                    import_jitgraph, import_torch, timeit)

#: (rows, columns, axis): leading-axis sums over many rows (column order), a few rows (threads
#: over the outputs), narrow outputs, and a last-axis reduction for comparison
SHAPES_FULL = ((2048, 1024, 0), (64, 32768, 0), (16, 131072, 0), (65536, 16, 0), (2048, 1024, 1))
SHAPES_QUICK = ((2048, 1024, 0), (16, 131072, 0))


def add_row(table, name, fn, x, ref, args, note=""):
    """fn() -> (sum, max): checked against the float64 reference, then timed."""
    got = fn()
    check = check_close(name, got[0], ref[0], rtol=1e-4, atol=1e-3)
    if check == "ok":
        check = check_close(name, got[1], ref[1], rtol=1e-7, atol=1e-7)   # (exact: a max)
    t = timeit(fn, warmup=2 if args.quick else 3, repeats=10 if args.quick else 60,
               max_time=2.0 if args.quick else 5.0, min_repeats=5)
    table.add(name, t, note, check=check, **{"GB/s": f"{x.nbytes / t.median / 1e9:.1f}"})


def run_shape(rows: int, cols: int, axis: int, args) -> ResultTable:
    x = np.random.default_rng(0).standard_normal((rows, cols), dtype=np.float32)
    ref = (x.astype(np.float64).sum(axis), x.max(axis))
    table = ResultTable(f"sum and max over axis {axis} of float32 ({rows}, {cols}) (ms/call)",
                        unit="ms", extra_cols=("GB/s", "check"))
    guarded("numpy", add_row, table, "numpy", lambda: (x.sum(axis), x.max(axis)), x, ref, args)

    def torch_fn(torch):
        xt = torch.tensor(x)
        fc = torch.compile(lambda a: (a.sum(axis), a.amax(axis)), dynamic=False)
        return lambda: fc(xt)

    def jax_fn(jax):
        jnp = jax.numpy
        fj = jax.jit(lambda a: (jnp.sum(a, axis), jnp.max(a, axis)))
        xj = jnp.asarray(x)
        return lambda: fj(xj)

    def jitgraph_fn(jg):
        gnp = jg.numpy
        fg = jg.jit(lambda a: (gnp.sum(a, axis), gnp.max(a, axis)))
        return lambda: fg(x)
    for name, module, key, make in (("torch.compile", import_torch, "torch", torch_fn),
                                    ("jax.jit", import_jax, "jax", jax_fn),
                                    ("jitgraph.jit", import_jitgraph, "jitgraph", jitgraph_fn)):
        mod = module()
        if mod is None:
            table.add_unavailable(name, f"n/a ({import_error(key)})")
        else:
            guarded(name, lambda: add_row(table, name, make(mod), x, ref, args))
    table.print()
    print()
    return table


def run(args) -> dict:
    shapes = SHAPES_QUICK if args.quick else SHAPES_FULL
    return {f"{r}x{c} axis {a}": run_shape(r, c, a, args).as_dict() for r, c, a in shapes}


def main(argv=None) -> dict:
    return common.run_main(__doc__, "Reductions over one axis", "reductions", run, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
