"""jitgraph.optim against hand-written NumPy versions of torch.optim's update rules, schedules,
clipping, and ``train_step`` (one compiled program, donated buffers, NaN reporting)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
import jitgraph.optim as optim

RNG = np.random.default_rng(0)
P0 = {"w": RNG.standard_normal((3, 2)), "b": RNG.standard_normal(2)}
GRADS = [{"w": RNG.standard_normal((3, 2)), "b": RNG.standard_normal(2)} for _ in range(4)]


# ------------------------------------------------------------------ NumPy references
def ref_sgd(p, grads, lr, momentum=0.0, nesterov=False, wd=0.0):
    buf = None
    for g in grads:
        g = g + wd * p
        if momentum:
            buf = g.copy() if buf is None else momentum * buf + g
            g = g + momentum * buf if nesterov else buf
        p = p - lr * g
    return p


def ref_adam(p, grads, lr, b1=0.9, b2=0.999, eps=1e-8, wd=0.0, decoupled=False):
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    for t, g in enumerate(grads, 1):
        if decoupled:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        p = p - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return p


def ref_rmsprop(p, grads, lr, alpha=0.99, eps=1e-8, momentum=0.0, centered=False, wd=0.0):
    v = np.zeros_like(p)
    gavg = np.zeros_like(p)
    buf = np.zeros_like(p)
    for g in grads:
        g = g + wd * p
        v = alpha * v + (1 - alpha) * g * g
        if centered:
            gavg = alpha * gavg + (1 - alpha) * g
            denom = np.sqrt(v - gavg * gavg) + eps
        else:
            denom = np.sqrt(v) + eps
        if momentum:
            buf = momentum * buf + g / denom
            p = p - lr * buf
        else:
            p = p - lr * g / denom
    return p


CASES = {
    "sgd": (optim.sgd(0.1), lambda p, gs: ref_sgd(p, gs, 0.1)),
    "sgd_momentum_wd": (optim.sgd(0.1, momentum=0.9, weight_decay=0.01),
                        lambda p, gs: ref_sgd(p, gs, 0.1, 0.9, wd=0.01)),
    "sgd_nesterov": (optim.sgd(0.05, momentum=0.8, nesterov=True),
                     lambda p, gs: ref_sgd(p, gs, 0.05, 0.8, nesterov=True)),
    "adam": (optim.adam(0.01), lambda p, gs: ref_adam(p, gs, 0.01)),
    "adam_l2": (optim.adam(0.01, weight_decay=0.1),
                lambda p, gs: ref_adam(p, gs, 0.01, wd=0.1)),
    "adamw": (optim.adamw(0.01, weight_decay=0.1),
              lambda p, gs: ref_adam(p, gs, 0.01, wd=0.1, decoupled=True)),
    "rmsprop": (optim.rmsprop(0.01), lambda p, gs: ref_rmsprop(p, gs, 0.01)),
    "rmsprop_centered_momentum": (
        optim.rmsprop(0.01, momentum=0.9, centered=True, weight_decay=0.01),
        lambda p, gs: ref_rmsprop(p, gs, 0.01, momentum=0.9, centered=True, wd=0.01)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_optimizer_matches_numpy_reference(name):
    opt, ref = CASES[name]
    params = P0
    state = opt.init(params)
    for g in GRADS:
        updates, state = opt.update(g, state, params)
        params = optim.apply_updates(params, updates)
    for k in P0:
        want = ref(P0[k], [g[k] for g in GRADS])
        np.testing.assert_allclose(params[k], want, rtol=1e-12, atol=1e-14, err_msg=f"{name} {k}")
    assert int(state["count"]) == len(GRADS)


def test_schedules_exact_values():
    np.testing.assert_allclose([optim.step_decay(1.0, 2, 0.5)(c) for c in range(5)],
                               [1, 1, 0.5, 0.5, 0.25])
    cos = optim.cosine_decay(2.0, 4, alpha=0.1)
    np.testing.assert_allclose([cos(c) for c in (0, 2, 4, 9)],
                               [2.0, 2.0 * (0.9 * 0.5 + 0.1), 0.2, 0.2])
    warm = optim.linear_warmup(1.0, 4)
    np.testing.assert_allclose([warm(c) for c in (0, 1, 4, 10)], [0, 0.25, 1, 1])
    wc = optim.warmup_cosine_decay(1.0, 2, 6)
    np.testing.assert_allclose([wc(c) for c in (0, 1, 2, 4, 6)],
                               [0, 0.5, 1.0, 0.5 * (1 + math.cos(math.pi / 2)), 0.0], atol=1e-15)
    # a schedule drives the learning rate by the state's count
    opt = optim.sgd(optim.step_decay(1.0, 1, 0.5))
    s = opt.init(np.zeros(1))
    u1, s = opt.update(np.ones(1), s)
    u2, s = opt.update(np.ones(1), s)
    np.testing.assert_allclose([u1[0], u2[0]], [-1.0, -0.5])


def test_clip_by_global_norm_and_chain():
    g = {"a": np.array([3.0]), "b": np.array([4.0])}          # norm 5
    clipped, _ = optim.clip_by_global_norm(1.0).update(g, {})
    np.testing.assert_allclose([clipped["a"][0], clipped["b"][0]], [0.6, 0.8], rtol=1e-6)
    same, _ = optim.clip_by_global_norm(10.0).update(g, {})
    np.testing.assert_allclose(same["a"], g["a"])
    opt = optim.chain(optim.clip_by_global_norm(1.0), optim.sgd(1.0))
    st = opt.init(g)
    up, st = opt.update(g, st, g)
    np.testing.assert_allclose(up["b"], [-0.8], rtol=1e-6)


def test_mismatched_trees_are_clear_errors():
    opt = optim.adam(0.1)
    st = opt.init({"w": np.zeros(2)})
    with pytest.raises(ValueError, match="opt.init"):
        opt.update({"v": np.zeros(2)}, st, {"v": np.zeros(2)})
    with pytest.raises(ValueError, match="weight decay needs the parameters"):
        optim.adamw(0.1).update({"w": np.zeros(2)}, st)
    with pytest.raises(TypeError, match="jitgraph.optim"):
        jitgraph.train_step(lambda p: p, object())


def loss_fn(params, x, y):
    return jnp.mean((x @ params["w"] + params["b"] - y) ** 2)


def test_train_step_one_program_donates_and_matches_eager():
    x = RNG.standard_normal((8, 3))
    y = RNG.standard_normal((8, 2))
    opt = optim.adamw(0.05, weight_decay=0.01)
    step = jitgraph.train_step(loss_fn, opt)
    p_eager = {k: v.copy() for k, v in P0.items()}
    s_eager = opt.init(p_eager)
    params = {k: v.copy() for k, v in P0.items()}
    state = opt.init(params)
    before = jitgraph.cache_info()["misses"]
    for _ in range(3):
        old = jitgraph.tree_leaves((params, state))
        params, state, loss = step(params, state, x, y)
        l_e, g_e = jitgraph.value_and_grad(loss_fn)(p_eager, x, y)
        u_e, s_e = opt.update(g_e, s_eager, p_eager)
        p_eager, s_eager = optim.apply_updates(p_eager, u_e), s_e
        np.testing.assert_allclose(loss, l_e, rtol=1e-12)
    assert jitgraph.cache_info()["misses"] - before == 1       # one compiled program
    new = jitgraph.tree_leaves((params, state))
    # a new value may land in any donated buffer of its shape (new w in the old nu's buffer)
    reused = sum(any(np.shares_memory(a, b) for a in old) for b in new)
    # the compiler writes a new value into its donated buffer where the kernel allows it
    assert reused >= 1 and "donated: updated in place" in step.lower(params, state, x, y).source
    for k in P0:
        np.testing.assert_allclose(params[k], p_eager[k], rtol=1e-10)
    np.testing.assert_allclose(state["mu"]["w"], s_eager["mu"]["w"], rtol=1e-10)
    lowered = step.lower(params, state, x, y)
    assert lowered.kernels and "matmul" in {n.prim.name for n in lowered.graph.nodes}


def two_layer_loss(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"] - y) ** 2)


@pytest.mark.parametrize("opt", [optim.sgd(0.1), optim.adamw(0.05, weight_decay=0.01)],
                         ids=["sgd", "adamw"])
def test_donated_arrays_passed_again_hold_their_own_leaf(opt):
    """Passing a step's donated arrays again instead of rebinding them (as ``benchmark`` and
    ``profile`` do): each old array holds its own leaf's new value where the update ran in
    place, else its value from before the call; never another leaf's (an AdamW step once
    wrote its parameters into its moments' buffers: NaN from the square root of a weight)."""
    x, y = RNG.standard_normal((16, 6)), RNG.standard_normal((16, 6))
    params = {"w1": jnp.array(RNG.standard_normal((6, 6))), "b1": jnp.array(np.zeros(6)),
              "w2": jnp.array(RNG.standard_normal((6, 6)))}     # two leaves of one shape
    step = jitgraph.train_step(two_layer_loss, opt)
    params, state, _ = step(params, opt.init(params), x, y)     # jitgraph's own arrays
    for _ in range(3):
        old = jitgraph.tree_leaves((params, state))
        before = [np.array(a) for a in old]
        new = jitgraph.tree_leaves(step(params, state, x, y)[:2])
        for k, (a, was, b) in enumerate(zip(old, before, new)):
            assert np.isfinite(a).all(), k
            assert np.array_equal(a, b) or np.array_equal(a, was), k
        assert sum(np.array_equal(a, b) and not np.array_equal(a, was)
                   for a, was, b in zip(old, before, new)) >= 2      # weights updated in place


def log_loss(params, x):
    return jnp.sum(jnp.log(x @ params["w"]))


def test_train_step_check_nan_names_the_op():
    step = jitgraph.train_step(log_loss, optim.sgd(0.01), check_nan=True)
    params = {"w": np.ones((3, 2))}
    state = optim.sgd(0.01).init(params)
    x = np.ones((4, 3))
    params, state, loss = step(params, state, x)                # fine: log of positive values
    np.testing.assert_allclose(loss, 8 * np.log(3.0))
    bad = {"w": -np.ones((3, 2))}
    with pytest.raises(jitgraph.train.NonFiniteLossError, match=r"step 2.*log\(f64\[4,2\]\)"):
        step(bad, state, x)                                   # log of negative numbers
    np.testing.assert_array_equal(bad["w"], -np.ones((3, 2)))   # not overwritten
