"""jitgraph.nn.initializers as jax.nn.initializers: factories returning ``init(key, shape,
dtype)``, their variances on large samples, the fans of dense and convolution weights, the
orthogonal ones' orthogonality, and the pre-factory call (same numbers, a DeprecationWarning).
JAX's exact numbers for a key are checked in test_random_jax_values.py."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import jitgraph
import jitgraph.nn.initializers as init
import jitgraph.random as jr

K = jr.key(7)
TRUNC = .87962566103423978      # the stddev of a standard normal truncated to (-2, 2)

# name: (scale, mode) of the variance scale / n
SCALING = {"glorot_uniform": (1.0, "fan_avg"), "glorot_normal": (1.0, "fan_avg"),
           "he_uniform": (2.0, "fan_in"), "he_normal": (2.0, "fan_in"),
           "lecun_uniform": (1.0, "fan_in"), "lecun_normal": (1.0, "fan_in")}


def _n(mode, fan_in, fan_out):
    return {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[mode]


@pytest.mark.parametrize("name", sorted(SCALING))
@pytest.mark.parametrize("shape,fans", [((300, 200), (300, 200)),
                                        ((3, 3, 40, 60), (360, 540))])     # HWIO: 9 * in, 9 * out
def test_variance_scaling_factories_give_their_variance(name, shape, fans):
    scale, mode = SCALING[name]
    f = getattr(init, name)()
    w = f(K, shape)
    assert w.shape == shape and w.dtype == np.float64
    want = scale / _n(mode, *fans)
    np.testing.assert_allclose(np.var(w), want, rtol=0.04)
    assert abs(np.mean(w)) < 4 * np.sqrt(want / w.size)
    bound = np.sqrt(3 * want) if name.endswith("uniform") else 2 * np.sqrt(want) / TRUNC
    assert np.abs(w).max() <= bound * (1 + 1e-12)
    assert f(K, shape, np.float32).dtype == np.float32
    assert getattr(init, name)(dtype=np.float32)(K, (4, 3)).dtype == np.float32


def test_fans_follow_jax_for_conv_kernels_and_explicit_axes():
    assert init.compute_fans((5, 7)) == (5, 7)
    assert init.compute_fans((3, 3, 16, 32)) == (144, 288)                # HWIO
    assert init.compute_fans((32, 16, 3, 3), in_axis=1, out_axis=0) == (144, 288)   # OIHW
    assert init.compute_fans((2, 3, 4, 5), 0, (2, 3), 1) == (2, 20)       # batch axis 1
    with pytest.raises(ValueError, match="at least 2 axes"):
        init.compute_fans((5,))
    # an OIHW kernel through the factory: he_normal's variance 2 / fan_in, fan_in = 16 * 9
    w = init.he_normal(in_axis=1, out_axis=0)(K, (200, 16, 3, 3))
    np.testing.assert_allclose(np.var(w), 2 / 144, rtol=0.04)
    fan_out = init.variance_scaling(1.0, "fan_out", "normal", in_axis=1, out_axis=0)
    np.testing.assert_allclose(np.var(fan_out(K, (200, 16, 3, 3))), 1 / 1800, rtol=0.04)
    geo = init.variance_scaling(2.0, "fan_geo_avg", "uniform")(K, (400, 100))
    np.testing.assert_allclose(np.var(geo), 2 / 200, rtol=0.04)


def test_variance_scaling_is_jaxs_formula():
    """The three distributions against their definitions on the same key: truncated normal
    rescaled by 1 / .8796..., normal, and uniform on [-sqrt(3 var), sqrt(3 var))."""
    shape, var = (30, 20), 3.0 / 20
    t = init.variance_scaling(3.0, "fan_out", "truncated_normal")(K, shape)
    np.testing.assert_allclose(t, jr.truncated_normal(K, -2, 2, shape) * np.sqrt(var) / TRUNC,
                               rtol=1e-15)
    n = init.variance_scaling(3.0, "fan_out", "normal")(K, shape)
    np.testing.assert_allclose(n, jr.normal(K, shape) * np.sqrt(var), rtol=1e-15)
    u = init.variance_scaling(3.0, "fan_out", "uniform")(K, shape)
    np.testing.assert_allclose(u, jr.uniform(K, shape, minval=-1) * np.sqrt(3 * var),
                               rtol=1e-15)
    with pytest.raises(ValueError, match="mode"):
        init.variance_scaling(1.0, "fan_sum", "normal")
    with pytest.raises(ValueError, match="distribution"):
        init.variance_scaling(1.0, "fan_in", "cauchy")


def test_simple_initializers():
    np.testing.assert_array_equal(init.zeros(K, (2, 3)), np.zeros((2, 3)))
    np.testing.assert_array_equal(init.ones(K, (2,), np.float32), np.ones(2, np.float32))
    c = init.constant(-1.5, np.float32)(K, (2, 2))
    assert c.dtype == np.float32
    np.testing.assert_array_equal(c, np.full((2, 2), -1.5))
    nrm = init.normal(0.5)(K, (400, 100))
    np.testing.assert_allclose(np.std(nrm), 0.5, rtol=0.02)
    u = init.uniform(3.0)(K, (400, 100))
    assert 0 <= u.min() and u.max() < 3.0
    np.testing.assert_allclose(np.mean(u), 1.5, rtol=0.02)
    t = init.truncated_normal(0.1, lower=-1.0, upper=3.0)(K, (400, 100))
    assert -0.1 < t.min() and t.max() < 0.3
    np.testing.assert_allclose(t, jr.truncated_normal(K, -1.0, 3.0, (400, 100)) * 0.1,
                               rtol=1e-15)
    assert init.normal()(K, (3,)).dtype == np.float64
    np.testing.assert_allclose(np.std(init.normal()(K, (40000,))), 1e-2, rtol=0.02)


@pytest.mark.parametrize("shape,column_axis", [((50, 30), -1), ((30, 50), -1),
                                               ((4, 5, 6), 0), ((3, 3, 8, 16), -1)])
def test_orthogonal_has_orthonormal_columns_or_rows(shape, column_axis):
    w = init.orthogonal(scale=2.0, column_axis=column_axis)(K, shape)
    assert w.shape == shape
    m = np.moveaxis(np.asarray(w), column_axis, -1).reshape(-1, shape[column_axis])
    gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
    np.testing.assert_allclose(gram, 4.0 * np.eye(min(m.shape)), atol=1e-12)
    with pytest.raises(ValueError, match="2-d"):
        init.orthogonal()(K, (5,))


def test_delta_orthogonal_is_orthogonal_at_the_centre_only():
    w = np.asarray(init.delta_orthogonal()(K, (3, 3, 4, 6)))
    np.testing.assert_allclose(w[1, 1] @ w[1, 1].T, np.eye(4), atol=1e-12)
    w[1, 1] = 0
    assert not w.any()
    with pytest.raises(ValueError, match="fan_in"):
        init.delta_orthogonal()(K, (3, 3, 6, 4))


def test_initializers_under_jit_give_the_eager_numbers():
    f = init.glorot_normal()
    np.testing.assert_allclose(jitgraph.jit(lambda k: f(k, (6, 4)))(K), f(K, (6, 4)),
                               rtol=1e-13)
    o = init.orthogonal()
    np.testing.assert_allclose(jitgraph.jit(lambda k: o(k, (5, 3)))(K), o(K, (5, 3)),
                               atol=1e-12)


@pytest.mark.parametrize("name", sorted(SCALING))
def test_the_pre_factory_call_still_works_with_a_deprecation_warning(name):
    factory = getattr(init, name)
    with pytest.warns(DeprecationWarning, match=rf"write {name}\(\)\(key, shape, dtype\)"):
        old = factory(K, (4, 3), np.float32)
    np.testing.assert_array_equal(old, factory()(K, (4, 3), np.float32))
    assert old.dtype == np.float32
    with pytest.warns(DeprecationWarning):
        np.testing.assert_array_equal(factory(K, (4, 3)), factory()(K, (4, 3)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        factory()                               # the factory call itself warns nothing
        factory(0, 1)                           # (axes are ints, a key is an array)
    assert init.xavier_normal is init.glorot_normal and init.kaiming_uniform is init.he_uniform


def test_layers_take_initializers_and_initialize_as_before():
    """``nn.Linear``'s default weight is glorot_uniform's, now through the factory; an old
    initializer function passed as ``weight_init`` still works (warning)."""
    lin = jitgraph.nn.Linear(30, 20, key=K)
    kw, = list(jr.split(K, 1))
    np.testing.assert_array_equal(lin.weight, init.glorot_uniform()(kw, (30, 20), np.float32))
    with pytest.warns(DeprecationWarning):
        old = jitgraph.nn.Linear(30, 20, key=K, weight_init=init.glorot_uniform)
    np.testing.assert_array_equal(old.weight, lin.weight)
