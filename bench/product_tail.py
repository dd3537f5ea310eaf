"""A threaded loop and the product after it as one step (the product tail), and a product
computed inside the loop that alone reads it (the product head), against the same program with
the steps apart (``JITGRAPH_PRODUCT_TAIL=0``), across sizes.

Each configuration compiles its function twice, with the pairing on and off, checks the two
give the same values, and times them interleaved (``common.timeit_interleaved``: rounds of
samples of each in turn, so both see the same slow and fast phases of a shared machine). The
table gives the medians, their ratio (paired / apart: below 1 the pairing wins) and whether the
compiler paired at that size (below ``thresholds.product_tail_min_bytes()`` it does not: the
two programs are then the same). Cases: an elementwise loop then a product (narrow to wide outputs, the
right operand stored and transposed, float64), convolution forwards (im2col, then its product;
the 5 x 5 layers of the TF-1 tutorial's network, a 3 x 3 layer), convolution input gradients
(the product dY @ W^T, then col2im: a head) and a convolutional network's training step, where
the steps compete for memory with the rest of the program.

    python bench/product_tail.py [--quick] [--json out.json]
"""
from __future__ import annotations

import common  # noqa: I001  (first: sets thread limits)

import contextlib
import os

import numpy as np

from common import check_close, timeit_interleaved


@contextlib.contextmanager
def pairing(on: bool):
    old = os.environ.get("JITGRAPH_PRODUCT_TAIL")
    os.environ["JITGRAPH_PRODUCT_TAIL"] = "1" if on else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("JITGRAPH_PRODUCT_TAIL", None)
        else:
            os.environ["JITGRAPH_PRODUCT_TAIL"] = old


def cases(quick: bool) -> list:
    """(name, function, arguments) per configuration."""
    import jitgraph
    import jitgraph.lax as lax
    import jitgraph.numpy as jnp
    r = np.random.default_rng(0)

    def f32(*shape, scale=1.0):
        return (r.standard_normal(shape) * scale).astype(np.float32)

    def dense(x, w):
        return jnp.tanh(x) @ w

    def dense_t(x, w):
        return jnp.tanh(x) @ w.T

    def conv(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def cnn_step(params, x, y):
        def loss(params):
            w1, w2, w3 = params
            h = jnp.maximum(conv(x, w1), 0.0)
            h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
            h = jnp.maximum(conv(h, w2), 0.0)
            h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
            logits = h.reshape(h.shape[0], -1) @ w3
            return -jnp.mean(jnp.sum(jitgraph.nn.log_softmax(logits) * y, axis=1))
        g = jitgraph.grad(loss)(params)
        return [p - 0.01 * d for p, d in zip(params, g)]

    out = []
    dense_shapes = [(4096, 512, 64), (65536, 512, 64)] if quick else \
        [(4096, 512, 64), (65536, 512, 16), (65536, 512, 64), (65536, 512, 256),
         (32768, 1024, 1024), (16384, 2048, 64)]
    for m, k, n in dense_shapes:
        out.append((f"tanh(x) @ w  {m}x{k} @ {k}x{n}", dense, (f32(m, k), f32(k, n, scale=0.1))))
    out.append(("tanh(x) @ w.T  65536x512 @ (64x512).T", dense_t,
                (f32(65536, 512), f32(64, 512, scale=0.1))))
    if not quick:
        out.append(("tanh(x) @ w  f64 32768x512 @ 512x64", dense,
                    (f32(32768, 512).astype(np.float64), f32(512, 64).astype(np.float64))))
    convs = [(128, 14, 32, 5, 64), (128, 28, 1, 5, 32)] if quick else \
        [(128, 14, 32, 5, 64), (32, 14, 32, 5, 64), (128, 28, 1, 5, 32), (32, 32, 64, 3, 64)]
    for b, hw, cin, kk, cout in convs:
        out.append((f"conv {b}x{hw}x{hw}x{cin} * {kk}x{kk}->{cout}", conv,
                    (f32(b, hw, hw, cin), f32(kk, kk, cin, cout, scale=0.1))))
    grads = [(128, 14, 32, 5, 64), (32, 32, 64, 3, 64)] if not quick else [(128, 14, 32, 5, 64)]
    for b, hw, cin, kk, cout in grads:
        w = f32(kk, kk, cin, cout, scale=0.1)
        out.append((f"conv input gradient {b}x{hw}x{hw}x{cin} * {kk}x{kk}->{cout}",
                    jitgraph.grad(lambda x, w=w: jnp.sum(jnp.tanh(conv(x, w)))),
                    (f32(b, hw, hw, cin),)))
    x = f32(128, 28, 28, 1)
    y = np.eye(10, dtype=np.float32)[r.integers(0, 10, 128)]
    params = [f32(5, 5, 1, 32, scale=0.2), f32(5, 5, 32, 64, scale=0.05),
              f32(7 * 7 * 64, 10, scale=0.02)]
    out.append(("CNN training step, batch 128", cnn_step, (params, x, y)))
    return out


def main() -> None:
    args = common.parse_args(__doc__)
    common.print_header("product tail: a loop and its product as one step, against apart")
    import jitgraph
    from jitgraph.compiler import threaded
    rows = []
    print(f"{'case':44s} {'paired':>10s} {'apart':>10s} {'ratio':>6s}  pairs")
    for name, fn, fargs in cases(args.quick):
        fns, outs = {}, {}
        for on in (True, False):
            with pairing(on):
                f = jitgraph.jit(fn)
                outs[on] = f(*fargs)
                if on:
                    src = f.lower(*fargs).source
                    paired = threaded.TAIL_PREFIX in src or threaded.HEAD_PREFIX in src
            fns["paired" if on else "apart"] = (lambda f=f: f(*fargs))
        leaves = zip(*(o if isinstance(o, list) else [o] for o in (outs[True], outs[False])))
        check = {check_close(name, a, b, rtol=1e-3, atol=1e-4) for a, b in leaves}
        if check != {"ok"}:
            raise SystemExit(f"{name}: paired and apart disagree: {check}")
        if not paired:          # one program twice: nothing to compare
            rows.append({"case": name, "paired": False})
            print(f"{name:44s} {'-':>10s} {'-':>10s} {'-':>6s}  no (not paired at this shape)")
            continue
        t = timeit_interleaved(fns, repeats=30 if args.quick else 60)
        p, a = t["paired"].median, t["apart"].median
        rows.append({"case": name, "paired_s": p, "apart_s": a, "ratio": p / a,
                     "paired": paired})
        print(f"{name:44s} {common.fmt_time(p):>10s} {common.fmt_time(a):>10s} "
              f"{p / a:6.2f}  {'yes' if paired else 'no (same program)'}", flush=True)
    common.dump_json(args.json, {"rows": rows})


if __name__ == "__main__":
    main()
