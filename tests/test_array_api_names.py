"""The Array API standard's names and keywords that NumPy spells differently: dtype queries,
``concat``/``permute_dims``/``matrix_transpose``/``pow``/``positive``/``unstack``/``vecdot``,
and ``correction=``, ``clip(min=, max=)``, ``reshape(shape=)``, ``astype(copy=)``,
``asarray(copy=, device=)``; eager, under jit and differentiated, against NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp

X = np.arange(24.0).reshape(2, 3, 4) / 7


def test_dtype_queries():
    assert jnp.finfo(jnp.float32).eps == np.finfo(np.float32).eps
    assert jnp.finfo(np.ones(2, np.float32)).bits == 32          # an array: its dtype's
    assert jnp.iinfo(jnp.int32).max == 2 ** 31 - 1 and jnp.iinfo("int64").min == -2 ** 63
    assert jnp.isdtype(jnp.float64, "real floating") and not jnp.isdtype(jnp.int32, "real floating")
    assert jnp.isdtype(jnp.int32, ("bool", "integral")) and jnp.isdtype(jnp.bool_, "bool")
    assert jnp.isdtype(np.float32, np.float32)
    with pytest.raises(ValueError, match="unknown kind"):
        jnp.isdtype(jnp.float32, "floaty")
    assert jnp.result_type(np.ones(2, np.float32), 2.0) == np.float32     # weak scalar
    assert jnp.result_type(jnp.int32, jnp.float32) == np.float64
    assert jnp.result_type(np.ones(2, np.int32), 1) == np.int32
    assert jnp.can_cast(jnp.int32, jnp.float64) and not jnp.can_cast(jnp.float64, jnp.int32)
    assert jnp.__array_api_version__ == "2024.12"


@pytest.mark.parametrize("name, fn, ref", [
    ("concat", lambda m, x: m.concat([x, 2 * x], axis=1), lambda x: np.concatenate([x, 2 * x], 1)),
    ("concat None", lambda m, x: m.concat([x, x], axis=None), lambda x: np.concatenate([x.ravel()] * 2)),
    ("permute_dims", lambda m, x: m.permute_dims(x, (2, 0, 1)), lambda x: x.transpose(2, 0, 1)),
    ("matrix_transpose", lambda m, x: m.matrix_transpose(x), lambda x: np.swapaxes(x, -1, -2)),
    ("pow", lambda m, x: m.pow(x, 3), lambda x: x ** 3),
    ("positive", lambda m, x: m.positive(x) * 1.0, lambda x: +x),
    ("unstack", lambda m, x: m.stack(m.unstack(x, axis=1), axis=0), lambda x: np.moveaxis(x, 1, 0)),
    ("vecdot", lambda m, x: m.vecdot(x, x + 1), lambda x: np.sum(x * (x + 1), -1)),
    ("std correction", lambda m, x: m.std(x, axis=1, correction=1), lambda x: np.std(x, 1, ddof=1)),
    ("var correction", lambda m, x: m.var(x, correction=2), lambda x: np.var(x, ddof=2)),
    ("clip min max", lambda m, x: m.clip(x, min=0.5, max=2.0), lambda x: np.clip(x, 0.5, 2.0)),
    ("reshape shape", lambda m, x: m.reshape(x, shape=(4, 6)), lambda x: x.reshape(4, 6)),
])
def test_names_eager_and_jit(name, fn, ref):
    want = ref(X)
    np.testing.assert_allclose(fn(jnp, X), want, rtol=1e-12)
    np.testing.assert_allclose(jitgraph.jit(lambda x: fn(jnp, x))(X), want, rtol=1e-12)


def test_gradients_through_the_new_names():
    def f(x):
        return (jnp.sum(jnp.vecdot(jnp.matrix_transpose(x), jnp.pow(x, 2).transpose(0, 2, 1)))
                + jnp.sum(jnp.std(x, axis=-1, correction=1)) + jnp.sum(jnp.unstack(x)[1]))
    jitgraph.check_grads(f, (X,), order=1)


def test_keyword_conflicts_are_errors():
    with pytest.raises(ValueError, match="ddof or correction"):
        jnp.std(X, ddof=1, correction=1)
    with pytest.raises(TypeError, match="min or a_min"):
        jnp.clip(X, min=0.0, a_min=1.0)
    with pytest.raises(TypeError, match="multiple values for argument 'min'"):
        jnp.clip(X, 0.0, min=1.0)
    with pytest.raises(TypeError, match="once"):
        jnp.reshape(X, (4, 6), newshape=(4, 6))


def test_astype_copy():
    a = np.ones(3)
    assert not np.shares_memory(jnp.astype(a, np.float64), a)
    assert np.shares_memory(jnp.astype(a, np.float64, copy=False), a)
    assert jnp.astype(a, jnp.float32, copy=False).dtype == np.float32


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int8, jnp.uint8])
def test_a_requested_dtype_is_honoured_or_refused_never_changed(dtype):
    for make in (lambda: jnp.zeros(3, dtype=dtype), lambda: jnp.asarray([1, 2], dtype=dtype),
                 lambda: jnp.astype(np.ones(2), dtype), lambda: jnp.arange(3, dtype=dtype)):
        with pytest.raises(TypeError, match="is not supported .* would have been changed"):
            make()
    # float16 is honoured (stored in 16 bits, computed in float32: test_narrow_floats.py)
    for make in (lambda: jnp.zeros(3, dtype=np.float16),
                 lambda: jnp.arange(3, dtype=np.float16),
                 lambda: jnp.asarray([1, 2], dtype=np.float16),
                 lambda: jnp.astype(np.ones(2), np.float16)):
        assert make().dtype == np.float16
    # arrays of those dtypes passed in are still converted (an image of uint8 pixels)
    assert jnp.asarray(np.ones(3, np.uint8)).dtype == np.int32
    assert jnp.zeros(2, dtype=jnp.int32).dtype == np.int32


_A = np.array([1.0, -1.0, np.inf, 1.0, 7.0, -7.0, 7.0, -7.5, 0.0, -0.0, np.nan, 5.0, -5.0])
_B = np.array([np.inf, np.inf, 2.0, -0.0, 2.0, 2.0, -2.0, 2.0, 3.0, 3.0, 1.0, 0.0, 0.0])


def _same_bits(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok], want[ok])
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))   # -0.0 too


@pytest.mark.parametrize("compiled", [False, True])
def test_special_values_as_numpy(compiled):
    """floor_divide with infinities and signed zeros (NumPy's npy_divmod), signbit of a
    negative NaN, rounding that keeps -0.0, fmod's sign: bit for bit, eager and compiled."""
    run = jitgraph.jit if compiled else (lambda f: f)
    with np.errstate(all="ignore"):
        _same_bits(run(jnp.floor_divide)(_A, _B), np.floor_divide(_A, _B))
        _same_bits(run(jnp.fmod)(_A, np.where(_B == 0, 3.0, _B)),
                   np.fmod(_A, np.where(_B == 0, 3.0, _B)))
    s = np.array([-np.nan, -0.0, 0.0, np.nan, -1.0, -np.inf])
    np.testing.assert_array_equal(run(jnp.signbit)(s), np.signbit(s))
    r = np.array([-0.0, -0.4, -0.5, 0.5, 1.5, 2.5, -2.5, -3.7, np.inf, -np.inf])
    _same_bits(run(jnp.round)(r), np.round(r))
    _same_bits(run(lambda v: jnp.copysign(2.0, v))(s), np.copysign(2.0, s))


def test_data_dependent_functions_eagerly_and_a_clear_error_traced():
    x = np.array([[3, 1, 3], [2, 1, 1]])
    np.testing.assert_array_equal(jnp.unique_values(x), [1, 2, 3])
    v, c = jnp.unique_counts(x)
    np.testing.assert_array_equal(c, [3, 1, 2])
    r = jnp.unique_inverse(x)
    np.testing.assert_array_equal(r.values[r.inverse_indices], x)   # the shape of x
    a = jnp.unique_all(x)
    np.testing.assert_array_equal(a.values[a.inverse_indices], x)
    np.testing.assert_array_equal(x.ravel()[a.indices], a.values)
    for got, want in zip(jnp.nonzero(x > 1), np.nonzero(x > 1)):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(jitgraph.ConcretizationError, match="nonzero: the result's shape"):
        jitgraph.jit(jnp.nonzero)(x)


def test_linalg_extension_names():
    a = np.arange(2 * 3 * 3, dtype=np.float64).reshape(2, 3, 3)
    L = jnp.linalg
    np.testing.assert_array_equal(L.trace(a), np.trace(a, axis1=-2, axis2=-1))
    np.testing.assert_array_equal(L.diagonal(a, offset=1), np.diagonal(a, 1, -2, -1))
    np.testing.assert_array_equal(L.matrix_transpose(a), np.swapaxes(a, -1, -2))
    np.testing.assert_array_equal(L.vecdot(a, a), np.sum(a * a, -1))
    np.testing.assert_array_equal(L.outer(np.arange(2.0), np.arange(3.0)), np.outer(np.arange(2.0), np.arange(3.0)))
    np.testing.assert_array_equal(L.cross(a, a[::-1]), np.cross(a, a[::-1]))
    np.testing.assert_array_equal(L.tensordot(a, a, axes=([1, 2], [1, 2])),
                                  np.tensordot(a, a, axes=([1, 2], [1, 2])))
    with pytest.raises(ValueError, match="1-dimensional"):
        L.outer(a, a)
    g = jitgraph.jit(jitgraph.grad(lambda m: L.trace(m).sum() + L.vecdot(m, m).sum()))(a)
    np.testing.assert_allclose(g, np.eye(3)[None].repeat(2, 0) + 2 * a)


def test_namespace_info():
    info = jnp.__array_namespace_info__()
    caps = info.capabilities()
    assert caps == {"boolean indexing": False, "data-dependent shapes": False,
                    "max dimensions": 64}
    dev = info.default_device()
    assert dev.platform == "cpu" and info.devices() == [dev]
    assert jnp.zeros(2, device=dev).device == dev
    assert info.default_dtypes() == {"real floating": np.float64, "complex floating":
                                     np.complex128, "integral": np.int64, "indexing": np.int64}
    with jitgraph.config.default_float("float32"):
        assert info.default_dtypes(device=dev)["real floating"] == np.float32
    # the dtypes listed are those arrays can be made in (the standard's suite makes one of
    # each): at least these five, and no dtype that ``dtype=`` refuses
    listed = info.dtypes()
    assert {"bool", "int32", "int64", "float32", "float64"} <= set(listed)
    for name, d in listed.items():
        assert jnp.zeros(1, dtype=d).dtype == np.dtype(name)
    assert info.dtypes(kind="complex floating") == {"complex64": np.complex64,
                                                    "complex128": np.complex128}
    assert info.dtypes(kind="real floating") == {"float32": np.float32, "float64": np.float64}
    picked = info.dtypes(kind=("bool", "unsigned integer"))
    assert "bool" in picked and all(n == "bool" or n.startswith("uint") for n in picked)
    with pytest.raises(ValueError, match="host arrays"):
        info.dtypes(device="cuda")


@pytest.mark.parametrize("name,args", [("zeros", (3,)), ("ones", ((2, 2),)), ("empty", (2,)),
                                       ("full", (2, 1.5)), ("arange", (4,)), ("eye", (2,)),
                                       ("identity", (2,)), ("linspace", (0.0, 1.0, 5)),
                                       ("zeros_like", (X,)), ("ones_like", (X,)),
                                       ("full_like", (X, 2.0)), ("empty_like", (X,))])
def test_creation_functions_take_device(name, args):
    f = getattr(jnp, name)
    info = jnp.__array_namespace_info__()
    want = f(*args)
    for dev in (None, "cpu", info.default_device()):
        np.testing.assert_array_equal(f(*args, device=dev), want)
    with pytest.raises(ValueError, match=f"jnp.{name}: device='cuda'"):
        f(*args, device="cuda")


def test_prod_dtype_and_cumulative_include_initial():
    i = np.arange(1, 6, dtype=np.int32)
    p = jnp.prod(i, dtype=np.float32)
    assert p.dtype == np.float32 and float(p) == 120.0
    assert jnp.prod(X, axis=1, dtype=np.float32).dtype == np.float32
    np.testing.assert_allclose(jnp.prod(X, 1, np.float32), np.prod(X, 1, np.float32), rtol=1e-6)
    got = jnp.cumulative_sum(X, axis=1, include_initial=True)
    want = np.concatenate([np.zeros((2, 1, 4)), np.cumsum(X, axis=1)], axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-14)
    np.testing.assert_allclose(jitgraph.jit(lambda x: jnp.cumulative_sum(
        x, axis=-1, include_initial=True))(X), np.concatenate(
        [np.zeros((2, 3, 1)), np.cumsum(X, -1)], -1), rtol=1e-14)
    cp = jnp.cumulative_prod(np.array([2, 3, 4]), include_initial=True, dtype=np.float64)
    np.testing.assert_array_equal(cp, [1.0, 2.0, 6.0, 24.0])
    assert cp.dtype == np.float64
    np.testing.assert_array_equal(jnp.cumulative_sum(np.arange(4)), [0, 1, 3, 6])
    with pytest.raises(ValueError, match="axis is required"):
        jnp.cumulative_sum(X)
    g = jitgraph.grad(lambda x: jnp.sum(jnp.cumulative_sum(x, axis=0, include_initial=True)))(
        np.ones(3))
    np.testing.assert_array_equal(g, [3.0, 2.0, 1.0])


def test_matrix_rank_rtol_and_pinv_per_matrix_cutoffs():
    a = np.stack([np.diag([1.0, 0.3, 0.01]), np.diag([1.0, 0.5, 0.2])])
    L = jnp.linalg
    np.testing.assert_array_equal(L.matrix_rank(a), [3, 3])
    np.testing.assert_array_equal(L.matrix_rank(a, rtol=0.1), [2, 3])
    np.testing.assert_array_equal(L.matrix_rank(a, rtol=np.array([0.05, 0.4])), [2, 2])
    np.testing.assert_array_equal(L.matrix_rank(a, tol=0.25), [2, 2])
    np.testing.assert_array_equal(L.matrix_rank(a, tol=np.array([0.005, 0.6])), [3, 1])
    with pytest.raises(ValueError, match="not both"):
        L.matrix_rank(a, tol=0.1, rtol=0.1)
    rtol = np.array([0.05, 0.4])
    p = L.pinv(a, rtol=rtol)                 # one cutoff per matrix (it broadcast across them)
    assert p.shape == (2, 3, 3)
    np.testing.assert_allclose(p, np.stack([np.diag([1.0, 1 / 0.3, 0.0]),
                                            np.diag([1.0, 2.0, 0.0])]), rtol=1e-12, atol=1e-15)
    b = np.random.default_rng(0).normal(size=(4, 3, 5))
    np.testing.assert_allclose(L.pinv(b, rtol=np.full(4, 1e-10)), np.linalg.pinv(b),
                               rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 6, 4), (2, 4, 6), (4, 4)])
def test_svd_full_matrices_for_non_square(shape):
    a = np.random.default_rng(1).normal(size=shape)
    m, n = shape[-2:]
    k = min(m, n)
    for f in (jnp.linalg.svd, jitgraph.jit(jnp.linalg.svd)):
        u, s, vh = f(a)
        assert u.shape == shape[:-2] + (m, m) and vh.shape == shape[:-2] + (n, n)
        np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-12)
        np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a,
                                   atol=1e-12)
        np.testing.assert_allclose(np.swapaxes(u, -1, -2) @ u,
                                   np.broadcast_to(np.eye(m), u.shape), atol=1e-12)
        np.testing.assert_allclose(vh @ np.swapaxes(vh, -1, -2),
                                   np.broadcast_to(np.eye(n), vh.shape), atol=1e-12)
    thin = jnp.linalg.svd(a, full_matrices=False)
    assert thin.U.shape == shape[:-2] + (m, k) and thin.Vh.shape == shape[:-2] + (k, n)


@pytest.mark.parametrize("other", ["abc", "float32 ", {}, {"a": 1}, [], None, 3])
def test_dtype_equality_with_anything_is_a_bool(other):
    """A dtype compared with a string or dict that names no dtype is unequal, as NumPy's,
    not an error (the conformance suite compares dtypes with such values)."""
    for d in (jnp.float32, jnp.int64, jnp.bool_):
        assert (d == other) is False and (d != other) is True
    assert jnp.float32 == "float32" and jnp.float32 == np.float32 and jnp.int64 == "int64"


@pytest.mark.parametrize("dtype,bits", [(np.float64, np.uint64), (np.float32, np.uint32)])
def test_nextafter_bit_for_bit(dtype, bits):
    """Every class of float, toward every class of target: zeros of both signs, subnormals,
    the smallest normal, powers of two (where the spacing halves going down), the largest
    finite, infinities and NaN; eager and under jit, the bits of numpy.nextafter."""
    fi = np.finfo(dtype)
    rng = np.random.default_rng(0)
    special = [0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 0.75, 3.0, fi.tiny, -fi.tiny, 2 * fi.tiny,
               fi.smallest_subnormal, -fi.smallest_subnormal, 3 * fi.smallest_subnormal,
               fi.max, -fi.max, np.inf, -np.inf, np.nan, 1 + fi.eps, 1 - fi.epsneg]
    x = np.concatenate([np.array(special, dtype),
                        (rng.normal(size=200) * np.exp2(rng.integers(-40, 40, 200))).astype(dtype)])
    targets = [np.inf, -np.inf, 0.0, -0.0, np.nan, 1.0, rng.permutation(x)]
    f = jitgraph.jit(jnp.nextafter)
    with np.errstate(over="ignore"):
        for t in targets:
            y = np.broadcast_to(np.asarray(t, dtype), x.shape)
            want = np.nextafter(x, y).view(bits)
            for got in (jnp.nextafter(x, y), f(x, y)):
                assert got.dtype == dtype
                np.testing.assert_array_equal(np.asarray(got).view(bits), want)
    assert jnp.nextafter(1.0, 2.0) == 1.0 + np.finfo(np.float64).eps
    np.testing.assert_array_equal(jitgraph.grad(lambda v: jnp.sum(jnp.nextafter(v, 2.0)))(
        np.ones(3)), np.zeros(3))


def test_from_dlpack_shares_or_copies():
    x = np.arange(6.0).reshape(2, 3)
    y = jnp.from_dlpack(x)
    np.testing.assert_array_equal(y, x)
    assert np.shares_memory(x, y) and y.block_until_ready() is y
    z = jnp.from_dlpack(x, copy=True, device="cpu")
    assert not np.shares_memory(x, z)
    np.testing.assert_array_equal(z, x)
    np.testing.assert_array_equal(jnp.from_dlpack(jnp.arange(3)), [0, 1, 2])   # its own arrays
    with pytest.raises(ValueError, match="host arrays"):
        jnp.from_dlpack(x, device="cuda")
    c = jnp.from_dlpack(np.full(2, 1 - 2j, np.complex64))       # complex dtypes are supported
    assert c.dtype == np.complex64 and c[1] == 1 - 2j
