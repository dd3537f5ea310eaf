"""Matrix products for generated programs.

Float products go to BLAS through ``np.dot`` (Numba binds SciPy's BLAS; transposed operands are
passed as views, so backward-pass products copy nothing). Integer products, which BLAS does not
do, use a cache-friendly i-k-j loop.
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
        np.dot(a, b, out)


# ---------------------------------------------------------------------------- fused GEMM
from numba import types  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.extending import intrinsic  # noqa: E402


@intrinsic
def _xxgemm(typingctx, alpha, a, b, beta, c):
    """c = alpha * a @ b + beta * c through the BLAS binding Numba itself uses for np.dot
    (``numba_xxgemm``, resolved by name, so cached machine code stays valid in a new process).
    ``a``/``b`` may be C- or F-ordered 2-D views; ``c`` is C-contiguous."""
    if not all(isinstance(t, types.Array) and t.ndim == 2 for t in (a, b, c)):
        return None
    if c.layout != "C" or a.layout not in "CF" or b.layout not in "CF":
        return None
    dtype = c.dtype
    sig = types.void(alpha, a, b, beta, c)

    def codegen(context, builder, sig, args):
        from llvmlite import ir
        from numba.np.linalg import (check_blas_return, ensure_blas, get_blas_kind, intp_t,
                                     ll_char, ll_void_p)
        ensure_blas()
        alpha_v, a_v, b_v, beta_v, c_v = args
        arrs = [context.make_array(t)(context, builder, v) for t, v in zip(sig.args[1:3], (a_v, b_v))]
        out = context.make_array(sig.args[4])(context, builder, c_v)
        (m, k), (_, n) = (cgutils.unpack_tuple(builder, x.shape) for x in arrs)
        al = cgutils.alloca_once_value(builder, context.cast(builder, alpha_v, sig.args[0], dtype))
        be = cgutils.alloca_once_value(builder, context.cast(builder, beta_v, sig.args[3], dtype))
        fnty = ir.FunctionType(ir.IntType(32), [ll_char, ll_char, ll_char, intp_t, intp_t, intp_t,
                                                ll_void_p, ll_void_p, intp_t, ll_void_p, intp_t,
                                                ll_void_p, ll_void_p, intp_t])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemm")

        def param(ty, arr, shapes):
            # column-major view of a row-major product: C^T = B^T A^T
            trans = ir.Constant(ll_char, ord("n" if ty.layout == "C" else "t"))
            ld = shapes[1] if ty.layout == "C" else shapes[0]
            return trans, ld, builder.bitcast(arr.data, ll_void_p)

        ta, lda, da = param(sig.args[2], arrs[1], (k, n))
        tb, ldb, db = param(sig.args[1], arrs[0], (m, k))
        res = builder.call(fn, (ir.Constant(ll_char, ord(get_blas_kind(dtype))), ta, tb, n, m, k,
                                builder.bitcast(al, ll_void_p), da, lda, db, ldb,
                                builder.bitcast(be, ll_void_p), builder.bitcast(out.data, ll_void_p), n))
        check_blas_return(context, builder, res)
        return context.get_dummy_value()
    return sig, codegen


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
    _xxgemm(alpha, a, b, beta, c)
