"""The lecture's worked examples, with exact values."""
from __future__ import annotations

import math

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import check_grads, grad, jvp, make_graph, vjp
from jitgraph.scipy.special import logsumexp


# ------------------------------------------------------------------ y = ln(x1) + x1 x2 - sin(x2)
def y_fn(x1, x2):
    return jnp.log(x1) + x1 * x2 - jnp.sin(x2)


def test_forward_mode_tangent():
    y, dy = jvp(y_fn, (2.0, 5.0), (1.0, 0.0))
    assert float(y) == pytest.approx(math.log(2.0) + 10.0 - math.sin(5.0), rel=1e-15)
    assert float(dy) == 5.5                     # 1/x1 + x2 = 0.5 + 5
    _, dy2 = jvp(y_fn, (2.0, 5.0), (0.0, 1.0))
    assert float(dy2) == pytest.approx(2.0 - math.cos(5.0), rel=1e-15)


def test_reverse_mode_one_pass():
    d1, d2 = grad(y_fn, argnums=(0, 1))(2.0, 5.0)
    assert float(d1) == 5.5
    assert float(d2) == pytest.approx(2.0 - math.cos(5.0), rel=1e-15)
    # one backward pass: the vjp returns both partials from a single cotangent
    y, f_vjp = vjp(y_fn, 2.0, 5.0)
    g1, g2 = f_vjp(1.0)
    assert float(g1) == 5.5 and float(g2) == pytest.approx(2.0 - math.cos(5.0), rel=1e-15)
    # the gradient graph has the forward ops once and the backward ops after them
    g = make_graph(grad(y_fn, argnums=(0, 1)))(2.0, 5.0)
    names = [n.prim.name for n in g.nodes]
    assert "cos" in names and "div" in names
    out = jitgraph.interpret(g, [np.array(2.0), np.array(5.0)])
    assert float(out[0]) == 5.5
    assert float(out[1]) == pytest.approx(2.0 - math.cos(5.0), rel=1e-15)


def test_lecture_graph_prints():
    g = make_graph(y_fn)(2.0, 5.0)
    text = str(g)
    for op in ("log", "mul", "sin", "add", "sub"):
        assert op in text
    assert "f64[]" in text
    dot = g.to_dot()
    assert dot.startswith("digraph")
    for op in ("log", "mul", "sin", "add", "sub"):
        assert f'label="{op}"' in dot
    assert dot.count("->") >= 2 * len(g.nodes)
    assert jitgraph.interpret(g, [np.array(2.0), np.array(5.0)])[0] == pytest.approx(
        math.log(2.0) + 10.0 - math.sin(5.0), rel=1e-15)


# ------------------------------------------------------------------ x7 = x1 + exp(x1 w1 + x2 w2)
def x7_fn(x1, x2, w1, w2):
    x3 = x1 * w1
    x4 = x2 * w2
    x5 = x3 + x4
    x6 = jnp.exp(x5)
    x7 = x1 + x6
    return x7


def test_four_partials():
    x1, x2, w1, w2 = 3.0, 0.5, 1.5, 2.0
    x5 = x1 * w1 + x2 * w2
    e = math.exp(x5)
    d = grad(x7_fn, argnums=(0, 1, 2, 3))(x1, x2, w1, w2)
    want = (1.0 + w1 * e, w2 * e, x1 * e, x2 * e)
    for got, w in zip(d, want):
        assert float(got) == pytest.approx(w, rel=1e-15)
    # forward mode, one input direction at a time, gives the same numbers
    for k in range(4):
        t = [0.0] * 4
        t[k] = 1.0
        _, dk = jvp(x7_fn, (x1, x2, w1, w2), tuple(t))
        assert float(dk) == pytest.approx(want[k], rel=1e-15)
    assert float(x7_fn(x1, x2, w1, w2)) == pytest.approx(x1 + e, rel=1e-15)
    check_grads(x7_fn, (x1, x2, w1, w2), order=2)
    g = make_graph(x7_fn)(x1, x2, w1, w2)
    assert [n.prim.name for n in g.nodes] == ["mul", "mul", "add", "exp", "add"]
    assert "exp" in g.to_dot()


# ------------------------------------------------------------------ the lecture's neural net
def init_random_params(scale, layer_sizes, rs):
    return [(scale * rs.standard_normal((m, n)), scale * rs.standard_normal(n))
            for m, n in zip(layer_sizes[:-1], layer_sizes[1:])]


def neural_net_predict(params, inputs):
    """Tanh layers; the output layer is normalised to log-probabilities."""
    for W, b in params:
        outputs = jnp.dot(inputs, W) + b
        inputs = jnp.tanh(outputs)
    return outputs - logsumexp(outputs, axis=1, keepdims=True)


def l2_norm(params):
    return sum(jnp.sum(W ** 2) + jnp.sum(b ** 2) for W, b in params)


def log_posterior(params, inputs, targets, L2_reg):
    log_prior = -L2_reg * l2_norm(params)
    log_lik = jnp.sum(neural_net_predict(params, inputs) * targets)
    return log_prior + log_lik


def _np_predict(params, inputs):
    for W, b in params:
        outputs = inputs @ W + b
        inputs = np.tanh(outputs)
    m = outputs.max(axis=1, keepdims=True)
    return outputs - (m + np.log(np.sum(np.exp(outputs - m), axis=1, keepdims=True)))


@pytest.fixture
def tiny_net():
    rs = np.random.default_rng(0)
    params = init_random_params(0.5, [3, 4, 2], rs)
    inputs = rs.standard_normal((5, 3))
    labels = rs.integers(0, 2, 5)
    targets = np.eye(2)[labels]
    return params, inputs, targets


def test_neural_net_values(tiny_net):
    params, inputs, targets = tiny_net
    pred = neural_net_predict(params, inputs)
    np.testing.assert_allclose(pred, _np_predict(params, inputs), rtol=1e-13)
    # rows are normalised log-probabilities
    np.testing.assert_allclose(np.exp(pred).sum(axis=1), np.ones(5), rtol=1e-13)
    lp = log_posterior(params, inputs, targets, 0.1)
    want = -0.1 * sum(np.sum(W ** 2) + np.sum(b ** 2) for W, b in params) + np.sum(
        _np_predict(params, inputs) * targets)
    assert float(lp) == pytest.approx(want, rel=1e-13)


def test_neural_net_gradients(tiny_net):
    params, inputs, targets = tiny_net
    check_grads(lambda p: log_posterior(p, inputs, targets, 0.1), (params,), order=2,
                modes=("fwd", "rev"))
    check_grads(lambda x: neural_net_predict(params, x), (inputs,), order=2)
    g = grad(log_posterior)(params, inputs, targets, 0.1)
    assert isinstance(g, list) and len(g) == 2 and all(isinstance(t, tuple) for t in g)
    for (gW, gb), (W, b) in zip(g, params):
        assert gW.shape == W.shape and gb.shape == b.shape
    # the last layer's bias gradient has a closed form: sum over rows of (targets - softmax)
    # (each target row sums to one) minus the prior's 2 * L2_reg * b
    probs = np.exp(_np_predict(params, inputs))
    np.testing.assert_allclose(g[1][1], np.sum(targets - probs, axis=0) - 0.2 * params[1][1],
                               rtol=1e-12, atol=1e-14)
    # a few steps of gradient ascent increase the log posterior
    lp0 = float(log_posterior(params, inputs, targets, 0.1))
    p = params
    for _ in range(5):
        gp = grad(log_posterior)(p, inputs, targets, 0.1)
        p = [(W + 0.05 * gW, b + 0.05 * gb) for (W, b), (gW, gb) in zip(p, gp)]
    assert float(log_posterior(p, inputs, targets, 0.1)) > lp0


def test_neural_net_graph_prints(tiny_net):
    params, inputs, targets = tiny_net
    g = make_graph(log_posterior, static_argnums=3)(params, inputs, targets, 0.1)
    text = str(g)
    for op in ("matmul", "tanh", "reduce_max", "exp", "log", "reduce_sum", "mul"):
        assert op in text, text
    dot = g.to_dot()
    for op in ("matmul", "tanh", "exp", "log"):
        assert f'label="{op}"' in dot
    leaves = jitgraph.tree_leaves((params, inputs, targets))
    assert float(jitgraph.interpret(g, leaves)[0]) == pytest.approx(
        float(log_posterior(params, inputs, targets, 0.1)), rel=1e-13)
    gg = make_graph(grad(log_posterior), static_argnums=3)(params, inputs, targets, 0.1)
    assert gg.count("matmul") >= 4 and "tanh" in str(gg)
    outs = jitgraph.interpret(gg, leaves)
    want = jitgraph.tree_leaves(grad(log_posterior)(params, inputs, targets, 0.1))
    for o, w in zip(outs, want):
        np.testing.assert_allclose(o, w, rtol=1e-12, atol=1e-14)
