"""Conversions between the 16-bit floats' bits and float32, for generated kernels.

Compiled kernels hold float16 and bfloat16 buffers as their bits (uint16): Numba's CPU target
has no float16 type and neither target knows bfloat16. Every operation on them computes in
float32 (``core.bind`` widens), so a kernel only ever converts on a load and rounds on a
store. The conversions are integer and float32 operations only, written once here in plain
Python: ``@njit`` for the CPU (no library call: LLVM's half conversions become calls to
compiler-rt on machines without F16C, which Numba's JIT does not link), device functions for
CUDA (``kernels/cuda_scalar.py``), and what the CUDA simulator runs. Rounding is to nearest,
ties to even, as NumPy's and ml_dtypes' casts; NaN stays NaN (quiet) with its sign; float64
values go through ``odd_f32`` (round to odd) first, so the double rounding float64 -> float32
-> 16 bits gives the correctly rounded result.

No float operation here reads or makes a float32 subnormal where it matters, so CUDA's
flush-to-zero (``fastmath=True``) changes nothing: float16 subnormals are built from an
integer times 2**-24.
"""
from __future__ import annotations

import numpy as np
from . import _cache  # noqa: F401  (first: compiled code goes to jitgraph's cache)
from numba import njit

_U16, _U32 = np.uint16, np.uint32
_TWO_M24 = np.float32(2.0 ** -24)


def from_bf16(u):
    """bfloat16 bits -> float32 (exact: bfloat16 is float32's upper half)."""
    return _U32(_U32(_U32(u) << _U32(16))).view(np.float32)


def to_bf16(x):
    """float32 -> bfloat16 bits, rounded to nearest even."""
    b = np.float32(x).view(np.uint32)
    if _U32(b & _U32(0x7FFFFFFF)) > _U32(0x7F800000):       # NaN: keep the sign, make quiet
        return _U16(_U32(_U32(b >> _U32(16)) | _U32(0x40)))
    odd = _U32(_U32(b >> _U32(16)) & _U32(1))
    return _U16(_U32(_U32(b + _U32(0x7FFF) + odd) >> _U32(16)))


def from_f16(u):
    """float16 bits -> float32 (exact)."""
    u = _U32(u)
    e = _U32(_U32(u >> _U32(10)) & _U32(0x1F))
    m = _U32(u & _U32(0x3FF))
    if e == _U32(0):                      # zero or subnormal: m * 2**-24, exactly
        mag = np.float32(m) * _TWO_M24
    elif e == _U32(0x1F):                 # inf or NaN (payload kept)
        mag = _U32(_U32(_U32(0x7F800000) | _U32(m << _U32(13)))).view(np.float32)
    else:
        mag = _U32(_U32(_U32(_U32(e + _U32(112)) << _U32(23)) | _U32(m << _U32(13)))).view(np.float32)
    return -mag if _U32(u & _U32(0x8000)) != _U32(0) else mag


def to_f16(x):
    """float32 -> float16 bits, rounded to nearest even (overflow to inf)."""
    b = np.float32(x).view(np.uint32)
    sign = _U32(_U32(b >> _U32(16)) & _U32(0x8000))
    a = _U32(b & _U32(0x7FFFFFFF))
    if a >= _U32(0x47800000):             # |x| >= 65536 (rounds to inf), inf or NaN
        h = _U32(0x7E00) if a > _U32(0x7F800000) else _U32(0x7C00)
    elif a < _U32(0x38800000):            # below 2**-14: float16 subnormal or zero
        # adding 0.5 puts the 10 mantissa bits at the bottom; float32's own rounding of the
        # sum is the round to nearest even
        s = _U32(a).view(np.float32) + np.float32(0.5)
        h = _U32(np.float32(s).view(np.uint32) - _U32(0x3F000000))
    else:
        odd = _U32(_U32(a >> _U32(13)) & _U32(1))
        h = _U32(_U32(a - _U32(0x38000000) + _U32(0xFFF) + odd) >> _U32(13))
    return _U16(_U32(h | sign))


def odd_f32(x):
    """float64 -> float32 rounded to odd (the neighbour with an odd last bit when inexact),
    so that rounding it again to 16 bits rounds as if from float64 directly."""
    y = np.float32(x)
    if np.float64(y) == x or x != x:
        return y
    b = np.float32(y).view(np.uint32)
    if _U32(b & _U32(1)) != _U32(0):
        return y
    if abs(np.float64(y)) < abs(x):
        return _U32(_U32(b + _U32(1))).view(np.float32)
    return _U32(_U32(b - _U32(1))).view(np.float32)


PYTHON = {f.__name__: f for f in (from_bf16, to_bf16, from_f16, to_f16, odd_f32)}
_inline = njit(inline="always", error_model="numpy", cache=True)
from_bf16 = _inline(from_bf16)
to_bf16 = _inline(to_bf16)
from_f16 = _inline(from_f16)
to_f16 = _inline(to_f16)
odd_f32 = _inline(odd_f32)
NAMES = tuple(PYTHON)
