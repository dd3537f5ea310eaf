"""Supported dtypes and NumPy-2-style promotion with weakly typed Python scalars.

A Python ``int``/``float``/``bool`` is *weak*: it takes the dtype of the array it meets
(``float32_array * 2.0`` stays float32), only moving up a kind (int array + 1.5 -> float64),
as in NumPy 2 and JAX.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import config

bool_ = np.dtype(np.bool_)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)

SUPPORTED = (bool_, int32, int64, float32, float64)
_KIND_ORDER = {"b": 0, "i": 1, "f": 2}


def default_for_kind(kind: str) -> np.dtype:
    """The dtype a weak (Python) value of this kind takes on its own: NumPy's int64/float64
    unless ``jitgraph.config`` sets 32-bit defaults."""
    if kind == "f":
        return config.float_dtype()
    return config.int_dtype() if kind == "i" else bool_


def canonical(dtype) -> np.dtype:
    """Map a requested dtype onto a supported one, or raise TypeError."""
    d = np.dtype(dtype)
    if d in SUPPORTED:
        return d
    if d.kind in "iu":
        return int64 if d.itemsize > 4 or d.kind == "u" and d.itemsize >= 4 else int32
    if d.kind == "f":
        return float64 if d.itemsize > 4 else float32
    raise TypeError(f"jitgraph does not support dtype {d}; use one of "
                    f"{', '.join(str(s) for s in SUPPORTED)}")


def requested(dtype) -> np.dtype:
    """A dtype a caller asked for (``dtype=``, ``astype``): honoured, or refused with a
    TypeError saying what to ask for instead, never silently changed (arrays of other dtypes
    passed in are still converted, as ``canonical`` says)."""
    d = np.dtype(dtype)
    c = canonical(d)
    if c != d:
        raise TypeError(f"dtype {d} is not supported (jitgraph computes in "
                        f"{', '.join(str(s) for s in SUPPORTED)}) and would have been "
                        f"changed to {c}: ask for {c}, or convert the result with NumPy "
                        f"(np.asarray(x).astype(np.{d.name}))")
    return c


def is_float(dtype) -> bool:
    return np.dtype(dtype).kind == "f"


def is_integer_or_bool(dtype) -> bool:
    return np.dtype(dtype).kind in "biu"


def python_scalar_dtype(x) -> np.dtype:
    if isinstance(x, bool):
        return bool_
    return default_for_kind("i" if isinstance(x, int) else "f")


_RESULT_TYPES: dict = {}   # (dtype, weak) pairs -> result: eager code promotes the same few
_RESULT_TYPES_MAX = 4096    # combinations over and over; the rule is pure
config.on_change(_RESULT_TYPES.clear)      # (given the default dtypes)


def result_type(*items: tuple[np.dtype, bool]) -> tuple[np.dtype, bool]:
    """Promote (dtype, weak) pairs; returns (dtype, weak)."""
    out = _RESULT_TYPES.get(items)
    if out is None:
        out = _result_type(items)
        if len(_RESULT_TYPES) < _RESULT_TYPES_MAX:
            _RESULT_TYPES[items] = out
    return out


def _result_type(items) -> tuple[np.dtype, bool]:
    strong = [d for d, w in items if not w]
    weak = [d for d, w in items if w]
    if strong:
        out = np.result_type(*strong)
        out = canonical(out)
        top_weak = max((_KIND_ORDER[d.kind] for d in weak), default=-1)
        if top_weak > _KIND_ORDER[out.kind]:
            out = default_for_kind("f" if top_weak == 2 else "i")
        return out, False
    kind = max(_KIND_ORDER[d.kind] for d in weak)
    return default_for_kind("bif"[kind]), True


def concrete_operand(x: Any, name: str = "argument") -> Any:
    """A value that is not traced, as an operand: Python scalars as they are (weak), arrays and
    NumPy scalars in the supported dtype of their kind, regular nested lists as arrays; a
    TypeError or ValueError naming ``name`` for anything else. Traced values are the caller's to
    pass through: this module sits below the IR, so ``vmap`` (below ``jitgraph.numpy``) and
    ``jnp``'s own operand check share it."""
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        return x
    if isinstance(x, np.ndarray):
        if x.dtype in SUPPORTED:
            return x
        return x.astype(_canonical_for(x.dtype, name))
    if isinstance(x, np.generic):
        return np.asarray(x, _canonical_for(x.dtype, name))
    if isinstance(x, (list, tuple)):
        try:
            arr = np.asarray(x)
        except ValueError as err:
            raise ValueError(f"{name}: cannot make an array from a ragged nested sequence "
                             f"({err}); all rows must have the same length") from None
        if arr.dtype == object:
            raise ValueError(f"{name}: cannot make an array from a ragged nested sequence")
        if arr.dtype.kind in "US":
            raise TypeError(f"{name}: strings are not arrays (got {x!r:.60})")
        if arr.dtype.kind in "if" and arr.dtype.itemsize == 8:     # Python numbers
            return arr.astype(default_for_kind(arr.dtype.kind))
        return arr.astype(_canonical_for(arr.dtype, name))
    if x is None:
        raise TypeError(f"{name}: None is not an array")
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{name}: a string is not an array (got {x!r:.60})")
    if hasattr(x, "__array__"):
        return concrete_operand(np.asarray(x), name)
    raise TypeError(f"{name}: expected an array, scalar or traced value, got {type(x).__name__}")


def _canonical_for(dtype, name: str) -> np.dtype:
    try:
        return canonical(dtype)
    except TypeError as err:
        raise TypeError(f"{name}: {err}") from None
