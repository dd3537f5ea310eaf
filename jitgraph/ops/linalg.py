"""Matrix multiplication: ``matmul(a, b)`` on (..., m, k) @ (..., k, n) with equal batch dims.

jnp.matmul/dot/einsum reduce every case (1-d operands, broadcast batch dims, transposes) to
this one primitive. The backends call BLAS or a kernel from ``kernels/``.
"""
from __future__ import annotations

import numpy as np

from ..batching import move_batch_axis, reshape
from ..core import MATMUL, Aval, Lowering, Primitive, aval_of, register
from ..errors import ShapeError
from .binders import matmul, swapaxes


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
    return swapaxes(x, -1, -2)


def _matmul_vjp(g, out, a, b):
    return matmul(g, _mT(b)), matmul(_mT(a), g)


def _matmul_jvp(ts, out, a, b):
    ta, tb = ts
    r = None if ta is None else matmul_p(ta, b)
    if tb is not None:
        r = matmul_p(a, tb) if r is None else r + matmul_p(a, tb)
    return r


_SPIN_SHORTENED = []


def _matmul_impl(a, b):
    """``np.matmul``. The first product run this way (eagerly, or by the reference) shortens
    OpenBLAS's idle spin, as a compiled program's first product does (``kernels/blas_spin.py``):
    eager steps call a product every few milliseconds, and after each one OpenBLAS's workers
    spun for 0.1 s, holding a core beside the next ops (on a busy 2-core machine the TF-1
    convolutional-network tutorial's eager steps ran 0.58-0.89 s against 0.33-0.38 s)."""
    if not _SPIN_SHORTENED:
        _SPIN_SHORTENED.append(True)
        from ..kernels.blas_spin import shorten_idle_spin
        shorten_idle_spin()
    return np.matmul(a, b)


matmul_p = register(Primitive(
    "matmul", kind="matmul", abstract_eval=_matmul_aval, impl=_matmul_impl,
    vjp=_matmul_vjp, jvp=_matmul_jvp, codegen=Lowering(MATMUL)))


# ---------------------------------------------------------------- batching
def _matmul_batch(args, dims):
    """Batched @ unbatched folds the batch into the rows (one larger matmul), unbatched @
    batched into the columns; both batched is a batched matmul, or with a contraction of
    length 1 (per-example outer products, as in per-example weight gradients) a broadcast
    multiply, which fuses."""
    (a, b), (da, db) = args, dims
    r = aval_of(a).ndim - (da is not None)          # one example's rank (both operands)
    if db is None:
        a = move_batch_axis(a, da, r - 2)           # (..., B, m, k)
        s = aval_of(a).shape
        out = matmul_p(reshape(a, s[:-3] + (s[-3] * s[-2], s[-1])), b)
        return reshape(out, s[:-1] + (aval_of(b).shape[-1],)), r - 2
    if da is None:
        b = move_batch_axis(b, db, r)               # (..., k, n, B)
        s = aval_of(b).shape
        out = matmul_p(a, reshape(b, s[:-2] + (s[-2] * s[-1],)))
        return reshape(out, aval_of(a).shape[:-1] + s[-2:]), r
    a, b = move_batch_axis(a, da, 0), move_batch_axis(b, db, 0)
    if aval_of(a).shape[-1] == 1:
        from .elementwise import mul_p
        return mul_p(a, b), 0
    return matmul_p(a, b), 0


matmul_p.batch = _matmul_batch
