"""Fused linear cross-entropy: ``cross_entropy(h @ W, labels)`` in every spelling compiles to
chunked kernels that never hold the (tokens, vocabulary) logits, with the unfused program's
values and gradients; forward and backward merge into one sweep when the row cotangents do
not depend on the losses. N = 300 takes five 64-row chunks (``chunk_rows``), the last one
ragged."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph as jg
import jitgraph.nn as nn
import jitgraph.numpy as jnp
import jitgraph.scipy.special as jss
from jitgraph.linear_ce import linear_ce_bwd_p, linear_ce_p

RNG = np.random.default_rng(0)
N, D, V = 300, 16, 50
H = RNG.standard_normal((N, D))
W = RNG.standard_normal((D, V)) / 4
Y = RNG.integers(0, V, N)


@pytest.fixture(autouse=True)
def _always_fused():
    """These tests check the fused kernels at small shapes, where the cost model keeps the
    unfused program: the linear cross-entropy rewrite is forced (``always_fused()``);
    ``test_fused_cost_model.py`` checks the model's decisions."""
    with jg.linear_ce.always_fused():
        yield


def nn_ce(h, w, y):
    return nn.cross_entropy(h @ w, y)


def log_softmax_gather(h, w, y):
    z = h @ w
    return -jnp.mean(jnp.take_along_axis(nn.log_softmax(z, axis=-1), y[:, None], axis=-1))


def logsumexp_minus_picked(h, w, y):
    z = h @ w
    return jnp.sum(jss.logsumexp(z, axis=1) - z[jnp.arange(z.shape[0]), y]) / 7.0


SPELLINGS = [nn_ce, log_softmax_gather, logsumexp_minus_picked]


@pytest.mark.parametrize("loss", SPELLINGS, ids=lambda f: f.__name__)
def test_fused_train_step_equals_unfused(loss):
    vg = jg.value_and_grad(loss, argnums=(0, 1))
    ref = vg(H, W, Y)
    f = jg.jit(vg)
    low = f.lower(H, W, Y)
    names = [n.prim.name for n in low.stages["lowered"].nodes]
    assert "linear_ce_train" in names and "matmul" not in names and "exp" not in names
    val, (dh, dw) = f(H, W, Y)
    np.testing.assert_allclose(val, ref[0], rtol=1e-12)
    np.testing.assert_allclose(dh, ref[1][0], rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(dw, ref[1][1], rtol=1e-10, atol=1e-15)
    assert low.memory_analysis().largest_temp_in_bytes < N * V * 8 // 8
    out = jg.jit(loss)(H, W, Y)                       # forward only: the compiler's rewrite
    np.testing.assert_allclose(out, ref[0], rtol=1e-12)


def test_planned_peak_is_far_below_the_unfused_program():
    n, v = 512, 1000
    h = RNG.standard_normal((n, D)).astype(np.float32)
    w = (RNG.standard_normal((D, v)) / 4).astype(np.float32)
    y = RNG.integers(0, v, n)
    step = jg.value_and_grad(nn_ce, argnums=(0, 1))
    fused = jg.jit(step).lower(h, w, y).memory_analysis()
    with jg.linear_ce.unfused():
        plain = jg.jit(step).lower(h, w, y).memory_analysis()
    assert fused.peak_memory_in_bytes * 4 <= plain.peak_memory_in_bytes
    got = jg.jit(step)(h, w, y)
    ref = step(h, w, y)
    np.testing.assert_allclose(got[0], ref[0], rtol=2e-6)
    np.testing.assert_allclose(got[1][1], ref[1][1], rtol=2e-4, atol=1e-6)


def test_loss_dependent_cotangents_keep_forward_and_backward_apart():
    def loss(h, w, y):          # each row's cotangent depends on every loss
        rows = jss.logsumexp(h @ w, axis=1) - (h @ w)[jnp.arange(N), y]
        return jnp.log(jnp.sum(jnp.exp(rows)))
    vg = jg.value_and_grad(loss, argnums=(0, 1))
    f = jg.jit(vg)
    names = [n.prim.name for n in f.lower(H, W, Y).stages["lowered"].nodes]
    assert "linear_ce" in names and "linear_ce_bwd" in names
    got, ref = f(H, W, Y), vg(H, W, Y)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-12)
    for a, b in zip(got[1], ref[1]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-15)


def test_logits_used_elsewhere_are_not_fused():
    def loss(h, w, y):
        z = h @ w
        return nn.cross_entropy(z, y) + 0.1 * jnp.mean(z ** 2)
    vg = jg.value_and_grad(loss, argnums=(0, 1))
    f = jg.jit(vg)
    assert "linear_ce" not in str(f.lower(H, W, Y).stages["lowered"])
    np.testing.assert_allclose(f(H, W, Y)[0], vg(H, W, Y)[0], rtol=1e-12)


def test_invalid_labels_give_nan_rows_as_unfused():
    y = Y.copy()
    y[[3, 200]] = [-1, V]
    f = lambda h, w, y: jnp.sum(jnp.where(jnp.arange(N) % 2 == 0, 1.0, 2.0)
                                * nn.cross_entropy(h @ w, y, reduction="none"))
    got = jg.jit(f)(H, W, y)                 # traced labels: no eager range check
    assert np.isnan(got)
    ok = np.ones(N, bool)
    ok[[3, 200]] = False
    rows = jg.jit(lambda h, w, y: nn.cross_entropy(h @ w, y, reduction="none"))(H, W, y)
    assert np.isnan(rows[~ok]).all()
    np.testing.assert_allclose(rows[ok], nn.cross_entropy(H[ok] @ W, Y[ok], reduction="none"),
                               rtol=1e-12)


def test_primitive_rules_against_central_differences():
    h, w, y = H[:5, :3], W[:3, :4], Y[:5] % 4

    def rows(h, w):
        return jnp.sum(jnp.sin(linear_ce_p(h, w, y)[0]))
    jg.check_grads(rows, (h, w), order=2)

    def bwd(h, w, ct):
        lse = linear_ce_p(h, w, y)[1]
        dh, dw = linear_ce_bwd_p(h, w, y, lse, ct)
        return jnp.sum(jnp.sin(dh)) + jnp.sum(dw * dw)
    jg.check_grads(bwd, (h, w, RNG.standard_normal(5)), order=1)


def test_vmap_with_shared_weights_is_one_fused_call():
    """Per-example losses with W shared are one fused call over all rows; per-example
    gradients (a dW per example) go through the batched composite, with the same numbers."""
    f = lambda h, y: nn.cross_entropy(h @ W, y)
    hs, ys = H.reshape(3, 100, D), Y.reshape(3, 100)
    vf = jg.jit(jg.vmap(jg.value_and_grad(f)))
    vals, per = vf(hs, ys)
    for i in range(3):
        v, g = jg.value_and_grad(f)(hs[i], ys[i])
        np.testing.assert_allclose(vals[i], v, rtol=1e-12)
        np.testing.assert_allclose(per[i], g, rtol=1e-10, atol=1e-15)
    rows = jg.vmap(lambda h, y: jg.linear_ce.linear_ce_p(h, W, y)[0])
    g = jg.make_graph(rows)(hs, ys)
    assert g.count("linear_ce") == 1 and g.nodes[-1].out.aval.shape == (3, 100)
    np.testing.assert_allclose(jg.jit(rows)(hs, ys).reshape(-1),
                               jg.linear_ce.linear_ce_p(H, W, Y)[0], rtol=1e-12)
