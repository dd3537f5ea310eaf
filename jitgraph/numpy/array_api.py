"""Names of the Python Array API standard that NumPy 2 spells differently or lacks, over the
NumPy-named functions: dtype queries (``finfo``, ``iinfo``, ``isdtype``, ``result_type``,
``can_cast``) and the standard's spellings of existing operations (``concat``,
``permute_dims``, ``matrix_transpose``, ``pow``, ``positive``, ``unstack``, ``vecdot``), and
``__array_namespace_info__``, what the namespace supports.
"""
from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .. import config, dtypes
from ..arrays import Array
from ..core import Tracer, aval_of
from ._base import _check_device, _locate_module, _operand, asarray
from .manipulation import concatenate, moveaxis, swapaxes, transpose
from .math import conjugate, multiply, power
from .reductions import sum as _sum

__all__ = ["finfo", "iinfo", "isdtype", "result_type", "can_cast", "concat", "permute_dims",
           "matrix_transpose", "pow", "positive", "unstack", "vecdot", "from_dlpack",
           "__array_namespace_info__", "ArrayNamespaceInfo"]

_KINDS = {"bool": "b", "signed integer": "i", "unsigned integer": "u", "integral": "iu",
          "real floating": "f", "complex floating": "c", "numeric": "iufc"}


def _dtype_of(x: Any) -> np.dtype:
    """The dtype of an array, a traced value, a dtype, a jnp or NumPy scalar type, or a dtype's
    name."""
    if isinstance(x, Tracer):
        return np.dtype(x.aval.dtype)
    if isinstance(x, (str, type)):        # (a NumPy scalar type's ``dtype`` is a descriptor)
        return dtypes.as_dtype(x)
    return np.dtype(getattr(x, "dtype", x))


def finfo(dtype: Any) -> np.finfo:
    """Machine limits of a float dtype (``eps``, ``max``, ``min``, ``tiny``, ``bits``), as
    ``numpy.finfo``; an array or traced value gives its dtype's."""
    d = _dtype_of(dtype)
    if dtypes.is_bfloat16(d):           # (NumPy's finfo does not know it; ml_dtypes' does)
        import ml_dtypes
        return ml_dtypes.finfo(d)
    return np.finfo(d)


def iinfo(dtype: Any) -> np.iinfo:
    """Machine limits of an integer dtype (``min``, ``max``, ``bits``), as ``numpy.iinfo``."""
    return np.iinfo(_dtype_of(dtype))


def isdtype(dtype: Any, kind: Any) -> bool:
    """Whether ``dtype`` is of ``kind``: a dtype, a kind name of the standard (``"bool"``,
    ``"signed integer"``, ``"unsigned integer"``, ``"integral"``, ``"real floating"``,
    ``"complex floating"``, ``"numeric"``), or a tuple of those."""
    d = np.dtype(dtype)
    if isinstance(kind, tuple):
        return any(isdtype(d, k) for k in kind)
    if isinstance(kind, str):
        if kind not in _KINDS:
            raise ValueError(f"jnp.isdtype: unknown kind {kind!r}; the kinds are {sorted(_KINDS)}")
        return dtypes.kind(d) in _KINDS[kind]
    return d == np.dtype(kind)


def result_type(*arrays_and_dtypes: Any) -> np.dtype:
    """The dtype an operation on these arrays, dtypes and Python scalars gives: jitgraph's
    promotion (NumPy 2's, Python scalars weak)."""
    if not arrays_and_dtypes:
        raise ValueError("jnp.result_type: at least one array or dtype is needed")
    items = []
    for a in arrays_and_dtypes:
        if isinstance(a, (bool, int, float, complex)):
            items.append((dtypes.python_scalar_dtype(a), True))
        else:
            items.append((_dtype_of(a), False))
    return np.dtype(dtypes.result_type(*items)[0])


def can_cast(from_: Any, to: Any) -> bool:
    """Whether a value of ``from_``'s dtype casts to ``to`` without changing kind downward
    (NumPy's ``same_kind`` rule is not it: the standard's is ``safe``)."""
    return bool(np.can_cast(_dtype_of(from_), np.dtype(to), casting="safe"))


def concat(arrays, axis: int | None = 0):
    """``concatenate`` under the standard's name (``axis=None`` joins them flattened)."""
    if axis is None:
        return concatenate([asarray(a).reshape(-1) for a in arrays], axis=0)
    return concatenate(arrays, axis=axis)


def permute_dims(x, axes):
    """``transpose(x, axes)`` under the standard's name (``axes`` required)."""
    return transpose(x, tuple(axes))


def matrix_transpose(x):
    """``x`` with its last two axes swapped (a stack of matrices transposed)."""
    x = _operand(x)
    if aval_of(x).ndim < 2:
        raise ValueError(f"jnp.matrix_transpose: needs at least 2 dimensions, got shape "
                         f"{aval_of(x).shape}")
    return swapaxes(x, -1, -2)


def pow(x1, x2):  # noqa: A001  (the standard's name)
    """``power`` under the standard's name."""
    return power(x1, x2)


def positive(x):
    """``+x``: the array itself (a copy of an array's values, for traced values the value)."""
    x = _operand(x)
    return x if isinstance(x, Tracer) else np.array(x, copy=True)


def unstack(x, axis: int = 0) -> tuple:
    """The slices of ``x`` along ``axis``, as a tuple (the inverse of ``stack``)."""
    moved = moveaxis(_operand(x), axis, 0)
    return tuple(moved[i] for i in range(aval_of(moved).shape[0]))


def vecdot(x1, x2, axis: int = -1):
    """The dot product of vectors along ``axis`` (broadcast over the other axes):
    ``sum(conj(x1) * x2, axis)``, in the operands' promoted dtype (``sum`` alone would widen
    int32 to int64, as NumPy's does)."""
    prod = multiply(conjugate(x1), x2)
    return _sum(prod, axis=axis, dtype=aval_of(prod).dtype)


def from_dlpack(x, /, *, device=None, copy=None):
    """An array of any object exporting ``__dlpack__`` (a NumPy array, a CPU tensor of
    another library), as the standard's: it shares the exporter's memory unless ``copy=True``
    (``copy=False`` refuses to copy); a host array, so ``device`` must be the host's."""
    _check_device(device, "from_dlpack")
    arr = np.from_dlpack(x) if copy is None else np.from_dlpack(x, copy=copy)
    return asarray(arr, copy=copy)


# the standard's dtypes that jitgraph.numpy computes in (those ``dtype=`` honours)
_STANDARD_DTYPES = tuple(n for n in ("bool", "int8", "int16", "int32", "int64", "uint8",
                                     "uint16", "uint32", "uint64", "float32", "float64",
                                     "complex64", "complex128")
                         if np.dtype(n) in dtypes.SUPPORTED)


class ArrayNamespaceInfo:
    """What ``jitgraph.numpy`` supports, as the Array API's inspection object (JAX's answers
    where jitgraph's are the same): its capabilities, devices and dtypes."""

    def capabilities(self) -> dict:
        """``boolean indexing`` and ``data-dependent shapes`` are False, as JAX's: both work
        eagerly, not under ``jit`` (a traced shape must not depend on values)."""
        return {"boolean indexing": False, "data-dependent shapes": False,
                "max dimensions": 64}

    def default_device(self) -> Any:
        """The device the creation functions make arrays on: the host (jitgraph's CPU
        device; ``jitgraph.device_put`` moves arrays to a GPU)."""
        return getattr(np.zeros(()).view(Array), "device", "cpu")

    def devices(self) -> list:
        """The devices ``device=`` accepts: the host's."""
        return [self.default_device()]

    def default_dtypes(self, *, device: Any = None) -> dict:
        """The dtypes made without ``dtype=``: ``jitgraph.config``'s default float and int
        (float64 and int64 unless set to 32 bits); the complex one is the float's pair."""
        _check_device(device, "__array_namespace_info__().default_dtypes")
        f, i = config.float_dtype(), np.dtype(config.int_dtype())
        c = np.dtype(np.complex64 if f == np.float32 else np.complex128)
        return {"real floating": np.dtype(f), "complex floating": c, "integral": i,
                "indexing": i}

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict:
        """The standard's dtypes this namespace has, by name, of ``kind`` (as ``isdtype``'s;
        all of them by default)."""
        _check_device(device, "__array_namespace_info__().dtypes")
        out = {n: np.dtype(n) for n in _STANDARD_DTYPES}
        return out if kind is None else {n: d for n, d in out.items() if isdtype(d, kind)}


_API_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12")


def _array_namespace(self, /, *, api_version: str | None = None) -> Any:
    """``x.__array_namespace__()``: this namespace, for arrays and traced values alike (the
    NumPy array underneath would answer ``numpy``, and code written against the standard
    would leave jitgraph); a ValueError for a revision of the standard it does not follow."""
    if api_version is not None and api_version not in _API_VERSIONS:
        raise ValueError(f"__array_namespace__: api_version={api_version!r} is not one "
                         f"jitgraph.numpy follows; use one of {', '.join(_API_VERSIONS)} or None")
    return sys.modules[__package__]


def _to_device(self, device, /, *, stream=None):
    """``x.to_device(device)`` of a traced value: the value itself on the host device (a GPU
    is ``jitgraph.device_put``'s business, outside the trace)."""
    _check_device(device, "to_device")
    return self


Array.__array_namespace__ = _array_namespace
Tracer.__array_namespace__ = _array_namespace
Tracer.to_device = _to_device


def __array_namespace_info__() -> ArrayNamespaceInfo:
    """The Array API's inspection object for this namespace (``capabilities()``,
    ``default_device()``, ``devices()``, ``default_dtypes()``, ``dtypes()``)."""
    return ArrayNamespaceInfo()


_locate_module(globals(), __name__)
