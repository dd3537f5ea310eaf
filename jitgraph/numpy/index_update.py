"""Functional index updates, as JAX: ``x.at[idx].set(v)``, ``.add``, ``.multiply``, ``.min``,
``.max``, ``.get`` (``jnp.at(x)[idx]`` does the same on concrete arrays).

An index (ints, slices, None, Ellipsis, boolean masks, integer arrays) is first turned into
the flat positions it selects, by indexing an array of position numbers: with a static index
NumPy does it at trace time, with traced index arrays it is a gather. Updates are then
``scatter_add``s (a compiled scatter kernel) and elementwise selects, so every mode is
differentiable in both ``x`` and the values. Duplicate positions accumulate for ``add``,
multiply together for ``multiply``, and the last one wins for ``set`` (static indices; with
traced indices ``set`` writes the mean of the duplicates).
"""
from __future__ import annotations

import numpy as np

from ..arrays import Array
from ..core import Tracer, aval_of, bind
from ._base import _P, _cast, _operand, asarray, int64, _locate_module
from .indexing import getitem, take
from .manipulation import broadcast_to, ravel, reshape
from .math import add, equal, greater, maximum, minimum, multiply, true_divide, where
from .reductions import max as reduce_max, min as reduce_min, prod as reduce_prod, sum as reduce_sum


def _positions(shape, key):
    """The flat positions ``x[key]`` reads, as a NumPy array (static key) or a traced one."""
    iota = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)
    keys = key if isinstance(key, tuple) else (key,)
    if any(isinstance(k, Tracer) for k in keys):
        return getitem(iota, key)
    return iota[key]


def _scatter(values, pos, size):
    """A flat array of ``size`` with ``values`` added at ``pos`` (both flat)."""
    return bind(_P.scatter_add, values, pos, shape=(size,))


def _rounds(pos):
    """Split flat static positions into rounds of distinct positions, in order of occurrence:
    round r holds the r-th occurrence of every position that repeats."""
    order = np.argsort(pos, kind="stable")
    sp = pos[order]
    start = np.r_[0, np.flatnonzero(sp[1:] != sp[:-1]) + 1] if sp.size else np.zeros(0, int)
    rank = np.empty(pos.size, np.int64)
    rank[order] = np.arange(pos.size) - np.repeat(start, np.diff(np.r_[start, pos.size]))
    return [np.flatnonzero(rank == r) for r in range(int(rank.max(initial=-1)) + 1)]


class _Update:
    def __init__(self, x, key):
        self.x = _operand(x)
        if not isinstance(self.x, Tracer):
            self.x = asarray(self.x)
        self.key = key
        self.shape = aval_of(self.x).shape
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.pos = _positions(self.shape, key)
        self.static = not isinstance(self.pos, Tracer)

    def _values(self, v):
        v = _cast(_operand(v), aval_of(self.x).dtype)
        return ravel(broadcast_to(v, aval_of(self.pos).shape))

    def _full(self, flat):
        return reshape(flat, self.shape)

    def get(self, **_):
        return getitem(self.x, self.key)

    def add(self, v, **_):
        v = self._values(v)
        return add(self.x, self._full(_scatter(v, ravel(self.pos), self.size)))

    def set(self, v, **_):
        v, pos = self._values(v), ravel(self.pos)
        if not self.static:
            ones = _cast(broadcast_to(np.ones((), aval_of(self.x).dtype), aval_of(pos).shape),
                         aval_of(self.x).dtype)
            count = _scatter(ones, pos, self.size)
            mean = true_divide(_scatter(v, pos, self.size), maximum(count, 1))
            return where(self._full(greater(count, 0)), self._full(_cast(mean, aval_of(self.x).dtype)), self.x)
        last = len(pos) - 1 - np.unique(pos[::-1], return_index=True)[1]
        mask = np.zeros(self.size, bool)
        mask[pos[last]] = True
        new = _scatter(take(v, last.astype(np.int64)), pos[last], self.size)
        return where(mask.reshape(self.shape), self._full(new), self.x)

    def _combine(self, v, combine, reduce, fill):
        v, pos = self._values(v), ravel(self.pos)
        if not self.static:      # dense: every update against every position
            hit = equal(reshape(pos, (-1, 1)), np.arange(self.size, dtype=np.int64))
            per = reduce(where(hit, reshape(v, (-1, 1)), fill), axis=0)
            touched = reduce_sum(hit.astype(int64), axis=0)
            return where(self._full(greater(touched, 0)), combine(self.x, self._full(per)), self.x)
        x = self.x
        for r in _rounds(pos):
            mask = np.zeros(self.size, bool)
            mask[pos[r]] = True
            new = self._full(_scatter(take(v, r.astype(np.int64)), pos[r], self.size))
            x = where(mask.reshape(self.shape), combine(x, new), x)
        return x

    def multiply(self, v, **_):
        return self._combine(v, multiply, reduce_prod, 1)

    mul = multiply

    def min(self, v, **_):
        return self._combine(v, minimum, reduce_min, np.inf)

    def max(self, v, **_):
        return self._combine(v, maximum, reduce_max, -np.inf)

    def divide(self, v, **_):
        return self.multiply(true_divide(1.0, v))

    def power(self, v, **_):
        raise NotImplementedError("x.at[idx].power is not supported; use x.at[idx].set(x[idx] ** v)")


class _IndexUpdateHelper:
    """``x.at``: ``x.at[idx]`` is the update's target; call ``.set(v)`` etc. on it."""

    def __init__(self, x):
        self.x = x

    def __getitem__(self, key):
        return _Update(self.x, key)


def at(x) -> _IndexUpdateHelper:
    """``jnp.at(x)[idx].set(v)``: the same as ``x.at[idx].set(v)``, also for NumPy arrays."""
    return _IndexUpdateHelper(x)


Tracer.at = property(lambda self: _IndexUpdateHelper(self))
Array.at = property(lambda self: _IndexUpdateHelper(self))   # eager results, as JAX arrays
_locate_module(globals(), __name__)
