"""Derivatives: every differentiable case of ``cases.py`` checked to second order in both modes,
plus exact-value tests of the transforms' semantics."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import (check_grads, custom_vjp, grad, hessian, jacfwd, jacrev, jvp, make_graph,
                      value_and_grad, vjp)
from jitgraph.core import Aval

from cases import GRAD_CASES


def _diff_fn(case):
    """The case as a function of its differentiated arguments only, in float64."""
    nums = case.diff_argnums
    args = list(case.args)

    def f(*diff):
        full = list(args)
        for i, d in zip(nums, diff):
            full[i] = d
        return case.fn(*full)
    return f, tuple(np.asarray(args[i], np.float64) for i in nums)


@pytest.mark.parametrize("case", GRAD_CASES, ids=lambda c: c.name)
def test_check_grads(case):
    f, args = _diff_fn(case)
    check_grads(f, args, order=case.order, modes=("fwd", "rev"))


# ------------------------------------------------------------------ closed forms
def test_hessian_of_quadratic_form():
    A = np.array([[1.0, 2.0, 0.5], [-1.0, 3.0, 4.0], [0.0, 1.5, -2.0]])
    x = np.array([0.3, -1.2, 2.0])
    H = hessian(lambda x: x @ A @ x)(x)
    np.testing.assert_allclose(H, A + A.T, rtol=1e-14, atol=1e-14)
    g = grad(lambda x: x @ A @ x)(x)
    np.testing.assert_allclose(g, (A + A.T) @ x, rtol=1e-14)
    # jacfwd(grad) and jacrev(grad) agree with hessian
    np.testing.assert_allclose(jacrev(grad(lambda x: x @ A @ x))(x), A + A.T, atol=1e-14)
    np.testing.assert_allclose(jacfwd(grad(lambda x: x @ A @ x))(x), A + A.T, atol=1e-14)


def test_jvp_vjp_adjoint_identity():
    def f(x, W):
        return jnp.tanh(W @ x) * jnp.sum(x * x)
    rng = np.random.default_rng(0)
    x, W = rng.standard_normal(3), rng.standard_normal((4, 3))
    u = (rng.standard_normal(3), rng.standard_normal((4, 3)))
    v = rng.standard_normal(4)
    _, Ju = jvp(f, (x, W), u)
    _, f_vjp = vjp(f, x, W)
    JTv = f_vjp(v)
    lhs = float(np.dot(v, Ju))
    rhs = float(np.dot(JTv[0], u[0]) + np.sum(JTv[1] * u[1]))
    assert lhs == pytest.approx(rhs, rel=1e-12)


def test_triple_grad_closed_form():
    f = lambda x: x ** 4 + jnp.sin(x) * x
    # f' = 4x^3 + cos x * x + sin x ; f'' = 12x^2 - x sin x + 2 cos x
    # f''' = 24x - sin x - x cos x - 2 sin x = 24x - 3 sin x - x cos x
    x = 0.7
    assert grad(f)(x) == pytest.approx(4 * x ** 3 + np.cos(x) * x + np.sin(x), rel=1e-14)
    assert grad(grad(f))(x) == pytest.approx(12 * x ** 2 - x * np.sin(x) + 2 * np.cos(x),
                                             rel=1e-14)
    assert grad(grad(grad(f)))(x) == pytest.approx(24 * x - 3 * np.sin(x) - x * np.cos(x),
                                                   rel=1e-13)
    # exp: every derivative is exp; a 4th order pins the composition
    assert grad(grad(grad(grad(jnp.exp))))(1.3) == pytest.approx(np.exp(1.3), rel=1e-14)
    # with a float32 input the result stays float32
    g3 = grad(grad(grad(f)))(np.float32(x))
    assert np.asarray(g3).dtype == np.float32


def test_grad_of_python_scalar_returns_float64_scalar():
    g = grad(lambda x: x * x * 3.0)(2.0)
    assert np.asarray(g).shape == () and np.asarray(g).dtype == np.float64
    assert float(g) == 12.0


def test_multi_use_accumulates():
    # y = x*x + x*sin(x) + x : dy/dx = 2x + sin x + x cos x + 1
    x = np.array([0.5, -1.0, 2.0])
    g = grad(lambda x: jnp.sum(x * x + x * jnp.sin(x) + x))(x)
    np.testing.assert_allclose(g, 2 * x + np.sin(x) + x * np.cos(x) + 1, rtol=1e-14)
    # the same tracer used as both operands, and many times
    g = grad(lambda x: jnp.sum((x * x) * (x * x)))(x)
    np.testing.assert_allclose(g, 4 * x ** 3, rtol=1e-14)
    g = grad(lambda x: jnp.sum(x + x + x + x + x))(x)
    np.testing.assert_array_equal(g, np.full(3, 5.0))


def test_broadcasting_sums_to_shape():
    x = np.array([[1.0], [2.0]])        # (2, 1)
    y = np.array([10.0, 20.0, 30.0])    # (3,)
    s = np.array(3.0)                   # ()
    gx, gy, gs = grad(lambda x, y, s: jnp.sum(x * y * s), argnums=(0, 1, 2))(x, y, s)
    assert gx.shape == (2, 1) and gy.shape == (3,) and gs.shape == ()
    np.testing.assert_allclose(gx, np.full((2, 1), 60.0 * 3.0))
    np.testing.assert_allclose(gy, np.full(3, 3.0 * 3.0))
    np.testing.assert_allclose(gs, np.sum(x * y))
    # broadcast against a bigger leading shape
    b = np.ones((4, 2, 3))
    g = grad(lambda y: jnp.sum(b * y))(y)
    np.testing.assert_array_equal(g, np.full(3, 8.0))
    g = grad(lambda x: jnp.sum(jnp.broadcast_to(x, (5, 2, 3))))(x)
    np.testing.assert_array_equal(g, np.full((2, 1), 15.0))


def test_gather_repeated_indices_scatter_add():
    x = np.arange(5.0)
    idx = np.array([1, 1, 3, 1, -1, 4])
    w = np.array([1.0, 10.0, 100.0, 1000.0, 5.0, 7.0])
    g = grad(lambda x: jnp.sum(x[idx] * w))(x)
    np.testing.assert_array_equal(g, [0.0, 1011.0, 0.0, 100.0, 12.0])
    logp = np.zeros((3, 4))
    labels = np.array([2, 2, 0])
    g = grad(lambda l: jnp.sum(l[jnp.arange(3), labels]) + jnp.sum(l[0, labels]))(logp)
    want = np.zeros((3, 4))
    want[0, 2] += 1 + 2
    want[1, 2] += 1
    want[2, 0] += 1
    want[0, 0] += 1
    np.testing.assert_array_equal(g, want)
    g = grad(lambda x: jnp.sum(jnp.take(x, np.array([[0, 0], [0, 2]]), axis=1)))(np.ones((2, 3)))
    np.testing.assert_array_equal(g, [[3.0, 0.0, 1.0], [3.0, 0.0, 1.0]])
    g = grad(lambda x: jnp.sum(jnp.take_along_axis(x, np.array([[1, 1, 1], [0, 2, 0]]), axis=1)))(
        np.ones((2, 3)))
    np.testing.assert_array_equal(g, [[0.0, 3.0, 0.0], [2.0, 0.0, 1.0]])


def test_float32_gradients_stay_float32():
    x = np.array([0.5, -1.0, 2.0], np.float32)
    W = np.ones((3, 2), np.float32)

    def loss(W, x):
        h = jnp.tanh(x @ W) * 2.0 + 1
        return jnp.mean(h ** 2) + jnp.sum(jnp.exp(-x)) / 3

    gW, gx = grad(loss, argnums=(0, 1))(W, x)
    assert gW.dtype == np.float32 and gx.dtype == np.float32
    v, g = value_and_grad(loss)(W, x)
    assert np.asarray(v).dtype == np.float32 and g.dtype == np.float32
    g64 = grad(loss, argnums=(0, 1))(W.astype(np.float64), x.astype(np.float64))
    np.testing.assert_allclose(gW, g64[0], rtol=1e-5)
    np.testing.assert_allclose(gx, g64[1], rtol=1e-5)
    _, t = jvp(lambda x: jnp.sin(x) * 2.0, (x,), (np.ones(3, np.float32),))
    assert t.dtype == np.float32
    J = jacrev(lambda x: jnp.sin(x) * 2.0)(x)
    assert J.dtype == np.float32
    J = jacfwd(lambda x: jnp.sin(x) * 2.0)(x)
    assert J.dtype == np.float32
    H = hessian(lambda x: jnp.sum(jnp.sin(x)))(x)
    assert H.dtype == np.float32
    # mixed: float32 input, float64 constant inside -> float64 output, float32 gradient
    g = grad(lambda x: jnp.sum(x * np.ones(3)))(x)
    assert g.dtype == np.float32


def test_has_aux():
    def f(x):
        y = jnp.sum(x * x)
        return y, {"y": y, "double": 2 * x}
    x = np.array([1.0, 2.0])
    g, aux = grad(f, has_aux=True)(x)
    np.testing.assert_array_equal(g, 2 * x)
    assert float(aux["y"]) == 5.0
    np.testing.assert_array_equal(aux["double"], 2 * x)
    (v, aux), g = value_and_grad(f, has_aux=True)(x)
    assert float(v) == 5.0
    np.testing.assert_array_equal(g, 2 * x)
    out, f_vjp, aux = vjp(f, x, has_aux=True)
    assert float(out) == 5.0
    np.testing.assert_array_equal(f_vjp(np.array(3.0))[0], 6 * x)
    with pytest.raises(TypeError, match="pair"):
        grad(lambda x: jnp.sum(x), has_aux=True)(x)


def test_argnums_tuples():
    f = lambda a, b, c: jnp.sum(a * b ** 2) + c * 3.0
    a, b, c = np.array([1.0, 2.0]), np.array([3.0, -1.0]), 2.0
    ga, gc = grad(f, argnums=(0, 2))(a, b, c)
    np.testing.assert_array_equal(ga, b ** 2)
    assert float(gc) == 3.0
    (gb,) = grad(f, argnums=(1,))(a, b, c)
    np.testing.assert_array_equal(gb, 2 * a * b)
    gb = grad(f, argnums=1)(a, b, c)
    np.testing.assert_array_equal(gb, 2 * a * b)
    gc = grad(f, argnums=-1)(a, b, c)
    assert float(gc) == 3.0
    J = jacrev(lambda a, b: a * b, argnums=(0, 1))(a, b)
    np.testing.assert_array_equal(J[0], np.diag(b))
    np.testing.assert_array_equal(J[1], np.diag(a))
    J = jacfwd(lambda a, b: a * b, argnums=(0, 1))(a, b)
    np.testing.assert_array_equal(J[0], np.diag(b))
    np.testing.assert_array_equal(J[1], np.diag(a))
    # integer arguments that are not differentiated are fine
    g = grad(lambda x, n: jnp.sum(x[n]))(np.ones(3), np.array([0, 0, 2]))
    np.testing.assert_array_equal(g, [2.0, 0.0, 1.0])


def test_pytree_params():
    params = {"W": np.array([[1.0, 2.0], [3.0, 4.0]]), "b": [np.array([0.5, -0.5]),
                                                             (np.array(2.0),)]}
    x = np.array([1.0, -1.0])

    def loss(p, x):
        h = p["W"] @ x + p["b"][0]
        return jnp.sum(h * h) * p["b"][1][0]

    g = grad(loss)(params, x)
    assert set(g) == {"W", "b"} and isinstance(g["b"], list) and isinstance(g["b"][1], tuple)
    h = params["W"] @ x + params["b"][0]
    s = params["b"][1][0]
    np.testing.assert_allclose(g["W"], 2 * s * np.outer(h, x))
    np.testing.assert_allclose(g["b"][0], 2 * s * h)
    np.testing.assert_allclose(g["b"][1][0], np.sum(h * h))
    check_grads(loss, (params, x), order=2)
    # gradient with respect to the second positional argument while the first is a pytree
    gx = grad(loss, argnums=1)(params, x)
    np.testing.assert_allclose(gx, 2 * s * params["W"].T @ h)
    # pytrees in jvp and vjp
    out, f_vjp = vjp(loss, params, x)
    gp, gx2 = f_vjp(np.array(1.0))
    np.testing.assert_allclose(gp["W"], g["W"])
    np.testing.assert_allclose(gx2, gx)
    t = jitgraph.tree_map(np.ones_like, params)
    _, tout = jvp(lambda p: loss(p, x), (params,), (t,))
    want = sum(np.sum(a * b) for a, b in zip(jitgraph.tree_leaves(g), jitgraph.tree_leaves(t)))
    assert float(tout) == pytest.approx(want, rel=1e-13)


def test_custom_vjp_clipped_gradient():
    @custom_vjp
    def clip_grad(x):
        return x * 1.0

    def fwd(x):
        return clip_grad(x), None

    def bwd(res, g):
        return (jnp.clip(g, -1.0, 1.0),)

    clip_grad.defvjp(fwd, bwd)
    x = np.array([1.0, 2.0, 3.0])
    # forward value unchanged
    np.testing.assert_array_equal(clip_grad(x), x)
    g = grad(lambda x: jnp.sum(clip_grad(x) * np.array([0.5, -3.0, 10.0])))(x)
    np.testing.assert_array_equal(g, [0.5, -1.0, 1.0])
    # inside a bigger computation: chain rule applies outside the custom function
    g = grad(lambda x: jnp.sum(clip_grad(x * 4.0) * x))(x)
    # d/dx [ (4x) * x ] with the cotangent of clip_grad's output (= x) clipped to 1, times 4
    np.testing.assert_allclose(g, 4 * x + np.clip(x, -1, 1) * 4)


def test_custom_vjp_grad_of_grad():
    @custom_vjp
    def f(x):
        return jnp.sin(x)

    def f_fwd(x):
        return jnp.sin(x), x

    def f_bwd(x, g):
        return (g * jnp.cos(x) * 2.0,)   # deliberately twice the true derivative

    f.defvjp(f_fwd, f_bwd)
    x = 0.4
    assert float(f(x)) == pytest.approx(np.sin(x))
    assert float(grad(f)(x)) == pytest.approx(2 * np.cos(x), rel=1e-14)
    # grad of grad differentiates bwd (written with jnp): d/dx 2 cos x = -2 sin x
    assert float(grad(grad(f))(x)) == pytest.approx(-2 * np.sin(x), rel=1e-14)
    xs = np.array([0.1, 0.5, -0.3])
    g = grad(lambda x: jnp.sum(f(x) ** 2))(xs)
    np.testing.assert_allclose(g, 2 * np.sin(xs) * 2 * np.cos(xs), rtol=1e-14)
    # a custom_vjp whose bwd is exact passes check_grads in reverse mode, to second order
    @custom_vjp
    def softplus(x):
        return jnp.log1p(jnp.exp(x))

    softplus.defvjp(lambda x: (softplus(x), x),
                    lambda x, g: (g * jitgraph.nn.sigmoid(x),))
    check_grads(lambda x: softplus(x) * x, (xs,), order=2, modes=("rev",))
    # forward mode is refused with a clear message
    with pytest.raises(TypeError, match="custom_vjp"):
        jvp(softplus, (xs,), (xs,))


def test_custom_vjp_multiple_args_and_pytree():
    @custom_vjp
    def f(x, p):
        return x * p["a"] + p["b"]

    f.defvjp(lambda x, p: (f(x, p), (x, p)),
             lambda res, g: (g * res[1]["a"], {"a": jnp.sum(g * res[0]), "b": jnp.sum(g)}))
    x = np.array([1.0, 2.0])
    p = {"a": np.array(3.0), "b": np.array(0.5)}
    gx, gp = grad(lambda x, p: jnp.sum(f(x, p)), argnums=(0, 1))(x, p)
    np.testing.assert_array_equal(gx, [3.0, 3.0])
    assert float(gp["a"]) == 3.0 and float(gp["b"]) == 2.0


def test_custom_vjp_closing_over_traced_values():
    # fwd/bwd close over w, a traced value of the enclosing grad: the custom rule applies to x,
    # and w gets its ordinary derivative
    def model(w, x):
        @custom_vjp
        def f(x):
            return jnp.sin(x) * w

        f.defvjp(lambda x: (f(x), x), lambda x, g: (g * jnp.cos(x) * w * 10.0,))
        return f(x) * x

    w, x = 3.0, 0.5
    gw, gx = grad(model, argnums=(0, 1))(w, x)
    assert float(gw) == pytest.approx(np.sin(x) * x, rel=1e-14)
    # d/dx [f(x) * x] = f'(x) * x + f(x), with the custom f' = 10 w cos x
    assert float(gx) == pytest.approx(10 * w * np.cos(x) * x + w * np.sin(x), rel=1e-14)
    # second order through the closure: d/dw of the custom x-gradient
    g2 = grad(lambda w: grad(model, argnums=1)(w, x))(w)
    assert float(g2) == pytest.approx(10 * np.cos(x) * x + np.sin(x), rel=1e-14)
    # the same under make_graph: one custom_vjp_call node whose inputs include w
    g = make_graph(grad(model, argnums=(0, 1)))(w, x)
    outs = jitgraph.interpret(g, [np.array(w), np.array(x)])
    np.testing.assert_allclose([float(outs[0]), float(outs[1])], [float(gw), float(gx)],
                               rtol=1e-14)
    fg = make_graph(model)(w, x)
    assert fg.count("custom_vjp_call") == 1
    (call,) = [n for n in fg.nodes if n.prim.name == "custom_vjp_call"]
    assert len(call.inputs) == 2 and call.params["_graph"].inputs.__len__() == 2


def test_defprimitive_user_primitive():
    # cube(x) = x**3 with its own rules, written with jnp (so they differentiate again)
    cube = jitgraph.defprimitive(
        "test_cube", impl=lambda x: x ** 3,
        vjp=lambda g, out, x: (g * 3.0 * x * x,),
        jvp=lambda ts, out, x: None if ts[0] is None else ts[0] * 3.0 * x * x)
    x = np.array([0.5, -1.5, 2.0])
    np.testing.assert_array_equal(cube(x), x ** 3)
    np.testing.assert_allclose(grad(lambda x: jnp.sum(cube(x)))(x), 3 * x ** 2)
    check_grads(lambda x: cube(jnp.sin(x)) * x, (x,), order=2, modes=("fwd", "rev"))
    g = make_graph(lambda x: cube(x) + 1.0)(x)
    assert g.count("test_cube") == 1
    np.testing.assert_array_equal(jitgraph.interpret(g, [x])[0], x ** 3 + 1.0)
    # a two-operand primitive with a params and an explicit shape rule
    scaled_add = jitgraph.defprimitive(
        "test_scaled_add", impl=lambda x, y, *, alpha: x + alpha * y,
        abstract_eval=lambda x, y, *, alpha: Aval(x.shape, x.dtype),
        vjp=lambda g, out, x, y, *, alpha: (g, g * alpha),
        jvp=lambda ts, out, x, y, *, alpha: (0.0 if ts[0] is None else ts[0])
        + (0.0 if ts[1] is None else alpha * ts[1]))
    y = np.array([1.0, 2.0, 3.0])
    check_grads(lambda x, y: jnp.sin(scaled_add(x, y, alpha=2.5)), (x, y), order=2)
    gx, gy = grad(lambda x, y: jnp.sum(scaled_add(x, y, alpha=2.5)), argnums=(0, 1))(x, y)
    np.testing.assert_array_equal(gx, np.ones(3))
    np.testing.assert_array_equal(gy, np.full(3, 2.5))


def test_stop_gradient():
    x = np.array([1.0, 2.0])
    g = grad(lambda x: jnp.sum(x * jitgraph.stop_gradient(x)))(x)
    np.testing.assert_array_equal(g, x)
    g = grad(lambda x: jnp.sum(jnp.stop_gradient(x * x)))(x)
    np.testing.assert_array_equal(g, [0.0, 0.0])
    _, t = jvp(lambda x: jnp.stop_gradient(x) * x, (x,), (np.ones(2),))
    np.testing.assert_array_equal(t, x)
    H = hessian(lambda x: jnp.sum(jnp.stop_gradient(x) * x * x))(x)
    np.testing.assert_array_equal(H, np.diag(2 * x))


def test_jacfwd_equals_jacrev():
    def f(x):
        return jnp.stack([jnp.sum(jnp.sin(x) * x), x[0] * x[2], jnp.prod(x), jnp.exp(x[1])]) \
            * jnp.tanh(x[:, None] @ x[None, :1])[1:]

    x = np.array([0.3, -0.7, 1.1])
    Jf, Jr = jacfwd(f)(x), jacrev(f)(x)
    assert Jf.shape == Jr.shape == (2, 4, 3)
    np.testing.assert_allclose(Jf, Jr, rtol=1e-13, atol=1e-14)
    # against central differences
    eps = 1e-6
    num = np.stack([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(3)], axis=-1)
    np.testing.assert_allclose(Jr, num, rtol=1e-6, atol=1e-8)

    def g(x):
        return jnp.concatenate([jnp.sin(x), x[::-1] * x])

    np.testing.assert_allclose(jacfwd(g)(x), jacrev(g)(x), rtol=1e-14)
    np.testing.assert_allclose(jacrev(g)(x)[:3], np.diag(np.cos(x)), rtol=1e-14)
    np.testing.assert_allclose(jacrev(g)(x)[3:], np.diag(x[::-1]) + np.diag(x)[:, ::-1],
                               rtol=1e-14)
    # matrix input and output
    A = np.arange(6.0).reshape(2, 3) / 7
    h = lambda A: jnp.tanh(A @ A.T)
    np.testing.assert_allclose(jacfwd(h)(A), jacrev(h)(A), rtol=1e-13, atol=1e-15)
    assert jacrev(h)(A).shape == (2, 2, 2, 3)


def test_make_graph_of_grad_shows_backward_and_no_junk():
    W = np.ones((3, 2))
    x = np.ones((4, 3))

    def loss(W, x):
        return jnp.sum(jnp.tanh(x @ W))

    g = make_graph(grad(loss))(W, x)
    names = [n.prim.name for n in g.nodes]
    # forward: matmul, tanh; backward: the tanh VJP (mul/sub) and the matmul VJP (matmul again)
    assert names.count("matmul") == 2, g
    assert names.count("tanh") == 1
    assert "transpose" in names
    # no multiplications or additions by identity constants, no double negation
    for n in g.nodes:
        for v in n.inputs:
            c = g.consts.get(v)
            if c is None or c.size != 1:
                continue
            if n.prim.name == "mul":
                assert float(c.ravel()[0]) != 1.0, f"junk node {n}\n{g}"
            if n.prim.name in ("add", "sub"):
                assert float(c.ravel()[0]) != 0.0, f"junk node {n}\n{g}"
        if n.prim.name == "neg":
            p = [m for m in g.nodes if n.inputs[0] in m.outs]
            assert not p or p[0].prim.name != "neg"
    assert len(g.nodes) <= 9, g
    # the gradient graph computes the gradient
    (gW,) = jitgraph.interpret(g, [W, x])
    np.testing.assert_allclose(gW, grad(loss)(W, x))
    np.testing.assert_allclose(gW, x.T @ (1 - np.tanh(x @ W) ** 2))
    # a tiny graph has exactly the expected nodes
    g = make_graph(grad(lambda x: jnp.sum(jnp.sin(x))))(np.ones(3))
    assert [n.prim.name for n in g.nodes] == ["cos"], g
    g = make_graph(grad(lambda x: jnp.sum(x * x)))(np.ones(3))
    assert sorted(n.prim.name for n in g.nodes) in (["add"], ["mul"]), g


def test_vjp_checks_cotangent():
    out, f_vjp = vjp(lambda x: x * 2.0, np.ones(3))
    with pytest.raises(ValueError, match="shape"):
        f_vjp(np.ones(4))
    np.testing.assert_array_equal(f_vjp(np.arange(3.0))[0], 2 * np.arange(3.0))


def test_grad_of_nonsmooth_conventions():
    # relu at 0 and max with ties share the gradient as JAX does
    assert float(grad(lambda x: jnp.maximum(x, 0.0))(0.0)) == 0.5
    g = grad(lambda x: jnp.max(x))(np.array([1.0, 3.0, 3.0]))
    np.testing.assert_array_equal(g, [0.0, 0.5, 0.5])
    assert float(grad(jnp.abs)(0.0)) == 0.0
    assert float(grad(lambda x: jnp.sqrt(x * x + 1.0))(0.0)) == 0.0
    # x ** 2 with a zero base has a finite derivative; x ** y with a zero base wrt y is zero
    assert float(grad(lambda x: x ** 2.0)(0.0)) == 0.0
    assert float(grad(lambda y: 0.0 ** y, argnums=0)(2.0)) == 0.0


def test_grad_through_where_no_nan_from_unselected_branch():
    # the classic "safe log": the unselected branch's gradient is exactly 0 (not nan*0)
    x = np.array([0.0, 1.0, 2.0])
    g = grad(lambda x: jnp.sum(jnp.where(x > 0, jnp.log(jnp.where(x > 0, x, 1.0)), 0.0)))(x)
    np.testing.assert_array_equal(g, [0.0, 1.0, 0.5])


def test_value_and_grad_returns_value():
    v, g = value_and_grad(lambda x: jnp.sum(x ** 3))(np.array([1.0, 2.0]))
    assert float(v) == 9.0
    np.testing.assert_array_equal(g, [3.0, 12.0])


def test_every_differentiable_primitive_is_gradient_checked():
    """The check_grads cases above exercise the VJP and JVP rule of every differentiable
    built-in primitive (to second order)."""
    used = set()
    for c in GRAD_CASES:
        f, args = _diff_fn(c)
        used.update(n.prim.name for n in make_graph(f)(*args).nodes)
    # (while differentiates in forward mode only, by design: test_control_flow.py checks it)
    builtin = {name for name, p in jitgraph.PRIMITIVES.items()
               if p.differentiable and name not in ("custom_vjp_call", "while")
               and not name.startswith("test_")}
    missing = builtin - used
    assert not missing, f"differentiable primitives without a check_grads case: {sorted(missing)}"
    for name in builtin:
        p = jitgraph.PRIMITIVES[name]
        assert p.vjp is not None and p.jvp is not None, name


def test_convert_gradients():
    """check_grads runs in float64, where float casts vanish: the convert rules checked here."""
    x64 = np.array([0.5, -1.25, 2.0])
    g = grad(lambda x: jnp.sum(x.astype(jnp.float32) * np.float32(3.0)))(x64)
    assert g.dtype == np.float64
    np.testing.assert_array_equal(g, [3.0, 3.0, 3.0])
    x32 = x64.astype(np.float32)
    g = grad(lambda x: jnp.sum(jnp.sin(x.astype(jnp.float64))))(x32)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, np.cos(x64).astype(np.float32), rtol=1e-7)
    _, t = jvp(lambda x: x.astype(jnp.float32) ** 2, (x64,), (np.ones(3),))
    assert t.dtype == np.float32
    np.testing.assert_allclose(t, 2 * x64, rtol=1e-7)
    # second order through two casts
    h = grad(grad(lambda x: jnp.astype(jnp.astype(x, jnp.float32) ** 3, jnp.float64)))(1.5)
    assert float(h) == pytest.approx(9.0, rel=1e-6)
    # casting to an integer has a zero derivative; from an integer there is nothing to differentiate
    g = grad(lambda x: jnp.sum(x.astype(jnp.int32) * x))(np.array([1.5, 2.5]))
    np.testing.assert_array_equal(g, [1.0, 2.0])
