"""Matrix products for generated programs.

Float32/float64 products go to BLAS: ``blas_gemm``, one Fortran ``?gemm`` call bound by symbol
name (``kernels/blas.py``) on the operands as stored, with "transposed" as a runtime flag, so
backward-pass products copy nothing and one compiled function serves every layout (on a fresh
machine each compiled variant costs about 0.3 s). ``matmul_blas`` and ``gemm`` take views of any
layout (``np.dot`` where an operand is neither C- nor F-ordered). Integer products, which BLAS
does not do, use a cache-friendly i-k-j loop.
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
    ``a``/``b`` may be C- or F-ordered 2-D views; ``c`` is C-contiguous; sizes fit 32 bits
    (the SciPy fallback narrows them)."""
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
        i64, char = ir.IntType(64), ir.IntType(8)     # ILP64 (kernels/blas.py)
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
            return ref(trans, char), ref(ld, i64), builder.bitcast(arr.data, ptr)

        ta, lda, da = param(sig.args[2], arrs[1], (k, n))
        tb, ldb, db = param(sig.args[1], arrs[0], (m, k))
        p_i64 = i64.as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [char.as_pointer()] * 2 + [p_i64] * 3
                               + [ptr, ptr, p_i64, ptr, p_i64, ptr, ptr, p_i64])
        name = ROUTINES["sgemm" if dtype == types.float32 else "dgemm"]
        fn = cgutils.get_or_insert_function(builder.module, fnty, name)
        builder.call(fn, (ta, tb, ref(n, i64), ref(m, i64), ref(k, i64),
                          scalar(alpha_v, sig.args[0]), da, lda, db, ldb,
                          scalar(beta_v, sig.args[3]), builder.bitcast(out.data, ptr), ref(n, i64)))
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def _xxgemm_stored(typingctx, alpha, a, ta, b, tb, beta, c):
    """c = alpha * op(a) @ op(b) + beta * c, op(x) = x.T where ``tx`` is true, one Fortran
    ``?gemm`` call. ``a``, ``b`` and ``c`` are C-contiguous 2-D arrays as stored; transposes are
    flags, not views, so one compiled function serves every layout of a product (each layout
    of a view was a compile of its own: 0.3 s apiece on a fresh machine)."""
    if not (_gemm_operands(a, b, c) and a.layout == b.layout == "C"
            and isinstance(ta, (types.Integer, types.Boolean))
            and isinstance(tb, (types.Integer, types.Boolean))):
        return None
    dtype = c.dtype
    sig = types.void(alpha, a, ta, b, tb, beta, c)

    def codegen(context, builder, sig, args):
        from llvmlite import ir

        alpha_v, a_v, ta_v, b_v, tb_v, beta_v, c_v = args
        i64, char = ir.IntType(64), ir.IntType(8)     # ILP64 (kernels/blas.py)
        ptr = context.get_value_type(dtype).as_pointer()
        a_arr, b_arr, c_arr = (context.make_array(t)(context, builder, v)
                               for t, v in zip(sig.args[1::2][:2] + (sig.args[6],),
                                               (a_v, b_v, c_v)))

        def flag(v, ty):
            return context.cast(builder, v, ty, types.boolean)

        def ref(value):
            return cgutils.alloca_once_value(builder, value)

        def scalar(v, ty):
            return cgutils.alloca_once_value(builder, context.cast(builder, v, ty, dtype))

        def operand(arr, t):
            # the stored row-major array is its column-major transpose: C^T = op(B)^T op(A)^T
            rows, cols = cgutils.unpack_tuple(builder, arr.shape)
            trans = builder.select(t, ir.Constant(char, ord("T")), ir.Constant(char, ord("N")))
            return (ref(trans), ref(cols), builder.bitcast(arr.data, ptr),
                    builder.select(t, cols, rows), builder.select(t, rows, cols))

        t_a, t_b = flag(ta_v, sig.args[2]), flag(tb_v, sig.args[4])
        tra, lda, da, m, k = operand(a_arr, t_a)
        trb, ldb, db, _, n = operand(b_arr, t_b)
        p_i64 = i64.as_pointer()
        fnty = ir.FunctionType(ir.VoidType(), [char.as_pointer()] * 2 + [p_i64] * 3
                               + [ptr, ptr, p_i64, ptr, p_i64, ptr, ptr, p_i64])
        name = ROUTINES["sgemm" if dtype == types.float32 else "dgemm"]
        fn = cgutils.get_or_insert_function(builder.module, fnty, name)
        builder.call(fn, (trb, tra, ref(n), ref(m), ref(k), scalar(alpha_v, sig.args[0]),
                          db, ldb, da, lda, scalar(beta_v, sig.args[5]),
                          builder.bitcast(c_arr.data, ptr), ref(n)))
        return context.get_dummy_value()
    return sig, codegen


@njit(cache=True, error_model="numpy")
def blas_gemm(alpha, a, ta, b, tb, beta, c):
    """c = alpha * op(a) @ op(b) + beta * c for float32/float64 C-contiguous 2-D arrays as
    stored, op(x) = x.T where ``tx``: the one product function generated programs call (a
    plain product has alpha 1 and beta 0; an SGD update ``W - lr * dW`` is alpha -lr, beta 1,
    ``c`` the weights, in place). Empty contractions give ``beta * c`` (BLAS leaves them
    undefined)."""
    m, n = c.shape
    k = a.shape[0] if ta else a.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0:
        for i in range(m):
            for j in range(n):
                c[i, j] = beta * c[i, j] if beta != 0 else 0
        return
    if max(m, k, n) > _INT32_MAX:
        raise ValueError(_TOO_LARGE)
    _xxgemm_stored(alpha, a, ta, b, tb, beta, c)


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
