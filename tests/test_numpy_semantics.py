"""NumPy semantics real autograd/JAX code relies on (issue 9, item 6) and the package layout."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp
from jitgraph import grad, jvp
from jitgraph.errors import ConcretizationError


def test_pow_base_derivative_at_zero_is_finite_where_the_limit_is():
    assert grad(lambda x, y: x ** y)(0.0, 0.0) == 0.0           # not 0 * inf
    assert grad(lambda x: x ** 0.0)(0.0) == 0.0
    assert grad(lambda x, y: x ** y, argnums=1)(0.0, 2.0) == 0.0
    assert grad(grad(lambda x: x ** 2.0))(0.0) == 2.0
    assert jvp(lambda x, y: x ** y, (0.0, 0.0), (1.0, 1.0))[1] == 0.0


def test_std_derivative_at_a_single_element_is_zero():
    assert jvp(jnp.std, (2.0,), (1.0,)) == (0.0, 0.0)
    assert grad(jnp.std)(2.0) == 0.0
    assert jvp(jnp.var, (np.float64(2.0),), (1.0,))[1] == 0.0
    x = np.array([1.0, 2.0, 4.0])
    np.testing.assert_allclose(grad(jnp.std)(x), (x - x.mean()) / (x.size * x.std()))


def test_linspace_and_arange_with_traced_endpoints():
    g = grad(lambda a: jnp.sum(jnp.linspace(a, 2.0 * a, 5) ** 2))(1.0)
    np.testing.assert_allclose(g, np.sum(2 * np.linspace(1, 2, 5) * np.linspace(1, 2, 5)))
    np.testing.assert_allclose(jitgraph.jit(lambda a: jnp.linspace(a, 3.0, 4))(1.0),
                               np.linspace(1.0, 3.0, 4))
    assert grad(lambda a: jnp.sum(jnp.arange(a, a + 3.0)))(1.5) == 3.0
    with pytest.raises(TypeError, match="static"):
        jitgraph.jit(lambda a: jnp.arange(a))(3.0)


@pytest.mark.parametrize("empty", [[], {}, (), [[], {}]])
def test_grad_of_an_argument_without_arrays_is_an_empty_gradient(empty):
    assert grad(lambda p: 3.0)(empty) == empty
    g = grad(lambda x, p: jnp.sum(x ** 2), argnums=(0, 1))(np.ones(2), empty)
    np.testing.assert_array_equal(g[0], [2.0, 2.0])
    assert g[1] == empty


def test_traced_values_are_ndarrays():
    seen = []
    grad(lambda x: seen.append(isinstance(x, jnp.ndarray)) or jnp.sum(x))(np.ones(2))
    jitgraph.jit(lambda x: seen.append(isinstance(x, jnp.ndarray)) or x)(np.ones(2))
    assert seen == [True, True]
    assert isinstance(np.ones(2), jnp.ndarray) and not isinstance(3.0, jnp.ndarray)


def test_scalar_types_cast_traced_values_and_act_as_dtypes():
    assert grad(lambda x: jnp.float64(x) * 3.0)(np.float32(2.0)) == 3.0
    assert jitgraph.jit(lambda x: jnp.float32(x))(np.ones(2)).dtype == np.float32
    assert jnp.float64(2) == 2.0 and type(jnp.float64(2)) is np.float64
    assert np.zeros(2, jnp.float32).dtype == jnp.float32 == np.dtype("float32")
    assert np.dtype(jnp.int32) == np.int32 and jnp.float32.itemsize == 4
    assert jnp.ones(3, dtype=jnp.int32).dtype == np.int32


def test_value_dependent_shapes_are_eager_only():
    np.testing.assert_array_equal(jnp.unique(np.array([3, 1, 3])), [1, 3])
    assert jnp.histogram(np.arange(4.0), 2)[0].tolist() == [2, 2]
    with pytest.raises(ConcretizationError, match="unique"):
        jitgraph.jit(jnp.unique)(np.ones(3))


def test_package_layout_keeps_every_name():
    import jitgraph.numpy.linalg as la
    assert jnp.linalg is la and callable(jnp.linalg.norm)
    for name in ("asarray", "sum", "reshape", "getitem", "matmul", "einsum", "zeros", "where",
                 "pi", "newaxis", "float32", "take_along_axis"):
        assert hasattr(jnp, name), name


def test_errors_name_the_function_and_line():
    with pytest.raises(ValueError, match=r"jnp\.split: .*equal division.*\n  at .*test_numpy"):
        jnp.split(np.ones(5), 2)
    with pytest.raises(ValueError, match="pad: mode 'bogus'"):
        jnp.pad(np.ones(3), 1, mode="bogus")


def test_ndarray_methods_of_the_new_families_on_traced_values():
    x = np.array([[0.0, 1.26, 2.0], [3.0, -4.5, 0.0]])
    f = jitgraph.jit(lambda x: (x.any(), x.all(axis=0), x.cumsum(1), x.round(1), x.diagonal(),
                                x.repeat(2), x.argsort(), x.real + x.imag, x.ptp()))
    want = (x.any(), x.all(axis=0), x.cumsum(1), x.round(1), x.diagonal(), x.repeat(2),
            x.argsort(), x, np.ptp(x))
    for g, w in zip(f(x), want):
        np.testing.assert_array_equal(g, w)


VARIANTS = [  # eager-only (no compile): option variants of functions the case table compiles
    ("pad edge", lambda m, x: m.pad(x, ((1, 2), (2, 1)), mode="edge")),
    ("pad symmetric", lambda m, x: m.pad(x, ((1, 2), (2, 1)), mode="symmetric")),
    ("pad wrap", lambda m, x: m.pad(x, ((1, 2), (0, 3)), mode="wrap")),
    ("pad constant", lambda m, x: m.pad(x, 1)),
    ("cumsum axis None", lambda m, x: (m.cumsum(x), m.cumprod(x, axis=0))),
    ("percentile keepdims", lambda m, x: m.percentile(x, [20.0, 75.0], axis=0, keepdims=True)),
    ("median all", lambda m, x: (m.median(x), m.quantile(x, 0.3))),
    ("splits", lambda m, x: (*m.hsplit(x, 2), *m.vsplit(x, [1]), *m.array_split(x[0], 5))),
    ("allclose array_equal", lambda m, x: (m.allclose(x, x * 2), m.array_equal(x, x),
                                           m.array_equal(x, x[:1]))),
    ("cov options", lambda m, x: (m.cov(x), m.cov(x, rowvar=False, bias=True), m.cov(x, ddof=0))),
    ("nan family", lambda m, x: (m.nansum(x, axis=1), m.nanmean(x), m.nanmin(x), m.nanvar(x),
                                 m.nanprod(x, axis=0), m.nancumsum(x, axis=1),
                                 m.nanargmin(x, axis=1))),
    ("rounding variants", lambda m, x: (m.round(x), m.around(x, 1), m.ceil(x.astype(np.int32)),
                                        m.trunc(x.astype(np.int64)))),
    ("roll variants", lambda m, x: (m.roll(x, -5), m.roll(x[:, :0], 1, axis=1))),
    ("gradient all axes", lambda m, x: m.gradient(x)),
    ("einsum variants", lambda m, x: (m.einsum("ii", x[:2, :2]), m.einsum("ij->", x),
                                      m.einsum("ba", x), m.einsum("i,i,i->", x[0], x[1], x[2]))),
    ("0-d and size-0 unary", lambda m, x: (m.cosh(x[0, 0]), m.exp2(x[:0]), m.log10(m.abs(x[:0])),
                                           m.arctan(x[0, 0]))),
]


@pytest.mark.parametrize("name", [v[0] for v in VARIANTS])
def test_option_variants_match_numpy_eagerly(name):
    f = dict(VARIANTS)[name]
    x = np.array([[0.5, -1.25, 2.0, np.nan], [3.0, 0.25, -0.75, 1.5], [1.0, 2.5, -2.0, 0.0]])
    if "nan" not in name:
        x = np.nan_to_num(x, nan=0.35)
    got, want = f(jnp, x), f(np, x)
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-14)
        assert np.asarray(g).shape == np.asarray(w).shape
