"""``jax.lax``'s array operations under their lax names, written with the jnp functions (so
they trace, differentiate and compile like them): the elementwise names (``lax.add``,
``lax.max``, ...), shapes and slices (``slice``, ``dynamic_slice``, ``pad`` with interior
padding, ``broadcast_in_dim``), products with ``precision=`` (``dot``, ``dot_general``) and
``Precision``. ``jitgraph.lax`` re-exports them beside its control flow.

Where lax and NumPy differ, these follow lax: ``div`` and ``rem`` round toward zero for
integers, ``dynamic_slice`` clamps its start so the slice stays inside the operand.
"""
from __future__ import annotations

import builtins
from typing import Any, Sequence

import numpy as np

from .. import dtypes
from ..core import Tracer, aval_of, bind
from ._base import _P, _cast, _operand, _promote, _locate_module, asarray, astype
from . import math as _m
from .indexing import take
from .manipulation import (broadcast_to, concatenate, expand_dims, flip, reshape,
                           squeeze as _squeeze, transpose as _transpose)
from .products import Precision, matmul, tensordot
from .reductions import argmax as _argmax, argmin as _argmin, cummax as _cummax, \
    cummin as _cummin, cumprod as _cumprod, cumsum as _cumsum

__all__ = [
    "Precision", "abs", "acos", "acosh", "add", "and_", "argmax", "argmin", "asin", "asinh",
    "atan", "atan2", "atanh", "batch_matmul", "broadcast", "broadcast_in_dim",
    "broadcasted_iota", "cbrt", "ceil", "clamp", "concatenate", "convert_element_type", "cos",
    "cosh", "cummax", "cummin", "cumprod", "cumsum", "div", "dot", "dot_general",
    "dynamic_index_in_dim", "dynamic_slice", "dynamic_slice_in_dim", "dynamic_update_slice",
    "dynamic_update_slice_in_dim", "eq", "erf", "exp", "exp2", "expand_dims", "expm1",
    "floor", "full", "full_like", "ge", "gt", "index_in_dim", "integer_pow", "iota",
    "is_finite", "le", "log", "log1p", "logistic", "lt", "max", "min", "mul", "ne", "neg",
    "not_", "or_", "pad", "pow", "reciprocal", "rem", "reshape", "rev", "round", "rsqrt",
    "select", "shift_left", "shift_right_arithmetic", "shift_right_logical", "sign", "sin",
    "sinh", "slice", "slice_in_dim", "sqrt", "square", "squeeze",
    "sub", "tan", "tanh", "transpose", "xor", "zeros_like_array",
]

_builtin_slice = slice


# ------------------------------------------------------------------ products
def _preferred(r, preferred_element_type):
    return r if preferred_element_type is None else astype(r, preferred_element_type)


def dot(lhs, rhs, precision=None, preferred_element_type=None):
    """``lax.dot``: vector/matrix products (``jnp.dot`` for operands of rank 1 and 2)."""
    Precision.check(precision, "lax.dot")
    from .products import dot as _dot
    return _preferred(_dot(lhs, rhs), preferred_element_type)


def dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    """``lax.dot_general``: contract ``lhs``/``rhs`` over the axes of
    ``((lhs_contract, rhs_contract), (lhs_batch, rhs_batch))``; the result's axes are the
    batch axes, then lhs's free axes, then rhs's."""
    Precision.check(precision, "lax.dot_general")
    (lc, rc), (lb, rb) = dimension_numbers
    lhs, rhs = _operand(lhs), _operand(rhs)
    sl, sr = aval_of(lhs).shape, aval_of(rhs).shape
    lc, rc, lb, rb = ([int(i) % len(s) for i in ax] for ax, s in
                      ((lc, sl), (rc, sr), (lb, sl), (rb, sr)))
    if len(lc) != len(rc) or len(lb) != len(rb) or \
            any(sl[i] != sr[j] for i, j in zip(lc + lb, rc + rb)):
        raise ValueError(f"lax.dot_general: contracting {lc}/{rc} and batch {lb}/{rb} axes of "
                         f"{sl} and {sr} must pair up with equal sizes")
    lf = [i for i in range(len(sl)) if i not in lc and i not in lb]
    rf = [i for i in range(len(sr)) if i not in rc and i not in rb]
    if not lb:
        r = tensordot(lhs, rhs, axes=(lc, rc))
        return _preferred(r, preferred_element_type)
    k = int(np.prod([sl[i] for i in lc], dtype=np.int64))
    batch = tuple(sl[i] for i in lb)
    a = reshape(_transpose(lhs, lb + lf + lc), batch + (-1, k))
    b = reshape(_transpose(rhs, rb + rc + rf), batch + (k, -1))
    r = reshape(matmul(a, b), batch + tuple(sl[i] for i in lf) + tuple(sr[i] for i in rf))
    return _preferred(r, preferred_element_type)


def batch_matmul(lhs, rhs, precision=None):
    """``lax.batch_matmul``: matmul over leading batch dims of equal rank."""
    Precision.check(precision, "lax.batch_matmul")
    return matmul(lhs, rhs)


# ------------------------------------------------------------------ elementwise
_SCALARS = (bool, int, float, complex)


def _check_same_dtypes(name: str, operands: Sequence[Any], jnp_name: str) -> None:
    """lax's operations take operands of one dtype, as JAX's do (jnp's promote): Python
    scalars are weakly typed and take the arrays' dtype."""
    kinds = [aval_of(_operand(x)).dtype for x in operands if not isinstance(x, _SCALARS)]
    if len(set(kinds)) > 1:
        raise TypeError(f"lax.{name}: requires arguments to have the same dtypes, got "
                        f"{', '.join(str(d) for d in kinds)}. (Tip: jnp.{jnp_name} is a "
                        "similar function that does automatic type promotion on inputs; "
                        "or cast with lax.convert_element_type.)")


def _same_dtypes(fn, name: str):
    """``fn`` (a jnp function) as the lax operation ``name``: operands of one dtype."""
    def op(*operands):
        _check_same_dtypes(name, operands, fn.__name__)
        return fn(*operands)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = (f"``lax.{name}``: ``jnp.{fn.__name__}`` of operands of one dtype "
                  f"(a TypeError otherwise, as in JAX; ``jnp.{fn.__name__}`` promotes).")
    return op


add, sub, mul = _same_dtypes(_m.add, "add"), _same_dtypes(_m.subtract, "sub"), \
    _same_dtypes(_m.multiply, "mul")
max, min = _same_dtypes(_m.maximum, "max"), _same_dtypes(_m.minimum, "min")
eq, ne, lt, le, gt, ge = (_same_dtypes(f, n) for f, n in (
    (_m.equal, "eq"), (_m.not_equal, "ne"), (_m.less, "lt"), (_m.less_equal, "le"),
    (_m.greater, "gt"), (_m.greater_equal, "ge")))
neg, abs, sign, floor, ceil = _m.negative, _m.abs, _m.sign, _m.floor, _m.ceil
exp, exp2, log, log1p, expm1 = _m.exp, _m.exp2, _m.log, _m.log1p, _m.expm1
sin, cos, tan, tanh = _m.sin, _m.cos, _m.tan, _m.tanh
asin, acos, atan = _m.arcsin, _m.arccos, _m.arctan
atan2 = _same_dtypes(_m.arctan2, "atan2")
sinh, cosh, asinh, acosh, atanh = _m.sinh, _m.cosh, _m.arcsinh, _m.arccosh, _m.arctanh
sqrt, cbrt, square, reciprocal = _m.sqrt, _m.cbrt, _m.square, _m.reciprocal
pow = _m.power
is_finite = _m.isfinite


def rsqrt(x):
    """``1 / sqrt(x)``."""
    return _m.reciprocal(_m.sqrt(x))


def logistic(x):
    """``1 / (1 + exp(-x))``, as ``lax.logistic``."""
    (x,) = _promote(x, float_only=True)
    return bind(_P.logistic, x)


def erf(x):
    """The error function, elementwise (float results)."""
    (x,) = _promote(x, float_only=True)
    return bind(_P.erf, x)


def integer_pow(x, y: int):
    """``x ** y`` for a Python int ``y`` (repeated products, as lax does)."""
    if not isinstance(y, (int, np.integer)) or isinstance(y, bool):
        raise TypeError(f"lax.integer_pow: the exponent must be a Python int, got {y!r}")
    return _m.power(x, int(y))


def round(x, rounding_method=0):
    """``lax.round``: half away from zero (method 0, the default) or half to even (1)."""
    x = _operand(x)
    if int(rounding_method) == 1:
        return _m.rint(x)
    return _m.sign(x) * _m.floor(_m.abs(x) + 0.5)


def div(x, y):
    """``lax.div``: true division for floats, rounding toward zero for integers."""
    _check_same_dtypes("div", (x, y), "divide")
    x, y = _promote(_operand(x), _operand(y))
    if dtypes.is_float(aval_of(x).dtype):
        return _m.true_divide(x, y)
    q = _m.floor_divide(x, y)
    inexact = _m.logical_and(_m.not_equal(_m.mod(x, y), 0),
                             _m.not_equal(_m.less(x, 0), _m.less(y, 0)))
    return _m.where(inexact, q + 1, q)


def rem(x, y):
    """``lax.rem``: the remainder of division rounding toward zero (sign of ``x``, as C's
    fmod), not NumPy's ``mod`` (sign of ``y``)."""
    _check_same_dtypes("rem", (x, y), "fmod")
    x, y = _promote(_operand(x), _operand(y))
    m = _m.mod(x, y)
    flip_ = _m.logical_and(_m.not_equal(m, 0), _m.not_equal(_m.less(x, 0), _m.less(y, 0)))
    return _m.where(flip_, m - y, m)


and_ = _same_dtypes(_m.bitwise_and, "and_")
or_ = _same_dtypes(_m.bitwise_or, "or_")
xor = _same_dtypes(_m.bitwise_xor, "xor")
not_ = _same_dtypes(_m.bitwise_invert, "not_")
shift_left = _same_dtypes(_m.bitwise_left_shift, "shift_left")
shift_right_arithmetic = _same_dtypes(_m.bitwise_right_shift, "shift_right_arithmetic")


def shift_right_logical(x, y):
    """``lax.shift_right_logical``: ``x >> y`` filling with zeros, a signed ``x`` shifted as
    the unsigned integer of its bits (0 where ``y`` is negative or at least the width)."""
    _check_same_dtypes("shift_right_logical", (x, y), "right_shift")
    x, y = _promote(_operand(x), _operand(y))
    d = aval_of(x).dtype
    if d.kind != "i":
        return _m.bitwise_right_shift(x, y)
    u = np.dtype(f"u{d.itemsize}")
    return astype(_m.bitwise_right_shift(astype(x, u), astype(y, u)), d)


def select(pred, on_true, on_false):
    """``lax.select``: ``on_true`` where ``pred``, else ``on_false`` (same shapes)."""
    return _m.where(pred, on_true, on_false)


def clamp(min, x, max):  # noqa: A002  (lax's argument names)
    """``lax.clamp(min, x, max)``."""
    _check_same_dtypes("clamp", (min, x, max), "clip")
    return _m.minimum(_m.maximum(x, min), max)


def convert_element_type(operand, new_dtype):
    """``operand`` cast to ``new_dtype``, as ``jax.lax.convert_element_type``."""
    return astype(operand, dtypes.canonical(new_dtype))


# ------------------------------------------------------------------ shapes
def broadcast(operand, sizes: Sequence[int]):
    """``lax.broadcast``: new leading dims ``sizes``."""
    x = _operand(operand)
    return broadcast_to(x, tuple(sizes) + aval_of(x).shape)


def broadcast_in_dim(operand, shape: Sequence[int], broadcast_dimensions: Sequence[int]):
    """``lax.broadcast_in_dim``: operand dim ``i`` becomes result dim
    ``broadcast_dimensions[i]``; the others are broadcast."""
    x = _operand(operand)
    shp = aval_of(x).shape
    dims = list(broadcast_dimensions)
    if len(dims) != len(shp) or sorted(dims) != dims:
        raise ValueError(f"lax.broadcast_in_dim: broadcast_dimensions {dims} must be "
                         f"increasing, one per operand dim (operand shape {shp})")
    full_shape = [1] * len(shape)
    for i, d in enumerate(dims):
        full_shape[d] = shp[i]
    return broadcast_to(reshape(x, tuple(full_shape)), tuple(shape))


def reshape(operand, new_sizes: Sequence[int], dimensions: Sequence[int] | None = None):
    """``lax.reshape``; ``dimensions`` transposes first."""
    x = _operand(operand)
    if dimensions is not None:
        x = _transpose(x, tuple(dimensions))
    from .manipulation import reshape as _reshape
    return _reshape(x, tuple(new_sizes))


def transpose(operand, permutation: Sequence[int]):
    """``operand`` with its axes permuted by ``permutation``."""
    return _transpose(operand, tuple(permutation))


def squeeze(array, dimensions: Sequence[int]):
    """``array`` without the length-1 axes in ``dimensions``."""
    return _squeeze(array, tuple(dimensions))


def rev(operand, dimensions: Sequence[int]):
    """``lax.rev``: reversed along ``dimensions``."""
    x = _operand(operand)
    return flip(x, tuple(dimensions)) if len(dimensions) else x


def full(shape, fill_value, dtype=None):
    """An array of ``shape`` filled with ``fill_value``, as ``jax.lax.full``."""
    from .creation import full as _full
    return _full(tuple(shape) if not isinstance(shape, int) else (shape,), fill_value, dtype)


def full_like(x, fill_value, dtype=None, shape=None):
    """An array like ``x`` (its shape and dtype unless given) filled with ``fill_value``."""
    a = aval_of(_operand(x))
    return full(a.shape if shape is None else shape, fill_value,
                a.dtype if dtype is None else dtype)


def zeros_like_array(x):
    """An array of zeros with ``x``'s shape and dtype."""
    return full_like(x, 0)


def iota(dtype, size: int):
    """``0, 1, ..., size - 1`` as ``dtype``, as ``jax.lax.iota``."""
    from .creation import arange
    return arange(int(size), dtype=dtype)


def broadcasted_iota(dtype, shape: Sequence[int], dimension: int):
    """Position numbers along ``dimension``, broadcast to ``shape``."""
    shape = tuple(shape)
    one = [1] * len(shape)
    one[dimension] = shape[dimension]
    return broadcast_to(reshape(iota(dtype, shape[dimension]), one), shape)


def pad(operand, padding_value, padding_config):
    """``lax.pad``: ``padding_config`` is one ``(low, high, interior)`` per dim; negative
    low/high crop, interior inserts ``padding_value`` between elements."""
    x = _operand(operand)
    if not isinstance(x, Tracer):
        x = asarray(x)
    shp = aval_of(x).shape
    config = [tuple(int(v) for v in c) for c in padding_config]
    if len(config) != len(shp) or any(len(c) != 3 or c[2] < 0 for c in config):
        raise ValueError(f"lax.pad: padding_config needs one (low, high, interior) triple per "
                         f"dim with interior >= 0, got {padding_config} for shape {shp}")
    for ax, (_, _, interior) in enumerate(config):
        if interior:
            x = dilate(x, ax, interior + 1, padding_value)
    return pad_or_crop(x, [(lo, hi) for lo, hi, _ in config], padding_value)


def dilate(x, axis: int, factor: int, value=0):
    """``x`` with ``factor - 1`` copies of ``value`` between neighbours along ``axis`` (a
    stack, a reshape and a slice: differentiable)."""
    if factor == 1:
        return x
    a = aval_of(x)
    n = a.shape[axis]
    if n == 0:
        return x
    fill = full(a.shape[:axis + 1] + (factor - 1,) + a.shape[axis + 1:], value, a.dtype)
    parts = concatenate([expand_dims(x, axis + 1), fill], axis=axis + 1)
    flat = reshape(parts, a.shape[:axis] + (n * factor,) + a.shape[axis + 1:])
    return _slice_axis(flat, axis, 0, (n - 1) * factor + 1)


def pad_or_crop(x, widths: Sequence[tuple[int, int]], value=0):
    """``x`` with ``(low, high)`` added around each dim (filled with ``value``), negative
    widths cropping."""
    x = _operand(x)
    shp = aval_of(x).shape
    if any(lo < 0 or hi < 0 for lo, hi in widths):
        x = x[tuple(_builtin_slice(-builtins.min(lo, 0), n + builtins.min(hi, 0))
                    for (lo, hi), n in zip(widths, shp))]
    pos = [(builtins.max(lo, 0), builtins.max(hi, 0)) for lo, hi in widths]
    if not any(lo or hi for lo, hi in pos):
        return x
    if isinstance(value, Tracer):
        return _pad_by_concatenation(x, pos, value)
    from .manipulation import pad as _pad
    return _pad(x, pos, constant_values=value)


def _pad_by_concatenation(x, widths, value):
    """Padding with a traced value (``jnp.pad`` takes constants)."""
    value = _cast(value, aval_of(x).dtype)
    for ax, (lo, hi) in enumerate(widths):
        shp = list(aval_of(x).shape)
        parts = [broadcast_to(value, tuple(shp[:ax] + [w] + shp[ax + 1:])) for w in (lo, hi)]
        x = concatenate([parts[0], x, parts[1]], axis=ax)
    return x


def _slice_axis(x, axis: int, start: int, stop: int, step: int = 1):
    key = [_builtin_slice(None)] * aval_of(x).ndim
    key[axis] = _builtin_slice(start, stop, step)
    return x[tuple(key)]


# ------------------------------------------------------------------ slices
def slice(operand, start_indices: Sequence[int], limit_indices: Sequence[int],  # noqa: A001
          strides: Sequence[int] | None = None):
    """``lax.slice``: static starts, limits and strides per dim."""
    x = _operand(operand)
    strides = strides or (1,) * len(start_indices)
    return x[tuple(_builtin_slice(int(a), int(b), int(s))
                   for a, b, s in zip(start_indices, limit_indices, strides))]


def slice_in_dim(operand, start_index, limit_index, stride: int = 1, axis: int = 0):
    """``operand[start_index:limit_index:stride]`` along ``axis``, as ``jax.lax.slice_in_dim``."""
    x = _operand(operand)
    return _slice_axis(x, axis % aval_of(x).ndim, start_index, limit_index, stride)


def index_in_dim(operand, index: int, axis: int = 0, keepdims: bool = True):
    """The slice at a static ``index`` along ``axis``; ``keepdims=False`` drops that axis."""
    x = _operand(operand)
    n = aval_of(x).shape[axis]
    index = int(index) + n if int(index) < 0 else int(index)
    r = slice_in_dim(x, index, index + 1, 1, axis)
    return r if keepdims else _squeeze(r, axis % aval_of(x).ndim)


def _starts(x, start_indices, sizes, fn: str):
    shp = aval_of(x).shape
    if len(start_indices) != len(shp) or len(sizes) != len(shp):
        raise ValueError(f"{fn}: one start index and size per dim of the operand {shp}, got "
                         f"{len(start_indices)} start indices and sizes {tuple(sizes)}")
    for n, s in zip(shp, sizes):
        if not 0 <= s <= n:
            raise ValueError(f"{fn}: slice sizes {tuple(sizes)} must fit the operand {shp}")
    out = []
    for s, n, size in zip(start_indices, shp, sizes):
        if isinstance(s, Tracer):
            out.append(_m.clip(astype(s, np.int64), 0, n - size))
        else:
            out.append(int(np.clip(int(s), 0, n - size)))
    return out


def dynamic_slice(operand, start_indices: Sequence[Any], slice_sizes: Sequence[int]):
    """``lax.dynamic_slice``: ``operand[s0:s0+n0, ...]`` with starts that may be traced;
    each start is clamped to ``[0, dim - size]``, as lax does."""
    x = _operand(operand)
    sizes = [int(s) for s in slice_sizes]
    starts = _starts(x, list(start_indices), sizes, "lax.dynamic_slice")
    for ax, (s, size) in enumerate(zip(starts, sizes)):
        if isinstance(s, Tracer):
            from .creation import arange
            x = take(x, s + arange(size), axis=ax)
        else:
            x = _slice_axis(x, ax, s, s + size)
    return x


def dynamic_update_slice(operand, update, start_indices: Sequence[Any]):
    """``lax.dynamic_update_slice``: ``operand`` with ``update`` written at the (clamped,
    possibly traced) starts; differentiable in both arrays."""
    x = _operand(operand)
    u = _cast(_operand(update), aval_of(x).dtype)
    shp, ushp = aval_of(x).shape, aval_of(u).shape
    if len(ushp) != len(shp):
        raise ValueError(f"lax.dynamic_update_slice: update {ushp} and operand {shp} need "
                         "the same rank")
    starts = _starts(x, list(start_indices), ushp, "lax.dynamic_update_slice")
    if not any(isinstance(s, Tracer) for s in starts):
        widths = [(s, n - s - k) for s, n, k in zip(starts, shp, ushp)]
        inside = pad_or_crop(full(ushp, True, np.bool_), widths, False)
        return _m.where(inside, pad_or_crop(u, widths, 0), x)
    from .creation import arange
    mask = None
    spread = u
    for ax, (s, n, k) in enumerate(zip(starts, shp, ushp)):
        i = arange(n)
        rel = i - s
        spread = take(spread, _m.clip(rel, 0, builtins.max(k - 1, 0)), axis=ax)
        m = _m.logical_and(_m.greater_equal(rel, 0), _m.less(rel, k))
        m = reshape(m, tuple(n if a == ax else 1 for a in range(len(shp))))
        mask = m if mask is None else _m.logical_and(mask, m)
    return _m.where(mask, spread, x)


def dynamic_slice_in_dim(operand, start_index, slice_size: int, axis: int = 0):
    """``slice_size`` elements along ``axis`` from a (possibly traced) ``start_index``, clamped
    into range."""
    x = _operand(operand)
    nd = aval_of(x).ndim
    axis %= nd
    starts = [0] * nd
    starts[axis] = start_index
    sizes = list(aval_of(x).shape)
    sizes[axis] = slice_size
    return dynamic_slice(x, starts, sizes)


def dynamic_index_in_dim(operand, index, axis: int = 0, keepdims: bool = True):
    """The slice at a (possibly traced) ``index`` along ``axis``; ``keepdims=False`` drops that
    axis."""
    r = dynamic_slice_in_dim(operand, index, 1, axis)
    return r if keepdims else _squeeze(r, axis % aval_of(r).ndim)


def dynamic_update_slice_in_dim(operand, update, start_index, axis: int):
    """``operand`` with ``update`` written along ``axis`` at a (possibly traced) ``start_index``."""
    x = _operand(operand)
    nd = aval_of(x).ndim
    starts = [0] * nd
    starts[axis % nd] = start_index
    return dynamic_update_slice(x, update, starts)


# ------------------------------------------------------------------ reductions along an axis
def argmax(operand, axis: int, index_dtype):
    """Index of the maximum along ``axis`` as ``index_dtype``, as ``jax.lax.argmax``."""
    return astype(_argmax(operand, axis), index_dtype)


def argmin(operand, axis: int, index_dtype):
    """Index of the minimum along ``axis`` as ``index_dtype``, as ``jax.lax.argmin``."""
    return astype(_argmin(operand, axis), index_dtype)


def _cumulative(fn):
    def op(operand, axis: int = 0, reverse: bool = False):
        x = _operand(operand)
        if reverse:
            return flip(fn(flip(x, axis), axis), axis)
        return fn(x, axis)
    op.__name__ = fn.__name__
    op.__doc__ = f"``lax.{fn.__name__}`` (``reverse=True`` accumulates from the end)."
    return op


cumsum, cumprod = _cumulative(_cumsum), _cumulative(_cumprod)
cummax, cummin = _cumulative(_cummax), _cumulative(_cummin)


_locate_module(globals(), __name__, prefix="lax.")
