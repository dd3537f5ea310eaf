"""Operands, dtype promotion, axis normalization and error locations shared by every
``jitgraph.numpy`` family module."""
from __future__ import annotations

import functools
import types
from typing import Any

import numpy as np

from .. import dtypes
from ..arrays import Array as _Result, as_array as _as_array
from ..core import PRIMITIVES, Tracer, aval_of, bind
# operands and promotion are the binders': jitgraph.numpy and the primitives' rules promote alike
from ..ops.binders import (cast as _cast, holds_tracer as _holds_tracer,  # noqa: F401
                           operand as _operand, promote as _promote)
from ..errors import AxisError, ConcretizationError, ShapeError
from ..traceback_filter import filtered as _filtered

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


_ndarray = np.ndarray


def _dtype_weak(x) -> tuple[np.dtype, bool]:
    a = aval_of(x)
    return a.dtype, a.weak


def _check_device(device, fn: str) -> None:
    """``device=`` of the creation functions (the Array API's keyword): arrays made here live
    on the host; a CUDA device is ``jitgraph.device_put``'s business."""
    if device is None or device == "cpu" or getattr(device, "platform", None) == "cpu":
        return
    raise ValueError(f"jnp.{fn}: device={device!r}: jitgraph.numpy makes host arrays; "
                     "use device='cpu' (or none), and jitgraph.device_put(x, 'cuda') for a GPU")


def asarray(x, dtype=None, *, copy=None, device=None):
    """An array (NumPy) or the traced value itself, optionally cast.

    ``copy``, as the Array API's and NumPy 2's ``asarray``: ``None`` (default) copies only
    where casting needs it, ``True`` always gives a new buffer, ``False`` never copies (a
    ``ValueError`` where it would have to)."""
    _check_device(device, "asarray")
    src = x
    x = _operand(x)
    if dtype is not None:
        x = _cast(x, dtypes.requested(dtype))
    if isinstance(x, Tracer):
        return x
    out = np.asarray(x, dtype=aval_of(x).dtype)
    if copy is None:
        return out
    shared = isinstance(src, np.ndarray) and np.may_share_memory(out, src)
    if copy:
        return out.copy() if shared else out
    if not shared:
        raise ValueError("jnp.asarray: copy=False, but the array cannot be made without a copy "
                         f"(from {type(src).__name__}"
                         f"{'' if dtype is None else f' to {np.dtype(dtypes.canonical(dtype))}'})"
                         "; use copy=None to copy where needed")
    return out


def array(x, dtype=None, copy=True, *, device=None):
    """A new array holding ``x`` (a copy, as ``numpy.array`` and ``jax.numpy.array`` make):
    writing into the caller's NumPy array, or donating the result, leaves the other alone.
    ``copy=False`` or ``None``: as ``asarray``."""
    _check_device(device, "array")
    return asarray(x, dtype, copy=None if copy is None else bool(copy))


def astype(x, dtype, *, copy=True, device=None):
    """``x`` cast to ``dtype`` (traced values too); the derivative passes through float casts.
    ``copy=False`` (the Array API's keyword) returns a concrete ``x`` itself when it already
    has the dtype; by default the result is a new array, as NumPy's ``astype``."""
    _check_device(device, "astype")
    src = _operand(x)
    out = _cast(src, dtypes.requested(dtype))
    if copy and out is src and isinstance(out, np.ndarray):
        return out.copy()
    return out


def _as_bool(x):
    """``x != 0`` (bool arrays as they are): the truth values the logical functions read."""
    x = _operand(x)
    return x if aval_of(x).dtype == bool_ else bind(_P.ne, *_promote(x, 0))


def _concrete(name: str, *xs) -> None:
    """Raise for traced arguments of a function whose result's shape depends on the values."""
    for x in xs:
        if isinstance(x, Tracer):
            raise ConcretizationError(
                f"jnp.{name}: the result's shape depends on the values, so it cannot be traced "
                f"(got a traced {x.aval}); call it outside jit/grad on concrete arrays")


class _Prims:
    """The registered primitives by name (``_P.exp``), each looked up once."""

    def __getattr__(self, name):
        p = PRIMITIVES[name]
        setattr(self, name, p)
        return p


_P = _Prims()


# ------------------------------------------------------------------ reductions
def _here() -> str:
    """The user's source line, for error messages."""
    from ..errors import user_frame, where as _where
    return _where(user_frame(2))


def _axes(x, axis, op: str = ""):
    if axis is None:            # every axis (the common case: a full reduction)
        return tuple(range(aval_of(x).ndim))
    from ..ops.reductions import normalize_axes
    try:
        return normalize_axes(axis, aval_of(x).ndim)
    except (ShapeError, TypeError) as err:
        cls = AxisError if isinstance(err, AxisError) else ShapeError
        raise cls(f"{op + ': ' if op else ''}{err} (array shape {aval_of(x).shape}) "
                  f"at {_here()}") from None


def _axis1(x, axis, op: str, ndim: int | None = None) -> int:
    """One axis in [-ndim, ndim), normalized; ``ndim`` defaults to the operand's rank."""
    nd = aval_of(x).ndim if ndim is None else ndim
    try:
        a = int(axis)
    except TypeError:
        raise TypeError(f"{op}: axis must be an integer, got {axis!r} at {_here()}") from None
    if not -nd <= a < nd:
        raise AxisError(f"{op}: axis {a} is out of bounds for an array of dimension {nd} "
                        f"(array shape {aval_of(x).shape}) at {_here()}")
    return a % nd


def _keep(x, r, axes, keepdims):
    if not keepdims:
        return r
    from ..ops.reductions import keepdims_shape
    from .manipulation import reshape
    return reshape(r, keepdims_shape(aval_of(x).shape, axes))


# ------------------------------------------------------------------ error locations
def _located(fn, name: str, prefix: str = "jnp."):
    """Errors from a jnp function name the function (``prefix + name``) and the user's
    source line.

    Results that are plain NumPy arrays (or tuples and lists of them) come back as
    ``arrays.Array`` views, so eager code can call JAX's array methods on them.

    Errors raised by ``bind`` already carry both (and name the primitive); the others (bad axes,
    bad indices, bad operands, ...) get them here, once, at the outermost user-facing call."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            r = fn(*args, **kwargs)
        except (ShapeError, IndexError, TypeError, ValueError) as err:
            if isinstance(err, ConcretizationError) or getattr(err, "_jg_located", False):
                raise _filtered(err)
            msg = str(err)
            loc = _here()
            if loc not in msg:      # (bind's errors already name the primitive and the line)
                msg = f"{msg}\n  at {loc}"
                if not msg.startswith((name + ":", prefix + name + ":")):
                    msg = f"{prefix}{name}: {msg}"
                err.args = (msg,)
            try:
                err._jg_located = True
            except AttributeError:  # pragma: no cover  (exceptions without a __dict__)
                pass
            raise _filtered(err)
        except Exception as err:
            raise _filtered(err)
        # eager results answer JAX's array API (``.at``, ``block_until_ready``)
        t = r.__class__
        if t is _ndarray:
            return r.view(_Result)
        return _as_array(r) if isinstance(r, (tuple, list, np.generic)) else r
    return wrapper


def _locate_module(namespace: dict, module: str, prefix: str = "jnp.") -> None:
    """Wrap every public function defined in ``module`` with ``_located`` (in place)."""
    for name, obj in list(namespace.items()):
        if (not name.startswith("_") and isinstance(obj, types.FunctionType)
                and obj.__module__ == module):
            namespace[name] = _located(obj, name, prefix)


# ------------------------------------------------------------------ scalar types and ndarray
class _ScalarType:
    """``jnp.float32`` and friends: usable wherever NumPy takes a dtype (``dtype=``,
    ``.astype``, ``==``), and callable like NumPy's scalar types: ``jnp.float64(x)`` casts a
    traced value (``np.float64(x)`` would need a concrete one)."""

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)
        self.__name__ = self.dtype.name

    def __call__(self, x):
        if _holds_tracer(x):
            return astype(x, self.dtype)
        r = self.dtype.type(x)          # (a NumPy scalar from a scalar, as NumPy's types)
        return r.view(_Result) if r.__class__ is _ndarray else r

    def __getattr__(self, name):            # kind, itemsize, name, type, char, ...
        return getattr(self.__dict__["dtype"], name)

    def __eq__(self, other):
        # as NumPy's dtype ==: what is not a dtype (a string NumPy cannot parse, a dict, an
        # object) is unequal, never an error, so dtypes can be dict keys beside other things
        try:
            return self.dtype == np.dtype(other)
        except (TypeError, ValueError, SyntaxError):
            return False

    def __hash__(self):
        return hash(self.dtype)

    def __repr__(self):
        return f"jnp.{self.dtype.name}"


class _ArrayMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, (np.ndarray, Tracer))

    def __subclasscheck__(cls, sub):
        return issubclass(sub, (np.ndarray, Tracer))


class ndarray(metaclass=_ArrayMeta):
    """``isinstance(x, jnp.ndarray)`` holds for NumPy arrays and for traced values alike (as
    ``jax.Array``), so code that checks for arrays keeps working inside grad and jit."""


Array = ndarray


_locate_module(globals(), __name__)
