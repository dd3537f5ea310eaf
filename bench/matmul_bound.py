"""Matmul-bound programs against their matrix products alone in OpenBLAS.

The MLP training steps (784-512-512-10 at batch 128, and 784-2048-2048-10 at batch 512;
tanh, softmax cross-entropy, SGD) are bound by their eight matrix products. This compiles
each step with ``jitgraph.jit``, reads the products from its fusion plan (shapes, and which
operands are transposed views), and times the same products alone: ``np.matmul`` into
preallocated outputs on views with the same layouts, which NumPy hands to OpenBLAS's sgemm
without copying (the OpenBLAS NumPy's wheels bundle: the library the step's products call
too, ``kernels/blas.py``; the script prints which one they call). The ratio of the whole step
to its products alone is what the issue's "within 5 % of the same products in OpenBLAS alone"
speaks of: everything jitgraph adds (elementwise and row kernels, the SGD update, dispatch) is
in the difference.

    python bench/matmul_bound.py [--quick] [--json out.json]
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy loads)

import numpy as np

from common import ResultTable, fmt_time, import_jitgraph, print_kv, timeit_interleaved
import w1_mlp_train_step as w1

SIZES = {"784-512-512-10, batch 128": ((784, 512, 512, 10), 128),
         "784-2048-2048-10, batch 512": ((784, 2048, 2048, 10), 512)}


def products_of(lowered) -> list[tuple]:
    """``(a shape, a transposed, b shape, b transposed)`` of every matrix product in the plan,
    each shape the stored (row-major) one, before the transpose the product reads it with."""
    from jitgraph.compiler.fusion import MatmulStep
    out = []
    for s in lowered.plan.steps:
        if isinstance(s, MatmulStep):
            (_, ta, sa), (_, tb, sb) = s.a, s.b
            out.append((tuple(sa[-2:]), bool(ta), tuple(sb[-2:]), bool(tb)))
    return out


def products_alone(products, seed: int = 0):
    """A function running ``products`` with np.matmul into preallocated outputs."""
    rng = np.random.default_rng(seed)
    calls = []
    for sa, ta, sb, tb in products:
        a = rng.standard_normal(sa).astype(np.float32)
        b = rng.standard_normal(sb).astype(np.float32)
        a, b = (a.T if ta else a), (b.T if tb else b)
        calls.append((a, b, np.empty((a.shape[0], b.shape[1]), np.float32)))

    def run():
        for a, b, o in calls:
            np.matmul(a, b, out=o)
        return calls[-1][2]
    return run


def run(args) -> dict:
    jg = import_jitgraph()
    if jg is None:
        raise SystemExit("jitgraph is not importable")
    from jitgraph.kernels.blas import library
    sizes = dict(list(SIZES.items())[:1]) if args.quick else SIZES
    results = {}
    for label, (dims, batch) in sizes.items():
        w1.DIMS = dims
        params = w1.init_params()
        x, y = w1.make_data(batch=batch)
        step = w1.make_step(jg)
        products = products_of(step.lower(params, x, y))
        state = {"p": w1.copy_params(params)}

        def call_step():
            state["p"], loss = step(state["p"], x, y)
            return loss
        alone = products_alone(products)
        # interleaved: the machine's speed drifts between seconds (common.timeit_interleaved)
        t = timeit_interleaved({"step": call_step, "alone": alone},
                               repeats=15 if args.quick else 100,
                               max_time=6.0 if args.quick else 30.0)
        t_step, t_alone = t["step"], t["alone"]
        table = ResultTable(f"{label}: whole step vs its {len(products)} products alone "
                            "(ms per step)", unit="ms")
        table.add("jitgraph.jit step", t_step)
        table.add("the same products, np.matmul (NumPy's OpenBLAS)", t_alone)
        table.print()
        ratio = t_step.median / t_alone.median
        print_kv(f"{label}", [
            ("step / products alone", f"{ratio:.3f}  (step {fmt_time(t_step.median)}, "
                                      f"products {fmt_time(t_alone.median)})"),
            ("BLAS of the step's products", f"{library()} (kernels/blas.py)")])
        print()
        results[label] = {"step_s": t_step.median, "products_s": t_alone.median,
                          "ratio": ratio, "step_blas": library(), "products": products,
                          "table": table.as_dict()}
    return results


def main(argv=None) -> dict:
    return common.run_main(__doc__, "matmul-bound steps vs their products alone",
                           "matmul_bound", run, argv)


if __name__ == "__main__":
    main()
