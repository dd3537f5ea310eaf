"""Un-jitted gradients: the eager path (derivative rules evaluated on the forward values, then a
backward graph cached by the forward graph's structure) gives the numbers of the graph path,
on every call: first (rules run directly), second (the backward graph is built) and later
(the cached graph is interpreted)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import custom_vjp, grad, hessian, jacrev, make_graph, value_and_grad, vjp

from cases import GRAD_CASES

CALLS = 3   # first sighting, building the cached graph, a cache hit


def _graph_path_grad(f, x):
    """The gradient by the graph path: the optimized graph of grad(f) (abstract trace), run by
    the reference interpreter."""
    g = make_graph(grad(f))(x)
    return jitgraph.interpret(g, [x])[0]


def _fresh(fn):
    """A new function object with the same code: its structure is new to the caches only if
    the graph differs, so this checks that the cache is keyed by structure, not identity."""
    return lambda *a: fn(*a)


@pytest.mark.parametrize("case", [c for c in GRAD_CASES if len(c.diff_argnums) == 1][:25],
                         ids=lambda c: c.name)
def test_eager_grad_matches_graph_path(case):
    i = case.diff_argnums[0]
    args = [np.asarray(a, np.float64) if k == i else a for k, a in enumerate(case.args)]

    def f(x):
        full = list(args)
        full[i] = x
        return jnp.sum(case.fn(*full))
    want = _graph_path_grad(f, args[i])
    for _ in range(CALLS):
        np.testing.assert_allclose(grad(_fresh(f))(args[i]), want, rtol=1e-12, atol=1e-12)


def test_control_flow_takes_another_path_between_calls():
    def f(x):
        return jnp.sum(x ** 3) if jnp.sum(x) > 0 else jnp.sum(jnp.sin(x))
    g = grad(f)
    xp, xn = np.array([0.5, 1.5]), np.array([-0.5, -1.5])
    for _ in range(CALLS):
        np.testing.assert_allclose(g(xp), 3 * xp ** 2, rtol=1e-14)
        np.testing.assert_allclose(g(xn), np.cos(xn), rtol=1e-14)


def test_constants_are_read_on_every_call():
    """Same structure, other constant values: a cached backward graph takes the forward
    values (constants included) as inputs, so nothing of an earlier call is baked in."""
    x = np.array([1.0, 2.0, 3.0])
    for scale in [2.0, -1.0, 0.5, 4.0, 1.0, 0.0]:
        w = np.array([scale, 2 * scale, 3 * scale])
        np.testing.assert_allclose(grad(lambda x: jnp.sum(w * jnp.tanh(x)))(x),
                                   w * (1 - np.tanh(x) ** 2), rtol=1e-14)
        np.testing.assert_allclose(grad(lambda x: jnp.sum(x * scale) * 1.0)(x),
                                   np.full(3, scale), rtol=1e-14)


def test_weak_scalars_keep_float32():
    x = np.array([0.5, -1.0, 2.0], np.float32)
    f = lambda x: jnp.sum(2.0 * x ** 2 + 1.5)   # noqa: E731
    for _ in range(CALLS):
        v, g = value_and_grad(f)(x)
        assert g.dtype == np.float32 and v.dtype == np.float32
        np.testing.assert_allclose(g, 4.0 * x, rtol=1e-6)


def test_pytree_arguments_and_aux():
    rng = np.random.default_rng(0)
    params = [(rng.standard_normal((3, 4)), rng.standard_normal(4)),
              (rng.standard_normal((4, 1)), rng.standard_normal(1))]
    x = rng.standard_normal((5, 3))

    def loss(params):
        h = x
        for W, b in params:
            h = jnp.tanh(h @ W + b)
        return jnp.sum(h ** 2), {"mean": jnp.mean(h)}

    g_graph = make_graph(grad(lambda p: loss(p)[0]))(params)
    want = jitgraph.interpret(g_graph, jitgraph.tree_leaves(params))
    for _ in range(CALLS):
        (val, aux), g = value_and_grad(loss, has_aux=True)(params)
        assert set(aux) == {"mean"}
        for got, w in zip(jitgraph.tree_leaves(g), want):
            np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-12)


def test_higher_order_eager_grads():
    d = [jnp.tanh]
    for _ in range(4):
        d.append(grad(d[-1]))
    t = np.tanh(0.3)
    want = [t, 1 - t ** 2, -2 * t * (1 - t ** 2), (1 - t ** 2) * (6 * t ** 2 - 2),
            -8 * t * (1 - t ** 2) * (3 * t ** 2 - 2)]
    for _ in range(CALLS):
        for k in range(5):
            np.testing.assert_allclose(d[k](0.3), want[k], rtol=1e-12)


def test_hessian_vector_product_and_hessian():
    def rosen(x):
        return 100 * (x[1] - x[0] ** 2) ** 2 + (1 - x[0]) ** 2
    x, v = np.array([-1.2, 1.0]), np.array([0.3, -0.7])
    hvp = grad(lambda x, v: jnp.dot(grad(rosen)(x), v))
    H = np.array([[1200 * x[0] ** 2 - 400 * x[1] + 2, -400 * x[0]], [-400 * x[0], 200.0]])
    for _ in range(CALLS):
        np.testing.assert_allclose(hvp(x, v), H @ v, rtol=1e-12)
        np.testing.assert_allclose(hessian(rosen)(x), H, rtol=1e-12)


def test_vjp_fn_called_many_times():
    A = np.array([[1.0, 2.0, 0.0], [0.5, -1.0, 3.0]])
    f = lambda x: jnp.tanh(A @ x)   # noqa: E731
    x = np.array([0.1, -0.2, 0.3])
    J = (1 - np.tanh(A @ x) ** 2)[:, None] * A
    for _ in range(CALLS):
        np.testing.assert_allclose(jacrev(f)(x), J, rtol=1e-12)
        out, f_vjp = vjp(f, x)
        for ct in np.eye(2):
            np.testing.assert_allclose(f_vjp(ct)[0], ct @ J, rtol=1e-12)


def test_vjp_fn_with_a_traced_cotangent():
    """A top-level vjp_fn used inside another gradient: the cotangent is traced, so the
    backward pass is recorded rather than evaluated."""
    x = np.array([0.4, -0.3])
    _, f_vjp = vjp(jnp.sin, x)
    g = grad(lambda c: jnp.sum(f_vjp(c)[0] ** 2))(np.array([1.0, 2.0]))
    np.testing.assert_allclose(g, 2 * np.array([1.0, 2.0]) * np.cos(x) ** 2, rtol=1e-12)


def test_custom_vjp_eager_and_nested():
    @custom_vjp
    def clip_gradient(x):
        return x

    clip_gradient.defvjp(lambda x: (x, None), lambda res, g: (jnp.clip(g, -1.0, 1.0),))
    x = np.array([0.5, 2.0, -3.0])
    for _ in range(CALLS):
        np.testing.assert_allclose(grad(lambda x: jnp.sum(3.0 * clip_gradient(x)))(x), [1.0] * 3)
        # d/dy sum(c(y) * y) = clip(y, -1, 1) + y; its derivative is 1 + (|y| < 1)
        np.testing.assert_allclose(
            grad(lambda x: jnp.sum(grad(lambda y: jnp.sum(clip_gradient(y) * y))(x)))(x),
            [2.0, 1.0, 1.0])


def test_no_floating_point_warnings_and_no_leaked_state():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(CALLS):
            g = grad(lambda x: jnp.sum(jnp.where(x > 0, jnp.log(x), 0.0)))(np.array([0.0, 2.0]))
            assert g[1] == 0.5
    with pytest.warns(RuntimeWarning):     # the user's own NumPy still warns afterwards
        np.log(np.array([0.0]))


def test_vjp_fn_of_a_scalar_output_takes_each_cotangent():
    """The cotangent of a vjp_fn is an input of the cached backward graph, even when the first
    one equals the 1 that grad seeds with."""
    x = np.array([0.2, 0.7])
    for _ in range(CALLS):
        _, f_vjp = vjp(lambda x: jnp.sum(jnp.sin(x)), x)
        for ct in [1.0, 2.0, -0.5, 1.0]:
            np.testing.assert_allclose(f_vjp(np.float64(ct))[0], ct * np.cos(x), rtol=1e-14)
