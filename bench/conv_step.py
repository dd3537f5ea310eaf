"""A small CNN training step on 28x28 images written with ``lax.conv_general_dilated`` and
``lax.reduce_window``: jitgraph.jit vs jax.jit (the same function, the other namespace) and
torch.compile (the same model in torch's NCHW layout), same weights, same batch, plain SGD.

    conv 3x3 (1 -> 32, SAME) + bias, relu, 2x2 max pool,
    conv 3x3 (32 -> 64, SAME) + bias, relu, 2x2 max pool, dense 3136 -> 10, mean cross-entropy

``--kernel 5`` uses 5x5 windows (a convolution's compile time must not grow with its taps).
Each row reports the median step and the first call (trace + compile + run); the first losses
must agree with jitgraph's. ``--busy N`` keeps N processes spinning (one CPU each) throughout.

    python bench/conv_step.py [--batch 64] [--kernel 3] [--busy N] [--quick] [--json out.json]
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits before numpy/torch/jax load)

import contextlib
import sys

import numpy as np

from common import (ResultTable, check_close, first_call_seconds, guarded, import_error,
                    import_jax, import_jitgraph, import_torch, timeit)

LR = 0.01
DN = ("NHWC", "HWIO", "NHWC")


def make_params(k: int, seed: int = 0) -> list[np.ndarray]:
    r = np.random.default_rng(seed)
    return [(r.standard_normal((k, k, 1, 32)) * 0.3).astype(np.float32),
            np.zeros(32, np.float32),
            (r.standard_normal((k, k, 32, 64)) * 0.06).astype(np.float32),
            np.zeros(64, np.float32),
            (r.standard_normal((7 * 7 * 64, 10)) * 0.02).astype(np.float32),
            np.zeros(10, np.float32)]


def make_step(jax, jnp, lax):
    """The step in a JAX-compatible namespace (jax or jitgraph)."""
    def pool(h):
        return lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def loss(p, x, y):
        w1, b1, w2, b2, w3, b3 = p
        h = pool(jax.nn.relu(lax.conv_general_dilated(x, w1, (1, 1), "SAME",
                                                      dimension_numbers=DN) + b1))
        h = pool(jax.nn.relu(lax.conv_general_dilated(h, w2, (1, 1), "SAME",
                                                      dimension_numbers=DN) + b2))
        logits = jnp.reshape(h, (h.shape[0], -1)) @ w3 + b3
        picked = jnp.take_along_axis(logits, y[:, None], axis=1)[:, 0]
        return jnp.mean(jax.nn.logsumexp(logits, axis=1) - picked)

    @jax.jit
    def step(p, x, y):
        value, g = jax.value_and_grad(loss)(p, x, y)
        return [a - LR * b for a, b in zip(p, g)], value
    return step


def torch_step(torch, params):
    """The same model in torch's layout: NCHW images, OIHW kernels, (C, H, W) flattening."""
    w1, b1, w2, b2, w3, b3 = params
    k = w1.shape[0]
    tp = [torch.tensor(a.transpose(3, 2, 0, 1).copy()) for a in (w1, w2)]
    # jitgraph flattens (H, W, C); torch (C, H, W): permute the dense rows to match
    w3t = w3.reshape(7, 7, 64, 10).transpose(2, 0, 1, 3).reshape(3136, 10)
    p = [tp[0], torch.tensor(b1), tp[1], torch.tensor(b2), torch.tensor(w3t.copy()),
         torch.tensor(b3)]
    F = torch.nn.functional

    def loss(p, x, y):
        h = F.max_pool2d(F.relu(F.conv2d(x, p[0], p[1], padding=k // 2)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, p[2], p[3], padding=k // 2)), 2)
        return F.cross_entropy(h.flatten(1) @ p[4] + p[5], y)

    grad_and_value = torch.func.grad_and_value(loss)

    def step(p, x, y):
        g, value = grad_and_value(p, x, y)
        return [a - LR * b for a, b in zip(p, g)], value
    return torch.compile(step, dynamic=False), p


def add_row(table, name, step, state, x, y, args, ref=None):
    """First call, then the median of repeated steps (the state advanced by each)."""
    box = [state]

    def call():
        box[0], value = step(box[0], x, y)
        return value
    first = first_call_seconds(call)
    box[0] = state
    value = float(call())
    check = "ref" if ref is None else check_close(name, value, ref, rtol=1e-4)
    t = timeit(call, warmup=2, repeats=10 if args.quick else 30,
               max_time=3.0 if args.quick else 10.0)
    table.add(name, t, check=check, **{"first call s": f"{first:.2f}"})
    return value


def run(args) -> dict:
    with common.spinning(args.busy) if args.busy else contextlib.nullcontext():
        return _run(args)


def _run(args) -> dict:
    batch, k = args.batch, args.kernel
    rng = np.random.default_rng(1)
    x = rng.random((batch, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    params = make_params(k)
    busy = f", {args.busy} spinning processes beside it" if args.busy else ""
    table = ResultTable(f"CNN step, {batch} x 28 x 28 x 1, {k}x{k} convolutions, float32, SGD"
                        f"{busy} (ms/step)", unit="ms", extra_cols=("first call s", "check"))
    ref = []

    def jitgraph_row():
        jg = import_jitgraph()
        if jg is None:
            raise RuntimeError(import_error("jitgraph"))
        step = make_step(jg, jg.numpy, jg.lax)
        ref.append(add_row(table, "jitgraph.jit", step, list(params), x, y, args))
    guarded("jitgraph", jitgraph_row)
    want = ref[0] if ref else None

    def jax_row(jax):
        step = make_step(jax, jax.numpy, jax.lax)
        state = [jax.numpy.asarray(a) for a in params]
        add_row(table, "jax.jit", step, state, jax.numpy.asarray(x), jax.numpy.asarray(y),
                args, want)

    def torch_row(torch):
        step, state = torch_step(torch, params)
        tx = torch.tensor(x.transpose(0, 3, 1, 2).copy())
        add_row(table, "torch.compile", step, state, tx, torch.tensor(y), args, want)

    for label, lib, importer, row in (("jax.jit", "jax", import_jax, jax_row),
                                      ("torch.compile", "torch", import_torch, torch_row)):
        module = importer()
        if module is None:
            table.add_unavailable(label, f"n/a ({import_error(lib)})")
        else:
            guarded(label, row, module)
    table.print()
    return table.as_dict()


def extra(parser) -> None:
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--kernel", type=int, default=3, choices=(3, 5, 7))
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="keep N processes spinning meanwhile (a busy machine)")


def main(argv=None) -> dict:
    return common.run_main(__doc__, "CNN step", "conv_step", run, argv, extra=extra)


if __name__ == "__main__":
    main(sys.argv[1:])
