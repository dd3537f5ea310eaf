"""``jitgraph.misc.fixed_points.fixed_point`` as autograd's: the fixed point of an iteration,
its gradient by the implicit rule (the adjoint fixed point) against central differences of the
solver itself and against closed forms, to the third derivative, under jit and vmap, and on
pytree parameters. Starts with autograd's own example (examples/fixed_points.py: Newton's
square root)."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.misc.fixed_points import fixed_point


# autograd's examples/fixed_points.py, with the import changed
def newton_sqrt_iter(a):
    return lambda x: 0.5 * (x + a / x)


def grad_descent_sqrt_iter(a):
    return lambda x: x - 0.05 * (x ** 2 - a)


def distance(x, y):
    return jnp.abs(x - y)


def sqrt(a, guess=10.0):
    return fixed_point(newton_sqrt_iter, a, guess, distance, 1e-4)


def slow_sqrt(a, guess=10.0):
    return fixed_point(grad_descent_sqrt_iter, a, guess, distance, 1e-10)


def _central(f, a, h=1e-5):
    return (f(a + h) - f(a - h)) / (2 * h)


@pytest.mark.parametrize("a", [2.0, 0.3, 9.0])
def test_newton_sqrt_and_its_derivatives(a):
    np.testing.assert_allclose(sqrt(a), np.sqrt(a), rtol=1e-9)     # (tol 1e-4, Newton: ~1e-12)
    g = jitgraph.grad(sqrt)(a)
    np.testing.assert_allclose(g, 0.5 / np.sqrt(a), rtol=1e-9)
    np.testing.assert_allclose(g, _central(sqrt, a), rtol=1e-7)
    gg = jitgraph.grad(jitgraph.grad(sqrt))(a)
    np.testing.assert_allclose(gg, -0.25 * a ** -1.5, rtol=1e-9)
    np.testing.assert_allclose(gg, _central(jitgraph.grad(sqrt), a), rtol=1e-6)
    ggg = jitgraph.grad(jitgraph.grad(jitgraph.grad(sqrt)))(a)
    np.testing.assert_allclose(ggg, 0.375 * a ** -2.5, rtol=1e-8)


def test_the_gradient_is_the_implicit_one_not_the_iterations():
    """Gradient descent stops at tolerance 1e-10 after a few hundred steps; the implicit rule
    gives d sqrt(a)/da at the point reached, where unrolling would not."""
    a = 2.0
    np.testing.assert_allclose(slow_sqrt(a), np.sqrt(a), rtol=1e-8)
    np.testing.assert_allclose(jitgraph.grad(slow_sqrt)(a), 0.5 / np.sqrt(a), rtol=1e-7)
    np.testing.assert_allclose(jitgraph.grad(slow_sqrt)(a), _central(slow_sqrt, a), rtol=1e-5)


def test_under_jit_and_vmap():
    a = np.array([0.5, 2.0, 7.0])
    np.testing.assert_allclose(jitgraph.jit(sqrt)(2.0), np.sqrt(2.0), rtol=1e-12)
    np.testing.assert_allclose(jitgraph.jit(jitgraph.grad(sqrt))(2.0), 0.5 / np.sqrt(2.0),
                               rtol=1e-10)
    np.testing.assert_allclose(jitgraph.vmap(sqrt)(a), np.sqrt(a), rtol=1e-12)
    np.testing.assert_allclose(jitgraph.vmap(jitgraph.grad(sqrt))(a), 0.5 / np.sqrt(a),
                               rtol=1e-10)
    np.testing.assert_allclose(jitgraph.grad(lambda v: jnp.sum(sqrt(v)))(a), 0.5 / np.sqrt(a),
                               rtol=1e-10)


def test_pytree_parameters_and_a_vector_fixed_point():
    """x = tanh(W x + b) (a contraction: |W| small), parameters the dict {W, b}; the
    gradient of a loss of x* against central differences, entry by entry."""
    rng = np.random.default_rng(0)
    params = {"W": rng.normal(size=(4, 4)) * 0.2, "b": rng.normal(size=4)}
    c = rng.normal(size=4)

    def layer(p):
        return lambda x: jnp.tanh(p["W"] @ x + p["b"])

    def dist(x, y):
        return jnp.max(jnp.abs(x - y))

    def loss(p):
        return jnp.sum(c * fixed_point(layer, p, jnp.zeros(4), dist, 1e-13))

    x = fixed_point(layer, params, np.zeros(4), dist, 1e-13)
    np.testing.assert_allclose(x, np.tanh(params["W"] @ x + params["b"]), atol=1e-12)
    g = jitgraph.grad(loss)(params)
    # the implicit gradient in closed form: w = (I - J^T)^-1 c, J = diag(1 - x^2) W
    jac = (1 - np.asarray(x) ** 2)[:, None] * params["W"]
    w = np.linalg.solve(np.eye(4) - jac.T, c)
    np.testing.assert_allclose(g["b"], (1 - np.asarray(x) ** 2) * w, rtol=1e-9)
    h = 1e-6
    for name in ("W", "b"):
        num = np.zeros_like(params[name])
        for idx in np.ndindex(params[name].shape):
            up = {k: v.copy() for k, v in params.items()}
            dn = {k: v.copy() for k, v in params.items()}
            up[name][idx] += h
            dn[name][idx] -= h
            num[idx] = (float(loss(up)) - float(loss(dn))) / (2 * h)
        np.testing.assert_allclose(g[name], num, rtol=1e-6, atol=1e-9)


def test_the_start_gets_no_gradient_and_results_are_arrays():
    g = jitgraph.grad(lambda x0: fixed_point(newton_sqrt_iter, 2.0, x0, distance, 1e-4))(10.0)
    assert float(g) == 0.0
    r = sqrt(2.0)
    assert r.block_until_ready() is r
