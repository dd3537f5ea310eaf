"""The max trick written by hand: ``m + log(sum(exp(x - m)))`` and ``(x - m) - log(sum(exp(x -
m)))`` do not depend on ``m``, so reverse mode gives ``m`` no derivative (``autodiff.
_invariant_shifts``), as ``stop_gradient(max(x))`` would. Gradients are checked against float64
central differences and closed forms, ties included; graphs that only look alike keep the
derivative of ``max``."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp


def lse_loss(z, y):
    m = jnp.max(z, axis=1, keepdims=True)
    lse = m + jnp.log(jnp.sum(jnp.exp(z - m), axis=1, keepdims=True))
    return -jnp.mean(jnp.sum((z - lse) * y, axis=1))


def log_softmax_loss(z, y):
    m = jnp.max(z, axis=1, keepdims=True)
    shifted = z - m
    logp = shifted - jnp.log(jnp.sum(jnp.exp(shifted), axis=1, keepdims=True))
    return -jnp.mean(jnp.sum(logp * y, axis=1))


def returns_the_max_too(z, y):        # m is also an output: its derivative must stay
    m = jnp.max(z, axis=1, keepdims=True)
    lse = m + jnp.log(jnp.sum(jnp.exp(z - m), axis=1, keepdims=True))
    return -jnp.mean(jnp.sum((z - lse) * y, axis=1)) + 0.5 * jnp.sum(m)


def other_axis(z, y):                 # shift along axis 0, sum along axis 1: not the trick
    m = jnp.max(z, axis=0, keepdims=True)
    return jnp.sum(jnp.log(jnp.sum(jnp.exp(z - m), axis=1, keepdims=True)))


def data(ties: bool):
    r = np.random.default_rng(3)
    z = r.standard_normal((5, 7))
    if ties:
        z[:, 2] = z[:, 4] = z.max(axis=1) + 0.5       # two equal maxima in every row
    y = np.eye(7)[r.integers(0, 7, 5)]
    return z, y


def central_differences(f, z, y, h=1e-6):
    g = np.zeros_like(z)
    for idx in np.ndindex(*z.shape):
        zp, zm = z.copy(), z.copy()
        zp[idx] += h
        zm[idx] -= h
        g[idx] = (float(f(zp, y)) - float(f(zm, y))) / (2 * h)
    return g


def softmax_xent_grad(z, y):
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return (p * y.sum(axis=1, keepdims=True) - y) / z.shape[0]


def primitives(f, *args):
    return {n.prim.name for n in jitgraph.make_graph(f)(*args).nodes}


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("loss", [lse_loss, log_softmax_loss], ids=["lse", "log_softmax"])
def test_gradient_is_softmax_minus_targets(loss, ties):
    z, y = data(ties)
    expect = softmax_xent_grad(z, y)
    for g in (jitgraph.grad(loss)(z, y), jitgraph.jit(jitgraph.grad(loss))(z, y)):
        np.testing.assert_allclose(g, expect, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(expect, central_differences(loss, z, y), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("loss", [lse_loss, log_softmax_loss], ids=["lse", "log_softmax"])
def test_the_backward_pass_has_no_max_derivative(loss):
    z, y = data(False)
    assert "eq" not in primitives(jitgraph.grad(loss), z, y)        # no tie mask
    assert "reduce_max" in primitives(jitgraph.grad(loss), z, y)    # the forward still shifts


@pytest.mark.parametrize("f", [returns_the_max_too, other_axis], ids=["max_returned", "axis"])
def test_look_alikes_keep_the_max_derivative(f):
    z, y = data(False)
    assert "eq" in primitives(jitgraph.grad(f), z, y)
    np.testing.assert_allclose(jitgraph.grad(f)(z, y), central_differences(f, z, y),
                               rtol=1e-6, atol=1e-8)


def test_second_derivatives_are_unchanged():
    """Hessian-vector products of the hand-written loss equal those of nn.log_softmax's
    (which uses stop_gradient itself)."""
    from jitgraph import nn
    z, y = data(True)
    v = np.random.default_rng(4).standard_normal(z.shape)

    def library(z, y):
        return -jnp.mean(jnp.sum(nn.log_softmax(z, axis=1) * y, axis=1))

    def hvp(f):
        return jitgraph.grad(lambda z: jnp.sum(jitgraph.grad(f)(z, y) * v))(z)
    np.testing.assert_allclose(hvp(lse_loss), hvp(library), rtol=1e-10, atol=1e-14)
