"""Scalar helpers that generated CUDA kernels call (device functions), with NumPy's semantics.

The CUDA twins of ``scalar.py``: the same rules (NaN-propagating max/min, JAX-style index
clamping), written as ``@cuda.jit(device=True)`` functions so kernels inline them. Float32
variants keep float32 arithmetic (a Python literal would promote the expression to float64).
"""
from __future__ import annotations

import math as _math
import os
import types

import numpy as np
from numba import cuda


def _ieee(fn):
    def f(*xs):
        with np.errstate(all="ignore"):
            return fn(*xs)
    return f


if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
    # The simulator evaluates ``math.log(0.0)`` with Python's math module, which raises where
    # the GPU returns -inf: generated kernels get IEEE semantics from NumPy instead.
    math = types.SimpleNamespace(erf=_math.erf, **{n: _ieee(getattr(np, n)) for n in (
        "exp", "log", "log1p", "expm1", "tanh", "sin", "cos", "tan", "sqrt", "fmod")})
else:
    math = _math            # libdevice on the GPU

_device = cuda.jit(device=True)   # NVVM inlines small device functions itself


@_device
def maximum(a, b):
    """np.maximum: NaN in either operand propagates."""
    return a if (a > b or a != a) else b


@_device
def minimum(a, b):
    """np.minimum: NaN in either operand propagates."""
    return a if (a < b or a != a) else b


@_device
def sign(x):
    """np.sign (0 stays 0, NaN stays NaN)."""
    if x > 0:
        return x * 0 + 1
    if x < 0:
        return x * 0 - 1
    return x * 0


@_device
def floor(x):
    """np.floor on floats (``math.floor`` returns an integer in Numba, which overflows)."""
    if not (abs(x) < 4503599627370496.0):     # 2**52: already integral, or inf/nan
        return x
    r = x - math.fmod(x, 1.0)
    return r - 1 if r > x else r


@_device
def erf(x):
    return math.erf(x)


@_device
def power(a, b):
    """a ** b with NumPy's float semantics (NaN for a negative base and fractional exponent)."""
    return a ** b


@_device
def logistic_f32(x):
    """1 / (1 + exp(-x)) in float32, without overflow for large |x|."""
    one = np.float32(1.0)
    if x >= 0:
        return one / (one + math.exp(-x))
    e = math.exp(x)
    return e / (one + e)


@_device
def logistic_f64(x):
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@_device
def clamp_index(i, n):
    """Index normalisation for gathers: negative wraps once, the rest is clamped (as JAX).
    The result is int64 whatever the index array's integer type (uint64 with the signed
    bound would promote to float64)."""
    i = np.int64(i)
    if i < 0:
        i += n
    if i < 0:
        return 0
    if i >= n:
        return n - 1
    return i
