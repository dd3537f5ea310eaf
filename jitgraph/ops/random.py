"""32-bit unsigned word arithmetic for counter-based random numbers (Threefry-2x32).

jitgraph has no unsigned dtype, so a 32-bit word is an int64 holding a value in [0, 2**32).
These elementwise primitives keep that invariant (wrapping add, xor, Threefry's mix step); the
generator in ``jitgraph.random`` is written with them, so under ``jit`` it becomes scalar
statements inside the fused kernels of its consumers (dropout masks never touch memory).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..core import Aval, Lowering, Primitive, register
from ..batching import elementwise_rule
from .elementwise import broadcast_shapes

MASK32 = 0xFFFFFFFF


def _word_aval(*avals, **_):
    for a in avals:
        if a.dtype != dtypes.int64 and not (a.weak and a.dtype.kind == "i"):   # (a Python int)
            raise TypeError(f"32-bit word operations take int64 operands holding values in "
                            f"[0, 2**32), got {a.dtype} (use jnp.astype(x, jnp.int64))")
    return Aval(broadcast_shapes(*(a.shape for a in avals)), dtypes.int64,
                weak=all(a.weak for a in avals))


def _word_prim(name, impl, rule):
    """Words are int64 in and out: the expression needs no cast."""
    p = register(Primitive(name, kind="elementwise", abstract_eval=_word_aval, impl=impl,
                           codegen=Lowering.scalar(rule, keeps_int64=True),
                           differentiable=False))
    p.batch = elementwise_rule(p)
    return p


def _add32(c, x, y) -> str:
    """``(x + y) & MASK32``, in the syntax of ``c``."""
    return c.op("bit_and", c.op("plus", x, y), c.number(MASK32))


def _rotl(c, y, r: int) -> str:
    """``y`` rotated left by ``r`` bits within a 32-bit word."""
    rotated = c.op("bit_or", c.op("shift_left", y, c.number(r)),
                   c.op("shift_right", y, c.number(32 - r)))
    return c.op("bit_and", rotated, c.number(MASK32))


uint32_add_p = _word_prim("uint32_add", lambda x, y: (x + y) & MASK32, _add32)
uint32_xor_p = _word_prim(
    "uint32_xor", lambda x, y: np.bitwise_xor(x, y),
    lambda c, x, y: c.op("bit_xor", x, y))


def _mix_impl(x, y, *, r):
    s = (x + y) & MASK32
    return (((y << r) | (y >> (32 - r))) & MASK32) ^ s


# Threefry's mix step, rotl(y, r) ^ (x + y), as one statement: the generated code for the
# 20-round generator is about a third shorter, and Numba compiles it faster.
threefry_mix_p = _word_prim(
    "threefry_mix", _mix_impl,
    lambda c, x, y, *, r: c.op("bit_xor", _rotl(c, y, r), _add32(c, x, y)))
