"""Elementwise math: unary and binary functions, comparisons, logic, where/clip."""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..core import Tracer, aval_of, bind
from ..ops import binders as _binders
from ._base import (_P, _as_bool, _cast, _dtype_weak, _operand, _promote, asarray, astype, float64, inf,
                    _locate_module)


# ------------------------------------------------------------------ elementwise
def _unary(pname: str, float_only: bool = True, doc: str = ""):
    def fn(x):
        (x,) = _promote(x, float_only=float_only)
        return bind(getattr(_P, pname), x)
    fn.__name__ = pname
    fn.__doc__ = doc or f"Elementwise {pname}."
    return fn


negative = _unary("neg", float_only=False)
exp = _unary("exp")
log = _unary("log")
log1p = _unary("log1p")
_expm1 = _unary("expm1")


def expm1(x):
    """Elementwise ``exp(x) - 1``, accurate near 0. On the real axis (imaginary part ±0) a
    complex ``x`` gives ``expm1(real(x))`` with that zero, the standard's special cases, where
    NumPy's complex ``expm1`` gives ``inf+nanj`` for ``inf+0j`` and ``nan+nanj`` for ``nan+0j``."""
    (x,) = _promote(x, float_only=True)
    out = _expm1(x)
    if not dtypes.is_complex(aval_of(x).dtype):
        return out
    on_axis = astype(_expm1(real(x)), aval_of(x).dtype)      # its imaginary part is +0
    im = imag(x)
    return where(equal(im, 0), where(signbit(im), conjugate(on_axis), on_axis), out)
sin = _unary("sin")
cos = _unary("cos")
tan = _unary("tan")
tanh = _unary("tanh")
sqrt = _unary("sqrt")
_floor = _unary("floor")


def floor(x):
    """Elementwise floor; integers and bools are returned unchanged, as NumPy 2."""
    x = _operand(x)
    if not dtypes.is_float(aval_of(x).dtype):
        return x if isinstance(x, Tracer) else asarray(x)
    return _floor(x)


abs = _unary("abs", float_only=False)
absolute = abs
sign = _unary("sign", float_only=False)
stop_gradient = _unary("stop_gradient", float_only=False,
                       doc="""The identity, with a zero derivative, as ``jax.lax.stop_gradient``:
    ``x``'s value, treated as a constant by ``grad``, ``jvp`` and the other derivatives.

    Example:

    ```pycon
    >>> import jitgraph
    >>> jitgraph.grad(lambda x: x * jitgraph.stop_gradient(x))(3.0)
    array(3.)

    ```

    :param x: an array (or a Python number, or a traced value).
    :returns: ``x``'s value.
    """)


def _binary(pname: str, float_only: bool = False, doc: str = ""):
    def fn(x, y):
        x, y = _promote(x, y, float_only=float_only)
        return bind(getattr(_P, pname), x, y)
    fn.__name__ = pname
    fn.__doc__ = doc or f"Elementwise {pname} of ``x`` and ``y``, broadcast together."
    return fn


add = _binary("add", doc="Elementwise ``x + y``, broadcast together.")
subtract = _binary("sub", doc="Elementwise ``x - y``, broadcast together.")
multiply = _binary("mul", doc="Elementwise ``x * y``, broadcast together.")
true_divide = _binary("div", float_only=True, doc="Elementwise ``x / y``, broadcast together; always a float result.")
divide = true_divide
maximum = _binary("max", doc="Elementwise maximum of ``x`` and ``y``; at ties each gets half the gradient.")
minimum = _binary("min", doc="Elementwise minimum of ``x`` and ``y``; at ties each gets half the gradient.")
greater = _binary("gt", doc="Elementwise ``x > y`` (boolean).")
greater_equal = _binary("ge", doc="Elementwise ``x >= y`` (boolean).")
less = _binary("lt", doc="Elementwise ``x < y`` (boolean).")
less_equal = _binary("le", doc="Elementwise ``x <= y`` (boolean).")
equal = _binary("eq", doc="Elementwise ``x == y`` (boolean).")
not_equal = _binary("ne", doc="Elementwise ``x != y`` (boolean).")
mod = _binary("mod", doc="Elementwise ``x % y`` with the sign of ``y``, as ``numpy.mod``.")
remainder = mod


def floor_divide(x, y):
    """Elementwise ``x // y`` (rounded towards minus infinity); no derivative."""
    x, y = _promote(x, y)
    if dtypes.is_float(_dtype_weak(x)[0]):
        return _float_floor_divide(x, y)
    return bind(_P.floordiv, x, y)


def _float_floor_divide(x, y):
    """NumPy's float ``//`` (its ``npy_divmod``): the quotient of ``x - fmod(x, y)`` by
    ``y``, one less where the remainder and ``y`` differ in sign, rounded to the nearest
    integer, a signed zero where it is 0; ``x / y`` where ``y`` is 0. So ``-1 // inf`` is -1,
    ``inf // 2`` NaN and ``1 // -0.0`` -inf, where ``floor(x / y)`` gives -0.0, inf, -inf."""
    m = fmod(x, y)
    div = true_divide(subtract(x, m), y)
    fix = logical_and(not_equal(m, 0), not_equal(less(y, 0), less(m, 0)))
    div = where(fix, subtract(div, 1.0), div)
    fl = floor(div)
    fl = where(greater(subtract(div, fl), 0.5), add(fl, 1.0), fl)
    fl = where(equal(div, 0), copysign(0.0, true_divide(x, y)), fl)
    return where(equal(y, 0), true_divide(x, y), fl)


def logical_and(x, y):
    """Elementwise truth of ``x and y`` (boolean)."""
    return bind(_P.logical_and, _as_bool(x), _as_bool(y))


def logical_or(x, y):
    """Elementwise truth of ``x or y`` (boolean)."""
    return bind(_P.logical_or, _as_bool(x), _as_bool(y))


def logical_not(x):
    """Elementwise truth of ``not x`` (boolean)."""
    return bind(_P.logical_not, _as_bool(x))


def _bitwise(pname: str, kinds: str, logical: str = "", binary: bool = True):
    """The standard's ``bitwise_*`` function of primitive ``pname``: operands promoted, then
    of the dtype kinds ``kinds`` or refused; on bools the ``logical`` primitive (the same
    values) when there is one. Its signature is the standard's, ``(x1, x2, /)`` or ``(x, /)``,
    which the standard's suite and ``inspect`` read."""
    what = "integer or bool" if "b" in kinds else "integer"

    def fn(x1, x2, /):
        return apply(x1, x2)

    def unary_fn(x, /):
        return apply(x)

    def apply(*xs):
        xs = _promote(*xs)
        d = aval_of(xs[0]).dtype
        if dtypes.kind(d) not in kinds:
            raise TypeError(f"jnp.{pname}: needs {what} operands, got "
                            f"{', '.join(str(aval_of(x).dtype) for x in xs)}; for floats "
                            f"use jnp.logical_* or comparisons, or .astype an integer dtype")
        return bind(getattr(_P, logical if logical and d == dtypes.bool_ else pname), *xs)
    if not binary:
        fn = unary_fn
    fn.__name__ = fn.__qualname__ = pname
    return fn


bitwise_and = _bitwise("bitwise_and", "biu", "logical_and")
bitwise_or = _bitwise("bitwise_or", "biu", "logical_or")
bitwise_xor = _bitwise("bitwise_xor", "biu", "ne")
bitwise_invert = _bitwise("bitwise_invert", "biu", "logical_not", binary=False)
bitwise_left_shift = _bitwise("bitwise_left_shift", "iu")
bitwise_right_shift = _bitwise("bitwise_right_shift", "iu")
bitwise_and.__doc__ = "Elementwise ``x & y`` of integers or bools (bits; truth of bools)."
bitwise_or.__doc__ = "Elementwise ``x | y`` of integers or bools (bits; truth of bools)."
bitwise_xor.__doc__ = "Elementwise ``x ^ y`` of integers or bools (bits; truth of bools)."
bitwise_invert.__doc__ = "Elementwise ``~x`` of integers (every bit flipped) or bools (not)."
bitwise_left_shift.__doc__ = """Elementwise ``x << y`` of integers, wrapping at the dtype's
    width; 0 where ``y`` is negative or at least the width (NumPy's ``left_shift``)."""
bitwise_right_shift.__doc__ = """Elementwise ``x >> y`` of integers (arithmetic: the sign is
    kept); where ``y`` is negative or at least the width, 0, or -1 for negative ``x``
    (NumPy's ``right_shift``)."""
# NumPy's names of the same functions
bitwise_not = invert = bitwise_invert
left_shift, right_shift = bitwise_left_shift, bitwise_right_shift


def power(x, y):
    """x ** y. Small integer exponents become multiplications (exact, and cheap to compile)."""
    if type(x) is Tracer and type(y) is int and 1 <= y <= 4 and dtypes.is_float(x.gvar.aval.dtype):
        r = x           # (the common case, first: a weak int exponent keeps x's dtype)
        for _ in range(y - 1):
            r = bind(_P.mul, r, x)
        return r
    x = _operand(x, "argument 0")
    yo = _operand(y, "argument 1")
    out, _ = dtypes.result_type(_dtype_weak(x), _dtype_weak(yo))
    if (isinstance(y, (int, np.integer)) and not isinstance(y, (bool, np.bool_))
            and 0 <= y <= 4):
        x = _cast(x, out) if isinstance(x, Tracer) or not isinstance(x, (bool, int, float)) else x
        if y == 0:
            from .creation import ones_like
            return ones_like(x) if isinstance(x, Tracer) else np.ones_like(np.asarray(x, out))
        r = x
        for _ in range(int(y) - 1):
            r = multiply(r, x)
        return r
    if not dtypes.is_inexact(out):
        # integer powers are computed in float64 and rounded (exact below 2**53)
        xf, yf = _promote(x, yo, float_only=True)
        return astype(floor(bind(_P.pow, xf, yf) + 0.5), out)
    x, y = _promote(x, yo)
    return bind(_P.pow, x, y)


def square(x):
    """Elementwise ``x * x``."""
    return multiply(x, x)


def reciprocal(x):
    """Elementwise ``1 / x``."""
    return true_divide(1.0, x)


def where(condition, x=None, y=None):
    """Select ``x`` where ``condition`` holds, else ``y`` (the one-argument form is not traceable)."""
    if x is None or y is None:
        raise TypeError("jnp.where(condition) has a data-dependent shape; pass both x and y "
                        "(jnp.where(condition, x, y))")
    c = _as_bool(condition)
    x, y = _promote(x, y)
    return bind(_P.select, c, x, y)


def clip(x, /, min=None, max=None, *, a_min=None, a_max=None):  # noqa: A002  (the standard's names)
    """``x`` limited to ``[min, max]`` (either may be None), as the Array API's and JAX's
    ``clip``: ``min``/``max`` positional or keyword, NumPy 1's ``a_min=``/``a_max=`` keywords
    also taken; the gradient is zero where clipped."""
    if a_min is not None:
        if min is not None:
            raise TypeError("jnp.clip: give min or a_min, not both")
        min = a_min
    if a_max is not None:
        if max is not None:
            raise TypeError("jnp.clip: give max or a_max, not both")
        max = a_max
    if min is not None:
        x = maximum(x, min)
    if max is not None:
        x = minimum(x, max)
    return x


def isnan(x):
    """Elementwise: NaN (boolean, no derivative); a complex number where either part is."""
    return not_equal(x, x)


def isinf(x):
    """Elementwise: positive or negative infinity (boolean, no derivative); a complex number
    where either part is (then ``abs`` is infinite)."""
    return equal(abs(x), inf)


def isfinite(x):
    """Elementwise: neither infinite nor NaN (boolean, no derivative)."""
    return logical_not(logical_or(isnan(x), isinf(x)))


# ------------------------------------------------------------------ more elementwise math
arcsin = _unary("arcsin")
arccos = _unary("arccos")
arctan = _unary("arctan")
sinh = _unary("sinh")
cosh = _unary("cosh")
arcsinh = _unary("arcsinh")
arccosh = _unary("arccosh")
arctanh = _unary("arctanh")
log2 = _unary("log2")
log10 = _unary("log10")
exp2 = _unary("exp2")
arctan2 = _binary("arctan2", float_only=True, doc="Elementwise ``arctan(x / y)`` in the quadrant of the point ``(y, x)``, as ``numpy.arctan2``.")
hypot = _binary("hypot", float_only=True, doc="Elementwise ``sqrt(x**2 + y**2)``, as ``numpy.hypot``.")
asin, acos, atan, asinh, acosh, atanh, atan2 = (arcsin, arccos, arctan, arcsinh, arccosh,
                                                  arctanh, arctan2)
_LN2 = float(np.log(2.0))


def _float(x):
    (x,) = _promote(x, float_only=True)
    return x


def fabs(x):
    """|x| as a float (NumPy's fabs)."""
    return abs(_float(x))


def sinc(x):
    """sin(pi x) / (pi x), 1 at 0."""
    x = _float(x)
    zero = equal(x, 0)
    px = multiply(where(zero, 1.0, x), np.pi)
    return where(zero, 1.0, true_divide(sin(px), px))


def logaddexp(x, y):
    """log(exp(x) + exp(y)) without overflow; the gradient is the pair of softmax weights."""
    x, y = _promote(x, y, float_only=True)
    m = maximum(x, y)
    d = subtract(x, y)
    d = where(isnan(d), 0.0, d)           # both infinite with the same sign: the max itself
    return add(m, log1p(exp(negative(abs(d)))))


def logaddexp2(x, y):
    """``log2(2**x + 2**y)``."""
    x, y = _promote(x, y, float_only=True)
    return true_divide(logaddexp(multiply(x, _LN2), multiply(y, _LN2)), _LN2)


def fmax(x, y):
    """Elementwise maximum ignoring NaN (NaN only where both are NaN)."""
    x, y = _promote(x, y)
    return where(isnan(y), x, where(isnan(x), y, maximum(x, y)))


def fmin(x, y):
    """Elementwise minimum ignoring NaN (NaN only where both are NaN)."""
    x, y = _promote(x, y)
    return where(isnan(y), x, where(isnan(x), y, minimum(x, y)))


def _int_passthrough(fn):
    """Rounding functions return integer and bool operands unchanged (as NumPy 2)."""
    def wrapped(x, *args, **kwargs):
        x = _operand(x)
        if not dtypes.is_float(aval_of(x).dtype):
            return x if isinstance(x, Tracer) else asarray(x)
        return fn(x, *args, **kwargs)
    wrapped.__name__ = fn.__name__
    wrapped.__doc__ = fn.__doc__
    return wrapped


@_int_passthrough
def ceil(x):
    """Elementwise ceiling (zero gradient)."""
    return negative(floor(negative(x)))


@_int_passthrough
def trunc(x):
    """Round toward zero."""
    return _binders.trunc(x)


fix = trunc


def rint(x):
    """Round to the nearest integer, halves to even (NumPy's rint; integers become floats)."""
    x = _float(x)
    r = floor(add(x, 0.5))
    tie = logical_and(equal(subtract(r, x), 0.5), not_equal(mod(r, 2.0), 0.0))
    # x's sign on the result: -0.4 and -0.0 round to -0.0, as NumPy's
    return copysign(where(tie, subtract(r, 1.0), r), x)


def round(x, decimals=0):
    """Round to ``decimals`` places, halves to even (NumPy's round)."""
    x = _operand(x)
    if not dtypes.is_float(aval_of(x).dtype):
        return x if isinstance(x, Tracer) else asarray(x)
    if decimals == 0:
        return rint(x)
    s = 10.0 ** int(decimals)
    return true_divide(rint(multiply(x, s)), s)


around = round_ = round


def deg2rad(x):
    """Elementwise degrees to radians."""
    return multiply(_float(x), np.pi / 180.0)


def rad2deg(x):
    """Elementwise radians to degrees."""
    return multiply(_float(x), 180.0 / np.pi)


radians, degrees = deg2rad, rad2deg


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN -> ``nan``, +inf -> ``posinf`` (default the dtype's max), -inf -> ``neginf``."""
    x = _operand(x)
    d = aval_of(x).dtype
    if not dtypes.is_float(d):
        return x if isinstance(x, Tracer) else asarray(x)
    big = float(np.finfo(d).max)
    x = where(isnan(x), nan, x)
    x = where(equal(x, inf), big if posinf is None else posinf, x)
    return where(equal(x, -inf), -big if neginf is None else neginf, x)


def real(x):
    """Real part (a real array: the value itself)."""
    x = _operand(x)
    if dtypes.is_complex(aval_of(x).dtype):
        return bind(_P.real, x)
    return x if isinstance(x, Tracer) else asarray(x)


def conjugate(x):
    """Complex conjugate (a real array: the value itself)."""
    x = _operand(x)
    if dtypes.is_complex(aval_of(x).dtype):
        return bind(_P.conj, x)
    return x if isinstance(x, Tracer) else asarray(x)


conj = conjugate


def real_if_close(x, tol=100):
    """``real(x)`` where every imaginary part is within ``tol`` machine epsilons of 0 (a
    concrete array only: the result's dtype depends on its values), else ``x``."""
    x = _operand(x)
    d = aval_of(x).dtype
    if not dtypes.is_complex(d) or isinstance(x, Tracer):
        return x if isinstance(x, Tracer) else asarray(x)
    return np.real_if_close(np.asarray(x), tol)


def imag(x):
    """Imaginary part (a real array: zeros)."""
    x = _operand(x)
    if dtypes.is_complex(aval_of(x).dtype):
        return bind(_P.imag, x)
    return multiply(x, 0)


def iscomplexobj(x) -> bool:
    """Whether ``x`` has a complex dtype (whatever its values)."""
    return dtypes.is_complex(aval_of(_operand(x)).dtype)


def isrealobj(x) -> bool:
    """Whether ``x`` has no complex dtype."""
    return not iscomplexobj(x)


def iscomplex(x):
    """Elementwise: a non-zero imaginary part (boolean)."""
    return not_equal(imag(x), 0)


def isreal(x):
    """Elementwise: a zero imaginary part (boolean)."""
    return equal(imag(x), 0)


def angle(x, deg=False):
    """Argument of a complex number, ``arctan2(imag, real)`` (a real number: 0 or pi)."""
    x = _operand(x)
    if dtypes.is_complex(aval_of(x).dtype):
        a = arctan2(imag(x), real(x))
        return multiply(a, 180.0 / np.pi) if deg else a
    x = _float(x)
    return where(less(x, 0), 180.0 if deg else np.pi, multiply(x, 0.0))


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol |b|, with infinities equal only to themselves."""
    a, b = _promote(a, b, float_only=True)
    close = less_equal(abs(subtract(a, b)), add(atol, multiply(rtol, abs(b))))
    close = logical_and(close, logical_and(isfinite(a), isfinite(b)))
    close = logical_or(close, logical_and(isinf(a), equal(a, b)))
    if equal_nan:
        close = logical_or(close, logical_and(isnan(a), isnan(b)))
    return close


def heaviside(x, h0):
    """Elementwise step function: 0 below zero, ``h0`` at zero, 1 above."""
    x, h0 = _promote(x, h0, float_only=True)
    return where(less(x, 0), 0.0, where(greater(x, 0), 1.0, h0))


def copysign(x, y):
    """Elementwise ``abs(x)`` with the sign bit of ``y`` (-0.0's and a NaN's too)."""
    x, y = _promote(x, y, float_only=True)
    return bind(_P.copysign, x, y)


def nextafter(x, y):
    """Elementwise the next float after ``x`` toward ``y``, as ``numpy.nextafter`` (``y`` where
    they are equal; NaN where either is; from zero, the smallest subnormal with ``y``'s
    sign). Its derivative is zero (it is a step function).

    With no bit casts among the primitives it is arithmetic, exact in every case: the
    spacing of floats at ``x`` is ``2 ** (e - nmant)`` for ``2 ** e <= |x| < 2 ** (e + 1)``
    (``e`` from ``log2``, corrected by exact powers of two; never below the subnormals'),
    halved when stepping toward zero from a power of two, computed in float64 where every
    spacing of float32 and float64 is exact."""
    x, y = _promote(x, y, float_only=True)
    d = aval_of(x).dtype
    fi = np.finfo(d)
    x, y = stop_gradient(x), stop_gradient(y)
    x64, y64 = astype(x, float64), astype(y, float64)
    ax = abs(x64)
    finite = logical_and(logical_not(isinf(ax)), greater(ax, 0.0))
    safe = where(finite, ax, 1.0)
    e = floor(log2(safe))
    e = where(greater(exp2(e), safe), e - 1.0, e)             # (log2 rounded up to 2**k)
    e = where(greater_equal(safe, exp2(e + 1.0)), e + 1.0, e)
    e = maximum(e, float(fi.minexp))                          # subnormals: one spacing
    step = exp2(e - float(fi.nmant))
    away = equal(greater(y64, x64), greater(x64, 0.0))         # away from zero
    below = logical_and(equal(safe, exp2(e)), greater(e, float(fi.minexp)))
    step = where(logical_and(logical_not(away), below), step * 0.5, step)
    r = x64 + where(greater(y64, x64), step, -step)
    r = where(isinf(ax), copysign(float(fi.max), x64), r)      # from an infinity, inward
    r = where(equal(r, 0.0), copysign(0.0, x64), r)            # toward zero keeps x's sign
    r = where(equal(x64, 0.0), copysign(float(fi.smallest_subnormal), y64), r)
    r = where(equal(x64, y64), y64, r)
    return astype(where(logical_or(isnan(x64), isnan(y64)), np.nan, r), d)


def fmod(x, y):
    """Elementwise remainder of ``x / y`` truncated toward zero (the sign of ``x``, as C's
    ``fmod`` and ``numpy.fmod``; ``mod`` takes the sign of ``y``)."""
    x, y = _promote(x, y, float_only=True)
    return bind(_P.fmod, x, y)


def logical_xor(x, y):
    """Elementwise truth of ``x != y`` as booleans."""
    return not_equal(_as_bool(x), _as_bool(y))


def signbit(x):
    """Elementwise: the sign bit is set (true for -0.0, negative values and a negative NaN)."""
    x = _float(x)
    return less(copysign(1.0, x), 0)


def float_power(x, y):
    """Elementwise ``x ** y`` computed in float64, as ``numpy.float_power``."""
    x, y = _promote(x, y, float_only=True)
    return power(astype(x, float64), astype(y, float64))


def cbrt(x):
    """Elementwise real cube root (negative inputs give negative roots)."""
    x = _float(x)
    return multiply(sign(x), power(abs(x), 1.0 / 3.0))



def select(condlist, choicelist, default=0):
    """The first choice whose condition holds, else ``default`` (a chain of where)."""
    if len(condlist) != len(choicelist):
        raise ValueError("select: list of cases must be same length as list of conditions")
    out = default
    for c, v in reversed(list(zip(condlist, choicelist))):
        out = where(c, v, out)
    return asarray(out) if not isinstance(out, Tracer) else out


_locate_module(globals(), __name__)
