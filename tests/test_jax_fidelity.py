"""JAX-facing fidelity: pytree registration before structure, jit of any callable, eager and
jitted results answering JAX's array API, and the ``lax`` names JAX libraries call
(elementwise names, ``Precision``, dynamic slices, convolutions, window reductions and their
shape helpers), ``nn.selu``, ``nn.standardize``, ``jnp.isscalar``.

Expected values are exact (integers, NumPy references written out here) or, where noted,
what JAX 0.10.2 returns for the same call (float64); gradients are checked against float64
central differences (``check_grads``).
"""
from __future__ import annotations

import collections
import functools
import itertools

import numpy as np
import pytest

import jitgraph as jg
import jitgraph.lax as lax
import jitgraph.nn as nn
import jitgraph.numpy as jnp
from jitgraph.arrays import Array


# ------------------------------------------------------------------ pytrees
Pair = collections.namedtuple("Pair", ["a", "b"])


class State(collections.namedtuple("State", ["values", "meta"])):
    """A namedtuple registered as a pytree node (as jax.example_libraries.optimizers does)."""


jg.register_pytree_node(State, lambda s: ((s.values,), s.meta),
                        lambda meta, ch: State(ch[0], meta))


def test_registration_wins_over_namedtuple_structure():
    s = State([np.ones(2), np.zeros(3)], ("tag", 3))
    leaves, tree = jg.tree_flatten(s)
    assert len(leaves) == 2              # meta is aux data, not two more leaves
    back = jg.tree_unflatten(tree, leaves)
    assert type(back) is State and back.meta == ("tag", 3)
    out = jg.jit(lambda s: State([v * 2 for v in s.values], s.meta))(s)
    assert type(out) is State and out.meta == ("tag", 3)
    np.testing.assert_array_equal(out.values[0], [2.0, 2.0])
    # a plain namedtuple keeps its fields as children
    assert len(jg.tree_leaves(Pair(np.ones(1), (np.ones(1), np.ones(1))))) == 3


def test_vmap_sees_the_registered_structure():
    s = State([np.arange(6.0).reshape(3, 2)], "m")
    out = jg.vmap(lambda s: State([jnp.sum(s.values[0])], s.meta))(s)
    np.testing.assert_array_equal(out.values[0], [1.0, 5.0, 9.0])


def test_dict_keys_in_sorted_order_and_jax_tree_names():
    leaves, _ = jg.tree_flatten({10: 1.0, 2: 2.0, 9: 3.0})
    assert leaves == [2.0, 3.0, 1.0]               # 2 < 9 < 10, as JAX sorts
    f = jg.jit(lambda d: d[2] - d[10])
    assert float(f({10: np.ones(1), 2: np.full(1, 5.0), 9: np.zeros(1)})[0]) == 4.0
    assert jg.tree.leaves({"b": 1, "a": 2}) == [2, 1]
    assert jg.tree.map(lambda x, y: x + y, (1, [2]), (10, [20])) == (11, [22])
    assert jg.tree.structure((1, 2)) == jg.tree.flatten((3, 4))[1]


def test_registering_a_type_twice_is_an_error():
    class Box:
        pass
    jg.register_pytree_node(Box, lambda b: ((), None), lambda a, c: Box())
    with pytest.raises(ValueError, match="registered already"):
        jg.register_pytree_node(Box, lambda b: ((), None), lambda a, c: Box())
    with pytest.raises(ValueError, match="built-in"):
        jg.register_pytree_node(tuple, lambda b: ((), None), lambda a, c: ())


# ------------------------------------------------------------------ jit of any callable
def _scaled(x, y, scale=1.0):
    return (x + y) * scale


class _Scale:
    def __init__(self, k):
        self.k = k
        self.lower = "an attribute that must not shadow JitFunction.lower"

    def __call__(self, x):
        return x * self.k

    def shift(self, x):
        return x - self.k


def test_jit_of_partials_callable_objects_and_bound_methods():
    x = np.arange(3.0)
    f = jg.jit(functools.partial(_scaled, scale=2.0))
    np.testing.assert_array_equal(f(x, x), [0.0, 4.0, 8.0])
    assert f.__name__ == "partial(_scaled)"
    obj = _Scale(3.0)
    np.testing.assert_array_equal(jg.jit(obj)(x), [0.0, 3.0, 6.0])
    assert "graph nodes" in repr(jg.jit(obj).lower(x))
    np.testing.assert_array_equal(jg.jit(obj.shift)(x), [-3.0, -2.0, -1.0])
    g = jg.jit(functools.partial(_scaled, x), static_argnums=(1,))
    np.testing.assert_array_equal(g(x, 2.0), [0.0, 4.0, 8.0])
    with pytest.raises(TypeError, match=r"jit\(partial\(_scaled\)\): too many"):
        f(x, x, 1.0, 2.0)
    with pytest.raises(TypeError, match=r"jit\(_Scale\): argument 0 \('x'\)"):
        jg.jit(obj)("text")


# ------------------------------------------------------------------ JAX's array API on results
def _check_array_api(x, want):
    assert isinstance(x, np.ndarray) and type(x) is Array
    assert x.block_until_ready() is x
    x.copy_to_host_async()
    assert x.addressable_data(0) is x and x.is_fully_addressable and x.is_ready()
    assert x.device.platform == "cpu" and x.devices() == {x.device}
    np.testing.assert_array_equal(x, want)


def test_eager_results_answer_the_array_api():
    x = jnp.zeros(4)
    _check_array_api(x, np.zeros(4))
    y = x.at[1].set(5.0).at[2].add(2.0).at[1].max(3.0).at[0].min(-1.0).at[1].multiply(2.0)
    _check_array_api(y, [-1.0, 10.0, 2.0, 0.0])
    np.testing.assert_array_equal(x, np.zeros(4))          # updates return new arrays
    assert float(y.at[1].get()) == 10.0
    _check_array_api(jnp.sin(x), np.zeros(4))
    parts = jnp.split(jnp.arange(4.0), 2)
    assert all(type(p) is Array for p in parts)
    # NumPy's own behaviour is unchanged: scalars from reductions, NumPy's repr
    assert type(y.sum()) is np.float64 and type(np.sum(y)) is np.float64
    assert repr(jnp.ones(2)) == "array([1., 1.])"
    assert type(np.exp(y)) is Array and type(np.asarray(y)) is np.ndarray


def test_jit_results_answer_the_array_api_and_feed_back():
    f = jg.jit(lambda x, y: x * y + 1.0)
    a = f(np.arange(3.0), np.full(3, 2.0))
    _check_array_api(a, [1.0, 3.0, 5.0])
    b = f(a, a)                                 # an Array into the compiled call path
    _check_array_api(b, [2.0, 10.0, 26.0])
    c = f(a[::2], np.ones(2))                   # a non-contiguous Array view
    _check_array_api(c, [2.0, 6.0])
    tree = jg.jit(lambda x: {"s": x + 1, "l": [x * 2, x]})(np.ones(2))
    for leaf in jg.tree_leaves(tree):
        assert type(leaf) is Array
    _check_array_api(tree["s"].at[0].set(7.0), [7.0, 2.0])


# ------------------------------------------------------------------ lax names
def test_elementwise_lax_names():
    x, y = np.array([-7, 7, -7, 7]), np.array([2, 2, -2, -2])
    np.testing.assert_array_equal(lax.div(x, y), [-3, 3, 3, -3])       # toward zero
    np.testing.assert_array_equal(lax.rem(x, y), [-1, 1, -1, 1])       # sign of x
    np.testing.assert_array_equal(lax.rem(x * 1.5, y * 1.0), [-0.5, 0.5, -0.5, 0.5])
    np.testing.assert_array_equal(lax.max(x, y), [2, 7, -2, 7])
    np.testing.assert_array_equal(lax.add(x, y), x + y)
    np.testing.assert_array_equal(lax.round(np.array([-2.5, 0.5, 1.5])), [-3.0, 1.0, 2.0])
    np.testing.assert_array_equal(lax.round(np.array([-2.5, 0.5, 1.5]), 1), [-2.0, 0.0, 2.0])
    np.testing.assert_array_equal(lax.clamp(0, x, 5), [0, 5, 0, 5])
    np.testing.assert_allclose(lax.rsqrt(np.array([4.0, 16.0])), [0.5, 0.25])
    np.testing.assert_array_equal(lax.integer_pow(np.array([2.0, 3.0]), 3), [8.0, 27.0])
    np.testing.assert_array_equal(lax.select(x > 0, x, y), [2, 7, -2, 7])
    np.testing.assert_array_equal(
        lax.broadcast_in_dim(np.array([1.0, 2.0]), (2, 3), (0,)), [[1, 1, 1], [2, 2, 2]])
    np.testing.assert_array_equal(lax.pad(np.array([1.0, 2.0]), 0.0, [(1, -1, 1)]),
                                  [0.0, 1.0, 0.0])
    np.testing.assert_array_equal(lax.cumsum(np.array([1, 2, 3]), reverse=True), [6, 5, 3])
    with pytest.raises(TypeError, match="lax.integer_pow: the exponent"):
        lax.integer_pow(np.ones(2), 2.5)


def test_precision_is_accepted_and_checked():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(6.0).reshape(3, 2)
    for p in (None, lax.Precision.HIGHEST, "highest", "float32", ("high", "default")):
        np.testing.assert_array_equal(jnp.dot(a, b, precision=p), a @ b)
        np.testing.assert_array_equal(lax.dot(a, b, precision=p), a @ b)
    assert jnp.matmul(a, b, preferred_element_type=np.float32).dtype == np.float32
    np.testing.assert_array_equal(
        lax.dot_general(np.ones((2, 3, 4)), np.ones((2, 4, 5)), (((2,), (1,)), ((0,), (0,)))),
        np.full((2, 3, 5), 4.0))
    with pytest.raises(ValueError, match="jnp.dot: precision must be"):
        jnp.dot(a, b, precision="fastest-ish")


def test_dynamic_slices_static_and_traced():
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(lax.dynamic_slice(x, (2, 1), (2, 2)), x[1:3, 1:3])  # clamped
    u = np.full((2, 2), -1.0)
    want = x.copy()
    want[1:3, 2:4] = -1.0
    np.testing.assert_array_equal(lax.dynamic_update_slice(x, u, (2, 3)), want)

    @jg.jit
    def f(x, u, i):
        s = lax.dynamic_slice_in_dim(x, i, 2, axis=1)
        return s, lax.dynamic_update_slice_in_dim(x, u, i, axis=1)
    s, upd = f(x, np.full((3, 2), -1.0), 3)        # start 3 is clamped to 2
    np.testing.assert_array_equal(s, x[:, 2:4])
    w = x.copy()
    w[:, 2:4] = -1.0
    np.testing.assert_array_equal(upd, w)
    jg.check_grads(lambda x, u: jnp.sum(lax.dynamic_update_slice(x, u, (1, 1)) ** 2)
                   + jnp.sum(lax.dynamic_slice(x, (0, 2), (2, 2)) ** 3),
                   (x / 10, u), order=1, modes=("rev",))


# ------------------------------------------------------------------ windows
def _conv_reference(x, w, strides, pads, ldil, rdil, groups):
    """Direct NHWC x HWIO cross-correlation (loops over every output and tap)."""
    n, h, wd, c = x.shape
    kh, kw, ci, co = w.shape
    xd = np.zeros((n, (h - 1) * ldil[0] + 1, (wd - 1) * ldil[1] + 1, c))
    xd[:, ::ldil[0], ::ldil[1]] = x
    (p0, p1), (q0, q1) = pads
    xp = np.zeros((n, xd.shape[1] + p0 + p1, xd.shape[2] + q0 + q1, c))
    xp[:, p0:p0 + xd.shape[1], q0:q0 + xd.shape[2]] = xd
    ho = (xp.shape[1] - (kh - 1) * rdil[0] - 1) // strides[0] + 1
    wo = (xp.shape[2] - (kw - 1) * rdil[1] - 1) // strides[1] + 1
    out = np.zeros((n, ho, wo, co))
    per_o = co // groups
    for i, j, o in itertools.product(range(ho), range(wo), range(co)):
        g = o // per_o
        for a, b in itertools.product(range(kh), range(kw)):
            patch = xp[:, i * strides[0] + a * rdil[0], j * strides[1] + b * rdil[1],
                       g * ci:(g + 1) * ci]
            out[:, i, j, o] += patch @ w[a, b, :, o]
    return out


@pytest.mark.parametrize("strides,padding,pads,ldil,rdil,groups", [
    ((1, 1), "SAME", ((1, 1), (0, 1)), (1, 1), (1, 1), 1),
    ((2, 1), "VALID", ((0, 0), (0, 0)), (1, 1), (1, 2), 2),
    ((1, 2), [(1, 2), (0, 1)], ((1, 2), (0, 1)), (2, 1), (1, 1), 1),
])
def test_conv_general_dilated_matches_direct_loops(strides, padding, pads, ldil, rdil, groups):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 4, 4))
    w = rng.standard_normal((3, 2, 4 // groups, 6))
    got = lax.conv_general_dilated(x, w, strides, padding, ldil, rdil,
                                   ("NHWC", "HWIO", "NHWC"), feature_group_count=groups)
    np.testing.assert_allclose(got, _conv_reference(x, w, strides, pads, ldil, rdil, groups),
                               rtol=1e-12, atol=1e-12)
    # the same convolution in NCHW / OIHW / NCHW layouts
    got_nchw = lax.conv_general_dilated(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1),
                                        strides, padding, ldil, rdil,
                                        feature_group_count=groups)
    np.testing.assert_allclose(got_nchw, np.asarray(got).transpose(0, 3, 1, 2), rtol=1e-12,
                               atol=1e-12)


def test_conv_and_pooling_gradients():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 4, 4, 2)), rng.standard_normal((2, 2, 2, 3))

    def f(x, w):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO",
                                                                            "NHWC"))
        p = lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        s = lax.reduce_window(y, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), "SAME")
        return jnp.sum(p ** 2) + jnp.sum(jnp.tanh(s))
    jg.check_grads(f, (x, w), order=1, modes=("rev",))    # (under jit: test_jax_libraries)
    t = lax.conv_transpose(x, w, (2, 2), "SAME")
    assert t.shape == (1, 8, 8, 3)
    jg.check_grads(lambda x: jnp.sum(lax.conv_transpose(x, w[..., :2], (2, 1), "VALID") ** 2),
                   (x,), order=1, modes=("rev",))


def test_reduce_window_matches_numpy():
    x = np.arange(30.0).reshape(5, 6) % 7
    got = lax.reduce_window(x, -np.inf, lax.max, (2, 3), (2, 2), "SAME")
    xp = np.pad(x, ((0, 1), (0, 1)), constant_values=-np.inf)   # SAME: 3x3 outputs
    want = np.array([[xp[i:i + 2, j:j + 3].max() for j in range(0, 6, 2)]
                     for i in range(0, 6, 2)])
    np.testing.assert_array_equal(got, want)
    s = lax.reduce_window(x, 0.0, lax.add, (2, 2), (1, 1), [(1, 0), (0, 0)],
                          window_dilation=(1, 2))
    xp = np.pad(x, ((1, 0), (0, 0)))
    want = np.array([[xp[i, j] + xp[i, j + 2] + xp[i + 1, j] + xp[i + 1, j + 2]
                      for j in range(4)] for i in range(5)])
    np.testing.assert_array_equal(s, want)


def test_shape_helpers_match_jax():
    # each right-hand side is what JAX 0.10.2's function of the same name returns
    assert lax.padtype_to_pads((7, 6), (3, 2), (2, 1), "SAME") == [(1, 1), (0, 1)]
    assert lax.padtype_to_pads((7, 6), (3, 2), (2, 1), "SAME_LOWER") == [(1, 1), (1, 0)]
    assert lax.padtype_to_pads((7, 6), (3, 2), (2, 1), "VALID") == [(0, 0), (0, 0)]
    dn = ("NHWC", "HWIO", "NHWC")
    assert lax.conv_general_shape_tuple((2, 7, 6, 4), (3, 2, 4, 6), (2, 1), "SAME", dn) == \
        (2, 4, 6, 6)
    assert lax.conv_transpose_shape_tuple((2, 7, 6, 4), (3, 3, 4, 5), (2, 2), "SAME", dn) == \
        (2, 14, 12, 5)
    assert lax.conv_transpose_shape_tuple((2, 7, 6, 4), (3, 3, 4, 5), (2, 2), "VALID", dn) == \
        (2, 15, 13, 5)
    assert lax.reduce_window_shape_tuple((2, 7, 6, 4), (1, 3, 2, 1), (1, 2, 1, 1),
                                         [(0, 0), (1, 1), (0, 1), (0, 0)]) == (2, 4, 6, 4)
    assert lax.conv_general_permutations(dn) == ((0, 3, 1, 2), (3, 2, 0, 1), (0, 3, 1, 2))


# ------------------------------------------------------------------ nn and jnp names
def test_selu_standardize_isscalar():
    x = np.array([-1.0, 0.0, 2.0])
    lam, alpha = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717
    np.testing.assert_allclose(nn.selu(x), [lam * alpha * (np.exp(-1.0) - 1), 0.0, 2 * lam],
                               rtol=1e-15)
    m = np.array([[1.0, 2.0, 3.0, 6.0]])
    want = (m - 3.0) / np.sqrt(3.5 + 1e-5)
    np.testing.assert_allclose(nn.standardize(m), want, rtol=1e-14)
    w = np.array([[True, True, True, False]])
    np.testing.assert_allclose(nn.standardize(m, where=w),
                               (m - 2.0) / np.sqrt(2.0 / 3.0 + 1e-5), rtol=1e-14)
    assert jnp.isscalar(1.0) and jnp.isscalar(np.float32(1)) and jnp.isscalar(np.array(2))
    assert not jnp.isscalar([1]) and not jnp.isscalar(np.ones(2)) and not jnp.isscalar(None)
    assert jg.jit(lambda x: x * (2.0 if jnp.isscalar(x) else 3.0))(np.array(1.0)) == 2.0
