"""Named regression tests for the bugs the size-regime tier (``test_size_regimes.py``) and the
scaled fuzzer (``test_jit_hypothesis.py``) found, each at the smallest size that shows it."""
from __future__ import annotations

import numpy as np

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import nn
from jitgraph.compiler import thresholds as T

PAR = 2 * T.PARALLEL_MIN_WORK


def test_parallel_kernel_index_is_signed():
    """A ``prange`` index is uint64 in Numba; ``min(max(o0 - n, 0), n - 1)`` then promoted to
    float64 and the kernel failed to compile (concatenate, pad, roll, dropout past 2^16
    elements). The generated loop rebinds the index as int64 (masked non-negative, so the
    accesses still vectorize)."""
    a = np.arange(PAR // 2, dtype=np.float32)
    f = jitgraph.jit(lambda a, b: jnp.concatenate([a, b]) * 2.0)
    src = f.lower(a, a).source
    assert "prange(" in src and "o0 = np.int64(o0_u) & 0x7FFFFFFFFFFFFFFF" in src
    np.testing.assert_array_equal(f(a, a + 1), np.concatenate([a, a + 1]) * 2.0)


def test_gather_with_unsigned_looking_index_stays_integer():
    """``clamp_index`` returns int64 whatever the index array's integer type."""
    from jitgraph.kernels.scalar import clamp_index
    assert clamp_index(np.uint32(7), 5) == 4 and clamp_index(np.int32(-1), 5) == 4
    x = np.arange(10.0)
    i = np.array([0, 9, 12, -3], dtype=np.int32)
    np.testing.assert_array_equal(jitgraph.jit(lambda x, i: x[i])(x, i), [0.0, 9.0, 9.0, 7.0])


def test_pad_makes_no_size_dependent_constants():
    """``jnp.pad`` with zeros concatenated constant arrays as large as the padded borders: a
    (n, 3) array of zeros per call baked into the program, which also kept the program from
    taking its sizes at run time ("constant arrays depend on the sizes"). It is one layout op
    now."""
    x = np.ones((5, 4))
    g = jitgraph.make_graph(lambda x: jnp.pad(x, ((2, 1), (0, 3))))(x)
    assert [n.prim.name for n in g.nodes] == ["pad_slice"] and not g.consts
    f = jitgraph.jit(lambda x: jnp.pad(x, ((2, 1), (0, 3))) * 2.0, dynamic_dims={0: 0})
    for rows in (5, 9, 40):
        x = np.random.default_rng(rows).random((rows, 4))
        np.testing.assert_array_equal(f(x), np.pad(x, ((2, 1), (0, 3))) * 2.0)
    assert all(e["dynamic"] for e in f.cache_entries())
    np.testing.assert_array_equal(jnp.pad(np.arange(3.0), 1, constant_values=5.0),
                                  [5.0, 0.0, 1.0, 2.0, 5.0])


def test_dynamic_concatenation_of_two_runtime_sizes():
    """Concatenating two arrays whose lengths are two runtime sizes makes literals such as
    ``n0 + n1`` (and a mean's ``float(n0 + n1)``): no formula fitted them, and the program
    stayed fixed-size. Integer affine formulas in several sizes are fitted now."""
    from jitgraph.compiler.dynamic import fit, sample_points
    pts = sample_points({"n0": 1, "n1": 1})
    assert fit([16 * (p["n0"] + p["n1"]) + 3 for p in pts], pts) == "(16 * n0 + 16 * n1 + 3)"
    assert fit([float(p["n0"] + p["n1"]) for p in pts], pts) == "float(n0 + n1)"

    def f(x, y):
        c = jnp.concatenate([x, y * 2.0], axis=0)
        return c.sum(axis=1).mean(), jnp.sum(nn.softmax(c), axis=0)
    dyn = jitgraph.jit(f, dynamic_dims={0: 0, 1: 0})
    fixed = jitgraph.jit(f, dynamic=False)
    for rows in (6, 11, 30):
        x, y = np.random.default_rng(rows).random((rows, 3)), np.ones((rows + 2, 3))
        for a, b in zip(dyn(x, y), fixed(x, y)):
            np.testing.assert_allclose(a, b, rtol=1e-13)
    assert all(e["dynamic"] for e in dyn.cache_entries())


def test_fuzz_flip_of_column_sums_gradient():
    """The scaled fuzzer's first failing program (seed 1): the gradient of
    ``flip(sum(x0, axis=0)) * 2 + sum(abs(x1))`` and ``abs(x1)`` at 131,072 rows came out
    as 4.25 where it is 2 everywhere. It did not recur on the finished tree (it was drawn while
    the eager-gradient cache was being changed beside it); kept as a named test."""
    r = np.random.default_rng(0)
    x0, x1 = r.uniform(-1.5, 1.5, (PAR, 3)), r.uniform(-1.5, 1.5, PAR)

    def scalar(x0, x1):
        a = jnp.flip(jnp.sum(x0, axis=0), 0) * 2.0 + jnp.sum(jnp.abs(x1))
        return jnp.sum(a) + jnp.sum(jnp.abs(x1) * 1.25)
    g = jitgraph.grad(scalar, argnums=(0, 1))
    for got in (jitgraph.jit(g)(x0, x1), g(x0, x1)):
        np.testing.assert_array_equal(got[0], np.full((PAR, 3), 2.0))
        np.testing.assert_allclose(got[1], np.sign(x1) * 4.25, rtol=1e-15)
