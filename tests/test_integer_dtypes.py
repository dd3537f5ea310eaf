"""The integer dtypes of the Array API standard (int8 to int64, uint8 to uint64): promotion
as the standard's table says (and, where it is silent, uint64 with a signed integer, as NumPy
2: float64), Python scalars weak, ``dtype=`` honoured, and compiled arithmetic that wraps at
the limits exactly as NumPy's (the shared case table, ``tests/cases.py``, runs each op on
fixed values at the limits; hypothesis here draws more).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jitgraph
import jitgraph.numpy as jnp

_CODES = {"i1": np.int8, "i2": np.int16, "i4": np.int32, "i8": np.int64,
          "u1": np.uint8, "u2": np.uint16, "u4": np.uint32, "u8": np.uint64, "f8": np.float64}
# The standard's promotion table for integers (2024.12, "Type Promotion Rules"), row + column;
# "f8" marks the pairs the standard leaves undefined, where jitgraph gives NumPy 2's float64.
_TABLE = """
    i1 i2 i4 i8 u1 u2 u4 u8
i1  i1 i2 i4 i8 i2 i4 i8 f8
i2  i2 i2 i4 i8 i2 i4 i8 f8
i4  i4 i4 i4 i8 i4 i4 i8 f8
i8  i8 i8 i8 i8 i8 i8 i8 f8
u1  i2 i2 i4 i8 u1 u2 u4 u8
u2  i4 i4 i4 i8 u2 u2 u4 u8
u4  i8 i8 i8 i8 u4 u4 u4 u8
u8  f8 f8 f8 f8 u8 u8 u8 u8
"""


def _table() -> list[tuple[np.dtype, np.dtype, np.dtype]]:
    head, *rows = _TABLE.split("\n")[1:-1]
    cols = head.split()
    return [(np.dtype(_CODES[r.split()[0]]), np.dtype(_CODES[c]), np.dtype(_CODES[v]))
            for r in rows for c, v in zip(cols, r.split()[1:])]


INTEGERS = [np.dtype(_CODES[c]) for c in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8")]


@pytest.mark.parametrize("a,b,want", _table(), ids=lambda d: str(d))
def test_promotion_is_the_standards_table(a, b, want):
    x, y = np.ones(2, a), np.full(2, 2, b)
    assert jnp.result_type(a, b) == want
    assert (jnp.asarray(x) + y).dtype == want                     # eager
    graph = jitgraph.make_graph(lambda x, y: jnp.add(x, y))(x, y)
    assert graph.outputs[0].aval.dtype == want                    # traced


def test_python_scalars_are_weak_and_must_fit():
    u8 = jnp.asarray([250, 5], dtype=jnp.uint8)
    assert (u8 + 1).dtype == np.uint8 and (u8 * True).dtype == np.uint8
    assert (u8 + 1.5).dtype == np.float64 and (np.ones(2, bool) + u8).dtype == np.uint8
    np.testing.assert_array_equal(u8 + 10, np.array([4, 15], np.uint8))     # wraps
    with pytest.raises(OverflowError, match="300"):
        u8 + 300                    # as NumPy 2 and JAX: the scalar does not fit the array's dtype
    with pytest.raises(OverflowError):
        jitgraph.jit(lambda x: x - (-1))(np.ones(2, np.uint64))


def test_dtype_queries():
    assert jnp.iinfo(jnp.uint64).max == 2 ** 64 - 1 and jnp.iinfo(jnp.int8).min == -128
    assert jnp.isdtype(jnp.uint16, "unsigned integer") and jnp.isdtype(jnp.int16, "integral")
    assert not jnp.isdtype(jnp.uint32, "signed integer")
    assert jnp.can_cast(jnp.uint8, jnp.int16) and not jnp.can_cast(jnp.int8, jnp.uint8)
    assert not jnp.can_cast(jnp.uint64, jnp.int64)
    assert jnp.uint32(7).dtype == np.uint32


@pytest.mark.parametrize("dt", INTEGERS, ids=str)
def test_reductions_accumulate_in_the_standards_default(dt):
    want = np.uint64 if dt.kind == "u" else np.int64
    x = np.full((3, 4), np.iinfo(dt).max, dt)
    for f in (jnp.sum, jnp.prod, jnp.cumsum, jitgraph.jit(jnp.sum)):
        got = f(x)
        assert got.dtype == want
        np.testing.assert_array_equal(got, getattr(np, f.__name__)(x))
    assert jnp.sum(x, dtype=dt).dtype == dt                      # dtype= is honoured
    assert jnp.max(x).dtype == dt


def test_conversions_of_uint64_above_2_to_the_63():
    x = np.array([0, 1, 2 ** 63, 2 ** 63 + 2 ** 11, 2 ** 64 - 2 ** 11], np.uint64)
    f = jitgraph.jit(lambda x: (x.astype(jnp.float64), x.astype(jnp.float64).astype(jnp.uint64),
                                x.astype(jnp.float32), x > 2 ** 63))
    got = f(x)
    np.testing.assert_array_equal(got[0], x.astype(np.float64))
    np.testing.assert_array_equal(got[1], x)                     # exact: multiples of 2**11
    np.testing.assert_array_equal(got[2], x.astype(np.float32))
    np.testing.assert_array_equal(got[3], x > 2 ** 63)


def test_bitwise_functions_refuse_floats_and_have_no_gradient():
    x = np.array([1.5, 2.5])
    with pytest.raises(TypeError, match="bitwise_and: needs integer or bool"):
        jnp.bitwise_and(x, x)
    with pytest.raises(TypeError, match="bitwise_left_shift: needs integer"):
        jnp.bitwise_left_shift(x, 1)
    with pytest.raises(TypeError, match="bitwise_xor"):
        jitgraph.jit(lambda x: x ^ 1)(x)
    # an integer path through them carries no derivative; the float path around it does
    g = jitgraph.grad(lambda x: jnp.sum((x.astype(jnp.uint8) & 3).astype(jnp.float64) * x))(x)
    np.testing.assert_array_equal(g, [1.0, 2.0])
    u = np.array([0, 5, 255], np.uint8)
    for f in (jnp.bitwise_not, jnp.invert, jnp.bitwise_invert):   # NumPy's names too
        np.testing.assert_array_equal(f(u), ~u)
    np.testing.assert_array_equal(jitgraph.vmap(lambda a: a << 2)(np.arange(6, dtype=np.uint16)
                                                                  .reshape(2, 3)),
                                  np.arange(6, dtype=np.uint16).reshape(2, 3) << 2)


# ------------------------------------------------------------------ hypothesis: wraparound
def _wrapping(m, x, y, n):
    """Arithmetic that wraps at the limits, on values drawn there: every op NumPy defines
    for every integer dtype (floor division and remainder by a non-zero divisor)."""
    d = m.where(y == 0, m.ones_like(y), y)
    return (x + y, x - y, x * y, -x, m.abs(x), x // d, x % d, x & y, x | y, x ^ y, ~x,
            x << n, x >> n, m.maximum(x, y), x < y, (x + 1) * 3, m.sum(x))


_COMPILED = jitgraph.jit(lambda x, y, n: _wrapping(jnp, x, y, n))
SIZE = 6


def _near_limits(dt: np.dtype):
    i = np.iinfo(dt)
    edges = st.sampled_from(sorted({i.min, i.min + 1, i.max - 1, i.max, 0, 1, 2}))
    mid = st.integers(int(i.min), int(i.max))
    return st.lists(st.one_of(edges, mid), min_size=SIZE, max_size=SIZE).map(
        lambda v: np.array(v, dt))


@pytest.mark.parametrize("dt", INTEGERS, ids=str)
@settings(max_examples=15, derandomize=True, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_compiled_integer_arithmetic_wraps_as_numpy(dt, data):
    x, y = data.draw(_near_limits(dt)), data.draw(_near_limits(dt))
    bits = np.iinfo(dt).bits
    n = np.array(data.draw(st.lists(st.integers(0, bits + 2), min_size=SIZE,
                                    max_size=SIZE)), dt)
    with np.errstate(all="ignore"):
        want = _wrapping(np, x, y, n)
    got = _COMPILED(x, y, n)
    for k, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g)
        assert g.dtype == w.dtype, (k, g.dtype, w.dtype)
        np.testing.assert_array_equal(g, w, err_msg=f"output {k} of {dt}: x={x} y={y} n={n}")


def test_lax_bitwise_operations_as_jax():
    from jitgraph import lax
    x = np.array([-8, 5, 127, -1, 3], np.int8)
    n = np.array([1, 2, 8, 3, -1], np.int8)
    u = x.view(np.uint8)
    np.testing.assert_array_equal(lax.shift_right_logical(x, n), [124, 1, 0, 31, 0])
    np.testing.assert_array_equal(jitgraph.jit(lax.shift_right_logical)(x, n), [124, 1, 0, 31, 0])
    np.testing.assert_array_equal(lax.shift_right_arithmetic(x, n), [-4, 1, 0, -1, 0])
    np.testing.assert_array_equal(lax.shift_left(x, n), [-16, 20, 0, -8, 0])
    np.testing.assert_array_equal(lax.and_(u, np.uint8(12)), u & 12)
    np.testing.assert_array_equal(lax.not_(x), ~x)
    np.testing.assert_array_equal(lax.xor(np.array([True, False]), np.array([True, True])),
                                  [False, True])
    with pytest.raises(TypeError, match="same dtypes"):
        lax.or_(x, n.astype(np.int16))


def test_randint_refuses_the_dtypes_whose_jax_numbers_it_does_not_reproduce():
    import jitgraph.random as jr
    k = jr.PRNGKey(0)
    with pytest.raises(TypeError, match="randint: dtype int8 is not supported.*astype"):
        jr.randint(k, (3,), 0, 5, dtype=jnp.int8)
    assert jr.randint(k, (3,), 0, 5, dtype=jnp.int32).dtype == np.int32


@pytest.mark.parametrize("dt", [np.int8, np.int16, np.uint8, np.uint16], ids=str)
def test_float_to_narrow_integer_conversions_are_numpys(dt):
    """In range, the truncated value; out of the narrow type's range (which the standard
    leaves undefined) the low bits of the int32 NumPy's cast goes through, not whatever a
    direct conversion happens to give."""
    v = np.array([-1.0, -129.5, 300.7, 70000.2, -3e9, 2.5, 65504.0, -0.0])
    f = jitgraph.jit(lambda x: x.astype(dt))
    for src in (np.float64, np.float32, np.float16):
        x = v.astype(src)
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(f(x), x.astype(dt), err_msg=str(src))
