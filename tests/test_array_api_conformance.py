"""What the Array API standard's conformance suite (``data-apis/array-api-tests``) found wrong
in ``jitgraph.numpy``, kept as tests of this project so the fixes hold without the suite: dtype
equality with non-dtypes, the standard's parameter names (``clip``, ``reshape``),
``count_nonzero``, ``arange(n, step=)``, ``tensordot`` over empty axes, ``vecdot``'s dtype,
the ``bitwise_*`` signatures, descending ``argsort`` of integers, complex ``expm1`` on the real
axis; eager and under jit, against NumPy. How to run the suite itself: docs/guides/semantics.md."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import jitgraph
import jitgraph.numpy as jnp

RNG = np.random.default_rng(0)


def test_dtype_equality_with_other_things_is_false():
    # the suite keeps dtypes in a mapping beside strings and dicts: == must answer False, as
    # NumPy's dtype does, where it used to raise ValueError
    for other in ("abc", "float32 please", {}, {"a": 1}, object(), 3.5):
        assert (jnp.float32 == other) is False
        assert (jnp.float32 != other) is True
    assert jnp.float32 == "float32" and jnp.float32 == np.float32 and jnp.int64 == np.int64
    assert jnp.float32 != jnp.float64
    assert {jnp.float32: "f4", "x": 1}[np.dtype("float32")] == "f4"


def _positional_names(f) -> list:
    return [p.name for p in inspect.signature(f).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def test_parameter_names_are_the_standards():
    assert _positional_names(jnp.clip)[:3] == ["x", "min", "max"]
    assert _positional_names(jnp.reshape)[:2] == ["x", "shape"]
    assert "copy" in inspect.signature(jnp.reshape).parameters
    for kw in ("axis", "keepdims"):
        assert kw in inspect.signature(jnp.count_nonzero).parameters


def test_clip_by_the_standards_names():
    x = np.linspace(-2.0, 2.0, 9)
    want = np.clip(x, -1.0, 0.5)
    for got in (jnp.clip(x, -1.0, 0.5), jnp.clip(x, min=-1.0, max=0.5),
                jnp.clip(x, a_min=-1.0, a_max=0.5), jnp.clip(x, -1.0, a_max=0.5)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(jnp.clip(x, max=0.0), np.minimum(x, 0.0))
    np.testing.assert_array_equal(jitgraph.jit(lambda v: jnp.clip(v, min=0.0))(x),
                                  np.maximum(x, 0.0))


def test_reshape_by_the_standards_names():
    x = np.arange(12.0)
    for got in (jnp.reshape(x, (3, 4)), jnp.reshape(x, shape=(3, 4)), jnp.reshape(x, 3, 4),
                jnp.reshape(x, newshape=(3, 4)), jnp.reshape(x, (3, 4), copy=True),
                jnp.reshape(x, (-1, 4), copy=False)):
        np.testing.assert_array_equal(got, x.reshape(3, 4))
    np.testing.assert_array_equal(jitgraph.jit(lambda v: jnp.reshape(v, shape=(4, 3)))(x),
                                  x.reshape(4, 3))


@pytest.mark.parametrize("axis,keepdims", [(None, False), (0, False), (1, True), ((0, 2), False),
                                           (-1, True)])
def test_count_nonzero_matches_numpy(axis, keepdims):
    x = RNG.integers(-1, 2, size=(3, 4, 5)).astype(np.float64)
    x[0, 0, 0] = np.nan                       # NaN is not zero: it counts
    x[1, 1, 1] = -0.0                         # -0.0 is zero
    want = np.count_nonzero(x, axis=axis, keepdims=keepdims)
    got = jnp.count_nonzero(x, axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(got, want)
    assert np.asarray(got).dtype == np.int64  # the default integer dtype
    jitted = jitgraph.jit(lambda v: jnp.count_nonzero(v, axis=axis, keepdims=keepdims))(x)
    np.testing.assert_array_equal(jitted, want)
    b = x > 0
    np.testing.assert_array_equal(jnp.count_nonzero(b, axis=axis, keepdims=keepdims),
                                  np.count_nonzero(b, axis=axis, keepdims=keepdims))


def test_count_nonzero_in_32_bit_mode_counts_in_int32():
    with jitgraph.config.default_int("int32"):
        assert np.asarray(jnp.count_nonzero(np.ones(5))).dtype == np.int32


@pytest.mark.parametrize("args,kwargs", [((10,), {"step": 3}), ((-2037,), {"step": -5}),
                                         ((7,), {"step": 2.5}), ((2, 9, 2), {}),
                                         ((5,), {})])
def test_arange_with_only_a_stop_keeps_the_step(args, kwargs):
    want = np.arange(*args, **kwargs)
    got = jnp.arange(*args, **kwargs)
    np.testing.assert_array_equal(got, want)
    assert np.asarray(got).dtype == want.dtype     # a float step makes a float range


def test_arange_stop_none_is_a_stop():
    np.testing.assert_array_equal(jnp.arange(6, None, 2), np.arange(0, 6, 2))
    assert np.asarray(jnp.arange(-3, None, step=5.0)).dtype == np.float64
    assert jnp.arange(-3, None, step=5.0).shape == (0,)


@pytest.mark.parametrize("sa,sb,axes", [((0, 3), (3, 0), 1), ((2, 0), (0, 4), 1),
                                        ((2, 0, 3), (0, 3, 5), 2), ((0,), (0,), 1),
                                        ((2, 3), (3, 4), 1), ((3, 0), (2,), 0)])
def test_tensordot_with_empty_axes(sa, sb, axes):
    a, b = RNG.standard_normal(sa), RNG.standard_normal(sb)
    want = np.tensordot(a, b, axes=axes)
    for got in (jnp.tensordot(a, b, axes=axes), jnp.linalg.tensordot(a, b, axes=axes),
                jitgraph.jit(lambda u, v: jnp.tensordot(u, v, axes=axes))(a, b)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_vecdot_keeps_the_operands_dtype():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.arange(3, dtype=np.int32) - 1
    for f in (jnp.vecdot, jnp.linalg.vecdot):
        got = f(a, b)
        assert np.asarray(got).dtype == np.int32
        np.testing.assert_array_equal(got, np.sum(a * b, axis=-1))
    assert np.asarray(jnp.vecdot(np.ones(0, np.int32), np.ones(0, np.int32))).dtype == np.int32
    got = jnp.vecdot(a.astype(np.float32), b.astype(np.float32), axis=1)
    assert np.asarray(got).dtype == np.float32
    np.testing.assert_allclose(got, np.sum(a * b, axis=1), rtol=1e-6)


def test_array_namespace_is_jitgraph_numpy_eager_and_traced():
    x = jnp.ones((2, 3))
    assert x.__array_namespace__() is jnp
    assert x.__array_namespace__(api_version="2024.12") is jnp
    with pytest.raises(ValueError, match="api_version='2099.12'"):
        x.__array_namespace__(api_version="2099.12")

    def f(a):
        assert a.__array_namespace__() is jnp       # a traced value's namespace too
        xp = a.__array_namespace__()
        return xp.sum(a.to_device("cpu") * 2.0, axis=0)

    np.testing.assert_array_equal(jitgraph.jit(f)(x), [4.0, 4.0, 4.0])
    np.testing.assert_array_equal(jitgraph.grad(lambda a: f(a).sum())(x), np.full((2, 3), 2.0))
    with pytest.raises(ValueError, match="device='cuda'"):
        jitgraph.jit(lambda a: a.to_device("cuda"))(x)


@pytest.mark.parametrize("shape", [(5, 3), (2, 4, 2), (3, 3), (2, 3)])
def test_qr_complete(shape):
    a = RNG.standard_normal(shape)
    m, n = shape[-2:]
    for q, r in (jnp.linalg.qr(a, mode="complete"),
                 jitgraph.jit(lambda x: tuple(jnp.linalg.qr(x, mode="complete")))(a)):
        assert q.shape == shape[:-2] + (m, m) and r.shape == shape[:-2] + (m, n)
        np.testing.assert_allclose(q @ r, a, atol=1e-12)
        np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(m), q.shape),
                                   atol=1e-12)
        np.testing.assert_array_equal(r, np.triu(r))
        qn, rn = np.linalg.qr(a, mode="complete")       # the same up to the signs of the rows
        k = min(m, n)
        np.testing.assert_allclose(np.abs(r), np.abs(rn), atol=1e-12)
        np.testing.assert_allclose(np.abs(q[..., :k]), np.abs(qn[..., :k]), atol=1e-12)
    with pytest.raises(ValueError, match="'economic'"):
        jnp.linalg.qr(a, mode="economic")


def test_solve_promotes_its_operands():
    a = (np.eye(3) * 2 + 0.25).astype(np.float32)
    b = np.arange(3.0)
    got = jnp.linalg.solve(a, b)
    assert np.asarray(got).dtype == np.float64                 # float32 with float64
    np.testing.assert_allclose(got, np.linalg.solve(a.astype(np.float64), b), rtol=1e-12)
    assert np.asarray(jnp.linalg.solve(a, b.astype(np.float32))).dtype == np.float32
    assert np.asarray(jnp.linalg.solve(np.eye(2, dtype=np.int64), [1, 2])).dtype == np.float64


def test_take_along_axis_defaults_to_the_last_axis():
    x = RNG.standard_normal((3, 4))
    idx = np.argsort(x, axis=-1)
    np.testing.assert_array_equal(jnp.take_along_axis(x, idx), np.sort(x, axis=-1))
    np.testing.assert_array_equal(jitgraph.jit(lambda v, i: jnp.take_along_axis(v, i))(x, idx),
                                  np.sort(x, axis=-1))
    np.testing.assert_array_equal(jnp.take_along_axis(x, np.argsort(x, 0), 0), np.sort(x, 0))


@pytest.mark.parametrize("sa,sb", [((1, 4, 1, 6, 6), (2, 6, 2)), ((3, 1, 2, 2), (5, 2, 1)),
                                   ((2, 3, 3), (3, 1)), ((3, 3), (4, 3, 2))])
def test_solve_broadcasts_the_stacks(sa, sb):
    a = RNG.standard_normal(sa) + 4 * np.eye(sa[-1])
    b = RNG.standard_normal(sb)
    want = np.linalg.solve(a, b)
    for got in (jnp.linalg.solve(a, b), jitgraph.jit(jnp.linalg.solve)(a, b)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    g = jitgraph.grad(lambda u, v: jnp.linalg.solve(u, v).sum(), argnums=(0, 1))(a, b)
    assert g[0].shape == sa and g[1].shape == sb
    eps = 1e-6                     # central differences at the first entry of each operand
    for k, x in enumerate((a, b)):
        hi, lo = x.copy(), x.copy()
        hi.flat[0] += eps
        lo.flat[0] -= eps
        args_hi, args_lo = [a, b], [a, b]
        args_hi[k], args_lo[k] = hi, lo
        fd = (np.linalg.solve(*args_hi).sum() - np.linalg.solve(*args_lo).sum()) / (2 * eps)
        np.testing.assert_allclose(g[k].flat[0], fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("call", [lambda: jnp.expand_dims(np.float64(1.0), -2),
                                  lambda: jnp.expand_dims(np.ones(3), 2),
                                  lambda: jnp.sum(np.ones(3), axis=2),
                                  lambda: jnp.argmax(np.ones((2, 3)), axis=-3),
                                  lambda: jnp.take_along_axis(np.ones(3), np.zeros(3, int), 1)])
def test_an_axis_out_of_bounds_is_an_index_error(call):
    # the standard asks for IndexError; it stays a ShapeError (a ValueError), as NumPy's
    # AxisError is both
    from jitgraph.errors import AxisError, ShapeError
    with pytest.raises(IndexError, match="out of bounds") as info:
        call()
    assert isinstance(info.value, AxisError) and isinstance(info.value, ShapeError)
    with pytest.raises(IndexError, match="out of bounds"):
        jitgraph.jit(lambda v: jnp.expand_dims(v, 3))(np.ones((2, 2)))


def test_bitwise_signatures_are_the_standards():
    # the suite reads the signature: binary bitwise_* take (x1, x2, /), bitwise_invert (x, /)
    for name in ("and", "or", "xor", "left_shift", "right_shift"):
        f = getattr(jnp, f"bitwise_{name}")
        assert _positional_names(f) == ["x1", "x2"] and f.__name__ == f"bitwise_{name}"
    assert _positional_names(jnp.bitwise_invert) == ["x"]
    a, b = np.array([6, -3, 12], np.int16), np.array([5, 1, 2], np.int16)
    for name, ref in (("and", np.bitwise_and), ("left_shift", np.left_shift)):
        got = getattr(jnp, f"bitwise_{name}")(jnp.asarray(a), jnp.asarray(b))
        np.testing.assert_array_equal(np.asarray(got), ref(a, b))


@pytest.mark.parametrize("values", [np.array([206, 0, 5, 206, 255, 0], np.uint8),
                                    np.array([-128, 127, 0, -128, 5, 127], np.int8),
                                    np.array([True, False, True, False])])
def test_descending_argsort_of_integers_is_stable(values):
    # descending used to sort -x, which wraps 0 of unsigned dtypes and INT_MIN to themselves
    want = np.argsort(~values, kind="stable")     # ~ reverses the order of ints and bools
    x = jnp.asarray(values)
    np.testing.assert_array_equal(np.asarray(jnp.argsort(x, descending=True)), want)
    np.testing.assert_array_equal(
        np.asarray(jitgraph.jit(lambda v: jnp.argsort(v, descending=True))(x)), want)
    np.testing.assert_array_equal(np.asarray(jnp.sort(x, descending=True)), values[want])


def test_complex_expm1_on_the_real_axis_keeps_its_zero():
    # the standard: expm1(+inf + 0j) = +inf + 0j, expm1(NaN + 0j) = NaN + 0j (NumPy: NaN imag)
    z = np.array([complex(np.inf, 0.0), complex(np.nan, 0.0), complex(1.0, -0.0), 0j,
                  complex(-np.inf, 0.0), 0.5 + 0.25j], np.complex128)
    want_re = np.array([np.inf, np.nan, np.expm1(1.0), 0.0, -1.0, np.expm1(z[5]).real])
    want_im = np.array([0.0, 0.0, -0.0, 0.0, 0.0, np.expm1(z[5]).imag])
    for got in (jnp.expm1(jnp.asarray(z)), jitgraph.jit(jnp.expm1)(jnp.asarray(z))):
        got = np.asarray(got)
        np.testing.assert_allclose(got.real, want_re, rtol=1e-15)
        np.testing.assert_array_equal(got.imag, want_im)
        np.testing.assert_array_equal(np.signbit(got.imag), np.signbit(want_im))
    # off the axis and for reals, the primitive's own values and derivative
    t = jnp.asarray([0.5, 1.0])
    g = jitgraph.grad(lambda t: jnp.real(jnp.expm1(t + 0.3j)).sum())(t)
    want = np.real(np.exp(np.array([0.5, 1.0]) + 0.3j))
    np.testing.assert_allclose(np.asarray(g), want, rtol=1e-13)
