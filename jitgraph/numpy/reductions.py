"""Reductions: sum, prod, max/min, mean/var/std, argmax/argmin."""
from __future__ import annotations

import builtins

import numpy as np

from .. import dtypes
from ..core import Tracer, aval_of, bind
from ._base import (_P, _axes, _axis1, _keep, _operand, asarray, astype, bool_, float64, int32,
                    int64, _locate_module)
from .math import sqrt, true_divide
from .manipulation import ravel


def _reduce(pname, x, axis, keepdims):
    x = _operand(x)
    axes = _axes(x, axis, pname.replace("reduce_", ""))
    if not axes:
        return x if isinstance(x, Tracer) else asarray(x)
    return _keep(x, bind(getattr(_P, pname), x, axes=axes), axes, keepdims)


def sum(x, axis=None, dtype=None, keepdims=False):
    x = _operand(x)
    d = aval_of(x).dtype
    if dtype is not None:
        x = astype(x, dtype)
    elif d == bool_ or d == int32:
        x = astype(x, int64)
    return _reduce("reduce_sum", x, axis, keepdims)


def prod(x, axis=None, keepdims=False):
    x = _operand(x)
    if aval_of(x).dtype in (bool_, int32):
        x = astype(x, int64)
    return _reduce("reduce_prod", x, axis, keepdims)


def max(x, axis=None, keepdims=False):
    return _reduce("reduce_max", x, axis, keepdims)


def min(x, axis=None, keepdims=False):
    return _reduce("reduce_min", x, axis, keepdims)


amax, amin = max, min


def _count(x, axes) -> int:
    shape = aval_of(x).shape
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


def mean(x, axis=None, keepdims=False):
    x = _operand(x)
    if not dtypes.is_float(aval_of(x).dtype):
        x = astype(x, float64)
    axes = _axes(x, axis, "mean")
    return true_divide(sum(x, axis=axes, keepdims=keepdims), builtins.max(_count(x, axes), 0) or np.nan)


def var(x, axis=None, ddof=0, keepdims=False):
    x = _operand(x)
    if not dtypes.is_float(aval_of(x).dtype):
        x = astype(x, float64)
    axes = _axes(x, axis, "var")
    centered = x - mean(x, axis=axes, keepdims=True)
    n = _count(x, axes) - ddof
    return true_divide(sum(centered * centered, axis=axes, keepdims=keepdims), n if n > 0 else np.nan)


def std(x, axis=None, ddof=0, keepdims=False):
    return sqrt(var(x, axis=axis, ddof=ddof, keepdims=keepdims))


def _arg(pname, x, axis, keepdims):
    x = _operand(x)
    if axis is None:
        x = ravel(x)
        axis = 0
    ax = _axis1(x, axis, pname)
    r = bind(getattr(_P, pname), x, axis=ax)
    return _keep(x, r, (ax,), keepdims)


def argmax(x, axis=None, keepdims=False):
    return _arg("argmax", x, axis, keepdims)


def argmin(x, axis=None, keepdims=False):
    return _arg("argmin", x, axis, keepdims)


_locate_module(globals(), __name__)
