"""``checkpoint`` under ``jit`` saves memory, by the amount the saved activations predict.

A 12-block residual MLP stack (``h + (z * tanh(z)) @ W2`` with ``z = h @ W1``, hidden 4x the
width), gradient compiled with each policy: without checkpointing the plan keeps, per block,
its input ``h`` (1 unit = one (batch, width) array), ``z`` and ``tanh(z)`` (4 units each);
``dots_saveable`` keeps ``h`` and ``z`` (the product), ``nothing_saveable`` only ``h``. Every
block but the last is recomputed in the backward pass, so the plan's scratch falls by 4 units
per block for each value no longer saved. The figures come from the memory plan, which is
deterministic.
"""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph as jg
import jitgraph.numpy as jnp

P = jg.checkpoint_policies
L, B, D, H = 12, 64, 8, 32
UNIT = B * D * 8
RNG = np.random.default_rng(0)
PARAMS = [(RNG.standard_normal((D, H)) / 4, RNG.standard_normal((H, D)) / 12) for _ in range(L)]
X = RNG.standard_normal((B, D))


def block(p, h):
    w1, w2 = p
    z = jg.checkpoint_name(h @ w1, "z")
    return h + (z * jnp.tanh(z)) @ w2


def stack_loss(policy=None, checkpointed=True, prevent_cse=True):
    def loss(params, x):
        h = x
        for p in params:
            if checkpointed:
                h = jg.checkpoint(block, policy=policy, prevent_cse=prevent_cse)(p, h)
            else:
                h = block(p, h)
        return jnp.sum(h * h)
    return loss


@pytest.fixture(scope="module")
def reference():
    return jg.grad(stack_loss(checkpointed=False))(PARAMS, X)


def _temp_units(loss) -> float:
    return jg.jit(jg.grad(loss)).lower(PARAMS, X).memory_analysis().temp_size_in_bytes / UNIT


@pytest.fixture(scope="module")
def temps():
    return {
        "plain": _temp_units(stack_loss(checkpointed=False)),
        "everything": _temp_units(stack_loss(P.everything_saveable)),
        "dots": _temp_units(stack_loss(P.dots_saveable)),
        "name z": _temp_units(stack_loss(P.save_only_these_names("z"))),
        "nothing": _temp_units(stack_loss(None)),
        "no cse barrier": _temp_units(stack_loss(None, prevent_cse=False)),
    }


def test_planned_scratch_falls_by_the_activations_not_saved(temps):
    per_block = 4           # z, or tanh(z): a (batch, hidden) array, 4 units
    assert temps["plain"] - temps["dots"] == (L - 1) * per_block
    assert temps["dots"] - temps["nothing"] == (L - 1) * per_block
    assert temps["name z"] == temps["dots"]           # the only product here is z, named
    assert temps["everything"] == temps["plain"]
    # as in JAX, prevent_cse=False lets the compiler merge the recomputation with the forward
    assert temps["no cse barrier"] == temps["plain"]


def test_planned_peak_falls_as_the_policy_saves_less():
    peaks = [jg.jit(jg.grad(stack_loss(pol, ck))).lower(PARAMS, X).memory_analysis()
             .peak_memory_in_bytes
             for pol, ck in [(None, False), (P.dots_saveable, True), (P.nothing_saveable, True)]]
    assert peaks[0] > peaks[1] > peaks[2]


@pytest.mark.parametrize("policy", [None, P.dots_saveable, P.save_only_these_names("z"),
                                    P.everything_saveable,
                                    P.save_from_both_policies(P.dots_saveable,
                                                              P.save_any_names_but_these("y"))])
def test_gradients_equal_the_plain_program(reference, policy):
    got = jg.jit(jg.grad(stack_loss(policy)))(PARAMS, X)
    for (a1, a2), (b1, b2) in zip(got, reference):
        np.testing.assert_allclose(a1, b1, rtol=1e-10, atol=1e-10 * np.abs(b1).max())
        np.testing.assert_allclose(a2, b2, rtol=1e-10, atol=1e-10 * np.abs(b2).max())
    eager = jg.grad(stack_loss(policy))(PARAMS, X)
    np.testing.assert_allclose(eager[3][0], reference[3][0], rtol=1e-10)


def test_recomputation_is_in_the_backward_graph():
    g = jg.make_graph(jg.grad(stack_loss(P.dots_saveable)))(PARAMS[:2], X)
    bwd = [n for n in g.nodes if n.prim.name == "remat" and n.params["name"].startswith("backward")]
    assert len(bwd) == 2
    sub = bwd[0].params["_graph"]
    assert sub.count("optimization_barrier") == 1
    assert sub.count("tanh") >= 1              # recomputed from the saved product
    # the saved product is computed before the barrier, from the checkpoint's own inputs
    order = [n.prim.name for n in sub.nodes]
    assert order.index("matmul") < order.index("optimization_barrier")


def test_gradients_against_central_differences_second_order():
    small = [(PARAMS[0][0][:, :4], PARAMS[0][1][:4])]
    x = X[:3]
    jg.check_grads(stack_loss(P.dots_saveable), (small, x), order=2)


def test_under_vmap_and_checkpoint_name_is_the_identity():
    f = jg.checkpoint(lambda x: jnp.sin(jg.checkpoint_name(x * 2.0, "y")) * x,
                      policy=P.save_only_these_names("y"))
    xs = RNG.standard_normal((5, 3))
    per_example = jg.jit(jg.vmap(jg.grad(lambda x: jnp.sum(f(x)))))(xs)
    np.testing.assert_allclose(per_example, 2.0 * np.cos(2 * xs) * xs + np.sin(2 * xs),
                               rtol=1e-12)
    assert jg.checkpoint_name(3.0, "a") == 3.0


def test_bad_policy_and_name_are_clear_errors():
    with pytest.raises(TypeError, match="policy must be a function"):
        jg.checkpoint(block, policy="dots")
    with pytest.raises(TypeError, match="name must be a str"):
        jg.checkpoint_name(np.ones(2), 3)
    assert repr(P.save_only_these_names("a", "b")) == "save_only_these_names('a', 'b')"
    assert P.checkpoint_dots is P.dots_saveable
