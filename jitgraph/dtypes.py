"""Supported dtypes and NumPy-2-style promotion with weakly typed Python scalars.

A Python ``int``/``float``/``bool`` is *weak*: it takes the dtype of the array it meets
(``float32_array * 2.0`` stays float32), only moving up a kind (int array + 1.5 -> float64),
as in NumPy 2 and JAX.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from . import config

bool_ = np.dtype(np.bool_)
int32 = np.dtype(np.int32)
int64 = np.dtype(np.int64)
int8, int16 = np.dtype(np.int8), np.dtype(np.int16)
uint8, uint16 = np.dtype(np.uint8), np.dtype(np.uint16)
uint32, uint64 = np.dtype(np.uint32), np.dtype(np.uint64)
#: every integer dtype of the Array API standard, held and computed as it is: NumPy's
#: promotion between them is the standard's lattice (``uint8 + int8 -> int16``), and where the
#: standard leaves it open, ``uint64`` with a signed integer gives float64, as NumPy 2's
INTEGERS = (int8, int16, int32, int64, uint8, uint16, uint32, uint64)
float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
float16 = np.dtype(np.float16)
# ---- complex numbers: computed on the CPU target (the CUDA target refuses them)
complex64 = np.dtype(np.complex64)
complex128 = np.dtype(np.complex128)
COMPLEX = (complex64, complex128)
_KIND_ORDER = {"b": 0, "i": 1, "u": 1, "f": 2, "c": 3}   # (a weak int stays in an unsigned dtype)

# ---- bfloat16: NumPy has none; ml_dtypes (JAX's) adds it, with its casts and promotions.
# Importing ml_dtypes takes 0.7 s (its extension registers its types and casts), most of
# ``import jitgraph``; so it is imported when bfloat16 is asked for (``bfloat16_dtype``, the
# string "bfloat16", ``jnp.bfloat16``, this module's ``bfloat16``). An array of bfloat16
# cannot exist before ml_dtypes is imported: where a user or JAX imported it, the first
# unknown dtype that meets jitgraph (``canonical``, ``kind``, ``of_char``) adds it below.
# ``bfloat16`` stays out of the module's globals until then (``__getattr__``).


def _dtype_sets(narrow: tuple) -> None:
    """Set the dtype tables with these 16-bit floats."""
    global NARROW_FLOATS, NARROW_SET, SUPPORTED
    #: the 16-bit floats: stored as they are, computed in float32 (``core.bind`` widens their
    #: operands and rounds the results back, as XLA does), so a sum or a product of them
    #: accumulates in float32
    NARROW_FLOATS = narrow
    NARROW_SET = frozenset(NARROW_FLOATS)
    SUPPORTED = (bool_,) + INTEGERS + (float32, float64) + NARROW_FLOATS + COMPLEX


_dtype_sets((float16,))


def _bfloat16(importing: bool) -> np.dtype | None:
    """bfloat16 (None without ml_dtypes), added to the tables the first time; ``importing``:
    import ml_dtypes for it, else only where it is imported already (then None if not)."""
    g = globals()
    if "bfloat16" not in g:
        if not importing and "ml_dtypes" not in sys.modules:
            return None
        try:
            import ml_dtypes
        except ImportError:     # pragma: no cover - ml_dtypes ships with the test and cuda extras
            g["bfloat16"] = None
        else:
            g["bfloat16"] = np.dtype(ml_dtypes.bfloat16)
            _dtype_sets((float16, g["bfloat16"]))
    return g["bfloat16"]


def __getattr__(name: str) -> Any:
    if name == "bfloat16":
        return _bfloat16(True)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def is_complex(dtype) -> bool:
    """complex64 or complex128."""
    return np.dtype(dtype).kind == "c"


def is_inexact(dtype) -> bool:
    """A float or a complex dtype: what can be differentiated."""
    return kind(dtype) in "fc"


def real_dtype(dtype) -> np.dtype:
    """The real dtype of a complex one (complex64 -> float32; ``abs``, ``real``, ``imag``);
    other dtypes as they are."""
    d = np.dtype(dtype)
    return np.dtype(np.float32 if d == complex64 else np.float64) if d.kind == "c" else d


def complex_dtype(dtype) -> np.dtype:
    """The complex dtype of a float one (float32 -> complex64; float64 -> complex128)."""
    d = np.dtype(dtype)
    if d.kind == "c":
        return d
    return complex64 if d in (float32,) + NARROW_FLOATS else complex128

BFLOAT16_INSTALL = "bfloat16 needs ml_dtypes: pip install ml_dtypes (or 'jitgraph[cuda]')"


def bfloat16_dtype() -> np.dtype:
    """NumPy's dtype for bfloat16 (importing ml_dtypes), or an ImportError saying what to
    install."""
    bf = _bfloat16(True)
    if bf is None:
        raise ImportError(BFLOAT16_INSTALL)
    return bf


#: bfloat16's type character (ml_dtypes'), which ``np.dtype`` does not read back
_BFLOAT16_CHAR = "E"


def of_char(char: str) -> np.dtype:
    """The dtype of a type character (``dtype.char``, what signatures keep)."""
    if char == _BFLOAT16_CHAR:
        return bfloat16_dtype()
    return np.dtype(char)


def is_bfloat16(d: np.dtype) -> bool:
    """Whether dtype ``d`` is bfloat16 (a NumPy ``"V"`` type), without importing ml_dtypes:
    where it is bfloat16, ml_dtypes is imported already."""
    return d.kind == "V" and d == _bfloat16(False)


def kind(dtype) -> str:
    """``dtype.kind``, with bfloat16 counted as the float it is."""
    d = np.dtype(dtype)
    return "f" if is_bfloat16(d) else d.kind


def is_narrow(dtype) -> bool:
    """float16 or bfloat16: a storage type that jitgraph computes in float32."""
    return dtype in NARROW_SET


def storage(dtype) -> np.dtype:
    """The dtype compiled kernels see a buffer as: a 16-bit float's bits as uint16 (Numba's
    CPU target has no float16 and neither target knows bfloat16; the kernels convert with
    ``kernels/scalar.py``'s and ``kernels/cuda_scalar.py``'s helpers), others as they are."""
    d = np.dtype(dtype)
    return np.dtype(np.uint16) if d in NARROW_SET else d


def default_for_kind(kind: str) -> np.dtype:
    """The dtype a weak (Python) value of this kind takes on its own: NumPy's int64/float64
    unless ``jitgraph.config`` sets 32-bit defaults."""
    if kind == "f":
        return config.float_dtype()
    if kind == "c":
        return complex_dtype(config.float_dtype())
    return config.int_dtype() if kind == "i" else bool_


def accumulator(dtype) -> np.dtype:
    """The dtype ``sum``/``prod``/``cumsum`` compute ``dtype`` in when no ``dtype=`` is given
    (the standard's rule, NumPy's on 64-bit Linux): bool and the narrower signed integers in
    int64, the narrower unsigned ones in uint64, others in their own."""
    d = np.dtype(dtype)
    if d == bool_ or d.kind == "i" and d.itemsize < 8:
        return int64
    return uint64 if d.kind == "u" and d.itemsize < 8 else d


def canonical(dtype) -> np.dtype:
    """Map a requested dtype onto a supported one, or raise TypeError."""
    d = as_dtype(dtype)
    if d in SUPPORTED or is_bfloat16(d):
        return d
    if d.kind == "f":
        return float64 if d.itemsize > 4 else float32
    if d.kind == "c":
        return complex128 if d.itemsize > 8 else complex64
    raise TypeError(f"jitgraph does not support dtype {d}; use one of "
                    f"{', '.join(str(s) for s in SUPPORTED)}")


def as_dtype(dtype) -> np.dtype:
    """``np.dtype(dtype)``, with the name "bfloat16" too (which imports ml_dtypes)."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        return bfloat16_dtype()
    return np.dtype(dtype)


def requested(dtype) -> np.dtype:
    """A dtype a caller asked for (``dtype=``, ``astype``): honoured, or refused with a
    TypeError saying what to ask for instead, never silently changed (arrays of other dtypes
    passed in are still converted, as ``canonical`` says)."""
    d = as_dtype(dtype)
    c = canonical(d)
    if c != d:
        raise TypeError(f"dtype {d} is not supported (jitgraph computes in "
                        f"{', '.join(str(s) for s in SUPPORTED)}) and would have been "
                        f"changed to {c}: ask for {c}, or convert the result with NumPy "
                        f"(np.asarray(x).astype(np.{d.name}))")
    return c


def as_stored(a: np.ndarray) -> np.ndarray:
    """Array ``a``, flat and contiguous, as compiled kernels read it (``storage``)."""
    flat = np.ascontiguousarray(a).reshape(-1)
    return flat.view(storage(flat.dtype)) if flat.dtype in NARROW_SET else flat


def is_float(dtype) -> bool:
    return kind(dtype) == "f"


def is_integer_or_bool(dtype) -> bool:
    return np.dtype(dtype).kind in "biu"


def python_scalar_dtype(x) -> np.dtype:
    if isinstance(x, bool):
        return bool_
    if isinstance(x, complex):
        return default_for_kind("c")
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
        if top_weak > _KIND_ORDER[kind(out)]:
            # a weak complex meeting a float array keeps its precision (JAX: f32 + 1j -> c64)
            out = complex_dtype(out) if top_weak == 3 and kind(out) == "f" else \
                default_for_kind("bifc"[top_weak])
        return out, False
    top = max(_KIND_ORDER[d.kind] for d in weak)
    return default_for_kind("bifc"[top]), True


def concrete_operand(x: Any, name: str = "argument") -> Any:
    """A value that is not traced, as an operand: Python scalars as they are (weak), arrays and
    NumPy scalars in the supported dtype of their kind, regular nested lists as arrays; a
    TypeError or ValueError naming ``name`` for anything else. Traced values are the caller's to
    pass through: this module sits below the IR, so ``vmap`` (below ``jitgraph.numpy``) and
    ``jnp``'s own operand check share it."""
    if isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
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
        if arr.dtype in (np.dtype(float), np.dtype(int), np.dtype(complex)):   # Python numbers
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
