"""Sorting and searching: sort, argsort, partition, searchsorted; unique (eager only).

``argsort`` is the one primitive (a host step under ``jit``); ``sort`` gathers with it, so its
gradient scatters the cotangent back through the permutation.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .. import dtypes
from ..core import aval_of, bind
from ._base import _P, _axis1, _concrete, _operand, _promote, astype, int64, _locate_module
from .indexing import take_along_axis
from .manipulation import moveaxis, ravel, reshape
from .math import bitwise_invert, less, less_equal, negative
from .reductions import sum


def argsort(x, axis=-1, kind=None, order=None, stable=True, descending=False):
    """Indices that sort ``x`` along ``axis`` (stable; NaN last, as NumPy)."""
    x = _operand(x)
    if axis is None:
        x, axis = ravel(x), 0
    ax = _axis1(x, axis, "argsort")
    if descending:      # an order-reversing map: ~x for integers and bools (-x wraps
        x = negative(x) if dtypes.kind(aval_of(x).dtype) in "fc" else bitwise_invert(x)  # 0, MIN
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


class UniqueAllResult(NamedTuple):
    """What ``unique_all`` returns (the Array API's field names)."""
    values: np.ndarray
    indices: np.ndarray
    inverse_indices: np.ndarray
    counts: np.ndarray


class UniqueCountsResult(NamedTuple):
    """What ``unique_counts`` returns."""
    values: np.ndarray
    counts: np.ndarray


class UniqueInverseResult(NamedTuple):
    """What ``unique_inverse`` returns."""
    values: np.ndarray
    inverse_indices: np.ndarray


def unique_values(x):
    """The sorted distinct values of ``x`` (flattened), as the Array API's ``unique_values``
    (eager only: the size depends on the values)."""
    _concrete("unique_values", x)
    return np.unique(np.asarray(x))


def unique_counts(x) -> UniqueCountsResult:
    """``(values, counts)`` of the distinct values of ``x`` (eager only)."""
    _concrete("unique_counts", x)
    return UniqueCountsResult(*np.unique(np.asarray(x), return_counts=True))


def unique_inverse(x) -> UniqueInverseResult:
    """``(values, inverse_indices)``: ``values[inverse_indices]`` rebuilds ``x`` (its shape, as
    NumPy 2's; eager only)."""
    _concrete("unique_inverse", x)
    a = np.asarray(x)
    v, inv = np.unique(a, return_inverse=True)
    return UniqueInverseResult(v, inv.reshape(a.shape))


def unique_all(x) -> UniqueAllResult:
    """``(values, indices, inverse_indices, counts)`` of the distinct values (eager only)."""
    _concrete("unique_all", x)
    a = np.asarray(x)
    v, idx, inv, cnt = np.unique(a, return_index=True, return_inverse=True, return_counts=True)
    return UniqueAllResult(v, idx, inv.reshape(a.shape), cnt)


def nonzero(x) -> tuple:
    """The indices of the non-zero elements, one array per axis, as ``numpy.nonzero`` (eager
    only: their number depends on the values; under ``jit`` use ``where`` with a mask)."""
    _concrete("nonzero", x)
    a = np.asarray(x)
    if a.ndim == 0:
        raise ValueError("jnp.nonzero: a 0-d array has no axes to index (NumPy 2 refuses it too)")
    return np.nonzero(a)


_locate_module(globals(), __name__)
