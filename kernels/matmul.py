"""Matrix products for generated programs.

Float products go to BLAS: one Fortran ``?gemm`` call bound by symbol name (``kernels/blas.py``;
transposed operands are passed as views, so backward-pass products copy nothing), or NumPy's
``np.dot`` where an operand is neither C- nor F-ordered. Integer products, which BLAS does not do,
use a cache-friendly i-k-j loop.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy")
def matmul_loop(a, b, out):
    """out = a @ b for any numeric dtype (2-D operands)."""
    m, k = a.shape
    n = b.shape[1]
    for i in range(m):
        for j in range(n):
            out[i, j] = 0
        for p in range(k):
            aip = a[i, p]
            for j in range(n):
                out[i, j] += aip * b[p, j]


@njit(cache=True, error_model="numpy")
def matmul_blas(a, b, out):
    """out = a @ b through BLAS; empty contractions give zeros (BLAS leaves them undefined).
    (Plain loops and no helper calls beside the product: each costs compile time on a fresh
    machine, where this compiles once per operand layout.)"""
    if a.shape[1] == 0:
        for i in range(out.shape[0]):
            for j in range(out.shape[1]):
                out[i, j] = 0
    elif out.size:
        _product_into(a, b, out)


# ---------------------------------------------------------------------------- fused GEMM
from numba import types  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.extending import intrinsic, overload  # noqa: E402

from .blas import ROUTINES, register  # noqa: E402

register()   # before any cached code that calls the routines is linked
_INT32_MAX = 2**31 - 1
_TOO_LARGE = "matmul: a dimension exceeds 2**31 - 1, which BLAS cannot index"


def _gemm_operands(a, b, c) -> bool:
    """Whether one ``?gemm`` call takes these operand types: 2-D, ``a``/``b`` C- or F-ordered,
    ``c`` C-contiguous, all float32 or all float64."""
    return (all(isinstance(t, types.Array) and t.ndim == 2 for t in (a, b, c))
            and c.layout == "C" and a.layout in "CF" and b.layout in "CF"
            and c.dtype in (types.float32, types.float64) and a.dtype == b.dtype == c.dtype)


@intrinsic
def _xxgemm(typingctx, alpha, a, b, beta, c):
    """c = alpha * a @ b + beta * c, one Fortran ``?gemm`` call (``kernels/blas.py``: resolved by
    symbol name, so cached machine code stays valid in a new process, and no ``scipy.linalg``).
    ``a``/``b`` may be C- or F-ordered 2-D views; ``c`` is C-contiguous; sizes fit 32 bits."""
    if not _gemm_operands(a, b, c):
        return None
    dtype = c.dtype
    sig = types.void(alpha, a, b, beta, c)

    def codegen(context, builder, sig, args):
        from llvmlite import ir

        alpha_v, a_v, b_v, beta_v, c_v = args
        arrs = [context.make_array(t)(context, builder, v) for t, v in zip(sig.args[1:3], (a_v, b_v))]
        out = context.make_array(sig.args[4])(context, builder, c_v)
        (m, k), (_, n) = (cgutils.unpack_tuple(builder, x.shape) for x in arrs)
        i32, char = ir.IntType(32), ir.IntType(8)
        ptr = context.get_value_type(dtype).as_pointer()

        def ref(value, ty):
            return cgutils.alloca_once_value(builder, value if value.type == ty
                                             else builder.trunc(value, ty))

        def scalar(v, ty):
            return cgutils.alloca_once_value(builder, context.cast(builder, v, ty, dtype))

        def param(ty, arr, shapes):
            # column-major view of a row-major product: C^T = B^T A^T
            trans = ir.Constant(char, ord("N" if ty.layout == "C" else "T"))
            ld = shapes[1] if ty.layout == "C" else shapes[0]
            return ref(trans, char), ref(ld, i32), builder.bitcast(arr.data, ptr)

        ta, lda, da = param(sig.args[2], arrs[1], (k, n))
        tb, ldb, db = param(sig.args[1], arrs[0], (m, k))
        p_i32 = i32.as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [char.as_pointer()] * 2 + [p_i32] * 3
                               + [ptr, ptr, p_i32, ptr, p_i32, ptr, ptr, p_i32])
        name = ROUTINES["sgemm" if dtype == types.float32 else "dgemm"]
        fn = cgutils.get_or_insert_function(builder.module, fnty, name)
        builder.call(fn, (ta, tb, ref(n, i32), ref(m, i32), ref(k, i32),
                          scalar(alpha_v, sig.args[0]), da, lda, db, ldb,
                          scalar(beta_v, sig.args[3]), builder.bitcast(out.data, ptr), ref(n, i32)))
        return context.get_dummy_value()
    return sig, codegen


def _product_into(a, b, out):
    """out = a @ b (2-D, non-empty contraction): BLAS by symbol where ``_xxgemm`` takes the
    operands, NumPy's ``np.dot`` (Numba's binding) for other layouts and dtypes."""


@overload(_product_into)
def _product_into_impl(a, b, out):
    if _gemm_operands(a, b, out):
        def impl(a, b, out):
            if max(a.shape[0], a.shape[1], b.shape[1]) > _INT32_MAX:
                raise ValueError(_TOO_LARGE)
            _xxgemm(1.0, a, b, 0.0, out)
        return impl
    return lambda a, b, out: np.dot(a, b, out)


@njit(cache=True, error_model="numpy")
def gemm(alpha, a, b, beta, c):
    """c = alpha * (a @ b) + beta * c for float 2-D arrays: a matmul with its axpy epilogue
    (an SGD update ``W - lr * dW``) in one BLAS call, writing ``c`` in place."""
    m, k = a.shape
    if c.size == 0:
        return
    if k == 0:
        for i in range(c.shape[0]):
            for j in range(c.shape[1]):
                c[i, j] = beta * c[i, j] if beta != 0 else 0
        return
    if max(m, k, c.shape[1]) > _INT32_MAX:
        raise ValueError(_TOO_LARGE)
    _xxgemm(alpha, a, b, beta, c)
