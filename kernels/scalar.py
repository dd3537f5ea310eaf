"""Scalar helpers that generated CPU kernels call, with NumPy's semantics.

They are tiny and force-inlined, so LLVM sees straight-line code it can vectorize.
"""
from __future__ import annotations

import math

import numpy as np
from . import _cache  # noqa: F401  (first: compiled code goes to jitgraph's cache)
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_inline = njit(inline="always", error_model="numpy", cache=True)


@_inline
def maximum(a, b):
    """np.maximum: NaN in either operand propagates."""
    return a if (a > b or a != a) else b


@_inline
def minimum(a, b):
    """np.minimum: NaN in either operand propagates."""
    return a if (a < b or a != a) else b


def _extremum(name: str, larger: bool):
    """A max / min reduction's combine step for generated kernels: ``llvm.maximum`` /
    ``llvm.minimum`` on floats (NaN propagates, as NumPy's; -0.0 counts below +0.0), which
    LLVM's loop vectorizer turns into a SIMD reduction, where ``maximum``'s ``a > b or a != a``
    select stays one compare per element (measured here: 11x over the row maxima of a
    (1024, 1024) array); a compare and select on integers and bools."""
    @intrinsic
    def combine(typingctx, a, b):
        # an accumulator and its values share a dtype; unify them where they do not
        t = a if a == b else typingctx.unify_pairs(a, b)
        if not isinstance(t, (types.Float, types.Integer, types.Boolean)):
            return None

        def codegen(context, builder, sig, args):
            x, y = (context.cast(builder, v, ty, t) for v, ty in zip(args, sig.args))
            if isinstance(t, types.Float):
                lt = context.get_value_type(t)
                fn = builder.module.declare_intrinsic(
                    "llvm." + name, [lt], ir.FunctionType(lt, [lt, lt]))
                return builder.call(fn, (x, y))
            if isinstance(t, types.Boolean):
                return builder.or_(x, y) if larger else builder.and_(x, y)
            cmp = builder.icmp_signed if t.signed else builder.icmp_unsigned
            return builder.select(cmp(">" if larger else "<", x, y), x, y)
        return t(a, b), codegen
    combine.__name__ = combine.__qualname__ = name + "_step"
    return combine


maximum_step = _extremum("maximum", True)
minimum_step = _extremum("minimum", False)


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
