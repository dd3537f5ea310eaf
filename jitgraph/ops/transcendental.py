"""More elementwise primitives: inverse trig and hyperbolic functions, log2/log10/exp2,
erfc, lgamma, atan2, hypot, copysign, fmod, and SciPy special functions.

The ones Numba's ``math`` module has (and CUDA's libdevice has under the same names) carry a
code-generation record calling it, so they fuse into the surrounding loop kernel. ``digamma``,
``polygamma``, ``erfinv`` and ``ndtri`` have no scalar implementation the generated code can
call: they have none and run as host steps between kernels (their NumPy reference is SciPy's).
"""
from __future__ import annotations

import math

import numpy as np

from ..core import Primitive, register
from ..batching import elementwise_rule
from .binders import add_tangents, broadcast_tangent, div, trunc, unbroadcast
from .elementwise import elementwise_aval, binary, call, exp_p, sign_p, sqrt_p, unary

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _special(name):
    """SciPy's special function ``name`` as a NumPy reference that keeps the operand's float
    dtype (SciPy may return float64). SciPy is imported at the first call: ``scipy.special``
    takes a good part of a second to import, most of ``import jitgraph`` otherwise."""
    def impl(x):
        import scipy.special
        return np.asarray(getattr(scipy.special, name)(x)).astype(x.dtype)
    return impl


arcsin_p = unary("arcsin", np.arcsin, call("asin"),
                 vjp=lambda g, out, x: (g / sqrt_p(1.0 - x * x),))
arccos_p = unary("arccos", np.arccos, call("acos"),
                 vjp=lambda g, out, x: (-(g / sqrt_p(1.0 - x * x)),))
arctan_p = unary("arctan", np.arctan, call("atan"),
                 vjp=lambda g, out, x: (g / (1.0 + x * x),))
sinh_p = unary("sinh", np.sinh, call("sinh"), vjp=lambda g, out, x: (g * cosh_p(x),))
cosh_p = unary("cosh", np.cosh, call("cosh"), vjp=lambda g, out, x: (g * sinh_p(x),))
arcsinh_p = unary("arcsinh", np.arcsinh, call("asinh"),
                  vjp=lambda g, out, x: (g / sqrt_p(x * x + 1.0),))
arccosh_p = unary("arccosh", np.arccosh, call("acosh"),
                  vjp=lambda g, out, x: (g / (sqrt_p(x - 1.0) * sqrt_p(x + 1.0)),))
arctanh_p = unary("arctanh", np.arctanh, call("atanh"),
                  vjp=lambda g, out, x: (g / (1.0 - x * x),))
log2_p = unary("log2", np.log2, call("log2"), vjp=lambda g, out, x: (g / (x * _LN2),))
log10_p = unary("log10", np.log10, call("log10"), vjp=lambda g, out, x: (g / (x * _LN10),))
exp2_p = unary("exp2", np.exp2, lambda c, x: c.call(c.fn("pow"), c.number(2.0), x),
               vjp=lambda g, out, x: (g * out * _LN2,))
erfc_p = unary("erfc", _special("erfc"), call("erfc"),
               vjp=lambda g, out, x: (-(g * _TWO_OVER_SQRT_PI * exp_p(-(x * x))),))
lgamma_p = unary("lgamma", _special("gammaln"), call("lgamma"),
                 vjp=lambda g, out, x: (g * digamma_p(x),))
# host-only special functions (no scalar routine in Numba's math module)
digamma_p = unary("digamma", _special("digamma"), None,
                  vjp=lambda g, out, x: (g * polygamma_p(x, n=1),))
erfinv_p = unary("erfinv", _special("erfinv"), None,
                 vjp=lambda g, out, x: (g * (0.5 * math.sqrt(math.pi)) * exp_p(out * out),))
ndtri_p = unary("ndtri", _special("ndtri"), None,
                vjp=lambda g, out, x: (g * math.sqrt(2.0 * math.pi) * exp_p(0.5 * (out * out)),))


def _polygamma_aval(x, *, n):
    return elementwise_aval(x, float_only=True, name="polygamma")


def _polygamma_impl(x, *, n):
    import scipy.special
    return np.asarray(scipy.special.polygamma(n, x)).astype(x.dtype)


def _polygamma_vjp(g, out, x, *, n):
    return (g * polygamma_p(x, n=n + 1),)


polygamma_p = register(Primitive(
    "polygamma", kind="elementwise", abstract_eval=_polygamma_aval,
    impl=_polygamma_impl, vjp=_polygamma_vjp,
    jvp=lambda ts, out, x, *, n: None if ts[0] is None else _polygamma_vjp(ts[0], out, x, n=n)[0],
    codegen=None))
polygamma_p.batch = elementwise_rule(polygamma_p)


# ---------------------------------------------------------------- binary
def _binary_rule(partials):
    """VJP and JVP of a binary elementwise op from its two local partial derivatives."""
    def vjp(g, out, x, y):
        dx, dy = partials(out, x, y)
        return unbroadcast(g * dx, x.aval), unbroadcast(g * dy, y.aval)

    def jvp(ts, out, x, y):
        dx, dy = partials(out, x, y)
        tx, ty = ts
        return broadcast_tangent(add_tangents(None if tx is None else tx * dx, None if ty is None else ty * dy),
                      out.shape)
    return vjp, jvp


def _atan2_partials(out, y, x):
    r2 = x * x + y * y
    return x / r2, -(y / r2)


def _hypot_partials(out, x, y):
    return x / out, y / out


arctan2_p = binary("arctan2", np.arctan2, call("atan2"), *_binary_rule(_atan2_partials),
                   float_only=True)
hypot_p = binary("hypot", np.hypot, call("hypot"), *_binary_rule(_hypot_partials),
                 float_only=True)


def _copysign_partials(out, x, y):
    # |x| with y's sign bit: the slope in x is +-1 (0 at x = 0), none in y
    return sign_p(out) * sign_p(x), np.zeros(y.shape, y.dtype)


def _fmod_partials(out, x, y):
    # x - trunc(x / y) * y: slope 1 in x, -trunc(x / y) in y (where it is defined)
    return np.ones(x.shape, x.dtype), -trunc(div(x - out, y))


# The sign bit itself (NaN's and -0.0's included), as the C library reads it: NumPy's
# copysign and signbit are defined by it, so comparisons with 0 cannot stand in
copysign_p = binary("copysign", np.copysign, call("copysign"),
                    *_binary_rule(_copysign_partials), float_only=True)
# C's fmod: the remainder of division truncated toward zero (sign of x), NumPy's fmod
# (Numba's CPU target has no math.fmod; its np.fmod on scalars is C's)
fmod_p = binary("fmod", np.fmod, call("fmod", functions={"cpu": "np.fmod", "cuda": "math.fmod"}),
                *_binary_rule(_fmod_partials), float_only=True)
