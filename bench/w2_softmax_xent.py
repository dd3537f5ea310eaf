"""W2: softmax cross-entropy forward + backward on rows of logits.

    loss(z, y) = -mean(sum((z - logsumexp(z, axis=1)) * y, axis=1)),   z float32 (rows, classes)

written out with the max subtracted, as users write it. Implementations: NumPy (manual
derivative), torch eager, torch.compile, jax.jit(jax.value_and_grad), jitgraph.jit(
jitgraph.value_and_grad). GB/s = (z and y read, gradient written: 12 bytes/element) / time.

A second table per shape takes integer labels, each framework's own loss as its users call
it: ``torch.nn.functional.cross_entropy``, ``jitgraph.nn.cross_entropy``, and in JAX the
labelled entries of ``jax.nn.log_softmax`` (``optax``'s formula); GB/s counts z read and the
gradient written (8 bytes/element).

    python bench/w2_softmax_xent.py [--quick] [--json out.json]
"""

from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy/torch/jax load)

import sys

import numpy as np

from common import (ResultTable, check_close, guarded, import_error, import_jax,
                    import_jitgraph, import_torch, timeit)

SHAPES_FULL = ((8192, 1000), (4096, 32000))
SHAPES_QUICK = ((2048, 1000),)


def make_data(rows: int, classes: int, seed: int = 0):
    r = np.random.default_rng(seed)
    z = r.standard_normal((rows, classes), dtype=np.float32)
    y = np.zeros((rows, classes), np.float32)
    y[np.arange(rows), r.integers(0, classes, rows)] = 1.0
    return z, y


def make_loss(jnp):
    def loss(z, y):
        m = jnp.max(z, axis=1, keepdims=True)
        lse = m + jnp.log(jnp.sum(jnp.exp(z - m), axis=1, keepdims=True))
        return -jnp.mean(jnp.sum((z - lse) * y, axis=1))
    return loss


def numpy_value_and_grad(z, y):
    m = z.max(axis=1, keepdims=True)
    e = np.exp(z - m)
    s = e.sum(axis=1, keepdims=True)
    loss = -np.sum((z - m - np.log(s)) * y) / np.float32(z.shape[0])
    return loss, (e / s - y) * np.float32(1.0 / z.shape[0])


def reference(z, y):
    z64 = z.astype(np.float64)
    m = z64.max(axis=1, keepdims=True)
    e = np.exp(z64 - m)
    s = e.sum(axis=1, keepdims=True)
    return (float(-np.sum((z64 - m - np.log(s)) * y) / z.shape[0]),
            (e / s - y) / z.shape[0])


def add_row(table, name, fn, nbytes, ref, args, note=""):
    value, grad = fn()
    check = check_close(name, value, ref[0], rtol=1e-3)
    if check == "ok":
        check = check_close(name, grad, ref[1], rtol=2e-3, atol=1e-8)
    t = timeit(fn, warmup=2 if args.quick else 3, repeats=10 if args.quick else 40,
               max_time=2.5 if args.quick else 6.0, min_repeats=5)
    table.add(name, t, note, check=check, **{"GB/s": f"{nbytes / t.median / 1e9:.2f}"})


def framework_rows(table, z, y, losses, nbytes, ref, args) -> None:
    """One row per framework: ``losses`` maps 'numpy' to a value-and-gradient function and
    'torch', 'jax', 'jitgraph' to a function of the framework's module giving its loss."""
    guarded("numpy", add_row, table, "numpy (manual derivative)",
            lambda: losses["numpy"](z, y), nbytes, ref, args)
    torch = import_torch()
    if torch is None:
        for name in ("torch eager", "torch.compile"):
            table.add_unavailable(name, f"n/a ({import_error('torch')})")
    else:
        loss = losses["torch"](torch)
        zt, yt = torch.tensor(z), torch.tensor(y)

        def eager():
            zg = zt.detach().requires_grad_()
            v = loss(zg, yt)
            v.backward()
            return v.detach(), zg.grad
        guarded("torch eager", add_row, table, "torch eager", eager, nbytes, ref, args)

        def compiled():
            vg = torch.compile(torch.func.grad_and_value(loss), dynamic=False)

            def call():
                g, v = vg(zt, yt)
                return v, g
            add_row(table, "torch.compile", call, nbytes, ref, args)
        guarded("torch.compile", compiled)

    jax = import_jax()
    if jax is None:
        table.add_unavailable("jax.jit", f"n/a ({import_error('jax')})")
    else:
        def jax_row():
            vg = jax.jit(jax.value_and_grad(losses["jax"](jax)))
            zj, yj = jax.numpy.asarray(z), jax.numpy.asarray(y)
            add_row(table, "jax.jit", lambda: vg(zj, yj), nbytes, ref, args)
        guarded("jax.jit", jax_row)

    def jitgraph_row():
        jg = import_jitgraph()
        if jg is None:
            raise RuntimeError(import_error("jitgraph"))
        vg = jg.jit(jg.value_and_grad(losses["jitgraph"](jg)))
        add_row(table, "jitgraph.jit", lambda: vg(z, y), nbytes, ref, args)
    guarded("jitgraph", jitgraph_row)
    table.print()
    print()


def run_shape(shape, args) -> ResultTable:
    z, y = make_data(*shape)
    table = ResultTable(f"W2: softmax cross-entropy value+grad, {shape[0]}x{shape[1]} float32 "
                        "(ms/call)", unit="ms", extra_cols=("GB/s", "check"))
    framework_rows(table, z, y, {
        "numpy": numpy_value_and_grad,
        "torch": lambda torch: make_loss(torch_namespace(torch)),
        "jax": lambda jax: make_loss(jax.numpy),
        "jitgraph": lambda jg: make_loss(jg.numpy),
    }, 12 * z.size, reference(z, y), args)
    return table


def numpy_labels(z, labels):
    """Value and gradient of the integer-label loss in z's own dtype (float64: the
    reference)."""
    m = z.max(axis=1, keepdims=True)
    e = np.exp(z - m)
    s = e.sum(axis=1, keepdims=True)
    rows = np.arange(z.shape[0])
    loss = np.mean(np.log(s[:, 0]) + m[:, 0] - z[rows, labels])
    g = e / s
    g[rows, labels] -= 1.0
    return loss, g * z.dtype.type(1.0 / z.shape[0])


def jax_label_loss(jax):
    """optax's softmax_cross_entropy_with_integer_labels, as a mean."""
    jnp = jax.numpy

    def loss(z, y):
        logp = jax.nn.log_softmax(z, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=-1))
    return loss


def run_labels(shape, args) -> ResultTable:
    """The same rows with integer labels, through each framework's cross-entropy."""
    z, y = make_data(*shape)
    labels = y.argmax(axis=1)
    table = ResultTable(f"W2 with integer labels: each framework's cross-entropy, {shape[0]}x"
                        f"{shape[1]} float32 (ms/call)", unit="ms", extra_cols=("GB/s", "check"))
    framework_rows(table, z, labels, {
        "numpy": numpy_labels,
        "torch": lambda torch: torch.nn.functional.cross_entropy,
        "jax": jax_label_loss,
        "jitgraph": lambda jg: jg.nn.cross_entropy,
    }, 8 * z.size, numpy_labels(z.astype(np.float64), labels), args)
    return table


def torch_namespace(torch):
    """The few jnp-style functions the loss uses, on torch tensors."""
    class T:
        max = staticmethod(lambda x, axis, keepdims: torch.amax(x, dim=axis, keepdim=keepdims))
        sum = staticmethod(lambda x, axis=None, keepdims=False:
                           torch.sum(x, dim=axis, keepdim=keepdims))
        exp = staticmethod(torch.exp)
        log = staticmethod(torch.log)
        mean = staticmethod(torch.mean)
    return T


def run(args) -> dict:
    shapes = SHAPES_QUICK if args.quick else SHAPES_FULL
    out = {}
    for r, c in shapes:
        out[f"{r}x{c}"] = run_shape((r, c), args).as_dict()
        out[f"{r}x{c} labels"] = run_labels((r, c), args).as_dict()
    return out


def main(argv=None) -> dict:
    return common.run_main(__doc__, "W2 softmax cross-entropy", "w2", run, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
