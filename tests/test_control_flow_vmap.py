"""Batching rules of the control-flow primitives: vmap of cond/switch/scan/fori_loop/while_loop
and checkpoint, batched at axis 0, at another axis and unbatched, against a Python loop over
the examples; per-example gradients through a scan, and gradients of a vmapped scan."""
from __future__ import annotations

import numpy as np

import jitgraph as jg
import jitgraph.numpy as jnp
from jitgraph import lax

RNG = np.random.default_rng(1)
XS = RNG.standard_normal((5, 4, 3))          # 5 examples of a 4-step sequence of 3-vectors
W = RNG.standard_normal(3) * 0.5


def rnn(w, xs):
    h, hs = lax.scan(lambda h, x: (jnp.tanh(h * w + x), jnp.sum(h)), jnp.zeros(3), xs)
    return h, hs


def stacked(f, *args_per_example):
    outs = [f(*a) for a in zip(*args_per_example)]
    return [np.stack([np.asarray(o[k]) for o in outs]) for k in range(len(outs[0]))]


def check(got, want):
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_scan_batched_at_axis_0_axis_1_and_unbatched():
    ws = RNG.standard_normal((5, 3))
    want = stacked(lambda x: rnn(W, x), XS)
    check(jg.vmap(rnn, in_axes=(None, 0))(W, XS), want)
    check(jg.vmap(rnn, in_axes=(None, 1))(W, XS.transpose(1, 0, 2)), want)
    # unbatched xs, batched closed-over weights: the carry becomes batched after one step
    check(jg.vmap(rnn, in_axes=(0, None))(ws, XS[0]), stacked(lambda w: rnn(w, XS[0]), ws))


def test_cond_and_switch_batched_and_unbatched_predicate():
    f = lambda p, x: lax.cond(p, lambda a: jnp.sin(a) * 2, lambda a: -a, x)
    xs = RNG.standard_normal((6, 3))
    ps = np.array([True, False, True, True, False, False])
    np.testing.assert_allclose(jg.vmap(f)(ps, xs), np.stack([f(p, x) for p, x in zip(ps, xs)]))
    np.testing.assert_allclose(jg.vmap(f, in_axes=(None, 0))(True, xs), np.sin(xs) * 2)
    np.testing.assert_allclose(jg.vmap(f, in_axes=(None, 1))(False, xs.T), -xs)
    g = lambda i, x: lax.switch(i, [jnp.sin, jnp.cos, lambda a: a * 3], x)
    idx = np.array([0, 1, 2, 7, -1, 1])
    np.testing.assert_allclose(jg.vmap(g)(idx, xs), np.stack([g(i, x) for i, x in zip(idx, xs)]))


def test_while_and_fori_loop_batched():
    f = lambda lim: lax.while_loop(lambda c: c[0] < lim, lambda c: (c[0] + 1.0, c[1] * 2.0),
                                   (0.0, 1.0))
    lims = np.array([1.0, 3.0, 0.0, 5.0])
    check(jg.vmap(f)(lims), stacked(f, lims))
    g = lambda x, n: lax.fori_loop(0, n, lambda i, v: v * x + i, x)
    xs = RNG.standard_normal((4, 2))
    np.testing.assert_allclose(jg.vmap(lambda x: g(x, 3))(xs), np.stack([g(x, 3) for x in xs]))
    ns = np.array([0, 1, 2, 5])
    np.testing.assert_allclose(jg.vmap(g)(xs, ns), np.stack([g(x, n) for x, n in zip(xs, ns)]))


def test_per_example_gradients_through_scan():
    loss = lambda w, x: jnp.sum(rnn(w, x)[0] ** 2) + jnp.sum(rnn(w, x)[1])
    per_ex = jg.vmap(jg.grad(loss), in_axes=(None, 0))
    want = np.stack([jg.grad(loss)(W, x) for x in XS])
    np.testing.assert_allclose(per_ex(W, XS), want, rtol=1e-10)
    np.testing.assert_allclose(jg.jit(per_ex)(W, XS), want, rtol=1e-10)


def test_gradient_of_a_vmapped_scan_and_checkpoint():
    f = lambda w: jnp.sum(jg.vmap(lambda x: rnn(w, x)[0])(XS) ** 2)
    jg.check_grads(f, (W,), order=2)
    ck = jg.vmap(jg.checkpoint(lambda x: jnp.sin(x) * W), in_axes=1)
    np.testing.assert_allclose(ck(XS[0].T), np.sin(XS[0]) * W)
