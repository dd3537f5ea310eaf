"""Indexing: NumPy ``x[key]`` (basic and integer-array), take, take_along_axis."""
from __future__ import annotations

import builtins

import numpy as np

from ..core import Tracer, aval_of, bind
from ..errors import ShapeError
from ..ops import binders as _binders
from ._base import _P, _axis1, _operand, bool_, int64, _locate_module
from .manipulation import reshape, transpose, moveaxis, ravel


# ------------------------------------------------------------------ indexing
def _index_array(i, n_dim: int):
    i = _operand(i)
    d = aval_of(i).dtype
    if d == bool_:
        if isinstance(i, Tracer):
            raise IndexError("boolean mask indexing with a traced mask has a data-dependent "
                             "shape; use jnp.where(mask, x, 0) instead")
        return None
    if d.kind not in "iu":
        raise IndexError(f"arrays used as indices must be of integer type, got {d}")
    return i


def getitem(x, key):
    """NumPy indexing: basic slicing (steps, negative indices), ints, None, Ellipsis and
    integer arrays (gather). Out-of-range integer *arrays* are clamped, as in JAX."""
    if type(key) is int and type(x) is Tracer:
        r = _getitem_int(x, key)
        if r is not None:
            return r
    x = _operand(x)
    shp = aval_of(x).shape
    key = key if isinstance(key, tuple) else (key,)
    # boolean numpy masks become integer arrays
    expanded = []
    for k in key:
        if isinstance(k, np.ndarray) and k.dtype == bool:
            expanded.extend(np.nonzero(k))
        elif isinstance(k, list):
            expanded.append(np.asarray(k))
        else:
            expanded.append(k)
    key = expanded
    n_real = builtins.sum(1 for k in key if k is not None and k is not Ellipsis)
    if builtins.sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_real > len(shp):
        raise IndexError(f"too many indices for array: array is {len(shp)}-dimensional, but "
                         f"{n_real} were indexed")
    if builtins.any(k is Ellipsis for k in key):
        pos = [i for i, k in enumerate(key) if k is Ellipsis][0]
        key = key[:pos] + [slice(None)] * (len(shp) - n_real) + key[pos + 1:]
    else:
        key = key + [slice(None)] * (len(shp) - n_real)

    is_array = [isinstance(k, (np.ndarray, Tracer)) for k in key]
    has_adv = builtins.any(is_array)
    slices, squeeze_dims, adv, new_axes = [], [], [], []
    dim = 0
    out_pos = 0
    for k, arr in zip(key, is_array):
        if k is None:
            new_axes.append(out_pos)
            out_pos += 1
            continue
        n = shp[dim]
        if arr:
            slices.append((0, n, 1))
            adv.append((dim, k))
        elif isinstance(k, slice):
            slices.append(k.indices(n))
            out_pos += 1
        else:
            if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
                raise IndexError(f"only integers, slices, ellipsis, None and integer arrays are "
                                 f"valid indices, got {type(k).__name__} {k!r:.40}")
            i = int(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {dim} with size {n} "
                                 f"(array shape {shp})")
            i %= n
            if has_adv:
                slices.append((0, n, 1))
                adv.append((dim, np.asarray(i, dtype=int64)))
            else:
                slices.append((i, i + 1, 1))
                squeeze_dims.append(dim)
        dim += 1
    if new_axes and has_adv:
        raise IndexError("combining None/newaxis with integer-array indexing is not supported; "
                         "index first, then use jnp.expand_dims")
    if builtins.any(s != (0, n, 1) for s, n in zip(slices, shp)):
        x = bind(_P.slice, x, slices=tuple(tuple(int(v) for v in s) for s in slices))
    if adv:
        cur = aval_of(x).shape
        dims = [d for d, _ in adv]
        rest = [d for d in range(len(cur)) if d not in dims]
        x = transpose(x, dims + rest)
        idx = [_index_array(a, cur[d]) for d, a in adv]
        x = bind(_P.gather, x, *idx)
        contiguous = dims == list(range(dims[0], dims[0] + len(dims)))
        if contiguous and dims[0] > 0:
            nb = aval_of(x).ndim - len(rest)
            perm = list(range(nb, nb + dims[0])) + list(range(nb)) + list(range(nb + dims[0], aval_of(x).ndim))
            x = transpose(x, perm)
        return x
    if squeeze_dims or new_axes:
        cur = [d for i, d in enumerate(aval_of(x).shape) if i not in squeeze_dims]
        for p in new_axes:
            cur.insert(p, 1)
        x = reshape(x, tuple(cur))
    return x


def _getitem_int(x, i: int):
    """``x[i]`` for an in-range int: the nodes the general path records, without its key
    analysis (eager code indexes scalars out of small vectors often); None otherwise."""
    shp = x.gvar.aval.shape
    if not shp or not -shp[0] <= i < shp[0]:
        return None
    i %= shp[0]
    if shp[0] != 1:
        x = bind(_P.slice, x, slices=((i, i + 1, 1),) + tuple((0, n, 1) for n in shp[1:]))
    return reshape(x, shp[1:])


def take(x, indices, axis=None):
    """Elements of ``x`` at ``indices`` along ``axis``; out-of-range indices are clamped, as
    JAX does."""
    x = _operand(x)
    if axis is None:
        x, axis = ravel(x), 0
    ax = _axis1(x, axis, "take")
    nd = aval_of(x).ndim
    moved = moveaxis(x, ax, 0) if ax else x
    idx = _index_array(indices, aval_of(x).shape[ax])
    r = bind(_P.gather, moved, idx)
    k = aval_of(idx).ndim
    if ax:
        perm = list(range(k, k + ax)) + list(range(k)) + list(range(k + ax, k + nd - 1))
        r = transpose(r, perm)
    return r


def take_along_axis(arr, indices, axis=-1):
    """Elements of ``arr`` picked by ``indices`` along ``axis`` (one per position; the last
    axis by default, as the Array API's and NumPy 2.3's ``take_along_axis``)."""
    arr = _operand(arr)
    indices = _operand(indices)
    shp = aval_of(arr).shape
    ax = _axis1(arr, axis, "take_along_axis")
    ishp = aval_of(indices).shape
    if len(ishp) != len(shp):
        raise ShapeError(f"take_along_axis: indices {ishp} and array {shp} need the same rank")
    idx = []
    for d in range(len(shp)):
        if d == ax:
            idx.append(indices)
        else:
            s = [1] * len(shp)
            s[d] = shp[d]
            idx.append(np.arange(shp[d], dtype=int64).reshape(s))
    return bind(_P.gather, arr, *idx)


# ------------------------------------------------------------------ diagonals and triangles
def diagonal(x, offset=0, axis1=0, axis2=1):
    """The diagonal of the (axis1, axis2) planes, as a last axis (a gather, static indices)."""
    x = _operand(x)
    nd = aval_of(x).ndim
    if nd < 2:
        raise ShapeError(f"diagonal needs an array of at least 2 dimensions, got shape "
                         f"{aval_of(x).shape}")
    a1, a2 = _axis1(x, axis1, "diagonal"), _axis1(x, axis2, "diagonal")
    if a1 == a2:
        raise ValueError("diagonal: axis1 and axis2 cannot be the same")
    return _binders.diagonal(x, offset, a1, a2)


def diag(v, k=0):
    """1-d -> a 2-d array with ``v`` on diagonal ``k``; 2-d -> its diagonal ``k``."""
    from .math import where
    v = _operand(v)
    nd = aval_of(v).ndim
    if nd == 2:
        return diagonal(v, k)
    if nd != 1:
        raise ShapeError(f"diag: input must be 1-d or 2-d, got shape {aval_of(v).shape}")
    n = aval_of(v).shape[0] + builtins.abs(int(k))
    r, c = np.indices((n, n))
    on = (c - r) == int(k)
    src = np.where(on, r if k >= 0 else c, 0).astype(int64)
    if aval_of(v).shape[0] == 0:
        return np.zeros((n, n), aval_of(v).dtype)
    return where(on, take(v, src), 0)


def diagflat(v, k=0):
    """A 2-D array with the flattened ``v`` on its ``k``-th diagonal."""
    return diag(ravel(v), k)


def trace(x, offset=0, axis1=0, axis2=1):
    """Sum along the ``offset`` diagonal of ``axis1`` and ``axis2``."""
    from .reductions import sum
    return sum(diagonal(x, offset, axis1, axis2), axis=-1)


def tril(x, k=0):
    """``x`` with the elements above the ``k``-th diagonal set to zero."""
    x = _operand(x)
    if aval_of(x).ndim < 2:
        raise ShapeError(f"tril needs at least 2 dimensions, got shape {aval_of(x).shape}")
    return _binders.tril(x, k)


def triu(x, k=0):
    """``x`` with the elements below the ``k``-th diagonal set to zero."""
    x = _operand(x)
    if aval_of(x).ndim < 2:
        raise ShapeError(f"triu needs at least 2 dimensions, got shape {aval_of(x).shape}")
    return _binders.triu(x, k)


_locate_module(globals(), __name__)
