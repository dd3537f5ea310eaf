"""TensorFlow 1's dtype names and conversion rules, mapped onto the dtypes jitgraph computes in.

TensorFlow differs from NumPy in two defaults that tutorials rely on: the string ``"float"``
means float32 (NumPy: float64), and a Python float becomes float32, a Python int int32 (NumPy:
float64 and int64). Every integer dtype is computed as it is (``cast`` to a narrow one wraps,
as TensorFlow's); float16 is stored in 16 bits and computed in float32.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .. import dtypes as _jd

float16 = half = np.float16
float32 = np.float32
float64 = double = np.float64
int8 = np.int8
int16 = np.int16
int32 = np.int32
int64 = np.int64
uint8 = np.uint8
uint16 = np.uint16
uint32 = np.uint32
uint64 = np.uint64
bool = np.bool_            # noqa: A001  (TensorFlow's name)
string = np.bytes_

_NAMES = {"float": np.float32, "half": np.float16, "double": np.float64, "string": np.bytes_,
          "bool": np.bool_}
_UNSERVED = {"complex64": "jitgraph computes real numbers only",
             "complex128": "jitgraph computes real numbers only",
             "bfloat16": "NumPy has no bfloat16; use tf.float32",
             "qint8": "quantized dtypes are not served",
             "quint8": "quantized dtypes are not served",
             "qint32": "quantized dtypes are not served"}


def as_dtype(dtype: Any) -> np.dtype:
    """The NumPy dtype a TensorFlow dtype name means (``"float"`` is float32, as in TF)."""
    if isinstance(dtype, str):
        if dtype in _UNSERVED:
            raise TypeError(f"dtype {dtype!r} is not served by jitgraph.compat.v1: "
                            f"{_UNSERVED[dtype]}")
        dtype = _NAMES.get(dtype, dtype)
    try:
        d = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{dtype!r} is not a dtype; use tf.float32, tf.int32, ... or a name "
                        "such as 'float32'") from None
    if d.kind == "c":
        raise TypeError(f"dtype {d} is not served by jitgraph.compat.v1: jitgraph computes "
                        "real numbers only")
    return np.dtype(np.bytes_) if d.kind in "SU" else d


def compute_dtype(dtype: Any) -> np.dtype:
    """The dtype jitgraph holds a TensorFlow dtype in (``dtypes.canonical``)."""
    d = as_dtype(dtype)
    if d.kind == "S":
        raise TypeError("string tensors are served only as constants fetched by Session.run; "
                        "jitgraph computes numbers only")
    return _jd.canonical(d)


def is_string(value: Any) -> bool:
    """A str/bytes, or an array or (nested) list of them: a string constant."""
    if isinstance(value, (str, bytes)):
        return True
    if not isinstance(value, (list, tuple, np.ndarray)):
        return False
    arr = np.asarray(value)
    return arr.dtype.kind in "SU" or (arr.dtype.kind == "O" and arr.size > 0
                                      and isinstance(arr.flat[0], (str, bytes)))


def to_array(value: Any, dtype: Any = None) -> np.ndarray:
    """A constant's value as TensorFlow converts it: Python floats -> float32, ints -> int32;
    NumPy arrays keep their dtype; a float given an integer dtype is an error, not truncated."""
    if dtype is not None:
        want = as_dtype(dtype)
        arr = np.asarray(value)
        if arr.dtype.kind == "f" and want.kind in "iub" and not np.all(arr == np.round(arr)):
            raise TypeError(f"Cannot convert {value!r} to a tensor of dtype {want} (the "
                            "fraction would be lost)")
        return np.asarray(value, _jd.canonical(want))
    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value, _jd.canonical(np.asarray(value).dtype))
    arr = np.asarray(value)
    if arr.dtype == np.float64:
        return arr.astype(np.float32)
    if arr.dtype.kind in "iu":
        fits = arr.size == 0 or (arr.min() >= -2 ** 31 and arr.max() < 2 ** 31)
        return arr.astype(np.int32 if fits else np.int64)
    return np.asarray(arr, _jd.canonical(arr.dtype))


def python_scalar_like(value: Any, dtype: np.dtype | None) -> np.ndarray:
    """A Python number met by a tensor in ``x * 2.0``: it takes the tensor's dtype, as in TF."""
    if dtype is None:
        return to_array(value)
    if isinstance(value, float) and dtype.kind in "iub" and value != int(value):
        raise TypeError(f"Cannot convert {value!r} to a tensor of dtype {dtype} (the fraction "
                        "would be lost); cast the tensor with tf.cast first")
    return np.asarray(value, dtype)
