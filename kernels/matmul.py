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
    """out = a @ b through BLAS; empty contractions give zeros (BLAS leaves them undefined)."""
    if a.shape[1] == 0:
        out[:, :] = 0
    elif out.size:
        _product_into(a, b, out)


# ---------------------------------------------------------------------------- fused GEMM
from numba import types  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.extending import intrinsic, overload  # noqa: E402

from .blas import ROUTINES, register  # noqa: E402

register()   # before any cached code that calls the routines is linked
_INT32_MAX = 2**31 - 1


@intrinsic
def _xxgemm(typingctx, alpha, a, b, beta, c, r0, r1):
    """Rows ``r0:r1`` of c = alpha * a @ b + beta * c, one Fortran ``?gemm`` call (``kernels/
    blas.py``: resolved by symbol name, so cached machine code stays valid in a new process, and
    no ``scipy.linalg``). ``a``/``b`` may be C- or F-ordered 2-D views; ``c`` is C-contiguous;
    sizes fit 32 bits."""
    if not all(isinstance(t, types.Array) and t.ndim == 2 for t in (a, b, c)):
        return None
    if c.layout != "C" or a.layout not in "CF" or b.layout not in "CF":
        return None
    dtype = c.dtype
    if dtype not in (types.float32, types.float64) or a.dtype != dtype or b.dtype != dtype:
        return None
    if not all(isinstance(t, types.Integer) for t in (r0, r1)):
        return None
    sig = types.void(alpha, a, b, beta, c, types.intp, types.intp)

    def codegen(context, builder, sig, args):
        from llvmlite import ir

        alpha_v, a_v, b_v, beta_v, c_v, r0_v, r1_v = args
        ta_, tb_, tc_ = sig.args[1], sig.args[2], sig.args[4]
        a_arr = context.make_array(ta_)(context, builder, a_v)
        b_arr = context.make_array(tb_)(context, builder, b_v)
        c_arr = context.make_array(tc_)(context, builder, c_v)
        m_all, k = cgutils.unpack_tuple(builder, a_arr.shape)
        n = cgutils.unpack_tuple(builder, b_arr.shape)[1]
        m = builder.sub(r1_v, r0_v)
        # the block's first row: r0 rows of k (C) or r0 elements (F) into a, r0 rows into c
        a_data = builder.gep(a_arr.data, [r0_v if ta_.layout == "F" else builder.mul(r0_v, k)])
        c_data = builder.gep(c_arr.data, [builder.mul(r0_v, n)])
        i32, char = ir.IntType(32), ir.IntType(8)
        ptr = context.get_value_type(dtype).as_pointer()

        def ref(value, ty):
            return cgutils.alloca_once_value(builder, value if value.type == ty
                                             else builder.trunc(value, ty))

        def scalar(v, ty):
            return cgutils.alloca_once_value(builder, context.cast(builder, v, ty, dtype))

        def param(ty, data, shapes):
            # column-major view of a row-major product: C^T = B^T A^T
            trans = ir.Constant(char, ord("N" if ty.layout == "C" else "T"))
            ld = shapes[1] if ty.layout == "C" else shapes[0]
            return ref(trans, char), ref(ld, i32), builder.bitcast(data, ptr)

        ta, lda, da = param(tb_, b_arr.data, (k, n))
        tb, ldb, db = param(ta_, a_data, (m_all, k))
        p_i32 = i32.as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [char.as_pointer()] * 2 + [p_i32] * 3
                               + [ptr, ptr, p_i32, ptr, p_i32, ptr, ptr, p_i32])
        name = ROUTINES["sgemm" if dtype == types.float32 else "dgemm"]
        fn = cgutils.get_or_insert_function(builder.module, fnty, name)
        builder.call(fn, (ta, tb, ref(n, i32), ref(m, i32), ref(k, i32),
                          scalar(alpha_v, sig.args[0]), da, lda, db, ldb,
                          scalar(beta_v, sig.args[3]), builder.bitcast(c_data, ptr), ref(n, i32)))
        return context.get_dummy_value()
    return sig, codegen


def _product_into(a, b, out):
    """out = a @ b (2-D, non-empty contraction): BLAS by symbol where ``_xxgemm`` takes the
    operands, NumPy's ``np.dot`` (Numba's binding) for other layouts and dtypes."""


@overload(_product_into)
def _product_into_impl(a, b, out):
    direct = (out.layout == "C" and a.layout in "CF" and b.layout in "CF"
              and out.dtype in (types.float32, types.float64)
              and a.dtype == out.dtype and b.dtype == out.dtype)
    if direct:
        def impl(a, b, out):
            if max(a.shape[0], a.shape[1], b.shape[1]) > _INT32_MAX:
                raise ValueError("matmul: a dimension exceeds 2**31 - 1, which BLAS cannot index")
            _xxgemm(1.0, a, b, 0.0, out, 0, a.shape[0])
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
        raise ValueError("matmul: a dimension exceeds 2**31 - 1, which BLAS cannot index")
    _xxgemm(alpha, a, b, beta, c, 0, m)


# ------------------------------------------------------------------ products on Numba's threads
from numba import prange  # noqa: E402

#: Rows per thread below which a product is not split (threads cost more than they bring).
MIN_ROWS_PER_THREAD = 16


@njit(cache=True, parallel=True, error_model="numpy")
def gemm_threads(alpha, a, b, beta, c, threads):
    """:func:`gemm` with the rows of ``c`` split across ``threads`` of Numba's threads, one
    single-threaded BLAS call each: for programs that own the cores (BLAS threads are set to one
    around them, so loop kernels and products run on the same threads, none spinning beside the
    other). ``threads`` comes from the caller: Numba's ``get_num_threads`` inside compiled code
    would make the function uncacheable."""
    m, k = a.shape
    blocks = min(threads, m // MIN_ROWS_PER_THREAD)
    if blocks <= 1 or k == 0 or c.size == 0:
        gemm(alpha, a, b, beta, c)
        return
    if max(m, k, c.shape[1]) > _INT32_MAX:
        raise ValueError("matmul: a dimension exceeds 2**31 - 1, which BLAS cannot index")
    for t in prange(blocks):
        _xxgemm(alpha, a, b, beta, c, m * t // blocks, m * (t + 1) // blocks)


def _rows_into(a, b, out, threads):
    """out = a @ b split by rows over Numba's threads (float C/F operands), else one call."""


@overload(_rows_into)
def _rows_into_impl(a, b, out, threads):
    direct = (out.layout == "C" and a.layout in "CF" and b.layout in "CF"
              and out.dtype in (types.float32, types.float64)
              and a.dtype == out.dtype and b.dtype == out.dtype)
    if direct:
        return lambda a, b, out, threads: gemm_threads(1.0, a, b, 0.0, out, threads)
    return lambda a, b, out, threads: matmul_blas(a, b, out)


@njit(cache=True, error_model="numpy")
def matmul_threads(a, b, out, threads):
    """out = a @ b with the rows split across ``threads`` threads (see :func:`gemm_threads`)."""
    _rows_into(a, b, out, threads)
