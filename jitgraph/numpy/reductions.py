"""Reductions: sum, prod, max/min, mean/var/std, argmax/argmin."""
from __future__ import annotations

import builtins

import numpy as np

from .. import dtypes
from ..core import Tracer, aval_of, bind
from ._base import (_P, _as_bool, _axes, _axis1, _keep, _operand, asarray, astype, bool_, float64, int32,
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
    """Sum over ``axis`` (all axes by default), as ``numpy.sum``."""
    x = _operand(x)
    d = aval_of(x).dtype
    if dtype is not None:
        x = astype(x, dtype)
    elif d == bool_ or d == int32:
        x = astype(x, int64)
    return _reduce("reduce_sum", x, axis, keepdims)


def prod(x, axis=None, dtype=None, keepdims=False):
    """Product over ``axis`` (all axes by default), as ``numpy.prod``: in ``dtype`` when given,
    else booleans and int32 multiply in int64."""
    x = _operand(x)
    if dtype is not None:
        x = astype(x, dtype)
    elif aval_of(x).dtype in (bool_, int32):
        x = astype(x, int64)
    return _reduce("reduce_prod", x, axis, keepdims)


def count_nonzero(x, axis=None, keepdims=False):
    """How many elements of ``x`` are not zero (``True`` for booleans; NaN counts), over
    ``axis`` (all axes by default), in the default integer dtype, as the Array API's and
    NumPy's ``count_nonzero``."""
    x = _operand(x)
    return sum(_as_bool(x), axis=axis, dtype=dtypes.default_for_kind("i"), keepdims=keepdims)


def max(x, axis=None, keepdims=False):
    """Maximum over ``axis`` (all axes by default); ties share the gradient, as in JAX."""
    return _reduce("reduce_max", x, axis, keepdims)


def min(x, axis=None, keepdims=False):
    """Minimum over ``axis`` (all axes by default); ties share the gradient, as in JAX."""
    return _reduce("reduce_min", x, axis, keepdims)


amax, amin = max, min


def _count(x, axes) -> int:
    shape = aval_of(x).shape
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


def mean(x, axis=None, keepdims=False):
    """Arithmetic mean over ``axis`` (all axes by default); integers give float64."""
    x = _operand(x)
    if not dtypes.is_inexact(aval_of(x).dtype):
        x = astype(x, float64)
    axes = _axes(x, axis, "mean")
    return true_divide(sum(x, axis=axes, keepdims=keepdims), builtins.max(_count(x, axes), 0) or np.nan)


def var(x, axis=None, ddof=0, keepdims=False, *, correction=None):
    """Variance over ``axis`` with ``ddof`` delta degrees of freedom (``correction``, the
    Array API's name for it, may be given instead)."""
    ddof = _correction(ddof, correction, "var")
    x = _operand(x)
    if not dtypes.is_inexact(aval_of(x).dtype):
        x = astype(x, float64)
    axes = _axes(x, axis, "var")
    centered = x - mean(x, axis=axes, keepdims=True)
    if dtypes.is_complex(aval_of(x).dtype):     # the mean of |x - mean|^2: a real variance
        from .math import abs as _abs
        centered = _abs(centered)
    n = _count(x, axes) - ddof
    return true_divide(sum(centered * centered, axis=axes, keepdims=keepdims), n if n > 0 else np.nan)


def _correction(ddof, correction, fn: str):
    if correction is None:
        return ddof
    if ddof:
        raise ValueError(f"jnp.{fn}: give ddof or correction (the same thing), not both")
    return correction


def std(x, axis=None, ddof=0, keepdims=False, *, correction=None):
    """sqrt(var); where the variance is 0 (one element, or all equal) the derivative is taken
    as 0 instead of 0 * inf (for a single element std is identically 0). ``correction``: the
    Array API's name for ``ddof``."""
    from .math import greater, where
    v = var(x, axis=axis, ddof=_correction(ddof, correction, "std"), keepdims=keepdims)
    pos = greater(v, 0)
    return where(pos, sqrt(where(pos, v, 1.0)), v)


def _arg(pname, x, axis, keepdims):
    x = _operand(x)
    if axis is None:
        x = ravel(x)
        axis = 0
    ax = _axis1(x, axis, pname)
    r = bind(getattr(_P, pname), x, axis=ax)
    return _keep(x, r, (ax,), keepdims)


def argmax(x, axis=None, keepdims=False):
    """Index of the maximum along ``axis`` (of the flattened array by default); integer, no
    derivative."""
    return _arg("argmax", x, axis, keepdims)


def argmin(x, axis=None, keepdims=False):
    """Index of the minimum along ``axis`` (of the flattened array by default); integer, no
    derivative."""
    return _arg("argmin", x, axis, keepdims)



# ------------------------------------------------------------------ logic reductions
def any(x, axis=None, keepdims=False):
    """Whether any element is true (a sum of the truth values, so size-0 gives False)."""
    from .math import greater
    return greater(sum(astype(_as_bool(x), int64), axis=axis, keepdims=keepdims), 0)


def all(x, axis=None, keepdims=False):
    """Whether every element (along ``axis``) is true, as ``numpy.all``; the result has no
    derivative."""
    from .math import equal, logical_not
    return equal(sum(astype(logical_not(_as_bool(x)), int64), axis=axis, keepdims=keepdims), 0)


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether ``a`` and ``b`` agree elementwise within ``atol + rtol * abs(b)``, as
    ``numpy.allclose``."""
    from .math import isclose
    return all(isclose(a, b, rtol, atol, equal_nan))


def array_equal(a, b, equal_nan=False):
    """Whether ``a`` and ``b`` have the same shape and elements, as ``numpy.array_equal``."""
    from .math import equal, isnan, logical_and, logical_or
    a, b = _operand(a), _operand(b)
    if aval_of(a).shape != aval_of(b).shape:
        return np.bool_(False)
    eq = equal(a, b)
    if equal_nan:
        eq = logical_or(eq, logical_and(isnan(a), isnan(b)))
    return all(eq)


def ptp(x, axis=None, keepdims=False):
    """Range (maximum minus minimum) over ``axis``."""
    from .math import subtract
    return subtract(max(x, axis, keepdims), min(x, axis, keepdims))


# ------------------------------------------------------------------ cumulative
def _scan(x, axis, combine, fill):
    """Inclusive prefix ``combine`` along ``axis`` by a log-depth scan of shifted copies.

    Only slices, joins and elementwise ops, so it fuses, compiles, and its derivatives (to any
    order) are those of the elementwise op: exact with zeros for products."""
    from .manipulation import concatenate, moveaxis
    from .indexing import getitem
    x = moveaxis(x, axis, -1)
    shp = aval_of(x).shape
    n = shp[-1]
    s = 1
    while s < n:
        pad = np.full(shp[:-1] + (s,), fill, aval_of(x).dtype)
        x = combine(x, concatenate([pad, getitem(x, (Ellipsis, slice(0, n - s)))], axis=-1))
        s *= 2
    return moveaxis(x, -1, axis)


def _cumulative(x, axis, dtype, name):
    x = _operand(x)
    d = aval_of(x).dtype
    if dtype is not None:
        x = astype(x, dtype)
    elif d == bool_ or d == int32:
        x = astype(x, int64)
    if axis is None:
        x, axis = ravel(x), 0
    return x, _axis1(x, axis, name)


def cumsum(x, axis=None, dtype=None):
    """Running sum along ``axis`` (of the flattened array by default), as ``numpy.cumsum``."""
    from .math import add
    x, ax = _cumulative(x, axis, dtype, "cumsum")
    return _scan(x, ax, add, 0)


def cumprod(x, axis=None, dtype=None):
    """Running product along ``axis`` (of the flattened array by default), as ``numpy.cumprod``."""
    from .math import multiply
    x, ax = _cumulative(x, axis, dtype, "cumprod")
    return _scan(x, ax, multiply, 1)


def cummax(x, axis=None):
    """Running maximum along ``axis`` (of the flattened array by default)."""
    from .math import maximum
    x, ax = _cumulative(x, axis, None, "cummax")
    return _scan(x, ax, maximum, -np.inf if dtypes.is_float(aval_of(x).dtype)
                 else np.iinfo(aval_of(x).dtype).min)


def cummin(x, axis=None):
    """Running minimum along ``axis`` (of the flattened array by default)."""
    from .math import minimum
    x, ax = _cumulative(x, axis, None, "cummin")
    return _scan(x, ax, minimum, np.inf if dtypes.is_float(aval_of(x).dtype)
                 else np.iinfo(aval_of(x).dtype).max)


def _cumulative_api(x, axis, dtype, include_initial: bool, name: str, scan, fill):
    """The standard's ``cumulative_*``: ``axis`` may be left out of a 1-d array only, and
    ``include_initial`` puts the empty sum (``fill``) first, one longer along ``axis``."""
    from .manipulation import concatenate
    x = _operand(x)
    nd = aval_of(x).ndim
    if axis is None:
        if nd != 1:
            raise ValueError(f"{name}: axis is required for an array of {nd} dimensions "
                             f"(shape {aval_of(x).shape}); only a 1-d array may leave it out")
        axis = 0
    r = scan(x, axis=axis, dtype=dtype)
    if not include_initial:
        return r
    ax = _axis1(r, axis, name)
    shp = list(aval_of(r).shape)
    shp[ax] = 1
    return concatenate([np.full(shp, fill, aval_of(r).dtype), r], axis=ax)


def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial: bool = False):
    """Running sum along ``axis``, as the Array API's ``cumulative_sum``: ``cumsum`` that
    needs ``axis`` beyond one dimension and, with ``include_initial=True``, starts with 0."""
    return _cumulative_api(x, axis, dtype, include_initial, "cumulative_sum", cumsum, 0)


def cumulative_prod(x, /, *, axis=None, dtype=None, include_initial: bool = False):
    """Running product along ``axis``, as the Array API's ``cumulative_prod``: ``cumprod``
    that needs ``axis`` beyond one dimension and, with ``include_initial=True``, starts
    with 1."""
    return _cumulative_api(x, axis, dtype, include_initial, "cumulative_prod", cumprod, 1)


def diff(x, n=1, axis=-1, prepend=None, append=None):
    """n-th forward difference along ``axis``."""
    from .indexing import getitem
    from .manipulation import broadcast_to, concatenate
    from .math import subtract
    x = _operand(x)
    ax = _axis1(x, axis, "diff")
    if prepend is not None or append is not None:
        parts = []
        for e in (prepend, x, append):
            if e is None:
                continue
            e = _operand(e)
            if aval_of(e).ndim == 0:
                shp = list(aval_of(x).shape)
                shp[ax] = 1
                e = broadcast_to(e, tuple(shp))
            parts.append(e)
        x = concatenate(parts, axis=ax)
    pre = (slice(None),) * ax
    for _ in range(int(n)):
        m = aval_of(x).shape[ax]
        x = subtract(getitem(x, pre + (slice(1, m),)), getitem(x, pre + (slice(0, builtins.max(m - 1, 0)),)))
    return x


def gradient(f, *varargs, axis=None, edge_order=1):
    """Central differences inside, one-sided at the edges (NumPy's, unit or scalar spacing)."""
    from .indexing import getitem
    from .manipulation import concatenate
    from .math import subtract
    f = _operand(f)
    if not dtypes.is_inexact(aval_of(f).dtype):
        f = astype(f, float64)
    nd = aval_of(f).ndim
    axes = list(range(nd)) if axis is None else [_axis1(f, a, "gradient") for a in
                                                   ((axis,) if isinstance(axis, int) else axis)]
    spacing = list(varargs) if len(varargs) > 1 else [varargs[0] if varargs else 1.0] * len(axes)
    out = []
    for ax, h in zip(axes, spacing):
        n = aval_of(f).shape[ax]
        if n < 2:
            raise ValueError("gradient: each dimension must have at least 2 elements")
        pre = (slice(None),) * ax
        sl = lambda a, b: getitem(f, pre + (slice(a, b),))      # noqa: E731
        inner = true_divide(subtract(sl(2, n), sl(0, n - 2)), 2.0 * h)
        first = true_divide(subtract(sl(1, 2), sl(0, 1)), h)
        last = true_divide(subtract(sl(n - 1, n), sl(n - 2, n - 1)), h)
        out.append(concatenate([first, inner, last], axis=ax))
    return out[0] if len(out) == 1 else tuple(out)


# ------------------------------------------------------------------ NaN-ignoring reductions
def _nan_filled(x, fill):
    from .math import isnan, where
    x = _operand(x)
    if not dtypes.is_inexact(aval_of(x).dtype):
        return x
    return where(isnan(x), fill, x)


def nansum(x, axis=None, dtype=None, keepdims=False):
    """``sum`` with NaNs counted as zero."""
    return sum(_nan_filled(x, 0.0), axis, dtype, keepdims)


def nanprod(x, axis=None, keepdims=False):
    """``prod`` with NaNs counted as one."""
    return prod(_nan_filled(x, 1.0), axis, keepdims=keepdims)


def nanmax(x, axis=None, keepdims=False):
    """``max`` ignoring NaNs."""
    return max(_nan_filled(x, -np.inf), axis, keepdims)


def nanmin(x, axis=None, keepdims=False):
    """``min`` ignoring NaNs."""
    return min(_nan_filled(x, np.inf), axis, keepdims)


def _nan_count(x, axis, keepdims):
    from .math import isnan, logical_not
    return sum(astype(logical_not(isnan(x)), float64), axis, keepdims=keepdims)


def nanmean(x, axis=None, keepdims=False):
    """``mean`` of the non-NaN elements."""
    x = _operand(x)
    if not dtypes.is_inexact(aval_of(x).dtype):
        x = astype(x, float64)
    n = _nan_count(x, axis, keepdims)
    return true_divide(nansum(x, axis, keepdims=keepdims), astype(n, aval_of(x).dtype))


def nanvar(x, axis=None, ddof=0, keepdims=False):
    """``var`` of the non-NaN elements."""
    from .math import isnan, subtract, where
    x = _operand(x)
    if not dtypes.is_float(aval_of(x).dtype):
        x = astype(x, float64)
    c = subtract(x, nanmean(x, axis, keepdims=True))
    c = where(isnan(c), 0.0, c)
    n = subtract(_nan_count(x, axis, keepdims), ddof)
    return true_divide(sum(c * c, axis, keepdims=keepdims), astype(n, aval_of(x).dtype))


def nanstd(x, axis=None, ddof=0, keepdims=False):
    """``std`` of the non-NaN elements."""
    return sqrt(nanvar(x, axis, ddof, keepdims))


def nanargmax(x, axis=None, keepdims=False):
    """``argmax`` ignoring NaNs."""
    return argmax(_nan_filled(x, -np.inf), axis, keepdims)


def nanargmin(x, axis=None, keepdims=False):
    """``argmin`` ignoring NaNs."""
    return argmin(_nan_filled(x, np.inf), axis, keepdims)


def nancumsum(x, axis=None, dtype=None):
    """``cumsum`` with NaNs counted as zero."""
    return cumsum(_nan_filled(x, 0.0), axis, dtype)


def nancumprod(x, axis=None, dtype=None):
    """``cumprod`` with NaNs counted as one."""
    return cumprod(_nan_filled(x, 1.0), axis, dtype)


_locate_module(globals(), __name__)
