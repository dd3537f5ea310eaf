"""Sorting and searching: sort, argsort, partition, searchsorted; unique (eager only).

``argsort`` is the one primitive (a host step under ``jit``); ``sort`` gathers with it, so its
gradient scatters the cotangent back through the permutation.
"""
from __future__ import annotations

import numpy as np

from ..core import aval_of, bind
from ._base import _P, _axis1, _concrete, _operand, _promote, astype, int64, _locate_module
from .indexing import take_along_axis
from .manipulation import moveaxis, ravel, reshape
from .math import less, less_equal
from .reductions import sum


def argsort(x, axis=-1, kind=None, order=None, stable=True, descending=False):
    """Indices that sort ``x`` along ``axis`` (stable; NaN last, as NumPy)."""
    x = _operand(x)
    if axis is None:
        x, axis = ravel(x), 0
    ax = _axis1(x, axis, "argsort")
    if descending:
        from .math import negative
        x = negative(x)
    r = bind(_P.argsort, moveaxis(x, ax, -1))
    return moveaxis(r, -1, ax)


def sort(x, axis=-1, kind=None, order=None, stable=True, descending=False):
    """``x`` sorted along ``axis``; differentiable (a gather with the sorting permutation)."""
    x = _operand(x)
    if axis is None:
        x, axis = ravel(x), 0
    ax = _axis1(x, axis, "sort")
    return take_along_axis(x, argsort(x, ax, descending=descending), ax)


def partition(x, kth, axis=-1):
    """A valid partition: jitgraph returns the fully sorted array (every kth is in place)."""
    return sort(x, axis)


def argpartition(x, kth, axis=-1):
    """Indices that partition ``x`` around ``kth``: here the full ``argsort``, which is a valid
    partition."""
    return argsort(x, axis)


def searchsorted(a, v, side="left", sorter=None):
    """Insertion indices of ``v`` into sorted 1-d ``a`` (counted by comparisons, so traceable)."""
    a, v = _promote(a, v)
    if aval_of(a).ndim != 1:
        raise ValueError(f"searchsorted: a must be 1-d, got shape {aval_of(a).shape}")
    if sorter is not None:
        from .indexing import take
        a = take(a, sorter)
    vv = reshape(v, aval_of(v).shape + (1,))
    below = less(a, vv) if side == "left" else less_equal(a, vv)
    return sum(astype(below, int64), axis=-1)


def unique(x, return_index=False, return_inverse=False, return_counts=False, axis=None):
    """NumPy's unique (eager only: the output size depends on the values)."""
    _concrete("unique", x)
    return np.unique(np.asarray(x), return_index=return_index, return_inverse=return_inverse,
                     return_counts=return_counts, axis=axis)


_locate_module(globals(), __name__)
