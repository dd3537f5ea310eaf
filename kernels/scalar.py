"""Scalar helpers that generated CPU kernels call, with NumPy's semantics.

They are tiny and force-inlined, so LLVM sees straight-line code it can vectorize.
"""
from __future__ import annotations

import math

import numpy as np
from . import _cache  # noqa: F401  (first: compiled code goes to jitgraph's cache)
from numba import njit

_inline = njit(inline="always", error_model="numpy", cache=True)


@_inline
def maximum(a, b):
    """np.maximum: NaN in either operand propagates."""
    return a if (a > b or a != a) else b


@_inline
def minimum(a, b):
    """np.minimum: NaN in either operand propagates."""
    return a if (a < b or a != a) else b


@_inline
def sign(x):
    """np.sign (0 stays 0, NaN stays NaN)."""
    if x > 0:
        return x * 0 + 1
    if x < 0:
        return x * 0 - 1
    return x * 0


@_inline
def floor(x):
    return np.floor(x)


@_inline
def erf(x):
    return math.erf(x)


@_inline
def logistic(x):
    """1 / (1 + exp(-x)) without overflow for large |x| (libm version, used without fast math)."""
    if x >= 0:
        return 1 / (1 + math.exp(-x))
    e = math.exp(x)
    return e / (1 + e)


@_inline
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


@_inline
def power(a, b):
    """a ** b with NumPy's float semantics (NaN for a negative base and fractional exponent)."""
    return a ** b
