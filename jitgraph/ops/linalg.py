"""Matrix multiplication: ``matmul(a, b)`` on (..., m, k) @ (..., k, n) with equal batch dims.

jnp.matmul/dot/einsum reduce every case (1-d operands, broadcast batch dims, transposes) to
this one primitive. The backends call BLAS or a kernel from ``kernels/``.
"""
from __future__ import annotations

import numpy as np

from ..core import Aval, Primitive, register
from ..errors import ShapeError
from .. import numpy as jnp


def _matmul_aval(a, b):
    if a.ndim < 2 or b.ndim < 2 or a.ndim != b.ndim:
        raise ShapeError(f"matmul primitive needs operands of equal rank >= 2, got {a.shape} "
                         f"and {b.shape}")
    if a.shape[:-2] != b.shape[:-2]:
        raise ShapeError(f"batch dimensions differ: {a.shape[:-2]} vs {b.shape[:-2]}")
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"contracting dimensions differ: {a.shape} @ {b.shape} "
                         f"({a.shape[-1]} != {b.shape[-2]}); transpose an operand?")
    if a.dtype != b.dtype:
        raise TypeError(f"operands must share a dtype, got {a.dtype} and {b.dtype}")
    return Aval(a.shape[:-1] + (b.shape[-1],), a.dtype, a.weak and b.weak)


def _mT(x):
    return jnp.swapaxes(x, -1, -2)


def _matmul_vjp(g, out, a, b):
    return jnp.matmul(g, _mT(b)), jnp.matmul(_mT(a), g)


def _matmul_jvp(ts, out, a, b):
    ta, tb = ts
    r = None if ta is None else matmul_p(ta, b)
    if tb is not None:
        r = matmul_p(a, tb) if r is None else r + matmul_p(a, tb)
    return r


matmul_p = register(Primitive(
    "matmul", kind="matmul", abstract_eval=_matmul_aval, impl=np.matmul,
    vjp=_matmul_vjp, jvp=_matmul_jvp, codegen={"matmul": True}))
