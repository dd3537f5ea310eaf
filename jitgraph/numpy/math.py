"""Elementwise math: unary and binary functions, comparisons, logic, where/clip."""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..core import Tracer, aval_of, bind
from ._base import (_P, _cast, _dtype_weak, _operand, _promote, asarray, astype, bool_, inf,
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
expm1 = _unary("expm1")
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
                       doc="Identity whose gradient is zero.")


def _binary(pname: str, float_only: bool = False):
    def fn(x, y):
        x, y = _promote(x, y, float_only=float_only)
        return bind(getattr(_P, pname), x, y)
    fn.__name__ = pname
    return fn


add = _binary("add")
subtract = _binary("sub")
multiply = _binary("mul")
true_divide = _binary("div", float_only=True)
divide = true_divide
maximum = _binary("max")
minimum = _binary("min")
greater = _binary("gt")
greater_equal = _binary("ge")
less = _binary("lt")
less_equal = _binary("le")
equal = _binary("eq")
not_equal = _binary("ne")
mod = _binary("mod")
remainder = mod


def floor_divide(x, y):
    x, y = _promote(x, y)
    if dtypes.is_float(_dtype_weak(x)[0]):
        return floor(x / y)
    return bind(_P.floordiv, x, y)


def _as_bool(x):
    x = _operand(x)
    return x if aval_of(x).dtype == bool_ else not_equal(x, 0)


def logical_and(x, y):
    return bind(_P.logical_and, _as_bool(x), _as_bool(y))


def logical_or(x, y):
    return bind(_P.logical_or, _as_bool(x), _as_bool(y))


def logical_not(x):
    return bind(_P.logical_not, _as_bool(x))


def power(x, y):
    """x ** y. Small integer exponents become multiplications (exact, and cheap to compile)."""
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
    if not dtypes.is_float(out):
        # integer powers are computed in float64 and rounded (exact below 2**53)
        xf, yf = _promote(x, yo, float_only=True)
        return astype(floor(bind(_P.pow, xf, yf) + 0.5), out)
    x, y = _promote(x, yo)
    return bind(_P.pow, x, y)


def square(x):
    return multiply(x, x)


def reciprocal(x):
    return true_divide(1.0, x)


def where(condition, x=None, y=None):
    """Select ``x`` where ``condition`` holds, else ``y`` (the one-argument form is not traceable)."""
    if x is None or y is None:
        raise TypeError("jnp.where(condition) has a data-dependent shape; pass both x and y "
                        "(jnp.where(condition, x, y))")
    c = _as_bool(condition)
    x, y = _promote(x, y)
    return bind(_P.select, c, x, y)


def clip(x, a_min=None, a_max=None):
    if a_min is not None:
        x = maximum(x, a_min)
    if a_max is not None:
        x = minimum(x, a_max)
    return x


def isnan(x):
    return not_equal(x, x)


def isinf(x):
    return equal(abs(x), inf)


def isfinite(x):
    return logical_not(logical_or(isnan(x), isinf(x)))


_locate_module(globals(), __name__)
