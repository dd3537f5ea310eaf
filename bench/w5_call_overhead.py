"""W5: per-call overhead of a cached jitted function on tiny inputs.

    f(a, b) = (a * b + a).sum(),   a, b float32 of 16 elements

Implementations: plain NumPy, a bare Numba @njit of the same expression (and of a
hand-fused loop), jax.jit, torch.compile, jitgraph.jit.  Each timing sample is many
back-to-back calls (10,000 by default); the table reports µs per call.  JAX dispatches
asynchronously, so each JAX call's result is waited for (block_until_ready).

    python bench/w5_call_overhead.py [--quick] [--json out.json] [--calls N]
"""

from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy/torch/jax load)

import sys

import numpy as np

from common import (ResultTable, check_close, guarded, import_error, import_jax,
                    import_jitgraph, import_torch, time_per_call)

N = 16


def f_generic(a, b):
    return (a * b + a).sum()


def add_row(table, name, fn, ref, args, sync_each=None, note=""):
    check = check_close(name, fn() if sync_each is None else sync_each(fn()), ref, rtol=1e-5)
    t = time_per_call(fn, number=args.calls, repeats=5 if args.quick else 15,
                      warmup_calls=200, sync_each=sync_each,
                      max_time=3.0 if args.quick else 8.0)
    table.add(name, t, note, check=check)


def run(args) -> dict:
    rng = np.random.default_rng(0)
    a = rng.standard_normal(N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    ref = float(np.sum(a.astype(np.float64) * b + a))
    table = ResultTable(f"W5: per-call overhead of cached f(a, b) = (a*b + a).sum(), "
                        f"{N} float32 (µs/call, {args.calls} calls/sample)", unit="us",
                        extra_cols=("check",))

    guarded("numpy", add_row, table, "numpy", lambda: f_generic(a, b), ref, args)

    def numba_rows():
        import numba

        f_nb = numba.njit(f_generic)

        @numba.njit
        def f_loop(a, b):
            s = np.float32(0.0)
            for i in range(a.shape[0]):
                s += a[i] * b[i] + a[i]
            return s

        add_row(table, "numba @njit", lambda: f_nb(a, b), ref, args, note="same expression")
        add_row(table, "numba @njit (loop)", lambda: f_loop(a, b), ref, args,
                note="hand-fused loop")
    guarded("numba", numba_rows)

    jax = import_jax()
    if jax is None:
        table.add_unavailable("jax.jit", f"n/a ({import_error('jax')})")
    else:
        def jax_row():
            fj = jax.jit(f_generic)
            aj, bj = jax.numpy.asarray(a), jax.numpy.asarray(b)
            add_row(table, "jax.jit", lambda: fj(aj, bj), ref, args,
                    sync_each=lambda r: r.block_until_ready(), note="+ block_until_ready")
        guarded("jax.jit", jax_row)

    torch = import_torch()
    if torch is None:
        table.add_unavailable("torch.compile", f"n/a ({import_error('torch')})")
    else:
        def torch_row():
            ft = torch.compile(f_generic, dynamic=False)
            at, bt = torch.from_numpy(a), torch.from_numpy(b)
            add_row(table, "torch.compile", lambda: ft(at, bt), ref, args)
        guarded("torch.compile", torch_row)

    def jitgraph_row():
        jg = import_jitgraph()
        if jg is None:
            raise RuntimeError(import_error("jitgraph"))
        fg = jg.jit(f_generic)
        add_row(table, "jitgraph.jit", lambda: fg(a, b), ref, args)
    guarded("jitgraph", jitgraph_row)
    if not any(r["name"] == "jitgraph.jit" for r in table.rows):
        table.add_unavailable("jitgraph.jit", "unavailable")

    table.print()
    print()
    return {"table": table.as_dict()}


def main(argv=None) -> dict:
    def extra(p):
        p.add_argument("--calls", type=int, default=10_000, help="calls per timing sample")
    return common.run_main(__doc__, "W5 call overhead", "w5", run, argv, extra)


if __name__ == "__main__":
    main(sys.argv[1:])
