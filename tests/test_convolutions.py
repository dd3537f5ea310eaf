"""Convolutions and window reductions: ``lax.conv_general_dilated`` against a direct
convolution (property-based over layouts, strides, dilations, padding and groups), a CNN
training step compiled at a size whose products split over threads against the reference,
and the kernels of a convolution's step not growing with its window."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import lax

import test_jit_cases as table

DN2 = ("NHWC", "HWIO", "NHWC")


def direct_conv(x, w, strides, pads, lhs_dil, rhs_dil, groups):
    """N-d cross-correlation of NC... ``x`` with OI... ``w``, one output element at a time,
    from the definition (the operand dilated, then padded or cropped)."""
    nsp = x.ndim - 2
    for d, r in enumerate(lhs_dil):
        if r > 1:
            shp = list(x.shape)
            shp[2 + d] = (shp[2 + d] - 1) * r + 1
            z = np.zeros(shp, x.dtype)
            key = [slice(None)] * x.ndim
            key[2 + d] = slice(None, None, r)
            z[tuple(key)] = x
            x = z
    for d, (lo, hi) in enumerate(pads):
        key = [slice(None)] * x.ndim
        key[2 + d] = slice(max(-lo, 0), x.shape[2 + d] - max(-hi, 0))
        x = x[tuple(key)]
        widths = [(0, 0)] * x.ndim
        widths[2 + d] = (max(lo, 0), max(hi, 0))
        x = np.pad(x, widths)
    o, per = w.shape[:2]
    win = w.shape[2:]
    out_sp = [(x.shape[2 + d] - (win[d] - 1) * rhs_dil[d] - 1) // strides[d] + 1
              for d in range(nsp)]
    out = np.zeros((x.shape[0], o, *out_sp))
    for idx in np.ndindex(x.shape[0], o, *out_sp):
        b, f, pos = idx[0], idx[1], idx[2:]
        g = f // (o // groups)
        key = [b, slice(g * per, (g + 1) * per)]
        key += [slice(p * s, p * s + (k - 1) * r + 1, r)
                for p, s, k, r in zip(pos, strides, win, rhs_dil)]
        out[idx] = np.sum(x[tuple(key)] * w[f])
    return out


@st.composite
def conv_configs(draw):
    nsp = draw(st.integers(1, 2))
    groups = draw(st.sampled_from([1, 2]))
    per, outs = draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    win = [draw(st.integers(1, 3)) for _ in range(nsp)]
    strides = [draw(st.integers(1, 3)) for _ in range(nsp)]
    lhs_dil = [draw(st.integers(1, 2)) for _ in range(nsp)]
    rhs_dil = [draw(st.integers(1, 2)) for _ in range(nsp)]
    pads = [(draw(st.integers(-1, 2)), draw(st.integers(-1, 2))) for _ in range(nsp)]
    sizes = []
    for d in range(nsp):
        need = (win[d] - 1) * rhs_dil[d] + 1 - pads[d][0] - pads[d][1]
        lo = max(2, -(-(need - 1) // lhs_dil[d]) + 1)
        sizes.append(draw(st.integers(lo, lo + 4)))
    return nsp, groups, per, outs, win, strides, lhs_dil, rhs_dil, pads, sizes


@settings(max_examples=40, deadline=None)
@given(conv_configs(), st.integers(0, 2 ** 31 - 1))
def test_conv_general_dilated_is_the_definition(cfg, seed):
    nsp, groups, per, outs, win, strides, lhs_dil, rhs_dil, pads, sizes = cfg
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, per * groups, *sizes))
    w = rng.standard_normal((outs, per, *win))
    got = lax.conv_general_dilated(x, w, strides, pads, lhs_dil, rhs_dil,
                                   feature_group_count=groups)
    want = direct_conv(x, w, strides, pads, lhs_dil, rhs_dil, groups)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-10)


def direct_pool(x, init, op, window, strides, pads):
    """reduce_window from the definition: padded with ``init``, one window at a time."""
    x = np.pad(x, pads, constant_values=init)
    out_shape = [(n - k) // s + 1 for n, k, s in zip(x.shape, window, strides)]
    out = np.empty(out_shape)
    for idx in np.ndindex(*out_shape):
        out[idx] = op(x[tuple(slice(i * s, i * s + k) for i, s, k in zip(idx, strides, window))])
    return out


@pytest.mark.parametrize("window,strides", [((1, 2, 2, 1), (1, 2, 2, 1)),     # tiling
                                            ((1, 3, 3, 1), (1, 1, 2, 1))])    # overlapping
def test_eager_max_pool_matches_the_compiled_one_with_nan_and_inf(window, strides):
    """Eagerly (concrete arrays, no gradient to route) the pool is one reduction over the
    taps; compiled, the element the first argmax picks: the same values, a NaN in a window
    included, and a window of -inf alone."""
    x = np.random.default_rng(4).standard_normal((2, 6, 7, 3))
    x[0, 1, 1, 0] = np.nan
    x[1, :3, :3, 1] = -np.inf
    x[1, 4, 5, 2] = np.inf
    pool = lambda x: lax.reduce_window(x, -np.inf, lax.max, window, strides, "VALID")  # noqa: E731
    eager = np.asarray(pool(x))
    compiled = np.asarray(jitgraph.jit(pool)(x))
    want = direct_pool(x, -np.inf, np.max, window, strides, ((0, 0),) * 4)
    np.testing.assert_array_equal(eager, want)
    np.testing.assert_array_equal(compiled, want)
    assert np.isnan(eager).any() and np.isneginf(eager).any() and np.isposinf(eager).any()
    graph = jitgraph.make_graph(pool)(x)             # traced: the argmax that routes gradients
    assert "argmax" in {n.prim.name for n in graph.nodes}


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(0, 1),
                          st.integers(0, 1), st.integers(3, 7)), min_size=1, max_size=3),
       st.sampled_from(["max", "sum"]), st.integers(0, 2 ** 31 - 1))
def test_reduce_window_is_the_definition(dims, kind, seed):
    """Tiling windows (a reshape) and overlapping or strided ones (``windows``) alike."""
    window, strides, lo, hi, sizes = (tuple(c) for c in zip(*dims))
    x = np.random.default_rng(seed).standard_normal(sizes)
    init, op, red = ((-np.inf, lax.max, np.max) if kind == "max" else (0.0, lax.add, np.sum))
    pads = tuple(zip(lo, hi))
    got = lax.reduce_window(x, init, op, window, strides, pads)
    np.testing.assert_allclose(np.asarray(got), direct_pool(x, init, red, window, strides, pads),
                               rtol=1e-12)


def cnn_loss(k: int):
    def pool(h):
        return lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def loss(p, x):
        w1, w2, w3 = p
        h = pool(jitgraph.nn.relu(lax.conv_general_dilated(x, w1, (1, 1), "SAME",
                                                           dimension_numbers=DN2)))
        h = jnp.tanh(lax.conv_general_dilated(h, w2, (2, 2), "SAME", dimension_numbers=DN2))
        return jnp.sum(jnp.reshape(h, (h.shape[0], -1)) @ w3)
    return loss


def cnn_args(k: int, batch: int, dtype=np.float64):
    rng = np.random.default_rng(k)
    p = [rng.standard_normal((k, k, 1, 16)) * 0.3, rng.standard_normal((k, k, 16, 32)) * 0.1,
         rng.standard_normal((7 * 7 * 32, 3)) * 0.05]
    x = rng.random((batch, 28, 28, 1))
    return [a.astype(dtype) for a in p], x.astype(dtype)


def test_cnn_step_at_split_product_sizes():
    """A 28x28 CNN's value and gradient, compiled, against the reference interpreter, at a
    batch whose im2col products (0.9-1.8 M multiply-adds) split over threads."""
    loss = cnn_loss(3)
    p, x = cnn_args(3, 8)
    vg = jitgraph.value_and_grad(loss)
    got = jitgraph.jit(vg)(p, x)
    table.assert_same(got, vg(p, x), "jit(value_and_grad(cnn))", table.GRAD_TOL)
    src = jitgraph.jit(vg).lower(p, x).source
    assert "par_gemm(" in src, "the im2col products were expected to split over threads"


def test_cnn_gradient_matches_finite_differences():
    loss = cnn_loss(3)
    p, x = cnn_args(3, 1)
    g = jitgraph.jit(jitgraph.grad(loss))(p, x)
    rng = np.random.default_rng(0)
    for i in range(3):
        d = [rng.standard_normal(a.shape) for a in p]
        eps = 1e-6
        plus = loss([a + eps * b for a, b in zip(p, d)], x)
        minus = loss([a - eps * b for a, b in zip(p, d)], x)
        fd = (float(plus) - float(minus)) / (2 * eps)
        an = sum(float(np.sum(np.asarray(gi) * di)) for gi, di in zip(g, d))
        assert an == pytest.approx(fd, rel=1e-6, abs=1e-8)


def test_kernels_do_not_grow_with_the_window():
    """The step's kernels are the same in number, and their source the same in size, for
    3x3 and 7x7 windows: each window is one index expression, not one view per tap."""
    sizes = {}
    for k in (3, 7):
        p, x = cnn_args(k, 2, np.float32)
        low = jitgraph.jit(jitgraph.value_and_grad(cnn_loss(k))).lower(p, x)
        kernels = [kn for kn in low.kernels if kn.name.startswith("loop_")]
        sizes[k] = (len(kernels), sum(len(kn.source) for kn in kernels))
    assert sizes[7][0] == sizes[3][0], sizes
    assert sizes[7][1] <= 1.05 * sizes[3][1], sizes


@pytest.mark.parametrize("stride,padding", list(itertools.product([1, 2], ["SAME", "VALID"])))
def test_nn_conv2d_and_pools_compiled(stride, padding):
    """``nn.conv2d`` and the pools (NCHW too) through jit and grad, against the reference."""
    rng = np.random.default_rng(stride)
    x, w, b = rng.standard_normal((2, 9, 9, 3)), rng.standard_normal((3, 3, 3, 4)), \
        rng.standard_normal(4)

    def f(x, w, b):
        nn = jitgraph.nn
        y = nn.functional.conv2d(x, w, b, stride=stride, padding=padding)
        yt = jnp.transpose(y, (0, 3, 1, 2))
        return (nn.functional.max_pool2d(y, 3, 2, padding=1)
                + jnp.transpose(nn.functional.avg_pool2d(yt, 3, 2, padding=1,
                                                         layout="NCHW"), (0, 2, 3, 1)))
    table.assert_same(jitgraph.jit(f)(x, w, b), table.reference_of(f, (x, w, b)),
                      "jit(conv2d + pools)", table.FWD_TOL)
    g = jitgraph.grad(lambda *a: jnp.sum(f(*a) ** 2), argnums=(0, 1, 2))
    table.assert_same(jitgraph.jit(g)(x, w, b), g(x, w, b), "jit(grad)", table.GRAD_TOL)


def first_max_pool_grad(x, window, strides, pads, ct):
    """The gradient of a max over windows, each window's cotangent to its first maximum in
    row-major order (XLA's select_and_scatter, TensorFlow's and PyTorch's pooling)."""
    xp = np.pad(x, pads, constant_values=-np.inf)
    g = np.zeros_like(xp)
    for idx in np.ndindex(*ct.shape):
        key = tuple(slice(i * s, i * s + k) for i, s, k in zip(idx, strides, window))
        win = xp[key]
        pos = np.unravel_index(np.argmax(win), win.shape)
        g[tuple(sl.start + p for sl, p in zip(key, pos))] += ct[idx]
    return g[tuple(slice(lo, lo + n) for (lo, _), n in zip(pads, x.shape))]


@pytest.mark.parametrize("window,strides,pads", [((2, 2), (2, 2), ((0, 0), (0, 0))),
                                                 ((3, 3), (1, 2), ((1, 1), (1, 1))),
                                                 ((2, 3), (2, 1), ((0, 1), (2, 0)))])
def test_max_pool_gradient_goes_to_the_first_maximum(window, strides, pads):
    """Ties (integers drawn from a few values) send the whole cotangent to the window's first
    maximum, compiled and not; tiling windows (a reshape) and overlapping ones alike."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, (6, 7)).astype(np.float64)
    y = lax.reduce_window(x, -np.inf, lax.max, window, strides, pads)
    ct = rng.standard_normal(np.shape(y))

    def f(x):
        return jnp.sum(lax.reduce_window(x, -np.inf, lax.max, window, strides, pads) * ct)
    want = first_max_pool_grad(x, window, strides, pads, ct)
    np.testing.assert_allclose(np.asarray(jitgraph.grad(f)(x)), want, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(jitgraph.jit(jitgraph.grad(f))(x)), want, rtol=1e-12)


def test_worked_example_pool_and_relu_gradients():
    """Exact values: a 2x2 max pool's tie in its first window goes to the first 3; in the
    second, all zeros, to relu at 0, whose derivative is 0 (PyTorch's and JAX's); NaN passes
    through the pool and relu."""
    x = np.array([[1.0, 3.0, 0.0, 0.0], [2.0, 3.0, 0.0, 0.0]])[None, :, :, None]
    w = np.array([1.0, 2.0])[None, None, :, None]

    def f(x):
        return jnp.sum(jitgraph.nn.max_pool2d(jitgraph.nn.relu(x), 2) * w)
    np.testing.assert_array_equal(np.asarray(jitgraph.grad(f)(x))[0, :, :, 0],
                                  [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    assert float(jitgraph.grad(jitgraph.nn.relu)(0.0)) == 0.0
    y = jitgraph.nn.max_pool2d(jitgraph.nn.relu(np.array([np.nan, 1.0, 0.0, 5.0]).reshape(
        1, 2, 2, 1)), 2)
    assert np.isnan(np.asarray(y)).all()
