"""A costly value that several loop stages of one row kernel use (``exp(z - max)`` of a softmax:
in the stage summing it and in the stage writing the probabilities or the gradient) is computed
once per element on the CPU: the first stage keeps it in the output buffer that the last stage
writes, and the later stages read it back (``fusion.cache_rows``). Checked at the sizes of each
loop regime (serial, threads over rows, threads over one long row) against the reference
interpreter, and where it must not apply (an output of another dtype)."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import nn
from jitgraph.compiler.thresholds import PARALLEL_MIN_WORK
from jitgraph.interpreter import run


def xent(z, y):
    m = jnp.max(z, axis=1, keepdims=True)
    lse = m + jnp.log(jnp.sum(jnp.exp(z - m), axis=1, keepdims=True))
    return -jnp.mean(jnp.sum((z - lse) * y, axis=1))


def softmax_rows(z):
    e = jnp.exp(z - jnp.max(z, axis=-1, keepdims=True))
    return e / jnp.sum(e, axis=-1, keepdims=True)


def _kernels(jf, *args) -> str:
    return jf.lower(*args).source.split("def program")[0]


def _reference(fn, *args):
    return run(jitgraph.make_graph(fn)(*args), list(args))


def _data(rows, cols, dtype=np.float32, seed=0):
    r = np.random.default_rng(seed)
    z = (3 * r.standard_normal((rows, cols))).astype(dtype)
    y = np.zeros((rows, cols), dtype)
    y[np.arange(rows), r.integers(0, cols, rows)] = 1
    return z, y


@pytest.mark.parametrize("rows, cols", [
    (6, 50),                                  # one thread
    (64, 2 * PARALLEL_MIN_WORK // 64),        # threads over rows
])
def test_cross_entropy_gradient_computes_exp_once_per_element(rows, cols):
    z, y = _data(rows, cols)
    fn = jitgraph.value_and_grad(xent)
    jf = jitgraph.jit(fn)
    kernels = _kernels(jf, z, y)
    assert kernels.count("exp_f32(") == 1, kernels
    loss, grad = jf(z, y)
    want_loss, want_grad = _reference(fn, z, y)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-9)
    # and the worked numbers: softmax minus the one-hot, over the rows
    z64 = z.astype(np.float64)
    p = np.exp(z64 - z64.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(grad, (p - y) / rows, rtol=2e-5, atol=1e-9)


@pytest.mark.parametrize("shape", [
    (3, 40),                                  # one thread
    (256, 1000),                              # threads over rows
    (1, 2 * PARALLEL_MIN_WORK),               # one long row: threads over the reduced loop
])
def test_softmax_keeps_its_exponentials_in_the_output(shape):
    z = _data(*shape)[0]
    jf = jitgraph.jit(softmax_rows)
    kernels = _kernels(jf, z)
    assert kernels.count("exp_f32(") == 1, kernels
    got = jf(z)
    np.testing.assert_allclose(got, _reference(softmax_rows, z)[0], rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(got.sum(-1), 1.0, rtol=1e-5)


def test_values_read_by_several_later_stages():
    """The entropy of a softmax returned with the probabilities: the exponentials kept by the
    summing stage serve the stage writing ``p`` and reducing ``p * log p``."""
    def f(z):
        p = softmax_rows(z)
        return p, -jnp.sum(p * jnp.log(p), axis=-1)
    z = _data(32, 300)[0]
    jf = jitgraph.jit(f)
    got = jf(z)
    for g, w in zip(got, _reference(f, z)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-9)


def test_an_output_of_another_dtype_is_not_used():
    """The kept value must fit the buffer exactly: float32 exponentials are not kept in a float64
    output (the gradient is recomputed instead) and the numbers stay the reference's."""
    def f(z):
        return softmax_rows(z).astype(np.float64)
    z = _data(16, 100)[0]
    jf = jitgraph.jit(f)
    kernels = _kernels(jf, z)
    assert kernels.count("exp_f32(") == 2, kernels
    np.testing.assert_allclose(jf(z), _reference(f, z)[0], rtol=1e-6)


def test_log_softmax_cross_entropy_in_float64_and_its_second_derivative():
    """float64 kernels keep their exponentials too, and a Hessian-vector product through the
    kernel (whose stages now read back what they wrote) still matches central differences."""
    z, y = _data(5, 7, np.float64, seed=3)
    loss = lambda z: -jnp.mean(jnp.sum(nn.log_softmax(z) * y, axis=1))  # noqa: E731
    g = jitgraph.jit(jitgraph.grad(loss))
    assert _kernels(g, z).count("exp_f64(") == 1
    v = np.random.default_rng(1).standard_normal(z.shape)
    hvp = jitgraph.jit(lambda z: jitgraph.jvp(jitgraph.grad(loss), (z,), (v,))[1])(z)
    eps = 1e-5
    fd = (np.asarray(g(z + eps * v)) - np.asarray(g(z - eps * v))) / (2 * eps)
    np.testing.assert_allclose(hvp, fd, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("rows, cols", [(6, 50), (64, 2 * PARALLEL_MIN_WORK // 64)])
def test_sparse_cross_entropy_gradient_joins_the_row_kernel(rows, cols):
    """``nn.cross_entropy`` with integer labels: the gradient's coefficient is computed from the
    labels where it is used (not stored by whichever kernel came last), so the gradient is a
    stage of the row kernel computing the row statistics, whose exponentials it reuses: one
    row kernel and the mean, not three kernels (and 14 ms instead of 3.5 ms at 8192x1000).
    A label out of range gives a NaN loss row and no gradient from its pick, as in PyTorch's
    ``ignore_index``-free cross-entropy with a bad label."""
    r = np.random.default_rng(2)
    z = (2 * r.standard_normal((rows, cols))).astype(np.float32)
    y = r.integers(0, cols, rows)
    fn = jitgraph.value_and_grad(lambda z, y: nn.cross_entropy(z, y))
    jf = jitgraph.jit(fn)
    lowered = jf.lower(z, y)
    assert len(lowered.plan.steps) == 2, [s.name for s in lowered.plan.steps]
    assert _kernels(jf, z, y).count("exp_f32(") == 1
    loss, grad = jf(z, y)
    z64 = z.astype(np.float64)
    p = np.exp(z64 - z64.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    np.testing.assert_allclose(loss, -np.mean(np.log(p[np.arange(rows), y])), rtol=1e-5)
    p[np.arange(rows), y] -= 1
    np.testing.assert_allclose(grad, p / rows, rtol=2e-5, atol=1e-9)
    y[1] = cols                                   # out of range
    for g, w in zip(jf(z, y), _reference(fn, z, y)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-9)
