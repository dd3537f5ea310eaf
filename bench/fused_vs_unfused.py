"""Fused rewrites against the same program with the rewrite off, across sizes: a training step
(forward + backward, float32) of attention (``sum(attention(q, k, v) ** 2)``, gradients of q,
k, v; B*H heads x T x head size, causal and not) and of linear cross-entropy
(``value_and_grad`` of the mean ``cross_entropy(h @ W, y)``; N tokens x d x vocabulary V).

Each configuration compiles the step twice: with the rewrite applied whatever the cost model
says (``always_fused()``) and with it off (``unfused()``); the two are timed interleaved
(``common.timeit_interleaved``: rounds of samples of each in turn), so both see the same mix
of a shared machine's slow and fast phases. The table gives the medians, their ratio
(fused / unfused: below 1 the rewrite wins) and what the cost model (the records' ``wins``)
decides at that shape, so its thresholds can be checked against the measurements.

    python bench/fused_vs_unfused.py [--quick] [--only attention|linear_ce] [--json out.json]
    python bench/fused_vs_unfused.py --fit [--load out.json]

``--fit`` prints the cost-model constants (``FUSED_US``, ``UNFUSED_US`` of
``jitgraph/fused/attention.py`` and ``jitgraph/fused/linear_ce.py``) fitted to the
measurements (these, or a run's ``--json`` read back with ``--load``): each side's medians as
a non-negative sum of its terms (``cost_terms``), rows weighted by 1 / time so that small
shapes count as much as large.
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits)

import itertools
import json
import sys

import numpy as np

from common import check_close, timeit_interleaved

ATTENTION_GRID = dict(bh=(1, 8, 32), t=(16, 64, 128, 512), d=(16, 32, 64, 128),
                      causal=(False, True))
LINEAR_CE_GRID = dict(n=(64, 512, 4096), d=(64, 256), v=(64, 512, 8192))
QUICK_ATTENTION = dict(bh=(1, 8), t=(16, 128), d=(16, 64), causal=(True,))
QUICK_LINEAR_CE = dict(n=(64, 4096), d=(64,), v=(64, 8192))


def _grid(spec: dict) -> list[dict]:
    keys = list(spec)
    return [dict(zip(keys, vals)) for vals in itertools.product(*spec.values())]


def _compare(step, args, fused_ctx, unfused_ctx, reps: dict) -> tuple:
    """(fused Timing, unfused Timing, check) of ``step`` compiled each way."""
    import jitgraph
    with fused_ctx():
        f = jitgraph.jit(step)
        want = f(*args)
    with unfused_ctx():
        u = jitgraph.jit(step)
        got = u(*args)
    ref = np.asarray(jitgraph.tree_leaves(want)[-1])
    check = check_close("unfused", jitgraph.tree_leaves(got)[-1], ref,
                        atol=1e-4 * float(np.abs(ref).max()) + 1e-6)
    def fused():            # each called inside its context: jit keeps a program per override
        with fused_ctx():   # state, and outside both it would run the cost model's choice
            return f(*args)

    def unfused():
        with unfused_ctx():
            return u(*args)
    t = timeit_interleaved({"fused": fused, "unfused": unfused}, **reps)
    return t["fused"], t["unfused"], check


def attention_rows(grid: dict, reps: dict) -> list[dict]:
    import jitgraph
    import jitgraph.nn as nn
    import jitgraph.numpy as jnp
    rows = []
    for c in _grid(grid):
        bh, t, d, causal = c["bh"], c["t"], c["d"], c["causal"]
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal((1, bh, t, d)).astype(np.float32) for _ in range(3))
        mask = np.tril(np.ones((t, t), bool)) if causal else None

        def loss(q, k, v, mask=mask):
            return jnp.sum(nn.dot_product_attention(q, k, v, mask) ** 2)
        step = jitgraph.grad(loss, argnums=(0, 1, 2))
        tf, tu, check = _compare(step, (q, k, v), jitgraph.attention.always_fused,
                                 jitgraph.attention.unfused, reps)
        rows.append(_row("attention", c, tf, tu, check))
    return rows


def linear_ce_rows(grid: dict, reps: dict) -> list[dict]:
    import jitgraph
    import jitgraph.nn as nn
    rows = []
    for c in _grid(grid):
        n, d, v = c["n"], c["d"], c["v"]
        rng = np.random.default_rng(0)
        h = rng.standard_normal((n, d)).astype(np.float32)
        w = (rng.standard_normal((d, v)) / np.sqrt(d)).astype(np.float32)
        y = rng.integers(0, v, n)
        step = jitgraph.value_and_grad(lambda h, w, y: nn.cross_entropy(h @ w, y),
                                       argnums=(0, 1))
        tf, tu, check = _compare(step, (h, w, y), jitgraph.linear_ce.always_fused,
                                 jitgraph.linear_ce.unfused, reps)
        rows.append(_row("linear_ce", c, tf, tu, check))
    return rows


def _row(op: str, case: dict, fused, unfused, check: str) -> dict:
    """One shape's result: both timings, their ratio, the check, and what the cost model
    decides there (printed as it comes)."""
    row = dict(op=op, **case, fused_ms=fused.median * 1e3, unfused_ms=unfused.median * 1e3,
               ratio=fused.median / unfused.median, check=check, other_load=fused.other_load)
    est = _estimate(row)
    row.update(model=est.wins, model_ratio=est.ratio)
    _print_row(row, _KEYS[op])
    return row


def _print_row(r: dict, keys: tuple) -> None:
    shape = " ".join(f"{k}={r[k]}" for k in keys)
    measured = "fused" if r["ratio"] < 1 else "unfused"
    model = "fused" if r["model"] else "unfused"
    flag = "" if measured == model else "  <- model differs"
    load = r["other_load"]
    print(f"  {r['op']:9s} {shape:34s} fused {r['fused_ms']:9.3f} ms  unfused "
          f"{r['unfused_ms']:9.3f} ms  ratio {r['ratio']:6.2f}  model {r['model_ratio']:6.2f} "
          f"-> {model:7s} other {'' if load is None else f'{load:.2f}':5s} {r['check']}{flag}",
          flush=True)


_KEYS = {"attention": ("bh", "t", "d", "causal"), "linear_ce": ("n", "d", "v")}


def _estimate(row: dict):
    """The cost model's estimate at a row's shape, for this run's thread count."""
    if row["op"] == "attention":
        from jitgraph.attention import cost_estimate
        t, d = row["t"], row["d"]
        return cost_estimate(row["bh"], t, t, d, d, row["causal"], threads=common.THREADS)
    from jitgraph.linear_ce import cost_estimate
    return cost_estimate(row["n"], row["d"], row["v"], threads=common.THREADS)


def _terms(row: dict) -> tuple[dict, dict]:
    if row["op"] == "attention":
        from jitgraph.attention import cost_terms
        t, d = row["t"], row["d"]
        return cost_terms(row["bh"], t, t, d, d, row["causal"], threads=common.THREADS)
    from jitgraph.linear_ce import cost_terms
    return cost_terms(row["n"], row["d"], row["v"], threads=common.THREADS)


def fit(rows: list[dict]) -> dict:
    """{"fused": {term: us}, "unfused": {term: us}} fitted to ``rows`` (one op's)."""
    from scipy.optimize import nnls
    out = {}
    for side, col in (("fused", 0), ("unfused", 1)):
        terms = [_terms(r)[col] for r in rows]
        keys = list(terms[0])
        t_us = np.array([r[side + "_ms"] * 1e3 for r in rows])
        a = np.array([[tm[k] for k in keys] for tm in terms], float) / t_us[:, None]
        scale = a.max(0)
        scale[scale == 0] = 1.0
        coef, _ = nnls(a / scale, np.ones(len(rows)))
        out[side] = {k: float(c) for k, c in zip(keys, coef / scale)}
    return out


def _print_fit(name: str, rows: list[dict]) -> None:
    f = fit(rows)
    for side in ("fused", "unfused"):
        body = ", ".join(f"{k!r}: {v:.3g}" for k, v in f[side].items())
        print(f"{name} {side.upper()}_US = {{{body}}}")
    errs = []
    for r in rows:
        ft, ut = _terms(r)
        ef = sum(f["fused"][k] * n for k, n in ft.items())
        eu = sum(f["unfused"][k] * n for k, n in ut.items())
        errs.append(np.log((ef / eu) / r["ratio"]))
    print(f"  fitted ratio / measured ratio: median {np.exp(np.median(errs)):.2f}, "
          f"worst {np.exp(np.max(np.abs(errs))):.2f}x")


def run(args) -> dict:
    if args.load:
        with open(args.load) as fh:
            out = json.load(fh)["fused_vs_unfused"]
        for name, rows in out.items():     # the measurements against the model as it is now
            for r in rows:
                est = _estimate(r)
                r.update(model=est.wins, model_ratio=est.ratio)
                _print_row(r, _KEYS[name])
            _summary(name, rows)
            _print_fit(name, rows)
        return out
    reps = dict(warmup=1, repeats=6 if args.quick else 10, per_round=2, max_time=4.0,
                settle=0.02)
    out: dict = {}
    if args.only in (None, "attention"):
        print("== attention training step: fused / unfused (ratio < 1: fusing wins) ==")
        out["attention"] = attention_rows(QUICK_ATTENTION if args.quick else ATTENTION_GRID,
                                          reps)
    if args.only in (None, "linear_ce"):
        print("== linear cross-entropy value and grad: fused / unfused ==")
        out["linear_ce"] = linear_ce_rows(QUICK_LINEAR_CE if args.quick else LINEAR_CE_GRID,
                                          reps)
    for name, rows in out.items():
        _summary(name, rows)
        if args.fit:
            _print_fit(name, rows)
    return out


def _summary(name: str, rows: list[dict]) -> None:
    """How often the model's decision matches the measured winner, and the worst measured
    ratio where it fuses."""
    agree = sum((r["ratio"] < 1) == r["model"] for r in rows)
    lost = [r for r in rows if r["model"] and r["ratio"] > 1]
    print(f"{name}: the cost model agrees with the measurement at {agree} of {len(rows)} "
              f"shapes; where it fuses, the worst fused/unfused ratio is "
              f"{max([r['ratio'] for r in rows if r['model']], default=float('nan')):.2f} "
              f"({len(lost)} shapes above 1)")


def _extra(p) -> None:
    p.add_argument("--only", choices=("attention", "linear_ce"), default=None,
                   help="measure one fused op only")
    p.add_argument("--fit", action="store_true",
                   help="print the cost-model constants fitted to the measurements")
    p.add_argument("--load", metavar="PATH",
                   help="fit the rows of an earlier run's --json instead of measuring")


if __name__ == "__main__":
    common.run_main(__doc__, "fused rewrites against unfused programs", "fused_vs_unfused",
                    run, sys.argv[1:], extra=_extra)
