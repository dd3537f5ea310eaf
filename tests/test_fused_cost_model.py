"""The fused rewrites' cost model (each record's ``wins``): attention and linear cross-entropy
fuse only at shapes where the model prices the fused step below the unfused one (or where the
unfused program's scores or logits alone would be too large); a rejected match leaves the
unfused graph, a forced one (``always_fused()``) the fused primitive, and both compute the
reference interpreter's values and gradients."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph as jg
import jitgraph.nn as nn
import jitgraph.numpy as jnp
from jitgraph import attention, linear_ce
from jitgraph.rewrite import host_threads

RNG = np.random.default_rng(0)


# ------------------------------------------------------------------ the decisions
@pytest.mark.parametrize("shape, fused", [
    ((1, 16, 16, False), False),      # one short head: the host steps' overhead dominates
    ((1, 128, 64, False), False),     # one tile, no causal cut: BLAS products are faster
    ((8, 64, 64, False), False),
    ((8, 512, 64, True), True),       # causal over several tiles: half the scores skipped
    ((64, 256, 32, True), True),      # the GPT benchmark's small attention: the causal cut
    ((64, 1024, 64, True), True),
    ((32, 16, 16, True), False),      # many short heads: the fused host steps' fixed work
    ((32, 128, 32, True), False),     # one tile a head: no causal tile skipped
])
def test_attention_decisions(shape, fused):
    bh, t, d, causal = shape
    est = attention.cost_estimate(bh, t, t, d, d, causal)
    assert est.wins is fused, est
    assert (est.fused_us < est.unfused_us) is fused


def test_attention_fuses_for_memory_where_the_scores_are_huge():
    est = attention.cost_estimate(64, 2048, 2048, 64, 64, False)   # 1 GiB of float32 scores
    assert est.score_bytes >= attention.SCORES_ALWAYS_FUSED and est.wins


@pytest.mark.parametrize("shape, fused", [
    ((64, 64, 64), False),            # tiny vocabulary: the chunked host step's overhead
    ((4096, 64, 512), False),
    ((4096, 256, 8192), False),       # the same products either way, the fused in chunks
])
def test_linear_ce_decisions(shape, fused):
    est = linear_ce.cost_estimate(*shape)
    assert est.wins is fused, est


def test_linear_ce_fuses_for_memory_where_the_logits_are_huge():
    est = linear_ce.cost_estimate(8192, 512, 32000)     # 1 GiB of float32 logits
    assert est.logit_bytes >= linear_ce.LOGITS_ALWAYS_FUSED and est.wins


def test_the_model_is_deterministic_and_monotone_in_length():
    """No timing at compile time: the same shape gets the same answer; a longer causal
    sequence never makes fusing look worse."""
    a = attention.cost_estimate(8, 300, 300, 64, 64, True)
    assert a == attention.cost_estimate(8, 300, 300, 64, 64, True)
    ratios = [attention.cost_estimate(8, t, t, 64, 64, True).ratio for t in (64, 256, 1024, 4096)]
    assert ratios == sorted(ratios, reverse=True)


def test_both_sides_share_their_work_over_the_threads():
    """One pool runs both programs' work (the fused kernels' work items on Numba's threads, as
    the unfused program's products and loops): two threads halve each side's work but not its
    call's fixed work; fewer fused work items than threads leave a thread idle."""
    one = attention.cost_estimate(64, 256, 256, 32, 32, True)
    two = attention.cost_estimate(64, 256, 256, 32, 32, True, threads=2)
    for side, us in (("fused_us", attention.FUSED_US), ("unfused_us", attention.UNFUSED_US)):
        assert getattr(two, side) - us["call"] == pytest.approx(
            (getattr(one, side) - us["call"]) / 2)
    # one batch of one query block: one work item, nothing to share
    a = attention.cost_estimate(1, 128, 128, 64, 64, False)
    b = attention.cost_estimate(1, 128, 128, 64, 64, False, threads=2)
    assert a.fused_us == pytest.approx(b.fused_us) and b.unfused_us < a.unfused_us
    assert "dispatch" not in attention.cost_terms(2, 512, 512, 64, 64, True, threads=2)[0]
    assert linear_ce.cost_terms(4096, 64, 512, threads=2)[0]["dispatch"] == 8
    assert linear_ce.cost_terms(4096, 64, 512)[0]["dispatch"] == 0


# ------------------------------------------------------------------ the graphs and numbers
def _att_loss(mask):
    return lambda q, k, v: jnp.sum(jnp.sin(nn.dot_product_attention(q, k, v, mask)) * q)


def _prims(graph) -> set:
    return {n.prim.name for n in graph.nodes}


def test_rejected_attention_keeps_the_unfused_graph_with_the_same_numbers():
    t = 16
    q, k, v = (RNG.standard_normal((1, 2, t, 8)) for _ in range(3))
    mask = np.tril(np.ones((t, t), bool))
    assert not attention.cost_estimate(2, t, t, 8, 8, True).wins
    step = jg.value_and_grad(_att_loss(mask), argnums=(0, 1, 2))
    plain = _prims(jg.make_graph(step)(q, k, v))
    assert "attention" not in plain and "exp" in plain
    with attention.always_fused():
        forced = _prims(jg.make_graph(step)(q, k, v))
        fused_val, fused_grads = jg.jit(step)(q, k, v)
    assert {"attention", "attention_bwd"} <= forced
    lowered = jg.jit(step).lower(q, k, v).stages["lowered"]
    assert "attention" not in _prims(lowered)
    with attention.unfused():
        ref_val, ref_grads = step(q, k, v)          # the reference interpreter, unfused
    val, grads = jg.jit(step)(q, k, v)
    np.testing.assert_allclose(val, ref_val, rtol=1e-12)
    np.testing.assert_allclose(fused_val, ref_val, rtol=1e-12)
    for g, f, r in zip(grads, fused_grads, ref_grads):
        np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(f, r, rtol=1e-9, atol=1e-12)


def test_accepted_attention_is_fused_with_the_same_numbers(monkeypatch):
    t, d = 512, 16
    q, k, v = (RNG.standard_normal((1, 1, t, d)) for _ in range(3))
    mask = np.tril(np.ones((t, t), bool))
    # on the CPU the unfused program wins below 256 MiB of scores (too large here): the
    # margin raised, the model accepts this shape by itself
    monkeypatch.setattr(attention, "MARGIN", 1e9)
    assert attention.cost_estimate(1, t, t, d, d, True, itemsize=8, threads=host_threads()).wins
    step = jg.value_and_grad(_att_loss(mask), argnums=(0, 1, 2))
    assert {"attention", "attention_bwd"} <= _prims(jg.make_graph(step)(q, k, v))
    val, grads = jg.jit(step)(q, k, v)
    with attention.unfused():
        ref_val, ref_grads = step(q, k, v)
    np.testing.assert_allclose(val, ref_val, rtol=1e-10)
    for g, r in zip(grads, ref_grads):
        np.testing.assert_allclose(g, r, rtol=1e-8, atol=1e-11)


def test_rejected_linear_ce_keeps_the_logits_with_the_same_numbers():
    n, d, v = 64, 8, 16
    h = RNG.standard_normal((n, d))
    w = RNG.standard_normal((d, v)) / 4
    y = RNG.integers(0, v, n)
    assert not linear_ce.cost_estimate(n, d, v).wins
    step = jg.value_and_grad(lambda h, w, y: nn.cross_entropy(h @ w, y), argnums=(0, 1))
    plain = _prims(jg.make_graph(step)(h, w, y))
    assert "linear_ce" not in plain and "matmul" in plain
    compiled = jg.jit(step)
    assert "linear_ce_train" not in _prims(compiled.lower(h, w, y).stages["lowered"])
    with linear_ce.always_fused():
        assert "linear_ce" in _prims(jg.make_graph(step)(h, w, y))
        forced = jg.jit(step)
        assert "linear_ce_train" in _prims(forced.lower(h, w, y).stages["lowered"])
        fused_val, fused_grads = forced(h, w, y)
    with linear_ce.unfused():
        ref_val, ref_grads = step(h, w, y)
    val, grads = compiled(h, w, y)
    for got_val, got_grads in ((val, grads), (fused_val, fused_grads)):
        np.testing.assert_allclose(got_val, ref_val, rtol=1e-12)
        for g, r in zip(got_grads, ref_grads):
            np.testing.assert_allclose(g, r, rtol=1e-10, atol=1e-14)


def test_forcing_is_per_context_and_nests_with_unfused():
    """``always_fused()`` skips the cost model only; ``unfused()`` inside it still wins."""
    t = 16
    q = RNG.standard_normal((1, 1, t, 8))
    f = jg.make_graph(jg.grad(lambda q: jnp.sum(nn.dot_product_attention(q, q, q))))
    with attention.always_fused():
        assert "attention" in _prims(f(q))
        with attention.unfused():
            assert "attention" not in _prims(f(q))
    assert "attention" not in _prims(f(q))


def test_targets_the_model_was_not_measured_on_fuse_every_match():
    """The constants price the host kernels: a program for another target (CUDA's) takes the
    rewrite wherever it matches, as ``jit(..., device="cuda")`` traces and lowers it."""
    from jitgraph.rewrite import targeting
    q = RNG.standard_normal((1, 1, 16, 8))
    f = jg.make_graph(jg.grad(lambda q: jnp.sum(nn.dot_product_attention(q, q, q))))
    assert attention.ATTENTION.priced == ("cpu",)
    assert "attention" not in _prims(f(q))
    with targeting("cuda"):
        assert "attention" in _prims(f(q))
    forward = jg.jit(lambda q: nn.dot_product_attention(q, q, q))
    assert "attention" not in _prims(forward.lower(q).stages["lowered"])
    np.testing.assert_allclose(forward(q), nn.dot_product_attention(q, q, q), rtol=1e-12)


def test_the_model_counts_the_kernels_own_tiles_and_sweeps():
    """The cost model (which imports no Numba) mirrors the kernels' tile rows and the batches
    per thread from which their gradient takes one sweep a batch."""
    from jitgraph.kernels import attention as kernels
    assert attention.KERNEL_BLOCK == kernels.BLOCK
    assert attention.KERNEL_SWEEP_MIN == kernels.BATCH_SWEEP_MIN
