"""jitgraph.lax control flow: each construct against an explicit Python loop over the reference,
gradients against float64 central differences, forward vs reverse mode, compiled vs eager, the
errors JAX gives, and that a compiled scan runs one body compiled once (no unrolling)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import jitgraph as jg
import jitgraph.numpy as jnp
from jitgraph import lax

RNG = np.random.default_rng(0)
W = RNG.standard_normal(3) * 0.5
XS = RNG.standard_normal((4, 3))


def cell(c, x):
    """A small recurrent step over a pytree carry, closing over W."""
    h, s = c["h"], c["s"]
    h = jnp.tanh(h * W + x)
    return {"h": h, "s": s + jnp.sum(h)}, (h * 2.0, jnp.sum(x))


def loop_cell(c, xs, reverse=False):
    """The same scan as an explicit Python loop over NumPy."""
    h, s = c["h"], c["s"]
    ys0, ys1 = [None] * len(xs), [None] * len(xs)
    for t in (reversed(range(len(xs))) if reverse else range(len(xs))):
        h = np.tanh(h * W + xs[t])
        s = s + h.sum()
        ys0[t], ys1[t] = h * 2.0, xs[t].sum()
    return {"h": h, "s": s}, (np.stack(ys0), np.array(ys1))


def scan_loss(w, xs):
    def step(h, x):
        h = jnp.tanh(h * w + x)
        return h, jnp.sin(h)
    h, ys = lax.scan(step, jnp.zeros(3), xs)
    return jnp.sum(h * h) + jnp.sum(ys)


def cond_loss(x, w):
    y = lax.cond(jnp.sum(x) > 0, lambda a: jnp.sin(a) * w, lambda a: jnp.cos(a * w), x)
    return jnp.sum(y * y)


def fori_loss(w):
    return jnp.sum(lax.fori_loop(0, 3, lambda i, v: jnp.tanh(v * w + i), w))


# ------------------------------------------------------------------ values (reference)
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_matches_python_loop(reverse):
    init = {"h": np.zeros(3), "s": np.float64(0.0)}
    (c, ys) = lax.scan(cell, init, XS, reverse=reverse)
    (c_ref, ys_ref) = loop_cell(init, XS, reverse)
    np.testing.assert_allclose(c["h"], c_ref["h"], rtol=1e-12)
    np.testing.assert_allclose(c["s"], c_ref["s"], rtol=1e-12)
    np.testing.assert_allclose(ys[0], ys_ref[0], rtol=1e-12)
    np.testing.assert_allclose(ys[1], ys_ref[1], rtol=1e-12)


def test_scan_without_xs_map_and_weak_carry():
    c, ys = lax.scan(lambda c, _: (c * 2.0 + 1.0, c), 1.0, None, length=4)
    assert float(c) == 31.0 and ys.tolist() == [1.0, 3.0, 7.0, 15.0]
    # a Python-scalar carry takes the body's dtype
    c32, _ = lax.scan(lambda c, x: (c + jnp.sum(x), None), 0.0, np.ones((3, 2), np.float32))
    assert c32.dtype == np.float32 and float(c32) == 6.0
    out = lax.map(lambda r: r * r.sum(), XS)
    np.testing.assert_allclose(out, np.stack([r * r.sum() for r in XS]))


def test_cond_switch_fori_while_values():
    x = np.arange(3.0)
    assert lax.cond(True, lambda a: a + 1, lambda a: a - 1, x).tolist() == [1, 2, 3]
    assert lax.cond(0, lambda a: a + 1, lambda a: a - 1, x).tolist() == [-1, 0, 1]
    branches = [lambda a: a, lambda a: 2 * a, lambda a: 3 * a]
    for i, k in [(-4, 1), (0, 1), (1, 2), (2, 3), (9, 3)]:      # out-of-range indices clamp
        assert lax.switch(i, branches, x).tolist() == (k * x).tolist()
    acc = 1.0
    for i in range(2, 7):
        acc = acc * 1.5 + i
    assert lax.fori_loop(2, 7, lambda i, v: v * 1.5 + i, 1.0) == pytest.approx(acc)
    assert float(lax.while_loop(lambda v: v < 100, lambda v: v * 3, 1.0)) == 243.0


def test_stop_gradient():
    g = jg.grad(lambda x: jnp.sum(x * lax.stop_gradient(x)))(np.ones(2) * 3)
    assert g.tolist() == [3.0, 3.0]


# ------------------------------------------------------------------ derivatives
def test_scan_gradients_against_finite_differences():
    jg.check_grads(scan_loss, (W, XS), order=2)


def test_cond_gradients_both_branches():
    jg.check_grads(cond_loss, (XS[0] + 2, W), order=2)
    jg.check_grads(cond_loss, (XS[0] - 2, W), order=2)


def test_switch_and_fori_gradients():
    f = lambda x: jnp.sum(lax.switch(1, [jnp.sin, lambda a: a * jnp.exp(a), jnp.cos], x))
    jg.check_grads(f, (W,), order=2)
    jg.check_grads(fori_loss, (W,), order=2)


def test_jvp_matches_vjp_through_scan_and_cond():
    def f(w):
        y = lax.cond(w[0] > 0, lambda a: a * 2.0, jnp.sin, w)
        _, ys = lax.scan(lambda c, x: (c * y + x, c), jnp.ones(3), XS)
        return ys
    t = RNG.standard_normal(3)
    ct = RNG.standard_normal((4, 3))
    _, tan = jg.jvp(f, (W,), (t,))
    _, vjp_fn = jg.vjp(f, W)
    (g,) = vjp_fn(ct)
    np.testing.assert_allclose(np.sum(tan * ct), np.sum(g * t), rtol=1e-10)


def test_hessian_through_scan():
    h = jg.hessian(lambda w: scan_loss(w, XS))(W)
    eps = 1e-5
    g = jg.grad(lambda w: scan_loss(w, XS))
    fd = np.stack([(g(W + eps * e) - g(W - eps * e)) / (2 * eps) for e in np.eye(3)])
    np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(h, h.T, rtol=1e-10, atol=1e-12)


def test_while_loop_forward_mode_only():
    def f(x):
        return lax.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, c[1] * x), (0, x))[1]
    _, t = jg.jvp(f, (np.float64(1.1),), (np.float64(1.0),))
    assert float(t) == pytest.approx(5 * 1.1 ** 4)
    with pytest.raises(ValueError, match=r"Reverse-mode differentiation does not work for "
                                         r"while_loop \(body_fun <lambda>.*use scan|lax.scan"):
        jg.grad(f)(1.1)

    def g(x, n):
        return lax.fori_loop(0, n, lambda i, v: v * x, x)
    assert float(jg.jvp(lambda x: g(x, 3), (2.0,), (1.0,))[1]) == pytest.approx(4 * 2.0 ** 3)
    with pytest.raises(ValueError, match="fori_loop with traced bounds"):
        jg.jit(jg.grad(g))(2.0, 3)


# ------------------------------------------------------------------ compiled
@jg.jit
def compiled_step(w, xs):
    def loss(w):
        h = lax.fori_loop(0, 2, lambda i, v: v * 0.5 + w, w)
        return scan_loss(w, xs) + cond_loss(xs[0], h)
    return jg.value_and_grad(loss)(w)


def test_jit_matches_eager_value_and_grad():
    def loss(w):
        h = lax.fori_loop(0, 2, lambda i, v: v * 0.5 + w, w)
        return scan_loss(w, XS) + cond_loss(XS[0], h)
    v, g = compiled_step(W, XS)
    v_ref, g_ref = jg.value_and_grad(loss)(W)
    np.testing.assert_allclose(v, v_ref, rtol=1e-10)
    np.testing.assert_allclose(g, g_ref, rtol=1e-10)
    # the other branch of the cond, through the same compiled program
    v2, g2 = compiled_step(W, -XS)
    np.testing.assert_allclose(g2, jg.grad(lambda w: scan_loss(w, -XS) + cond_loss(
        -XS[0], lax.fori_loop(0, 2, lambda i, v: v * 0.5 + w, w)))(W), rtol=1e-10)


def test_jit_grad_of_grad_through_scan_and_while():
    gg = jg.jit(jg.grad(lambda w: jnp.sum(jg.grad(lambda u: scan_loss(u, XS))(w))))
    np.testing.assert_allclose(gg(W), jg.grad(lambda w: jnp.sum(
        jg.grad(lambda u: scan_loss(u, XS))(w)))(W), rtol=1e-9)
    wl = jg.jit(lambda x, n: lax.fori_loop(0, n, lambda i, v: v * 2.0 + i, x))
    assert wl(np.float64(1.0), 4) == pytest.approx(((1 * 2 + 0) * 2 + 1) * 2 * 2 + 2 * 2 + 3)


def _scan_with_length(n):
    @jg.jit
    def f(xs):
        return lax.scan(lambda c, x: (jnp.tanh(c * 0.5 + x), c * x), jnp.zeros(3), xs)
    xs = np.ones((n, 3))
    return f, xs


def test_scan_body_compiles_once_whatever_the_length():
    f3, xs3 = _scan_with_length(3)
    f50, xs50 = _scan_with_length(50)
    lo3, lo50 = f3.lower(xs3), f50.lower(xs50)
    assert lo3.graph.count("scan") == lo50.graph.count("scan") == 1
    assert len(lo3.graph.nodes) == len(lo50.graph.nodes)
    assert len(lo3.plan.steps) == len(lo50.plan.steps)
    body3 = re.findall(r"# scan of sub-graphs (\w+)", lo3.source)
    assert body3 and body3 == re.findall(r"# scan of sub-graphs (\w+)", lo50.source)
    assert len(lo3.source.splitlines()) == len(lo50.source.splitlines())
    c, ys = f50(xs50)
    c_ref, ys_ref = lax.scan(lambda c, x: (jnp.tanh(c * 0.5 + x), c * x), np.zeros(3), xs50)
    np.testing.assert_allclose(c, c_ref, rtol=1e-12)
    np.testing.assert_allclose(ys, ys_ref, rtol=1e-12)


def test_compiled_loops_never_update_their_operands_in_place():
    """Carries are updated in place from the second step on: a body passing a closed-over
    array or an xs slice through as a carry must leave both untouched."""
    w = np.arange(3.0)
    xs = np.arange(12.0).reshape(4, 3)
    M = np.eye(3) * 0.5

    def f(c0, xs):
        # (the product keeps this body on the Python loop, which updates carries in place)
        (a, b, c), ys = lax.scan(lambda c, x: ((jnp.dot(c[1], M) * 2.0 + x, x, w), c[0] + c[2]),
                                 (c0, c0, c0), xs)
        v = lax.while_loop(lambda v: v[0][0] < 50.0, lambda v: (v[0] * 2.0 + v[1], w), (c0, c0))
        return a, b, c, ys, v[0]
    c0 = np.ones(3)
    for got, want in zip(jg.jit(f)(c0, xs), f(c0, xs)):
        np.testing.assert_allclose(got, want)
    assert c0.tolist() == [1.0, 1.0, 1.0] and w.tolist() == [0.0, 1.0, 2.0]
    assert xs.tolist() == np.arange(12.0).reshape(4, 3).tolist()


def test_compiled_loops_swap_and_pass_through_carries():
    """Bodies of loop kernels only run in compiled loops, whose carries may come back
    swapped, passed through, or be a closed-over constant."""
    w = np.arange(3.0)
    xs = np.linspace(-1.0, 1.0, 120).reshape(40, 3)       # long enough for a compiled loop

    def f(a, b):
        (p, q, r), ys = lax.scan(lambda c, x: ((c[1], c[0] + x, w), (c[2], x)), (a, b, a), xs)
        v = lax.while_loop(lambda c: c[2] < 5, lambda c: (c[1], c[0] * 2.0, c[2] + 1), (a, b, 0))
        return p, q, r, ys, v
    a, b = np.ones(3), np.full(3, 2.0)
    for got, want in zip(jg.tree_leaves(jg.jit(f)(a, b)), jg.tree_leaves(f(a, b))):
        np.testing.assert_allclose(got, want)
    assert a.tolist() == [1.0] * 3 and b.tolist() == [2.0] * 3


def test_nested_scan_compiled():
    def f(xs):
        def outer(c, row):
            inner, _ = lax.scan(lambda a, x: (a * 0.5 + x * c, None), 0.0, row)
            return c + inner, inner
        return lax.scan(outer, 1.0, xs)
    got, want = jg.jit(f)(XS), f(XS)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)


def test_scans_with_different_bodies_never_share_a_program():
    xs = np.arange(6.0).reshape(3, 2)
    f2 = jg.jit(lambda xs: lax.scan(lambda c, x: (c + 2.0 * x, c), np.zeros(2), xs)[0])
    f3 = jg.jit(lambda xs: lax.scan(lambda c, x: (c + 3.0 * x, c), np.zeros(2), xs)[0])
    np.testing.assert_allclose(f2(xs), 2 * xs.sum(0))
    np.testing.assert_allclose(f3(xs), 3 * xs.sum(0))
    assert re.findall(r"sub-graphs (\w+)", f2.lower(xs).source) != \
        re.findall(r"sub-graphs (\w+)", f3.lower(xs).source)


# ------------------------------------------------------------------ checkpoint
def test_checkpoint_recomputes_forward_in_backward():
    def body(x):
        return jnp.sin(jnp.sin(x) * W)
    plain = lambda x: jnp.sum(body(x) ** 2)
    remat = lambda x: jnp.sum(jg.checkpoint(body)(x) ** 2)
    x = XS[1]
    np.testing.assert_allclose(jg.grad(remat)(x), jg.grad(plain)(x), rtol=1e-12)
    np.testing.assert_allclose(jg.jit(jg.grad(remat))(x), jg.grad(plain)(x), rtol=1e-12)
    jg.check_grads(remat, (x,), order=2)
    g = jg.make_graph(jg.grad(remat))(x)
    (bwd,) = [n for n in g.nodes if n.prim.name == "remat"
              and n.params["name"].startswith("backward")]
    assert bwd.params["name"].startswith("backward of checkpoint of body")
    sub = bwd.params["_graph"]
    assert sub.count("sin") == 1          # the forward runs again inside the backward node
    assert g.count("sin") == 0            # and nothing of it was kept outside
    assert jg.remat is jg.checkpoint


def test_linearize_and_jvp_has_aux():
    out, f_jvp = jg.linearize(lambda w: scan_loss(w, XS), W)
    t = RNG.standard_normal(3)
    assert out == pytest.approx(scan_loss(W, XS))
    assert f_jvp(t) == pytest.approx(np.dot(jg.grad(lambda w: scan_loss(w, XS))(W), t))
    p, tan, aux = jg.jvp(lambda x: (jnp.sin(x), {"twice": x * 2}), (W,), (np.ones(3),),
                         has_aux=True)
    np.testing.assert_allclose(tan, np.cos(W))
    np.testing.assert_allclose(aux["twice"], 2 * W)


# ------------------------------------------------------------------ errors
def test_cond_branch_mismatch_errors_name_the_functions():
    def good(a):
        return a

    def wrong_shape(a):
        return a[:2]

    def wrong_tree(a):
        return (a, a)
    x = np.ones(3)
    with pytest.raises(TypeError, match=r"true_fun and false_fun output must have identical "
                                        r"types.*wrong_shape.*test_control_flow.py"):
        lax.cond(True, good, wrong_shape, x)
    with pytest.raises(TypeError, match=r"identical types.*f32\[3\].*f64\[3\]"):
        lax.cond(True, lambda a: a.astype(np.float32), good, x)
    with pytest.raises(TypeError, match=r"true_fun \(good .* and false_fun \(wrong_tree .*same pytree structure"):
        lax.cond(True, good, wrong_tree, x)
    with pytest.raises(TypeError, match="predicate must be a scalar, got shape"):
        lax.cond(x > 0, good, good, x)
    with pytest.raises(TypeError, match="predicate must be a boolean or integer scalar, got float64"):
        lax.cond(1.5, good, good, x)
    with pytest.raises(TypeError, match="switch's index must be a boolean or integer"):
        lax.switch(np.float32(1), [good, good], x)


def test_loop_carry_mismatch_errors():
    def grows(c, x):
        return jnp.concatenate([c, x]), x

    def casts(c, x):
        return c.astype(np.float32), x
    with pytest.raises(TypeError, match=r"scan body grows .*carry leaf 0 is f64\[3\] on input "
                                        r"and f64\[6\] on output.*test_control_flow.py"):
        lax.scan(grows, np.zeros(3), XS)
    with pytest.raises(TypeError, match=r"scan body casts.*f64\[3\].*f32\[3\]"):
        lax.scan(casts, np.zeros(3), XS)
    with pytest.raises(TypeError, match=r"cond_fun .* must return a boolean scalar"):
        lax.while_loop(lambda v: v, lambda v: v, 1.0)
    with pytest.raises(ValueError, match="inconsistent lengths"):
        lax.scan(lambda c, x: (c, x), 0.0, (np.ones(3), np.ones(4)))


def test_fori_loop_index_is_weakly_typed_like_jax():
    """With Python int bounds the index mixes with float32 values as JAX's int32 index does:
    ``c * 1.1 + i`` keeps the carry float32 instead of failing for a float64 carry."""
    x = np.arange(6.0, dtype=np.float32).reshape(3, 2)
    out = lax.fori_loop(0, 5, lambda i, c: c * 1.1 + i, x)
    expected = x.copy()
    for i in range(5):
        expected = expected * np.float32(1.1) + np.float32(i)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert lax.fori_loop(np.int32(0), np.int32(3), lambda i, c: c + i, np.int32(0)).dtype == np.int32
