"""W3: value and gradient of an elementwise-heavy scalar function.

    f(x) = sum(tanh(x) * sigmoid(1.5 * x + 0.1) + 0.5 * x**2),   x float32 of 2^20 / 2^24

Implementations: NumPy (manual derivative), torch eager, torch.compile,
jax.jit(jax.value_and_grad(f)), jitgraph.jit(jitgraph.value_and_grad(f)).
GB/s = (bytes read + written: x in, gradient out = 8 bytes/element) / time.

    python bench/w3_elementwise_grad.py [--quick] [--json out.json]
"""

from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy/torch/jax load)

import sys

import numpy as np

from common import (ResultTable, check_close, guarded, import_error, import_jax,
                    import_jitgraph, import_torch, short_error, timeit)

SIZES_FULL = (2 ** 20, 2 ** 24)
SIZES_QUICK = (2 ** 20,)


def make_x(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(n, dtype=np.float32) * np.float32(2.0)


# ----------------------------------------------------------------------------- NumPy


def numpy_value_and_grad(x: np.ndarray):
    t = np.tanh(x)
    s = np.exp(-(np.float32(1.5) * x + np.float32(0.1)))
    s += np.float32(1.0)
    np.reciprocal(s, out=s)                       # sigmoid(1.5 x + 0.1)
    value = np.sum(t * s + np.float32(0.5) * x * x)
    # d/dx: (1 - t^2) s + 1.5 t s (1 - s) + x
    grad = (np.float32(1.0) - t * t) * s
    grad += np.float32(1.5) * t * s * (np.float32(1.0) - s)
    grad += x
    return value, grad


def reference(x: np.ndarray):
    x64 = x.astype(np.float64)
    t = np.tanh(x64)
    s = 1.0 / (1.0 + np.exp(-(1.5 * x64 + 0.1)))
    return float(np.sum(t * s + 0.5 * x64 * x64)), (1.0 - t * t) * s + 1.5 * t * s * (1.0 - s) + x64


# ----------------------------------------------------------------------------- f, shared source


def make_f(jnp, sigmoid):
    def f(x):
        return jnp.sum(jnp.tanh(x) * sigmoid(1.5 * x + 0.1) + 0.5 * x ** 2)
    return f


def torch_f(torch):
    def f(x):
        return torch.sum(torch.tanh(x) * torch.sigmoid(1.5 * x + 0.1) + 0.5 * x ** 2)
    return f


# ----------------------------------------------------------------------------- bench


def add_row(table, name, fn, n, ref, args, note=""):
    """fn() -> (value, grad).  Checks the first result, then times."""
    value, grad = fn()
    check = check_close(name, value, ref[0], rtol=1e-3)
    if check == "ok":
        check = check_close(name, grad, ref[1], rtol=2e-3, atol=1e-5)
    t = timeit(fn, warmup=2 if args.quick else 3, repeats=10 if args.quick else 60,
               max_time=2.5 if args.quick else 6.0, min_repeats=5)
    gbs = 8.0 * n / t.median / 1e9
    table.add(name, t, note, check=check, **{"GB/s": f"{gbs:.2f}"})


def run_size(n: int, args) -> ResultTable:
    x = make_x(n)
    ref = reference(x)
    table = ResultTable(f"W3: value+grad of sum(tanh(x)*sigmoid(1.5x+0.1)+0.5x^2), "
                        f"n=2^{int(np.log2(n))} float32 (ms/call)", unit="ms",
                        extra_cols=("GB/s", "check"))

    guarded("numpy", add_row, table, "numpy (manual derivative)",
            lambda: numpy_value_and_grad(x), n, ref, args)

    torch = import_torch()
    if torch is None:
        for name in ("torch eager", "torch.compile"):
            table.add_unavailable(name, f"n/a ({import_error('torch')})")
    else:
        f = torch_f(torch)
        xt = torch.tensor(x)

        def eager():
            xg = xt.detach().requires_grad_()
            v = f(xg)
            v.backward()
            return v.detach(), xg.grad
        guarded("torch eager", add_row, table, "torch eager", eager, n, ref, args)

        def compiled():
            errors = []
            try:
                vg = torch.compile(torch.func.grad_and_value(f), dynamic=False)

                def call():
                    g, v = vg(xt)
                    return v, g
                add_row(table, "torch.compile", call, n, ref, args,
                        note="compile(func.grad_and_value(f))")
                return
            except Exception as exc:
                errors.append(short_error(exc, 100))
                torch._dynamo.reset()
            try:
                fc = torch.compile(f, dynamic=False)

                def call2():
                    xg = xt.detach().requires_grad_()
                    v = fc(xg)
                    v.backward()
                    return v.detach(), xg.grad
                add_row(table, "torch.compile", call2, n, ref, args,
                        note="compile(f) + backward()")
                return
            except Exception as exc:
                errors.append(short_error(exc, 100))
            raise RuntimeError(" | ".join(errors))
        guarded("torch.compile", compiled)
        if not any(r["name"] == "torch.compile" for r in table.rows):
            table.add_unavailable("torch.compile", "failed (see above)")

    jax = import_jax()
    if jax is None:
        table.add_unavailable("jax.jit", f"n/a ({import_error('jax')})")
    else:
        def jax_row():
            vg = jax.jit(jax.value_and_grad(make_f(jax.numpy, jax.nn.sigmoid)))
            xj = jax.numpy.asarray(x)
            add_row(table, "jax.jit", lambda: vg(xj), n, ref, args)
        guarded("jax.jit", jax_row)

    def jitgraph_row():
        jg = import_jitgraph()
        if jg is None:
            raise RuntimeError(import_error("jitgraph"))
        vg = jg.jit(jg.value_and_grad(make_f(jg.numpy, jg.nn.sigmoid)))
        add_row(table, "jitgraph.jit", lambda: vg(x), n, ref, args)
    guarded("jitgraph", jitgraph_row)
    if not any(r["name"] == "jitgraph.jit" for r in table.rows):
        table.add_unavailable("jitgraph.jit", "unavailable")

    table.print()
    print()
    return table


def run(args) -> dict:
    sizes = SIZES_QUICK if args.quick else SIZES_FULL
    return {f"n=2^{int(np.log2(n))}": run_size(n, args).as_dict() for n in sizes}


def main(argv=None) -> dict:
    return common.run_main(__doc__, "W3 elementwise value+grad", "w3", run, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
