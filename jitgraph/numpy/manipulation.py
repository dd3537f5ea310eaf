"""Shape manipulation: reshape, transpose, axes moves, broadcasting, joining, flipping."""
from __future__ import annotations

import builtins

import numpy as np

from ..core import Tracer, aval_of, bind
from ..errors import ShapeError
from ._base import _P, _axes, _axis1, _here, _operand, _promote, asarray, _locate_module


# ------------------------------------------------------------------ shapes
def shape(x):
    """The shape of ``x`` (a tuple of Python ints, also for traced values)."""
    return aval_of(_operand(x)).shape


def ndim(x):
    """The number of dimensions of ``x`` (a Python int, also for traced values)."""
    return aval_of(_operand(x)).ndim


def isscalar(element) -> bool:
    """Whether ``element`` is a scalar: a Python or NumPy scalar, or an array (also a traced
    one) with no dimensions; as ``jax.numpy.isscalar``, so the answer is the same under jit."""
    if np.isscalar(element):
        return True
    if isinstance(element, (np.ndarray, Tracer)):
        return aval_of(element).ndim == 0
    return False


def size(x):
    """The number of elements of ``x`` (a Python int, also for traced values)."""
    return aval_of(_operand(x)).size


def _resolve_shape(newshape, size_: int) -> tuple[int, ...]:
    if type(newshape) is tuple and all(type(d) is int for d in newshape) \
            and -1 not in newshape:
        return newshape            # already resolved (the shape rule checks the size)
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


def reshape(x, shape=None, *more, newshape=None, copy=None):
    """``x`` with a new shape of the same size (one dimension may be -1), as the Array API's
    ``reshape(x, shape)``; ``reshape(x, 2, 3)`` and NumPy 1's ``newshape=`` also work.
    ``copy`` is accepted and unused, as JAX's: jitgraph's arrays are values, never changed in
    place, so a copy and a view cannot be told apart."""
    x = _operand(x)
    if newshape is not None:
        if shape is not None or more:
            raise TypeError("jnp.reshape: give the new shape once (shape or newshape=)")
        shape = newshape
    if shape is None:
        raise TypeError("jnp.reshape: the new shape is missing")
    newshape = (shape,) + more if more else shape
    a = aval_of(x)
    shp = _resolve_shape(newshape, a.size)
    if shp == a.shape:
        return x
    return bind(_P.reshape, x, shape=shp)


def ravel(x):
    """``x`` flattened to 1-D in C order."""
    return reshape(x, (-1,))


def transpose(x, axes=None):
    """``x`` with its axes reversed or permuted by ``axes``."""
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
    """``x`` with ``axis1`` and ``axis2`` exchanged."""
    x = _operand(x)
    nd = aval_of(x).ndim
    perm = list(range(nd))
    a, b = _axis1(x, axis1, "swapaxes"), _axis1(x, axis2, "swapaxes")
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


def moveaxis(x, source, destination):
    """Move axes to new positions (ints or equal-length sequences of ints, as NumPy)."""
    x = _operand(x)
    nd = aval_of(x).ndim
    seq = not isinstance(source, (int, np.integer))
    srcs = [_axis1(x, s, "moveaxis") for s in (source if seq else (source,))]
    dsts = [_axis1(x, d, "moveaxis") for d in (destination if seq else (destination,))]
    if len(srcs) != len(dsts):
        raise ValueError("moveaxis: `source` and `destination` arguments must have the same "
                         "number of elements")
    perm = [i for i in range(nd) if i not in srcs]
    for d, s in sorted(zip(dsts, srcs)):
        perm.insert(d, s)
    return transpose(x, perm)


def expand_dims(x, axis):
    """``x`` with a new axis of length 1 at ``axis`` (an int or a tuple)."""
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
    """``x`` without its length-1 axes (or only those in ``axis``)."""
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
    """``x`` broadcast to ``shape``; its gradient sums over the broadcast axes."""
    x = _operand(x)
    shape = tuple(int(d) for d in ((shape,) if isinstance(shape, int) else shape))
    a = aval_of(x)
    if a.shape == shape:
        return x
    if not isinstance(x, Tracer):
        x = asarray(x)
    return bind(_P.broadcast_to, x, shape=shape)


def broadcast_arrays(*xs):
    """The arguments broadcast against each other to one shape, as ``numpy.broadcast_arrays``."""
    from ..ops.elementwise import broadcast_shapes
    xs = [_operand(x) for x in xs]
    shp = broadcast_shapes(*(aval_of(x).shape for x in xs))
    return [broadcast_to(x, shp) for x in xs]


def concatenate(arrays, axis=0):
    """The arrays joined along an existing ``axis``."""
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
    """The arrays joined along a new ``axis``."""
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
    """``x`` with the order of elements reversed along ``axis`` (all axes by default)."""
    x = _operand(x)
    shp = aval_of(x).shape
    axes = _axes(x, axis, "flip")
    if not isinstance(x, Tracer):
        x = asarray(x)
    from .indexing import getitem
    return getitem(x, tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(len(shp))))


# ------------------------------------------------------------------ more shape manipulation
def _atleast(nd, xs):
    out = []
    for x in xs:
        x = _operand(x)
        if not isinstance(x, Tracer):
            x = asarray(x)
        shp = aval_of(x).shape
        if len(shp) < nd:
            new = {0: (1,) * nd, 1: (1,) + shp + (1,) * (nd - 2)}.get(len(shp), (1,) + shp)
            x = reshape(x, new[:nd] if len(shp) == 0 else new)
        out.append(x)
    return out[0] if len(out) == 1 else out


def atleast_1d(*xs):
    """Each argument viewed with at least one dimension, as ``numpy.atleast_1d``."""
    return _atleast(1, xs)


def atleast_2d(*xs):
    """Each argument viewed with at least two dimensions, as ``numpy.atleast_2d``."""
    return _atleast(2, xs)


def atleast_3d(*xs):
    """(n,) -> (1, n, 1) and (m, n) -> (m, n, 1), as NumPy."""
    out = []
    for x in xs:
        x = _operand(x)
        nd = aval_of(x).ndim
        if nd == 0:
            x = reshape(x, (1, 1, 1))
        elif nd == 1:
            x = reshape(x, (1,) + aval_of(x).shape + (1,))
        elif nd == 2:
            x = reshape(x, aval_of(x).shape + (1,))
        elif not isinstance(x, Tracer):
            x = asarray(x)
        out.append(x)
    return out[0] if len(out) == 1 else out


def _take_slice(x, ax, start, stop):
    from .indexing import getitem
    return getitem(x, (slice(None),) * ax + (slice(start, stop),))


def array_split(x, indices_or_sections, axis=0):
    """Pieces along ``axis``: n nearly equal sections, or cut at the given indices."""
    x = _operand(x)
    ax = _axis1(x, axis, "array_split")
    n = aval_of(x).shape[ax]
    if isinstance(indices_or_sections, (int, np.integer)):
        k = int(indices_or_sections)
        if k <= 0:
            raise ValueError("number sections must be larger than 0")
        sizes = [n // k + 1] * (n % k) + [n // k] * (k - n % k)
        cuts = np.cumsum([0] + sizes)
    else:
        cuts = [0] + [builtins.min(builtins.max(int(i) if i >= 0 else int(i) + n, 0), n)
                      for i in indices_or_sections] + [n]
    return [_take_slice(x, ax, int(a), builtins.max(int(a), int(b)))
            for a, b in zip(cuts[:-1], cuts[1:])]


def split(x, indices_or_sections, axis=0):
    """``x`` split along ``axis`` into equal sections or at the given indices, as
    ``numpy.split``."""
    x = _operand(x)
    if isinstance(indices_or_sections, (int, np.integer)):
        n = aval_of(x).shape[_axis1(x, axis, "split")]
        if n % int(indices_or_sections):
            raise ValueError(f"array split does not result in an equal division: {n} elements "
                             f"into {int(indices_or_sections)} sections; use jnp.array_split")
    return array_split(x, indices_or_sections, axis)


def hsplit(x, s):
    """``x`` split along its second axis (the first for 1-D arrays), as ``numpy.hsplit``."""
    return split(x, s, axis=1 if ndim(x) > 1 else 0)


def vsplit(x, s):
    """``x`` split along its first axis, as ``numpy.vsplit``."""
    return split(x, s, axis=0)


def dsplit(x, s):
    """``x`` split along its third axis, as ``numpy.dsplit``."""
    return split(x, s, axis=2)


def hstack(xs):
    """The arrays joined along the second axis (the first for 1-D arrays), as ``numpy.hstack``."""
    xs = [atleast_1d(x) for x in xs]
    return concatenate(xs, axis=0 if aval_of(xs[0]).ndim == 1 else 1)


def vstack(xs):
    """The arrays stacked as rows (1-D arrays become rows of a 2-D array), as ``numpy.vstack``."""
    return concatenate([atleast_2d(x) for x in xs], axis=0)


row_stack = vstack


def dstack(xs):
    """The arrays stacked along a third axis, as ``numpy.dstack``."""
    return concatenate([atleast_3d(x) for x in xs], axis=2)


def column_stack(xs):
    """1-D arrays as the columns of a 2-D array (2-D ones stacked as they are), as
    ``numpy.column_stack``."""
    cols = []
    for x in xs:
        x = _operand(x)
        cols.append(reshape(x, (-1, 1)) if aval_of(x).ndim < 2 else x)
    return concatenate(cols, axis=1)


def append(x, values, axis=None):
    """``values`` appended to ``x`` along ``axis`` (flattened when ``axis`` is None), as
    ``numpy.append``."""
    if axis is None:
        return concatenate([ravel(x), ravel(values)])
    return concatenate([x, values], axis=axis)


class _IndexConcat:
    """``r_[...]`` and ``c_[...]``: arrays, scalars and slices (as aranges) joined together."""

    def __init__(self, column: bool):
        self.column = column

    def __getitem__(self, key):
        from .creation import arange, linspace
        key = key if isinstance(key, tuple) else (key,)
        parts = []
        for k in key:
            if isinstance(k, slice):
                step = 1 if k.step is None else k.step
                if isinstance(step, complex):
                    k = linspace(0 if k.start is None else k.start, k.stop, int(abs(step)))
                else:
                    k = arange(0 if k.start is None else k.start, k.stop, step)
            k = atleast_1d(k)
            parts.append(reshape(k, (-1, 1)) if self.column and aval_of(k).ndim == 1 else k)
        return concatenate(parts, axis=1 if self.column else 0)


r_ = _IndexConcat(False)
c_ = _IndexConcat(True)


def repeat(x, repeats, axis=None):
    """Each element repeated ``repeats`` times (a gather with static indices)."""
    from .indexing import take
    x = _operand(x)
    if axis is None:
        x, axis = ravel(x), 0
    ax = _axis1(x, axis, "repeat")
    n = aval_of(x).shape[ax]
    if isinstance(repeats, Tracer):
        raise TypeError("repeat: the repeat counts must be static (they decide the shape)")
    idx = np.repeat(np.arange(n, dtype=np.int64), np.asarray(repeats, dtype=np.int64))
    return take(x, idx, axis=ax)


def tile(x, reps):
    """``x`` repeated ``reps`` times along each axis (broadcast, then reshape)."""
    x = _operand(x)
    reps = (int(reps),) if isinstance(reps, (int, np.integer)) else tuple(int(r) for r in reps)
    shp = aval_of(x).shape
    nd = builtins.max(len(shp), len(reps))
    shp = (1,) * (nd - len(shp)) + shp
    reps = (1,) * (nd - len(reps)) + reps
    x = reshape(x, tuple(d for s in shp for d in (1, s)))
    x = broadcast_to(x, tuple(d for r, s in zip(reps, shp) for d in (r, s)))
    return reshape(x, tuple(r * s for r, s in zip(reps, shp)))


def roll(x, shift, axis=None):
    """Elements shifted cyclically along ``axis`` (two slices joined)."""
    x = _operand(x)
    if axis is None:
        return reshape(roll(ravel(x), shift, 0), aval_of(x).shape)
    shifts = (shift,) if isinstance(shift, (int, np.integer)) else tuple(shift)
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    if len(shifts) == 1 and len(axes) > 1:
        shifts = shifts * len(axes)
    for s, a in zip(shifts, axes):
        ax = _axis1(x, a, "roll")
        n = aval_of(x).shape[ax]
        if n == 0:
            continue
        s = int(s) % n
        if s:
            x = concatenate([_take_slice(x, ax, n - s, n), _take_slice(x, ax, 0, n - s)], axis=ax)
    return x


def rollaxis(x, axis, start=0):
    """``x`` with ``axis`` moved to position ``start``, as ``numpy.rollaxis``."""
    nd = ndim(x)
    a = _axis1(x, axis, "rollaxis")
    start = start + nd if start < 0 else start
    if a < start:
        start -= 1
    return moveaxis(x, a, start)


def rot90(x, k=1, axes=(0, 1)):
    """``x`` rotated by 90 degrees ``k`` times in the plane of ``axes``."""
    x = _operand(x)
    k %= 4
    a0, a1 = axes
    if k == 0:
        return x
    if k == 2:
        return flip(flip(x, a0), a1)
    if k == 1:
        return swapaxes(flip(x, a1), a0, a1)
    return flip(swapaxes(x, a0, a1), a1)


def fliplr(x):
    """``x`` reversed along axis 1."""
    return flip(x, 1)


def flipud(x):
    """``x`` reversed along axis 0."""
    return flip(x, 0)


def _pad_widths(pad_width, nd):
    pw = np.broadcast_to(np.asarray(pad_width, dtype=np.int64).reshape(-1, 2)
                         if np.ndim(pad_width) > 0 else np.asarray(pad_width), (nd, 2))
    if (pw < 0).any():
        raise ValueError("pad: pad widths must not be negative")
    return [(int(a), int(b)) for a, b in pw]


def pad(x, pad_width, mode="constant", constant_values=0):
    """Pad with a constant, the edge value or a reflection (modes NumPy names the same)."""
    from .indexing import take
    x = _operand(x)
    if not isinstance(x, Tracer):
        x = asarray(x)
    nd = aval_of(x).ndim
    widths = _pad_widths(pad_width, nd)
    cv = np.broadcast_to(np.asarray(constant_values, dtype=np.float64), (nd, 2))
    if mode == "constant" and not cv.any():
        # zeros around x: one layout op (an index map with a condition), no constant arrays,
        # whose sizes would follow x's and keep a program from taking sizes at run time
        shape = aval_of(x).shape
        return bind(_P.pad_slice, x, shape=tuple(d + lo + hi for d, (lo, hi) in zip(shape, widths)),
                    slices=tuple((lo, lo + d, 1) for d, (lo, _) in zip(shape, widths)))
    for ax, (lo, hi) in enumerate(widths):
        if not lo and not hi:
            continue
        n = aval_of(x).shape[ax]
        if mode == "constant":
            shp = list(aval_of(x).shape)
            parts = []
            for w, v in ((lo, cv[ax][0]), (hi, cv[ax][1])):
                shp[ax] = w
                parts.append(np.full(tuple(shp), v, dtype=aval_of(x).dtype))
            x = concatenate([parts[0], x, parts[1]], axis=ax)
            continue
        if mode == "edge":
            idx = np.clip(np.arange(-lo, n + hi), 0, n - 1)
        elif mode in ("reflect", "symmetric"):
            period = 2 * n - 2 if mode == "reflect" else 2 * n
            if n == 1 or period == 0:
                idx = np.zeros(n + lo + hi, dtype=np.int64)
            else:
                i = np.mod(np.arange(-lo, n + hi), period)
                idx = np.where(i < n, i, period - i - (0 if mode == "reflect" else 1))
        elif mode == "wrap":
            idx = np.mod(np.arange(-lo, n + hi), n)
        else:
            raise ValueError(f"pad: mode {mode!r} is not supported (constant, edge, reflect, "
                             "symmetric, wrap)")
        x = take(x, idx.astype(np.int64), axis=ax)
    return x


def meshgrid(*xs, indexing="xy", sparse=False, copy=True):
    """Coordinate arrays from 1-D coordinate vectors, as ``numpy.meshgrid`` (``indexing="xy"``
    or ``"ij"``)."""
    xs = [ravel(x) for x in xs]
    n = len(xs)
    shapes = []
    for i, x in enumerate(xs):
        s = [1] * n
        s[i] = -1
        if indexing == "xy" and n > 1 and i < 2:
            s[i], s[1 - i] = 1, 1
            s[1 - i] = -1
        shapes.append(s)
    out = [reshape(x, s) for x, s in zip(xs, shapes)]
    if sparse:
        return out
    return broadcast_arrays(*out)


_locate_module(globals(), __name__)
