"""NumPy-named functions that work on arrays (eagerly) and on traced values (recording nodes).

``import jitgraph.numpy as jnp``. Dtype promotion follows NumPy 2 with weak Python scalars
(``float32_array * 2.0`` stays float32). Everything here is a composition of primitives from
``jitgraph.ops``; nothing else knows how to compute.
"""
from __future__ import annotations

import builtins
import functools
import types
from typing import Any

import numpy as np

from . import dtypes
from .core import Tracer, aval_of, bind
from .errors import ConcretizationError, ShapeError

# dtypes, re-exported under NumPy's names
bool_ = dtypes.bool_
int32 = dtypes.int32
int64 = dtypes.int64
float32 = dtypes.float32
float64 = dtypes.float64
inf = np.inf
nan = np.nan
pi = np.pi
e = np.e
newaxis = None
ndarray = np.ndarray


# ------------------------------------------------------------------ operands and promotion
def _operand(x: Any, name: str = "argument") -> Any:
    """Accept tracers, arrays, Python scalars and (regular) nested lists; reject the rest."""
    if isinstance(x, Tracer):
        return x
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        return x
    if isinstance(x, np.ndarray):
        if x.dtype in dtypes.SUPPORTED:
            return x
        return x.astype(_canonical(x.dtype, name))
    if isinstance(x, np.generic):
        return np.asarray(x, _canonical(x.dtype, name))
    if isinstance(x, (list, tuple)):
        if any(isinstance(e, Tracer) for e in _iter_nested(x)):
            rows = [_operand(e, name) for e in x]
            shapes = {aval_of(r).shape for r in rows}
            if len(shapes) > 1:
                raise ValueError(f"{name}: cannot make an array from a ragged nested sequence "
                                 f"(rows of shapes {sorted(shapes)}); all rows must have the "
                                 "same length")
            return stack(rows)
        try:
            arr = np.asarray(x)
        except ValueError as err:
            raise ValueError(f"{name}: cannot make an array from a ragged nested sequence "
                             f"({err}); all rows must have the same length") from None
        if arr.dtype == object:
            raise ValueError(f"{name}: cannot make an array from a ragged nested sequence")
        if arr.dtype.kind in "US":
            raise TypeError(f"{name}: strings are not arrays (got {x!r:.60})")
        return arr.astype(_canonical(arr.dtype, name))
    if x is None:
        raise TypeError(f"{name}: None is not an array")
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{name}: a string is not an array (got {x!r:.60})")
    if hasattr(x, "__array__"):
        return _operand(np.asarray(x), name)
    raise TypeError(f"{name}: expected an array, scalar or traced value, got {type(x).__name__}")


def _canonical(dtype, name):
    try:
        return dtypes.canonical(dtype)
    except TypeError as err:
        raise TypeError(f"{name}: {err}") from None


def _iter_nested(x):
    for e in x:
        if isinstance(e, (list, tuple)):
            yield from _iter_nested(e)
        else:
            yield e


def _dtype_weak(x) -> tuple[np.dtype, bool]:
    a = aval_of(x)
    return a.dtype, a.weak


def _cast(x, dtype):
    dtype = np.dtype(dtype)
    if isinstance(x, Tracer):
        return x if x.dtype == dtype else bind(_P.convert, x, dtype=dtype)
    if isinstance(x, np.ndarray):
        return x if x.dtype == dtype else x.astype(dtype)
    return np.asarray(x, dtype)


def _promote(*xs, float_only: bool = False):
    xs = [_operand(x, f"argument {i}" if len(xs) > 1 else "argument") for i, x in enumerate(xs)]
    dtype, _ = dtypes.result_type(*[_dtype_weak(x) for x in xs])
    if float_only and not dtypes.is_float(dtype):
        dtype = float64
    return [_cast(x, dtype) for x in xs]


def asarray(x, dtype=None):
    """An array (NumPy) or the traced value itself, optionally cast."""
    x = _operand(x)
    if dtype is not None:
        return _cast(x, dtypes.canonical(dtype))
    if isinstance(x, Tracer):
        return x
    return np.asarray(x, dtype=aval_of(x).dtype)


array = asarray


def astype(x, dtype):
    return _cast(_operand(x), dtypes.canonical(dtype))


class _Prims:
    """Lazy access to primitives by name (ops import this module, so no import cycle)."""

    def __getattr__(self, name):
        from .core import PRIMITIVES
        from . import ops  # noqa: F401  (registers everything)
        p = PRIMITIVES[name]
        setattr(self, name, p)
        return p


_P = _Prims()


# ------------------------------------------------------------------ elementwise
def _unary(pname: str, float_only: bool = True, doc: str = ""):
    def fn(x):
        (x,) = _promote(x, float_only=float_only)
        return bind(getattr(_P, pname), x)
    fn.__name__ = pname
    fn.__doc__ = doc or f"Elementwise {pname}."
    return fn


negative = _unary("neg", float_only=False)
exp = _unary("exp")
log = _unary("log")
log1p = _unary("log1p")
expm1 = _unary("expm1")
sin = _unary("sin")
cos = _unary("cos")
tan = _unary("tan")
tanh = _unary("tanh")
sqrt = _unary("sqrt")
_floor = _unary("floor")


def floor(x):
    """Elementwise floor; integers and bools are returned unchanged, as NumPy 2."""
    x = _operand(x)
    if not dtypes.is_float(aval_of(x).dtype):
        return x if isinstance(x, Tracer) else asarray(x)
    return _floor(x)


abs = _unary("abs", float_only=False)
absolute = abs
sign = _unary("sign", float_only=False)
stop_gradient = _unary("stop_gradient", float_only=False,
                       doc="Identity whose gradient is zero.")


def _binary(pname: str, float_only: bool = False):
    def fn(x, y):
        x, y = _promote(x, y, float_only=float_only)
        return bind(getattr(_P, pname), x, y)
    fn.__name__ = pname
    return fn


add = _binary("add")
subtract = _binary("sub")
multiply = _binary("mul")
true_divide = _binary("div", float_only=True)
divide = true_divide
maximum = _binary("max")
minimum = _binary("min")
greater = _binary("gt")
greater_equal = _binary("ge")
less = _binary("lt")
less_equal = _binary("le")
equal = _binary("eq")
not_equal = _binary("ne")
mod = _binary("mod")
remainder = mod


def floor_divide(x, y):
    x, y = _promote(x, y)
    if dtypes.is_float(_dtype_weak(x)[0]):
        return floor(x / y)
    return bind(_P.floordiv, x, y)


def _as_bool(x):
    x = _operand(x)
    return x if aval_of(x).dtype == bool_ else not_equal(x, 0)


def logical_and(x, y):
    return bind(_P.logical_and, _as_bool(x), _as_bool(y))


def logical_or(x, y):
    return bind(_P.logical_or, _as_bool(x), _as_bool(y))


def logical_not(x):
    return bind(_P.logical_not, _as_bool(x))


def power(x, y):
    """x ** y. Small integer exponents become multiplications (exact, and cheap to compile)."""
    x = _operand(x, "argument 0")
    yo = _operand(y, "argument 1")
    out, _ = dtypes.result_type(_dtype_weak(x), _dtype_weak(yo))
    if (isinstance(y, (int, np.integer)) and not isinstance(y, (bool, np.bool_))
            and 0 <= y <= 4):
        x = _cast(x, out) if isinstance(x, Tracer) or not isinstance(x, (bool, int, float)) else x
        if y == 0:
            return ones_like(x) if isinstance(x, Tracer) else np.ones_like(np.asarray(x, out))
        r = x
        for _ in range(int(y) - 1):
            r = multiply(r, x)
        return r
    if not dtypes.is_float(out):
        # integer powers are computed in float64 and rounded (exact below 2**53)
        xf, yf = _promote(x, yo, float_only=True)
        return astype(floor(bind(_P.pow, xf, yf) + 0.5), out)
    x, y = _promote(x, yo)
    return bind(_P.pow, x, y)


def square(x):
    return multiply(x, x)


def reciprocal(x):
    return true_divide(1.0, x)


def where(condition, x=None, y=None):
    """Select ``x`` where ``condition`` holds, else ``y`` (the one-argument form is not traceable)."""
    if x is None or y is None:
        raise TypeError("jnp.where(condition) has a data-dependent shape; pass both x and y "
                        "(jnp.where(condition, x, y))")
    c = _as_bool(condition)
    x, y = _promote(x, y)
    return bind(_P.select, c, x, y)


def clip(x, a_min=None, a_max=None):
    if a_min is not None:
        x = maximum(x, a_min)
    if a_max is not None:
        x = minimum(x, a_max)
    return x


def isnan(x):
    return not_equal(x, x)


def isinf(x):
    return equal(abs(x), inf)


def isfinite(x):
    return logical_not(logical_or(isnan(x), isinf(x)))


# ------------------------------------------------------------------ reductions
def _here() -> str:
    """The user's source line, for error messages."""
    from .errors import user_frame, where as _where
    return _where(user_frame(2))


def _axes(x, axis, op: str = ""):
    from .ops.reductions import normalize_axes
    try:
        return normalize_axes(axis, aval_of(x).ndim)
    except (ShapeError, TypeError) as err:
        raise ShapeError(f"{op + ': ' if op else ''}{err} (array shape {aval_of(x).shape}) "
                         f"at {_here()}") from None


def _axis1(x, axis, op: str, ndim: int | None = None) -> int:
    """One axis in [-ndim, ndim), normalized; ``ndim`` defaults to the operand's rank."""
    nd = aval_of(x).ndim if ndim is None else ndim
    try:
        a = int(axis)
    except TypeError:
        raise TypeError(f"{op}: axis must be an integer, got {axis!r} at {_here()}") from None
    if not -nd <= a < nd:
        raise ShapeError(f"{op}: axis {a} is out of bounds for an array of dimension {nd} "
                         f"(array shape {aval_of(x).shape}) at {_here()}")
    return a % nd


def _keep(x, r, axes, keepdims):
    if not keepdims:
        return r
    from .ops.reductions import keepdims_shape
    return reshape(r, keepdims_shape(aval_of(x).shape, axes))


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
    from .ops.elementwise import broadcast_shapes
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
    return getitem(x, tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(len(shp))))


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


def take(x, indices, axis=None):
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


def take_along_axis(arr, indices, axis):
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


# ------------------------------------------------------------------ linear algebra
def matmul(a, b):
    """NumPy matmul: 1-d operands are promoted and squeezed, batch dims broadcast."""
    a, b = _promote(a, b)
    sa, sb = aval_of(a).shape, aval_of(b).shape
    if len(sa) == 0 or len(sb) == 0:
        raise ShapeError(f"matmul: operands must not be scalars, got {sa} and {sb}; use *")
    a2 = reshape(a, (1,) + sa) if len(sa) == 1 else a
    b2 = reshape(b, sb + (1,)) if len(sb) == 1 else b
    sa2, sb2 = aval_of(a2).shape, aval_of(b2).shape
    if sa2[-1] != sb2[-2]:
        from .errors import user_frame, where as _where
        raise ShapeError(f"matmul: contracting dimensions differ: {sa} @ {sb} ({sa2[-1]} != "
                         f"{sb2[-2]}) at {_where(user_frame(2))}; transpose an operand?")
    from .ops.elementwise import broadcast_shapes
    try:
        batch = broadcast_shapes(sa2[:-2], sb2[:-2])
    except ShapeError as err:
        raise ShapeError(f"matmul: batch dimensions of {sa} and {sb}: {err}") from None
    a2 = broadcast_to(a2, batch + sa2[-2:])
    b2 = broadcast_to(b2, batch + sb2[-2:])
    out = bind(_P.matmul, a2, b2)
    oshape = batch + ((sa2[-2],) if len(sa) > 1 else ()) + ((sb2[-1],) if len(sb) > 1 else ())
    return reshape(out, oshape)


def dot(a, b):
    a, b = _promote(a, b)
    sa, sb = aval_of(a).shape, aval_of(b).shape
    if len(sa) == 0 or len(sb) == 0:
        return multiply(a, b)
    if len(sa) <= 2 and len(sb) <= 2:
        return matmul(a, b)
    if len(sb) == 1:
        return matmul(a, b)
    # N-d dot: contract a's last axis with b's second-to-last
    bm = moveaxis(b, -2, 0)
    rest_b = aval_of(bm).shape[1:]
    r = matmul(reshape(a, (-1, sa[-1])), reshape(bm, (sb[-2], -1)))
    return reshape(r, sa[:-1] + rest_b)


def vdot(a, b):
    return sum(multiply(ravel(a), ravel(b)))


def inner(a, b):
    a, b = _promote(a, b)
    if aval_of(a).ndim == 0 or aval_of(b).ndim == 0:
        return multiply(a, b)
    return tensordot(a, b, axes=([-1], [-1]))


def outer(a, b):
    a, b = ravel(a), ravel(b)
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))


def tensordot(a, b, axes=2):
    a, b = _promote(a, b)
    sa, sb = aval_of(a).shape, aval_of(b).shape
    if isinstance(axes, int):
        ax_a = list(range(len(sa) - axes, len(sa)))
        ax_b = list(range(axes))
    else:
        ax_a = [int(i) % len(sa) for i in np.atleast_1d(axes[0])]
        ax_b = [int(i) % len(sb) for i in np.atleast_1d(axes[1])]
    if len(ax_a) != len(ax_b) or any(sa[i] != sb[j] for i, j in zip(ax_a, ax_b)):
        raise ShapeError(f"tensordot: contracted axes {ax_a} of {sa} and {ax_b} of {sb} "
                         "have different sizes")
    free_a = [i for i in range(len(sa)) if i not in ax_a]
    free_b = [i for i in range(len(sb)) if i not in ax_b]
    k = int(np.prod([sa[i] for i in ax_a], dtype=np.int64))
    at = reshape(transpose(a, free_a + ax_a), (-1, k))
    bt = reshape(transpose(b, ax_b + free_b), (k, -1))
    return reshape(matmul(at, bt), tuple(sa[i] for i in free_a) + tuple(sb[i] for i in free_b))


def einsum(subscripts: str, *operands):
    """einsum for one or two operands, lowered to transpose/reshape/sum and one matmul."""
    from .einsum import einsum as _einsum
    return _einsum(subscripts, *operands)


# ------------------------------------------------------------------ creation (constants)
def _dt(dtype, default=float64):
    return dtypes.canonical(dtype) if dtype is not None else default


def zeros(shape, dtype=None):
    return np.zeros(shape, _dt(dtype))


def ones(shape, dtype=None):
    return np.ones(shape, _dt(dtype))


def full(shape, fill_value, dtype=None):
    if isinstance(fill_value, Tracer):
        return broadcast_to(astype(fill_value, dtype) if dtype else fill_value, shape)
    d = _dt(dtype, dtypes.canonical(np.asarray(fill_value).dtype))
    return np.full(shape, fill_value, d)


def zeros_like(x, dtype=None):
    a = aval_of(_operand(x))
    return np.zeros(a.shape, _dt(dtype, a.dtype))


def ones_like(x, dtype=None):
    a = aval_of(_operand(x))
    return np.ones(a.shape, _dt(dtype, a.dtype))


def full_like(x, fill_value, dtype=None):
    a = aval_of(_operand(x))
    return full(a.shape, fill_value, _dt(dtype, a.dtype))


def arange(start, stop=None, step=1, dtype=None):
    for v in (start, stop, step):
        if isinstance(v, Tracer):
            raise TypeError("arange needs concrete (static) bounds, got a traced value; the "
                            "shape of an array must be known at trace time")
    r = np.arange(start, stop, step) if stop is not None else np.arange(start)
    return r.astype(_dt(dtype, dtypes.canonical(r.dtype)))


def eye(N, M=None, k=0, dtype=None):
    return np.eye(N, M, k, dtype=_dt(dtype))


def linspace(start, stop, num=50, endpoint=True, dtype=None):
    return np.linspace(start, stop, num, endpoint=endpoint).astype(_dt(dtype))


# ------------------------------------------------------------------ ndarray-like tracer methods
def _no_out(out, name) -> bool:
    if out is not None:
        raise TypeError(f"{name}: out= is not supported on traced values (arrays are immutable "
                        f"inside a trace); use the returned value, at {_here()}")
    return True


def _c_order(order) -> bool:
    if order not in ("C", None):
        raise TypeError(f"reshape: only order='C' is supported on traced values, got {order!r}")
    return True


def _bool_operands(op: str, *xs):
    """&, | and ~ are logical on bool values; NumPy's bitwise integer versions have no
    primitive, so they are refused rather than silently computed as logical operations."""
    for x in xs:
        d = aval_of(_operand(x)).dtype
        if d != bool_:
            raise TypeError(f"the operator {op} on a traced value of dtype {d} is not supported "
                            "(only bool operands: bitwise integer operations have no primitive);"
                            f" use jnp.logical_and/logical_or/logical_not or comparisons, at "
                            f"{_here()}")
    return xs


def _setitem(self, key, value):
    raise TypeError(f"traced values are immutable: x[...] = value is not supported (at "
                    f"{_here()}); build the new value instead, e.g. with jnp.where(mask, value, "
                    "x) or jnp.concatenate")


def _install_tracer_methods() -> None:
    T = Tracer
    T.__add__ = lambda s, o: add(s, o)
    T.__radd__ = lambda s, o: add(o, s)
    T.__sub__ = lambda s, o: subtract(s, o)
    T.__rsub__ = lambda s, o: subtract(o, s)
    T.__mul__ = lambda s, o: multiply(s, o)
    T.__rmul__ = lambda s, o: multiply(o, s)
    T.__truediv__ = lambda s, o: true_divide(s, o)
    T.__rtruediv__ = lambda s, o: true_divide(o, s)
    T.__floordiv__ = lambda s, o: floor_divide(s, o)
    T.__rfloordiv__ = lambda s, o: floor_divide(o, s)
    T.__mod__ = lambda s, o: mod(s, o)
    T.__rmod__ = lambda s, o: mod(o, s)
    T.__pow__ = lambda s, o: power(s, o)
    T.__rpow__ = lambda s, o: power(o, s)
    T.__matmul__ = lambda s, o: matmul(s, o)
    T.__rmatmul__ = lambda s, o: matmul(o, s)
    T.__neg__ = lambda s: negative(s)
    T.__pos__ = lambda s: s
    T.__abs__ = lambda s: abs(s)
    T.__gt__ = lambda s, o: greater(s, o)
    T.__ge__ = lambda s, o: greater_equal(s, o)
    T.__lt__ = lambda s, o: less(s, o)
    T.__le__ = lambda s, o: less_equal(s, o)
    T.__eq__ = lambda s, o: equal(s, o)
    T.__ne__ = lambda s, o: not_equal(s, o)
    T.__and__ = lambda s, o: logical_and(*_bool_operands("&", s, o))
    T.__rand__ = lambda s, o: logical_and(*_bool_operands("&", o, s))
    T.__or__ = lambda s, o: logical_or(*_bool_operands("|", s, o))
    T.__ror__ = lambda s, o: logical_or(*_bool_operands("|", o, s))
    T.__invert__ = lambda s: logical_not(*_bool_operands("~", s))
    T.__getitem__ = lambda s, k: getitem(s, k)
    T.__setitem__ = _setitem
    T.copy = lambda s: s
    T.T = property(lambda s: transpose(s))
    T.mT = property(lambda s: swapaxes(s, -1, -2))
    T.reshape = lambda s, *shape, order="C", copy=None: reshape(
        s, shape[0] if len(shape) == 1 else shape) if _c_order(order) else None
    T.transpose = lambda s, *axes: transpose(s, axes[0] if len(axes) == 1 else (axes or None))
    T.swapaxes = lambda s, a, b: swapaxes(s, a, b)
    T.squeeze = lambda s, axis=None: squeeze(s, axis)
    T.ravel = lambda s: ravel(s)
    T.flatten = lambda s: ravel(s)
    T.astype = lambda s, dtype: astype(s, dtype)
    # the methods also accept NumPy's ``out=None``/``dtype=None``/``order="C"``, which is what
    # np.sum(traced), np.mean(traced), np.reshape(traced, ...) pass when they defer to a method
    T.sum = lambda s, axis=None, dtype=None, out=None, keepdims=False: sum(
        s, axis, dtype, keepdims) if _no_out(out, "sum") else None
    T.mean = lambda s, axis=None, dtype=None, out=None, keepdims=False: mean(
        s if dtype is None else astype(s, dtype), axis, keepdims) if _no_out(out, "mean") else None
    T.max = lambda s, axis=None, out=None, keepdims=False: max(
        s, axis, keepdims) if _no_out(out, "max") else None
    T.min = lambda s, axis=None, out=None, keepdims=False: min(
        s, axis, keepdims) if _no_out(out, "min") else None
    T.prod = lambda s, axis=None, dtype=None, out=None, keepdims=False: prod(
        s if dtype is None else astype(s, dtype), axis, keepdims) if _no_out(out, "prod") else None
    T.var = lambda s, axis=None, dtype=None, out=None, ddof=0, keepdims=False: var(
        s if dtype is None else astype(s, dtype), axis, ddof, keepdims) \
        if _no_out(out, "var") else None
    T.std = lambda s, axis=None, dtype=None, out=None, ddof=0, keepdims=False: std(
        s if dtype is None else astype(s, dtype), axis, ddof, keepdims) \
        if _no_out(out, "std") else None
    T.argmax = lambda s, axis=None, out=None, keepdims=False: argmax(
        s, axis, keepdims) if _no_out(out, "argmax") else None
    T.argmin = lambda s, axis=None, out=None, keepdims=False: argmin(
        s, axis, keepdims) if _no_out(out, "argmin") else None
    T.dot = lambda s, o, out=None: dot(s, o) if _no_out(out, "dot") else None
    T.clip = lambda s, min=None, max=None, out=None: clip(s, min, max) \
        if _no_out(out, "clip") else None


_install_tracer_methods()


# ------------------------------------------------------------------ error locations
def _located(fn, name: str):
    """Errors from a jnp function name the function and the user's source line.

    Errors raised by ``bind`` already carry both (and name the primitive); the others (bad axes,
    bad indices, bad operands, ...) get them here, once, at the outermost user-facing call."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ShapeError, IndexError, TypeError, ValueError) as err:
            if isinstance(err, ConcretizationError) or getattr(err, "_jg_located", False):
                raise
            msg = str(err)
            loc = _here()
            if loc not in msg:      # (bind's errors already name the primitive and the line)
                msg = f"{msg}\n  at {loc}"
                if not msg.startswith(name + ":"):
                    msg = f"jnp.{name}: {msg}"
                err.args = (msg,)
            try:
                err._jg_located = True
            except AttributeError:  # pragma: no cover  (exceptions without a __dict__)
                pass
            raise
    return wrapper


for _name, _obj in list(globals().items()):
    if (not _name.startswith("_") and isinstance(_obj, types.FunctionType)
            and _obj.__module__ == __name__):
        globals()[_name] = _located(_obj, _name)
del _name, _obj
