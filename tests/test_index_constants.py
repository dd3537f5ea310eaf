"""Constants that are an arithmetic progression over their elements in row-major order
(``jnp.arange``, the row index ``take_along_axis`` builds, the class indices of a one-hot
comparison, a random generator's counters of any shape; step 0: all elements equal) are
computed from the loop index in every backend's kernels instead of loaded from a constant
array."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph.compiler.emit import progression


@pytest.mark.parametrize("c, want", [
    (np.arange(10), (0, 1)),
    (np.arange(5, 50, 3, dtype=np.int32), (5, 3)),
    (np.arange(7)[None, :, None], (0, 1)),              # one axis longer than 1
    (np.arange(10, 0, -2), (10, -2)),
    (np.array([3, 3, 3]), (3, 0)),
    (np.array([0, 1, 3]), None),                          # not a progression
    (np.arange(6).reshape(2, 3), (0, 1)),                 # two axes: the row-major position
    (np.arange(3, 27, 2).reshape(2, 1, 6), (3, 2)),
    (np.zeros((4, 5), np.int64), (0, 0)),                 # all equal: a literal
    (np.arange(6).reshape(3, 2).T, None),                 # column-major: not in row-major order
    (np.arange(4.0), None),                               # floats stay loaded
    (np.array([True, False]), None),
    (np.array([7]), None),                                # a scalar is a literal already
])
def test_progression(c, want):
    assert progression(c) == want


def test_one_hot_against_arange_reads_no_constant():
    def f(labels, z):
        hot = labels[:, None] == jnp.arange(z.shape[1])
        return jnp.sum(jnp.where(hot, z, 0.0), axis=1)
    r = np.random.default_rng(0)
    labels, z = r.integers(0, 9, 33), r.standard_normal((33, 9))
    jf = jitgraph.jit(f)
    np.testing.assert_array_equal(jf(labels, z), z[np.arange(33), labels])
    src = jf.lower(labels, z).source
    kernels = src.split("def program")[0]
    assert "c0[" not in kernels and "np.int64((" in kernels   # computed, not loaded


def test_take_along_axis_row_index_is_computed():
    z, y = np.arange(24.0).reshape(4, 6), np.array([5, 0, 2, 3])
    f = jitgraph.jit(lambda z, y: jnp.take_along_axis(z, y[:, None], 1))
    np.testing.assert_array_equal(f(z, y), np.take_along_axis(z, y[:, None], 1))
    g = jitgraph.jit(jitgraph.grad(lambda z, y: jnp.sum(jnp.take_along_axis(z, y[:, None], 1) ** 2)))
    want = np.zeros_like(z)
    want[np.arange(4), y] = 2 * z[np.arange(4), y]
    np.testing.assert_array_equal(g(z, y), want)


def test_random_counters_of_a_matrix_are_computed_not_loaded():
    """Random bits of a (rows, cols) shape hash each element's row-major position (and its
    high word, 0): neither is a constant array of the kernels, and the values are the
    reference's."""
    k = jitgraph.random.key(3)

    def f(k, x):
        return jnp.where(jitgraph.random.bernoulli(k, 0.5, x.shape), x, 0.0)

    x = np.ones((6, 40), np.float32)
    jf = jitgraph.jit(f)
    np.testing.assert_array_equal(jf(k, x), f(k, x))
    kernels = jf.lower(k, x).source.split("def program")[0]
    assert "c0[" not in kernels and "c1[" not in kernels
    assert "* 40 + " in kernels                  # the row-major position, from the index
