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
from . import _cache  # noqa: F401  (first: compiled code goes to jitgraph's cache)
from numba import njit, prange

from . import gemm_split


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
from llvmlite import ir  # noqa: E402
from numba import types  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.extending import intrinsic, overload  # noqa: E402

from .blas import ROUTINES, register  # noqa: E402

register()   # before any cached code that calls the routines is linked
_INT32_MAX = 2**31 - 1
_TOO_LARGE = "matmul: a dimension exceeds 2**31 - 1, which BLAS cannot index"
_CHAR = ir.IntType(8)           # a Fortran character argument (the transpose flags)


def _gemm_operands(a, b, c) -> bool:
    """Whether one ``?gemm`` call takes these operand types: 2-D, ``a``/``b`` C- or F-ordered,
    ``c`` C-contiguous, all float32 or all float64."""
    return (all(isinstance(t, types.Array) and t.ndim == 2 for t in (a, b, c))
            and c.layout == "C" and a.layout in "CF" and b.layout in "CF"
            and c.dtype in (types.float32, types.float64) and a.dtype == b.dtype == c.dtype)


def _call_gemm(context, builder, dtype, alpha, beta, a_op, b_op, m, n, k, c_data,
               ldc=None) -> None:
    """Emit c = alpha * op(a) @ op(b) + beta * c for a row-major ``c`` (m x n, rows ``ldc``
    apart, ``n`` by default) as one Fortran ``?gemm`` call on its column-major transpose,
    C^T = op(B)^T op(A)^T (``kernels/blas.py``: resolved by symbol name, 64-bit integers).
    ``a_op``/``b_op``: each operand's transpose character, leading dimension and data pointer;
    ``alpha``/``beta`` of ``dtype``."""
    ptr = context.get_value_type(dtype).as_pointer()
    p_i64 = ir.IntType(64).as_pointer()
    fnty = ir.FunctionType(ir.VoidType(), [_CHAR.as_pointer()] * 2 + [p_i64] * 3
                           + [ptr, ptr, p_i64, ptr, p_i64, ptr, ptr, p_i64])
    name = ROUTINES["sgemm" if dtype == types.float32 else "dgemm"]
    fn = cgutils.get_or_insert_function(builder.module, fnty, name)

    def ref(value):
        return cgutils.alloca_once_value(builder, value)
    (ta, lda, da), (tb, ldb, db) = a_op, b_op
    builder.call(fn, (ref(tb), ref(ta), ref(n), ref(m), ref(k), ref(alpha),
                      builder.bitcast(db, ptr), ref(ldb), builder.bitcast(da, ptr), ref(lda),
                      ref(beta), builder.bitcast(c_data, ptr), ref(n if ldc is None else ldc)))


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
        alpha_v, a_v, b_v, beta_v, c_v = args
        a_arr, b_arr, c_arr = (context.make_array(t)(context, builder, v) for t, v in
                               zip(sig.args[1:3] + (sig.args[4],), (a_v, b_v, c_v)))
        (m, k), (_, n) = (cgutils.unpack_tuple(builder, x.shape) for x in (a_arr, b_arr))

        def view(ty, arr, rows, cols):
            # an F-ordered view is the transpose of the C-ordered array it was made from
            f = ty.layout == "F"
            return ir.Constant(_CHAR, ord("T" if f else "N")), rows if f else cols, arr.data
        _call_gemm(context, builder, dtype,
                   context.cast(builder, alpha_v, sig.args[0], dtype),
                   context.cast(builder, beta_v, sig.args[3], dtype),
                   view(sig.args[1], a_arr, m, k), view(sig.args[2], b_arr, k, n), m, n, k,
                   c_arr.data)
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
        alpha_v, a_v, ta_v, b_v, tb_v, beta_v, c_v = args
        a_arr, b_arr, c_arr = (context.make_array(t)(context, builder, v) for t, v in
                               zip((sig.args[1], sig.args[3], sig.args[6]), (a_v, b_v, c_v)))

        def operand(arr, flag, flag_ty):
            # (transpose character, leading dimension, data), rows and columns of op(x)
            t = context.cast(builder, flag, flag_ty, types.boolean)
            rows, cols = cgutils.unpack_tuple(builder, arr.shape)
            trans = builder.select(t, ir.Constant(_CHAR, ord("T")), ir.Constant(_CHAR, ord("N")))
            return (trans, cols, arr.data), builder.select(t, cols, rows), \
                builder.select(t, rows, cols)
        a_op, m, k = operand(a_arr, ta_v, sig.args[2])
        b_op, _, n = operand(b_arr, tb_v, sig.args[4])
        _call_gemm(context, builder, dtype,
                   context.cast(builder, alpha_v, sig.args[0], dtype),
                   context.cast(builder, beta_v, sig.args[5], dtype),
                   a_op, b_op, m, n, k, c_arr.data)
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


# ---------------------------------------------------------------------------- one thread pool
@intrinsic
def _xxgemm_block(typingctx, alpha, a, ta, b, tb, beta, c, r0, r1, c0, c1, k0, k1):
    """Rows ``r0:r1`` and columns ``c0:c1`` of ``blas_gemm``'s product over the contraction's
    indices ``k0:k1``, one ``?gemm`` call on pointers into the operands as stored (leading
    dimensions are the stored rows), written at those rows and columns of ``c``: the band one
    thread of ``par_gemm`` computes (``k0:k1`` the whole contraction), or one part of a deep
    product (every row and column, ``c`` the part's own array), with BLAS itself on one
    thread."""
    if not (_gemm_operands(a, b, c) and a.layout == b.layout == "C"
            and all(isinstance(t, (types.Integer, types.Boolean)) for t in (ta, tb))
            and all(isinstance(t, types.Integer) for t in (r0, r1, c0, c1, k0, k1))):
        return None
    dtype = c.dtype
    sig = types.void(alpha, a, ta, b, tb, beta, c, r0, r1, c0, c1, k0, k1)

    def codegen(context, builder, sig, args):
        alpha_v, a_v, ta_v, b_v, tb_v, beta_v, c_v = args[:7]
        a_arr, b_arr, c_arr = (context.make_array(t)(context, builder, v) for t, v in
                               zip((sig.args[1], sig.args[3], sig.args[6]), (a_v, b_v, c_v)))
        row0, row1, col0, col1, kk0, kk1 = (context.cast(builder, v, t, types.int64)
                                            for v, t in zip(args[7:], sig.args[7:]))
        t_a = context.cast(builder, ta_v, sig.args[2], types.boolean)
        t_b = context.cast(builder, tb_v, sig.args[4], types.boolean)
        a_cols = cgutils.unpack_tuple(builder, a_arr.shape)[1]
        b_cols = cgutils.unpack_tuple(builder, b_arr.shape)[1]
        c_cols = cgutils.unpack_tuple(builder, c_arr.shape)[1]

        def trans(flag):
            return builder.select(flag, ir.Constant(_CHAR, ord("T")), ir.Constant(_CHAR, ord("N")))
        # op(a)'s rows row0.. and columns kk0..: stored rows and columns, or the other way
        # round where transposed; op(b)'s rows kk0.. and columns col0..: the mirror image
        a_off = builder.select(t_a, builder.add(builder.mul(kk0, a_cols), row0),
                               builder.add(builder.mul(row0, a_cols), kk0))
        b_off = builder.select(t_b, builder.add(builder.mul(col0, b_cols), kk0),
                               builder.add(builder.mul(kk0, b_cols), col0))
        a_data = builder.gep(a_arr.data, [a_off])
        b_data = builder.gep(b_arr.data, [b_off])
        c_data = builder.gep(c_arr.data, [builder.add(builder.mul(row0, c_cols), col0)])
        _call_gemm(context, builder, dtype,
                   context.cast(builder, alpha_v, sig.args[0], dtype),
                   context.cast(builder, beta_v, sig.args[5], dtype),
                   (trans(t_a), a_cols, a_data), (trans(t_b), b_cols, b_data),
                   builder.sub(row1, row0), builder.sub(col1, col0),
                   builder.sub(kk1, kk0), c_data, ldc=c_cols)
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def _threads(typingctx):
    """Numba's thread count for the calling thread, read as its parallel loops read it: a call
    of the ``get_num_threads`` symbol its threading layer registers (``numba.get_num_threads``
    compiles to an address, which keeps a function out of Numba's cache and a driver that
    calls it from Python out of a native bundle)."""
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(cgutils.intp_t, []),
                                            "get_num_threads")
        return builder.call(fn, [])
    return types.intp(), codegen


@intrinsic
def _take(typingctx, counter):
    """The next part's number from a counter the threads share (``counter[0]``, an atomic
    add): parts are taken as threads come free, not dealt out in advance."""
    sig = types.int64(counter)

    def codegen(context, builder, sig, args):
        arr = context.make_array(sig.args[0])(context, builder, args[0])
        return builder.atomic_rmw("add", arr.data, ir.Constant(ir.IntType(64), 1), "monotonic")
    return sig, codegen


# A split product has one band per thread, taken from a shared counter: a thread the
# operating system has not yet run finds its band taken by one that came free. More bands per
# thread were measured slower on the busy GPT tiny step (2 spinning processes, 2 cores,
# alternating: 4 bands per thread 57.7 / 59.4 / 40.2 ms, 1 band 37.2 / 41.6 / 36.4 ms): each
# smaller BLAS call packs its operands again. The loop kernels' launchers, whose chunks cost
# nothing to start, take 4 per thread (compiler/threaded.py).

# A deep product is split along its contraction instead (``gemm_split``: why, and when).
deep_parts = njit(cache=True, nogil=True)(gemm_split.deep_parts)


@njit(cache=True, nogil=True, error_model="numpy")
def _add_parts(part, beta, c):
    """c = the parts' sum (in part order) + beta * c, c not read where beta is 0."""
    kparts, m, n = part.shape
    for i in range(m):
        for j in range(n):
            s = part[0, i, j]
            for p in range(1, kparts):
                s += part[p, i, j]
            c[i, j] = s + beta * c[i, j] if beta != 0 else s


@njit(cache=True, parallel=True, nogil=True, error_model="numpy")
def par_gemm(alpha, a, ta, b, tb, beta, c):
    """``blas_gemm`` split over Numba's threads, in bands of rows (or of columns, where the
    product is wider than tall) each computed by a one-thread BLAS call: products, generated
    loops and hand-written kernels then share one thread pool (the program runs with BLAS on
    one thread, ``compiler/host.py``'s ``one_blas_thread``), instead of BLAS's own workers
    spinning beside Numba's after every call. Each thread takes the next band until none is
    left: the result does not depend on which thread computes a band. A deep product
    (``deep_parts``) is split along its contraction instead, into parts added in order."""
    m, n = c.shape
    k = a.shape[0] if ta else a.shape[1]
    kparts = deep_parts(m, n, k) if m > 0 and n > 0 and max(m, k, n) <= _INT32_MAX else 0
    if kparts > 0:
        part = np.empty((kparts, m, n), c.dtype)
        counter = np.zeros(1, np.int64)
        for _ in prange(max(1, min(_threads(), kparts))):
            p = _take(counter)
            while p < kparts:
                _xxgemm_block(alpha, a, ta, b, tb, 0.0, part[p], 0, m, 0, n,
                              p * k // kparts, (p + 1) * k // kparts)
                p = _take(counter)
        _add_parts(part, beta, c)
        return
    by_rows = m >= n
    size = m if by_rows else n
    parts = min(_threads(), size)
    if parts < 2 or k == 0 or max(m, k, n) > _INT32_MAX:
        blas_gemm(alpha, a, ta, b, tb, beta, c)
        return
    counter = np.zeros(1, np.int64)
    for _ in prange(parts):
        p = _take(counter)
        while p < parts:
            lo, hi = p * size // parts, (p + 1) * size // parts
            if by_rows:
                _xxgemm_block(alpha, a, ta, b, tb, beta, c, lo, hi, 0, n, 0, k)
            else:
                _xxgemm_block(alpha, a, ta, b, tb, beta, c, 0, m, lo, hi, 0, k)
            p = _take(counter)


@njit(cache=True, parallel=True, nogil=True, error_model="numpy")
def par_batched_gemm(alpha, a, ta, b, tb, beta, c):
    """A batch of ``blas_gemm`` products (3-D C-contiguous operands as stored, one product per
    leading index) spread over Numba's threads, one one-thread BLAS call each, each thread
    taking the next product until none is left: a batched attention product in one call, not
    a Python loop of small BLAS calls."""
    batch = c.shape[0]
    counter = np.zeros(1, np.int64)
    for _ in prange(min(_threads(), batch)):
        i = _take(counter)
        while i < batch:
            blas_gemm(alpha, a[i], ta, b[i], tb, beta, c[i])
            i = _take(counter)
