"""Fused attention: the graph rewrite finds attention however users spell it, the compiled
tiled kernels (online softmax forward, log-sum-exp backward) give the unfused program's values
and gradients, and no (T, T) buffer is planned.

The kernels' tiles are 128 rows: T = 100 is one partial tile; T = 130 (cross-attention) and
T = 300 (causal: whole tiles skipped above the diagonal, the diagonal tiles cut per element,
the backward's key sweep starting at the diagonal) take several, the last one ragged.
"""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph as jg
import jitgraph.nn as nn
import jitgraph.numpy as jnp
from jitgraph.attention import attention_bwd_p, attention_p, fuse_attention

RNG = np.random.default_rng(0)
B, H, T, D = 2, 2, 100, 8
Q, K, V = (RNG.standard_normal((B, H, T, D)) for _ in range(3))
CAUSAL = np.tril(np.ones((T, T), bool))
PAD = np.ones((B, 1, 1, T), bool)
PAD[1, ..., 60:] = False


@pytest.fixture(autouse=True)
def _always_fused():
    """These tests check the fused kernels at small shapes, where the cost model keeps the
    unfused program: the attention rewrite is forced (``always_fused()``);
    ``test_fused_cost_model.py`` checks the model's decisions."""
    with jg.attention.always_fused():
        yield


def nn_causal(q, k, v):
    return nn.dot_product_attention(q, k, v, CAUSAL)


def nn_padded(q, k, v):
    return nn.dot_product_attention(q, k, v, PAD)


def additive_causal(q, k, v):
    s = q @ jnp.swapaxes(k, -1, -2) / np.sqrt(D) + jnp.where(CAUSAL, 0.0, -jnp.inf)
    return nn.softmax(s, axis=-1) @ v


def einsum_max_shift(q, k, v):
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * 0.3 + jnp.where(CAUSAL, 0.0, -1e9)
    s = s - jnp.max(s, axis=-1, keepdims=True)
    e = jnp.exp(s)
    return jnp.einsum("bhqk,bhkd->bhqd", e / jnp.sum(e, axis=-1, keepdims=True), v)


def unmasked_transposed(q, k, v):
    return nn.softmax((q * 0.5) @ k.transpose(0, 1, 3, 2), axis=-1) @ v


SPELLINGS = [nn_causal, nn_padded, additive_causal, einsum_max_shift, unmasked_transposed]


def _loss(att):
    return lambda q, k, v: jnp.sum(jnp.sin(att(q, k, v)) * jnp.cos(q))


@pytest.mark.parametrize("att", SPELLINGS, ids=lambda f: f.__name__)
def test_compiled_fused_equals_unfused(att):
    vg = jg.value_and_grad(_loss(att), argnums=(0, 1, 2))
    ref = vg(Q, K, V)                         # eager: the unfused reference
    fused = jg.jit(vg)
    lowered = fused.lower(Q, K, V).stages["lowered"]
    assert lowered.count("attention") == 1 and lowered.count("attention_bwd") == 1
    assert lowered.count("exp") == 0          # no softmax of scores is left
    val, grads = fused(Q, K, V)
    np.testing.assert_allclose(val, ref[0], rtol=1e-12)
    for g, r in zip(grads, ref[1]):
        np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-12)
    out = jg.jit(att)(Q, K, V)                # forward only: the compiler's own rewrite
    np.testing.assert_allclose(out, att(Q, K, V), rtol=1e-10, atol=1e-12)


def test_causal_over_several_tiles():
    t = 300
    q, k, v = (RNG.standard_normal((1, 2, t, 4)) for _ in range(3))
    mask = np.tril(np.ones((t, t), bool))
    vg = jg.value_and_grad(_loss(lambda q, k, v: nn.dot_product_attention(q, k, v, mask)),
                           argnums=(0, 1, 2))
    ref = vg(q, k, v)
    f = jg.jit(vg)
    assert f.lower(q, k, v).stages["lowered"].count("attention_bwd") == 1
    val, grads = f(q, k, v)
    np.testing.assert_allclose(val, ref[0], rtol=1e-12)
    for g, r in zip(grads, ref[1]):
        np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("masked", ["causal", "padded"])
def test_gradient_in_one_sweep_per_batch_over_several_tiles(masked, monkeypatch):
    """The backward's one-sweep-a-batch path (dq, dk, dv from each tile at once), which
    enough batches per thread take, over 260 keys: three key blocks, the last ragged."""
    from jitgraph.kernels import attention as kernels
    monkeypatch.setattr(kernels, "BATCH_SWEEP_MIN", 1)
    t = 260
    q, k, v = (RNG.standard_normal((4, 2, t, 4)) for _ in range(3))
    mask = np.tril(np.ones((t, t), bool)) if masked == "causal" else \
        (np.arange(t) < np.array([t, 200, 130, 7])[:, None])[:, None, None, :]
    _check_against_reference(q, k, v, mask)


def _check_against_reference(q, k, v, mask) -> None:
    """The compiled value and gradients of ``_loss`` of masked attention against the
    reference interpreter's."""
    vg = jg.value_and_grad(_loss(lambda q, k, v: nn.dot_product_attention(q, k, v, mask)),
                           argnums=(0, 1, 2))
    ref = vg(q, k, v)
    val, grads = jg.jit(vg)(q, k, v)
    np.testing.assert_allclose(val, ref[0], rtol=1e-12)
    for g, r in zip(grads, ref[1]):
        np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-12)


def test_float32_cross_attention_other_lengths():
    q = RNG.standard_normal((3, 130, 16)).astype(np.float32)
    k, v = (RNG.standard_normal((3, 70, 16)).astype(np.float32) for _ in range(2))
    loss = _loss(lambda q, k, v: nn.dot_product_attention(q, k, v))
    ref = jg.grad(loss, argnums=(0, 1, 2))(q, k, v)
    got = jg.jit(jg.grad(loss, argnums=(0, 1, 2)))(q, k, v)
    for g, r in zip(got, ref):
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, r, rtol=2e-4, atol=2e-5)


def test_fully_masked_rows_attend_uniformly_as_unfused():
    mask = np.ones((T, T), bool)
    mask[5:9] = False                          # rows with no key at all
    att = lambda q, k, v: nn.dot_product_attention(q, k, v, mask)
    ref = jg.grad(_loss(att), argnums=(0, 1, 2))(Q, K, V)
    got = jg.jit(jg.grad(_loss(att), argnums=(0, 1, 2)))(Q, K, V)
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-12)
    o = jg.jit(att)(Q, K, V)
    np.testing.assert_allclose(o[..., 6, :], V.mean(axis=2), rtol=1e-10)


def _where_inf(mask):
    """Attention spelled with ``where(mask, s, -inf)``: a row with no key is NaN (0 / 0)."""
    def att(q, k, v):
        s = jnp.where(mask, q @ jnp.swapaxes(k, -1, -2) * 0.5, -jnp.inf)
        return nn.softmax(s, axis=-1) @ v
    return att


@pytest.mark.parametrize("t", [T, 260], ids=["one-tile", "three-tiles"])
@pytest.mark.parametrize("causal", [False, True], ids=["padded", "causal"])
def test_nan_inputs_and_rows_with_no_key_under_an_infinite_fill_give_nan_as_unfused(causal, t):
    """NaN in a query gives NaN in its row's output, as the unfused program does, and a row
    that sees no key where masked scores are -inf gives NaN (0 / 0) as it does: the kernels
    neither stop with an error nor make up a value. At 260 rows, over several key blocks (the
    running maximum's rescaling) and with the gradient's key and query sweeps."""
    mask = np.tril(np.ones((t, t), bool)) if causal else np.ones((t, t), bool)
    mask[7] = False                             # row 7 sees no key
    q, k, v = (Q, K, V) if t == T else (RNG.standard_normal((B, H, t, D)) for _ in range(3))
    q = q.copy()
    q[0, 1, 30, 2] = np.nan
    q[1, 0, t - 3, 0] = np.nan                  # (at 260: the last query block)
    att = _where_inf(mask)
    assert jg.jit(att).lower(q, k, v).stages["lowered"].count("attention") == 1
    with np.errstate(invalid="ignore"):       # (NumPy's reference warns of its NaN)
        got, want = jg.jit(att)(q, k, v), att(q, k, v)
    assert np.isnan(want[0, 1, 30]).all() and np.isnan(want[:, :, 7]).all()
    assert np.isnan(want[1, 0, t - 3]).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=1e-10)
    grads = jg.jit(jg.grad(_loss(att), argnums=(0, 1, 2)))(q, k, v)
    assert all(np.isnan(g).any() for g in grads)     # NaN flows back, no error


def test_no_score_sized_buffer_is_planned():
    t = 256
    q, k, v = (RNG.standard_normal((1, 2, t, 16)).astype(np.float32) for _ in range(3))
    mask = np.tril(np.ones((t, t), bool))
    step = jg.grad(lambda q, k, v: jnp.sum(nn.dot_product_attention(q, k, v, mask) ** 2),
                   argnums=(0, 1, 2))
    fused = jg.jit(step).lower(q, k, v).memory_analysis()
    scores = t * t * 4
    assert fused.largest_temp_in_bytes < scores // 4
    assert fused.constant_size_in_bytes == 0          # the causal mask became a flag
    with jg.attention.unfused():
        plain = jg.jit(step).lower(q, k, v).memory_analysis()
    assert plain.largest_temp_in_bytes >= 2 * scores   # (1, 2, T, T) scores
    assert fused.peak_memory_in_bytes < plain.peak_memory_in_bytes / 2


def test_probabilities_used_elsewhere_are_not_fused():
    def f(q, k, v):
        p = nn.softmax(q @ jnp.swapaxes(k, -1, -2), axis=-1)
        return jnp.sum(p @ v) + jnp.sum(p * p)
    g = jg.make_graph(jg.grad(f))(Q, K, V)
    assert g.count("attention") == 0
    np.testing.assert_allclose(jg.jit(jg.grad(f))(Q, K, V), jg.grad(f)(Q, K, V), rtol=1e-10)


def _prim_loss(kind, causal):
    extra = {0: (), 1: (PAD[:, :, :, :9],), 2: (RNG.standard_normal((9, 9)),)}[kind]
    params = dict(scale=0.4, causal=causal, kind=kind, fill=-1e30 if kind == 1 else -np.inf)

    def loss(q, k, v):
        o, _, _ = attention_p(q, k, v, *extra, **params)
        return jnp.sum(jnp.sin(o))
    return loss


@pytest.mark.parametrize("kind,causal", [(0, True), (1, False), (2, True)])
def test_primitive_rules_against_central_differences(kind, causal):
    q, k, v = (x[:, :, :9, :3] for x in (Q, K, V))
    jg.check_grads(_prim_loss(kind, causal), (q, k, v), order=2)


def test_primitive_reference_and_compiled_kernels_agree_with_the_formula():
    q, k, v = Q[0], K[0], V[0]
    s = q @ np.swapaxes(k, -1, -2) * 0.4
    s = np.where(CAUSAL, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    params = dict(scale=0.4, causal=True, kind=0, fill=-np.inf)
    o, m, tot = attention_p.impl(q, k, v, **params)
    np.testing.assert_allclose(o, p @ v, rtol=1e-12)
    np.testing.assert_allclose(m, s.max(-1), rtol=1e-12)
    np.testing.assert_allclose(tot, np.exp(s - s.max(-1, keepdims=True)).sum(-1), rtol=1e-12)
    got = jg.jit(lambda q, k, v: attention_p(q, k, v, **params))(q, k, v)
    np.testing.assert_allclose(got[0], o, rtol=1e-12, atol=1e-14)
    do = RNG.standard_normal(o.shape)
    for c, r in zip(got, (o, m, tot)):
        np.testing.assert_allclose(c, r, rtol=1e-12, atol=1e-14)
    ref = attention_bwd_p.impl(q, k, v, o, m, tot, do, **params)
    comp = jg.jit(lambda *a: attention_bwd_p(*a, **params))(q, k, v, o, m, tot, do)
    for c, r in zip(comp, ref):
        np.testing.assert_allclose(c, r, rtol=1e-10, atol=1e-13)


def test_vmap_of_the_fused_gradient_is_per_example():
    t = 20
    mask = np.tril(np.ones((t, t), bool))
    loss = _loss(lambda q, k, v: nn.dot_product_attention(q, k, v, mask))
    q, k, v = Q[:, :, :t], K[0, :, :t], V[0, :, :t]       # k, v shared by the examples
    per = jg.jit(jg.vmap(jg.grad(loss, argnums=(0, 1)), in_axes=(0, None, None)))(q, k, v)
    for i in range(B):
        want = jg.grad(loss, argnums=(0, 1))(q[i], k, v)
        np.testing.assert_allclose(per[0][i], want[0], rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(per[1][i], want[1], rtol=1e-9, atol=1e-12)


def test_rewrite_leaves_other_graphs_alone():
    g = jg.make_graph(lambda a, b: jnp.sum(nn.softmax(a @ b, axis=-1)))(Q[0, 0], K[0, 0].T)
    assert fuse_attention(g) is g


def test_causal_diagonal_tiles_are_computed_as_a_staircase_covering_every_seen_key():
    """Under the causal cut alone a tile the diagonal crosses is computed in bands of rows,
    each with the keys its last row sees: the bands cover the tile's rows once each, every
    row gets every key it sees (and the band's keys are no more than the tile's), and tiles
    below the diagonal, tiles with a mask and bands under ``SPLIT_MIN_ROWS`` rows stay whole."""
    from jitgraph.kernels import attention as kernels
    parts_of = kernels._diagonal_parts.py_func
    part = kernels._part.py_func
    block = kernels.BLOCK
    for tq in (1, 31, 64, 100, 128, 200, 260, 512):
        for i0 in range(0, tq, block):
            i1 = min(i0 + block, tq)
            for j0 in range(0, min(tq, i1), block):
                j1 = min(j0 + block, tq)
                n = parts_of(0, True, i0, i1, j1)
                assert 1 <= n <= kernels.DIAGONAL_PARTS
                if n > 1:
                    assert j1 - 1 > i0 and (i1 - i0) // n >= kernels.SPLIT_MIN_ROWS
                rows = []
                for p in range(n):
                    r0, r1, jx = part(i0, i1, j1, n, p)
                    rows += range(r0, r1)
                    assert j0 < jx <= j1
                    assert all(jx >= min(j1, r + 1) for r in range(r0, r1)), (i0, j0, p)
                assert rows == list(range(i0, i1))
                assert parts_of(1, True, i0, i1, j1) == parts_of(0, False, i0, i1, j1) == 1
    assert parts_of(0, True, 0, 128, 128) == kernels.DIAGONAL_PARTS
    assert parts_of(0, True, 128, 256, 128) == 1            # below the diagonal


# ------------------------------------------------------------------ threads and compile jobs
@pytest.mark.parametrize("one_sweep", [True, False])
@pytest.mark.parametrize("masked", [False, True])
def test_kernels_run_on_numbas_threads_and_their_compile_jobs_match(one_sweep, masked,
                                                                    monkeypatch):
    """The fused kernels' work items run on Numba's threads (no Python threads, which shared
    the cores with Numba's spinning ones), in both gradient paths, with the causal cut alone
    and with a mask (the ``_masked`` kernels); the compile jobs the compiler hands its
    workers name exactly the signatures the host steps then run (else the workers' cache
    entries would serve nothing): each kernel ran from its shipped IR or was compiled by
    Numba for that signature."""
    from jitgraph.compiler import compile_pool, prebuilt, threaded
    from jitgraph.kernels import attention as kernels
    from jitgraph.kernels import threads
    if not threaded.available():
        pytest.skip("launchers need Linux and a Numba numba_patches checked")
    monkeypatch.setattr(threads, "run_split", lambda *a: pytest.fail("Python threads ran"))
    monkeypatch.setattr(kernels, "BATCH_SWEEP_MIN", 1 if one_sweep else 1 << 30)
    t = 260
    q, k, v = (RNG.standard_normal((2, 2, t, 4)) for _ in range(3))
    _check_against_reference(q, k, v, np.tril(np.ones((t, t), bool)) if not masked else
                             (np.arange(t) < np.array([200, 7])[:, None])[:, None, None, :])
    jobs = kernels.row_kernels(np.float64, False, 4, t, int(masked)) + \
        kernels.row_kernels(np.float64, True, 4, t, int(masked))
    sweeps = ["forward", "batch"] if one_sweep else ["forward", "key", "query"]
    names = [f"{s}_rows_masked" if masked else f"{s}_rows" for s in sweeps]
    assert [name for name, _ in jobs] == (names if one_sweep else
                                          names[:1] + ["dots_rows"] + names[1:])
    for name, types in jobs:      # run from their shipped IR (compiler/prebuilt.py), or Numba's
        assert prebuilt.served(kernels.__name__, name, types) or \
            compile_pool.numba_signature(types) in getattr(kernels, name).signatures, name


def test_host_steps_hand_their_kernels_to_the_compile_workers():
    """A program's attention host steps list their row kernels as compile jobs, once each
    (two layers' steps of one shape: one job per kernel); steps with a mask list the
    ``_masked`` kernels, those without one only the kernels without the mask step."""
    from types import SimpleNamespace

    from jitgraph.compiler.backends.cpu_program import _host_kernel_jobs
    from jitgraph.compiler.fusion import HostStep
    from jitgraph.core import Aval
    from jitgraph.kernels import attention as kernels

    def node(prim, batches, kind=0):
        x = SimpleNamespace(aval=Aval((batches, 8, 256, 32), np.dtype(np.float32)))
        return SimpleNamespace(prim=prim, inputs=[x, x, x], params={"kind": kind})
    steps = [HostStep(node(p, 8)) for p in (attention_p, attention_bwd_p)] * 2
    jobs = _host_kernel_jobs(steps)
    assert [(m, name) for m, name, _ in jobs] == [(kernels, "forward_rows"),
                                                  (kernels, "batch_rows")]
    assert jobs[0][2][-1] == "size" and jobs[0][2][2] == "float32"
    masked = _host_kernel_jobs([HostStep(node(p, 8, kind=2))
                                for p in (attention_p, attention_bwd_p)])
    assert [name for _, name, _ in masked] == ["forward_rows_masked", "batch_rows_masked"]


def test_several_python_threads_calling_one_fused_program_get_the_same_bits():
    """Three Python threads calling one fused program at once: each call's work items go to
    Numba's pool through the row launchers (their calls never share a buffer), and every
    result has the bits of a call made alone."""
    import threading
    t = 260
    q, k, v = (RNG.standard_normal((4, 2, t, 8)).astype(np.float32) for _ in range(3))
    f = jg.jit(jg.value_and_grad(_loss(nn_causal_of(t)), argnums=(0, 1, 2)))
    want = [np.asarray(x) for x in jg.tree_leaves(f(q, k, v))]
    bad, errors = [], []

    def work():
        try:
            with jg.attention.always_fused():      # (the override holds per thread)
                for _ in range(5):
                    got = jg.tree_leaves(f(q, k, v))
                    bad.extend(i for i, (a, b) in enumerate(zip(got, want))
                               if not np.array_equal(np.asarray(a), b))
        except Exception as e:                      # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors and not bad
    assert f.lower(q, k, v).stages["lowered"].count("attention_bwd") == 1


def nn_causal_of(t: int):
    mask = np.tril(np.ones((t, t), bool))
    return lambda q, k, v: nn.dot_product_attention(q, k, v, mask)
