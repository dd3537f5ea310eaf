"""Shape manipulation: reshape, transpose, axes moves, broadcasting, joining, flipping."""
from __future__ import annotations

import numpy as np

from ..core import Tracer, aval_of, bind
from ..errors import ShapeError
from ._base import _P, _axes, _axis1, _here, _operand, _promote, asarray, _locate_module


# ------------------------------------------------------------------ shapes
def shape(x):
    return aval_of(_operand(x)).shape


def ndim(x):
    return aval_of(_operand(x)).ndim


def size(x):
    return aval_of(_operand(x)).size


def _resolve_shape(newshape, size_: int) -> tuple[int, ...]:
    if isinstance(newshape, (int, np.integer)):
        newshape = (int(newshape),)
    newshape = [int(d) for d in newshape]
    if newshape.count(-1) > 1:
        raise ShapeError("can only specify one unknown dimension (-1)")
    if -1 in newshape:
        known = int(np.prod([d for d in newshape if d != -1], dtype=np.int64))
        if known == 0 or size_ % known:
            raise ShapeError(f"cannot reshape array of size {size_} into shape {tuple(newshape)}")
        newshape[newshape.index(-1)] = size_ // known
    return tuple(newshape)


def reshape(x, newshape, *more):
    x = _operand(x)
    if more:
        newshape = (newshape,) + more
    a = aval_of(x)
    shp = _resolve_shape(newshape, a.size)
    if shp == a.shape:
        return x
    return bind(_P.reshape, x, shape=shp)


def ravel(x):
    return reshape(x, (-1,))


def transpose(x, axes=None):
    x = _operand(x)
    nd = aval_of(x).ndim
    if axes is None:
        perm = tuple(range(nd))[::-1]
    else:
        perm = tuple(_axis1(x, a, "transpose") for a in axes)
        if sorted(perm) != list(range(nd)):
            raise ShapeError(f"transpose: axes {tuple(axes)} are not a permutation of the "
                             f"{nd} axes of an array of shape {aval_of(x).shape} at {_here()}")
    if perm == tuple(range(nd)):
        return x
    return bind(_P.transpose, x, perm=perm)


def swapaxes(x, axis1, axis2):
    x = _operand(x)
    nd = aval_of(x).ndim
    perm = list(range(nd))
    a, b = _axis1(x, axis1, "swapaxes"), _axis1(x, axis2, "swapaxes")
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


def moveaxis(x, source, destination):
    x = _operand(x)
    nd = aval_of(x).ndim
    src = _axis1(x, source, "moveaxis")
    dst = _axis1(x, destination, "moveaxis")
    perm = [i for i in range(nd) if i != src]
    perm.insert(dst, src)
    return transpose(x, perm)


def expand_dims(x, axis):
    x = _operand(x)
    shp = list(aval_of(x).shape)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    nd = len(shp) + len(axes)
    norm = sorted(_axis1(x, ax, "expand_dims", nd) for ax in axes)
    if len(set(norm)) != len(norm):
        raise ShapeError(f"expand_dims: repeated axis in {axis} at {_here()}")
    for a in norm:
        shp.insert(a, 1)
    return reshape(x, shp)


def squeeze(x, axis=None):
    x = _operand(x)
    shp = aval_of(x).shape
    if axis is None:
        axes = tuple(i for i, d in enumerate(shp) if d == 1)
    else:
        axes = _axes(x, axis, "squeeze")
        bad = [a for a in axes if shp[a] != 1]
        if bad:
            raise ShapeError(f"squeeze: cannot squeeze axis {bad[0]} of size {shp[bad[0]]} "
                             f"(array shape {shp}) at {_here()}")
    return reshape(x, tuple(d for i, d in enumerate(shp) if i not in axes))


def broadcast_to(x, shape):
    x = _operand(x)
    shape = tuple(int(d) for d in ((shape,) if isinstance(shape, int) else shape))
    a = aval_of(x)
    if a.shape == shape:
        return x
    if not isinstance(x, Tracer):
        x = asarray(x)
    return bind(_P.broadcast_to, x, shape=shape)


def broadcast_arrays(*xs):
    from ..ops.elementwise import broadcast_shapes
    xs = [_operand(x) for x in xs]
    shp = broadcast_shapes(*(aval_of(x).shape for x in xs))
    return [broadcast_to(x, shp) for x in xs]


def concatenate(arrays, axis=0):
    if isinstance(arrays, Tracer) or not len(arrays):
        raise ValueError("need a non-empty sequence of arrays to concatenate")
    xs = _promote(*arrays)
    if aval_of(xs[0]).ndim == 0:
        raise ShapeError("zero-dimensional arrays cannot be concatenated")
    ax = _axis1(xs[0], axis, "concatenate")
    if len(xs) == 1:
        return xs[0]
    return bind(_P.concatenate, *xs, axis=ax)


def stack(arrays, axis=0):
    xs = [_operand(x) for x in arrays]
    if not xs:
        raise ValueError("need at least one array to stack")
    shapes = {aval_of(x).shape for x in xs}
    if len(shapes) > 1:
        raise ShapeError(f"all input arrays must have the same shape, got {sorted(shapes)}")
    nd = aval_of(xs[0]).ndim + 1
    ax = _axis1(xs[0], axis, "stack", nd)
    return concatenate([expand_dims(x, ax) for x in xs], axis=ax)


def flip(x, axis=None):
    x = _operand(x)
    shp = aval_of(x).shape
    axes = _axes(x, axis, "flip")
    if not isinstance(x, Tracer):
        x = asarray(x)
    from .indexing import getitem
    return getitem(x, tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(len(shp))))


_locate_module(globals(), __name__)
