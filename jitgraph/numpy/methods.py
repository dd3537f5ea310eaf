"""ndarray-like operators and methods installed on ``Tracer`` (``x + y``, ``x.sum()``, ``x.T``)."""
from __future__ import annotations

from ..core import Tracer, aval_of
from ._base import _here, _operand, astype, bool_
from .math import (abs, add, clip, equal, floor_divide, greater, greater_equal, less, less_equal,
                   logical_and, logical_not, logical_or, mod, multiply, negative,
                   not_equal, power, subtract, true_divide)
from .reductions import argmax, argmin, max, mean, min, prod, std, sum, var
from .manipulation import ravel, reshape, squeeze, swapaxes, transpose
from .indexing import getitem
from .products import dot, matmul


# ------------------------------------------------------------------ ndarray-like tracer methods
def _no_out(out, name) -> bool:
    if out is not None:
        raise TypeError(f"{name}: out= is not supported on traced values (arrays are immutable "
                        f"inside a trace); use the returned value, at {_here()}")
    return True


def _c_order(order) -> bool:
    if order not in ("C", None):
        raise TypeError(f"reshape: only order='C' is supported on traced values, got {order!r}")
    return True


def _bool_operands(op: str, *xs):
    """&, | and ~ are logical on bool values; NumPy's bitwise integer versions have no
    primitive, so they are refused rather than silently computed as logical operations."""
    for x in xs:
        d = aval_of(_operand(x)).dtype
        if d != bool_:
            raise TypeError(f"the operator {op} on a traced value of dtype {d} is not supported "
                            "(only bool operands: bitwise integer operations have no primitive);"
                            f" use jnp.logical_and/logical_or/logical_not or comparisons, at "
                            f"{_here()}")
    return xs


def _setitem(self, key, value):
    raise TypeError(f"traced values are immutable: x[...] = value is not supported (at "
                    f"{_here()}); build the new value instead, e.g. with jnp.where(mask, value, "
                    "x) or jnp.concatenate")


def _install_tracer_methods() -> None:
    T = Tracer
    T.__add__ = lambda s, o: add(s, o)
    T.__radd__ = lambda s, o: add(o, s)
    T.__sub__ = lambda s, o: subtract(s, o)
    T.__rsub__ = lambda s, o: subtract(o, s)
    T.__mul__ = lambda s, o: multiply(s, o)
    T.__rmul__ = lambda s, o: multiply(o, s)
    T.__truediv__ = lambda s, o: true_divide(s, o)
    T.__rtruediv__ = lambda s, o: true_divide(o, s)
    T.__floordiv__ = lambda s, o: floor_divide(s, o)
    T.__rfloordiv__ = lambda s, o: floor_divide(o, s)
    T.__mod__ = lambda s, o: mod(s, o)
    T.__rmod__ = lambda s, o: mod(o, s)
    T.__pow__ = lambda s, o: power(s, o)
    T.__rpow__ = lambda s, o: power(o, s)
    T.__matmul__ = lambda s, o: matmul(s, o)
    T.__rmatmul__ = lambda s, o: matmul(o, s)
    T.__neg__ = lambda s: negative(s)
    T.__pos__ = lambda s: s
    T.__abs__ = lambda s: abs(s)
    T.__gt__ = lambda s, o: greater(s, o)
    T.__ge__ = lambda s, o: greater_equal(s, o)
    T.__lt__ = lambda s, o: less(s, o)
    T.__le__ = lambda s, o: less_equal(s, o)
    T.__eq__ = lambda s, o: equal(s, o)
    T.__ne__ = lambda s, o: not_equal(s, o)
    T.__and__ = lambda s, o: logical_and(*_bool_operands("&", s, o))
    T.__rand__ = lambda s, o: logical_and(*_bool_operands("&", o, s))
    T.__or__ = lambda s, o: logical_or(*_bool_operands("|", s, o))
    T.__ror__ = lambda s, o: logical_or(*_bool_operands("|", o, s))
    T.__invert__ = lambda s: logical_not(*_bool_operands("~", s))
    T.__getitem__ = lambda s, k: getitem(s, k)
    T.__setitem__ = _setitem
    T.copy = lambda s: s
    T.T = property(lambda s: transpose(s))
    T.mT = property(lambda s: swapaxes(s, -1, -2))
    T.reshape = lambda s, *shape, order="C", copy=None: reshape(
        s, shape[0] if len(shape) == 1 else shape) if _c_order(order) else None
    T.transpose = lambda s, *axes: transpose(s, axes[0] if len(axes) == 1 else (axes or None))
    T.swapaxes = lambda s, a, b: swapaxes(s, a, b)
    T.squeeze = lambda s, axis=None: squeeze(s, axis)
    T.ravel = lambda s: ravel(s)
    T.flatten = lambda s: ravel(s)
    T.astype = lambda s, dtype: astype(s, dtype)
    # the methods also accept NumPy's ``out=None``/``dtype=None``/``order="C"``, which is what
    # np.sum(traced), np.mean(traced), np.reshape(traced, ...) pass when they defer to a method
    T.sum = lambda s, axis=None, dtype=None, out=None, keepdims=False: sum(
        s, axis, dtype, keepdims) if _no_out(out, "sum") else None
    T.mean = lambda s, axis=None, dtype=None, out=None, keepdims=False: mean(
        s if dtype is None else astype(s, dtype), axis, keepdims) if _no_out(out, "mean") else None
    T.max = lambda s, axis=None, out=None, keepdims=False: max(
        s, axis, keepdims) if _no_out(out, "max") else None
    T.min = lambda s, axis=None, out=None, keepdims=False: min(
        s, axis, keepdims) if _no_out(out, "min") else None
    T.prod = lambda s, axis=None, dtype=None, out=None, keepdims=False: prod(
        s, axis, dtype, keepdims) if _no_out(out, "prod") else None
    T.var = lambda s, axis=None, dtype=None, out=None, ddof=0, keepdims=False: var(
        s if dtype is None else astype(s, dtype), axis, ddof, keepdims) \
        if _no_out(out, "var") else None
    T.std = lambda s, axis=None, dtype=None, out=None, ddof=0, keepdims=False: std(
        s if dtype is None else astype(s, dtype), axis, ddof, keepdims) \
        if _no_out(out, "std") else None
    T.argmax = lambda s, axis=None, out=None, keepdims=False: argmax(
        s, axis, keepdims) if _no_out(out, "argmax") else None
    T.argmin = lambda s, axis=None, out=None, keepdims=False: argmin(
        s, axis, keepdims) if _no_out(out, "argmin") else None
    T.dot = lambda s, o, out=None: dot(s, o) if _no_out(out, "dot") else None
    T.clip = lambda s, min=None, max=None, out=None: clip(s, min, max) \
        if _no_out(out, "clip") else None
    _install_more_methods(T)


def _install_more_methods(T) -> None:
    """ndarray methods of the newer families (logic, cumulative, rounding, diagonals)."""
    from . import indexing, manipulation, math, reductions, sorting
    T.any = lambda s, axis=None, out=None, keepdims=False: reductions.any(
        s, axis, keepdims) if _no_out(out, "any") else None
    T.all = lambda s, axis=None, out=None, keepdims=False: reductions.all(
        s, axis, keepdims) if _no_out(out, "all") else None
    T.cumsum = lambda s, axis=None, dtype=None, out=None: reductions.cumsum(
        s, axis, dtype) if _no_out(out, "cumsum") else None
    T.cumprod = lambda s, axis=None, dtype=None, out=None: reductions.cumprod(
        s, axis, dtype) if _no_out(out, "cumprod") else None
    T.ptp = lambda s, axis=None, out=None, keepdims=False: reductions.ptp(
        s, axis, keepdims) if _no_out(out, "ptp") else None
    T.round = lambda s, decimals=0, out=None: math.round(s, decimals) \
        if _no_out(out, "round") else None
    T.conj = T.conjugate = lambda s: math.conjugate(s)
    T.real = property(lambda s: math.real(s))
    T.imag = property(lambda s: math.imag(s))
    T.diagonal = lambda s, offset=0, axis1=0, axis2=1: indexing.diagonal(s, offset, axis1, axis2)
    # (no ``x.trace()``: ``trace`` is the Tracer's own slot; use jnp.trace(x))
    T.repeat = lambda s, repeats, axis=None: manipulation.repeat(s, repeats, axis)
    T.argsort = lambda s, axis=-1, kind=None, order=None: sorting.argsort(s, axis)
    T.nonzero = lambda s: (_ for _ in ()).throw(TypeError(
        "nonzero() has a data-dependent shape and cannot be traced; use jnp.where(mask, x, 0) "
        f"or a boolean mask with a static shape, at {_here()}"))


_install_tracer_methods()
