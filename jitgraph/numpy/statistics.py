"""Statistics: average, median, percentile/quantile, cov, corrcoef; histogram (eager only).

Order statistics sort (a gather with ``argsort``'s permutation) and interpolate between two
static positions, so they are differentiable like NumPy's values are continuous.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..core import Tracer, aval_of
from ._base import _axes, _concrete, _operand, _promote, astype, float64, _locate_module
from .indexing import take
from .manipulation import broadcast_to, ravel, reshape, transpose
from .math import add, multiply, sqrt, subtract, true_divide, clip
from .products import matmul
from .reductions import mean, sum
from .sorting import sort


def _floats(x):
    x = _operand(x)
    return x if dtypes.is_float(aval_of(x).dtype) else astype(x, float64)


def average(a, axis=None, weights=None, returned=False, keepdims=False):
    """Weighted mean over ``axis``, as ``numpy.average`` (``returned=True`` also gives the
    weights' sum)."""
    a = _floats(a)
    if weights is None:
        avg = mean(a, axis, keepdims=keepdims)
        n = np.asarray(aval_of(a).size / max(aval_of(avg).size, 1), aval_of(avg).dtype)
        scl = multiply(n, 1.0) if not returned else np.broadcast_to(n, aval_of(avg).shape)
        return (avg, scl) if returned else avg
    a, w = _promote(a, weights, float_only=True)
    if aval_of(w).shape != aval_of(a).shape:
        if axis is None or aval_of(w).ndim != 1:
            raise ValueError(f"average: weights of shape {aval_of(w).shape} differ from the "
                             f"array's {aval_of(a).shape}; 1-d weights need an axis")
        ax = _axes(a, axis, "average")[0]
        shp = [1] * aval_of(a).ndim
        shp[ax] = aval_of(w).shape[0]
        w = reshape(w, shp)
    wsum = sum(broadcast_to(w, aval_of(a).shape), axis, keepdims=keepdims)
    avg = true_divide(sum(multiply(a, w), axis, keepdims=keepdims), wsum)
    return (avg, wsum) if returned else avg


def quantile(a, q, axis=None, keepdims=False, method="linear"):
    """Linear interpolation between the two order statistics around ``q * (n - 1)``."""
    if isinstance(q, Tracer):
        raise TypeError("quantile: q must be static (it decides which elements are read)")
    if method != "linear":
        raise ValueError(f"quantile: only method='linear' is supported, got {method!r}")
    a = _floats(a)
    q = np.asarray(q, dtype=np.float64)
    if ((q < 0) | (q > 1)).any():
        raise ValueError("quantiles must be in the range [0, 1]")
    if axis is None:
        axes = tuple(range(aval_of(a).ndim))
        x = ravel(a)
    else:
        axes = _axes(a, axis, "quantile")
        rest = [i for i in range(aval_of(a).ndim) if i not in axes]
        x = transpose(a, rest + list(axes))
        x = reshape(x, aval_of(x).shape[:len(rest)] + (-1,))
    ax = aval_of(x).ndim - 1
    s = sort(x, axis=-1)
    n = aval_of(s).shape[-1]
    pos = q * (n - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    frac = np.asarray(pos - lo, aval_of(s).dtype)
    vlo, vhi = take(s, lo, axis=ax), take(s, hi, axis=ax)
    r = add(vlo, multiply(subtract(vhi, vlo), frac))
    if q.ndim:        # NumPy puts q's axes first
        r = transpose(r, list(range(ax, ax + q.ndim)) + list(range(ax)))
    if keepdims:
        from ..ops.reductions import keepdims_shape
        r = reshape(r, q.shape + keepdims_shape(aval_of(a).shape, axes))
    return r


def percentile(a, q, axis=None, keepdims=False, method="linear"):
    """The ``q``-th percentile(s) over ``axis``; ``q`` must be static (it decides which
    elements are read)."""
    if isinstance(q, Tracer):
        raise TypeError("percentile: q must be static (it decides which elements are read)")
    return quantile(a, np.asarray(q, dtype=np.float64) / 100.0, axis, keepdims, method)


def median(a, axis=None, keepdims=False):
    """Median over ``axis`` (``quantile(a, 0.5)``)."""
    return quantile(a, 0.5, axis, keepdims)


def nanmedian(a, axis=None, keepdims=False):
    """``median`` of the non-NaN elements (eager only)."""
    _concrete("nanmedian", a)
    return np.nanmedian(np.asarray(a), axis=axis, keepdims=keepdims)


def cov(m, y=None, rowvar=True, bias=False, ddof=None):
    """Covariance of the rows (variables) of ``m`` (with ``y``'s rows appended)."""
    from .manipulation import atleast_2d, concatenate
    x = atleast_2d(_floats(m))
    if not rowvar and aval_of(x).shape[0] != 1:
        x = transpose(x)
    if y is not None:
        yy = atleast_2d(_floats(y))
        if not rowvar and aval_of(yy).shape[0] != 1:
            yy = transpose(yy)
        x = concatenate(_promote(x, yy), axis=0)
    n = aval_of(x).shape[1]
    d = (0 if bias else 1) if ddof is None else ddof
    xc = subtract(x, mean(x, axis=1, keepdims=True))
    c = true_divide(matmul(xc, transpose(xc)), float(n - d) if n - d > 0 else np.nan)
    return reshape(c, ()) if aval_of(c).shape == (1, 1) else c


def corrcoef(x, y=None, rowvar=True):
    """Pearson correlation coefficients of the rows (``rowvar=True``) or columns, as
    ``numpy.corrcoef``."""
    from .indexing import diagonal
    c = cov(x, y, rowvar)
    if aval_of(c).ndim == 0:
        return true_divide(c, c)
    d = sqrt(diagonal(c))
    r = true_divide(true_divide(c, reshape(d, (-1, 1))), reshape(d, (1, -1)))
    return clip(r, -1.0, 1.0)


def histogram(a, bins=10, range=None, density=None, weights=None):
    """NumPy's histogram (eager only: the counts are not differentiable in ``a``)."""
    _concrete("histogram", a, weights)
    return np.histogram(np.asarray(a), bins=bins, range=range, density=density,
                        weights=None if weights is None else np.asarray(weights))


def histogram_bin_edges(a, bins=10, range=None, weights=None):
    """The ``bins + 1`` edges ``numpy.histogram`` would use (eager only: they depend on the
    data)."""
    _concrete("histogram_bin_edges", a)
    return np.histogram_bin_edges(np.asarray(a), bins=bins, range=range)


_locate_module(globals(), __name__)
